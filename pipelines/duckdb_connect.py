"""Opening a DuckDB file, with its lock and corruption errors as one line each.

DuckDB allows one writing process per file, so opening a file another process holds fails fast with a
``DatabaseLockedError`` naming the holder instead of a traceback.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path

import duckdb

from pipelines import schema, search_scope
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
    conn.execute(schema.NO_EXTENSION_DOWNLOADS)
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
    finally:
        # A scope resolved while this transaction's index writes were uncommitted saw the old docs.
        search_scope.settled(conn)


# DuckDB shows its memory limit cut to one decimal of a binary unit ('3000MB' as '2.7 GiB') and offers no exact
# reading: a limit is known by the bytes it may stand for.
_UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50,
          "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_BINARY = ("KiB", "MiB", "GiB", "TiB", "PiB")
_SHOWN = "SELECT current_setting('memory_limit')"


def limit_bytes(limit: str) -> tuple[int, int]:
    """The bytes a limit as DuckDB takes or shows it ('2GB', '2.7 GiB') may stand for: [low, high). DuckDB shows
    a limit in whole units of a 1024th of its unit, cut to a tenth ('2.7 GiB': 2,765 to 2,867 MiB); a limit
    given in decimal units or bytes is exact."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*", limit)
    if match is None or match[2] not in _UNITS:
        raise ValueError(f"not a DuckDB memory limit: {limit!r}")
    number, unit = Fraction(match[1]), _UNITS[match[2]]
    if "." not in match[1] or unit < 1024 or match[2] not in _BINARY:
        return math.ceil(number * unit), math.ceil(number * unit) + 1
    part = unit // 1024
    return math.ceil(number * 1024) * part, math.ceil((number + Fraction(1, 10)) * 1024) * part


@contextmanager
def memory_limit(conn: duckdb.DuckDBPyConnection, limit: str) -> Iterator[None]:
    """DuckDB's memory_limit at most ``limit`` (e.g. '2GB') for the block, then put back as it was: a lower one
    already set stays (and is not touched).

    DuckDB keeps the blocks it reads and writes cached up to its limit, 80% of the machine's memory by default:
    a build over a large database otherwise grows to most of the machine, whatever its slices or transactions.
    """
    shown = conn.execute(_SHOWN).fetchone()[0]  # type: ignore[index]
    if limit_bytes(shown)[0] <= limit_bytes(limit)[0]:  # not provably above the build's limit: left as it is
        yield
        return
    conn.execute(f"SET memory_limit = '{limit}'")
    try:
        yield
    finally:
        _restore_limit(conn, shown)


def _restore_limit(conn: duckdb.DuckDBPyConnection, shown: str) -> None:
    """Put back the limit DuckDB showed as ``shown``: DuckDB's default when it shows the same, else the fewest
    bytes shown the same (no exact reading exists)."""
    conn.execute("RESET memory_limit")
    if conn.execute(_SHOWN).fetchone()[0] != shown:  # type: ignore[index]
        conn.execute(f"SET memory_limit = '{limit_bytes(shown)[0]}B'")


def _rollback(conn: duckdb.DuckDBPyConnection) -> None:
    try:
        conn.execute("ROLLBACK")
    except duckdb.Error as exc:
        # After a failed write (a full disk) DuckDB may refuse the rollback too; the error that
        # caused it says more than this one, so that one is raised.
        log.debug("Rollback failed: %s", exc)
