"""The DuckDB schema: every table and index webqa keeps, in one place.

Bump ``SCHEMA_VERSION`` and add a step to ``MIGRATIONS`` when a table changes, so an old database file
keeps working instead of failing on a missing column.
"""

from __future__ import annotations

SCHEMA_VERSION = 2

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
    status VARCHAR NOT NULL,               -- running | done | failed | interrupted
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
    changed_at TIMESTAMP                   -- when the content last changed
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
-- the sha256 of the embedded text, not by chunk id, so a page that moves or repeats text costs nothing. Vectors keep their model's length (FLOAT[]);
-- queries cast to FLOAT[dims] for array_cosine_similarity.
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
    status VARCHAR NOT NULL,               -- running | done | partial | failed | interrupted
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
    resumed INTEGER DEFAULT 0              -- how many times `webqa run --resume` continued this run
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
    change VARCHAR                         -- final answers of runs: new | changed | unchanged | no_longer_answered
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
REBUILD_FTS = (
    "PRAGMA create_fts_index('chunks', 'chunk_id', 'heading_path', 'text', "
    "stemmer='porter', stopwords='fts_stopwords', ignore='(\\.|[^a-z0-9])+', strip_accents=1, lower=1, "
    "overwrite=1)"
)

# Postings in term order: a question's few terms then sit in a few row groups, which DuckDB's min/max
# filters skip to (jobs/select.py BM25_SQL).
SORT_FTS_POSTINGS = (
    "CREATE OR REPLACE TABLE fts_main_chunks.terms AS SELECT * FROM fts_main_chunks.terms ORDER BY termid, docid"
)

MIGRATIONS: dict[int, list[str]] = {
    # 2: answer change detection, page snapshots per run, resumable runs. (run_pages is created by TABLES.)
    2: [
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS previous_run_id BIGINT",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS resumed INTEGER DEFAULT 0",
        "ALTER TABLE answers ADD COLUMN IF NOT EXISTS evidence JSON",
        "ALTER TABLE answers ADD COLUMN IF NOT EXISTS change VARCHAR",
    ],
}
