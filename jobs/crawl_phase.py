"""A run's crawl: the job's crawl options, the crawl itself, its outcome sorted and told, and the refusal to
answer when no page of the job can be answered from.

URLs without a page are sorted three ways: dropped (a stored page now 404/410 or refused: no longer answered
from), failed (their stored copies are answered from, marked stale) and skipped on purpose (left out).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from crawler.run import SHOWN_FAILURES, failures_phrase
from jobs.config import JobConfig
from jobs.crawl_lines import dropped_notice, not_fetched_lines, skipped_lines, workers_lost_line
from jobs.errors import Interrupted, NothingToDoError, WriteFailedError
from jobs.run_options import Notify, RunOptions
from pipelines.items import dropped_reason, is_failure


@dataclass
class CrawlReport:
    """What the run's crawl did, as the verdict and the reports need it."""

    summary: Any = None  # crawler.run.CrawlSummary; None when the run did not crawl (or could not start)
    line: str | None = None  # the crawl's summary line
    crawl_run_id: int | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)  # URLs that failed, or were blocked
    stale: dict[str, datetime] = field(default_factory=dict)  # URL → when its stored copy was fetched
    # Stored pages dropped by this crawl (404/410, now refused by robots.txt or not HTML) → why: not stale.
    removed: dict[str, str] = field(default_factory=dict)
    skipped: list[dict[str, Any]] = field(default_factory=list)  # URLs skipped on purpose (robots.txt, not HTML)
    nothing_fetched: bool = False  # the crawl had work and none of it reached a server successfully
    # Pages the job's previous crawl reached and this one did not ("gone" in the crawl line); still stored.
    not_reached: int = 0
    stopped_after: float | None = None  # crawl.max_duration, when it cut the crawl short


def crawl_options(job: JobConfig, options: RunOptions, fresh_since: datetime | None = None) -> Any:
    from crawler.run import CrawlOptions, HostPolicy

    job.require_urls()  # one clear error when the job lists no URLs at all
    crawl = job.crawl
    return CrawlOptions(
        url_entries=job.url_entries(), urls_files=[job.urls_file] if job.urls_file else [],
        depth=crawl.depth, max_pages=crawl.max_pages, delay=crawl.delay,
        hosts={h: HostPolicy(o.delay, o.concurrency) for h, o in crawl.hosts.items()},
        allow=crawl.allow, deny=crawl.deny, follow=crawl.follow, contact=crawl.user_agent_contact,
        obey_robots=crawl.obey_robots, obey_noindex=crawl.obey_noindex, max_crawl_delay=crawl.max_crawl_delay,
        allow_private_networks=crawl.allow_private_networks or options.allow_private_networks,
        timeout=crawl.timeout, max_bytes=crawl.max_bytes,
        recrawl_after=crawl.recrawl_after, refresh=options.refresh, fresh_since=fresh_since, job_name=job.name,
        max_duration=crawl.max_duration, sitemap_max_urls=crawl.sitemap_max_urls,
        pdf_max_pages=crawl.pdf_max_pages, render=crawl.render,
        verbose=options.verbose, progress=options.progress, redis=job.redis,
    )


def run_crawl_phase(report: CrawlReport, job: JobConfig, options: RunOptions, notify: Notify, notices: list[str],
                    fresh_since: datetime | None) -> CrawlReport:
    """Crawl the job's URLs into ``options.db`` and fill ``report``; notices the run keeps go to ``notices``."""
    from crawler.run import run_crawl

    summary: Any = None
    try:
        summary = run_crawl(crawl_options(job, options, fresh_since), options.db)
    except (Interrupted, WriteFailedError) as exc:
        summary = getattr(exc, "summary", None)
        if summary is not None:
            notify.important(summary.line())
        raise
    except NothingToDoError as exc:
        summary = exc.summary
        report.nothing_fetched = True
        if summary is None:
            report.failures = [{"url": "(the job's URL list)", "outcome": "failed", "reason": str(exc)}]
    report.summary = summary
    report.crawl_run_id = getattr(summary, "crawl_run_id", None)
    report.line = summary.line() if summary is not None else None
    report.not_reached = int(getattr(summary, "gone", 0) or 0)
    report.stopped_after = getattr(summary, "stopped_after", None)
    for line in skipped_lines(summary):
        notify(line)
    _sort_outcomes(report)
    _tell(report, job, notify, notices)
    _refuse_unanswerable(report, job)
    return report


