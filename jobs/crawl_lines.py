"""A crawl's console lines beyond its summary line, written once for `webqa crawl` and `webqa run`
(and `webqa ask --job`'s dropped pages).

Each function returns the lines; the caller decides where they go (``Not fetched`` and the notices are
for cron, so the callers show them under --quiet too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def dropped_notice(removed: Mapping[str, str]) -> str | None:
    """The notice naming a job's stored pages no longer answered from (URL → why: gone from the site or
    refused now), the first few by name; None when there are none. `webqa run` and `webqa ask --job` say it alike."""
    from crawler.summary import SHOWN_FAILURES  # here: `webqa crawl --help` imports this module, not the store

    if not removed:
        return None
    named = ", ".join(f"{url} ({why})" for url, why in list(removed.items())[:SHOWN_FAILURES])
    more = f" and {len(removed) - SHOWN_FAILURES} more" if len(removed) > SHOWN_FAILURES else ""
    return f"{len(removed)} pages of the job are gone from the site or refused now, no longer answered from: {named}{more}"
