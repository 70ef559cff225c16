"""The DuckDB schema: every table and index webqa keeps, in one place.

Bump ``SCHEMA_VERSION`` and add a step to ``MIGRATIONS`` when a table changes, so an old database file
keeps working instead of failing on a missing column.
"""

from __future__ import annotations

SCHEMA_VERSION = 6

TABLES = """
CREATE TABLE IF NOT EXISTS meta (
    key VARCHAR PRIMARY KEY,
    value VARCHAR
);

CREATE SEQUENCE IF NOT EXISTS crawl_run_ids START 1;
CREATE TABLE IF NOT EXISTS crawl_runs (
    crawl_run_id BIGINT PRIMARY KEY DEFAULT nextval('crawl_run_ids'),
    started_at TIMESTAMP NOT NULL,
    finished_at TIMESTAMP,
    status VARCHAR NOT NULL,               -- running | done | failed | interrupted | killed
    job_name VARCHAR,
    urls_requested INTEGER DEFAULT 0,
    fetched INTEGER DEFAULT 0,             -- 200 responses that reached the cleaner
    new INTEGER DEFAULT 0,
    changed INTEGER DEFAULT 0,
    unchanged INTEGER DEFAULT 0,           -- same content hash: nothing written
    not_modified INTEGER DEFAULT 0,        -- 304 to a conditional request
    skipped INTEGER DEFAULT 0,             -- robots.txt, non-HTML, fresh enough, invalid URL …
    failed INTEGER DEFAULT 0,              -- network errors, 4xx/5xx, extraction failures
    html_bytes BIGINT DEFAULT 0,
    text_bytes BIGINT DEFAULT 0,
    chunks INTEGER DEFAULT 0               -- chunks written by this crawl
);

CREATE TABLE IF NOT EXISTS pages (
    url VARCHAR PRIMARY KEY,               -- the URL as listed or discovered (normalised)
    final_url VARCHAR,                     -- after redirects
    status INTEGER,
    fetched_at TIMESTAMP,                  -- last time a body was downloaded
    checked_at TIMESTAMP,                  -- last time the server was asked (304 included)
    content_type VARCHAR,
    etag VARCHAR,
    last_modified VARCHAR,
    content_hash VARCHAR,                  -- sha256 of the HTML body
    title VARCHAR,
    lang VARCHAR,
    extractor VARCHAR,                     -- main | recall | body | empty: which cleaning step produced the text
    html_bytes INTEGER,
    text_bytes INTEGER,
    text VARCHAR,
    depth INTEGER,
    extract_seconds DOUBLE,
    crawl_run_id BIGINT,                   -- the crawl that last wrote this row's content
    changed_at TIMESTAMP,                  -- when the content last changed
    links_at TIMESTAMP                     -- when page_links was last written for it; NULL: stored before links were kept
);

-- A page's same-host out-links (normalised, before the crawl's allow/deny, which are applied when they are
-- followed), replaced whenever the page is saved: a page that answers 304 or is skipped as fresh still
-- leads the crawl to the pages it links to.
CREATE TABLE IF NOT EXISTS page_links (
    url VARCHAR NOT NULL,
    target VARCHAR NOT NULL,
    ordinal INTEGER NOT NULL,              -- 0, 1, … in the page's order
    PRIMARY KEY (url, ordinal)
);

-- The pages a job's crawls reached (listed, or followed within its depth), whatever the outcome: fetched,
-- 304, fresh, failed or skipped. One row per (job, URL); a URL no longer reached keeps its old last_seen.
CREATE TABLE IF NOT EXISTS job_pages (
    job_name VARCHAR NOT NULL,
    url VARCHAR NOT NULL,
    depth INTEGER NOT NULL,                -- link depth at which the last crawl reached it (0: listed)
    first_seen TIMESTAMP NOT NULL,
    last_seen TIMESTAMP NOT NULL,
    last_crawl_run_id BIGINT NOT NULL,     -- the job's last crawl that reached it
    PRIMARY KEY (job_name, url)
);

-- The fetched HTML, kept apart so queries over pages stay light; `webqa eval` reads it to tell
-- whether an answer was lost at cleaning.
CREATE TABLE IF NOT EXISTS page_html (
    url VARCHAR PRIMARY KEY,
    html VARCHAR
);

CREATE TABLE IF NOT EXISTS chunks (
    chunk_id VARCHAR PRIMARY KEY,
    url VARCHAR NOT NULL,
    ordinal INTEGER NOT NULL,
    heading_path VARCHAR NOT NULL,         -- "Install › Linux"
    text VARCHAR NOT NULL,
    token_estimate INTEGER NOT NULL,
    content_hash VARCHAR NOT NULL,         -- sha256 of text
    embed_key VARCHAR NOT NULL             -- sha256 of what is embedded (heading path + text): the embedding cache key
);
CREATE INDEX IF NOT EXISTS chunks_url ON chunks (url);

CREATE SEQUENCE IF NOT EXISTS fetch_log_ids START 1;
CREATE TABLE IF NOT EXISTS fetch_log (
    fetch_log_id BIGINT PRIMARY KEY DEFAULT nextval('fetch_log_ids'),
    crawl_run_id BIGINT,
    url VARCHAR NOT NULL,
    logged_at TIMESTAMP NOT NULL,
    status INTEGER,                        -- HTTP status when there was one
    outcome VARCHAR NOT NULL,              -- skipped | failed
    reason VARCHAR NOT NULL
);

-- Embedding cache: a text (a chunk's window, see chunk_windows) is embedded once per model, ever. Keyed by
-- the sha256 of the embedded text, not by chunk id, so a page that moves or repeats text costs nothing.
-- Vectors keep their model's length (FLOAT[]); selection reads their typed unit-length copy,
-- unit_vectors_<dims> (see below).
CREATE TABLE IF NOT EXISTS embeddings (
    model VARCHAR NOT NULL,
    embed_key VARCHAR NOT NULL,
    dims INTEGER NOT NULL,
    vector FLOAT[] NOT NULL,
    PRIMARY KEY (model, embed_key)
);

-- The windows a chunk is embedded as (pipelines.store.embed_windows), per windowing scheme: window_key is
-- the embeddings.embed_key of the window's text (for a one-window chunk, the chunk's own embed_key).
-- A chunk's embedding score is its best window's.
CREATE TABLE IF NOT EXISTS chunk_windows (
    embed_key VARCHAR NOT NULL,
    scheme VARCHAR NOT NULL,
    part INTEGER NOT NULL,                 -- 0, 1, … in the chunk's word order
    window_key VARCHAR NOT NULL,
    PRIMARY KEY (embed_key, scheme, part)
);

CREATE SEQUENCE IF NOT EXISTS run_ids START 1;
CREATE TABLE IF NOT EXISTS runs (
    run_id BIGINT PRIMARY KEY DEFAULT nextval('run_ids'),
    job_name VARCHAR NOT NULL,
    job_file VARCHAR,
    job_hash VARCHAR,
    started_at TIMESTAMP NOT NULL,
    finished_at TIMESTAMP,
    -- crawling | answering (in progress; 'running' in older files) | done | partial | failed | interrupted
    status VARCHAR NOT NULL,
    crawl_run_id BIGINT,
    questions INTEGER DEFAULT 0,
    answered INTEGER DEFAULT 0,            -- got an answer (Not enough information included)
    grounded INTEGER DEFAULT 0,
    not_enough_info INTEGER DEFAULT 0,
    failed INTEGER DEFAULT 0,
    answerer VARCHAR,                      -- llm | extractive
    model VARCHAR,
    method VARCHAR,
    dry_run BOOLEAN DEFAULT false,
    pid INTEGER,
    notes VARCHAR,
    previous_run_id BIGINT,                -- the run answers were compared with: the job's last done/partial run
    resumed INTEGER DEFAULT 0,             -- how many times `webqa run --resume` continued this run
    phase VARCHAR,                         -- crawl | answer: where the run is (or stopped)
    exit_code INTEGER,                     -- what the process told cron
    reason VARCHAR,                        -- why the run is not 'done': failed, interrupted, partial, degraded
    resumable BOOLEAN DEFAULT false        -- stopped with work left that --resume can finish
);

-- The job's pages as they stood when a run began: what `webqa diff` and the report compare.
CREATE TABLE IF NOT EXISTS run_pages (
    run_id BIGINT NOT NULL,
    url VARCHAR NOT NULL,
    content_hash VARCHAR,
    fetched_at TIMESTAMP,
    PRIMARY KEY (run_id, url)
);

CREATE SEQUENCE IF NOT EXISTS answer_ids START 1;
CREATE TABLE IF NOT EXISTS answers (
    answer_id BIGINT PRIMARY KEY DEFAULT nextval('answer_ids'),
    run_id BIGINT,                         -- NULL for `webqa ask`
    question_id VARCHAR NOT NULL,
    question VARCHAR NOT NULL,
    attempt INTEGER NOT NULL,              -- 1, or 2 for the retry with a wider selection
    final BOOLEAN NOT NULL,                -- the attempt the report shows
    answer VARCHAR,
    confidence VARCHAR,
    citations JSON,                        -- [{source, quote, chunk_id, url, valid, reason, matched, similarity}]
    grounded BOOLEAN,
    not_enough_info BOOLEAN,
    failed_citations INTEGER,
    valid_json BOOLEAN,
    answerer VARCHAR,                      -- llm | extractive | none (nothing selected) | threshold (below min_similarity)
    model VARCHAR,
    method VARCHAR,
    latency_s DOUBLE,
    prompt_tokens INTEGER,
    eval_tokens INTEGER,
    error VARCHAR,                         -- set when no answer could be had
    retry_reason VARCHAR,                  -- why attempt 2 was made
    created_at TIMESTAMP NOT NULL,
    evidence JSON,                         -- final answers of runs: jobs.changes.Evidence (answered, cited chunk+quote)
    change VARCHAR,                        -- final answers of runs: new | changed | unchanged | no_longer_answered
    host VARCHAR                           -- the Ollama server that answered (one of ollama.hosts), for answerer llm
);
CREATE INDEX IF NOT EXISTS answers_run ON answers (run_id);

CREATE TABLE IF NOT EXISTS selections (
    answer_id BIGINT NOT NULL,
    chunk_id VARCHAR NOT NULL,
    url VARCHAR,
    heading_path VARCHAR,
    rank INTEGER NOT NULL,                 -- 1-based, by the method's score
    score DOUBLE,
    keyword_score DOUBLE,
    bm25_score DOUBLE,
    embedding_score DOUBLE,
    matched_terms VARCHAR[],
    tokens INTEGER,
    sent BOOLEAN NOT NULL,
    source_number INTEGER,                 -- SOURCE n in the prompt when sent
    reason VARCHAR                         -- why it was sent or dropped
);
CREATE INDEX IF NOT EXISTS selections_answer ON selections (answer_id);

CREATE TABLE IF NOT EXISTS prompts (
    answer_id BIGINT PRIMARY KEY,
    prompt_version VARCHAR,
    prompt VARCHAR NOT NULL,               -- exactly what was sent
    raw_reply VARCHAR
);
"""

