"""Opening a DuckDB file, with its lock and corruption errors as one line each.

DuckDB allows one writing process per file, so opening a file another process holds fails fast with a
``DatabaseLockedError`` naming the holder instead of a traceback.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from pipelines import schema
from pipelines.errors import DatabaseLockedError, StoreError, require_database

log = logging.getLogger(__name__)

_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (?P<prog>.+?) \(PID (?P<pid>\d+)\)")


def tell_duckdb_pandas_is_absent() -> None:
    """Record pandas as absent in ``sys.modules`` when it cannot be imported, so DuckDB's look-ups fail at once.

    DuckDB's Python client looks for pandas on most ``execute`` calls; without pandas Python searches
    sys.path again each time, because a failed import is not remembered (the cost is measured in
    BENCHMARKS.md, benchmark 5). Called by :func:`connect`, so importing this module changes nothing.
    """
    if "pandas" not in sys.modules and importlib.util.find_spec("pandas") is None:
        sys.modules["pandas"] = None  # type: ignore[assignment]


def connect(path: str | Path, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open the DuckDB file, translating lock and corruption errors into one-line errors."""
    tell_duckdb_pandas_is_absent()
    path = Path(path)
    if read_only:
        require_database(path)
    if path.parent and not path.parent.exists():
        raise StoreError(f"{path}: folder {path.parent} does not exist")
    try:
        conn = duckdb.connect(str(path), read_only=read_only)
    except duckdb.IOException as exc:
        match = _LOCK_HOLDER.search(str(exc))
        if match:
            raise DatabaseLockedError(
                f"{path} is in use by another process ({match['prog']}, PID {match['pid']}); "
                "wait for it to finish or use another --db"
            ) from None
        raise StoreError(f"{path}: cannot open the database: {exc}") from None
    except duckdb.Error as exc:
        raise StoreError(f"{path}: not a usable DuckDB database: {exc}") from None
    conn.execute(schema.DISABLED_COMPRESSION)
    conn.execute(schema.NO_PROGRESS_BAR)
    return conn


def set_threads(conn: duckdb.DuckDBPyConnection, threads: int | None) -> None:
    """Run the database's statements on at most ``threads`` threads (None: DuckDB's default, one per core).

    The crawl writes on one thread while its extraction workers keep every core busy: DuckDB's extra
    threads then only compete with them, and cost more CPU per write than they save (BENCHMARKS.md).
    The setting is the whole database instance's, so the crawl gives it back when it ends.
    """
    conn.execute("RESET threads" if threads is None else f"SET threads = {int(threads)}")


@contextmanager
def transaction(conn: duckdb.DuckDBPyConnection) -> Iterator[None]:
    conn.execute("BEGIN TRANSACTION")
    try:
        yield
    except BaseException:
        _rollback(conn)
        raise
    else:
        try:
            conn.execute("COMMIT")
        except duckdb.Error:
            _rollback(conn)  # a commit the disk refused must not leave the connection mid-transaction
            raise


@contextmanager
def memory_limit(conn: duckdb.DuckDBPyConnection, limit: str) -> Iterator[None]:
    """DuckDB's memory_limit set to ``limit`` (e.g. '2GB') for the block, then put back as it was.

    DuckDB keeps the blocks it reads and writes cached up to its limit, 80% of the machine's memory by default:
    a build over a large database otherwise grows to most of the machine, whatever its slices or transactions.
    """
    setting = "SELECT current_setting('memory_limit')"
    previous = conn.execute(setting).fetchone()[0]  # type: ignore[index]
    conn.execute(f"SET memory_limit = '{limit}'")
    try:
        yield
    finally:
        # DuckDB shows the limit rounded ('2.7 GiB'): the default is put back exactly, another one to 0.1 GiB.
        conn.execute("RESET memory_limit")
        if conn.execute(setting).fetchone()[0] != previous:  # type: ignore[index]
            conn.execute(f"SET memory_limit = '{previous}'")


def _rollback(conn: duckdb.DuckDBPyConnection) -> None:
    try:
        conn.execute("ROLLBACK")
    except duckdb.Error as exc:
        # After a failed write (a full disk) DuckDB may refuse the rollback too; the error that
        # caused it says more than this one, so that one is raised.
        log.debug("Rollback failed: %s", exc)
