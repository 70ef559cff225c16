"""Scrapy pipeline that writes pages, chunks and the fetch log to the DuckDB store."""

from __future__ import annotations

import logging
from typing import Any

from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured

from crawler.items import ExtractedPage, FetchOutcome
from pipelines.store import PageRecord, Store

log = logging.getLogger(__name__)


class StorePipeline:
    """Opens the store for the crawl, records every item, rebuilds the BM25 index at the end.

    Each page is its own transaction: a crawl that dies midway keeps every page stored before it.
    """

    def __init__(self, crawler: Crawler, db_path: str, job_name: str | None) -> None:
        self.crawler = crawler
        self.db_path = db_path
        self.job_name = job_name
        self.store: Store | None = None
        self.crawl_run_id: int | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StorePipeline:
        db_path = crawler.settings.get("WEBQA_DB")
        if not db_path:
            raise NotConfigured("WEBQA_DB is not set: no database to store pages in")
        return cls(crawler, db_path, crawler.settings.get("WEBQA_JOB_NAME"))

    def open_spider(self) -> None:
        self.store = Store.open(self.db_path)
        self.crawl_run_id = self.store.begin_crawl(self.job_name)
        if self.crawler.stats is not None:
            self.crawler.stats.set_value("webqa/crawl_run_id", self.crawl_run_id)

    def close_spider(self) -> None:
        if self.store is None:
            return
        stats = self.crawler.stats.get_stats() if self.crawler.stats is not None else {}
        counts = {key.removeprefix("webqa/count/"): int(value) for key, value in stats.items()
                  if key.startswith("webqa/count/")}
        try:
            if counts.get("new") or counts.get("changed") or self.store.fts_is_stale():
                self.store.rebuild_fts()
            status = "interrupted" if stats.get("finish_reason") not in (None, "finished") else "done"
            assert self.crawl_run_id is not None
            self.store.finish_crawl(self.crawl_run_id, status, counts)
        finally:
            self.store.close()
            self.store = None

    def process_item(self, item: Any) -> Any:
        assert self.store is not None
        if isinstance(item, ExtractedPage):
            self._save(item)
        elif isinstance(item, FetchOutcome):
            self._record(item)
        return item

    def _save(self, item: ExtractedPage) -> None:
        assert self.store is not None
        page = item.page
        record = PageRecord(
            url=page.url, final_url=page.final_url, status=page.status, fetched_at=page.fetched_at,
            content_type=page.content_type, etag=page.etag, last_modified=page.last_modified,
            content_hash=page.content_hash, title=item.title, lang=item.lang, extractor=item.extractor,
            html_bytes=page.html_bytes, text_bytes=item.text_bytes, text=item.text, html=page.html,
            depth=page.depth, extract_seconds=item.seconds,
        )
        state = self.store.save_page(record, item.chunks, self.crawl_run_id)
        self._inc("fetched")
        self._inc(state)
        self._inc("html_bytes", page.html_bytes)
        self._inc("text_bytes", item.text_bytes)
        if state != "unchanged":
            self._inc("chunks", len(item.chunks))
        log.debug("Stored %s (%s, %d chunks, %s)", page.url, state, len(item.chunks), item.extractor)

    def _record(self, item: FetchOutcome) -> None:
        assert self.store is not None
        if item.outcome == "not_modified":
            self.store.mark_checked(item.url, 304, item.etag, item.last_modified)
            self._inc("not_modified")
            return
        self.store.log_fetch(self.crawl_run_id, item.url, item.outcome, item.reason, item.status)
        self._inc(item.outcome)

    def _inc(self, key: str, by: int = 1) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(f"webqa/count/{key}", by)
