"""`webqa worker --redis URL`: join the crawl the coordinator published, fetch until it says stop.

A worker runs the same spider, middlewares and extraction as a crawl on one machine; only what must
be shared is swapped: the scheduler (the leased queue), the spider's ``seen``/``max_pages`` (Redis),
robots.txt and the delays (the gate), and the store (items go to the coordinator). It never decides
alone that the crawl is over: it closes when the coordinator has seen the agreed stop (nothing queued,
nothing leased, for a grace period) and removed the crawl, and until then an idle worker keeps asking
the queue, because another worker's page may still lead to new links.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import scrapy
from scrapy import signals
from scrapy.crawler import Crawler
from scrapy.exceptions import DontCloseSpider

from crawler.distributed.backlog import DEFAULT_BACKLOG, DEFAULT_BACKLOG_WAIT
from crawler.distributed.entries import RedisEntryError, parse_config, parse_crawl
from pipelines.redact import redact_text, redact_url
from crawler.distributed.queue import (
    DEFAULT_LEASE_SECONDS, REGISTRY, Admission, Frontier, Keys, RedisLost, connect,
)
from crawler.spiders.urls import UrlsSpider
from pipelines.items import FetchOutcome
from pipelines.errors import ConfigError, NothingToDoError, WebqaError

log = logging.getLogger(__name__)

#: How often a worker renews its leases and says it is alive, as a share of the lease.
RENEW_SHARE = 1 / 3
#: How often an idle worker asks the shared queue again (Scrapy's own heartbeat is 5 s).
IDLE_POLL = 0.1
#: How long a worker waits for a coordinator that stopped beating (killed, not restarted) before it
#: gives up with an error; WEBQA_REDIS_COORDINATOR_WAIT overrides it.
COORDINATOR_WAIT = 600.0


class CoordinatorLost(WebqaError):
    """The crawl's coordinator stopped beating and did not come back within the wait (exit 3)."""