# Batched page writes (Store.save_pages): every value is bound as one list per column ($name) and the
# lists are unnested side by side, so a batch of pages costs one statement per table.
REFRESH_UNCHANGED_PAGES = """
UPDATE pages SET checked_at = v.fetched, fetched_at = v.fetched, status = v.status, final_url = v.final_url, etag = v.etag,
    last_modified = v.last_modified, links_at = v.fetched
FROM (SELECT unnest($url) AS url, unnest($fetched)::TIMESTAMP AS fetched, unnest($status)::INTEGER AS status,
             unnest($final_url)::VARCHAR AS final_url, unnest($etag)::VARCHAR AS etag,
             unnest($last_modified)::VARCHAR AS last_modified) v
WHERE pages.url = v.url
"""
INSERT_PAGES = """
INSERT OR REPLACE INTO pages (url, final_url, status, fetched_at, checked_at, content_type, etag, last_modified,
    content_hash, title, lang, extractor, html_bytes, text_bytes, text, depth, extract_seconds, crawl_run_id,
    changed_at, links_at)
SELECT url, final_url, status, fetched, fetched, content_type, etag, last_modified, hash, title, lang, extractor, html_bytes,
       text_bytes, text, depth, extract_seconds, $run, fetched, fetched
FROM (SELECT unnest($url) AS url, unnest($final_url)::VARCHAR AS final_url, unnest($status)::INTEGER AS status,
             unnest($fetched)::TIMESTAMP AS fetched, unnest($content_type)::VARCHAR AS content_type,
             unnest($etag)::VARCHAR AS etag, unnest($last_modified)::VARCHAR AS last_modified,
             unnest($hash)::VARCHAR AS hash, unnest($title)::VARCHAR AS title, unnest($lang)::VARCHAR AS lang,
             unnest($extractor)::VARCHAR AS extractor, unnest($html_bytes)::INTEGER AS html_bytes,
             unnest($text_bytes)::INTEGER AS text_bytes, unnest($text)::VARCHAR AS text,
             unnest($depth)::INTEGER AS depth, unnest($extract_seconds)::DOUBLE AS extract_seconds)
"""
INSERT_PAGE_HTML = "INSERT OR REPLACE INTO page_html SELECT unnest($url), unnest($html)::VARCHAR"
INSERT_CHUNKS = """
INSERT OR REPLACE INTO chunks
SELECT unnest($chunk_id), unnest($url), unnest($ordinal)::INTEGER, unnest($heading)::VARCHAR, unnest($text)::VARCHAR,
       unnest($tokens)::INTEGER, unnest($hash), unnest($key)
"""
INSERT_PAGE_LINKS = "INSERT INTO page_links (url, target, ordinal) SELECT unnest($url), unnest($target), unnest($ordinal)"

