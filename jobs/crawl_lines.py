"""A crawl's console lines beyond its summary line, written once for `webqa crawl` and `webqa run`.

Each function returns the lines; the caller decides where they go (``Not fetched`` and the notices are
for cron, so the callers show them under --quiet too).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def skipped_lines(summary: Any) -> list[str]:
    """``Skipped …`` for each listed URL the crawl could not use (a bad line of a URL file, say)."""
    return [f"Skipped {problem}" for problem in getattr(summary, "problems", [])]


def not_fetched_lines(summary: Any, failures: Sequence[dict[str, Any]] | None = None) -> list[str]:
    """``Not fetched (N):``, the first few failed URLs with why, and what to change when the SSRF guard
    refused them all; none when nothing failed. ``failures`` defaults to the summary's (which may be None)."""
    if failures is None:
        failures = getattr(summary, "failures", [])
    if not failures:
        return []
    lines = [f"Not fetched ({len(failures)}):"]
    lines += summary.failure_lines() if summary is not None else [
        f"  {f['url']}: {f['outcome']}: {f['reason']}" for f in failures]
    hint = summary.blocked_hint() if summary is not None else None
    if hint:
        lines.append(f"Notice: {hint}")
    return lines


def workers_lost_line(summary: Any) -> str | None:
    """A crawl through Redis whose workers went away: their leases were fetched again, but cron hears of it."""
    workers_lost = getattr(summary, "workers_lost", None)
    return f"Notice: workers lost: {workers_lost}" if workers_lost else None
