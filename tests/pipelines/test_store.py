"""The crawl side of the DuckDB store, without a crawl: pages, chunks, the fetch log, the BM25 index, locks,
the crawl pipeline closing its store."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import duckdb
import pytest

from jobs.errors import DatabaseLockedError, ExitCode, StoreError
from pipelines import schema, search_index
from pipelines.chunk import HEADING_SEPARATOR, Chunk
from pipelines.defaults import INDEX_BUILD_MEMORY_LIMIT
from pipelines.duckdb_connect import connect
from pipelines.store import PageRecord, Store, utcnow
from pipelines.store_pipeline import StorePipeline
from pipelines.vectors import embed_key

URL = "https://docs.example.org/json.html"
OTHER = "https://docs.example.org/csv.html"
T0 = datetime(2024, 1, 1, 12, 0, 0)


def chunk(url: str, ordinal: int, path: tuple[str, ...], text: str) -> Chunk:
    key = "\x1f".join([url, "\x1e".join(path), text])
    return Chunk(
        chunk_id=hashlib.sha256(key.encode()).hexdigest()[:16],
        ordinal=ordinal,
        heading_path=path,
        text=text,
        token_estimate=len(text.split()),
        content_hash=hashlib.sha256(text.encode()).hexdigest(),
    )


def record(url: str = URL, body: str = "<html>v1</html>", at: datetime = T0, **changes: object) -> PageRecord:
    base = PageRecord(
        url=url, final_url=url, status=200, fetched_at=at, content_type="text/html; charset=utf-8",
        etag='"v1"', last_modified="Mon, 01 Jan 2024 00:00:00 GMT",
        content_hash=hashlib.sha256(body.encode()).hexdigest(), title="json — JSON encoder", lang="en",
        extractor="main", html_bytes=len(body.encode()), text_bytes=11, text="JSON intro.", html=body, depth=0,
        extract_seconds=0.05,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


JSON_CHUNKS = [
    chunk(URL, 0, ("json",), "JSON is a lightweight data interchange format."),
    chunk(URL, 1, ("json", "Basic Usage"), "Serialize obj to a JSON formatted str with dumps."),
    chunk(URL, 2, ("json", "Encoders"), "Extensible encoder for Python data structures."),
]
CSV_CHUNKS = [chunk(OTHER, 0, ("csv",), "The csv module reads and writes tabular data in comma separated files.")]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "webqa.duckdb") as opened:
        yield opened


def page_row(store: Store, url: str = URL) -> dict[str, object]:
    cursor = store.conn.execute("SELECT * FROM pages WHERE url = ?", [url])
    names = [d[0] for d in cursor.description]
    row = cursor.fetchone()
    assert row is not None, f"{url} not stored"
    return dict(zip(names, row))


def chunk_rows(store: Store, url: str = URL) -> list[tuple[str, int, str, str]]:
    return store.chunks_for(url)


def meta(store: Store, key: str) -> str | None:
    row = store.conn.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
    return row[0] if row else None


# -- schema ----------------------------------------------------------------------------------------


def test_open_creates_schema_once(tmp_path: Path) -> None:
    path = tmp_path / "webqa.duckdb"
    with Store.open(path) as first:
        first.save_page(record(), JSON_CHUNKS, None)
    with Store.open(path) as second:  # migrating again keeps the data
        assert meta(second, "schema_version") == str(schema.SCHEMA_VERSION)
        assert second.count_chunks() == 3
    with Store.open(path, read_only=True) as reader:
        assert reader.page_hash(URL) == record().content_hash


# -- save_page -------------------------------------------------------------------------------------


def indexed(store: Store) -> list[str]:
    return [c for (c,) in store.conn.execute("SELECT chunk_id FROM selection_docs ORDER BY chunk_id").fetchall()]


@pytest.mark.parametrize("installed", [False, True])
def test_a_query_needing_an_unloaded_extension_fails_at_once(tmp_path: Path, installed: bool) -> None:
    # The fts extension's stem() before webqa loaded it (from its pinned package): DuckDB would otherwise try
    # extensions.duckdb.org (a network call without webqa's timeouts), or load a copy someone installed by hand.
    conn = connect(tmp_path / "x.duckdb")
    extensions = tmp_path / "extensions"
    conn.execute(f"SET extension_directory = '{extensions}'")
    if installed:  # as `INSTALL fts` would have put it
        platform = conn.execute("PRAGMA platform").fetchone()[0]
        folder = extensions / f"v{duckdb.__version__}" / platform
        folder.mkdir(parents=True)
        shutil.copy(search_index.fts_extension_path(), folder / "fts.duckdb_extension")
    with pytest.raises(duckdb.Error) as failed:
        conn.execute("SELECT stem('running', 'porter')").fetchall()
    assert "download" not in str(failed.value).lower() and "extensions.duckdb.org" not in str(failed.value), failed.value
    search_index.load_fts(conn)
    assert conn.execute("SELECT stem('running', 'porter')").fetchone() == ("run",)
    conn.close()


def test_the_stemmer_loads_from_a_path_with_a_quote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # webqa installed under /home/o'brien: the extension's path is a SQL string literal in LOAD.
    folder = tmp_path / "o'brien"
    folder.mkdir()
    copy = Path(shutil.copy(search_index.fts_extension_path(), folder / "fts.duckdb_extension"))
    monkeypatch.setattr(search_index, "fts_extension_path", lambda: copy)
    conn = connect(tmp_path / "x.duckdb")
    search_index.load_fts(conn)
    assert conn.execute("SELECT stem('running', 'porter')").fetchone() == ("run",)
    conn.close()


def test_new_page_stores_row_html_and_chunks(store: Store) -> None:
    assert store.save_page(record(), JSON_CHUNKS, 7) == "new"

    row = page_row(store)
    assert row["final_url"] == URL and row["status"] == 200
    assert (row["title"], row["lang"], row["extractor"], row["text"]) == ("json — JSON encoder", "en", "main", "JSON intro.")
    assert (row["fetched_at"], row["checked_at"], row["changed_at"], row["crawl_run_id"]) == (T0, T0, T0, 7)
    assert (row["etag"], row["html_bytes"]) == ('"v1"', len(b"<html>v1</html>"))
    assert store.page_text_and_html(URL)[1] == "<html>v1</html>"
    assert chunk_rows(store) == [
        (c.chunk_id, c.ordinal, HEADING_SEPARATOR.join(c.heading_path), c.text) for c in JSON_CHUNKS
    ]
    stored_keys = store.conn.execute("SELECT embed_key FROM chunks WHERE url = ? ORDER BY ordinal", [URL]).fetchall()
    assert [k for (k,) in stored_keys] == [embed_key(c.heading, c.text) for c in JSON_CHUNKS]
    assert indexed(store) == sorted(c.chunk_id for c in JSON_CHUNKS)  # indexed in the same transaction


def test_unchanged_body_only_refreshes_bookkeeping(store: Store) -> None:
    store.save_page(record(), JSON_CHUNKS, 1)
    index_before = _postings(store)
    later = T0 + timedelta(days=1)
    # Same body (same hash): new validators and fetch time are recorded, nothing else is written,
    # not even chunks a newer chunker would cut differently.
    again = record(at=later, etag='"v1-gzip"', title="ignored", text="ignored")
    assert store.save_page(again, JSON_CHUNKS[:1], 2) == "unchanged"

    row = page_row(store)
    assert (row["fetched_at"], row["checked_at"], row["etag"]) == (later, later, '"v1-gzip"')
    assert (row["changed_at"], row["crawl_run_id"], row["title"], row["text"]) == (T0, 1, "json — JSON encoder", "JSON intro.")
    assert [r[0] for r in chunk_rows(store)] == [c.chunk_id for c in JSON_CHUNKS]
    assert _postings(store) == index_before


def test_changed_body_replaces_the_page_chunks_only(store: Store) -> None:
    store.save_page(record(), JSON_CHUNKS, 1)
    store.save_page(record(OTHER, "<html>csv</html>"), CSV_CHUNKS, 1)
    later = T0 + timedelta(days=2)
    # The intro is unchanged (same chunk id: deleted and inserted again in one transaction),
    # "Basic Usage" is rewritten and "Encoders" is gone.
    new_chunks = [
        JSON_CHUNKS[0],
        chunk(URL, 1, ("json", "Basic Usage"), "Serialize obj to a JSON formatted str; see also dump."),
    ]
    changed = record(body="<html>v2</html>", at=later, etag='"v2"', text="JSON intro, v2.")
    assert store.save_page(changed, new_chunks, 3) == "changed"

    row = page_row(store)
    assert (row["changed_at"], row["fetched_at"], row["crawl_run_id"], row["text"]) == (later, later, 3, "JSON intro, v2.")
    assert store.page_text_and_html(URL)[1] == "<html>v2</html>"
    assert [r[0] for r in chunk_rows(store)] == [c.chunk_id for c in new_chunks]
    assert store.conn.execute("SELECT count(*) FROM chunks WHERE chunk_id = ?", [JSON_CHUNKS[2].chunk_id]).fetchone() == (0,)
    assert [r[0] for r in chunk_rows(store, OTHER)] == [CSV_CHUNKS[0].chunk_id]
    assert page_row(store, OTHER)["crawl_run_id"] == 1


def test_changed_page_without_chunks_drops_old_chunks(store: Store) -> None:
    store.save_page(record(), JSON_CHUNKS, 1)
    assert store.save_page(record(body="<html></html>", extractor="empty", text=""), [], 2) == "changed"
    assert chunk_rows(store) == [] and indexed(store) == []
    assert store.conn.execute("SELECT count(*) FROM bm25_postings").fetchone() == (0,)


def test_failed_chunk_write_leaves_the_previous_page_whole(store: Store) -> None:
    store.save_page(record(), JSON_CHUNKS, 1)
    index_before = _postings(store)
    broken = [JSON_CHUNKS[0], dataclasses.replace(JSON_CHUNKS[1], text=None)]  # violates NOT NULL mid-write
    with pytest.raises(duckdb.Error):
        store.save_page(record(body="<html>v2</html>", text="half written"), broken, 2)

    row = page_row(store)
    assert (row["text"], row["crawl_run_id"], row["content_hash"]) == ("JSON intro.", 1, record().content_hash)
    assert [r[0] for r in chunk_rows(store)] == [c.chunk_id for c in JSON_CHUNKS]
    assert store.page_text_and_html(URL)[1] == "<html>v1</html>"
    assert _postings(store) == index_before  # the index rolled back with the page
    # The connection is usable afterwards: the transaction was rolled back, not left open.
    assert store.save_page(record(body="<html>v3</html>"), JSON_CHUNKS[:1], 3) == "changed"


# -- 304s, validators, fetch log, crawl runs -------------------------------------------------------


def test_mark_checked_keeps_content_and_download_time(store: Store) -> None:
    store.save_page(record(), JSON_CHUNKS, 1)
    before = utcnow()
    store.mark_checked(URL, 304, etag='"v1-new"')

    row = page_row(store)
    assert isinstance(row["checked_at"], datetime) and row["checked_at"] >= before
    assert (row["fetched_at"], row["changed_at"], row["crawl_run_id"]) == (T0, T0, 1)
    assert (row["etag"], row["last_modified"]) == ('"v1-new"', "Mon, 01 Jan 2024 00:00:00 GMT")  # None keeps the old
    assert len(chunk_rows(store)) == 3

    store.mark_checked("https://docs.example.org/never-stored.html", 304)
    assert store.conn.execute("SELECT count(*) FROM pages").fetchone() == (1,)


def test_validators_give_conditional_headers_and_last_check(store: Store) -> None:
    store.save_page(record(), JSON_CHUNKS, 1)
    store.save_page(record(OTHER, "<html>csv</html>", etag=None, last_modified=None), CSV_CHUNKS, 1)
    store.mark_checked(URL, 304)

    found = store.validators()
    assert set(found) == {URL, OTHER}
    assert (found[URL].etag, found[URL].last_modified) == ('"v1"', "Mon, 01 Jan 2024 00:00:00 GMT")
    # Freshness counts from the last time the server confirmed the page, 304 included.
    assert found[URL].fetched_at == page_row(store)["checked_at"] != T0
    assert (found[OTHER].etag, found[OTHER].last_modified, found[OTHER].fetched_at) == (None, None, T0)


def test_fetch_log_and_crawl_runs(store: Store) -> None:
    run = store.begin_crawl("nightly", urls_requested=4)
    assert store.begin_crawl() == run + 1
    store.log_fetch(run, "https://docs.example.org/missing", "failed", "HTTP 404", 404)
    store.log_fetch(run, "ftp://x", "skipped", "urls.txt:3: unsupported scheme 'ftp'")
    store.finish_crawl(run, "done", {"fetched": 2, "new": 1, "unchanged": 1, "failed": 1, "skipped": 1,
                                     "chunks": 3, "html_bytes": 1000, "not_a_column": 9})

    assert store.conn.execute(
        "SELECT crawl_run_id, url, status, outcome, reason FROM fetch_log ORDER BY fetch_log_id"
    ).fetchall() == [
        (run, "https://docs.example.org/missing", 404, "failed", "HTTP 404"),
        (run, "ftp://x", None, "skipped", "urls.txt:3: unsupported scheme 'ftp'"),
    ]
    info = store.crawl_run(run)
    assert (info["status"], info["job_name"], info["urls_requested"]) == ("done", "nightly", 4)
    assert (info["fetched"], info["new"], info["unchanged"], info["failed"], info["skipped"], info["chunks"]) == (2, 1, 1, 1, 1, 3)
    assert info["finished_at"] is not None and info["finished_at"] >= info["started_at"]
    assert store.crawl_run(run + 1)["status"] == "running"
    with pytest.raises(StoreError):
        store.crawl_run(run + 99)


# -- full-text index -------------------------------------------------------------------------------


def bm25(store: Store, query: str) -> list[str]:
    from jobs.select import Selector

    return [c.chunk_id for c in Selector(store.conn, ensure_fts=store.load_fts).bm25(query, None)]


def test_pages_are_indexed_as_they_are_written(store: Store) -> None:
    assert not store.fts_is_stale()  # nothing stored, nothing to index
    store.save_page(record(), JSON_CHUNKS, 1)
    store.save_page(record(OTHER, "<html>csv</html>"), CSV_CHUNKS, 1)
    assert not store.fts_is_stale()  # no build needed: the writes indexed their chunks

    hits = bm25(store, "json")
    # "Encoders" says nothing of JSON in its text: its heading path "json › Encoders" is indexed too.
    assert set(hits) == {c.chunk_id for c in JSON_CHUNKS}
    assert hits[0] in {JSON_CHUNKS[0].chunk_id, JSON_CHUNKS[1].chunk_id}
    assert bm25(store, "tabular") == [CSV_CHUNKS[0].chunk_id]
    assert bm25(store, "serializing") == [JSON_CHUNKS[1].chunk_id]  # stemmed

    # A changed page replaces its rows; an unchanged one leaves them; a deleted one takes them along.
    store.save_page(record(body="<html>v2</html>", at=T0), JSON_CHUNKS[:1], 2)
    assert bm25(store, "encoder") == [] and bm25(store, "json") == [JSON_CHUNKS[0].chunk_id]
    store.save_page(record(body="<html>v2</html>", at=T0 + timedelta(days=1)), JSON_CHUNKS[:1], 3)
    assert bm25(store, "json") == [JSON_CHUNKS[0].chunk_id]
    assert store.delete_page(OTHER) and not store.delete_page(OTHER)
    assert bm25(store, "tabular") == []
    assert store.conn.execute("SELECT count(*), count(DISTINCT doc) FROM selection_docs").fetchone() == (1, 1)
    assert not store.fts_is_stale()


REFERENCE_FTS = (
    "PRAGMA create_fts_index('chunks', 'chunk_id', 'heading_path', 'text', "
    "stemmer='porter', stopwords='reference_stopwords', ignore='(\\.|[^a-z0-9])+', strip_accents=1, lower=1, "
    "overwrite=1)"
)


def _postings(store: Store) -> list[tuple[object, ...]]:
    return store.conn.execute(
        "SELECT p.term, s.chunk_id, p.tf_heading, p.tf_text, p.len, s.len FROM bm25_postings p "
        "JOIN selection_docs s USING (doc) ORDER BY ALL").fetchall()


def test_postings_are_the_fts_extensions_postings(store: Store) -> None:
    accented = chunk(OTHER, 1, ("Café", "Numbers 2.1"), "The café's port 8470 — HTTP 404, e.g. naïve résumé; ÀÉÎ.")
    store.save_page(record(), JSON_CHUNKS, 1)
    store.save_page(record(OTHER, "<html>csv</html>"), [*CSV_CHUNKS, accented, chunk(OTHER, 2, (), "")], 1)
    ours = _postings(store)
    # The extension's own index of the same chunks with the same settings: the same terms, counted the same.
    store.load_fts()
    # English's stop words (fts_stopwords holds one list per stemmer; the extension reads a one-column table).
    store.conn.execute("CREATE TABLE reference_stopwords AS SELECT sw FROM fts_stopwords WHERE lang = 'porter'")
    store.conn.execute(REFERENCE_FTS)
    reference = store.conn.execute(
        """
        SELECT dict.term, d.name, count(*) FILTER (WHERE t.fieldid = 0), count(*) FILTER (WHERE t.fieldid = 1),
               any_value(d.len), any_value(d.len)
        FROM fts_main_chunks.terms t JOIN fts_main_chunks.docs d USING (docid) JOIN fts_main_chunks.dict USING (termid)
        GROUP BY dict.term, d.name ORDER BY ALL
        """).fetchall()
    assert ours == reference
    assert store.conn.execute("SELECT field FROM fts_main_chunks.fields WHERE fieldid = 0").fetchone() == ("heading_path",)
    # Every chunk is a doc, the empty one included (BM25's document count and average length count it).
    assert store.conn.execute("SELECT list(len ORDER BY len) FROM selection_docs").fetchone() == \
        store.conn.execute("SELECT list(len ORDER BY len) FROM fts_main_chunks.docs").fetchone()


def test_full_rebuild_numbers_docs_in_url_order_and_keeps_the_postings(store: Store) -> None:
    store.save_page(record(OTHER, "<html>csv</html>"), CSV_CHUNKS, 1)
    store.save_page(record(), JSON_CHUNKS, 1)
    incremental = _postings(store)
    store.rebuild_fts()
    conn = store.conn
    # selection_docs after a full build: every chunk, numbered in (url, ordinal) order.
    docs = conn.execute("SELECT doc, chunk_id FROM selection_docs ORDER BY doc").fetchall()
    expected = conn.execute("SELECT chunk_id FROM chunks ORDER BY url, ordinal").fetchall()
    assert [d for d, _ in docs] == list(range(1, len(expected) + 1))
    assert [c for _, c in docs] == [c for (c,) in expected]
    assert _postings(store) == incremental
    assert conn.execute("SELECT sum(tf_heading) > 0 AND sum(tf_text) > 0 FROM bm25_postings").fetchone() == (True,)


def test_a_full_rebuild_runs_under_its_memory_limit_and_puts_the_previous_one_back(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store.save_page(record(), JSON_CHUNKS, 1)
    setting = "SELECT current_setting('memory_limit')"
    before = store.conn.execute(setting).fetchone()  # DuckDB's default
    during: list[object] = []
    real = search_index.rebuild
    monkeypatch.setattr(search_index, "rebuild", lambda conn: during.append(conn.execute(setting).fetchone()) or real(conn))
    store.rebuild_fts()
    assert store.conn.execute(setting).fetchone() == before
    expected = store.conn.execute(f"SET memory_limit = '{INDEX_BUILD_MEMORY_LIMIT}'; {setting}").fetchone()
    store.conn.execute("RESET memory_limit")
    assert during == [expected] and expected != before
    monkeypatch.setattr(search_index, "rebuild", lambda conn: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # put back on failure too
        store.rebuild_fts()
    assert store.conn.execute(setting).fetchone() == before


def test_index_without_the_derived_tables_is_stale(store: Store) -> None:
    # Tables dropped (or never made): `webqa crawl` / `run` / `ask` build them in full.
    store.save_page(record(), JSON_CHUNKS, 1)
    assert not store.fts_is_stale()
    store.conn.execute("DROP TABLE bm25_postings")
    assert store.fts_is_stale()
    store.conn.execute(schema.INDEX_TABLES)
    store.rebuild_fts()
    assert not store.fts_is_stale()


def test_chunks_written_behind_the_stores_back_make_the_index_stale(store: Store) -> None:
    store.save_page(record(), JSON_CHUNKS, 1)
    store.conn.execute("DELETE FROM chunks WHERE ordinal = 2")
    assert store.fts_is_stale()
    store.rebuild_fts()
    assert not store.fts_is_stale()
    assert bm25(store, "encoder") == []


def test_a_database_indexed_by_an_older_version_is_migrated_and_rebuilt(tmp_path: Path) -> None:
    db = tmp_path / "old.duckdb"
    with Store.open(db) as opened:
        opened.save_page(record(), JSON_CHUNKS, 1)
        # What schema version 3 left: tables derived from the fts extension's index, and its markers.
        conn = opened.conn
        conn.execute("DROP TABLE selection_docs")
        conn.execute("DROP TABLE bm25_postings")
        conn.execute("CREATE TABLE selection_docs AS SELECT 1 AS doc, 0::BIGINT AS docid, 'x' AS chunk_id, "
                     "'u' AS url, 'k' AS embed_key")
        conn.execute("CREATE TABLE bm25_postings AS SELECT 0::BIGINT AS termid, 1 AS doc, 1 AS tf_heading, "
                     "1 AS tf_text, 1::BIGINT AS len")
        conn.execute("CREATE TABLE unit_vectors_8 AS SELECT 'm' AS model, 1 AS doc, 0 AS part, "
                     "[0, 0, 0, 0, 0, 0, 0, 1]::FLOAT[8] AS vector")
        conn.execute("DELETE FROM meta WHERE key = ?", [schema.INDEX_META_KEY])
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('fts_built_at', '2024-01-01'), ('schema_version', '3')")
    with Store.open(db) as reopened:
        assert reopened.fts_is_stale()
        tables = {t for (t,) in reopened.conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert "unit_vectors_8" not in tables and {"selection_docs", "bm25_postings"} <= tables
        reopened.rebuild_fts()
        assert not reopened.fts_is_stale()
        assert set(bm25(reopened, "json")) == {c.chunk_id for c in JSON_CHUNKS}


def test_html_stored_before_schema_7_is_read_as_it_was_and_new_html_is_compressed(tmp_path: Path) -> None:
    db = tmp_path / "v6.duckdb"
    with Store.open(db) as opened:
        # What schema version 6 left: page_html with the HTML as text, no compressed column.
        opened.save_page(record(), JSON_CHUNKS, 1)
        opened.conn.execute("DROP TABLE page_html")
        opened.conn.execute("CREATE TABLE page_html (url VARCHAR PRIMARY KEY, html VARCHAR)")
        opened.conn.execute("INSERT INTO page_html VALUES (?, '<html>stored as text</html>')", [URL])
        opened.conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', '6')")
    with Store.open(db) as reopened:
        assert reopened.page_text_and_html(URL) == ("JSON intro.", "<html>stored as text</html>")
        # A page written now is stored compressed (a lone surrogate too: bodies decoded with errors kept).
        html = "<html>v2 \udcff " + "é" * 5000 + "</html>"
        reopened.save_page(record(html=html, content_hash="v2"), JSON_CHUNKS, 2)
        assert reopened.page_text_and_html(URL)[1] == html
        stored, z = reopened.conn.execute("SELECT html, html_z FROM page_html WHERE url = ?", [URL]).fetchone()
        assert stored is None and len(z) < len(html.encode("utf-8", "surrogatepass")) / 10


@pytest.mark.e2e
def test_a_database_written_by_a_newer_webqa_is_refused_in_one_line_and_left_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "newer.duckdb"
    with Store.open(db) as opened:
        opened.conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(schema.SCHEMA_VERSION + 1)])
    with pytest.raises(StoreError) as refused:
        Store.open(db)
    message = str(refused.value)
    assert message == (f"{db}: written by a newer webqa (schema {schema.SCHEMA_VERSION + 1}, this one knows up to "
                       f"{schema.SCHEMA_VERSION}); upgrade webqa, or crawl into another --db")
    # What cron sees: one line naming the file and what to do, exit 3, nothing fetched.
    from tests.support.crawling import run_cli
    result = run_cli("-q", "http://127.0.0.1:9/never.html", db=db)
    assert result.returncode == int(ExitCode.FAILED), result.stderr
    assert result.stderr.strip().splitlines() == [f"Error: {message}"] and result.stdout == ""
    # Not set back, and not left locked: another connection reads the newer version.
    conn = duckdb.connect(str(db))
    try:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            str(schema.SCHEMA_VERSION + 1),)
    finally:
        conn.close()


def test_float_columns_are_stored_uncompressed(tmp_path: Path) -> None:
    # Decompressing ALP/ALPRD vectors cost more per question than the cosine itself (schema.py).
    with Store.open(tmp_path / "f.duckdb") as opened:
        opened.conn.execute("CREATE TABLE v AS SELECT [random()::FLOAT for _ in range(8)]::FLOAT[8] AS x FROM range(5000)")
        opened.conn.execute("CHECKPOINT")
        methods = {m for (m,) in opened.conn.execute(
            "SELECT DISTINCT compression FROM pragma_storage_info('v') WHERE segment_type = 'FLOAT'").fetchall()}
        assert methods and not methods & {"ALP", "ALPRD"}


def test_connections_draw_no_progress_bar(tmp_path: Path) -> None:
    # A long rebuild would otherwise draw DuckDB's bar on stdout, into cron mail and `--json` output.
    with Store.open(tmp_path / "p.duckdb") as opened:
        assert opened.conn.execute("SELECT current_setting('enable_progress_bar')").fetchone() == (False,)


# -- opening errors --------------------------------------------------------------------------------

_HOLD = """
import sys, time, duckdb
conn = duckdb.connect(sys.argv[1])
print("ready", flush=True)
time.sleep(120)
"""


@pytest.mark.e2e
def test_database_held_by_another_process_is_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "held.duckdb"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        for read_only in (False, True):
            with pytest.raises(DatabaseLockedError) as err:
                Store.open(path, read_only=read_only)
            message = str(err.value)
            assert message.startswith(f"{path} is in use by another process (")
            assert f", PID {holder.pid}); wait for it to finish or use another --db" in message
            assert "\n" not in message
            assert err.value.exit_code == ExitCode.LOCKED == 4
    finally:
        holder.kill()
        holder.wait(timeout=10)
    with Store.open(path) as store:  # free again once the holder is gone
        assert store.count_chunks() == 0


def test_open_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no such database; run `webqa crawl URL… --db "):
        Store.open(tmp_path / "missing.duckdb", read_only=True)
    with pytest.raises(StoreError, match="does not exist"):
        Store.open(tmp_path / "no-folder" / "webqa.duckdb")
    garbage = tmp_path / "notes.duckdb"
    garbage.write_bytes(b"this is not a database\n" * 1000)
    with pytest.raises(StoreError) as err:
        Store.open(garbage)
    assert str(err.value).startswith(f"{garbage}: ") and "\n" not in str(err.value).strip()


@pytest.mark.e2e
def test_duckdb_does_not_search_for_an_absent_pandas_on_every_query(tmp_path: Path) -> None:
    # Run in a fresh interpreter: whether pandas is importable decides what the product does.
    script = """
