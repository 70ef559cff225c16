"""The DuckDB store: one file holds pages, chunks, the fetch log and crawl runs.

``Store`` is the only code that writes SQL for the crawl side; values are always bound as
parameters. Opening the file: pipelines/duckdb_connect.py; the records it binds and returns, and
the helpers that shape them: pipelines/store_records.py.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from pipelines.errors import StoreError
from pipelines import defaults, duplicates, schema, search_index, vectors
from pipelines.chunk import Chunk
from pipelines.duckdb_connect import connect, memory_limit, set_threads, transaction
from pipelines.items import dropped_reason
from pipelines.store_records import (CRAWL_COUNT_COLUMNS, PAGE_COLUMNS, PageBatch, PageRecord, Validators, bind_columns,
                                     compress_html, decompress_html, group_links, utcnow)
from pipelines.vectors import embed_key

log = logging.getLogger(__name__)

DEFAULT_DB = defaults.DB


class Store:
    """All reads and writes of the crawl tables, on one connection."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self._fts_loaded = False

    @classmethod
    def open(cls, path: str | Path = DEFAULT_DB, *, read_only: bool = False) -> Store:
        path = Path(path)
        conn = connect(path, read_only=read_only)
        store = cls(conn, path)
        if not read_only:
            try:
                store.migrate()
            except duckdb.Error as exc:
                store.close()
                # Creating or upgrading the tables is the first write: a full disk refuses it here.
                raise StoreError(f"{path}: cannot prepare the database: {str(exc).splitlines()[0]}") from None
            except BaseException:
                store.close()  # a database this version cannot use must not stay locked by it
                raise
        return store

    def close(self) -> None:
        self.conn.close()

    def set_threads(self, threads: int | None) -> None:
        """Run the database's statements on at most ``threads`` threads (pipelines/duckdb_connect.py)."""
        set_threads(self.conn, threads)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema --------------------------------------------------------------------------------

    def migrate(self) -> None:
        self.conn.execute(schema.TABLES)
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row else schema.SCHEMA_VERSION
        if version > schema.SCHEMA_VERSION:
            # Its tables may have columns this version does not write: every write could fail, and the
            # version must not be set back (a newer webqa would then skip its own migrations).
            raise StoreError(f"{self.path}: written by a newer webqa (schema {version}, this one knows up to "
                             f"{schema.SCHEMA_VERSION}); upgrade webqa, or crawl into another --db")
        for step in range(version + 1, schema.SCHEMA_VERSION + 1):
            for statement in schema.MIGRATIONS.get(step, []):
                self.conn.execute(statement)
            if step == 5:
                vectors.drop_vector_tables(self.conn)  # keyed by the former doc numbers, without url/ordinal
            if step == 11:
                self.conn.execute(schema.INDEX_TABLES)
                search_index.recount_statistics(self.conn)
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                          [str(schema.SCHEMA_VERSION)])
        self.conn.execute(schema.INDEX_TABLES)
        search_index.fill_stopwords(self.conn)
        if self._index_format() is None and self.count_chunks() == 0:
            # Nothing stored yet: the empty index is complete, and pages keep it so as they are written.
            self._set_index_format()

    def _index_format(self) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", [schema.INDEX_META_KEY]).fetchone()
        return row[0] if row else None

    def _set_index_format(self) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [schema.INDEX_META_KEY, schema.INDEX_FORMAT])

    def load_fts(self) -> None:
        """Load the fts extension, for its ``stem`` function (Porter stemming of chunks and questions)."""
        if not self._fts_loaded:
            search_index.load_fts(self.conn)
            self._fts_loaded = True

    def index_pages(self, urls: Sequence[str] | None, rows: Sequence[Sequence[Any]] = ()) -> None:
        """Bring the selection indexes in step with the pages ``urls`` (pipelines/search_index.py index_pages).

        Call it in the transaction that wrote the chunks, so that the index can never be older or newer
        than they are.
        """
        self.load_fts()
        search_index.index_pages(self.conn, urls, rows)

    def rebuild_fts(self) -> None:
        """Rebuild every selection index from the stored chunks (`webqa reindex`; a database indexed by an
        older version). Pages written since keep it current on their own (``index_pages``).

        One transaction: docs are renumbered, and vectors keyed by the old numbers must never survive a
        rebuild killed halfway. DuckDB's memory is bounded by ``defaults.INDEX_BUILD_MEMORY_LIMIT`` meanwhile, its
        checkpoint included (left to the close, the checkpoint ran without the limit).
        """
        with memory_limit(self.conn, defaults.INDEX_BUILD_MEMORY_LIMIT):
            with self.transaction():
                self.load_fts()
                search_index.rebuild(self.conn)
                self._set_index_format()
            self.conn.execute("CHECKPOINT")

    reindex = rebuild_fts

    def fts_is_stale(self) -> bool:
        """True when the selection indexes need a full build: chunks stored by a version that did not index
        page by page, or index tables missing or out of step with the chunks (or BM25's document count with the docs)."""
        if not search_index.tables_exist(self.conn):
            return True
        chunks = self.count_chunks()
        if self._index_format() != schema.INDEX_FORMAT:
            return chunks > 0
        docs = search_index.doc_count(self.conn)
        return docs is None or docs != chunks or search_index.counted_docs(self.conn) != docs

    def transaction(self) -> AbstractContextManager[None]:
        """BEGIN … COMMIT around the block, rolled back when it raises (pipelines/duckdb_connect.py)."""
        return transaction(self.conn)

    # -- crawl runs ----------------------------------------------------------------------------

    def begin_crawl(self, job_name: str | None = None, urls_requested: int = 0) -> int:
        # A crawl holds the database for writing from start to end, and DuckDB lets one process do that:
        # a crawl still 'running' now was killed (SIGKILL, out of memory, power) before it could finish.
        killed = self.conn.execute(
            "UPDATE crawl_runs SET status = 'killed' WHERE status = 'running' RETURNING crawl_run_id").fetchall()
        for (crawl_run_id,) in killed:
            log.warning("Crawl run %d ended without finishing (the process was killed); marked 'killed'", crawl_run_id)
        row = self.conn.execute(
            "INSERT INTO crawl_runs (started_at, status, job_name, urls_requested) VALUES (?, 'running', ?, ?) "
            "RETURNING crawl_run_id",
            [utcnow(), job_name, urls_requested],
        ).fetchone()
        assert row is not None
        return int(row[0])

    def finish_crawl(self, crawl_run_id: int, status: str, counts: dict[str, int]) -> None:
        columns = [c for c in CRAWL_COUNT_COLUMNS if c in counts]
        assignments = ", ".join(f"{c} = ?" for c in columns)  # column names come from our own constant
        self.conn.execute(
            f"UPDATE crawl_runs SET finished_at = ?, status = ?{', ' if columns else ''}{assignments} "
            "WHERE crawl_run_id = ?",
            [utcnow(), status, *[counts[c] for c in columns], crawl_run_id],
        )

    def crawl_run(self, crawl_run_id: int) -> dict[str, object]:
        cursor = self.conn.execute("SELECT * FROM crawl_runs WHERE crawl_run_id = ?", [crawl_run_id])
        names = [d[0] for d in cursor.description]
        row = cursor.fetchone()
        if row is None:
            raise StoreError(f"no crawl run {crawl_run_id}")
        return dict(zip(names, row))

    # -- pages ---------------------------------------------------------------------------------

    def validators(self) -> dict[str, Validators]:
        """Stored ETag/Last-Modified and last check per URL, for conditional and fresh-enough checks.

        A page confirmed by a 304 an hour ago is an hour old, whenever its body was downloaded.
        """
        rows = self.conn.execute(
            "SELECT url, etag, last_modified, coalesce(checked_at, fetched_at) FROM pages"
        ).fetchall()
        return {url: Validators(etag, last_modified, fetched_at) for url, etag, last_modified, fetched_at in rows}

    def page_hash(self, url: str) -> str | None:
        row = self.conn.execute("SELECT content_hash FROM pages WHERE url = ?", [url]).fetchone()
        return row[0] if row else None

    def save_page(self, page: PageRecord, chunks: Sequence[Chunk], crawl_run_id: int | None) -> str:
        """Store a fetched page and its chunks; returns ``new``, ``changed`` or ``unchanged``.

        An unchanged body (same content hash) only refreshes the bookkeeping columns; a changed one
        replaces the page's chunks in one transaction, so a crash never leaves half a page. Either way
        the page's out-links are replaced with ``page.links`` in the same transaction (``save_pages``).
        """
        return self.save_pages([(page, chunks)], crawl_run_id)[0]

    def save_pages(self, pages: Sequence[tuple[PageRecord, Sequence[Chunk]]], crawl_run_id: int | None) -> list[str]:
        """``save_page`` for many pages in one transaction, one statement per table; the states in order.

        Values are bound as one list per column and unnested in SQL: a statement per page cost a commit
        and a dozen round trips each (benchmarks/HISTORY.md, "Batched writes"). URLs must be distinct within a batch.
        A page that duplicates another (its canonical, or the same chunks: pipelines/duplicates.py) is written
        without chunks, its ``duplicate_of`` naming the page that holds them (``_settle_duplicates``).
        """
        if not pages:
            return []
        urls = [page.url for page, _ in pages]
        if len(set(urls)) != len(urls):
            raise StoreError("a batch of pages names a URL twice")
        previous = {url: (content_hash, duplicate_of) for url, content_hash, duplicate_of in self.conn.execute(
            "SELECT url, content_hash, duplicate_of FROM pages WHERE list_contains($urls, url)", {"urls": urls}).fetchall()}
        incoming = [duplicates.Incoming(page.url, page.text, duplicates.text_hash(chunks), page.canonical)
                    for page, chunks in pages]
        dup_of, demoted = self._duplicates(incoming, urls)
        hashes = {item.url: item.text_hash for item in incoming}
        batch = PageBatch.plan(pages, previous, dup_of)
        with self.transaction():
            if batch.same:
                self.conn.execute(REFRESH_UNCHANGED_PAGES, bind_columns(
                    batch.same, url=lambda p: p.url, fetched=lambda p: p.fetched_at, status=lambda p: p.status,
                    final_url=lambda p: p.final_url, etag=lambda p: p.etag, last_modified=lambda p: p.last_modified,
                    canonical=lambda p: p.canonical, duplicate_of=lambda p: dup_of.get(p.url, (None,))[0]))
            if batch.written:
                self._write_pages([page for page, _ in batch.written], previous, dup_of, hashes, crawl_run_id)
            self._write_chunks(batch, dup_of)
            self._settle_duplicates([page for page, _ in pages], {page.url for page, _ in batch.written}, dup_of,
                                    hashes, demoted)
            self.conn.execute("DELETE FROM page_links WHERE list_contains($urls, url)", {"urls": urls})
            links = [(page.url, target, ordinal) for page, _ in pages for ordinal, target in enumerate(page.links)]
            if links:
                self.conn.execute(INSERT_PAGE_LINKS, bind_columns(
                    links, url=lambda r: r[0], target=lambda r: r[1], ordinal=lambda r: r[2]))
        return batch.states

    def _write_pages(self, records: Sequence[PageRecord], previous: dict[str, tuple[str | None, str | None]],
                     dup_of: dict[str, tuple[str, str]], hashes: dict[str, str | None], crawl_run_id: int | None) -> None:
        """The pages and page_html rows of new and changed pages."""
        replaced = [page.url for page in records if page.url in previous]
        if replaced:
            # Deleted first: DuckDB's INSERT OR REPLACE of an existing row costs several times a
            # delete and an insert (BENCHMARKS.md, "The daily re-crawl as a crawl").
            self.conn.execute("DELETE FROM page_html WHERE list_contains($urls, url)", {"urls": replaced})
            self.conn.execute("DELETE FROM pages WHERE list_contains($urls, url)", {"urls": replaced})
        self.conn.execute(INSERT_PAGES, {**bind_columns(
            records, **PAGE_COLUMNS, text_hash=lambda p: hashes[p.url],
            duplicate_of=lambda p: dup_of.get(p.url, (None,))[0]), "run": crawl_run_id})
        self.conn.execute(INSERT_PAGE_HTML, bind_columns(records, url=lambda p: p.url, html=lambda p: compress_html(p.html)))

    def _write_chunks(self, batch: PageBatch, dup_of: dict[str, tuple[str, str]]) -> None:
        """Chunks of the pages written, and of those whose role changed (a duplicate has none), and their index."""
        with_chunks = [(page, chunks) for page, chunks in [*batch.written, *batch.now_holder] if page.url not in dup_of]
        touched = [page.url for page, _ in [*batch.written, *batch.now_holder]] + batch.now_dup
        if not touched:
            return
        self.conn.execute("DELETE FROM chunks WHERE list_contains($urls, url)", {"urls": touched})
        rows = [(c.chunk_id, page.url, c.ordinal, c.heading, c.text, c.token_estimate, c.content_hash,
                 embed_key(c.heading, c.text), c.page) for page, chunks in with_chunks for c in chunks]
        if rows:
            self.conn.execute(INSERT_CHUNKS, bind_columns(
                rows, chunk_id=lambda r: r[0], url=lambda r: r[1], ordinal=lambda r: r[2], heading=lambda r: r[3],
                text=lambda r: r[4], tokens=lambda r: r[5], hash=lambda r: r[6], key=lambda r: r[7],
                page=lambda r: r[8]))
        self.index_pages(touched, rows)

    def _duplicates(self, incoming: Sequence[duplicates.Incoming], urls: Sequence[str]
                    ) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
        """The batch's duplicates and the stored pages they demote (pipelines/duplicates.py ``decide``)."""
        hashes = sorted({item.text_hash for item in incoming if item.text_hash})
        named = sorted({item.canonical for item in incoming if item.canonical})
        if not hashes:
            return {}, {}
        stored_by_hash = dict(self.conn.execute(
            # A stored page naming a page of the batch as its canonical defers to it (``_settle_duplicates``).
            "SELECT text_hash, min(url) FROM pages WHERE list_contains($hashes, text_hash) AND duplicate_of IS NULL "
            "AND content_hash IS NOT NULL AND NOT list_contains($urls, url) "
            "AND (canonical IS NULL OR NOT list_contains($urls, canonical)) GROUP BY text_hash",
            {"hashes": hashes, "urls": list(urls)}).fetchall())
        stored_texts = dict(self.conn.execute(
            "SELECT url, text FROM pages WHERE list_contains($named, url) AND duplicate_of IS NULL "
            "AND content_hash IS NOT NULL AND NOT list_contains($urls, url)",
            {"named": named, "urls": list(urls)}).fetchall()) if named else {}
        return duplicates.decide(incoming, stored_by_hash, stored_texts)

    def _settle_duplicates(self, batch: Sequence[PageRecord], rewritten: set[str], dup_of: dict[str, tuple[str, str]],
                           hashes: dict[str, str | None], demoted: dict[str, str]) -> None:
        """After a batch is written: stored pages naming one of its pages as canonical, or whose text a page of
        it now holds (``demoted``), become its duplicates; stored duplicates of a page rewritten with other text,
        or now a duplicate itself, are released."""
        urls = [page.url for page in batch]
        holders = {page.url: page for page in batch if page.url not in dup_of and hashes.get(page.url)}
        if holders:
            claims = self.conn.execute(
                "SELECT url, text, canonical FROM pages WHERE list_contains($holders, canonical) AND duplicate_of IS NULL "
                "AND content_hash IS NOT NULL AND NOT list_contains($urls, url)",
                {"holders": sorted(holders), "urls": urls}).fetchall()
            claimed = [(url, canonical) for url, text, canonical in claims if duplicates.covers(holders[canonical].text, text)]
            claimed += [(url, holder) for url, holder in demoted.items() if url not in dict(claimed)]
            if claimed:
                self.conn.execute(
                    "UPDATE pages SET duplicate_of = v.of FROM (SELECT unnest($url) AS url, unnest($of) AS of) v "
                    "WHERE pages.url = v.url", bind_columns(claimed, url=lambda r: r[0], of=lambda r: r[1]))
                gone = [url for url, _ in claimed]
                self.conn.execute("DELETE FROM chunks WHERE list_contains($urls, url)", {"urls": gone})
                self.index_pages(gone)
        changed = [url for url in urls if url in rewritten or url in dup_of] + list(demoted)
        if not changed:
            return
        stale = []
        for url, of, text, text_hash, canonical in self.conn.execute(
                "SELECT url, duplicate_of, text, text_hash, canonical FROM pages WHERE list_contains($changed, duplicate_of) "
                "AND NOT list_contains($urls, url)", {"changed": changed, "urls": urls}).fetchall():
            holder = holders.get(of)
            why = duplicates.CANONICAL if canonical == of else duplicates.SAME_TEXT
            if holder is None or not duplicates.still_holds(why, text or "", text_hash, holder.text, hashes.get(of)):
                stale.append(url)
        if stale:
            self.conn.execute(RELEASE_DUPLICATES, {"urls": stale})

    def _release_duplicates_of(self, urls: Sequence[str]) -> None:
        """The duplicates of pages no longer standing for them: fetched in full (and their text stored) next time."""
        self.conn.execute(RELEASE_DUPLICATES.replace("list_contains($urls, url)", "list_contains($urls, duplicate_of)"),
                          {"urls": list(urls)})

    def delete_page(self, url: str) -> bool:
        """Remove a stored page, its chunks and their index rows, in one transaction; False if absent."""
        with self.transaction():
            self._release_duplicates_of([url])
            row = self.conn.execute("DELETE FROM pages WHERE url = ? RETURNING url", [url]).fetchone()
            self.conn.execute("DELETE FROM page_html WHERE url = ?", [url])
            self.conn.execute("DELETE FROM page_links WHERE url = ?", [url])
            self.conn.execute("DELETE FROM chunks WHERE url = ?", [url])
            self.index_pages([url])
        return row is not None

    def page_links(self) -> dict[str, list[str]]:
        """url → its stored out-links in page order, for every page whose links were recorded.

        A page stored before webqa kept links is absent (an empty list means it links nowhere). Targets
        repeat across pages (navigation), so each is held once in memory.
        """
        rows = self.conn.execute(
            "SELECT p.url, l.target FROM pages p LEFT JOIN page_links l ON l.url = p.url "
            "WHERE p.links_at IS NOT NULL ORDER BY p.url, l.ordinal"
        ).fetchall()
        return group_links(rows)

    def record_job_pages(self, job_name: str, crawl_run_id: int, reached: dict[str, int]) -> None:
        """Record that the job's crawl ``crawl_run_id`` reached ``reached`` (url → link depth)."""
        if not reached:
            return
        now = utcnow()
        self.conn.execute(
            "INSERT INTO job_pages (job_name, url, depth, first_seen, last_seen, last_crawl_run_id) "
            "SELECT $job, r.url, r.depth, $now, $now, $run FROM (SELECT unnest($urls) AS url, unnest($depths) AS depth) r "
            "ON CONFLICT (job_name, url) DO UPDATE SET depth = excluded.depth, last_seen = excluded.last_seen, "
            "last_crawl_run_id = excluded.last_crawl_run_id",
            {"job": job_name, "now": now, "run": crawl_run_id, "urls": list(reached), "depths": list(reached.values())},
        )

    def job_page_urls(self, job_name: str, *, crawl_run_id: int | None = None) -> list[str]:
        """The pages the job's crawl ``crawl_run_id`` reached, or (None) those of its last finished crawl.

        One row per (job, URL) is kept, so this is exact for the job's latest crawl; for an earlier one it
        lists only the pages no later crawl of the job reached again.
        """
        if crawl_run_id is not None:
            rows = self.conn.execute(
                "SELECT url FROM job_pages WHERE job_name = $job AND last_crawl_run_id = $run ORDER BY url",
                {"job": job_name, "run": crawl_run_id}).fetchall()
            return [url for (url,) in rows]
        # Without a crawl: the pages of the job's last finished crawl, and what any later (interrupted,
        # timed out) crawl reached too; an unfinished crawl alone does not shrink the job to what it reached.
        rows = self.conn.execute(
            "SELECT url FROM job_pages WHERE job_name = $job AND last_crawl_run_id >= coalesce("
            "(SELECT max(crawl_run_id) FROM crawl_runs WHERE job_name = $job AND status = 'done'), "
            "(SELECT max(last_crawl_run_id) FROM job_pages WHERE job_name = $job)) ORDER BY url",
            {"job": job_name},
        ).fetchall()
        return [url for (url,) in rows]

    def gone_job_pages(self, job_name: str, crawl_run_id: int) -> list[str]:
        """Pages the job's previous finished crawl reached and its crawl ``crawl_run_id`` did not.

        The previous crawl is the job's latest earlier crawl run with status ``done``: an interrupted
        one reached only part of the job's pages.
        """
        rows = self.conn.execute(
            "SELECT url FROM job_pages WHERE job_name = $job AND last_crawl_run_id = "
            "(SELECT max(crawl_run_id) FROM crawl_runs WHERE job_name = $job AND crawl_run_id < $run "
            "AND status = 'done') ORDER BY url",
            {"job": job_name, "run": crawl_run_id},
        ).fetchall()
        return [url for (url,) in rows]

    def mark_checked(self, url: str, status: int, etag: str | None = None, last_modified: str | None = None) -> None:
        """A 304: the stored page stays, and we record that it was confirmed current (``mark_checked_many``)."""
        self.mark_checked_many([(url, etag, last_modified)])

    def mark_checked_many(self, rows: Sequence[tuple[str, str | None, str | None]]) -> None:
        """304s for ``rows`` of (url, etag, last_modified), in one statement: each stored page stays, and is
        recorded as confirmed current now, with the validators the server sent (None keeps the stored one).

        ``fetched_at`` stays: it is when the stored body was downloaded (see the schema). One statement, not one
        a page: a re-crawl is mostly 304s, and a statement each made the crawl's writer thread its bottleneck
        (BENCHMARKS.md, "The daily re-crawl as a crawl"). URLs must be distinct.
        """
        if rows:
            self.conn.execute(MARK_CHECKED, {"now": utcnow(), **bind_columns(
                rows, url=lambda r: r[0], etag=lambda r: r[1], last_modified=lambda r: r[2])})

    def log_fetch(self, crawl_run_id: int | None, url: str, outcome: str, reason: str, status: int | None = None) -> None:
        self.log_fetches(crawl_run_id, [(url, outcome, reason, status)])

    def log_fetches(self, crawl_run_id: int | None, rows: Sequence[tuple[str, str, str, int | None]]) -> None:
        """fetch_log rows of (url, outcome, reason, status) for the crawl ``crawl_run_id``, in one statement."""
        if rows:
            self.conn.execute(INSERT_FETCH_LOG, {"run": crawl_run_id, "now": utcnow(), **bind_columns(
                rows, url=lambda r: r[0], outcome=lambda r: r[1], reason=lambda r: r[2], status=lambda r: r[3])})
            # A page gone or refused no longer stands for its duplicates: they are fetched in full next time.
            dropped = [url for url, outcome, reason, status in rows if dropped_reason(outcome, status, reason)]
            if dropped:
                self._release_duplicates_of(dropped)

    def crawl_failures(self, crawl_run_id: int) -> list[dict[str, Any]]:
        """URLs that produced no page in this crawl (failed or skipped), why, and their stored copy's age.

        ``stored_fetched_at`` is when the stored copy of the URL was downloaded, None when there is none:
        a page with one is answered from a stale copy.
        """
        # A page fetched or confirmed by this very crawl is never stale, whatever else was logged for its URL.
        cursor = self.conn.execute(
            "SELECT f.url, f.outcome, f.status, f.reason, CASE WHEN coalesce(p.checked_at, p.fetched_at) < c.started_at "
            "THEN p.fetched_at END AS stored_fetched_at "
            "FROM fetch_log f JOIN crawl_runs c USING (crawl_run_id) "
            "LEFT JOIN pages p ON p.url = f.url AND p.content_hash IS NOT NULL "
            "WHERE f.crawl_run_id = ? ORDER BY f.outcome, f.url", [crawl_run_id])
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    def dropped_pages(self) -> dict[str, str]:
        """Stored pages no longer answered from, and why: since their copy was fetched or last confirmed, a
        crawl found them removed (404, 410) or refused (robots.txt, no longer HTML); see ``dropped_reason``.

        A later successful fetch or 304 brings a page back.
        """
        rows = self.conn.execute(
            "SELECT p.url, f.outcome, f.status, f.reason FROM pages p "
            "JOIN fetch_log f ON f.url = p.url AND f.logged_at >= coalesce(p.checked_at, p.fetched_at) "
            "WHERE p.content_hash IS NOT NULL AND (f.status IN (404, 410) OR f.outcome = 'skipped') "
            "ORDER BY f.logged_at").fetchall()
        dropped: dict[str, str] = {}
        for url, outcome, status, reason in rows:
            why = dropped_reason(outcome, status, reason)
            if why is not None:
                dropped[url] = why
        return dropped

    def job_scope(self, job_name: str) -> list[str]:
        """The stored pages a job answers from without crawling: those its last finished crawl reached (and
        what a later unfinished crawl reached too), less the pages dropped since (``dropped_pages``)."""
        dropped = self.dropped_pages()
        return [url for url in self.stored_urls(self.job_page_urls(job_name)) if url not in dropped]

    # -- reads ---------------------------------------------------------------------------------

    def count_chunks(self) -> int:
        row = self.conn.execute("SELECT count(*) FROM chunks").fetchone()
        return int(row[0]) if row else 0

    def stored_urls(self, urls: Sequence[str]) -> list[str]:
        """The stored pages among ``urls``, and the pages their duplicates stand for (pipelines/duplicates.py), by a
        semi-join on the urls (DuckDB's replacement scan): list_contains per page grows with the urls."""
        asked = {"url": np.asarray(list(urls), dtype=object)}  # noqa: F841
        return [r[0] for r in self.conn.execute(
            "SELECT url FROM pages SEMI JOIN asked USING (url) UNION SELECT duplicate_of FROM pages SEMI JOIN asked "
            "USING (url) WHERE duplicate_of IS NOT NULL ORDER BY 1").fetchall()] if len(asked["url"]) else []

    def duplicates(self, urls: Sequence[str] | None = None) -> list[dict[str, str]]:
        """The stored pages (among ``urls``; None: all) that are duplicates: url, the page holding their text,
        and why (rel=canonical, same text)."""
        where, params = ("", {}) if urls is None else (" AND list_contains($urls, url)", {"urls": list(urls)})
        rows = self.conn.execute(
            f"SELECT url, duplicate_of, canonical IS NOT DISTINCT FROM duplicate_of FROM pages "
            f"WHERE duplicate_of IS NOT NULL{where} ORDER BY url", params).fetchall()
        return [{"url": url, "duplicate_of": of, "reason": duplicates.CANONICAL if named else duplicates.SAME_TEXT}
                for url, of, named in rows]

    def page_written_at(self, url: str, fetched_at: datetime) -> bool | None:
        """For a page stored with this fetch time: whether that write changed its content; None if not stored so."""
        row = self.conn.execute("SELECT changed_at = fetched_at FROM pages WHERE url = ? AND fetched_at = ?",
                                [url, fetched_at]).fetchone()
        return None if row is None else bool(row[0])

    def fetch_logged(self, crawl_run_id: int | None, url: str, outcome: str, reason: str) -> bool:
        """Whether the crawl already logged this outcome of ``url``."""
        row = self.conn.execute(
            "SELECT 1 FROM fetch_log WHERE crawl_run_id = ? AND url = ? AND outcome = ? AND reason = ?",
            [crawl_run_id, url, outcome, reason]).fetchone()
        return row is not None

    def page_text_and_html(self, url: str) -> tuple[str | None, str | None] | None:
        """The stored text and HTML of a page (each None when absent); None when the page is not stored."""
        row = self.conn.execute(
            "SELECT p.text, h.html, h.html_z FROM pages p LEFT JOIN page_html h USING (url) WHERE p.url = ?", [url]
        ).fetchone()
        if row is None:
            return None
        text, html, html_z = row
        return text, decompress_html(html_z) if html_z is not None else html

    def chunk_texts(self, urls: Sequence[str] | None = None) -> list[tuple[str, str, str]]:
        """(chunk_id, heading_path, text) of the chunks of ``urls`` (None: every page), in page order."""
        scope_sql = "WHERE list_contains(?, url)" if urls is not None else ""
        params = [list(urls)] if urls is not None else []
        return self.conn.execute(
            f"SELECT chunk_id, heading_path, text FROM chunks {scope_sql} ORDER BY url, ordinal", params
        ).fetchall()

    def chunks_for(self, url: str) -> list[tuple[str, int, str, str]]:
        return self.conn.execute(
            "SELECT chunk_id, ordinal, heading_path, text FROM chunks WHERE url = ? ORDER BY ordinal", [url]
        ).fetchall()