class DistributedUrlsSpider(UrlsSpider):
    """UrlsSpider whose ``seen`` and ``max_pages`` are the crawl's, shared in Redis (``Frontier.admit``)."""

    def __init__(self, *args: Any, frontier: Frontier | None = None, crawl_id: str | None = None,
                 **kwargs: Any) -> None:
        self.shared_max_pages = int(kwargs.get("max_pages") or 0)
        kwargs["max_pages"] = 0  # counted in Redis by admit, not by this process
        super().__init__(*args, **kwargs)
        self.frontier = frontier
        self.crawl_id = crawl_id
        self.keys = frontier.keys if frontier is not None else Keys()
        self.redis_lost: str | None = None  # why the worker stopped early, for run_worker's Error line
        self.coordinator_lost: str | None = None
        self._redis_ok = self._coordinator_seen = time.monotonic()
        self.coordinator_wait = _env_seconds("WEBQA_REDIS_COORDINATOR_WAIT", COORDINATOR_WAIT)

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> DistributedUrlsSpider:
        settings = crawler.settings
        keys = Keys(settings.get("WEBQA_REDIS_PREFIX") or "webqa")
        kwargs["frontier"] = Frontier(connect(settings.get("WEBQA_REDIS_URL")), keys,
                                      lease_seconds=settings.getfloat("WEBQA_LEASE_SECONDS", DEFAULT_LEASE_SECONDS))
        spider = super().from_crawler(crawler, *args, **kwargs)
        assert isinstance(spider, DistributedUrlsSpider)
        crawler.signals.connect(spider._idle, signal=signals.spider_idle)
        crawler.signals.connect(spider._engine_started, signal=signals.engine_started)
        crawler.signals.connect(spider._closed, signal=signals.spider_closed)
        return spider

    # -- admission ---------------------------------------------------------------------------------

    def seed_requests(self) -> Iterator[scrapy.Request]:
        """The listed URLs' requests, fresh ones last (as ``UrlsSpider.start``); the coordinator queues them."""
        for listed in sorted(self.listed, key=lambda entry: entry.url in self.fresh):
            yield from self._schedule(listed.url, depth=0)

    async def start(self) -> AsyncIterator[Any]:
        # Scrapy 2.19 asks start() only: the seeds are in the shared queue already (the coordinator's).
        return
        yield  # noqa: unreachable - makes this an async generator

    def _schedule(self, url: str, depth: int) -> Iterator[scrapy.Request | FetchOutcome]:
        assert self.frontier is not None
        if self._too_long(url):
            if self.frontier.admit(url, depth, fresh=False, max_pages=0) != Admission.SEEN:
                self._count("failed/url_too_long")
                yield FetchOutcome(url, "failed", f"URL longer than {self.max_url_length} characters ({len(url)}); "
                                                  "not requested (WEBQA_MAX_URL_LENGTH)")
            return
        verdict = self.frontier.admit(url, depth, fresh=url in self.fresh, max_pages=self.shared_max_pages)
        if verdict == Admission.SEEN:
            return
        if verdict == Admission.FRESH:
            yield from self._follow_stored(url, depth)
            return
        if verdict == Admission.OVER_MAX:
            self._count("skipped/max_pages")
            return
        request = self._request(url, depth)
        if request is not None:
            request.meta["webqa_id"] = url
            yield request

    # Links first, then the item: the item ends the lease (LeaseItemPipeline), so by then the links
    # must be queued, or a worker dying between the two would lose them.
    def parse(self, response: Any, listed_url: str) -> Iterable[Any]:
        return _requests_first(super().parse(response, listed_url))

    def on_error(self, failure: Any) -> Iterable[Any]:
        return _requests_first(super().on_error(failure))

    # -- staying alive -----------------------------------------------------------------------------

    def _engine_started(self) -> None:
        from twisted.internet import task

        engine = self.crawler.engine
        # Scrapy asks an idle scheduler again every 5 s; another worker's links may arrive any moment.
        engine._SLOT_HEARTBEAT_INTERVAL = IDLE_POLL  # type: ignore[union-attr]  # read once the engine starts
        assert self.frontier is not None
        self._renewal = task.LoopingCall(self._renew)
        self._renewal.start(self.frontier.lease_ms / 1000 * RENEW_SHARE, now=True)

    def _renew(self) -> None:
        assert self.frontier is not None
        try:
            self.frontier.renew()
            # Interrupted coordinator: take nothing more from the queue, finish what is in flight.
            self.frontier.stopping = self.crawl_over()
            if not self.frontier.stopping:  # a beat after the crawl's keys are gone would outlive it
                self.frontier.r.hset(self.keys.workers, self.frontier.token, time.time())
            now = self._redis_ok = time.monotonic()
            if self.frontier.r.exists(self.keys.coordinator):
                self._coordinator_seen = now
            elif now - self._coordinator_seen > self.coordinator_wait and self.coordinator_lost is None:
                self.coordinator_lost = (
                    f"the crawl's coordinator has not been heard of for {now - self._coordinator_seen:.0f} s (killed "
                    "and not restarted?); the crawl waits in Redis: rerun its `webqa crawl --redis` command and "
                    "start workers again")
                self._stop("coordinator_lost")
        except Exception as exc:  # noqa: BLE001 - a Redis hiccup must not kill the loop; leases last 3 renewals
            silent = time.monotonic() - self._redis_ok
            log.warning("Cannot renew leases in Redis (for %.0f s): %s", silent, exc)
            if silent >= self.frontier.lease_ms / 1000 and self.redis_lost is None:
                # Every lease this worker held has expired and gone back to the queue: stop, and say so.
                self.redis_lost = (f"lost Redis for {silent:.0f} s, longer than a lease: "
                                   f"{redact_text(str(exc)).rstrip('.')}")
                self._stop("redis_lost")

    def _stop(self, reason: str) -> None:
        from scrapy.utils.defer import deferred_from_coro

        assert self.frontier is not None
        self.frontier.stopping = True
        self._closing = deferred_from_coro(self.crawler.engine.close_spider_async(reason=reason))  # type: ignore[union-attr]

    def _idle(self) -> None:
        if self.redis_lost is None and self.coordinator_lost is None and not self.crawl_over():
            raise DontCloseSpider("the coordinator has not ended the crawl")

    def crawl_over(self) -> bool:
        """True once the coordinator ended this crawl (or it is gone); until then the worker stays."""
        assert self.frontier is not None
        try:
            meta = self.frontier.r.get(self.keys.crawl)
        except Exception as exc:  # noqa: BLE001 - Redis unreachable: keep trying, the leases say who is alive
            log.warning("Cannot ask Redis whether the crawl is over: %s", exc)
            return False
        try:
            crawl = parse_crawl(meta, self.keys.crawl)
        except RedisEntryError as exc:  # not the crawl this worker joined any more
            log.warning("%s", exc)
            return True
        if crawl is None:
            return True
        return crawl.get("id") != self.crawl_id or crawl.get("state") in ("done", "stopped")

    def _closed(self) -> None:
        renewal = getattr(self, "_renewal", None)
        if renewal is not None and renewal.running:
            renewal.stop()
        if self.frontier is not None:
            try:
                self.frontier.r.hdel(self.keys.workers, self.frontier.token)
            except Exception:  # noqa: BLE001 - the coordinator forgets silent workers anyway
                pass


