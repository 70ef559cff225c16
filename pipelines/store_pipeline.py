"""Scrapy pipeline that writes pages, chunks and the fetch log to the DuckDB store."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import duckdb
from scrapy import signals
from scrapy.crawler import Crawler
from scrapy.exceptions import DropItem, NotConfigured
from scrapy.utils.defer import deferred_from_coro

from pipelines.items import ExtractedPage, FetchOutcome, internal_failure
from pipelines.store import PageRecord, Store

log = logging.getLogger(__name__)

# What a write the database refused raises: DuckDB's errors (a full disk reaches us as an IO Error),
# or the OS's own when a file cannot be written at all.
STORAGE_ERRORS = (duckdb.Error, OSError)
# The close reason the pipeline gives when the database stops accepting writes.
STORAGE_ERROR = "storage_error"
# Stats key holding the one-line description of the first failed write, for ``crawler.run``.
STORAGE_ERROR_STAT = "webqa/storage_error"


def crawl_status(reason: str | None) -> str:
    """The crawl_runs status for the reason Scrapy closed the spider with."""
    return {"finished": "done", "closespider_timeout": "timed_out", STORAGE_ERROR: "failed"}.get(
        reason or "", "interrupted")


def describe_storage_error(db_path: str, exc: BaseException) -> str:
    """One line naming the database and what the OS said (No space left on device, File too large …)."""
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).strip().splitlines()[0]
    return (f"{db_path}: writing to the database failed: {detail}; the crawl stopped and the pages stored "
            "before it are kept; free space on that disk and crawl again")


class StorePipeline:
    """Opens the store for the crawl and records every item (pages with their selection indexes).

    Items are written in batches, each batch of pages one transaction (Store.save_pages): a batch is
    written when it holds ``WEBQA_STORE_BATCH_PAGES`` pages, or ``WEBQA_STORE_BATCH_ITEMS`` items of any kind
    (a 304 or a failure costs a row in one statement per batch, a page a dozen statements of its own), or its
    oldest item has waited ``WEBQA_STORE_BATCH_SECONDS``, so a crawl that dies midway loses at most those last
    seconds of work. Counting pages apart keeps a re-crawl's few changed pages together: among hundreds of
    304s each had a batch, and its statements, to itself, which kept the writer busy (BENCHMARKS.md, "The
    daily re-crawl as a crawl").
    The writes run on one writer thread, in arrival order: a DuckDB commit takes tens to hundreds of ms
    (BENCHMARKS.md, "Figures behind code comments"), and on the reactor thread it would hold back every
    request due meanwhile, so a request went out late and the next one to the same host (timed from when
    the late one was due) came less than the promised delay after it. DuckDB releases the GIL while it works.

    A write the database refuses (a full disk) stops the crawl: every later page would fail the same way.
    Only what was committed is counted, so nothing is reported as fetched that was not stored.
    """

    batch_pages = 50
    batch_items = 500
    batch_seconds = 2.0

    def __init__(self, crawler: Crawler, db_path: str, job_name: str | None) -> None:
        self.crawler = crawler
        self.db_path = db_path
        self.job_name = job_name
        self.store: Store | None = None
        self.crawl_run_id: int | None = None
        self.writer: ThreadPoolExecutor | None = None
        # The first write the database refused (one line); once set, nothing more is written.
        self.failure: str | None = None
        self._closing: Any = None
        self._pending: list[ExtractedPage | FetchOutcome] = []
        self._pending_urls: set[str] = set()
        self._pending_pages = 0
        self._timer: asyncio.TimerHandle | None = None
        # Counts of committed writes, from the writer thread; stats are only touched on the reactor thread.
        self._written: queue.SimpleQueue[dict[str, int]] = queue.SimpleQueue()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StorePipeline:
        db_path = crawler.settings.get("WEBQA_DB")
        if not db_path:
            raise NotConfigured("WEBQA_DB is not set: no database to store pages in")
        pipeline = cls(crawler, db_path, crawler.settings.get("WEBQA_JOB_NAME"))
        pipeline.batch_pages = max(1, crawler.settings.getint("WEBQA_STORE_BATCH_PAGES", cls.batch_pages))
        pipeline.batch_items = max(1, crawler.settings.getint("WEBQA_STORE_BATCH_ITEMS", cls.batch_items))
        pipeline.batch_seconds = crawler.settings.getfloat("WEBQA_STORE_BATCH_SECONDS", cls.batch_seconds)
        # The run is finished there, not in close_spider: only the signal carries the close reason.
        crawler.signals.connect(pipeline.spider_closed, signal=signals.spider_closed)
        return pipeline

    def open_spider(self) -> None:
        # Every URL given counts as requested, the invalid ones included (they are logged); a URL listed
        # twice counts once.
        spider = self.crawler.spider
        requested = len(getattr(spider, "listed", ())) + sum(
            1 for problem in getattr(spider, "problems", ()) if not getattr(problem, "duplicate", False))
        try:
            self.store = Store.open(self.db_path)
            self.store.set_threads(1)
            self.crawl_run_id = self.store.begin_crawl(self.job_name, urls_requested=requested)
        except STORAGE_ERRORS as exc:
            # The engine is still opening: record the failure now (one Error line at the end, not a
            # traceback) and close the spider once it runs, before anything is fetched for nothing.
            self._failed(exc, stop=False)
            if self.store is not None:
                with contextlib.suppress(*STORAGE_ERRORS):
                    self.store.close()
                self.store = None  # nothing of this crawl to finish at its close
            asyncio.get_running_loop().call_soon(self._stop_after_failed_open)
            return
        if self.crawler.stats is not None:
            self.crawler.stats.set_value("webqa/crawl_run_id", self.crawl_run_id)
        # One thread: the DuckDB connection is used by one thread at a time, writes stay in order.
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="webqa-store")

    def close_spider(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.writer is not None:
            self.writer.shutdown(wait=True)
            self.writer = None
        if self._pending and self.failure is None and self.store is not None:
            batch, self._pending = self._pending, []
            self._pending_urls.clear()
            self._pending_pages = 0
            try:
                self._write(batch)
            except STORAGE_ERRORS as exc:
                self._failed(exc, stop=False)
        self._count_written()

    def spider_closed(self, reason: str) -> None:
        if self.store is None:
            return
        stats = self.crawler.stats.get_stats() if self.crawler.stats is not None else {}
        counts = {key.removeprefix("webqa/count/"): int(value) for key, value in stats.items()
                  if key.startswith("webqa/count/")}
        try:
            # Pages are indexed as they are written; only a database indexed by an older version needs a build.
            if self.failure is None and self.store.fts_is_stale():
                self.store.rebuild_fts()
            assert self.crawl_run_id is not None
            # A failed write may have come after Scrapy's own reason was settled ("finished"); a signal's
            # stop (crawler/shutdown.py) arrives as "shutdown" and is recorded interrupted.
            status = crawl_status(STORAGE_ERROR if self.failure else reason)
            if self.failure is None:
                self._record_job_pages(complete=status == "done")
                # The crawl's pages stored as duplicates of another (canonical, same text): listed in the summary.
                reached = list(getattr(self.crawler.spider, "reached", {}))
                self._inc("duplicates", len(self.store.duplicates(reached)) if reached else 0)
            self.store.finish_crawl(self.crawl_run_id, status, counts)
        except STORAGE_ERRORS as exc:
            self._failed(exc, stop=False)  # the run keeps its 'running' row; the next crawl marks it 'killed'
        finally:
            try:
                try:
                    self.store.set_threads(None)  # `webqa run` answers on the same database in this process
                finally:
                    self.store.close()  # also after a fatal error, which fails every statement but this
            except STORAGE_ERRORS as exc:
                self._failed(exc, stop=False)
            self.store = None

    def _record_job_pages(self, *, complete: bool) -> None:
        """Record the pages the job's crawl reached and count those it no longer reaches (``gone``).

        Only a finished crawl counts gone pages: an interrupted one did not reach all it would have.
        """
        if not self.job_name or self.store is None or self.crawl_run_id is None:
            return
        self.store.record_job_pages(self.job_name, self.crawl_run_id, getattr(self.crawler.spider, "reached", {}))
        if complete:
            self._inc("gone", len(self.store.gone_job_pages(self.job_name, self.crawl_run_id)))

    async def process_item(self, item: Any) -> Any:
        if not isinstance(item, (ExtractedPage, FetchOutcome)):
            return item
        if self.failure is not None:
            raise DropItem(f"not stored, the database failed earlier: {self.failure}")
        assert self.store is not None and self.writer is not None
        url = item.page.url if isinstance(item, ExtractedPage) else item.url
        if url in self._pending_urls:
            self._flush()  # a batch names each page once
        self._pending.append(item)
        self._pending_urls.add(url)
        self._pending_pages += isinstance(item, ExtractedPage)
        if self._pending_pages >= self.batch_pages or len(self._pending) >= self.batch_items:
            # The item that fills a batch waits for its commit: Scrapy slows down when writes fall behind.
            try:
                await self._flush()
            except STORAGE_ERRORS as exc:
                self._failed(exc)
                raise DropItem(f"not stored: {self.failure}") from None
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.batch_seconds, self._flush)
        return item

    def _flush(self) -> asyncio.Future[None]:
        """Hand the pending items to the writer thread; the future is done when they are committed."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending = self._pending, []
        self._pending_urls.clear()
        self._pending_pages = 0
        loop = asyncio.get_running_loop()
        if not batch or self.writer is None or self.failure is not None:
            done: asyncio.Future[None] = loop.create_future()
            done.set_result(None)
            return done
        written = loop.run_in_executor(self.writer, self._write, batch)
        written.add_done_callback(self._after_write)
        return written

    def _after_write(self, written: asyncio.Future[None]) -> None:
        """On the reactor thread: count what was committed; a refused write stops the crawl."""
        self._count_written()
        exc = None if written.cancelled() else written.exception()
        if exc is not None:
            if isinstance(exc, STORAGE_ERRORS):
                self._failed(exc)
            else:
                log.error("Storing a batch failed: %r", exc)

    def write_now(self, *items: ExtractedPage | FetchOutcome) -> dict[str, int]:
        """Write items at once on the calling thread, as one batch, and return their counts, without
        touching stats.

        For a writer that is not a Scrapy pipeline (the Redis coordinator, crawler/distributed), which
        keeps its own counts.
        """
        self._write(list(items))
        counts: dict[str, int] = {}
        while True:
            try:
                _add(counts, self._written.get_nowait())
            except queue.Empty:
                return counts

    def _count_written(self) -> None:
        while True:
            try:
                counts = self._written.get_nowait()
            except queue.Empty:
                return
            for key, value in counts.items():
                self._inc(key, value)

    def _write(self, batch: list[ExtractedPage | FetchOutcome]) -> None:
        """On the writer thread: the batch's pages in one transaction, then its other outcomes in another.

        The counts of what was committed go to ``_written`` as soon as it is; a refused write raises.
        """
        pages = [item for item in batch if isinstance(item, ExtractedPage)]
        if pages:
            self._write_pages(pages)
        outcomes = [item for item in batch if isinstance(item, FetchOutcome)]
        if outcomes:
            self._write_outcomes(outcomes)

    def _write_outcomes(self, outcomes: list[FetchOutcome]) -> None:
        """The batch's 304s and fetch_log rows, one statement each (Store.mark_checked_many, log_fetches)."""
        assert self.store is not None
        not_modified = [item for item in outcomes if item.outcome == "not_modified"]
        logged = [item for item in outcomes if item.outcome != "not_modified"]
        with self.store.transaction():
            self.store.mark_checked_many([(item.url, item.etag, item.last_modified) for item in not_modified])
            self.store.log_fetches(self.crawl_run_id, [(item.url, item.outcome, item.reason, item.status)
                                                       for item in logged])
        counts: dict[str, int] = {}
        for item in outcomes:
            _add(counts, {item.outcome: 1})
        self._written.put(counts)

    def _write_pages(self, pages: list[ExtractedPage]) -> None:
        """One transaction for the pages; if it fails, one each, so a bad page costs only itself.

        A storage error (a full disk) on a single page is raised: every page would fail the same way.
        """
        assert self.store is not None
        try:
            states = self.store.save_pages([(_record(item), item.chunks) for item in pages], self.crawl_run_id)
        except Exception as exc:  # noqa: BLE001 - whatever the write error, the other pages deserve their own try
            if len(pages) == 1:
                if isinstance(exc, STORAGE_ERRORS):
                    raise
                # Not the database refusing writes but a bug: the page is recorded as failed, not lost.
                page = pages[0].page
                outcome = internal_failure(page.url, exc, page.status)
                log.error("%s: %s", page.url, outcome.reason, exc_info=exc)
                self._write_outcomes([outcome])
                return
            log.warning("Storing a batch of %d pages failed (%s); storing them one by one", len(pages), exc)
            for item in pages:
                self._write_pages([item])
            return
        counts: dict[str, int] = {}
        for item, state in zip(pages, states, strict=True):
            _add(counts, self._stored(item, state))
        self._written.put(counts)

    def _stored(self, item: ExtractedPage, state: str) -> dict[str, int]:
        page = item.page
        log.debug("Stored %s (%s, %d chunks, %s)", page.url, state, len(item.chunks), item.extractor)
        counts = {"fetched": 1, state: 1, "html_bytes": page.html_bytes, "text_bytes": item.text_bytes}
        if state != "unchanged":
            counts["chunks"] = len(item.chunks)
        return counts

    def _failed(self, exc: BaseException, *, stop: bool = True) -> None:
        """Remember the first failed write and stop the crawl: every later page would fail the same way."""
        log.debug("Write to %s failed", self.db_path, exc_info=exc)
        if self.failure is not None:
            return
        self.failure = describe_storage_error(self.db_path, exc)
        if self.crawler.stats is not None:
            self.crawler.stats.set_value(STORAGE_ERROR_STAT, self.failure)
        if stop:
            self._stop_after_failed_open()

    def _stop_after_failed_open(self) -> None:
        """Close the spider for the storage error, once (the engine must be running)."""
        engine = self.crawler.engine
        if engine is not None and engine.spider is not None and self._closing is None:
            self._closing = deferred_from_coro(engine.close_spider_async(reason=STORAGE_ERROR))
            self._closing.addErrback(lambda failure: log.debug("Closing the spider failed: %s", failure))

    def _inc(self, key: str, by: int = 1) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(f"webqa/count/{key}", by)


def _record(item: ExtractedPage) -> PageRecord:
    page = item.page
    return PageRecord(
        url=page.url, final_url=page.final_url, status=page.status, fetched_at=page.fetched_at,
        content_type=page.content_type, etag=page.etag, last_modified=page.last_modified,
        content_hash=page.content_hash, title=item.title, lang=item.lang, extractor=item.extractor,
        # A document that is not HTML (a PDF) keeps its text in page_html, for `webqa eval`'s "in the page?".
        html_bytes=page.html_bytes, text_bytes=item.text_bytes, text=item.text, html=page.html if page.kind == "html" else item.text,
        depth=page.depth, extract_seconds=item.seconds, links=tuple(page.links), canonical=page.canonical,
    )


def _add(total: dict[str, int], counts: dict[str, int]) -> None:
    for key, value in counts.items():
        total[key] = total.get(key, 0) + value