# The BM25 index covers the heading path as well as the text: a section titled "Installing on Linux"
# answers "how do I install on Linux?" even when its body never repeats those words.
# Digits are kept ("2.1", "port 8470", "HTTP 404" are what documentation questions are about), and the
# stop list is short: DuckDB's built-in English list (571 words) removes words such as "changes",
# "new", "example" and "available" that decide documentation questions. BM25's IDF already discounts
# words that are everywhere.
FTS_STOPWORDS = (
    "a an and are as at be by can do does for from has have how i if in into is it its of on or that "
    "the their there this to was were what when where which who why will with you your"
).split()
CREATE_FTS_STOPWORDS = "CREATE TABLE IF NOT EXISTS fts_stopwords (sw VARCHAR PRIMARY KEY)"


def tokenize(text: str) -> str:
    """SQL for the words of the SQL expression ``text``: the fts extension's tokenize macro as
    ``create_fts_index(..., ignore='(\\.|[^a-z0-9])+', strip_accents=1, lower=1)`` defines it.

    Chunks and questions both go through this one expression, so their terms always agree.
    """
    return (f"string_split_regex(regexp_replace(lower(strip_accents(({text})::VARCHAR)), "
            f"'(\\.|[^a-z0-9])+', ' ', 'g'), '\\s+')")