def _env_seconds(name: str, default: float) -> float:
    import os

    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        raise ConfigError(f"{name}={os.environ[name]!r}: expected a number of seconds") from None


def _requests_first(output: Iterable[Any]) -> Iterator[Any]:
    items = []
    for obj in output:
        if isinstance(obj, scrapy.Request):
            yield obj
        else:
            items.append(obj)
    yield from items


# -- settings from the published crawl --------------------------------------------------------------


def worker_settings(config: dict[str, Any], redis_url: str, prefix: str, *, extract_workers: int = 0,
                    verbose: bool = False) -> dict[str, Any]:
    """The crawl's Scrapy settings as on one machine (``crawl_settings``), with the shared parts swapped in."""
    from crawler.options import CrawlOptions, HostPolicy, crawl_settings

    hosts = {h: HostPolicy(p.get("delay"), p.get("concurrency")) for h, p in config["hosts"].items()}
    options = CrawlOptions(
        delay=config["delay"], hosts=hosts, contact=config.get("contact"), obey_robots=config["obey_robots"],
        obey_noindex=config.get("obey_noindex", True),
        pdf_max_pages=int(config.get("pdf_max_pages") or CrawlOptions.pdf_max_pages),
        max_crawl_delay=config["max_crawl_delay"], allow_private_networks=_private_networks(config),
        timeout=config["timeout"], max_bytes=config["max_bytes"], extract_workers=extract_workers, verbose=verbose,
    )
    validators = {url: tuple(v) for url, v in config.get("validators", {}).items()}
    settings = crawl_settings(options, Path("unused.duckdb"), validators)
    from crawler import settings as defaults

    middlewares = dict(defaults.DOWNLOADER_MIDDLEWARES)
    middlewares["crawler.middlewares.robots.RobotsPolicyMiddleware"] = None
    middlewares["crawler.distributed.gate.SharedRobotsMiddleware"] = 100
    middlewares["crawler.middlewares.retry_after.RetryAfterMiddleware"] = None
    middlewares["crawler.distributed.gate.SharedRetryAfterMiddleware"] = 550
    # Last before the wire (after compression, 590, and the stats, 850): granted means sent now.
    middlewares["crawler.distributed.gate.GateMiddleware"] = 950
    settings.update({
        "WEBQA_REDIS_URL": redis_url,
        "WEBQA_REDIS_PREFIX": prefix,
        "WEBQA_LEASE_SECONDS": config["lease_seconds"],
        # The coordinator's bound on its backlog, the same for every worker (crawler/distributed/backlog.py).
        "WEBQA_REDIS_BACKLOG": config.get("backlog", DEFAULT_BACKLOG),
        "WEBQA_REDIS_BACKLOG_WAIT": config.get("backlog_wait", DEFAULT_BACKLOG_WAIT),
        "WEBQA_GATE_DELAY": config["delay"],
        "WEBQA_GATE_HOSTS": config["hosts"],
        "WEBQA_DB": None,
        "WEBQA_ROBOTS_CACHE": None,
        "WEBQA_PROGRESS": False,
        # The gate paces hosts; this process's slots only keep one transfer per host at a time.
        "DOWNLOAD_DELAY": 0.001,
        "DOWNLOAD_SLOTS": {h: {"delay": 0.001, "concurrency": p.get("concurrency") or 1, "jitter": 0}
                           for h, p in config["hosts"].items()},
        "DOWNLOADER_MIDDLEWARES": middlewares,
        "ITEM_PIPELINES": {
            "pipelines.extraction.ExtractionPipeline": 100,
            "crawler.distributed.items.LeaseItemPipeline": 800,
        },
        "SCHEDULER": "crawler.distributed.queue.LeasingScheduler",
        "SCHEDULER_QUEUE_CLASS": "crawler.distributed.queue.LeasedQueue",
        "SCHEDULER_SERIALIZER": "crawler.distributed.queue",
        "SCHEDULER_QUEUE_KEY": f"{prefix}:queue",
        "SCHEDULER_DUPEFILTER_KEY": f"{prefix}:dupefilter",
        # Scrapy 2.19's own filter has neither from_spider nor from_settings, which scrapy-redis calls.
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        "SCHEDULER_PERSIST": True,
        "REDIS_URL": redis_url,
        "REDIS_PARAMS": {"socket_timeout": 10, "socket_connect_timeout": 5},
    })
    return settings


