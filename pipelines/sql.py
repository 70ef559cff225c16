"""Helpers every owner of a table uses to run SQL on DuckDB; this module names no table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb


def insert_rows(conn: duckdb.DuckDBPyConnection, insert: str, rows: Sequence[Sequence[Any]], batch: int = 200) -> None:
    """Insert rows with one multi-row VALUES statement per batch.

    DuckDB's executemany runs one statement per row, which made storing a page cost more
    main-process CPU than cleaning it; one statement per page is several times cheaper (BENCHMARKS.md,
    "Crawl throughput"). Values stay bound as parameters; only the placeholders are generated.
    """
    for start in range(0, len(rows), batch):
        part = rows[start : start + batch]
        width = len(part[0])
        placeholders = ", ".join(["(" + ", ".join(["?"] * width) + ")"] * len(part))
        conn.execute(f"{insert} {placeholders}", [value for row in part for value in row])



def table_exists(conn: duckdb.DuckDBPyConnection, table: str) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = ?", [table]
    ).fetchone()
    return bool(row and row[0])

