"""Items on their way from a worker to the coordinator's single DuckDB writer, as JSON in Redis.

The coordinator reads them back through ``entries.parse_item``, which trusts nothing it finds there."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from typing import Any

import redis
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy_redis.pipelines import RedisPipeline

from crawler.distributed.backlog import DEFAULT_BACKLOG, DEFAULT_BACKLOG_WAIT, BacklogWait
from pipelines.items import ExtractedPage, FetchOutcome

log = logging.getLogger(__name__)


def encode_item(item: ExtractedPage | FetchOutcome) -> bytes:
    if isinstance(item, ExtractedPage):
        page = dataclasses.asdict(item.page)
        page["fetched_at"] = item.page.fetched_at.isoformat()
        body = {f.name: getattr(item, f.name) for f in dataclasses.fields(item) if f.name not in ("page", "chunks")}
        payload = {"kind": "page", "page": page, **body, "chunks": [dataclasses.asdict(c) for c in item.chunks]}
    else:
        payload = {"kind": "outcome", **dataclasses.asdict(item)}
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def item_url(item: ExtractedPage | FetchOutcome) -> str:
    return item.page.url if isinstance(item, ExtractedPage) else item.url


class LeaseItemPipeline(RedisPipeline):
    """scrapy-redis's item pipeline, for Scrapy 2.19 (``process_item(item)``), that pushes each URL's
    item and ends the URL's lease in one Redis script (``Frontier.ack``), waiting while the coordinator's
    backlog is full (``backlog.BacklogWait``)."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(server=None)
        self.crawler = crawler
        self.backlog: BacklogWait | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> LeaseItemPipeline:
        if not crawler.settings.get("WEBQA_REDIS_URL"):
            raise NotConfigured("WEBQA_REDIS_URL is not set: items go to the local store")
        return cls(crawler)

    def _wait(self, frontier: Any) -> BacklogWait:
        if self.backlog is None:
            settings = self.crawler.settings
            self.backlog = BacklogWait(settings.getint("WEBQA_REDIS_BACKLOG", DEFAULT_BACKLOG),
                                       settings.getfloat("WEBQA_REDIS_BACKLOG_WAIT", DEFAULT_BACKLOG_WAIT),
                                       frontier.items_waiting, lambda: frontier.stopping)
        return self.backlog

    async def process_item(self, item: Any) -> Any:
        if not isinstance(item, (ExtractedPage, FetchOutcome)):
            return item
        frontier = self.crawler.spider.frontier  # type: ignore[union-attr]
        data, url = encode_item(item), item_url(item)
        # A large page takes a few ms to send: off the reactor thread (BacklogWait runs it in a thread),
        # which times the gate's grants. A record of a URL never leased (a link too long to request) has
        # no lease to end: it is only handed over.
        if url in frontier.held:
            def attempt(bound: int) -> int:
                return frontier.ack(url, data, bound)
        else:
            def attempt(bound: int) -> int:
                return frontier.push_item(data, bound)
        backlog = self._wait(frontier)
        try:
            _result, waited = await backlog.hand_over(attempt)
        except redis.RedisError as exc:  # the lease expires and another worker fetches the URL again
            log.warning("Cannot hand the item for %s to Redis: %s", url, exc)
            return item
        if waited:
            await self._count_wait(frontier, backlog, waited)
        return item

    async def _count_wait(self, frontier: Any, backlog: BacklogWait, seconds: float) -> None:
        """In this worker's stats (its summary line) and in the crawl's (the coordinator reports them)."""
        stats = self.crawler.stats
        if stats is not None:
            stats.set_value("webqa/backlog/waits", backlog.waits)
            stats.set_value("webqa/backlog/wait_seconds", round(backlog.wait_seconds, 3))
            stats.set_value("webqa/backlog/forced", backlog.forced)

        def count() -> None:
            pipe = frontier.r.pipeline(transaction=False)
            pipe.hincrby(frontier.keys.stats, "backlog_waits", 1)
            pipe.hincrby(frontier.keys.stats, "backlog_wait_ms", int(seconds * 1000))
            pipe.execute()

        try:
            await asyncio.get_running_loop().run_in_executor(None, count)
        except redis.RedisError as exc:  # only a count: the item is handed over
            log.debug("Cannot count a backlog wait in Redis: %s", exc)
