"""Scrapy pipeline that cleans and chunks pages in a process pool.

trafilatura costs tens of ms of CPU per page (BENCHMARKS.md, "Figures behind code comments"); run on
the reactor thread it would cap the whole crawl on one core. A process pool keeps every core busy while
Scrapy goes on downloading.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import multiprocessing
import os
import signal
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

from scrapy.crawler import Crawler

from pipelines import defaults
from pipelines.page_processing import PageResult, process_page
from pipelines.items import ExtractedPage, FetchedPage, FetchOutcome, internal_failure
from pipelines.robots_meta import noindex_reason

log = logging.getLogger(__name__)

# Libraries that log a WARNING for every empty or odd page; we record those pages ourselves.
QUIET_LOGGERS = ("trafilatura", "htmldate", "courlan", "pdfminer")


def init_worker(lifeline: Connection | None = None) -> None:
    """Run once in every extraction worker, before its first page.

    SIGINT is ignored: Ctrl-C in a terminal reaches the whole process group, and a worker killed
    mid-page would break the pool while Scrapy is still shutting down cleanly; the crawling
    process decides when the pool stops. The extraction libraries' warnings are silenced: on cron
    they would mail one line per empty page, and every failure is recorded in fetch_log anyway.

    ``lifeline`` is the read end of a pipe only the crawling process can write to: when that process
    dies, even by SIGKILL, the kernel closes it and the worker exits (see ``_exit_with_parent``).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    if lifeline is not None:
        threading.Thread(target=_exit_with_parent, args=(lifeline,), name="webqa-lifeline", daemon=True).start()


def _exit_with_parent(lifeline: Connection) -> None:
    """Block until the crawling process closes its end of the lifeline, then end this worker at once.

    A worker waits for work on a queue whose write end it holds itself, so it never sees its parent
    die and would live on as an orphan; PR_SET_PDEATHSIG cannot help, as a worker's parent is the
    forkserver. Once the workers are gone the forkserver and the resource tracker end on their own:
    each exits when the last holder of its pipe does (measured in tests/test_crawl_failures.py).
    """
    try:
        lifeline.recv_bytes()  # nothing is ever sent: this returns or raises only at end of file
    except (EOFError, OSError):
        pass
    os._exit(1)


# multiprocessing starts its helper processes with the interpreter's -W options (sys.warnoptions).
_TRACKER_WARNINGS = "ignore::UserWarning:multiprocessing.resource_tracker"


def quiet_resource_tracker() -> None:
    """After a SIGKILL of the crawl, the resource tracker frees the pool's semaphores and warns that they
    "leaked" on the crawl's stderr: a line in every cron mail about something already cleaned up. Its
    warnings are silenced; it is started with this process's -W options, so this must come first."""
    if _TRACKER_WARNINGS not in sys.warnoptions:
        sys.warnoptions.append(_TRACKER_WARNINGS)