import importlib.util, sys
absent = importlib.util.find_spec("pandas") is None
import pipelines.store as store
untouched = "pandas" not in sys.modules  # importing the module changes no process state

class Spy:
    searched = 0
    def find_spec(self, name, path=None, target=None):
        if name == "pandas":
            Spy.searched += 1
        return None

conn = store.connect(sys.argv[1])  # records the absence, once
sys.meta_path.insert(0, Spy())
for i in range(20):
    conn.execute("SELECT ?::INTEGER + 1", [i]).fetchall()
print(absent, untouched, Spy.searched)
"""
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "p.duckdb")], capture_output=True, text=True,
                          timeout=60, check=True)
    absent, untouched, searched = done.stdout.split()
    if absent != "True":
        pytest.skip("pandas is installed here: DuckDB imports it once and keeps it")
    assert untouched == "True"
    assert searched == "0"


# -- out-links and job pages -----------------------------------------------------------------------


def test_save_page_replaces_the_page_links(store: Store) -> None:
    store.save_page(record(links=(OTHER, URL + "?v=2")), JSON_CHUNKS, 1)
    store.save_page(record(OTHER, "<html>csv</html>"), CSV_CHUNKS, 1)
    assert store.page_links() == {URL: [OTHER, URL + "?v=2"], OTHER: []}  # [] = links nowhere

    # Unchanged body: the links are rewritten all the same (a page stored before links were kept has none).
    store.save_page(record(at=T0 + timedelta(days=1), links=(OTHER,)), JSON_CHUNKS, 2)
    assert store.page_links()[URL] == [OTHER]
    store.save_page(record(body="<html>v2</html>", links=()), JSON_CHUNKS, 3)
    assert store.page_links()[URL] == []
    assert page_row(store)["links_at"] == T0


def test_pages_stored_before_links_were_kept_have_no_links_entry(store: Store) -> None:
    store.save_page(record(links=(OTHER,)), JSON_CHUNKS, 1)
    store.conn.execute("UPDATE pages SET links_at = NULL")
    assert store.page_links() == {}


def test_failed_page_write_keeps_the_previous_links(store: Store) -> None:
    store.save_page(record(links=(OTHER,)), JSON_CHUNKS, 1)
    broken = [JSON_CHUNKS[0], dataclasses.replace(JSON_CHUNKS[1], text=None)]  # fails after the links are written
    with pytest.raises(duckdb.Error):
        store.save_page(record(body="<html>v2</html>", links=(URL,)), broken, 2)
    assert store.page_links() == {URL: [OTHER]}


def test_job_pages_of_the_latest_crawl_and_the_gone_ones(store: Store) -> None:
    first = store.begin_crawl("docs")
    store.record_job_pages("docs", first, {URL: 0, OTHER: 1})
    store.finish_crawl(first, "done", {})
    other_job = store.begin_crawl("blog")
    store.record_job_pages("blog", other_job, {"https://blog.example.org/": 0})
    store.finish_crawl(other_job, "done", {})
    second = store.begin_crawl("docs")
    store.record_job_pages("docs", second, {URL: 0})
    store.finish_crawl(second, "done", {})

    assert store.job_page_urls("docs") == [URL]
    assert store.job_page_urls("docs", crawl_run_id=second) == [URL]
    assert store.job_page_urls("blog") == ["https://blog.example.org/"]
    assert store.job_page_urls("none") == []
    assert store.gone_job_pages("docs", second) == [OTHER]
    assert store.gone_job_pages("docs", first) == []  # no crawl of the job before it
    assert store.gone_job_pages("blog", other_job) == []  # the docs job's crawl is not the blog's previous
    rows = store.conn.execute(
        "SELECT url, depth, first_seen <= last_seen, last_crawl_run_id FROM job_pages WHERE job_name = 'docs' ORDER BY url"
    ).fetchall()
    assert rows == [(OTHER, 1, True, first), (URL, 0, True, second)]  # OTHER keeps its old last_seen


def test_gone_pages_compare_with_the_previous_finished_crawl(store: Store) -> None:
    done = store.begin_crawl("docs")
    store.record_job_pages("docs", done, {URL: 0, OTHER: 1})
    store.finish_crawl(done, "done", {})
    cut_short = store.begin_crawl("docs")
    store.record_job_pages("docs", cut_short, {URL: 0})
    store.finish_crawl(cut_short, "interrupted", {})
    third = store.begin_crawl("docs")
    store.record_job_pages("docs", third, {URL: 0})

    # The interrupted crawl never reached OTHER, but that says nothing: compared with the done one.
    assert store.gone_job_pages("docs", third) == [OTHER]


# -- batched writes --------------------------------------------------------------------------------


def _everything(store: Store) -> dict[str, list[tuple[object, ...]]]:
    tables = {
        "pages": "SELECT * FROM pages", "page_html": "SELECT * FROM page_html", "page_links": "SELECT * FROM page_links",
        "chunks": "SELECT * FROM chunks",
        "docs": "SELECT chunk_id, url, ordinal, embed_key, len FROM selection_docs",
    }
    got = {name: store.conn.execute(f"{sql} ORDER BY ALL").fetchall() for name, sql in tables.items()}
    got["postings"] = _postings(store)
    return got


def test_a_batch_of_pages_is_stored_as_page_by_page(tmp_path: Path) -> None:
    later = T0 + timedelta(days=1)
    third = "https://docs.example.org/third.html"
    rounds = [
        [(record(links=("https://docs.example.org/a", "https://docs.example.org/b")), JSON_CHUNKS),
         (record(OTHER, "<html>csv</html>", etag=None, last_modified=None, title=None, lang=None), CSV_CHUNKS),
         (record(third, "<html>empty</html>", extractor="empty", text=""), [])],
        # unchanged (new validators, links), changed (fewer chunks), new again after nothing
        [(record(at=later, etag='"v1-gzip"', links=("https://docs.example.org/b",)), JSON_CHUNKS[:1]),
         (record(OTHER, "<html>csv v2</html>", at=later), [*CSV_CHUNKS, chunk(OTHER, 1, ("csv", "More"), "Dialects.")]),
         (record(third, "<html>third v2</html>", at=later), [chunk(third, 0, ("third",), "Tomatoes grow.")])],
    ]
    with Store.open(tmp_path / "one.duckdb") as one, Store.open(tmp_path / "batch.duckdb") as batch:
        for run, pages in enumerate(rounds, start=1):
            states = [one.save_page(page, chunks, run) for page, chunks in pages]
            assert batch.save_pages(pages, run) == states
            assert _everything(batch) == _everything(one)
        assert states == ["unchanged", "changed", "changed"]
        assert not batch.fts_is_stale() and batch.save_pages([], 3) == []
        with pytest.raises(StoreError, match="twice"):
            batch.save_pages([rounds[0][0], rounds[0][0]], 3)


def test_a_failed_batch_leaves_every_page_as_it_was(store: Store) -> None:
    store.save_page(record(), JSON_CHUNKS, 1)
    before = _everything(store)
    broken = [JSON_CHUNKS[0], dataclasses.replace(JSON_CHUNKS[1], text=None)]  # violates NOT NULL
    with pytest.raises(duckdb.Error):
        store.save_pages([(record(OTHER, "<html>csv</html>"), CSV_CHUNKS),
                          (record(body="<html>v2</html>"), broken)], 2)
    assert _everything(store) == before
    assert store.save_pages([(record(OTHER, "<html>csv</html>"), CSV_CHUNKS)], 3) == ["new"]


# -- the crawl's store pipeline --------------------------------------------------------------------

_OPEN_FOR_WRITING = """
import sys, duckdb
conn = duckdb.connect(sys.argv[1])
conn.execute("CREATE TABLE after_the_crawl (x INTEGER)")
print(conn.execute("SELECT status FROM crawl_runs").fetchall())
conn.close()
"""


@pytest.mark.e2e
def test_the_crawls_store_is_closed_even_when_resetting_its_threads_fails(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "webqa.duckdb"
    pipeline = StorePipeline(SimpleNamespace(spider=None, stats=None, engine=None), str(path), None)  # type: ignore[arg-type]
    pipeline.open_spider()
    pipeline.close_spider()
    store = pipeline.store
    assert store is not None

    def fatal(threads: int | None) -> None:
        # What every statement but close raises once DuckDB has met a fatal error (a failed WAL write).
        raise duckdb.FatalException("FATAL Error: Failed: database has been invalidated because of a previous fatal error")

    monkeypatch.setattr(store, "set_threads", fatal)
    pipeline.spider_closed("finished")  # recorded, not raised

    assert pipeline.store is None
    assert pipeline.failure == (f"{path}: writing to the database failed: FATAL Error: Failed: database has been "
                                "invalidated because of a previous fatal error; the crawl stopped and the pages "
                                "stored before it are kept; free space on that disk and crawl again")
    with pytest.raises(duckdb.ConnectionException):
        store.conn.execute("SELECT 1")
    # The file is released: another process may open it for writing (DuckDB locks it while it is open).
    other = subprocess.run([sys.executable, "-c", _OPEN_FOR_WRITING, str(path)], capture_output=True, text=True, timeout=60)
    assert other.returncode == 0, other.stderr
    assert other.stdout.strip() == "[('done',)]"  # the run was finished before the threads were reset
