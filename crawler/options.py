"""What a crawl is asked to do (``CrawlOptions``), and the Scrapy settings those options make.

The CLI and the job runner build a ``CrawlOptions``; ``crawler/run.py`` (one machine) and
``crawler/distributed/`` (through Redis) turn it into settings with ``crawl_settings``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from crawler.render import RenderPolicy, render_settings
from pipelines import defaults
from pipelines.errors import ConfigError


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
