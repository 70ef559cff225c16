"""Start a crawl from Python: options → Scrapy settings → one CrawlerProcess → a summary.

This is the thin layer the CLI and the job runner call. It reads what the crawl needs from the store
before Scrapy starts (validators for conditional GET, fetch times for freshness), so the Scrapy
components themselves stay ignorant of DuckDB. The Twisted reactor cannot restart, so one process
runs at most one crawl; tests start crawls as subprocesses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawler.render import RenderPolicy, chromium_problem, render_settings
from crawler.urllist import ListedUrl, UrlProblem, collect_urls, load_url_file
from pipelines import defaults
from pipelines.items import is_failure
from pipelines.errors import ConfigError, Interrupted, NothingToDoError, StorageFailed, WebqaError
from pipelines.store import Store, failures_query, utcnow

if TYPE_CHECKING:
    from crawler.shutdown import GracefulShutdown

log = logging.getLogger(__name__)

MB = 1024 * 1024
# How many failed URLs a console names before "and N more" (fetch_log has them all).
SHOWN_FAILURES = 5


@dataclass(frozen=True)
class HostPolicy:
    delay: float | None = None
    concurrency: int | None = None


@dataclass
class CrawlOptions:
    urls: Sequence[str] = ()
    urls_files: Sequence[Path] = ()
    # Entries already read elsewhere (a job file's inline list), as (origin, raw URL).
    url_entries: Sequence[tuple[str, str]] = ()
    depth: int = 0
    max_pages: int = 0
    delay: float = defaults.DELAY
    hosts: dict[str, HostPolicy] = field(default_factory=dict)
    allow: Sequence[str] = ()
    deny: Sequence[str] = ()
    follow: str = "same_host"
    contact: str | None = None
    obey_robots: bool = True
    # Store pages whose meta robots or X-Robots-Tag say noindex (pages the user owns); obey_robots off does too.
    obey_noindex: bool = True
    # Hosts whose robots.txt asks for a longer Crawl-delay (seconds) are skipped for the run.
    max_crawl_delay: float = defaults.MAX_CRAWL_DELAY
    # SSRF guard off: allow loopback/private/link-local addresses (intranet crawls). The environment
    # variable WEBQA_ALLOW_PRIVATE_NETWORKS=1 does the same (see `allows_private_networks`).
    allow_private_networks: bool = False
    timeout: float = defaults.TIMEOUT
    max_bytes: int = defaults.MAX_BYTES
    recrawl_after: timedelta | None = None
    refresh: bool = False
    # Resuming an interrupted run's crawl: pages fetched or confirmed since then are not fetched again.
    fresh_since: datetime | None = None
    job_name: str | None = None
    extract_workers: int = 0
    # Stop the crawl gracefully after this many seconds (Scrapy's CLOSESPIDER_TIMEOUT); None: no bound.
    max_duration: float | None = None
    verbose: bool = False
    progress: bool = False
    extra_settings: dict[str, Any] = field(default_factory=dict)
    # Redis URL: the frontier is shared and `webqa worker` processes fetch (crawler/distributed/).
    redis: str | None = None
    # Most pages one listed sitemap (with its index's sitemaps) may name; the rest are not read.
    sitemap_max_urls: int = defaults.SITEMAP_MAX_URLS
    # A PDF with more pages is not read (failed, with the reason).
    pdf_max_pages: int = defaults.PDF_MAX_PAGES
    # crawl.render: "js" (every page through the browser), a list of URL regexes, or None (crawler/render.py).
    render: str | list[str] | None = None


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


def gather_urls(options: CrawlOptions) -> tuple[list[ListedUrl], list[UrlProblem]]:
    entries: list[tuple[str, str]] = list(options.url_entries)
    entries += [(f"argument {i}", raw) for i, raw in enumerate(options.urls, start=1)]
    for path in options.urls_files:
        entries += load_url_file(path)
    return collect_urls(entries)


@dataclass
class CrawlPlan:
    """What a crawl reads from the store before Scrapy starts, so the Scrapy components never see DuckDB."""

    listed: list[ListedUrl]
    problems: list[UrlProblem]
    following: bool  # links are followed (depth > 0)
    links: dict[str, list[str]]  # stored out-links, url → targets (only when following)
    fresh: set[str]  # URLs fetched or confirmed recently enough not to be requested (recrawl_after, resume)
    validators: dict[str, tuple[str | None, str | None]]  # url → (ETag, Last-Modified) for conditional GETs
    # url → when its stored copy was downloaded or last confirmed, for sitemaps' <lastmod> (only when one is listed).
    stored_at: dict[str, datetime] = field(default_factory=dict)

    def fresh_listed(self) -> list[ListedUrl]:
        return [u for u in self.listed if u.url in self.fresh and not u.sitemap]

    def nothing_to_request(self) -> bool:
        """Every listed URL is fresh, and none leads on to stored links (fresh pages do, within the depth)."""
        fresh = self.fresh_listed()
        return len(fresh) == len(self.listed) and not (self.following and any(self.links.get(u.url) for u in fresh))


def plan_crawl(options: CrawlOptions, store: Store,
               gathered: tuple[list[ListedUrl], list[UrlProblem]] | None = None) -> CrawlPlan:
    listed, problems = gathered if gathered is not None else gather_urls(options)
    following = options.depth > 0 and options.follow != "none"
    stored = store.validators()
    links = store.page_links() if following else {}
    if following:
        # A page stored before webqa kept links is downloaded in full once, so that it can lead on.
        stored = {url: v for url, v in stored.items() if url in links}
    fresh: set[str] = set()
    cutoff = fresh_cutoff(options)
    if cutoff is not None:
        fresh = {url for url, v in stored.items() if v.fetched_at and v.fetched_at >= cutoff}
    validators = {url: (v.etag, v.last_modified) for url, v in stored.items() if v.etag or v.last_modified}
    stored_at: dict[str, datetime] = {}
    if any(u.sitemap for u in listed) and not options.refresh:
        stored_at = {url: v.fetched_at for url, v in stored.items() if v.fetched_at is not None}
    return CrawlPlan(listed, problems, following, links, fresh, validators, stored_at)


def fresh_cutoff(options: CrawlOptions) -> datetime | None:
    """Pages fetched or confirmed at or after this time are not fetched again in this crawl."""
    cutoffs = [options.fresh_since] if options.fresh_since is not None else []
    if options.recrawl_after is not None and not options.refresh:
        cutoffs.append(utcnow() - options.recrawl_after)
    return min(cutoffs) if cutoffs else None


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


def allows_private_networks(options: CrawlOptions) -> bool:
    """Whether the SSRF guard is off: the option (job key, CLI flag) or the operator's environment.

    Raises ConfigError for an environment value that is neither on nor off, rather than guess.
    """
    from crawler.middlewares.ssrf import env_allows_private_networks

    if options.allow_private_networks:
        return True
    try:
        return env_allows_private_networks()
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _slot_delay(delay: float) -> float:
    # With a delay of exactly 0 Scrapy's slot can start two transfers to one host at the same instant,
    # breaking "one request per host at a time"; a millisecond keeps the slot's bookkeeping in force.
    return max(delay, 0.001)


def crawl_settings(options: CrawlOptions, db_path: Path, validators: dict[str, tuple[str | None, str | None]]) -> dict[str, Any]:
    """The per-run settings layered over ``crawler.settings``."""
    from crawler import settings as scrapy_defaults

    user_agent = defaults.user_agent(options.contact) if options.contact else scrapy_defaults.USER_AGENT
    slots = {
        host: {
            "delay": _slot_delay(policy.delay if policy.delay is not None else options.delay),
            "concurrency": policy.concurrency or 1,
            "jitter": 0,
        }
        for host, policy in options.hosts.items()
    }
    settings: dict[str, Any] = {
        "WEBQA_DB": str(db_path),
        "WEBQA_JOB_NAME": options.job_name,
        "WEBQA_VALIDATORS": validators,
        "WEBQA_PROGRESS": options.progress,
        "DOWNLOAD_DELAY": _slot_delay(options.delay),
        "DOWNLOAD_SLOTS": slots,
        "ROBOTSTXT_OBEY": options.obey_robots,
        "WEBQA_OBEY_NOINDEX": options.obey_noindex,
        "WEBQA_PDF_MAX_PAGES": options.pdf_max_pages,
        "WEBQA_MAX_CRAWL_DELAY": options.max_crawl_delay,
        # robots.txt answers are reused by the next runs on the same database (for at most a day).
        "WEBQA_ROBOTS_CACHE": str(db_path.with_name(db_path.name + ".robots.json")),
        "USER_AGENT": user_agent,
        "DOWNLOAD_TIMEOUT": options.timeout,
        "DOWNLOAD_MAXSIZE": options.max_bytes,
        "DOWNLOAD_WARNSIZE": min(scrapy_defaults.DOWNLOAD_WARNSIZE, options.max_bytes),
        "WEBQA_ALLOW_PRIVATE_NETWORKS": allows_private_networks(options),
        "LOG_LEVEL": "DEBUG" if options.verbose else "ERROR",
        # The CLI installs its own handler with the level the user asked for.
        "LOG_INSTALL_ROOT_HANDLER": False,
        "EXTENSIONS": {
            **scrapy_defaults.EXTENSIONS,  # replaced as a whole at this priority: keep the project's
            "crawler.progress.ProgressReporter": 500,
            # Same settings; a CLOSESPIDER_TIMEOUT (crawl.max_duration) also drops requests not yet sent.
            "scrapy.extensions.closespider.CloseSpider": None,
            "crawler.closespider.BoundedCloseSpider": 0,
        },
    }
    if options.extract_workers:
        settings["WEBQA_EXTRACT_WORKERS"] = options.extract_workers
    if options.max_duration:
        settings["CLOSESPIDER_TIMEOUT"] = options.max_duration
    settings.update(render_settings(RenderPolicy.from_setting(options.render), options.timeout))
    settings.update(options.extra_settings)
    return settings


def _check_render(options: CrawlOptions) -> None:
    """A job that renders and cannot: one line before anything runs."""
    if options.render is None:
        return
    if options.redis:
        raise ConfigError("crawl.render: pages are rendered by a crawl on one machine, not through Redis; "
                          "crawl without --redis (or redis:), or drop crawl.render")
    problem = chromium_problem()
    if problem is not None:
        raise ConfigError(problem)


def run_crawl(options: CrawlOptions, db_path: str | Path) -> CrawlSummary:
    """Crawl the listed URLs into ``db_path``; raises ``NothingToDoError`` when no URL could be processed,
    ``StorageFailed`` when the database stopped accepting writes (the crawl stopped there), ``Interrupted``
    after SIGINT/SIGTERM."""
    from crawler.shutdown import GracefulShutdown

    _check_render(options)
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
    from pipelines.store_pipeline import STORAGE_ERROR_STAT

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

    stats = crawler.stats.get_stats() if crawler.stats is not None else {}
    counts = {k.removeprefix("webqa/count/"): int(v) for k, v in stats.items() if k.startswith("webqa/count/")}
    stopped_after = options.max_duration if stats.get("finish_reason") == "closespider_timeout" else None
    summary = CrawlSummary(stats.get("webqa/crawl_run_id"), counts, problems, counts.get("fresh", 0),
                           time.monotonic() - started, interrupted=shutdown.signal_name, stopped_after=stopped_after)
    if summary.crawl_run_id is not None and not stats.get(STORAGE_ERROR_STAT) and not shutdown.immediate:
        summary.outcomes = _outcomes(db_path, summary.crawl_run_id)
    if stats.get(STORAGE_ERROR_STAT):
        raise StorageFailed(str(stats[STORAGE_ERROR_STAT]), summary)
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
