"""SIGINT/SIGTERM during a crawl: the first stops it soon and cleanly, the second at once.

Scrapy's own handler stops the engine gracefully, but "gracefully" waits for every request the
downloader holds, and with a per-host delay that is every request already handed to a host's slot:
a crawl of a few hundred pages on one host then runs to its end, and cron's `timeout` looks ignored.
Here the first signal stops the engine *and* hands back the requests still waiting in the slots
(each recorded as skipped, "the crawl was interrupted"), so only the transfers on the wire finish
and what they fetched is stored. The second signal stops the reactor without waiting.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from types import FrameType
from typing import Any

from scrapy.crawler import Crawler, CrawlerProcess
from scrapy.utils.defer import deferred_from_coro

from crawler.closespider import release_queued_requests
from pipelines.signals import StopSignalScope

log = logging.getLogger(__name__)

INTERRUPTED_REASON = "not fetched: the crawl was interrupted"


class GracefulShutdown(StopSignalScope):
    """Installed in the main thread from the start of a crawl; ``attach`` names the process once it exists.

    A signal before the reactor runs is noted (``signal_name``): the caller then does not start the crawl.
    One that comes while Scrapy is still starting its engine waits for the engine, then stops it.
    """

    # How long a stop waits for an engine that is still starting (polls of 50 ms) before stopping the reactor.
    engine_wait_polls = 200

    def __init__(self) -> None:
        self.process: CrawlerProcess | None = None
        self.crawler: Crawler | None = None
        self.signal_name: str | None = None  # the first signal received, e.g. "SIGTERM"
        self.immediate = False  # a second signal came
        self._polls = 0

    def attach(self, process: CrawlerProcess, crawler: Crawler) -> None:
        self.process = process
        self.crawler = crawler

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        from twisted.internet import reactor

        # Only flags and callFromThread here: a signal handler must not log or touch Scrapy's state.
        if self.signal_name is None:
            self.signal_name = signal.Signals(signum).name
            if self.crawler is not None:
                reactor.callFromThread(self._stop)  # type: ignore[attr-defined]
        else:
            self.immediate = True
            if self.crawler is not None:
                reactor.callFromThread(self._kill)  # type: ignore[attr-defined]

    def _stop(self) -> None:
        log.info("Received %s: finishing the requests in flight, then stopping (send it again to stop now)",
                 self.signal_name)
        from twisted.internet import reactor

        assert self.crawler is not None
        engine = self.crawler.engine
        if engine is None or not engine.running:
            # Still starting (the engine runs once the reactor has set it up): try again shortly.
            self._polls += 1
            if self._polls < self.engine_wait_polls and (engine is None or self.crawler.crawling):
                reactor.callLater(0.05, self._stop)  # type: ignore[attr-defined]
            elif self.crawler.crawling:
                self._kill()
            return
        # Stopping first sets engine.running to False, so nothing new leaves the scheduler while the
        # slots are emptied.
        deferred_from_coro(self.crawler.stop_async())
        # One loop turn later, when the stop has begun, as crawler/closespider.py does for max_duration.
        asyncio.get_event_loop().call_soon(release_queued_requests, engine.downloader, INTERRUPTED_REASON)

    def _kill(self) -> None:
        log.info("Received %s again: stopping now", self.signal_name)
        from twisted.internet import reactor

        try:
            reactor.stop()  # type: ignore[attr-defined]
        except RuntimeError:
            pass  # already stopping
