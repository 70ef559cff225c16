"""A run's verdict (status, exit code, reason), decided in one place from what happened in every phase.

A crawl that fetched nothing, pages answered from stale copies, a degraded answerer, failed questions, a
signal: nothing that went wrong ends as "done", exit 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from crawler.run import SHOWN_FAILURES, failures_phrase
from jobs.crawl_phase import CrawlReport
from jobs.errors import ExitCode, WebqaError


@dataclass
class Verdict:
    status: str  # done | partial | failed | interrupted
    exit_code: ExitCode
    reason: str | None = None


def verdict(*, counts: dict[str, int], crawl: CrawlReport, degraded: list[str], allow_degraded: bool,
            interrupted: bool = False, fatal: WebqaError | None = None, changed: Sequence[str] | bool = False,
            fail_on_change: bool = False, dry_run: bool = False, failed_questions: Sequence[str] = ()) -> Verdict:
    """The run's status and exit code from everything that happened; the first that applies wins.

    failed (the error's code, usually 3) → interrupted (130) → partial (1: failed questions or URLs,
    stale pages, degraded answering) → changed (5, with --fail-on-change) → done (0).
    """
    reasons: list[str] = []
    if fatal is not None:
        return Verdict("failed", fatal.exit_code, str(fatal))
    if interrupted:
        return Verdict("interrupted", ExitCode.INTERRUPTED, "interrupted by a signal; --resume continues it")
    if counts.get("questions", 0) and counts.get("failed", 0) == counts.get("questions", 0):
        return Verdict("failed", ExitCode.FAILED, f"all {counts['failed']} questions failed")
    if counts.get("failed"):
        named = f" ({_named(failed_questions)})" if failed_questions else ""
        reasons.append(f"{counts['failed']} of {counts['questions']} questions failed{named}")
    if crawl.failures:
        reasons.append(failures_phrase(crawl.failures, SHOWN_FAILURES))
    if crawl.stale:
        reasons.append(f"{len(crawl.stale)} pages answered from stale copies")
    if crawl.stopped_after:
        reasons.append(f"the crawl stopped after {crawl.stopped_after:g} s (crawl.max_duration)")
    if crawl.summary is not None and getattr(crawl.summary, "internal_errors", 0):
        reasons.append(f"the crawl met {crawl.summary.internal_errors} internal errors (logged; please report them)")
    if degraded and not allow_degraded and not dry_run:
        reasons.append("degraded: " + "; ".join(degraded))
    if reasons:
        return Verdict("partial", ExitCode.PARTIAL, "; ".join(reasons))
    if changed and fail_on_change:
        named = f": {_named(changed)}" if not isinstance(changed, bool) else ""
        return Verdict("done", ExitCode.CHANGED, f"answers changed (--fail-on-change){named}")
    return Verdict("done", ExitCode.OK)


def _named(items: Sequence[str], limit: int = SHOWN_FAILURES) -> str:
    """The first few of ``items``, comma-separated, with "and N more"."""
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more
