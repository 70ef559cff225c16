"""Which first stage ranked a selection's embedding leg, and why: the binary codes (lossy, pipelines/vector_codes.py)
or the exact scan.

`selection.approximate` auto switches to the codes once a database passes a window count, and a read-only database
falls back to the exact scan, so the same job can rank differently between two runs: each answer records which
stage ran. The record rides in the reason text of the selection's top row (the table already holds the selection's
other facts there), so older databases need no migration; `webqa explain` reads it back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

CODES = "codes (approximate)"
EXACT = "exact scan"
# The marker in a selection row's reason; what follows it, to the end, is the stage.
MARK = "; embedding first stage: "


def decided(approximate: bool | None, windows: int | None, threshold: int, *, codes: bool,
            read_only: bool = False) -> str:
    """The stage and why, e.g. "codes (approximate), auto: 250000 embedded windows >= 200000"; ``approximate`` as
    the Selector takes it (None: auto, or true; True: always; False: false)."""
    stage = CODES if codes else EXACT
    if read_only:
        asked = "selection.approximate always" if approximate else f"auto: {windows} embedded windows >= {threshold}"
        return f"{stage}, read-only fallback: the binary codes could not be written ({asked})"
    if approximate is not None:
        return f"{stage}, forced (selection.approximate {'always' if approximate else 'false'})"
    return f"{stage}, auto: {windows} embedded windows {'>=' if codes else '<'} {threshold}"


def recorded(rows: list[dict[str, Any]], stage: str | None) -> list[dict[str, Any]]:
    """The selection rows with ``stage`` added to the reason of the top-ranked one."""
    if stage and rows:
        top = min(rows, key=lambda r: r["rank"])
        top["reason"] = f"{top['reason'] or ''}{MARK}{stage}"
    return rows


def stored(selections: Sequence[dict[str, Any]]) -> str | None:
    """The stage recorded in an answer's stored selection rows, or None (not an embedding leg, or stored before)."""
    for row in selections:
        if row["reason"] and MARK in row["reason"]:
            return str(row["reason"]).split(MARK, 1)[1]
    return None


def without(reason: str | None) -> str | None:
    """A row's reason without the stage (explain prints the stage once, not on a row)."""
    return reason.split(MARK, 1)[0] if reason else reason


def explain_line(method: str | None, selections: Sequence[dict[str, Any]]) -> list[str]:
    """`webqa explain`'s line about the stage, for embedding and hybrid answers."""
    if method not in ("embedding", "hybrid"):
        return []
    stage = stored(selections)
    return [f"Embedding first stage: {stage or 'not recorded (stored before answers recorded it, or nothing ranked)'}"]
