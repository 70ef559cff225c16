"""pipelines/duckdb_connect.py memory_limit(): a build's limit never raises a lower one, and the limit before it
is put back: DuckDB's default as such, another one as the fewest bytes DuckDB shows the same (never a tenth lower)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from pipelines.duckdb_connect import limit_bytes, memory_limit

SHOWN = "SELECT current_setting('memory_limit')"


class Recording:
    """The connection, with the SET and RESET statements it was given."""

    def __init__(self, conn: duckdb.DuckDBPyConnection) -> None:
        self.conn, self.sets = conn, []  # type: list[str]

    def execute(self, sql: str, params: Any = None) -> Any:
        if sql.startswith(("SET", "RESET")):
            self.sets.append(sql)
        return self.conn.execute(sql, params)


def _shown(conn: Any) -> str:
    return conn.execute(SHOWN).fetchone()[0]


def test_a_lower_limit_is_kept_during_the_build_and_not_touched(tmp_path: Path) -> None:
    with duckdb.connect(str(tmp_path / "a.duckdb")) as conn:
        for lower in ("1GB", "500MB"):
            conn.execute(f"SET memory_limit = '{lower}'")
            before = _shown(conn)
            recording = Recording(conn)
            with memory_limit(recording, "2GB"):  # type: ignore[arg-type]
                assert _shown(conn) == before
            assert _shown(conn) == before and recording.sets == []


def test_a_higher_limit_is_lowered_then_put_back_as_shown(tmp_path: Path) -> None:
    with duckdb.connect(str(tmp_path / "b.duckdb")) as conn:
        conn.execute("SET memory_limit = '3000MB'")  # shown '2.7 GiB'; was put back as '2.7 GiB', shown '2.6 GiB'
        before = _shown(conn)
        recording = Recording(conn)
        with memory_limit(recording, "2GB"):  # type: ignore[arg-type]
            assert _shown(conn) == "1.8 GiB"
        assert _shown(conn) == before and recording.sets[-1] == f"SET memory_limit = '{limit_bytes(before)[0]}B'"
        with pytest.raises(ZeroDivisionError), memory_limit(conn, "2GB"):  # put back on failure too
            1 / 0
        assert _shown(conn) == before
        for _ in range(3):  # never a tenth lower, however often
            with memory_limit(conn, "2GB"):
                pass
        assert _shown(conn) == before
        conn.execute("RESET memory_limit")
        default = _shown(conn)
        recording = Recording(conn)
        with memory_limit(recording, "2GB"):  # type: ignore[arg-type]
            pass
        assert _shown(conn) == default and recording.sets[-1] == "RESET memory_limit"


def test_a_limit_set_on_one_database_is_not_put_back_on_another(tmp_path: Path) -> None:
    # A process-wide record of the limits webqa set, keyed by how DuckDB shows them, put a's 3000MB back on b.
    with duckdb.connect(str(tmp_path / "a.duckdb")) as a, duckdb.connect(str(tmp_path / "b.duckdb")) as b:
        a.execute("SET memory_limit = '3000MB'")
        b.execute("SET memory_limit = '2900MB'")
        assert _shown(a) == _shown(b)
        with memory_limit(a, "2GB"):
            pass
        recording = Recording(b)
        with memory_limit(recording, "2GB"):  # type: ignore[arg-type]
            pass
        assert recording.sets[-1] == f"SET memory_limit = '{limit_bytes(_shown(b))[0]}B'"
        assert limit_bytes(_shown(b))[0] <= 2900 * 10**6


@pytest.mark.parametrize("given", ["2GiB", "2765MiB", "2866MiB", "976487KiB", "3000MB", "1999999999B", "18GB"])
def test_a_shown_limit_bounds_the_bytes_it_stands_for(given: str) -> None:
    with duckdb.connect() as conn:
        conn.execute(f"SET memory_limit = '{given}'")
        exact, shown = limit_bytes(given)[0], _shown(conn)
        low, high = limit_bytes(shown)
        assert low <= exact < high
        conn.execute(f"SET memory_limit = '{low}B'")
        assert _shown(conn) == shown
        conn.execute(f"SET memory_limit = '{low - 1}B'")
        assert _shown(conn) != shown
        conn.execute(f"SET memory_limit = '{high}B'")
        assert _shown(conn) != shown
