"""What a crawl did (``CrawlSummary``): its counts, its failed URLs, and the console's summary line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from crawler.urllist import UrlProblem
from pipelines.items import is_failure
from pipelines.store import failures_query

MB = 1024 * 1024
# How many failed URLs a console names before "and N more" (fetch_log has them all).
SHOWN_FAILURES = 5


@dataclass
class CrawlSummary:
    crawl_run_id: int | None
    counts: dict[str, int]
    problems: list[UrlProblem]
    fresh: int
    seconds: float
    interrupted: str | None = None  # the signal that stopped the crawl, e.g. "SIGTERM"
    # crawl.max_duration when the crawl was stopped by it, else None.
    stopped_after: float | None = None
    # The URLs that produced no page (fetch_log rows of this crawl: url, outcome, status, reason, and when a
    # stored copy was fetched), failed ones first.
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    # A crawl through Redis: workers that stopped mid-crawl (their leased requests were requeued), or None.
    workers_lost: str | None = None

    @property
    def failures(self) -> list[dict[str, Any]]:
        """URLs that could not be fetched, the SSRF guard's refusals included (a policy, but never what a job
        listing them wants); see ``pipelines.items.is_failure``."""
        return [o for o in self.outcomes if is_failure(o["outcome"], str(o["reason"]))]

    def failure_lines(self, limit: int = SHOWN_FAILURES) -> list[str]:
        """The first few failed URLs with their reasons, and where to find the rest."""
        failures = self.failures
        lines = [f"  {f['url']}: {f['outcome']}: {f['reason']}" for f in failures[:limit]]
        if len(failures) > limit:
            lines.append(f"  … and {len(failures) - limit} more "
                         f"({failures_query(self.crawl_run_id)})")
        return lines

    def failures_phrase(self, limit: int = SHOWN_FAILURES) -> str:
        """The failed URLs and why, in one phrase for a one-line summary ("" when none failed)."""
        return failures_phrase(self.failures, limit)

    def blocked_hint(self) -> str | None:
        """When the SSRF guard refused every failed URL: the switch that allows it."""
        failures = self.failures
        if failures and all(str(f["reason"]).startswith("blocked") for f in failures):
            return ("every failed URL is on a private or loopback address, which webqa refuses by default; to "
                    "crawl an intranet, set crawl.allow_private_networks: true in the job (or pass "
                    "--allow-private-networks)")
        return None

    def count(self, key: str) -> int:
        return int(self.counts.get(key, 0) or 0)

    @property
    def gone(self) -> int:
        """Pages the job's previous finished crawl reached and this one did not (they stay stored)."""
        return self.count("gone")

    @property
    def internal_errors(self) -> int:
        """Bugs met after a URL had its record (e.g. while following its links), logged with their
        tracebacks: the crawl may have missed pages, so its verdict is partial."""
        return self.count("internal_errors")

    @property
    def processed(self) -> int:
        """URLs that reached the server and left the store current (new, changed, unchanged, 304)."""
        return self.count("fetched") + self.count("not_modified")

    def line(self) -> str:
        how = f"Crawl interrupted by {self.interrupted} after {self.seconds:.1f}s" if self.interrupted else (
            f"Crawled in {self.seconds:.1f}s")
        return (
            f"{how}: fetched {self.count('fetched')} "
            f"(new {self.count('new')}, changed {self.count('changed')}, unchanged {self.count('unchanged')}), "
            f"not modified {self.count('not_modified')}, fresh {self.fresh}, "
            f"skipped {self.count('skipped')}, failed {self.count('failed')}; "
            f"HTML {self.count('html_bytes') / MB:.2f} MB → text {self.count('text_bytes') / MB:.2f} MB; "
            f"chunks written {self.count('chunks')}"
            + (f"; gone {self.gone} (no longer reached by the job)" if self.gone else "")
            + (f"; duplicates {self.count('duplicates')} (stored once: rel=canonical or the same text as another page)"
               if self.count("duplicates") else "")
            + (f"; browser requests refused {self.count('render_refused')} (SSRF guard or robots.txt)"
               if self.count("render_refused") else "")
            + (f"; browser responses over crawl.max_bytes {self.count('render_too_large')} (not read)"
               if self.count("render_too_large") else "")
            + (f"; internal errors {self.internal_errors} (logged; please report them)" if self.internal_errors else "")
            + (f"; stopped after {self.stopped_after:g} s (crawl.max_duration)" if self.stopped_after else "")
            + (f"; sitemaps read {self.count('sitemaps')} ({self.count('sitemap_urls')} URLs, "
               f"{self.count('sitemap_lastmod')} unchanged by lastmod)" if self.count("sitemaps_requested") else "")
        )


def failures_phrase(failures: Sequence[dict[str, Any]], limit: int = SHOWN_FAILURES,
                    what: str = "could not be fetched") -> str:
    """``N URLs could not be fetched: URL (reason), …`` naming the first ``limit``; "" for none."""
    if not failures:
        return ""
    named = ", ".join(f"{f['url']} ({f['reason']})" for f in failures[:limit])
    more = f" and {len(failures) - limit} more" if len(failures) > limit else ""
    return f"{len(failures)} URLs {what}: {named}{more}"