def _private_networks(config: dict[str, Any]) -> bool:
    """The crawl's SSRF switch, honoured only when this worker's own environment agrees: Redis may be
    written by others than the operator, and the switch would open the worker's networks to them."""
    from crawler.middlewares.ssrf import env_allows_private_networks

    if not config["allow_private_networks"]:
        return False
    try:
        allowed = env_allows_private_networks()
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not allowed:
        log.warning("The crawl allows private networks, but this worker keeps the SSRF guard on: set "
                    "WEBQA_ALLOW_PRIVATE_NETWORKS=1 where the worker runs to crawl them (SECURITY.md, Redis)")
    return allowed


@dataclass
class WorkerSummary:
    crawl_id: str
    items: int
    seconds: float
    backlog_waits: int = 0  # items that waited for room in the coordinator's backlog
    backlog_seconds: float = 0.0

    def line(self) -> str:
        waited = (f"; {self.backlog_waits} waited {self.backlog_seconds:.1f}s in all for the coordinator's writer"
                  if self.backlog_waits else "")
        return (f"Worker done: crawl {self.crawl_id}, {self.items} URLs handed to the coordinator in "
                f"{self.seconds:.1f}s{waited}")


def _join(client: Any, prefix: str | None) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
    """A running crawl to join: ``prefix``'s, or among the registered ones the one with the fewest workers."""
    prefixes = [prefix] if prefix else [p.decode() for p in client.hkeys(REGISTRY)]
    found = []
    for candidate in prefixes:
        keys = Keys(candidate)
        crawl = parse_crawl(client.get(keys.crawl), keys.crawl)
        if crawl is None or crawl.get("state") != "running":
            continue
        config = parse_config(client.get(keys.config), keys.config)
        found.append((int(client.hlen(keys.workers)), candidate, crawl, config))
    if not found:
        return None
    _workers, chosen, crawl, config = min(found, key=lambda f: (f[0], f[1]))
    return chosen, crawl, config


def wait_for_crawl(redis_url: str, prefix: str | None, wait: float) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The prefix, crawl and config of a published crawl, waiting up to ``wait`` seconds for one."""
    import redis as redis_lib

    shown = redact_url(redis_url)  # in every message: never the password
    try:
        client = connect(redis_url)
    except redis_lib.RedisError as exc:
        # Redis down is the environment's failure, not the command's: exit 3, as Ollama down.
        raise WebqaError(f"cannot reach Redis at {shown}: {redact_text(str(exc))}") from None
    deadline = time.monotonic() + wait
    while True:
        try:
            joined = _join(client, prefix)
        except redis_lib.RedisError as exc:
            raise RedisLost(f"cannot read the published crawls from Redis at {shown}: {redact_text(str(exc))}") from None
        if joined is not None:
            return joined
        if time.monotonic() >= deadline:
            raise NothingToDoError(f"no crawl to join on {shown} within {wait:g} s; "
                                   "start one with `webqa crawl --redis URL ...` (or wait longer: --wait)")
        time.sleep(0.2)


def run_worker(redis_url: str, *, wait: float = 600.0, extract_workers: int = 0, verbose: bool = False,
               prefix: str | None = None) -> WorkerSummary:
    """Join a published crawl and work until the coordinator ends it (one crawl per process); raises
    ``RedisLost`` (exit 3) when Redis was out of reach for longer than a lease."""
    from scrapy.crawler import CrawlerProcess
    from scrapy.settings import Settings

    started = time.monotonic()
    prefix, crawl, config = wait_for_crawl(redis_url, prefix, wait)
    settings = Settings()
    settings.setmodule("crawler.settings", priority="project")
    settings.update(worker_settings(config, redis_url, prefix, extract_workers=extract_workers, verbose=verbose),
                    priority="cmdline")
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(DistributedUrlsSpider)
    process.crawl(
        crawler, listed=[], problems=[], depth=config["depth"], max_pages=config["max_pages"],
        allow=config["allow"], deny=config["deny"], follow=config["follow"],
        stored_links=config.get("stored_links", {}), fresh=config.get("fresh", []), crawl_id=crawl["id"],
    )
    process.start(install_signal_handlers=True)
    spider = crawler.spider
    if isinstance(spider, DistributedUrlsSpider) and spider.redis_lost is not None:
        raise RedisLost(f"worker stopped: {spider.redis_lost}; its requests go back to the queue for other workers")
    if isinstance(spider, DistributedUrlsSpider) and spider.coordinator_lost is not None:
        raise CoordinatorLost(f"worker stopped: {spider.coordinator_lost}")
    stats = crawler.stats.get_stats() if crawler.stats is not None else {}
    return WorkerSummary(crawl["id"], int(stats.get("item_scraped_count", 0)), time.monotonic() - started,
                         int(stats.get("webqa/backlog/waits", 0)), float(stats.get("webqa/backlog/wait_seconds", 0.0)))
