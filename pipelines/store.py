"""The DuckDB store: one file holds pages, chunks, the fetch log and crawl runs.

``Store`` is the only code that writes SQL for the crawl side; values are always bound as
parameters. DuckDB allows one writing process per file, so opening a file another process holds
fails fast with a ``DatabaseLockedError`` naming the holder instead of a traceback.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb

from pipelines.errors import DatabaseLockedError, StoreError
from pipelines import defaults, schema
from pipelines.chunk import Chunk

log = logging.getLogger(__name__)

DEFAULT_DB = defaults.DB


def utcnow() -> datetime:
    # DuckDB TIMESTAMP is naive; we store UTC throughout.
    return datetime.now(timezone.utc).replace(tzinfo=None)


@dataclass(frozen=True)
class PageRecord:
    """A fetched, cleaned page ready to be stored."""

    url: str
    final_url: str
    status: int
    fetched_at: datetime
    content_type: str | None
    etag: str | None
    last_modified: str | None
    content_hash: str
    title: str | None
    lang: str | None
    extractor: str
    html_bytes: int
    text_bytes: int
    text: str
    html: str
    depth: int = 0
    extract_seconds: float = 0.0
    # Same-host out-links, normalised, in page order (see page_links in pipelines/schema.py).
    links: tuple[str, ...] = ()


@dataclass(frozen=True)
class Validators:
    """What a conditional request needs, and when the page was last known current (for freshness)."""

    etag: str | None
    last_modified: str | None
    # When the server last gave us the page or confirmed it with a 304 (``pages.checked_at``).
    fetched_at: datetime | None


def fts_extension_path() -> Path:
    """The fts extension shipped by the ``duckdb-extension-fts`` wheel for this DuckDB version.

    Extensions cannot be downloaded on every machine (``INSTALL fts`` needs the network), so we load
    the file the pinned wheel ships.
    """
    import duckdb_extension_fts

    path = Path(duckdb_extension_fts.__file__).parent / "extensions" / f"v{duckdb.__version__}" / "fts.duckdb_extension"
    if not path.exists():
        raise StoreError(
            f"the DuckDB fts extension for DuckDB {duckdb.__version__} is missing ({path}); "
            f"reinstall with `pip install duckdb-extension-fts=={duckdb.__version__}`"
        )
    return path


def embed_text(heading: str, text: str) -> str:
    """What is embedded for a chunk: the heading path carries meaning its body often leaves out."""
    return f"{heading}\n\n{text}" if heading else text


def embed_key(heading: str, text: str) -> str:
    return hashlib.sha256(embed_text(heading, text).encode("utf-8")).hexdigest()


# Embedding models read a few hundred word pieces and silently drop the rest (Ollama's all-minilm: 256, about
# 150-190 words of documentation): the second half of a 350-token chunk was invisible to embedding selection.
# A chunk is embedded as overlapping windows of words, each with its heading path, and scores as its best
# window: 150 words, overlap 30, the best of the sizes tried on the dev set (figures: BENCHMARKS.md, "Figures
# behind code comments"). Changing these values changes EMBED_SCHEME, so windows of the old scheme are simply
# no longer used; a change to how embed_windows cuts must rename the scheme too.
EMBED_WINDOW_WORDS = 150
EMBED_WINDOW_OVERLAP = 30
EMBED_SCHEME = f"w{EMBED_WINDOW_WORDS}-step{EMBED_WINDOW_WORDS - EMBED_WINDOW_OVERLAP}"


def embed_windows(heading: str, text: str, *, words: int = EMBED_WINDOW_WORDS,
                  overlap: int = EMBED_WINDOW_OVERLAP) -> list[str]:
    """The texts embedded for a chunk: one per window of ``words`` words, consecutive ones sharing ``overlap``.

    A chunk that fits one window is embedded as ``embed_text`` gives it, so its cache key stays its
    ``embed_key``. Windows start every ``words - overlap`` words until one reaches the end, so the last
    one is often short. That is on purpose: aligning it to the end instead made it a near copy of its
    neighbour, and on the dev set a short tail window (a code example, a closing remark) was what matched
    (end-aligned windows scored lower; BENCHMARKS.md, "Figures behind code comments").
    """
    tokens = text.split()
    if len(tokens) <= words:
        return [embed_text(heading, text)]
    windows = []
    for start in range(0, len(tokens), words - overlap):
        windows.append(embed_text(heading, " ".join(tokens[start : start + words])))
        if start + words >= len(tokens):
            break
    return windows


def text_key(text: str) -> str:
    """The embedding cache key of an embedded text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def insert_rows(conn: duckdb.DuckDBPyConnection, insert: str, rows: Sequence[Sequence[Any]], batch: int = 200) -> None:
    """Insert rows with one multi-row VALUES statement per batch.

    DuckDB's executemany runs one statement per row, which made storing a page cost more
    main-process CPU than cleaning it; one statement per page is several times cheaper (BENCHMARKS.md,
    "Crawl throughput"). Values stay bound as parameters; only the placeholders are generated.
    """
    for start in range(0, len(rows), batch):
        part = rows[start : start + batch]
        width = len(part[0])
        placeholders = ", ".join(["(" + ", ".join(["?"] * width) + ")"] * len(part))
        conn.execute(f"{insert} {placeholders}", [value for row in part for value in row])