class ExtractionPipeline:
    # A page's worker counts as hung after backstop_factor * max_seconds + backstop_seconds of wall
    # time: stuck without using CPU, or in one long C call, where its CPU deadline (SIGPROF) cannot
    # reach it. Generous on purpose, as max_seconds is CPU time: the factor of 10 lets a page spend its
    # whole CPU budget on a tenth of a core (load 20 on 2 cores, when cron jobs collide) before a kill,
    # and the constant covers a cold worker's start-up; a hung worker only costs its slot for longer.
    backstop_factor = 10.0
    backstop_seconds = 30.0

    def __init__(self, crawler: Crawler, workers: int, max_seconds: float, max_tokens: int, overlap_tokens: int,
                 obey_noindex: bool = True, pdf_max_seconds: float = defaults.PDF_EXTRACT_TIMEOUT,
                 pdf_max_pages: int = defaults.PDF_MAX_PAGES) -> None:
        self.crawler = crawler
        self.pdf_max_seconds = pdf_max_seconds
        self.pdf_max_pages = pdf_max_pages
        # A page that asks not to be indexed is not stored for answering (the spider found the directive).
        self.obey_noindex = obey_noindex
        self.workers = workers
        self.max_seconds = max_seconds
        self.max_tokens = max_tokens
        self.overlap_tokens = overlap_tokens
        self.pool: ProcessPoolExecutor | None = None
        # The crawling process's end of every worker's lifeline (see init_worker); closed after the pool.
        self._lifeline: Connection | None = None
        self._lifeline_reader: Connection | None = None
        # One page per worker in the pool at a time, so the backstop below measures a page's own
        # run time, not the time it spent queued behind others (a crawl of hundreds of pages would
        # otherwise time out the pages waiting at the back of the queue).
        self._slots: asyncio.Semaphore | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ExtractionPipeline:
        settings = crawler.settings
        workers = settings.getint("WEBQA_EXTRACT_WORKERS") or (os.cpu_count() or 1)
        return cls(
            crawler,
            workers=workers,
            max_seconds=settings.getfloat("WEBQA_EXTRACT_TIMEOUT", defaults.EXTRACT_TIMEOUT),
            max_tokens=settings.getint("WEBQA_CHUNK_TOKENS", defaults.CHUNK_TOKENS),
            overlap_tokens=settings.getint("WEBQA_CHUNK_OVERLAP", defaults.CHUNK_OVERLAP),
            obey_noindex=settings.getbool("WEBQA_OBEY_NOINDEX", True),
            pdf_max_seconds=settings.getfloat("WEBQA_PDF_EXTRACT_TIMEOUT", defaults.PDF_EXTRACT_TIMEOUT),
            pdf_max_pages=settings.getint("WEBQA_PDF_MAX_PAGES", defaults.PDF_MAX_PAGES),
        )

    def open_spider(self) -> None:
        # The pool starts with the first page to clean: a re-crawl answered with 304s needs none, and its
        # queues start multiprocessing's resource tracker, a Python process of its own (BENCHMARKS.md,
        # "The fixed cost of a run").
        self.pool = None

    def _new_pool(self) -> ProcessPoolExecutor:
        # forkserver: forking the crawling process itself would copy the reactor and its threads.
        context = multiprocessing.get_context("forkserver")
        quiet_resource_tracker()
        # Each worker then forks from a forkserver that imported the extraction code once, instead of
        # importing trafilatura, lxml and this module itself at its start (the cleaning modules import
        # trafilatura only when they first clean a page, hence its name here).
        context.set_forkserver_preload([__name__, "trafilatura"])
        if self._lifeline_reader is None:
            self._lifeline_reader, self._lifeline = context.Pipe(duplex=False)
        return ProcessPoolExecutor(
            self.workers, mp_context=context, initializer=init_worker, initargs=(self._lifeline_reader,)
        )

    def _replace_pool(self, broken: ProcessPoolExecutor, *, kill: bool = False) -> None:
        """A worker died (a crash in C code, the OOM killer) or hangs: a broken pool refuses all
        further work, so every later page would fail. The first to notice starts a new pool.

        A hung worker is killed (``kill``): it would never take work again, and shutting its pool
        down waits for it, so the crawl would hang at exit. Pages still in that pool fail with
        BrokenProcessPool and are cleaned again in the new one.
        """
        if self.pool is not broken:
            return
        self.pool = self._new_pool()
        if kill:
            # ProcessPoolExecutor has no public way to stop a running task before Python 3.14.
            for process in list(getattr(broken, "_processes", {}).values()):
                process.kill()
        broken.shutdown(wait=False)

    def close_spider(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        # Ends any worker of a replaced pool that is still finishing a page nobody waits for.
        for end in (self._lifeline, self._lifeline_reader):
            if end is not None:
                end.close()
        self._lifeline = self._lifeline_reader = None

    def abandon(self) -> None:
        """A second signal: stop the workers mid-page and release the pool's resources, without waiting."""
        if self.pool is not None:
            for process in list(getattr(self.pool, "_processes", {}).values()):
                process.kill()
        self.close_spider()

    async def process_item(self, item: Any) -> Any:
        if not isinstance(item, FetchedPage):
            return item
        if item.noindex and self.obey_noindex:
            if self.crawler.stats is not None:
                self.crawler.stats.inc_value("webqa/skipped/noindex")
            return FetchOutcome(item.url, "skipped", noindex_reason(item.noindex), item.status)
        # A document of another kind than HTML (a PDF) hands its bytes over, with its own CPU budget.
        document = item.kind != "html" and item.body is not None
        max_seconds = self.pdf_max_seconds if document else self.max_seconds
        work = partial(
            process_page, item.body if document else item.html, item.url,
            max_seconds=max_seconds, max_tokens=self.max_tokens, overlap_tokens=self.overlap_tokens,
            kind=item.kind, pdf_max_pages=self.pdf_max_pages,
        )
        loop = asyncio.get_running_loop()
        if self.pool is None:
            self.pool = self._new_pool()
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.workers)
        async with self._slots:
            try:
                return await self._extract(item, work, loop, max_seconds)
            except Exception as exc:  # noqa: BLE001 - a bug must cost this page, recorded, not lose it
                outcome = internal_failure(item.url, exc, item.status)
                log.error("%s: %s", item.url, outcome.reason, exc_info=exc)
                if self.crawler.stats is not None:
                    self.crawler.stats.inc_value("webqa/failed/internal_error")
                return outcome

    async def _extract(self, item: FetchedPage, work: Any, loop: asyncio.AbstractEventLoop, max_seconds: float) -> Any:
        for attempt in (1, 2):
            pool = self.pool
            assert pool is not None
            try:
                # The worker bounds its CPU time with SIGPROF; the outer wall-clock wait is a backstop
                # for a worker that is stuck (see backstop_factor).
                # Submitted from a thread: the pool starts a worker on demand, and the first one waits for
                # the forkserver to import the extraction code, which would hold up the reactor meanwhile. On
                # demand, not with the crawl: a re-crawl answered with 304s needs no worker at all.
                while True:
                    try:
                        submitted = await loop.run_in_executor(None, pool.submit, work)
                        break
                    except RuntimeError:  # "cannot schedule new futures after shutdown"
                        if self.pool is pool or self.pool is None:
                            raise
                        # Replaced while this page waited for its thread (another page's worker hung or
                        # died): the new pool takes it, or the next one if that is replaced meanwhile too.
                        # Bounded: each round needs another replacement, i.e. another page's failure.
                        pool = self.pool
                result: PageResult = await asyncio.wait_for(
                    asyncio.wrap_future(submitted),
                    timeout=self.backstop_factor * max_seconds + self.backstop_seconds,
                )
                break
            except asyncio.TimeoutError:
                self._replace_pool(pool, kill=True)  # the stuck worker would hold its slot for good
                return self._failed(item, "extraction did not finish")
            except BrokenProcessPool:
                self._replace_pool(pool)
                # Every page in the pool when a worker died fails with it; the one that killed it
                # will kill the next pool too, the others deserve a second chance.
                if attempt == 2:
                    return self._failed(item, "extraction worker died")
                log.warning("An extraction worker died; cleaning %s again in a new pool", item.url)
        if result.skipped:
            log.info("Skipping %s: %s", item.url, result.skipped)
            if self.crawler.stats is not None:
                self.crawler.stats.inc_value("webqa/skipped/document")
            return FetchOutcome(item.url, "skipped", result.skipped, item.status)
        if result.error or result.clean is None:
            return self._failed(item, result.error or "extraction produced nothing")
        clean = result.clean
        stats = self.crawler.stats
        if stats is not None:
            stats.inc_value(f"webqa/extractor/{clean.method}")
        return ExtractedPage(
            # A document's bytes are not needed once read (and a page shipped through Redis is JSON).
            page=dataclasses.replace(item, body=None) if item.body is not None else item, title=clean.title, lang=clean.lang, extractor=clean.method, text=clean.text,
            text_bytes=clean.text_bytes, chunks=list(result.chunks), seconds=result.seconds,
        )

    def _failed(self, item: FetchedPage, reason: str) -> FetchOutcome:
        log.warning("Extraction failed for %s: %s", item.url, reason)
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value("webqa/failed/extraction")
        return FetchOutcome(item.url, "failed", reason, item.status)
