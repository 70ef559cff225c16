"""Start a crawl from Python: options → Scrapy settings → one CrawlerProcess → a summary.

This is the thin layer the CLI and the job runner call. It reads what the crawl needs from the store
before Scrapy starts (validators for conditional GET, fetch times for freshness), so the Scrapy
components themselves stay ignorant of DuckDB. The Twisted reactor cannot restart, so one process
runs at most one crawl; tests start crawls as subprocesses.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

# The crawl's options, plan and summary live in modules of their own (crawler/distributed/ imports them
# without this module); they are named here too, where the CLI and the job runner look for them.
from crawler.options import CrawlOptions, HostPolicy, allows_private_networks, crawl_settings
from crawler.render import render_problem
from crawler.plan import CrawlPlan, fresh_cutoff, gather_urls, plan_crawl
from crawler.summary import MB, SHOWN_FAILURES, CrawlSummary, failures_phrase
from crawler.urllist import UrlProblem
from pipelines.errors import ConfigError, Interrupted, NothingToDoError, WriteFailedError, WebqaError
from pipelines.store import Store, failures_query

if TYPE_CHECKING:
    from crawler.shutdown import GracefulShutdown

__all__ = ["MB", "SHOWN_FAILURES", "CrawlOptions", "CrawlPlan", "CrawlSummary", "HostPolicy", "allows_private_networks",
           "crawl_settings", "failures_phrase", "fresh_cutoff", "gather_urls", "plan_crawl", "run_crawl"]

log = logging.getLogger(__name__)


def _outcomes(db_path: Path, crawl_run_id: int) -> list[dict[str, Any]]:
    try:
        with Store.open(db_path) as store:
            return store.crawl_failures(crawl_run_id)
    except WebqaError as exc:  # the summary line still stands; the reasons are in fetch_log
        log.warning("Cannot read the crawl's failures: %s", exc)
        return []


def _abandon_pipelines(crawler: Any) -> None:
    """After a second signal the pipelines never closed: let those holding processes release them now."""
    scraper = getattr(getattr(crawler, "engine", None), "scraper", None)
    for component in getattr(getattr(scraper, "itemproc", None), "middlewares", ()):
        abandon = getattr(component, "abandon", None)
        if abandon is not None:
            try:
                abandon()
            except Exception:  # noqa: BLE001 - the process is about to exit; the workers exit with it
                log.debug("Could not release %r", component, exc_info=True)


def _mark_interrupted(db_path: Path, summary: CrawlSummary) -> None:
    """After a second signal the pipeline never closed: record the crawl run as interrupted here."""
    try:
        with Store.open(db_path) as store:
            store.finish_crawl(int(summary.crawl_run_id or 0), "interrupted", summary.counts)
    except Exception:  # noqa: BLE001 - the next crawl marks it 'killed' instead; the signal is what matters
        log.debug("Could not mark crawl run %s interrupted", summary.crawl_run_id, exc_info=True)


def run_crawl(options: CrawlOptions, db_path: str | Path) -> CrawlSummary:
    """Crawl the listed URLs into ``db_path``; raises ``NothingToDoError`` when no URL could be processed,
    ``WriteFailedError`` when the database stopped accepting writes (the crawl stopped there), ``Interrupted``
    after SIGINT/SIGTERM."""
    from crawler.shutdown import GracefulShutdown

    problem = render_problem(options.render, bool(options.redis))
    if problem is not None:  # a job that renders and cannot: one line before anything runs
        raise ConfigError(problem)
    if options.redis:
        sitemap = next((u for u in gather_urls(options)[0] if u.sitemap), None)
        if sitemap is not None:
            raise ConfigError(f"{sitemap.origin}: sitemap: {sitemap.url}: sitemaps are read by a crawl on one machine, "
                              "not through Redis; crawl without --redis (or redis:), or list the pages")
        try:
            from crawler.distributed.coordinator import run_distributed
        except ImportError as exc:  # redis and scrapy-redis are the optional extra
            raise ConfigError(f"a crawl through Redis needs the redis extra: pip install 'webqa[redis]' ({exc})") from None
        return run_distributed(options, db_path)
    started = time.monotonic()
    db_path = Path(db_path)
    allows_private_networks(options)  # a bad WEBQA_ALLOW_PRIVATE_NETWORKS is one line, before anything runs
    shutdown = GracefulShutdown()
    with shutdown:
        return _run_crawl(options, db_path, shutdown, started)


def _run_crawl(options: CrawlOptions, db_path: Path, shutdown: GracefulShutdown, started: float) -> CrawlSummary:
    from scrapy.crawler import CrawlerProcess
    from scrapy.settings import Settings

    from crawler.spiders.urls import UrlsSpider

    gathered = gather_urls(options)  # a bad URL file is one line before the database is opened
    # Opening the store here also turns "database in use" into one line before Scrapy starts.
    with Store.open(db_path) as store:
        plan = plan_crawl(options, store, gathered)
    problems = plan.problems

    if plan.nothing_to_request():
        if plan.fresh_listed():
            return CrawlSummary(None, {}, problems, len(plan.fresh_listed()), time.monotonic() - started)
        detail = f": {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "") if problems else ""
        raise NothingToDoError(f"no valid URL to crawl{detail}")

    settings = Settings()
    settings.setmodule("crawler.settings", priority="project")
    settings.update(crawl_settings(options, db_path, plan.validators), priority="cmdline")
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(UrlsSpider)
    process.crawl(
        crawler, listed=plan.listed, problems=problems, depth=options.depth, max_pages=options.max_pages,
        allow=list(options.allow), deny=list(options.deny), follow=options.follow,
        stored_links=plan.links, fresh=plan.fresh, stored_at=plan.stored_at, sitemap_max_urls=options.sitemap_max_urls,
    )
    shutdown.attach(process, crawler)
    if shutdown.signal_name is not None:  # it came while the crawl was being set up: do not start it
        raise Interrupted(f"{shutdown.signal_name}: the crawl was stopped before it started; nothing was fetched")
    process.start(install_signal_handlers=False)
    return _outcome(options, db_path, shutdown, crawler, problems, started)


def _outcome(options: CrawlOptions, db_path: Path, shutdown: GracefulShutdown, crawler: Any,
             problems: list[UrlProblem], started: float) -> CrawlSummary:
    """The finished crawl's summary, or the error that tells why it stored nothing or stopped."""
    from pipelines.store_pipeline import STORAGE_ERROR_STAT

    stats = crawler.stats.get_stats() if crawler.stats is not None else {}
    counts = {k.removeprefix("webqa/count/"): int(v) for k, v in stats.items() if k.startswith("webqa/count/")}
    stopped_after = options.max_duration if stats.get("finish_reason") == "closespider_timeout" else None
    summary = CrawlSummary(stats.get("webqa/crawl_run_id"), counts, problems, counts.get("fresh", 0),
                           time.monotonic() - started, interrupted=shutdown.signal_name, stopped_after=stopped_after)
    if summary.crawl_run_id is not None and not stats.get(STORAGE_ERROR_STAT) and not shutdown.immediate:
        summary.outcomes = _outcomes(db_path, summary.crawl_run_id)
    if stats.get(STORAGE_ERROR_STAT):
        raise WriteFailedError(str(stats[STORAGE_ERROR_STAT]), summary)
    if shutdown.signal_name is not None:
        if shutdown.immediate:
            _abandon_pipelines(crawler)
        if shutdown.immediate and summary.crawl_run_id is not None:
            _mark_interrupted(db_path, summary)
        how = "stopped at once" if shutdown.immediate else "stopped after the requests in flight"
        raise Interrupted(f"{shutdown.signal_name}: the crawl {how}; {summary.processed} pages fetched or "
                          "confirmed are stored, the rest was not fetched", summary, immediate=shutdown.immediate)
    if summary.crawl_run_id is None:
        raise NothingToDoError(f"the crawl did not start; rerun with -v to see Scrapy's log (database {db_path})")
    if summary.processed == 0 and not summary.fresh:
        stopped = f", stopped after {stopped_after:g} s (crawl.max_duration)" if stopped_after else ""
        named = f": {summary.failures_phrase()}" if summary.failures else ""
        hint = summary.blocked_hint()  # under --quiet this line is all cron mails: it says what to change
        raise NothingToDoError(
            f"no URL could be fetched ({summary.count('failed')} failed, {summary.count('skipped')} skipped{stopped})"
            f"{named}; " + (hint if hint else f"see `{failures_query(summary.crawl_run_id)}` in {db_path}"),
            summary,
        )
    return summary