def _sort_outcomes(report: CrawlReport) -> None:
    """Split the crawl's URLs without a page: dropped (a stored page now 404/410 or refused: see
    ``dropped_reason``), failed (their stored copies answered from as stale), skipped on purpose (left out)."""
    summary = report.summary
    if summary is None:
        return
    kept = []
    for row in summary.outcomes:
        why = dropped_reason(row["outcome"], row["status"], str(row["reason"]))
        if why is not None and row["stored_fetched_at"] is not None:
            # Removed or refused: a page change (`gone` in the report and `webqa diff`), not an outage.
            report.removed[row["url"]] = why
            continue
        if not is_failure(row["outcome"], str(row["reason"])):
            report.skipped.append(row)  # a skip on purpose (robots.txt rules, not HTML): not a failure
            continue
        kept.append(row)
        if row["stored_fetched_at"] is not None:
            report.stale[row["url"]] = row["stored_fetched_at"]
    summary.outcomes = kept
    report.failures = report.failures or summary.failures


def _tell(crawl: CrawlReport, job: JobConfig, notify: Notify, notices: list[str]) -> None:
    """The crawl's lines: its summary, what was not fetched, and the notices on dropped and stale pages."""
    troubled = bool(crawl.failures or crawl.nothing_fetched or crawl.removed)
    if crawl.line:
        (notify.important if troubled else notify.info)(crawl.line)
    for line in not_fetched_lines(crawl.summary, crawl.failures):
        notify.important(line)
    notice = dropped_notice(crawl.removed)
    if notice is not None:
        notify.important(f"Notice: {notice}")
        notices.append(notice)  # in the report and the run's notes: under --quiet a clean run says nothing
    if crawl.stale and not crawl.nothing_fetched:
        notify.important(f"Notice: {len(crawl.stale)} pages could not be refreshed; their stored copies "
                         "are used and marked stale in the report")
    workers_lost = workers_lost_line(crawl.summary)
    if workers_lost:
        notify.important(workers_lost)
    if crawl.nothing_fetched and crawl.failures and job.on_crawl_failure == "answer_stale":
        notify.important("Notice: no page could be fetched; answering from the stored copies "
                         "(on_crawl_failure: answer_stale)")


def _refuse_unanswerable(crawl: CrawlReport, job: JobConfig) -> None:
    """NothingToDoError when no page of the job is left to answer from (unless answer_stale allows the old copies)."""
    if crawl.nothing_fetched and crawl.removed and not crawl.failures:
        why = sorted(set(crawl.removed.values()))
        if all(w.startswith("HTTP ") for w in why):
            raise NothingToDoError(
                f"every page of job {job.name} answered 404 or 410: they are gone from the site; "
                "update the job's URLs")
        raise NothingToDoError(
            f"no page of job {job.name} can be answered from: each is gone or refused now "
            f"({'; '.join(why[:SHOWN_FAILURES])}); update the job's URLs")
    if crawl.nothing_fetched and job.on_crawl_failure != "answer_stale":
        summary = crawl.summary
        named = f" ({failures_phrase(crawl.failures)})" if summary is not None and crawl.failures else ""
        if not named and crawl.skipped:  # nothing failed: say what kept every URL out
            raise NothingToDoError(f"no page of job {job.name} can be answered from "
                                   f"({failures_phrase(crawl.skipped, what='were skipped')})")
        hint = summary.blocked_hint() if summary is not None else None
        if hint:  # under --quiet this one line is all cron mails: it must say what to change
            raise NothingToDoError(f"no page of job {job.name} could be fetched{named}: {hint}")
        raise NothingToDoError(
            f"no page of job {job.name} could be fetched{named}, so nothing was answered from older copies "
            "(set on_crawl_failure: answer_stale in the job to answer from them)")