# Batched page writes (Store.save_pages): every value is bound as one list per column ($name) and the
# lists are unnested side by side, so a batch of pages costs one statement per table.
REFRESH_UNCHANGED_PAGES = """
UPDATE pages SET checked_at = v.fetched, fetched_at = v.fetched, status = v.status, final_url = v.final_url, etag = v.etag,
    last_modified = v.last_modified, links_at = v.fetched, canonical = v.canonical, duplicate_of = v.duplicate_of
FROM (SELECT unnest($url) AS url, unnest($fetched)::TIMESTAMP AS fetched, unnest($status)::INTEGER AS status,
             unnest($final_url)::VARCHAR AS final_url, unnest($etag)::VARCHAR AS etag,
             unnest($last_modified)::VARCHAR AS last_modified, unnest($canonical)::VARCHAR AS canonical,
             unnest($duplicate_of)::VARCHAR AS duplicate_of) v
WHERE pages.url = v.url
"""
# Duplicates whose page no longer stands for them: no stored copy and no validators, so that the next crawl
# fetches them in full and stores their own text (or finds them duplicates again).
RELEASE_DUPLICATES = """
UPDATE pages SET duplicate_of = NULL, content_hash = NULL, etag = NULL, last_modified = NULL, checked_at = NULL,
    fetched_at = NULL
WHERE list_contains($urls, url)
"""
MARK_CHECKED = """
UPDATE pages SET checked_at = $now, etag = coalesce(v.etag, pages.etag),
    last_modified = coalesce(v.last_modified, pages.last_modified)
FROM (SELECT unnest($url) AS url, unnest($etag)::VARCHAR AS etag, unnest($last_modified)::VARCHAR AS last_modified) v
WHERE pages.url = v.url AND pages.content_hash IS NOT NULL  -- a released duplicate keeps no validators (RELEASE_DUPLICATES)
"""
INSERT_FETCH_LOG = """
INSERT INTO fetch_log (crawl_run_id, url, logged_at, status, outcome, reason)
SELECT $run, unnest($url), $now, unnest($status)::INTEGER, unnest($outcome)::VARCHAR, unnest($reason)::VARCHAR
"""
INSERT_PAGES = """
INSERT OR REPLACE INTO pages (url, final_url, status, fetched_at, checked_at, content_type, etag, last_modified,
    content_hash, title, lang, extractor, html_bytes, text_bytes, text, depth, extract_seconds, crawl_run_id,
    changed_at, links_at, canonical, duplicate_of, text_hash)
SELECT url, final_url, status, fetched, fetched, content_type, etag, last_modified, hash, title, lang, extractor, html_bytes,
       text_bytes, text, depth, extract_seconds, $run, fetched, fetched, canonical, duplicate_of, text_hash
FROM (SELECT unnest($url) AS url, unnest($final_url)::VARCHAR AS final_url, unnest($status)::INTEGER AS status,
             unnest($fetched)::TIMESTAMP AS fetched, unnest($content_type)::VARCHAR AS content_type,
             unnest($etag)::VARCHAR AS etag, unnest($last_modified)::VARCHAR AS last_modified,
             unnest($hash)::VARCHAR AS hash, unnest($title)::VARCHAR AS title, unnest($lang)::VARCHAR AS lang,
             unnest($extractor)::VARCHAR AS extractor, unnest($html_bytes)::INTEGER AS html_bytes,
             unnest($text_bytes)::INTEGER AS text_bytes, unnest($text)::VARCHAR AS text,
             unnest($depth)::INTEGER AS depth, unnest($extract_seconds)::DOUBLE AS extract_seconds,
             unnest($canonical)::VARCHAR AS canonical, unnest($duplicate_of)::VARCHAR AS duplicate_of,
             unnest($text_hash)::VARCHAR AS text_hash)
"""
INSERT_PAGE_HTML = "INSERT OR REPLACE INTO page_html (url, html_z) SELECT unnest($url), unnest($html)::BLOB"
INSERT_CHUNKS = """
INSERT OR REPLACE INTO chunks
SELECT unnest($chunk_id), unnest($url), unnest($ordinal)::INTEGER, unnest($heading)::VARCHAR, unnest($text)::VARCHAR,
       unnest($tokens)::INTEGER, unnest($hash), unnest($key), unnest($page)::INTEGER
"""
INSERT_PAGE_LINKS = "INSERT INTO page_links (url, target, ordinal) SELECT unnest($url), unnest($target), unnest($ordinal)"


def failures_query(crawl_run_id: int | None) -> str:
    """The SQL a message shows the user to list a crawl's failed and skipped URLs."""
    return f"SELECT url, reason FROM fetch_log WHERE crawl_run_id = {crawl_run_id}"


# The SQL a message shows the user to read what a page was cleaned into.
PAGE_TEXT_QUERY = "SELECT text FROM pages WHERE url = …"
