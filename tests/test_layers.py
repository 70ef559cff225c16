"""The three packages import one way only: jobs → crawler → pipelines (docs/architecture.md).

A lower layer importing a higher one is how the packages came to import each other in a circle;
this reads every import statement (top-level and inside functions) with ``ast``, without importing.
"""

from __future__ import annotations

import ast
import re
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
                        for path in (ROOT / "tests").rglob("test_*.py")
                        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests.")
                        and not (node.module or "").startswith("tests.support"))
    assert from_tests == []


# -- one owner per table family (docs/architecture.md, "Who owns which table") -------------------------

FAMILIES = {
    "crawl": ("meta", "crawl_runs", "pages", "page_html", "page_links", "job_pages", "chunks", "fetch_log"),
    "search": ("fts_main_chunks", "selection_docs", "bm25_postings", "bm25_terms", "bm25_stats", "fts_stopwords",
               "bm25_postings_sorted"),
    "vectors": ("embeddings", "chunk_windows", "unit_vectors_"),
    "codes": ("vector_codes_",),
    "runs": ("runs", "run_pages", "answers", "selections", "prompts", "reranks"),
}
# The module that writes SQL on each family; pipelines/schema.py declares every table (DDL, migrations).
OWNERS = {
    "pipelines/store.py": {"crawl"},
    "pipelines/search_index.py": {"search"},
    "pipelines/vectors.py": {"vectors"},
    "pipelines/vector_codes.py": {"codes"},
    "jobs/runstore.py": {"runs"},
    "pipelines/schema.py": set(FAMILIES),
}
# Families a module may read (FROM, JOIN) besides its own: an index reads what it indexes, a run
# snapshots the pages it answered from. Nobody writes another owner's table.
READS = {
    "pipelines/search_index.py": {"crawl"},
    "pipelines/vectors.py": {"crawl", "search"},
    # The codes are twins of the unit vectors; the approximate stage returns the pool's chunks like vectors.py.
    "pipelines/vector_codes.py": {"vectors", "crawl", "search"},
    # A run's scope resolved once into the docs the rankings filter by (a temporary table of its own).
    "pipelines/search_scope.py": {"search"},
    "jobs/runstore.py": {"crawl"},
}
_TABLE = r"(?P<table>[a-z0-9_]+?)(?:<dims>|\{[^}]*\})?\b"
# SQL keywords in capitals, as every query here writes them: prose such as "pages from the crawl" is no SQL.
WRITES = re.compile(rf"\b(?:INTO|UPDATE|DELETE\s+FROM|TABLE(?:\s+IF\s+(?:NOT\s+)?EXISTS)?)\s+{_TABLE}")
READ = re.compile(rf"\b(?:FROM|JOIN)\s+{_TABLE}")


def family_of(table: str) -> str | None:
    for family, tables in FAMILIES.items():
        if table.lower() in tables or any(t.endswith("_") and table.lower().startswith(t) for t in tables):
            return family
    return None


def string_constants(path: Path) -> list[tuple[str, int]]:
    """Every string literal of the module, f-strings joined from their literal parts, with its line."""
    found = []
    nodes = list(ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))))
    parts = {id(v) for node in nodes if isinstance(node, ast.JoinedStr) for v in node.values}
    for node in nodes:
        if isinstance(node, ast.JoinedStr):
            found.append(("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values), node.lineno))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts:
            found.append((node.value, node.lineno))
    return found


def trespasses(path: Path, module: str) -> list[str]:
    own = OWNERS.get(module, set())
    readable = own | READS.get(module, set())
    found = []
    for text, line in string_constants(path):
        for pattern, allowed, verb in ((WRITES, own, "writes"), (READ, readable, "reads")):
            for match in pattern.finditer(text):
                family = family_of(match["table"])
                if family is not None and family not in allowed:
                    found.append(f"{module}:{line} {verb} {match['table']} ({family} tables)")
    return found


def test_sql_names_a_table_only_in_the_module_that_owns_it() -> None:
    found = sorted({t for package in LAYERS for path in (ROOT / package).rglob("*.py")
                    for t in trespasses(path, path.relative_to(ROOT).as_posix())})
    assert found == []


def test_the_owner_check_sees_sql_in_plain_and_f_strings(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('A = "SELECT * FROM answers WHERE x"\n'
                      'B = f"DELETE FROM {t} WHERE 1"\n'
                      'C = f"INSERT INTO unit_vectors_{dims} SELECT 1"\n'
                      'D = "answers from the runs table"\n')
    assert trespasses(module, "jobs/select.py") == ["jobs/select.py:1 reads answers (runs tables)",
                                                    "jobs/select.py:3 writes unit_vectors_ (vectors tables)"]
    assert trespasses(module, "jobs/runstore.py") == ["jobs/runstore.py:3 writes unit_vectors_ (vectors tables)"]