def terms(words: str) -> str:
    """SQL: the BM25 terms of the rows of ``words`` (a query with a column ``w``, other columns kept):
    empty words and stop words leave before Porter stemming (``stem`` comes from the fts extension)."""
    return (f"SELECT * REPLACE (stem(w, 'porter') AS w) FROM ({words}) "
            "WHERE len(w) > 0 AND w NOT IN (SELECT sw FROM fts_stopwords)")


# The tables selection reads, maintained page by page (Store.index_pages, in the transaction that writes
# the pages) and rebuilt whole only by `webqa reindex` or for a database indexed by an older version.
# No collection statistic is stored: document count, average length and document frequencies are
# computed per question from these rows (jobs/select.py BM25_SQL), so a page write touches only the
# rows of its own chunks.
#
# selection_docs: one row per chunk. ``doc`` is a surrogate number: a full build numbers chunks in
# (url, ordinal) order, later pages get numbers above the highest; selection breaks ties by url and
# ordinal, never by ``doc``. ``len`` is the chunk's BM25 length (terms in heading path and text).
# bm25_postings: one row per (term, doc) with the term's count in the heading path and in the text
# (jobs/select.py weights heading terms) and the doc's length, so BM25 needs nothing else per posting.
# A full build writes them sorted by term, so a question's rows sit in a few row groups that DuckDB's
# min/max filters skip to; pages indexed later append rows of their own.
INDEX_TABLES = """
CREATE TABLE IF NOT EXISTS selection_docs (
    doc INTEGER NOT NULL,
    chunk_id VARCHAR NOT NULL,
    url VARCHAR NOT NULL,
    ordinal INTEGER NOT NULL,
    embed_key VARCHAR NOT NULL,
    len INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS bm25_postings (
    term VARCHAR NOT NULL,
    doc INTEGER NOT NULL,
    tf_heading INTEGER NOT NULL,
    tf_text INTEGER NOT NULL,
    len INTEGER NOT NULL
);
"""
SELECTION_TABLES = ("selection_docs", "bm25_postings")
# meta key set when the index tables hold every chunk (a full build, or a database that had no chunk when
# they were created): without it, stored chunks predate page-by-page indexing and need one full build.
INDEX_META_KEY = "selection_index"
INDEX_FORMAT = "incremental-1"

