"""A one-line progress display on a terminal while the crawl runs."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from scrapy import signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured


class ProgressReporter:
    """Rewrites one stderr line with the running counts; off unless WEBQA_PROGRESS (set on a TTY)."""

    def __init__(self, crawler: Crawler, stream: TextIO, interval: float) -> None:
        self.crawler = crawler
        self.stream = stream
        self.interval = interval
        self.last = 0.0
        self.items = 0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ProgressReporter:
        if not crawler.settings.getbool("WEBQA_PROGRESS"):
            raise NotConfigured("progress display is for terminals (WEBQA_PROGRESS is off)")
        reporter = cls(crawler, sys.stderr, crawler.settings.getfloat("WEBQA_PROGRESS_INTERVAL", 0.5))
        crawler.signals.connect(reporter.item_done, signal=signals.item_scraped)
        crawler.signals.connect(reporter.item_done, signal=signals.item_dropped)
        crawler.signals.connect(reporter.closed, signal=signals.spider_closed)
        return reporter

    def item_done(self, *args: Any, **kwargs: Any) -> None:
        self.items += 1
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            self._draw()

    def _draw(self) -> None:
        stats = self.crawler.stats.get_stats() if self.crawler.stats is not None else {}

        def n(key: str) -> int:
            return int(stats.get(f"webqa/count/{key}", 0))

        line = (
            f"  {self.items} URLs done: {n('new')} new, {n('changed')} changed, {n('unchanged')} unchanged, "
            f"{n('not_modified')} not modified, {n('skipped')} skipped, {n('failed')} failed"
        )
        self.stream.write("\r" + line[:150].ljust(100))
        self.stream.flush()

    def closed(self, *args: Any, **kwargs: Any) -> None:
        self._draw()
        self.stream.write("\n")
        self.stream.flush()
