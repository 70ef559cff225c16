"""Scrapy pipeline that writes pages, chunks and the fetch log to the DuckDB store."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured

from crawler.items import ExtractedPage, FetchOutcome
from pipelines.store import PageRecord, Store

log = logging.getLogger(__name__)


class StorePipeline:
    """Opens the store for the crawl and records every item (pages with their selection indexes).

    Each page is its own transaction: a crawl that dies midway keeps every page stored before it.
    The writes run on one writer thread, in arrival order: a DuckDB commit takes 20–250 ms, and on
    the reactor thread it would hold back every request due meanwhile, so a request went out late
    and the next one to the same host (timed from when the late one was due) came less than the
    promised delay after it. DuckDB releases the GIL while it works.
    """

    def __init__(self, crawler: Crawler, db_path: str, job_name: str | None) -> None:
        self.crawler = crawler
        self.db_path = db_path
        self.job_name = job_name
        self.store: Store | None = None
        self.crawl_run_id: int | None = None
        self.writer: ThreadPoolExecutor | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StorePipeline:
        db_path = crawler.settings.get("WEBQA_DB")
        if not db_path:
            raise NotConfigured("WEBQA_DB is not set: no database to store pages in")
        return cls(crawler, db_path, crawler.settings.get("WEBQA_JOB_NAME"))

    def open_spider(self) -> None:
        self.store = Store.open(self.db_path)
        # Every URL given counts as requested, the invalid and duplicate ones included (they are logged).
        spider = self.crawler.spider
        requested = len(getattr(spider, "listed", ())) + len(getattr(spider, "problems", ()))
        self.crawl_run_id = self.store.begin_crawl(self.job_name, urls_requested=requested)
        if self.crawler.stats is not None:
            self.crawler.stats.set_value("webqa/crawl_run_id", self.crawl_run_id)
        # One thread: the DuckDB connection is used by one thread at a time, writes stay in order.
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="webqa-store")

    def close_spider(self) -> None:
        if self.store is None:
            return
        if self.writer is not None:
            self.writer.shutdown(wait=True)
            self.writer = None
        stats = self.crawler.stats.get_stats() if self.crawler.stats is not None else {}
        counts = {key.removeprefix("webqa/count/"): int(value) for key, value in stats.items()
                  if key.startswith("webqa/count/")}
        try:
            # Pages are indexed as they are written; only a database indexed by an older version needs a build.
            if self.store.fts_is_stale():
                self.store.rebuild_fts()
            # A signal's stop (crawler/shutdown.py) closes the pipelines before Scrapy sets finish_reason.
            stopped = stats.get("webqa/interrupted") or stats.get("finish_reason") not in (None, "finished")
            status = "interrupted" if stopped else "done"
            assert self.crawl_run_id is not None
            self._record_job_pages(complete=status == "done")
            self.store.finish_crawl(self.crawl_run_id, status, counts)
        finally:
            self.store.close()
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
        assert self.store is not None and self.writer is not None
        write = self._save if isinstance(item, ExtractedPage) else self._record
        counts = await asyncio.get_running_loop().run_in_executor(self.writer, write, item)
        # Stats are only touched on the reactor thread.
        for key, value in counts.items():
            self._inc(key, value)
        return item

    def _save(self, item: ExtractedPage) -> dict[str, int]:
        assert self.store is not None
        page = item.page
        record = PageRecord(
            url=page.url, final_url=page.final_url, status=page.status, fetched_at=page.fetched_at,
            content_type=page.content_type, etag=page.etag, last_modified=page.last_modified,
            content_hash=page.content_hash, title=item.title, lang=item.lang, extractor=item.extractor,
            html_bytes=page.html_bytes, text_bytes=item.text_bytes, text=item.text, html=page.html,
            depth=page.depth, extract_seconds=item.seconds, links=tuple(page.links),
        )
        state = self.store.save_page(record, item.chunks, self.crawl_run_id)
        log.debug("Stored %s (%s, %d chunks, %s)", page.url, state, len(item.chunks), item.extractor)
        counts = {"fetched": 1, state: 1, "html_bytes": page.html_bytes, "text_bytes": item.text_bytes}
        if state != "unchanged":
            counts["chunks"] = len(item.chunks)
        return counts

    def _record(self, item: FetchOutcome) -> dict[str, int]:
        assert self.store is not None
        if item.outcome == "not_modified":
            self.store.mark_checked(item.url, 304, item.etag, item.last_modified)
            return {"not_modified": 1}
        self.store.log_fetch(self.crawl_run_id, item.url, item.outcome, item.reason, item.status)
        return {item.outcome: 1}

    def _inc(self, key: str, by: int = 1) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(f"webqa/count/{key}", by)