# Chunks are indexed in three statements: their terms into a temporary table, their docs (numbered from
# ``$base``), their postings.
# The chunks indexed: every stored chunk (a full build), or (page writes) the rows just written, bound as
# one list per column, so indexing a page never scans the chunks table.
ALL_CHUNKS = "chunks"
BOUND_CHUNKS = """(SELECT unnest($chunk_id) AS chunk_id, unnest($url) AS url, unnest($ordinal)::INTEGER AS ordinal,
    unnest($heading)::VARCHAR AS heading_path, unnest($text)::VARCHAR AS text, unnest($key) AS embed_key)"""


def index_terms(source: str) -> str:
    """SQL: the terms of the chunks of ``source`` (ALL_CHUNKS or BOUND_CHUNKS) into a temporary table."""
    words = f"""
    SELECT chunk_id, 0 AS field, unnest({tokenize("heading_path")}) AS w FROM {source}
    UNION ALL
    SELECT chunk_id, 1 AS field, unnest({tokenize("text")}) AS w FROM {source}"""
    return f"""
CREATE OR REPLACE TEMP TABLE index_terms AS
SELECT chunk_id, w AS term, count(*) FILTER (WHERE field = 0)::INTEGER AS tf_heading,
       count(*) FILTER (WHERE field = 1)::INTEGER AS tf_text
FROM ({terms(words)})
GROUP BY chunk_id, w
"""


def index_docs(source: str) -> str:
    """SQL: the docs of the chunks of ``source``, numbered from ``$base`` in (url, ordinal) order."""
    return f"""
INSERT INTO selection_docs (doc, chunk_id, url, ordinal, embed_key, len)
SELECT ($base + row_number() OVER (ORDER BY c.url, c.ordinal))::INTEGER, c.chunk_id, c.url, c.ordinal, c.embed_key,
       coalesce(l.len, 0)::INTEGER
FROM {source} c LEFT JOIN (SELECT chunk_id, sum(tf_heading + tf_text) AS len FROM index_terms GROUP BY chunk_id) l
    USING (chunk_id)
ORDER BY 1
"""


