"""A selection scope (a job's pages) resolved once into what each ranking needs: the scope's docs.

Every question of a run has the same scope. Finding its docs per question (a hash join on the urls inside
the BM25 statement) was most of a scoped question's cost at a million chunks (BENCHMARKS.md, "inside a job's
scope"), so a ``DocScope`` holds them: as a temporary table BM25 filters its postings by (the scope's docs,
or the docs outside it when those are fewer), and as a sorted array the approximate embedding stage masks its
codes by. A scope holding every doc filters nothing: the unscoped rankings, at their speed.

A resolved scope is valid while the index's docs are unchanged: ``generation()`` counts the writes of
``selection_docs`` in this process. pipelines/search_index.py calls ``changed(conn)`` before and after each
write, and pipelines/duckdb_connect.py ``transaction`` calls ``settled(conn)`` after the COMMIT (or ROLLBACK)
of a transaction that wrote them, so a scope resolved while a write was not yet committed (it saw the old
docs) is stale from the commit on. DuckDB lets no other process write a file this one has open.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import numpy as np

_generation = 0
_writing: set[int] = set()  # ids of connections that wrote the index since their last COMMIT or ROLLBACK
_names = itertools.count(1)
# Scopes kept resolved per connection: a job's questions may name their own urls between those of the job's scope.
KEPT_SCOPES = 8


def changed(conn: object) -> None:
    """The index's docs change on ``conn``: every scope resolved before is stale, and again at its commit."""
    global _generation
    _generation += 1
    _writing.add(id(conn))


def settled(conn: object) -> None:
    """``conn`` committed or rolled back: scopes resolved while its write was open are stale."""
    global _generation
    if id(conn) in _writing:
        _writing.discard(id(conn))
        _generation += 1


def generation() -> int:
    return _generation


@dataclass(frozen=True)
class DocScope:
    """The docs of the pages ``urls`` in the index of ``generation``."""

    urls: tuple[str, ...]  # as resolved
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
        return self.generation == _generation and (self.urls is urls or self.urls == tuple(urls))


def _drop(conn: duckdb.DuckDBPyConnection, scope: DocScope | None) -> None:
    if scope is not None and scope.table is not None:
        conn.execute(f"DROP TABLE IF EXISTS temp.{scope.table}")


def resolve(conn: duckdb.DuckDBPyConnection, urls: Sequence[str], previous: DocScope | None = None) -> DocScope:
    """The docs of ``urls`` (sorted, distinct) now; ``previous`` (the same urls resolved before) is reused when
    still current, else its temporary table is replaced."""
    if previous is not None and previous.current(urls):
        return previous
    _drop(conn, previous)
    at = _generation
    urls = tuple(urls)
    # Read by DuckDB's replacement scan: a bound list of urls is copied and scanned per row.
    scope_urls = {"url": np.asarray(urls, dtype=object)}  # noqa: F841
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


class Scopes:
    """One connection's scopes, the KEPT_SCOPES last asked: each resolved once while the index stays as it is."""

    def __init__(self, conn: duckdb.DuckDBPyConnection) -> None:
        self.conn = conn
        self._sorted: OrderedDict[tuple[str, ...], list[str]] = OrderedDict()
        self._kept: OrderedDict[tuple[str, ...], DocScope] = OrderedDict()

    def sorted(self, urls: Sequence[str]) -> list[str]:
        """The distinct urls sorted: the same list for the same urls (a large scope sorted per question cost more
        than a bm25 question)."""
        key = tuple(urls)
        got = self._sorted.pop(key, None)
        self._sorted[key] = got = sorted(set(key)) if got is None else got
        if len(self._sorted) > KEPT_SCOPES:
            self._sorted.popitem(last=False)
        return got

    def docs(self, scope: list[str]) -> DocScope:
        """The docs of ``scope`` (sorted, distinct urls); the least recently asked scope past KEPT_SCOPES is
        dropped, with its temporary table."""
        key = tuple(scope)
        got = self._kept[key] = resolve(self.conn, key, self._kept.pop(key, None))
        while len(self._kept) > KEPT_SCOPES:
            _drop(self.conn, self._kept.popitem(last=False)[1])
        return got
