"""A refused connection does not spend the host's delay.

Scrapy times a host's next request from the moment the last one left its queue, whatever became of
it. A connection the host refused reached no server (the kernel answered for a port nothing listens
on), so waiting the delay after it protects nobody, and a job listing a dead host's URLs on several
ports paid a delay per robots.txt. On a refusal this middleware lets the host's next request go at
once. Requests that reach a server stay at least the delay apart: the refused one had itself waited
its turn after the last of them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import DownloadConnectionRefusedError
from twisted.internet.error import ConnectionRefusedError as TxConnectionRefusedError

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler


class RefusedConnectionMiddleware:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RefusedConnectionMiddleware:
        return cls(crawler)

    def process_exception(self, request: Request, exception: BaseException) -> None:
        if isinstance(exception, (DownloadConnectionRefusedError, TxConnectionRefusedError)):
            self._refund(request)
        return None

    def _refund(self, request: Request) -> None:
        engine = self.crawler.engine
        downloader: Any = engine.downloader if engine is not None else None
        if downloader is None:
            return
        slot = downloader.slots.get(downloader.get_slot_key(request))
        if slot is None or slot.transferring:
            return  # another request is on the wire: its own timing stands
        # The downloader's clock (time.monotonic() in Scrapy 2.13+), as crawler/spiders/urls.py uses it.
        slot.lastseen = min(slot.lastseen, time.monotonic() - slot.download_delay())
        if slot.latercall is not None:
            slot.latercall.cancel()
            slot.latercall = None
            downloader._process_queue(slot)