INDEX_POSTINGS = """
INSERT INTO bm25_postings (term, doc, tf_heading, tf_text, len)
SELECT t.term, s.doc, t.tf_heading, t.tf_text, s.len
FROM index_terms t JOIN selection_docs s USING (chunk_id)
WHERE s.doc > $base
ORDER BY t.term, s.doc
"""
DROP_INDEX_TERMS = "DROP TABLE IF EXISTS temp.index_terms"

# Removing pages' chunks from the index: postings and docs (vectors: unindex_vectors below).
_DOCS_OF_URLS = "SELECT doc FROM selection_docs WHERE list_contains($urls, url)"
UNINDEX_POSTINGS = f"DELETE FROM bm25_postings WHERE doc IN ({_DOCS_OF_URLS})"
UNINDEX_DOCS = "DELETE FROM selection_docs WHERE list_contains($urls, url)"
# Emptied before a full build (the tables keep their definition).
CLEAR_INDEX = ("DELETE FROM bm25_postings", "DELETE FROM selection_docs")
NEXT_DOC_BASE = "SELECT coalesce(max(doc), 0) FROM selection_docs"


def unit_vectors_table(dims: int) -> str:
    """The typed, unit-length copy of the cached vectors of one length: ``unit_vectors_<dims>``.

    ``embeddings.vector`` is FLOAT[] because models differ in length; DuckDB's array functions need
    FLOAT[N], and casting every row per question was most of the embedding method's time. Vectors are
    scaled to length 1 when copied, so a question's cosine with each is a plain dot product
    (array_inner_product), cheaper than a cosine (BENCHMARKS.md, "Figures behind code comments").
    One row per (model, indexed chunk, window of the current scheme, bound as ``$scheme``), keyed by
    selection_docs.doc, with the chunk's url and ordinal so ranking breaks ties without a join.
    """
    return f"unit_vectors_{int(dims)}"


UNIT_VECTORS_PREFIX = "unit_vectors_"
# Tables of that copy from before its vectors were unit length (named selection_vectors_<dims>): dropped
# at the next index rebuild; until then they are only disk.
LEGACY_VECTOR_TABLE_PREFIX = "selection_vectors_"


def _unit_rows(dims: int, windows: str, where: str = "TRUE") -> str:
    """(model, doc, url, ordinal, part, vector scaled to length 1) for the windows query ``windows`` (doc,
    url, ordinal, part, window_key), with their cached vectors of length ``dims``. A zero vector stays
    zero (cosine 0)."""
    return f"""
SELECT model, doc, url, ordinal, part,
       (CASE WHEN n > 0 THEN list_transform(v, x -> (x / n)::FLOAT) ELSE v END)::FLOAT[{int(dims)}] AS vector
FROM (
    SELECT e.model, x.doc, x.url, x.ordinal, x.part, e.vector AS v, sqrt(list_dot_product(e.vector, e.vector)) AS n
    FROM ({windows}) x JOIN embeddings e ON e.embed_key = x.window_key
    WHERE e.dims = {int(dims)} AND {where}
)
ORDER BY model, doc, part
"""


# The windows (of ``$scheme``) of every indexed chunk.
_INDEXED_WINDOWS = """
    SELECT s.doc, s.url, s.ordinal, w.part, w.window_key FROM selection_docs s
    JOIN chunk_windows w ON w.embed_key = s.embed_key AND w.scheme = $scheme"""


def rebuild_unit_vectors(dims: int) -> str:
    return f"CREATE OR REPLACE TABLE {unit_vectors_table(dims)} AS {_unit_rows(dims, _INDEXED_WINDOWS)}"


