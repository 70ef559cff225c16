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
    item and ends the URL's lease in one Redis script (``Frontier.ack``)."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(server=None)
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> LeaseItemPipeline:
        if not crawler.settings.get("WEBQA_REDIS_URL"):
            raise NotConfigured("WEBQA_REDIS_URL is not set: items go to the local store")
        return cls(crawler)

    async def process_item(self, item: Any) -> Any:
        if not isinstance(item, (ExtractedPage, FetchOutcome)):
            return item
        frontier = self.crawler.spider.frontier  # type: ignore[union-attr]
        data = encode_item(item)
        # A large page takes a few ms to send: off the reactor thread, which times the gate's grants.
        # A record of a URL never leased (a link too long to request) has no lease to end: it is only handed over.
        def push(_url: str, payload: bytes) -> None:
            frontier.r.rpush(frontier.keys.items, payload)

        hand_over = frontier.ack if item_url(item) in frontier.held else push
        try:
            await asyncio.get_running_loop().run_in_executor(None, hand_over, item_url(item), data)
        except redis.RedisError as exc:  # the lease expires and another worker fetches the URL again
            log.warning("Cannot hand the item for %s to Redis: %s", item_url(item), exc)
        return item
