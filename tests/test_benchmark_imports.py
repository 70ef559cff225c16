"""The benchmarks import the product lazily, inside functions, so a moved name breaks them only when a
benchmark runs, long after the change that moved it. Every `from jobs|crawler|pipelines… import name`
in benchmarks/ must resolve."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
PRODUCT = ("jobs", "crawler", "pipelines")


def product_imports() -> list[tuple[str, int, str, str]]:
    found = []
    for path in sorted(BENCHMARKS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PRODUCT:
                found += [(path.name, node.lineno, node.module, alias.name) for alias in node.names]
    return found


def test_benchmarks_import_something_of_the_product() -> None:
    assert len(product_imports()) > 20  # the scan reads the files it should


@pytest.mark.parametrize("where, line, module, name", product_imports())
def test_benchmark_import_resolves(where: str, line: int, module: str, name: str) -> None:
    imported = importlib.import_module(module)
    if not hasattr(imported, name):
        importlib.import_module(f"{module}.{name}")  # a submodule, e.g. `from pipelines import clean`
