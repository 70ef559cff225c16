"""The three packages import one way only: jobs → crawler → pipelines (docs/architecture.md).

A lower layer importing a higher one is how the packages came to import each other in a circle;
this reads every import statement (top-level and inside functions) with ``ast``, without importing.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("pipelines", "crawler", "jobs")  # bottom first: each may import only itself and those before it


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(top-level package, line) of every absolute import in the file."""
    found: set[tuple[str, int]] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {(alias.name.split(".")[0], node.lineno) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.module.split(".")[0], node.lineno))
    return found


def upward_imports(package: str) -> list[str]:
    higher = LAYERS[LAYERS.index(package) + 1:]
    return sorted(f"{path.relative_to(ROOT)}:{line} imports {name}"
                  for path in (ROOT / package).rglob("*.py")
                  for name, line in imported_packages(path) if name in higher)


@pytest.mark.parametrize("package", LAYERS[:-1])
def test_a_lower_layer_never_imports_a_higher_one(package: str) -> None:
    assert upward_imports(package) == []


def test_the_check_sees_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from jobs.errors import ConfigError\n    import crawler.run\n")
    assert imported_packages(module) == {("jobs", 2), ("crawler", 3)}


def test_test_files_share_helpers_through_tests_support_only() -> None:
    # A helper imported from another test file drags that file's tests and fixtures along with it.
    from_tests = sorted(f"{path.name} imports {node.module}"
                        for path in (ROOT / "tests").glob("test_*.py")
                        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests.test_"))
    assert from_tests == []
