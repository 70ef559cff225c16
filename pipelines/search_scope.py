"""A selection scope (a job's pages) resolved once into what each ranking needs: the scope's docs.

Every question of a run has the same scope. Finding its docs per question (a hash join on the urls inside
the BM25 statement) was most of a scoped question's cost at a million chunks (BENCHMARKS.md, "inside a job's
scope"), so a ``DocScope`` holds them: as a temporary table BM25 filters its postings by (the scope's docs,
or the docs outside it when those are fewer), and as a sorted array the approximate embedding stage masks its
codes by. A scope holding every doc filters nothing: the unscoped rankings, at their speed.

A resolved scope is valid while the index's docs are unchanged: ``generation()`` counts the writes of
``selection_docs`` in this process (pipelines/search_index.py calls ``changed()`` before each), and DuckDB lets
no other process write a file this one has open.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import numpy as np

_generation = 0
_names = itertools.count(1)


def changed() -> None:
    """The index's docs are about to change: every scope resolved before is stale."""
    global _generation
    _generation += 1


def generation() -> int:
    return _generation


@dataclass(frozen=True)
class DocScope:
    """The docs of the pages ``urls`` in the index of ``generation``."""

    urls: Sequence[str]  # as resolved (the caller's list, not copied: selection passes the same one per run)
    docs: np.ndarray  # the scope's doc ids, sorted (int64)
    total: int  # docs in the index
    table: str | None  # temp table of doc ids: the scope's (``inside``) or the rest's; None: every doc is in scope
    inside: bool
    generation: int

    @property
    def whole(self) -> bool:
        return self.table is None

    @property
    def fraction(self) -> float:
        return len(self.docs) / self.total if self.total else 1.0

    def where(self, column: str) -> str:
        """SQL condition on the doc id ``column``: in the scope."""
        if self.table is None:
            return "TRUE"
        return f"{column} {'' if self.inside else 'NOT '}IN (SELECT doc FROM temp.{self.table})"

    def current(self, urls: Sequence[str]) -> bool:
        return self.generation == _generation and (self.urls is urls or list(self.urls) == list(urls))


def resolve(conn: duckdb.DuckDBPyConnection, urls: Sequence[str], previous: DocScope | None = None) -> DocScope:
    """The docs of ``urls`` (sorted, distinct) now; ``previous`` (this connection's last scope) is reused when
    still current, else its temporary table is replaced."""
    if previous is not None and previous.current(urls):
        return previous
    if previous is not None and previous.table is not None:
        conn.execute(f"DROP TABLE IF EXISTS temp.{previous.table}")
    at = _generation
    # Read by DuckDB's replacement scan: binding tens of thousands of urls as a list took seconds.
    scope_urls = {"url": np.asarray(list(urls), dtype=object)}  # noqa: F841
    docs = np.sort(np.asarray(conn.execute(
        "SELECT s.doc FROM selection_docs s SEMI JOIN scope_urls u ON s.url = u.url").fetchnumpy()["doc"], dtype=np.int64))
    total = int(conn.execute("SELECT count(*) FROM selection_docs").fetchone()[0])  # type: ignore[index]
    if len(docs) >= total:
        return DocScope(urls, docs, total, None, True, at)
    # The smaller of the two sets: a semi-join's hash table is built per question from it.
    inside = len(docs) <= total - len(docs)
    table = f"scope_docs_{next(_names)}"
    join = "SEMI" if inside else "ANTI"
    conn.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT s.doc FROM selection_docs s "
                 f"{join} JOIN scope_urls u ON s.url = u.url ORDER BY s.doc")
    return DocScope(urls, docs, total, table, inside, at)
