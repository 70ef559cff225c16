"""crawl.max_duration: Scrapy's CLOSESPIDER_TIMEOUT, made to bound the crawl.

Scrapy's close waits for every request the downloader holds, and with a per-host delay that is every
request already handed to a host's slot (up to CONCURRENT_REQUESTS), so a bound shorter than the
host's delays ran on until every page was fetched (BENCHMARKS.md, "Figures behind code comments").
Here a timeout also hands back the requests still waiting in the slots (each recorded as skipped), so
only the transfers on the wire finish and what they fetched is stored.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from scrapy.exceptions import IgnoreRequest
from scrapy.extensions.closespider import CloseSpider
from twisted.python.failure import Failure

log = logging.getLogger(__name__)

TIMEOUT_REASON = "closespider_timeout"
NOT_FETCHED = "not fetched: the crawl reached crawl.max_duration"


def release_queued_requests(downloader: Any, reason: str) -> int:
    """Fail every request waiting in a downloader slot (not yet sent) with ``IgnoreRequest(reason)``."""
    released = 0
    for slot in list(downloader.slots.values()):
        if slot.latercall is not None:
            slot.latercall.cancel()
            slot.latercall = None
        while slot.queue:
            _request, deferred = slot.queue.popleft()
            deferred.errback(Failure(IgnoreRequest(reason)))
            released += 1
    return released


class BoundedCloseSpider(CloseSpider):
    """Scrapy's CloseSpider extension (same settings); its timeout also releases the queued requests."""

    def _close_spider(self, reason: str) -> None:
        super()._close_spider(reason)  # schedules the engine's close as a task
        if reason == TIMEOUT_REASON:
            # After the close task's first step has marked the engine as closing, so that nothing new
            # leaves the scheduler for the slots emptied here.
            asyncio.get_event_loop().call_soon(self._release)

    def _release(self) -> None:
        engine = self.crawler.engine
        if engine is not None and engine.downloader is not None:
            released = release_queued_requests(engine.downloader, NOT_FETCHED)
            log.info("crawl.max_duration reached: %d queued requests not sent", released)