_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (?P<prog>.+?) \(PID (?P<pid>\d+)\)")


def tell_duckdb_pandas_is_absent() -> None:
    """Record pandas as absent in ``sys.modules`` when it cannot be imported, so DuckDB's look-ups fail at once.

    DuckDB's Python client looks for pandas on most ``execute`` calls; without pandas Python searches
    sys.path again each time, because a failed import is not remembered (the cost is measured in
    BENCHMARKS.md, benchmark 5). Called by :func:`connect`, so importing this module changes nothing.
    """
    if "pandas" not in sys.modules and importlib.util.find_spec("pandas") is None:
        sys.modules["pandas"] = None  # type: ignore[assignment]


def connect(path: str | Path, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open the DuckDB file, translating lock and corruption errors into one-line errors."""
    tell_duckdb_pandas_is_absent()
    path = Path(path)
    if read_only and not path.exists():
        raise StoreError(f"{path}: no such database; run `webqa crawl` first or pass --db")
    if path.parent and not path.parent.exists():
        raise StoreError(f"{path}: folder {path.parent} does not exist")
    try:
        conn = duckdb.connect(str(path), read_only=read_only)
    except duckdb.IOException as exc:
        match = _LOCK_HOLDER.search(str(exc))
        if match:
            raise DatabaseLockedError(
                f"{path} is in use by another process ({match['prog']}, PID {match['pid']}); "
                "wait for it to finish or use another --db"
            ) from None
        raise StoreError(f"{path}: cannot open the database: {exc}") from None
    except duckdb.Error as exc:
        raise StoreError(f"{path}: not a usable DuckDB database: {exc}") from None
    conn.execute(schema.DISABLED_COMPRESSION)
    conn.execute(schema.NO_PROGRESS_BAR)
    return conn


def _table_exists(conn: duckdb.DuckDBPyConnection, table: str) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = ?", [table]
    ).fetchone()
    return bool(row and row[0])


def rebuild_unit_vectors(conn: duckdb.DuckDBPyConnection, dims: int) -> None:
    """(Re)build the typed vector table for ``dims`` from the cache. Needs selection_docs."""
    conn.execute(schema.rebuild_unit_vectors(dims), {"scheme": EMBED_SCHEME})


def ensure_unit_vectors(conn: duckdb.DuckDBPyConnection, dims: int) -> None:
    """Build the typed vector table for ``dims`` if it is missing (vectors of a new length, or a database
    indexed before the table existed)."""
    if not _table_exists(conn, schema.unit_vectors_table(dims)):
        rebuild_unit_vectors(conn, dims)


def vector_table_dims(conn: duckdb.DuckDBPyConnection) -> list[int]:
    """The lengths that have a typed vector table (unit_vectors_<dims>)."""
    rows = conn.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' AND starts_with(table_name, ?)",
        [schema.UNIT_VECTORS_PREFIX]).fetchall()
    return sorted(int(name.removeprefix(schema.UNIT_VECTORS_PREFIX)) for (name,) in rows
                  if name.removeprefix(schema.UNIT_VECTORS_PREFIX).isdigit())


def add_unit_vectors(conn: duckdb.DuckDBPyConnection, model: str | None, keys: Sequence[str],
                     dims: Iterable[int] | None = None) -> None:
    """Keep the typed vector tables in step with an insert into ``embeddings`` of window ``keys`` for
    ``model``, or (``model`` None) with newly mapped windows whose vectors any model may have cached.

    Chunks indexed later get their rows when they are indexed (Store.index_pages).
    """
    if not keys or not _table_exists(conn, "selection_docs"):
        return
    if dims is None:
        dims = [d for (d,) in conn.execute(
            "SELECT DISTINCT dims FROM embeddings WHERE embed_key IN (SELECT unnest($keys))", {"keys": list(keys)}
        ).fetchall()]
    for d in sorted(set(dims)):
        if _table_exists(conn, schema.unit_vectors_table(d)):
            for statement in schema.add_unit_vectors(d):
                conn.execute(statement, {"model": model, "keys": list(keys), "scheme": EMBED_SCHEME})
        else:
            rebuild_unit_vectors(conn, d)


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
            store.migrate()
        return store

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema --------------------------------------------------------------------------------

    def migrate(self) -> None:
        self.conn.execute(schema.TABLES)
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row else schema.SCHEMA_VERSION
        for step in range(version + 1, schema.SCHEMA_VERSION + 1):
            for statement in schema.MIGRATIONS.get(step, []):
                self.conn.execute(statement)
            if step == 5:
                self._drop_vector_tables()  # keyed by the former doc numbers, without url/ordinal
        self.conn.execute(
            "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(schema.SCHEMA_VERSION)]
        )
        self.conn.execute(schema.INDEX_TABLES)
        self.conn.execute(schema.CREATE_FTS_STOPWORDS)
        if self.conn.execute("SELECT count(*) FROM fts_stopwords").fetchone() != (len(schema.FTS_STOPWORDS),):
            self.conn.execute("DELETE FROM fts_stopwords")
            insert_rows(self.conn, "INSERT INTO fts_stopwords VALUES", [[w] for w in schema.FTS_STOPWORDS])
        if self._index_format() is None and self.count_chunks() == 0:
            # Nothing stored yet: the empty index is complete, and pages keep it so as they are written.
            self._set_index_format()

    def _index_format(self) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", [schema.INDEX_META_KEY]).fetchone()
        return row[0] if row else None

    def _set_index_format(self) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [schema.INDEX_META_KEY, schema.INDEX_FORMAT])

    def _drop_vector_tables(self) -> None:
        for dims in vector_table_dims(self.conn):
            self.conn.execute(f"DROP TABLE {schema.unit_vectors_table(dims)}")

    def load_fts(self) -> None:
        """Load the fts extension, for its ``stem`` function (Porter stemming of chunks and questions)."""
        if not self._fts_loaded:
            self.conn.execute(f"LOAD '{fts_extension_path()}'")
            self._fts_loaded = True

    def index_pages(self, urls: Sequence[str] | None, rows: Sequence[Sequence[Any]] = ()) -> None:
        """Bring the selection indexes in step with the pages ``urls`` (None: every page, a full build).

        Removes whatever the index held for those pages and indexes ``rows``, their chunks as just written
        (chunks-table order: chunk_id, url, ordinal, heading_path, text, token_estimate, content_hash,
        embed_key): docs, postings, and the unit vectors of windows whose vectors are cached. Call it in the
        transaction that wrote the chunks, so that the index can never be older or newer than they are.
        """
        self.load_fts()
        if urls is not None:
            if not urls:
                return
            params = {"urls": sorted(set(urls))}
            self.conn.execute(schema.UNINDEX_POSTINGS, params)
            for dims in vector_table_dims(self.conn):
                self.conn.execute(schema.unindex_unit_vectors(dims), params)
            self.conn.execute(schema.UNINDEX_DOCS, params)
            if not rows:
                return
        row = self.conn.execute(schema.NEXT_DOC_BASE).fetchone()
        base = int(row[0]) if row else 0
        if urls is None:
            source, bound = schema.ALL_CHUNKS, {}
        else:
            source = schema.BOUND_CHUNKS
            bound = {name: [r[i] for r in rows] for name, i in
                     (("chunk_id", 0), ("url", 1), ("ordinal", 2), ("heading", 3), ("text", 4), ("key", 7))}
        self.conn.execute(schema.index_terms(source), bound)
        self.conn.execute(schema.index_docs(source), {**bound, "base": base})
        self.conn.execute(schema.INDEX_POSTINGS, {"base": base})
        self.conn.execute(schema.DROP_INDEX_TERMS)
        if urls is not None:
            for dims in vector_table_dims(self.conn):
                self.conn.execute(schema.index_unit_vectors(dims), {"base": base, "scheme": EMBED_SCHEME})

    def rebuild_fts(self) -> None:
        """Rebuild every selection index from the stored chunks (`webqa reindex`; a database indexed by an
        older version). Pages written since keep it current on their own (``index_pages``).

        One transaction: docs are renumbered, and vectors keyed by the old numbers must never survive a
        rebuild killed halfway.
        """
        with self.transaction():
            for statement in schema.CLEAR_INDEX:
                self.conn.execute(statement)
            self.index_pages(None)
            for (dims,) in self.conn.execute("SELECT DISTINCT dims FROM embeddings ORDER BY dims").fetchall():
                rebuild_unit_vectors(self.conn, dims)
            legacy = self.conn.execute(
                "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' AND starts_with(table_name, ?)",
                [schema.LEGACY_VECTOR_TABLE_PREFIX]).fetchall()
            for (table,) in legacy:
                self.conn.execute(f'DROP TABLE "{table}"')
            self._set_index_format()

    reindex = rebuild_fts

    def fts_is_stale(self) -> bool:
        """True when the selection indexes need a full build: chunks stored by a version that did not index
        page by page, or index tables missing or out of step with the chunks."""
        if not all(_table_exists(self.conn, t) for t in schema.SELECTION_TABLES):
            return True
        chunks = self.count_chunks()
        if self._index_format() != schema.INDEX_FORMAT:
            return chunks > 0
        docs = self.conn.execute("SELECT count(*) FROM selection_docs").fetchone()
        return docs is None or docs[0] != chunks

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.conn.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self._rollback()
            raise
        else:
            try:
                self.conn.execute("COMMIT")
            except duckdb.Error:
                self._rollback()  # a commit the disk refused must not leave the connection mid-transaction
                raise

    def _rollback(self) -> None:
        try:
            self.conn.execute("ROLLBACK")
        except duckdb.Error as exc:
            # After a failed write (a full disk) DuckDB may refuse the rollback too; the error that
            # caused it says more than this one, so that one is raised.
            log.debug("Rollback failed: %s", exc)

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
        the page's out-links are replaced with ``page.links`` in the same transaction.
        """
        previous = self.page_hash(page.url)
        if previous == page.content_hash:
            with self.transaction():
                self.conn.execute(
                    "UPDATE pages SET checked_at = ?, fetched_at = ?, status = ?, final_url = ?, etag = ?, "
                    "last_modified = ?, links_at = ? WHERE url = ?",
                    [page.fetched_at, page.fetched_at, page.status, page.final_url, page.etag, page.last_modified,
                     page.fetched_at, page.url],
                )
                self._replace_links(page.url, page.links)
            return "unchanged"
        now = page.fetched_at
        with self.transaction():
            self.conn.execute("DELETE FROM chunks WHERE url = ?", [page.url])
            self.conn.execute(
                "INSERT OR REPLACE INTO pages (url, final_url, status, fetched_at, checked_at, content_type, etag, "
                "last_modified, content_hash, title, lang, extractor, html_bytes, text_bytes, text, depth, "
                "extract_seconds, crawl_run_id, changed_at, links_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    page.url, page.final_url, page.status, now, now, page.content_type, page.etag,
                    page.last_modified, page.content_hash, page.title, page.lang, page.extractor,
                    page.html_bytes, page.text_bytes, page.text, page.depth, page.extract_seconds,
                    crawl_run_id, now, now,
                ],
            )
            self.conn.execute("INSERT OR REPLACE INTO page_html VALUES (?, ?)", [page.url, page.html])
            self._replace_links(page.url, page.links)
            if chunks:
                rows = [
                    [c.chunk_id, page.url, c.ordinal, c.heading, c.text, c.token_estimate, c.content_hash,
                     embed_key(c.heading, c.text)]
                    for c in chunks
                ]
                insert_rows(self.conn, "INSERT OR REPLACE INTO chunks VALUES", rows)
            self.index_pages([page.url], rows if chunks else ())
        return "changed" if previous is not None else "new"

    def save_pages(self, pages: Sequence[tuple[PageRecord, Sequence[Chunk]]], crawl_run_id: int | None) -> list[str]:
        """``save_page`` for many pages in one transaction, one statement per table; the states in order.

        Values are bound as one list per column and unnested in SQL: a statement per page cost a commit
        and a dozen round trips each (BENCHMARKS.md). URLs must be distinct within a batch.
        """
        if not pages:
            return []
        urls = [page.url for page, _ in pages]
        if len(set(urls)) != len(urls):
            raise StoreError("a batch of pages names a URL twice")
        previous = dict(self.conn.execute(
            "SELECT url, content_hash FROM pages WHERE list_contains($urls, url)", {"urls": urls}).fetchall())
        states = ["unchanged" if previous.get(page.url) == page.content_hash else
                  "changed" if page.url in previous else "new" for page, _ in pages]
        same = [page for (page, _), state in zip(pages, states) if state == "unchanged"]
        written = [(page, chunks) for (page, chunks), state in zip(pages, states) if state != "unchanged"]
        with self.transaction():
            if same:
                self.conn.execute(schema.REFRESH_UNCHANGED_PAGES, _columns(
                    same, url=lambda p: p.url, fetched=lambda p: p.fetched_at, status=lambda p: p.status,
                    final_url=lambda p: p.final_url, etag=lambda p: p.etag, last_modified=lambda p: p.last_modified))
            if written:
                changed_urls = [page.url for page, _ in written]
                self.conn.execute("DELETE FROM chunks WHERE list_contains($urls, url)", {"urls": changed_urls})
                records = [page for page, _ in written]
                self.conn.execute(schema.INSERT_PAGES, {**_columns(records, **_PAGE_COLUMNS), "run": crawl_run_id})
                self.conn.execute(schema.INSERT_PAGE_HTML, _columns(records, url=lambda p: p.url, html=lambda p: p.html))
                rows = [(c.chunk_id, page.url, c.ordinal, c.heading, c.text, c.token_estimate, c.content_hash,
                         embed_key(c.heading, c.text)) for page, chunks in written for c in chunks]
                if rows:
                    self.conn.execute(schema.INSERT_CHUNKS, _columns(
                        rows, chunk_id=lambda r: r[0], url=lambda r: r[1], ordinal=lambda r: r[2], heading=lambda r: r[3],
                        text=lambda r: r[4], tokens=lambda r: r[5], hash=lambda r: r[6], key=lambda r: r[7]))
                self.index_pages(changed_urls, rows)
            self.conn.execute("DELETE FROM page_links WHERE list_contains($urls, url)", {"urls": urls})
            links = [(page.url, target, ordinal) for page, _ in pages for ordinal, target in enumerate(page.links)]
            if links:
                self.conn.execute(schema.INSERT_PAGE_LINKS, _columns(
                    links, url=lambda r: r[0], target=lambda r: r[1], ordinal=lambda r: r[2]))
        return states

    def delete_page(self, url: str) -> bool:
        """Remove a stored page, its chunks and their index rows, in one transaction; False if absent."""
        with self.transaction():
            row = self.conn.execute("DELETE FROM pages WHERE url = ? RETURNING url", [url]).fetchone()
            self.conn.execute("DELETE FROM page_html WHERE url = ?", [url])
            self.conn.execute("DELETE FROM page_links WHERE url = ?", [url])
            self.conn.execute("DELETE FROM chunks WHERE url = ?", [url])
            self.index_pages([url])
        return row is not None

    def _replace_links(self, url: str, links: Sequence[str]) -> None:
        self.conn.execute("DELETE FROM page_links WHERE url = ?", [url])
        if links:
            insert_rows(self.conn, "INSERT INTO page_links (url, target, ordinal) VALUES",
                        [[url, target, ordinal] for ordinal, target in enumerate(links)])

    def page_links(self) -> dict[str, list[str]]:
        """url → its stored out-links in page order, for every page whose links were recorded.

        A page stored before webqa kept links is absent (an empty list means it links nowhere). Targets
        repeat across pages (navigation), so each is held once in memory.
        """
        rows = self.conn.execute(
            "SELECT p.url, l.target FROM pages p LEFT JOIN page_links l ON l.url = p.url "
            "WHERE p.links_at IS NOT NULL ORDER BY p.url, l.ordinal"
        ).fetchall()
        links: dict[str, list[str]] = {}
        for url, target in rows:
            targets = links.setdefault(url, [])
            if target is not None:
                targets.append(sys.intern(target))
        return links

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
        """The pages the job's crawl ``crawl_run_id`` reached, or (None) those of its latest crawl that recorded any.

        One row per (job, URL) is kept, so this is exact for the job's latest crawl; for an earlier one it
        lists only the pages no later crawl of the job reached again.
        """
        rows = self.conn.execute(
            "SELECT url FROM job_pages WHERE job_name = $job AND last_crawl_run_id = "
            "coalesce($run, (SELECT max(last_crawl_run_id) FROM job_pages WHERE job_name = $job)) ORDER BY url",
            {"job": job_name, "run": crawl_run_id},
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
        """A 304: the stored page stays, and we record that it was confirmed current.

        ``fetched_at`` stays: it is when the stored body was downloaded (see the schema).
        """
        self.conn.execute(
            "UPDATE pages SET checked_at = ?, etag = coalesce(?, etag), "
            "last_modified = coalesce(?, last_modified) WHERE url = ?",
            [utcnow(), etag, last_modified, url],
        )

    def log_fetch(self, crawl_run_id: int | None, url: str, outcome: str, reason: str, status: int | None = None) -> None:
        self.conn.execute(
            "INSERT INTO fetch_log (crawl_run_id, url, logged_at, status, outcome, reason) VALUES (?, ?, ?, ?, ?, ?)",
            [crawl_run_id, url, utcnow(), status, outcome, reason],
        )

    def crawl_failures(self, crawl_run_id: int) -> list[dict[str, Any]]:
        """URLs that produced no page in this crawl (failed or skipped), why, and their stored copy's age.

        ``stored_fetched_at`` is when the stored copy of the URL was downloaded, None when there is none:
        a page with one is answered from a stale copy.
        """
        cursor = self.conn.execute(
            "SELECT f.url, f.outcome, f.status, f.reason, p.fetched_at AS stored_fetched_at "
            "FROM fetch_log f LEFT JOIN pages p ON p.url = f.url AND p.content_hash IS NOT NULL "
            "WHERE f.crawl_run_id = ? ORDER BY f.outcome, f.url", [crawl_run_id])
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    # -- reads ---------------------------------------------------------------------------------

    def count_chunks(self) -> int:
        row = self.conn.execute("SELECT count(*) FROM chunks").fetchone()
        return int(row[0]) if row else 0

    def chunks_for(self, url: str) -> list[tuple[str, int, str, str]]:
        return self.conn.execute(
            "SELECT chunk_id, ordinal, heading_path, text FROM chunks WHERE url = ? ORDER BY ordinal", [url]
        ).fetchall()


def _columns(rows: Sequence[Any], **columns: Any) -> dict[str, list[Any]]:
    """One list per named column (``name=function of a row``), for statements that unnest them."""
    return {name: [get(row) for row in rows] for name, get in columns.items()}


# pages columns bound by schema.INSERT_PAGES, from a PageRecord.
_PAGE_COLUMNS: dict[str, Any] = {
    "url": lambda p: p.url, "final_url": lambda p: p.final_url, "status": lambda p: p.status,
    "fetched": lambda p: p.fetched_at, "content_type": lambda p: p.content_type, "etag": lambda p: p.etag,
    "last_modified": lambda p: p.last_modified, "hash": lambda p: p.content_hash, "title": lambda p: p.title,
    "lang": lambda p: p.lang, "extractor": lambda p: p.extractor, "html_bytes": lambda p: p.html_bytes,
    "text_bytes": lambda p: p.text_bytes, "text": lambda p: p.text, "depth": lambda p: p.depth,
    "extract_seconds": lambda p: float(p.extract_seconds),
}


CRAWL_COUNT_COLUMNS = (
    "urls_requested", "fetched", "new", "changed", "unchanged", "not_modified", "skipped", "failed",
    "html_bytes", "text_bytes", "chunks",
)


# A run in one of these states is in progress, or was killed in it ('running': files of webqa < 0.2).
IN_PROGRESS = ("crawling", "answering", "running")


class RunStore(Store):
    """The answering side: runs, answers, selections and prompts, each answer committed when made."""

    def begin_run(self, job_name: str, job_file: str | None, job_hash: str | None, *, questions: int, answerer: str,
                  model: str | None, method: str, dry_run: bool, pid: int, crawling: bool) -> int:
        """Insert the run row the moment a run starts, before its crawl: a killed crawl leaves a run to resume.

        ``previous_run_id`` is the job's last done/partial run that was not a dry run: the run this
        one's answers and pages are compared with.
        """
        previous = self.previous_successful_run(job_name)
        row = self.conn.execute(
            "INSERT INTO runs (job_name, job_file, job_hash, started_at, status, phase, questions, answerer, model, "
            "method, dry_run, pid, previous_run_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING run_id",
            [job_name, job_file, job_hash, utcnow(), "crawling" if crawling else "answering",
             "crawl" if crawling else "answer", questions, answerer, model, method, dry_run, pid, previous],
        ).fetchone()
        assert row is not None
        return int(row[0])

    def start_answering(self, run_id: int, job_name: str, crawl_run_id: int | None,
                        page_urls: Sequence[str] | None, *, answerer: str, model: str | None) -> None:
        """The crawl is over: record the job's pages as they stand now (``snapshot_pages``) and move on.

        ``page_urls`` lists the job's pages (normalised); None means every stored page is the job's.
        """
        with self.transaction():
            self.conn.execute("UPDATE runs SET status = 'answering', phase = 'answer', answerer = ?, model = ?, "
                              "crawl_run_id = coalesce(?, crawl_run_id) "
                              "WHERE run_id = ?", [answerer, model, crawl_run_id, run_id])
            self.conn.execute("DELETE FROM run_pages WHERE run_id = ?", [run_id])
            self.snapshot_pages(run_id, job_name, page_urls)

    def previous_successful_run(self, job_name: str, before: int | None = None) -> int | None:
        """The job's last run that finished its questions (done or partial), dry runs left out."""
        row = self.conn.execute(
            "SELECT max(run_id) FROM runs WHERE job_name = ? AND status IN ('done', 'partial') AND NOT dry_run "
            "AND (? IS NULL OR run_id < ?)",
            [job_name, before, before],
        ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def snapshot_pages(self, run_id: int, job_name: str, page_urls: Sequence[str] | None) -> None:
        """Record (url, content hash, fetch time) of the job's pages as they stand now.

        The job's pages are its listed URLs and the pages its own crawls discovered (depth > 0); a job
        that lists no URL answers from every stored page, so all of them are recorded. A page whose
        server last answered 404 or 410 (after the stored copy was fetched or confirmed) is left out:
        it is gone, even though its last content is still stored. That holds when a later crawl
        skipped it as fresh (``recrawl_after``), too.
        """
        if page_urls is None:
            where, params = "true", []
        elif not page_urls:
            where, params = "p.crawl_run_id IN (SELECT crawl_run_id FROM crawl_runs WHERE job_name = ?)", [job_name]
        else:
            where = ("(list_contains(?, p.url) OR p.crawl_run_id IN "
                     "(SELECT crawl_run_id FROM crawl_runs WHERE job_name = ?))")
            params = [list(page_urls), job_name]
        self.conn.execute(
            "INSERT INTO run_pages (run_id, url, content_hash, fetched_at) "
            f"SELECT ?, p.url, p.content_hash, p.fetched_at FROM pages p WHERE p.content_hash IS NOT NULL AND {where} "
            "AND NOT EXISTS (SELECT 1 FROM fetch_log f WHERE f.url = p.url AND f.status IN (404, 410) "
            "AND f.logged_at >= coalesce(p.checked_at, p.fetched_at))",
            [run_id, *params],
        )

    def run_row(self, run_id: int) -> dict[str, Any] | None:
        rows = self.query_dicts("SELECT * FROM runs WHERE run_id = ?", [run_id])
        return rows[0] if rows else None

    def last_run(self, job_name: str) -> dict[str, Any] | None:
        """The job's most recent run that was not a dry run (any status)."""
        rows = self.query_dicts(
            "SELECT * FROM runs WHERE job_name = ? AND NOT dry_run ORDER BY run_id DESC LIMIT 1", [job_name]
        )
        return rows[0] if rows else None

    def resume_run(self, run_id: int, pid: int, questions: int) -> None:
        """Mark a killed or interrupted run as in progress again, in this process, in the phase it stopped in."""
        self.conn.execute(
            "UPDATE runs SET status = CASE WHEN phase = 'crawl' THEN 'crawling' ELSE 'answering' END, "
            "finished_at = NULL, pid = ?, questions = ?, exit_code = NULL, reason = NULL, resumable = false, "
            "resumed = coalesce(resumed, 0) + 1 WHERE run_id = ?",
            [pid, questions, run_id],
        )

    def final_answers(self, run_id: int) -> list[dict[str, Any]]:
        """The final answer of every question of a run that has one (one row per question id)."""
        return self.query_dicts(
            "SELECT * FROM answers WHERE run_id = ? AND final ORDER BY answer_id", [run_id]
        )

    def final_answer(self, run_id: int, question_id: str) -> dict[str, Any] | None:
        rows = self.query_dicts(
            "SELECT * FROM answers WHERE run_id = ? AND question_id = ? AND final ORDER BY answer_id DESC LIMIT 1",
            [run_id, question_id],
        )
        return rows[0] if rows else None

    def save_failure(self, run_id: int, question_id: str, question: str, error: str) -> int:
        """A question that failed before any attempt could be stored (e.g. its URLs were never crawled).

        Stored as its final answer, so that every question a run went through has exactly one.
        """
        return self.save_attempt(
            {"run_id": run_id, "question_id": question_id, "question": question, "attempt": 1, "final": True,
             "citations": "[]", "grounded": False, "answerer": "none", "error": error},
            [], None, None, None,
        )

    def set_change(self, answer_id: int, evidence: str, change: str | None) -> None:
        self.conn.execute("UPDATE answers SET evidence = ?, change = ? WHERE answer_id = ?",
                          [evidence, change, answer_id])

    def run_pages(self, run_id: int) -> dict[str, dict[str, Any]]:
        if not self.has_table("run_pages"):
            return {}
        return {r["url"]: r for r in self.query_dicts(
            "SELECT url, content_hash, fetched_at FROM run_pages WHERE run_id = ? ORDER BY url", [run_id])}

    def has_table(self, table: str) -> bool:
        row = self.conn.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND database_name = current_database()",
            [table],
        ).fetchone()
        return bool(row and row[0])

    def require_runs(self) -> None:
        """For the commands that read runs: one line, not a traceback, for a file no run ever wrote to."""
        if not self.has_table("runs"):
            raise StoreError(f"{self.path}: no runs are recorded in this database (no `runs` table: not a webqa "
                             "database, or its first command was stopped while creating it); run `webqa run` first")

    def has_column(self, table: str, column: str) -> bool:
        """For read-only commands on a database written by an older webqa (not migrated yet)."""
        row = self.conn.execute(
            "SELECT count(*) FROM duckdb_columns() WHERE table_name = ? AND column_name = ? "
            "AND database_name = current_database()",
            [table, column],
        ).fetchone()
        return bool(row and row[0])

    def finish_run(self, run_id: int, status: str, counts: dict[str, int], notes: str | None = None, *,
                   exit_code: int | None = None, reason: str | None = None, resumable: bool = False) -> None:
        self.conn.execute(
            "UPDATE runs SET finished_at = ?, status = ?, answered = ?, grounded = ?, not_enough_info = ?, "
            "failed = ?, notes = ?, exit_code = ?, reason = ?, resumable = ? WHERE run_id = ?",
            [utcnow(), status, counts.get("answered", 0), counts.get("grounded", 0),
             counts.get("not_enough_info", 0), counts.get("failed", 0), notes, exit_code, reason, resumable, run_id],
        )

    def save_attempt(self, answer: dict[str, Any], selections: Sequence[dict[str, Any]], prompt: str | None,
                     prompt_version: str | None, raw_reply: str | None) -> int:
        """Insert one attempt with its selection trail and prompt in one transaction; returns its id.

        A final attempt demotes earlier final attempts of the same question in the same run, so the
        report always has exactly one answer per question.
        """
        columns = list(ANSWER_COLUMNS)
        values = [answer.get(c) for c in columns]
        with self.transaction():
            if answer.get("final") and answer.get("run_id") is not None:
                self.conn.execute(
                    "UPDATE answers SET final = false WHERE run_id = ? AND question_id = ? AND final",
                    [answer["run_id"], answer["question_id"]],
                )
            row = self.conn.execute(
                f"INSERT INTO answers ({', '.join(columns)}, created_at) VALUES ({', '.join('?' for _ in columns)}, ?) "
                "RETURNING answer_id",
                [*values, utcnow()],
            ).fetchone()
            assert row is not None
            answer_id = int(row[0])
            if selections:
                insert_rows(
                    self.conn, f"INSERT INTO selections (answer_id, {', '.join(SELECTION_COLUMNS)}) VALUES",
                    [[answer_id, *[s.get(c) for c in SELECTION_COLUMNS]] for s in selections],
                )
            if prompt is not None:
                self.conn.execute(
                    "INSERT INTO prompts VALUES (?, ?, ?, ?)", [answer_id, prompt_version, prompt, raw_reply]
                )
        return answer_id

    def set_final(self, answer_id: int, attempt_ids: Sequence[int] = ()) -> None:
        """Make ``answer_id`` the final attempt of its question.

        In a run, every other attempt of the question in that run is demoted. Answers of `webqa ask`
        have no run: only the given ``attempt_ids`` (the attempts of that one ask) are demoted, never
        the answers of earlier asks.
        """
        with self.transaction():
            row = self.conn.execute("SELECT run_id, question_id FROM answers WHERE answer_id = ?", [answer_id]).fetchone()
            if row is None:
                raise StoreError(f"no answer {answer_id}")
            if row[0] is not None:
                self.conn.execute(
                    "UPDATE answers SET final = (answer_id = ?) WHERE run_id = ? AND question_id = ?",
                    [answer_id, row[0], row[1]],
                )
            else:
                ids = sorted({answer_id, *attempt_ids})
                self.conn.execute(
                    "UPDATE answers SET final = (answer_id = ?) WHERE run_id IS NULL AND list_contains(?, answer_id)",
                    [answer_id, ids],
                )

    def query_dicts(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        cursor = self.conn.execute(sql, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    def stored_urls(self, urls: Sequence[str]) -> list[str]:
        rows = self.conn.execute("SELECT url FROM pages WHERE list_contains(?, url)", [list(urls)]).fetchall()
        return [r[0] for r in rows]


ANSWER_COLUMNS = (
    "run_id", "question_id", "question", "attempt", "final", "answer", "confidence", "citations", "grounded",
    "not_enough_info", "failed_citations", "valid_json", "answerer", "model", "method", "latency_s",
    "prompt_tokens", "eval_tokens", "error", "retry_reason", "host",
)
SELECTION_COLUMNS = (
    "chunk_id", "url", "heading_path", "rank", "score", "keyword_score", "bm25_score", "embedding_score",
    "matched_terms", "tokens", "sent", "source_number", "reason",
)
