"""The DuckDB schema: every table and index webqa keeps, in one place.

Bump ``SCHEMA_VERSION`` and add a step to ``MIGRATIONS`` when a table changes, so an old database file
keeps working instead of failing on a missing column.
"""

from __future__ import annotations

SCHEMA_VERSION = 12

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
    content_hash VARCHAR,                  -- sha256 of the body (HTML, or a PDF's bytes)
    title VARCHAR,
    lang VARCHAR,
    extractor VARCHAR,                     -- main | recall | body | empty, or pdf: which cleaning step produced the text
    html_bytes INTEGER,
    text_bytes INTEGER,
    text VARCHAR,
    depth INTEGER,
    extract_seconds DOUBLE,
    crawl_run_id BIGINT,                   -- the crawl that last wrote this row's content
    changed_at TIMESTAMP,                  -- when the content last changed
    links_at TIMESTAMP,                    -- when page_links was last written for it; NULL: stored before links were kept
    canonical VARCHAR,                     -- the same-host URL it names as canonical (rel=canonical, Link header), when not its own
    duplicate_of VARCHAR,                  -- the page whose chunks stand for it (its canonical, or the same text): none of its own
    text_hash VARCHAR                      -- sha256 of its chunks (heading paths and texts): identical text is stored once
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
-- whether an answer was lost at cleaning. Stored zlib-compressed (html_z, UTF-8): writing a changed page
-- makes DuckDB rewrite the table's last row group at the next checkpoint, and compressed that is a fifth of
-- the bytes (BENCHMARKS.md, "The daily re-crawl as a crawl"). html holds pages stored before schema 7.
CREATE TABLE IF NOT EXISTS page_html (
    url VARCHAR PRIMARY KEY,
    html VARCHAR,
    html_z BLOB
);

CREATE TABLE IF NOT EXISTS chunks (
    chunk_id VARCHAR PRIMARY KEY,
    url VARCHAR NOT NULL,
    ordinal INTEGER NOT NULL,
    heading_path VARCHAR NOT NULL,         -- "Install › Linux"
    text VARCHAR NOT NULL,
    token_estimate INTEGER NOT NULL,
    content_hash VARCHAR NOT NULL,         -- sha256 of text
    embed_key VARCHAR NOT NULL,            -- sha256 of what is embedded (heading path + text): the embedding cache key
    page INTEGER                           -- the page it starts on in a paged document (a PDF), cited as url#page=N
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

-- The windows a chunk is embedded as (pipelines.vectors.embed_windows), per windowing scheme: window_key is
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
    host VARCHAR,                          -- the Ollama server that answered (one of ollama.hosts), for answerer llm
    answered BOOLEAN,                      -- the reply's answered field (false: not enough information); NULL before schema 10
    value JSON,                            -- the answer's value of its question's type (jobs/typed.py), when trusted
    value_type VARCHAR,                    -- the question's type: text | yes_no | number | date | list | enum(a, b)
    value_problem VARCHAR,                 -- why the reply's value was not trusted (wrong type, not in the quotes)
    scope VARCHAR                          -- final answers of runs: the question's urls, type and kind as a key (jobs/question_pairs.py)
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
-- What an opt-in LLM rerank (selection.rerank) did to an attempt's candidates: one row per attempt.
CREATE TABLE IF NOT EXISTS reranks (
    answer_id BIGINT PRIMARY KEY,
    status VARCHAR NOT NULL,               -- reranked | unchanged (the reply kept the order) | failed | skipped
    error VARCHAR,                         -- why it failed or was skipped
    model VARCHAR,
    candidates INTEGER,                    -- how many of the top candidates were sent
    before VARCHAR[],                      -- their chunk ids in the selection's order
    after VARCHAR[],                       -- … and in the order used for packing
    dropped INTEGER,                       -- numbers of the reply that were unknown or repeated
    appended INTEGER,                      -- candidates the reply left out (appended in the selection's order)
    prompt_tokens INTEGER,
    eval_tokens INTEGER,
    seconds DOUBLE,
    prompt VARCHAR,
    raw_reply VARCHAR
);
"""

# The tables selection reads, maintained page by page (pipelines/search_index.py index_pages, in the transaction that writes
# the pages) and rebuilt whole only by `webqa reindex` or for a database indexed by an older version.
# A page write touches the rows of its own chunks, plus one bm25_terms row per distinct term of those chunks
# and one bm25_stats row per language: counting them per question from the rows scanned every doc and
# every posting of the question's terms (BENCHMARKS.md, "Selection latency at 1,000,000 chunks").
#
# selection_docs: one row per chunk. ``doc`` is a surrogate number: a full build numbers chunks in
# (url, ordinal) order, later pages get numbers above the highest; selection breaks ties by url and
# ordinal, never by ``doc``. ``len`` is the chunk's BM25 length (terms in heading path and text).
# bm25_postings: one row per (term, doc) with the term's count in the heading path and in the text
# (BM25_SQL weights heading terms) and the doc's length, so BM25 needs nothing else per posting.
# A full build writes them sorted by term, so a question's rows sit in a few row groups that DuckDB's
# min/max filters skip to; pages indexed later append rows of their own.
# bm25_terms: each term's document frequency (docs holding it; 0 once its last doc left), and bm25_stats the
# docs and their summed length per stemmer: BM25's collection statistics, kept equal to a recount from
# the rows above (tests/pipelines/test_bm25_stats.py).
POSTINGS_COLUMNS = "(term VARCHAR NOT NULL, doc INTEGER NOT NULL, tf_heading INTEGER NOT NULL, tf_text INTEGER NOT NULL, len INTEGER NOT NULL)"
INDEX_TABLES = f"""
CREATE TABLE IF NOT EXISTS selection_docs (
    doc INTEGER NOT NULL,
    chunk_id VARCHAR NOT NULL,
    url VARCHAR NOT NULL,
    ordinal INTEGER NOT NULL,
    embed_key VARCHAR NOT NULL,
    len INTEGER NOT NULL,
    lang VARCHAR NOT NULL                  -- the stemmer its words were indexed with (pipelines/languages.py)
);
CREATE TABLE IF NOT EXISTS bm25_postings {POSTINGS_COLUMNS};
CREATE TABLE IF NOT EXISTS bm25_terms (
    term VARCHAR NOT NULL,
    df INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS bm25_stats (
    lang VARCHAR NOT NULL,
    docs BIGINT NOT NULL,
    total_len BIGINT NOT NULL
);
"""
SELECTION_TABLES = ("selection_docs", "bm25_postings", "bm25_terms", "bm25_stats")
# The words BM25 leaves out, per stemmer (pipelines/search_index.py stopword_rows).
CREATE_FTS_STOPWORDS = "CREATE TABLE IF NOT EXISTS fts_stopwords (lang VARCHAR, sw VARCHAR, PRIMARY KEY (lang, sw))"
# meta key set when the index tables hold every chunk (a full build, or a database that had no chunk when
# they were created): without it, stored chunks predate page-by-page indexing and need one full build.
INDEX_META_KEY = "selection_index"
INDEX_FORMAT = "incremental-1"

# Float columns are written without ALP/ALPRD compression: decompressing the cached vectors cost more per
# question than the cosine itself (BENCHMARKS.md, "Figures behind code comments"), and vectors barely compress
# anyway. Text without FSST: a checkpoint rewrites every row group written to, and FSST's analysis of the
# chunks' text was most of a re-crawl's final checkpoint; selection reads the text faster too (BENCHMARKS.md,
# "The daily re-crawl as a crawl"). Set on every connection (see pipelines/store.connect): compression is
# chosen when a checkpoint writes, whoever triggers it.
DISABLED_COMPRESSION = "SET disabled_compression_methods = 'alp,alprd,fsst'"
# DuckDB draws a progress bar on stdout for statements over two seconds (an index rebuild at 100k
# chunks): noise in a cron mail and in `--json` output.
NO_PROGRESS_BAR = "SET enable_progress_bar = false"
# webqa loads its extensions from the pinned packages: a query needing one not loaded must fail at once, not fetch
# it from extensions.duckdb.org (a download without webqa's timeouts) nor load one installed by hand (unpinned).
NO_EXTENSION_DOWNLOADS = "SET autoinstall_known_extensions = false; SET autoload_known_extensions = false"

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
    # builds the new ones in full (Store.fts_is_stale). Vector tables go in Store.migrate (their names vary; pipelines/vectors.py).
    5: [
        "DROP TABLE IF EXISTS bm25_postings",
        "DROP TABLE IF EXISTS selection_docs",
        "DROP SCHEMA IF EXISTS fts_main_chunks CASCADE",
        "DELETE FROM meta WHERE key IN ('fts_built_at', 'chunks_changed_at')",
    ],
    # 6: the Ollama server that answered, since a job may spread its questions over several (ollama.hosts).
    6: ["ALTER TABLE answers ADD COLUMN IF NOT EXISTS host VARCHAR"],
    # 7: new pages' HTML stored compressed (page_html.html_z); the stored ones are read as they are.
    7: ["ALTER TABLE page_html ADD COLUMN IF NOT EXISTS html_z BLOB"],
    # 8: PDF chunks keep their page; canonical pages and identical text are stored once (pipelines/duplicates.py).
    8: [
        "ALTER TABLE chunks ADD COLUMN IF NOT EXISTS page INTEGER",
        "ALTER TABLE pages ADD COLUMN IF NOT EXISTS canonical VARCHAR",
        "ALTER TABLE pages ADD COLUMN IF NOT EXISTS duplicate_of VARCHAR",
        "ALTER TABLE pages ADD COLUMN IF NOT EXISTS text_hash VARCHAR",
        # The string pipelines/duplicates.py text_hash hashes: chunks in order, "heading path \x1f text", \x1e apart.
        "UPDATE pages SET text_hash = h.hash FROM (SELECT url, sha256(string_agg(heading_path || chr(31) || text, "
        "chr(30) ORDER BY ordinal)) AS hash FROM chunks GROUP BY url) h WHERE pages.url = h.url",
    ],
    # 9: each page's words stemmed in its language (pipelines/languages.py): stop words per language, docs with
    # their stemmer. The index is built again in full, as after step 5 (its meta key goes).
    9: [
        "DROP TABLE IF EXISTS fts_stopwords",
        "DROP TABLE IF EXISTS bm25_postings",
        "DROP TABLE IF EXISTS selection_docs",
        "DELETE FROM meta WHERE key = 'selection_index'",
    ],
    # 10: typed answers (jobs/typed.py): the value of the question's type, and answered as a field.
    10: [
        "ALTER TABLE answers ADD COLUMN IF NOT EXISTS answered BOOLEAN",
        "ALTER TABLE answers ADD COLUMN IF NOT EXISTS value JSON",
        "ALTER TABLE answers ADD COLUMN IF NOT EXISTS value_type VARCHAR",
        "ALTER TABLE answers ADD COLUMN IF NOT EXISTS value_problem VARCHAR",
    ],
    # 11: BM25's statistics stored (bm25_terms, bm25_stats, created by INDEX_TABLES): counted once from the
    # index rows in Store.migrate, so the index needs no full build.
    11: [],
    # 12: a question's scope with its answer, so two questions of one text on other pages are told apart.
    12: ["ALTER TABLE answers ADD COLUMN IF NOT EXISTS scope VARCHAR"],
}
