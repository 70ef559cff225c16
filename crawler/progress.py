"""A one-line progress display on a terminal while the crawl runs."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured

COUNTS = ("new", "changed", "unchanged", "not_modified", "skipped", "failed")


def progress_line(done: int, total: int, elapsed_s: float, host: str | None, counts: Mapping[str, int],
                  width: int) -> str:
    """The progress text, at most ``width - 1`` characters (a line filling the last column wraps on some terminals).

    The essentials come first (done/total, rate, current host) so that a narrow terminal cuts the
    per-outcome counts, never them.
    """
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    parts = [f"{done}/{total} pages", f"{rate:.1f} pages/s"]
    if host:
        parts.append(host)
    tally = ", ".join(f"{counts.get(key, 0)} {key.replace('_', ' ')}" for key in COUNTS if counts.get(key, 0))
    line = "  " + "  ".join(parts) + (f"  ({tally})" if tally else "")
    return fit(line, width - 1)


def fit(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with an ellipsis."""
    if limit <= 0:
        return ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def terminal_width(stream: TextIO) -> int:
    """Columns of the terminal ``stream`` writes to: $COLUMNS first, as shutil does; 80 when unknown."""
    if os.environ.get("COLUMNS", "").isdigit() and int(os.environ["COLUMNS"]) > 0:
        return int(os.environ["COLUMNS"])
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, OSError, ValueError):
        # shutil looks at stdout, which may be a terminal when stderr is not (2>log).
        return shutil.get_terminal_size((80, 24)).columns


class ProgressReporter:
    """Rewrites one stderr line with the running counts; off unless WEBQA_PROGRESS (set on a TTY)."""

    def __init__(self, crawler: Crawler, stream: TextIO, interval: float) -> None:
        self.crawler = crawler
        self.stream = stream
        self.interval = interval
        self.last = 0.0
        self.items = 0
        self.started = time.monotonic()
        self.host: str | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ProgressReporter:
        if not crawler.settings.getbool("WEBQA_PROGRESS"):
            raise NotConfigured("progress display is for terminals (WEBQA_PROGRESS is off)")
        reporter = cls(crawler, sys.stderr, crawler.settings.getfloat("WEBQA_PROGRESS_INTERVAL", 0.5))
        crawler.signals.connect(reporter.item_done, signal=signals.item_scraped)
        crawler.signals.connect(reporter.item_done, signal=signals.item_dropped)
        crawler.signals.connect(reporter.closed, signal=signals.spider_closed)
        return reporter

    def item_done(self, item: Any = None, *args: Any, **kwargs: Any) -> None:
        self.items += 1
        # FetchOutcome and FetchedPage carry the URL; ExtractedPage carries it on its page.
        url = getattr(item, "url", None) or getattr(getattr(item, "page", None), "url", None)
        if isinstance(url, str):
            self.host = urlsplit(url).hostname or self.host
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            self._draw()

    def _total(self) -> int:
        # Every scheduled URL and every rejected line ends as exactly one item (crawler/spiders/urls.py).
        spider = getattr(self.crawler, "spider", None)
        scheduled = int(getattr(spider, "scheduled", 0)) + sum(1 for p in getattr(spider, "problems", ()) if not p.duplicate)
        return max(scheduled, self.items)

    def _draw(self) -> None:
        stats = self.crawler.stats.get_stats() if self.crawler.stats is not None else {}
        counts = {key: int(stats.get(f"webqa/count/{key}", 0)) for key in COUNTS}
        width = terminal_width(self.stream)
        line = progress_line(self.items, self._total(), time.monotonic() - self.started, self.host, counts, width)
        # Padding to the width overwrites a longer previous line without a terminal escape sequence.
        self.stream.write("\r" + line.ljust(width - 1))
        self.stream.flush()

    def closed(self, *args: Any, **kwargs: Any) -> None:
        self._draw()
        self.stream.write("\n")
        self.stream.flush()
