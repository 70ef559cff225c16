"""Retries that honour ``Retry-After`` on 429 and 503, replacing Scrapy's RetryMiddleware.

Scrapy 2.19 retries 429 and 503 like any other retryable status: at once (after the host's
download delay), ignoring a ``Retry-After`` the server sent. Here:

* a 429 or 503 with ``Retry-After: N`` (seconds) or an HTTP date is retried after that long, and
  the host's other requests wait too: the server asked for a pause, not for another URL. The wait
  is a timer on the reactor (an awaited ``deferLater`` in ``process_request``), never a sleep;
* a ``Retry-After`` above ``WEBQA_MAX_RETRY_AFTER`` seconds (60 by default) is not waited for: the
  URL is given up at once and recorded as failed with the reason; a cron job does not wait an hour;
* how often is still bounded by ``RETRY_TIMES``; without ``Retry-After`` (or with one that cannot
  be read) everything is as in Scrapy.
"""

from __future__ import annotations

import email.utils
import logging
import math
import time
from datetime import timezone
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.downloadermiddlewares.retry import RetryMiddleware
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.response import response_status_message

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

log = logging.getLogger(__name__)

DEFAULT_MAX_RETRY_AFTER = 60.0
RETRY_AFTER_STATUSES = frozenset({429, 503})


def parse_retry_after(value: bytes | str | None, now: float) -> float | None:
    """Seconds to wait according to a ``Retry-After`` value (RFC 9110 §10.2.3), or None if unreadable.

    ``delay-seconds`` (a non-negative integer) or an HTTP date (``now`` is Unix time); a date in
    the past means "now" (0).
    """
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    if not text:
        return None
    if text.isdigit():
        return float(int(text))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    seconds = when.timestamp() - now
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def _seconds(value: float) -> str:
    return f"{value:g}" if value < 1e6 else f"{value:.3g}"


class RetryAfterTooLong(IgnoreRequest):
    """The server asked for a longer pause than we wait; recorded as ``failed`` with the message."""

    outcome = "failed"


class RetryAfterMiddleware(RetryMiddleware):
    """RetryMiddleware that waits as long as ``Retry-After`` says on 429/503, within a bound."""

    def __init__(self, settings: BaseSettings) -> None:
        super().__init__(settings)
        self.max_retry_after = settings.getfloat("WEBQA_MAX_RETRY_AFTER", DEFAULT_MAX_RETRY_AFTER)
        # Downloader slot key (the host) → time.monotonic() before which it gets no request.
        self._paused_until: dict[str, float] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RetryAfterMiddleware:
        mw = cls(crawler.settings)
        mw.crawler = crawler
        # Fired after the download, before the host's slot lets its next request go: the only
        # moment a pause can still hold requests already queued for the host.
        crawler.signals.connect(mw._response_downloaded, signal=signals.response_downloaded)
        return mw

    def _retry_after(self, request: Request, response: Response) -> float | None:
        """The Retry-After of a 429/503 this middleware acts on, in seconds, else None."""
        if (
            request.meta.get("dont_retry", False)
            or response.status not in RETRY_AFTER_STATUSES
            or response.status not in self.retry_http_codes
        ):
            return None
        return parse_retry_after(response.headers.get(b"Retry-After"), time.time())

    def _response_downloaded(self, response: Response, request: Request, **_: object) -> None:
        delay = self._retry_after(request, response)
        if delay is not None and 0 < delay <= self.max_retry_after:
            self._inc("webqa/retry_after/pauses")
            self._pause_host(request, delay)

    async def process_request(self, request: Request) -> None:
        """Hold any request for a host that asked for a pause until the pause is over."""
        if not self._paused_until:
            return None
        key = self._slot_key(request)
        while True:
            wait = self._paused_until.get(key, 0.0) - time.monotonic()
            if wait <= 0:
                self._paused_until.pop(key, None)
                return None
            await self._sleep(wait)  # a later Retry-After may have extended the pause: look again

    def process_response(self, request: Request, response: Response) -> Request | Response:
        delay = self._retry_after(request, response)
        if delay is None:
            return super().process_response(request, response)
        if delay > self.max_retry_after:
            self._inc("webqa/retry_after/too_long")
            raise RetryAfterTooLong(
                f"Retry-After too long: HTTP {response.status} asked to wait {_seconds(delay)} s, "
                f"more than the {_seconds(self.max_retry_after)} s webqa waits (WEBQA_MAX_RETRY_AFTER); "
                "not retried"
            )
        if delay > 0:
            # The whole host waits, whether or not this URL has retries left (already done when the
            # response_downloaded signal fired; pausing is idempotent).
            self._pause_host(request, delay)
            log.debug("%s answered %s with Retry-After %s s: pausing the host", request.url, response.status, delay)
        retry = self._retry(request, response_status_message(response.status))
        return retry or response

    def _pause_host(self, request: Request, delay: float) -> None:
        """No request to this host before ``delay`` seconds from now.

        Two places hold requests: ``process_request`` (requests reaching the downloader from now on,
        the retry included) and the host's downloader slot, whose queue may already hold requests
        that passed this middleware; the slot's own delay logic keeps them until ``lastseen`` plus
        its delay, so ``lastseen`` is moved into the future (everything else that touches it only
        ever raises it).
        """
        now = time.monotonic()
        key = self._slot_key(request)
        self._paused_until[key] = max(self._paused_until.get(key, 0.0), now + delay)
        engine = getattr(self.crawler, "engine", None)
        slot = engine.downloader.slots.get(key) if engine is not None else None
        if slot is None:
            return
        if slot.delay <= 0:
            # A slot without a delay never looks at lastseen; a delay too small to notice makes it.
            slot.delay = 1e-3
        # The slot waits at least delay × (1 - jitter) after lastseen.
        shortest = slot.delay * max(0.0, 1.0 - slot.jitter)
        slot.lastseen = max(slot.lastseen, now + delay - shortest)

    def _slot_key(self, request: Request) -> str:
        engine = getattr(self.crawler, "engine", None)
        if engine is not None:
            return engine.downloader.get_slot_key(request)
        from urllib.parse import urlsplit

        return urlsplit(request.url).hostname or ""

    @staticmethod
    async def _sleep(seconds: float) -> None:
        from twisted.internet import reactor, task

        await maybe_deferred_to_future(task.deferLater(reactor, seconds, lambda: None))

    def _inc(self, key: str) -> None:
        stats = getattr(self.crawler, "stats", None)
        if stats is not None:
            stats.inc_value(key)
