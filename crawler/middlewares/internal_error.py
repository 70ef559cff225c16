"""An unexpected exception while handling a response is that URL's failure, not a lost URL.

Scrapy logs an exception raised by a spider callback (or by a spider middleware's output processing)
and drops the response: the URL would end with neither a page nor a fetch_log row, and a crawl of only
such URLs would report "no URL could be fetched (0 failed, 0 skipped)". Here it becomes a ``FetchOutcome``
"failed" naming the exception (``pipelines.items.internal_failure``), logged at ERROR with its traceback,
and the crawl goes on with the other URLs.

The spider yields each URL's record before the requests for its links; an exception after the record
(while following the links) is logged, and the URL keeps its record rather than gaining a second one.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.statscollectors import StatsCollector

from pipelines.items import FetchedPage, FetchOutcome, internal_failure

log = logging.getLogger(__name__)


class InternalErrorMiddleware:
    """Turns an exception from the spider's handling of a response into the URL's failed record."""

    def __init__(self, crawler: Crawler) -> None:
        self.stats = crawler.stats
        # Responses being handled whose URL has its record (page or outcome) already.
        self._recorded: set[int] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> InternalErrorMiddleware:
        return cls(crawler)

    async def process_spider_output(self, response: Response, result: AsyncIterator[Any]) -> AsyncIterator[Any]:
        key = id(response)
        try:
            async for output in result:
                if isinstance(output, (FetchedPage, FetchOutcome)):
                    self._recorded.add(key)
                yield output
        finally:
            self._recorded.discard(key)

    def process_spider_exception(self, response: Response, exception: Exception) -> Iterable[Any] | None:
        if isinstance(exception, HttpError):  # HttpErrorMiddleware's, and the spider's errback records it
            return None
        request = response.request
        url = request.cb_kwargs.get("listed_url", request.url) if request is not None else response.url
        return internal_error(url, exception, response.status, recorded=id(response) in self._recorded,
                              stats=self.stats)


def internal_error(url: str, exc: Exception, status: int | None = None, *, recorded: bool = False,
                   stats: StatsCollector | None = None) -> list[FetchOutcome]:
    """Log an unexpected exception in the handling of ``url`` and return what records it: its failure,
    or nothing when the URL has its record already."""
    if stats is not None:
        stats.inc_value("webqa/failed/internal_error")
    if recorded:
        # The URL keeps its one record, but the crawl did not do all it should: its summary says so and
        # its exit code is partial (crawler.run.CrawlSummary.internal_errors).
        if stats is not None:
            stats.inc_value("webqa/count/internal_errors")
        log.error("Internal error after recording %s (some of its links may not be followed); please report it",
                  url, exc_info=exc)
        return []
    outcome = internal_failure(url, exc, status)
    log.error("%s: %s", url, outcome.reason, exc_info=exc)
    return [outcome]


def guarded(url: str, output: Iterable[Any], stats: StatsCollector | None = None) -> Iterator[Any]:
    """``output`` (a spider errback's), with an unexpected exception in it recorded as by the middleware:
    Scrapy hands an errback's output and exceptions to no spider middleware."""
    recorded = False
    try:
        for item in output:
            recorded = recorded or isinstance(item, (FetchedPage, FetchOutcome))
            yield item
    except Exception as exc:  # noqa: BLE001 - whatever it is, the URL must end recorded
        yield from internal_error(url, exc, recorded=recorded, stats=stats)