def index_unit_vectors(dims: int) -> str:
    """Rows for the docs numbered above ``$base`` (just indexed) whose windows have cached vectors."""
    return (f"INSERT INTO {unit_vectors_table(dims)} "
            f"{_unit_rows(dims, _INDEXED_WINDOWS + chr(10) + '    WHERE s.doc > $base')}")


def unindex_unit_vectors(dims: int) -> str:
    return f"DELETE FROM {unit_vectors_table(dims)} WHERE list_contains($urls, url)"


def add_unit_vectors(dims: int) -> tuple[str, str]:
    """Rows for windows ``$keys`` (of ``$scheme``) of chunks already in selection_docs: after their vectors
    were cached for ``$model``, or after the windows were mapped (``$model`` NULL: every model's cached
    vectors, e.g. those of one-window chunks embedded before windows existed).

    Two statements (DuckDB binds parameters per statement): drop any rows the windows had, so an
    ``INSERT OR REPLACE`` of a vector never leaves two, then add them.
    """
    table = unit_vectors_table(dims)
    windows = f"{_INDEXED_WINDOWS}\n    WHERE w.window_key IN (SELECT unnest($keys))"
    return (
        f"DELETE FROM {table} t USING ({windows}) x "
        f"WHERE ($model IS NULL OR t.model = $model) AND t.doc = x.doc AND t.part = x.part",
        f"INSERT INTO {table} {_unit_rows(dims, windows, '($model IS NULL OR e.model = $model)')}",
    )


# Float columns are written without ALP/ALPRD compression: decompressing the cached vectors cost more per
# question than the cosine itself (BENCHMARKS.md, "Figures behind code comments"), and vectors barely compress
# anyway. Set on every connection (see pipelines/store.connect): compression is chosen when a checkpoint
# writes, whoever triggers it.
DISABLED_COMPRESSION = "SET disabled_compression_methods = 'alp,alprd'"
# DuckDB draws a progress bar on stdout for statements over two seconds (an index rebuild at 100k
# chunks): noise in a cron mail and in `--json` output.
NO_PROGRESS_BAR = "SET enable_progress_bar = false"

MIGRATIONS: dict[int, list[str]] = {
    # 2: answer change detection, page snapshots per run, resumable runs. (run_pages is created by TABLES.)
    2: [
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS previous_run_id BIGINT",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS resumed INTEGER DEFAULT 0",
        "ALTER TABLE answers ADD COLUMN IF NOT EXISTS evidence JSON",
        "ALTER TABLE answers ADD COLUMN IF NOT EXISTS change VARCHAR",
    ],
    # 3: out-links per page and the pages of each job (page_links and job_pages are created by TABLES).
    3: ["ALTER TABLE pages ADD COLUMN IF NOT EXISTS links_at TIMESTAMP"],
    # 4: a run is recorded from its first second (crawling, answering), with its verdict.
    4: [
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS phase VARCHAR",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS exit_code INTEGER",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS reason VARCHAR",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS resumable BOOLEAN DEFAULT false",
    ],
    # 5: selection indexes maintained page by page (INDEX_TABLES). The former ones were derived from the
    # fts extension's index (dropped with it) and had no len/ordinal columns: the next crawl, run or ask
    # builds the new ones in full (Store.fts_is_stale). Vector tables go in Store.migrate (their names vary).
    5: [
        "DROP TABLE IF EXISTS bm25_postings",
        "DROP TABLE IF EXISTS selection_docs",
        "DROP SCHEMA IF EXISTS fts_main_chunks CASCADE",
        "DELETE FROM meta WHERE key IN ('fts_built_at', 'chunks_changed_at')",
    ],
    # 6: the Ollama server that answered, since a job may spread its questions over several (ollama.hosts).
    6: ["ALTER TABLE answers ADD COLUMN IF NOT EXISTS host VARCHAR"],
}
