"""The house rule of issue 26, measured with ast: no product module over 600 lines, no function over 60.

A long module holds a second job and a long function a second step; both are where the next change goes
wrong. Each offender is named (file:function lines) so the failure says what to split.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PRODUCT = ("crawler", "pipelines", "jobs")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60


def product_files() -> list[Path]:
    return sorted(path for package in PRODUCT for path in (REPO / package).rglob("*.py"))


def function_lengths(tree: ast.AST) -> list[tuple[str, int]]:
    """Every function and method (nested ones too) with its length, from its ``def`` line to its last line."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                found.append((name, (child.end_lineno or child.lineno) - child.lineno + 1))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def offenders() -> tuple[list[str], list[str]]:
    modules, functions = [], []
    for path in product_files():
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(REPO).as_posix()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            modules.append(f"{where} {lines} lines")
        for name, length in function_lengths(ast.parse(text, filename=where)):
            if length > MAX_FUNCTION_LINES:
                functions.append(f"{where}:{name} {length} lines")
    return modules, functions


def test_the_measure_counts_what_it_should() -> None:
    source = ("class A:\n    def f(self):\n        def g():\n            pass\n        return 1\n\n"
              "async def h():\n    pass\n")
    assert function_lengths(ast.parse(source)) == [("A.f", 4), ("A.f.g", 2), ("h", 2)]
    assert product_files() and all(p.suffix == ".py" for p in product_files())


def test_no_product_module_over_600_lines() -> None:
    modules, _ = offenders()
    assert not modules, f"modules over {MAX_MODULE_LINES} lines (split by responsibility): " + "; ".join(modules)


def test_no_product_function_over_60_lines() -> None:
    _, functions = offenders()
    assert not functions, f"functions over {MAX_FUNCTION_LINES} lines (split into steps): " + "; ".join(functions)
