"""The search index: ``selection_docs``, ``bm25_postings``, BM25's statistics ``bm25_terms`` (df per term) and
``bm25_stats`` (docs and total length per stemmer), and ``fts_stopwords``, kept in step with the chunks page by
page, and the keyword and BM25 rankings selection runs over them.

This module is the only code that writes SQL on those tables (their DDL is in pipelines/schema.py); it
reads ``chunks`` (what it indexes, and the text a ranking returns).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from pipelines import languages, schema, search_scope, vectors
from pipelines.errors import StoreError
from pipelines.sql import insert_rows, table_exists


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


def tokenize(text: str) -> str:
    """SQL for the words of the SQL expression ``text``: the fts extension's tokenize macro as
    ``create_fts_index(..., ignore='(\\.|[^a-z0-9])+', strip_accents=1, lower=1)`` defines it.

    English chunks and questions both go through this one expression, so their terms always agree.
    """
    return (f"string_split_regex(regexp_replace(lower(strip_accents(({text})::VARCHAR)), "
            f"'(\\.|[^a-z0-9])+', ' ', 'g'), '\\s+')")


def tokenize_letters(text: str) -> str:
    """SQL for the words of ``text`` in another language: letters of any script and digits, accents kept,
    since Snowball's stemmers read them ("configuración" and "configuraciones" share a stem; without its
    accent the first keeps its suffix). The stem is stripped of accents afterwards (``terms``)."""
    return (f"string_split_regex(regexp_replace(lower(({text})::VARCHAR), "
            f"'(\\.|[^\\p{{L}}\\p{{N}}])+', ' ', 'g'), '\\s+')")


def tokenize_in(text: str, lang: str) -> str:
    """SQL for the words of ``text`` written in the stemmer (SQL expression) ``lang``."""
    return f"(CASE WHEN {lang} = '{languages.ENGLISH}' THEN {tokenize(text)} ELSE {tokenize_letters(text)} END)"


def terms(words: str) -> str:
    """SQL: the rows of ``words`` (a query with columns ``w`` and ``lang``, a stemmer; other columns kept)
    that are BM25 words, with their stem as ``term``: empty words and the language's stop words leave before
    stemming (``stem`` comes from the fts extension). English words get their Porter stem as always; other
    languages' stems lose their accents, so a question typed without them still matches."""
    return (f"SELECT x.*, CASE WHEN x.lang = '{languages.ENGLISH}' THEN stem(x.w, '{languages.ENGLISH}') "
            f"ELSE strip_accents(stem(x.w, x.lang)) END AS term FROM ({words}) x "
            "ANTI JOIN fts_stopwords s ON s.lang = x.lang AND s.sw = x.w WHERE len(x.w) > 0")


def language_of_pages(where: str) -> str:
    """SQL: the pages' (``where``: a condition on ``pages``) stemmers, as temp.index_langs (url, lang)."""
    cases = " ".join(f"WHEN '{code}' THEN '{name}'" for code, name in sorted(languages.STEMMERS.items()))
    return (f"CREATE OR REPLACE TEMP TABLE index_langs AS SELECT url, CASE lower(split_part(replace(trim(lang), "
            f"'_', '-'), '-', 1)) {cases} ELSE '{languages.ENGLISH}' END AS lang FROM pages WHERE {where}")


# Chunks are indexed in three statements: their terms into a temporary table, their docs (numbered from
# ``$base``), their postings.
# The chunks indexed: every stored chunk (a full build), or (page writes) the rows just written, bound as
# one list per column (into a temporary table), so indexing a page never scans the chunks table.
ALL_CHUNKS = "chunks"
BOUND_CHUNKS = """(SELECT unnest($chunk_id) AS chunk_id, unnest($url) AS url, unnest($ordinal)::INTEGER AS ordinal,
    unnest($heading)::VARCHAR AS heading_path, unnest($text)::VARCHAR AS text, unnest($key) AS embed_key)"""


def index_terms(source: str) -> str:
    """SQL: the terms of the chunks of ``source`` (ALL_CHUNKS, or a table of BOUND_CHUNKS) into a temporary
    table, each chunk's words stemmed in its page's language (temp.index_langs; a page without one: English)."""
    chunks = (f"(SELECT c.chunk_id, c.heading_path, c.text, coalesce(l.lang, '{languages.ENGLISH}') AS lang "
              f"FROM {source} c LEFT JOIN temp.index_langs l USING (url))")
    words = f"""
    SELECT chunk_id, lang, 0 AS field, unnest({tokenize_in("heading_path", "lang")}) AS w FROM {chunks}
    UNION ALL
    SELECT chunk_id, lang, 1 AS field, unnest({tokenize_in("text", "lang")}) AS w FROM {chunks}"""
    # Words are counted per chunk first and each distinct word of the batch stemmed once: chunks repeat
    # their words, and stemming every occurrence was a large share of a page write.
    return f"""
CREATE OR REPLACE TEMP TABLE index_terms AS
WITH counted AS (
    SELECT chunk_id, lang, w, count(*) FILTER (WHERE field = 0) AS tf_heading,
           count(*) FILTER (WHERE field = 1) AS tf_text
    FROM ({words}) GROUP BY chunk_id, lang, w
),
stems AS ({terms("SELECT DISTINCT lang, w FROM counted")})
SELECT chunk_id, term, sum(tf_heading)::INTEGER AS tf_heading, sum(tf_text)::INTEGER AS tf_text
FROM counted JOIN stems USING (lang, w)
GROUP BY chunk_id, term
"""


def index_docs(source: str) -> str:
    """SQL: the docs of the chunks of ``source``, numbered from ``$base`` in (url, ordinal) order, with the
    stemmer their words were indexed with."""
    return f"""
INSERT INTO selection_docs (doc, chunk_id, url, ordinal, embed_key, len, lang)
SELECT ($base + row_number() OVER (ORDER BY c.url, c.ordinal))::INTEGER, c.chunk_id, c.url, c.ordinal, c.embed_key,
       coalesce(l.len, 0)::INTEGER, coalesce(g.lang, '{languages.ENGLISH}')
FROM {source} c LEFT JOIN (SELECT chunk_id, sum(tf_heading + tf_text) AS len FROM index_terms GROUP BY chunk_id) l
    USING (chunk_id)
    LEFT JOIN temp.index_langs g USING (url)
ORDER BY 1
"""


INDEX_POSTINGS = """
INSERT INTO bm25_postings (term, doc, tf_heading, tf_text, len)
SELECT t.term, s.doc, t.tf_heading, t.tf_text, s.len
FROM index_terms t JOIN selection_docs s USING (chunk_id)
WHERE s.doc > $base
ORDER BY t.term, s.doc
"""
DROP_INDEX_TERMS = ("DROP TABLE IF EXISTS temp.index_terms", "DROP TABLE IF EXISTS temp.index_langs")
# BM25's statistics follow the rows: counted up by the docs just indexed (those above ``$base``; counted from
# INDEX_POSTINGS's own join, so a chunk id repeated in a batch counts once per posting), down by the docs about
# to leave (below).
COUNT_IN = (
    """MERGE INTO bm25_terms t USING (SELECT i.term, count(*)::INTEGER AS n FROM index_terms i
       JOIN selection_docs s USING (chunk_id) WHERE s.doc > $base GROUP BY i.term) g
       ON t.term = g.term WHEN MATCHED THEN UPDATE SET df = t.df + g.n WHEN NOT MATCHED THEN INSERT VALUES (g.term, g.n)""",
    """MERGE INTO bm25_stats t USING (SELECT lang, count(*) AS n, sum(len)::BIGINT AS l FROM selection_docs
       WHERE doc > $base GROUP BY lang) g ON t.lang = g.lang
       WHEN MATCHED THEN UPDATE SET docs = t.docs + g.n, total_len = t.total_len + g.l
       WHEN NOT MATCHED THEN INSERT VALUES (g.lang, g.n, g.l)""",
)

# Removing pages' chunks from the index: statistics, postings and docs (vectors: pipelines/vectors.py).
_DOCS_OF_URLS = "SELECT doc FROM selection_docs WHERE list_contains($urls, url)"
COUNT_OUT = (
    f"""UPDATE bm25_terms t SET df = t.df - g.n FROM (SELECT term, count(*)::INTEGER AS n FROM bm25_postings
        WHERE doc IN ({_DOCS_OF_URLS}) GROUP BY term) g WHERE t.term = g.term""",
    # The leaving pages' terms that no doc holds any more go, so page writes do not grow with every term ever seen.
    f"""DELETE FROM bm25_terms WHERE df <= 0 AND term IN (SELECT term FROM bm25_postings WHERE doc IN ({_DOCS_OF_URLS}))""",
    """UPDATE bm25_stats t SET docs = t.docs - g.n, total_len = t.total_len - g.l FROM (SELECT lang, count(*) AS n,
       sum(len)::BIGINT AS l FROM selection_docs WHERE list_contains($urls, url) GROUP BY lang) g WHERE t.lang = g.lang""",
)
UNINDEX_POSTINGS = f"DELETE FROM bm25_postings WHERE doc IN ({_DOCS_OF_URLS})"
UNINDEX_DOCS = "DELETE FROM selection_docs WHERE list_contains($urls, url)"
# Emptied before a full build (the tables keep their definition).
CLEAR_INDEX = ("DELETE FROM bm25_postings", "DELETE FROM selection_docs", "DELETE FROM bm25_terms",
               "DELETE FROM bm25_stats")
NEXT_DOC_BASE = "SELECT coalesce(max(doc), 0) FROM selection_docs"
# The statistics counted from the rows: what COUNT_IN and COUNT_OUT keep them equal to (a database of schema
# 10 gets them so; tests/pipelines/test_bm25_stats.py compares). Terms in term order, so a question's
# terms sit in few row groups.
RECOUNT = (
    "DELETE FROM bm25_terms",
    "INSERT INTO bm25_terms SELECT term, count(*)::INTEGER FROM bm25_postings GROUP BY term ORDER BY term",
    "DELETE FROM bm25_stats",
    "INSERT INTO bm25_stats SELECT lang, count(*), sum(len)::BIGINT FROM selection_docs GROUP BY lang ORDER BY lang",
)

# How BM25_SQL computes the formula of jobs/select.py (tests/jobs/test_select.py checks the scores against the fts
# extension's match_bm25 with its parameters). It reads bm25_postings (term, doc, counts in heading and
# text, doc length), so the per-question work is: the question's terms' rows, their document frequencies
# (bm25_terms), the document count and average length (bm25_stats), a sum per doc, and only then
# the url and ordinal of the best-scoring docs for the tie-break and the text of the top ``pool``.
# Types are those of the counts it once took from the rows (BIGINT document counts), so scores are unchanged. The question
# is tokenised and stemmed by the same SQL as the chunks (terms above), in its own language ($lang). The per-doc sum is taken in
# DECIMAL(38, 18), exact and so independent of the order DuckDB's parallel aggregate adds the terms in:
# summed as DOUBLE, scores differed run to run in the last bit, which reordered tied chunks (copies of a
# section on several pages) between runs. Against match_bm25 scores differ by at most ~1e-15.
_QUESTION_TERMS = f"""
WITH words AS (SELECT unnest({tokenize_in("$q", "$lang")}) AS w, $lang AS lang),
-- Stop words leave the question before stemming, as they left the text when it was indexed: match_bm25
-- stems them too, and "are" became "ar", matching every AR and ARFLAGS of the sysconfig page.
-- In another language a question's word is a stop word when it is one without its accents too: questions
-- ask "¿cómo…?", "¿cuál…?", "¿dónde…?", whose unaccented forms alone are on Snowball's Spanish list.
asked AS (SELECT x.* FROM words x ANTI JOIN fts_stopwords s ON s.lang = x.lang AND x.lang <> '{languages.ENGLISH}'
          AND strip_accents(s.sw) = strip_accents(x.w)),
tokens AS (SELECT DISTINCT term FROM ({terms("SELECT w, lang FROM asked")})),
stats AS (SELECT sum(docs)::BIGINT AS num_docs, sum(total_len) / sum(docs) AS avgdl FROM bm25_stats),
qterms AS (
    SELECT t.term, log(((st.num_docs - t.df::BIGINT) + 0.5) / (t.df::BIGINT + 0.5) + 1) AS idf, t.df
    FROM bm25_terms t, stats st WHERE t.df > 0 AND t.term IN (SELECT term FROM tokens)
),"""
_SCORE = """sum((q.idf * ((h.tf_heading * $heading_weight + h.tf_text) * ($k1 + 1))
                / ((h.tf_heading * $heading_weight + h.tf_text) + $k1 * ((1 - $b) + $b * (h.len / st.avgdl))))
               ::DECIMAL(38, 18)) AS score"""
_POOL = """
-- Every doc of the top ``pool`` by (score, url, ordinal) scores at least the pool-th best score: only those
-- docs are joined for their url and ordinal (joining every scored doc was most of the query at 100k).
cut AS (SELECT min(score) AS score FROM (SELECT score FROM scored ORDER BY score DESC LIMIT $pool)),
top AS (
    SELECT s.chunk_id, s.url, s.ordinal, scored.score
    FROM scored JOIN selection_docs s USING (doc)
    WHERE scored.score >= (SELECT score FROM cut)
    ORDER BY scored.score DESC, s.url, s.ordinal
    LIMIT $pool
)
SELECT c.chunk_id, c.url, c.heading_path, c.text, c.token_estimate, top.score::DOUBLE, c.ordinal
FROM top JOIN chunks c USING (chunk_id)
ORDER BY top.score DESC, top.url, top.ordinal
"""
_SCOPED_SQL = f"""{_QUESTION_TERMS}
scored AS MATERIALIZED (
    SELECT h.doc, {_SCORE}
    FROM bm25_postings h JOIN qterms q USING (term), stats st
    WHERE {{scope}}
    GROUP BY h.doc
),{_POOL}"""
# The scope as urls ($urls, NULL: every doc), found per question by a hash join (list_contains per doc grows with
# the scope); selection resolves a run's scope once instead (bm25_sql with a DocScope; BENCHMARKS.md, "inside a
# job's scope").
BM25_SQL = _SCOPED_SQL.replace(
    "{scope}", "$urls IS NULL OR h.doc IN (SELECT doc FROM selection_docs WHERE url IN (SELECT unnest($urls)))")


def bm25_sql(scope: search_scope.DocScope) -> str:
    """BM25_SQL over the docs of a resolved scope (every doc: no filter)."""
    return _SCOPED_SQL.replace("{scope}", scope.where("h.doc"))


# The question's indexed terms with their idf and document frequency, the commonest first (BM25_PRUNED_SQL).
BM25_TERMS_SQL = f"{_QUESTION_TERMS.rstrip(',')}\nSELECT term, idf, df FROM qterms ORDER BY idf, term"
# BM25_SQL for the question's terms bound as lists (``$terms`` with ``$idfs`` from BM25_TERMS_SQL), summing in
# full only the docs that hold one of the ``$essential`` terms: the other terms' postings are read for those
# docs alone (bm25_rank says when that ranks exactly as BM25_SQL).
_PRUNED_SQL = f"""
WITH qterms AS (SELECT unnest($terms) AS term, unnest($idfs) AS idf, unnest($essential) AS essential),
stats AS (SELECT sum(total_len) / sum(docs) AS avgdl FROM bm25_stats),
candidates AS (SELECT DISTINCT doc FROM bm25_postings WHERE term IN (SELECT term FROM qterms WHERE essential)
                AND {{scope}}),
hits AS (
    SELECT term, doc, tf_heading, tf_text, len FROM bm25_postings WHERE term IN (SELECT term FROM qterms WHERE essential)
    AND {{scope}}
    UNION ALL
    SELECT term, doc, tf_heading, tf_text, len FROM bm25_postings
    WHERE term IN (SELECT term FROM qterms WHERE NOT essential) AND doc IN (SELECT doc FROM candidates)
),
scored AS MATERIALIZED (
    SELECT h.doc, {_SCORE}
    FROM hits h JOIN qterms q USING (term), stats st
    GROUP BY h.doc
),{_POOL}"""
BM25_PRUNED_SQL = _PRUNED_SQL.replace("{scope}", "TRUE")


def bm25_pruned_sql(scope: search_scope.DocScope | None) -> str:
    """BM25_PRUNED_SQL with the essential terms' postings of a resolved scope's docs only (the others' are read
    for those docs alone)."""
    return BM25_PRUNED_SQL if scope is None or scope.whole else _PRUNED_SQL.replace("{scope}", scope.where("doc"))


def load_fts(conn: duckdb.DuckDBPyConnection) -> None:
    """Load the fts extension, for its ``stem`` function (Porter stemming of chunks and questions)."""
    # LOAD takes no parameter: the path is a SQL string literal, its quotes doubled (an install under /home/o'brien).
    conn.execute("LOAD '{}'".format(str(fts_extension_path()).replace("'", "''")))


def stopword_rows() -> list[tuple[str, str]]:
    """(stemmer, word): English's short FTS_STOPWORDS, and Snowball's list for every other language."""
    return [(languages.ENGLISH, w) for w in FTS_STOPWORDS] + languages.stop_rows()


def fill_stopwords(conn: duckdb.DuckDBPyConnection) -> None:
    """Make ``fts_stopwords`` hold exactly ``stopword_rows()`` (the lists change with webqa, not with the data)."""
    conn.execute(schema.CREATE_FTS_STOPWORDS)
    rows = stopword_rows()
    if conn.execute("SELECT count(*) FROM fts_stopwords").fetchone() != (len(rows),):
        conn.execute("DELETE FROM fts_stopwords")
        insert_rows(conn, "INSERT INTO fts_stopwords VALUES", [list(r) for r in rows])


def index_pages(conn: duckdb.DuckDBPyConnection, urls: "Sequence[str] | UrlSlice | None", rows: Sequence[Sequence[Any]] = ()) -> None:
    """Bring the search and embedding indexes in step with the pages ``urls`` (None: every page, a full build).

    Removes whatever the index held for those pages and indexes ``rows``, their chunks as just written
    (chunks-table order: chunk_id, url, ordinal, heading_path, text, token_estimate, content_hash,
    embed_key): docs, postings, and the unit vectors of windows whose vectors are cached. Needs the fts
    extension loaded (``load_fts``). Scopes resolved before it ends (or, in a transaction, before its commit) are
    stale after (pipelines/search_scope.py).
    """
    search_scope.changed(conn)
    try:
        _index_pages(conn, urls, rows)
    finally:
        search_scope.changed(conn)


def _index_pages(conn: duckdb.DuckDBPyConnection, urls: "Sequence[str] | UrlSlice | None",
                 rows: Sequence[Sequence[Any]]) -> None:
    if urls is not None and not isinstance(urls, UrlSlice):
        if not urls:
            return
        params = {"urls": sorted(set(urls))}
        for statement in COUNT_OUT:
            conn.execute(statement, params)
        conn.execute(UNINDEX_POSTINGS, params)
        vectors.unindex_pages(conn, params["urls"])
        conn.execute(UNINDEX_DOCS, params)
        if not rows:
            return
    row = conn.execute(NEXT_DOC_BASE).fetchone()
    base = int(row[0]) if row else 0
    bound: dict[str, Any] = {}
    if urls is None:
        source = ALL_CHUNKS
        conn.execute(language_of_pages("true"))
    elif isinstance(urls, UrlSlice):
        # A slice of a full build: the chunks of the pages in [low, high), read from the chunks table.
        bound = {"low": urls.low, "high": urls.high}
        source = f"(SELECT * FROM chunks WHERE {_IN_SLICE})"
        conn.execute(language_of_pages(_IN_SLICE), bound)
    else:
        # The rows are bound once, into a temporary table both statements below read: binding a batch's
        # texts costs as much as tokenising them.
        source = "temp.index_chunks"
        conn.execute(f"CREATE OR REPLACE TEMP TABLE index_chunks AS SELECT * FROM {BOUND_CHUNKS}", {
            name: [r[i] for r in rows] for name, i in
            (("chunk_id", 0), ("url", 1), ("ordinal", 2), ("heading", 3), ("text", 4), ("key", 7))})
        conn.execute(language_of_pages("list_contains($urls, url)"), {"urls": sorted(set(urls))})
    conn.execute(index_terms(source), bound)
    conn.execute(index_docs(source), {"base": base, **bound})
    conn.execute(INDEX_POSTINGS, {"base": base})
    for statement in COUNT_IN:
        conn.execute(statement, {"base": base})
    for statement in DROP_INDEX_TERMS:
        conn.execute(statement)
    conn.execute("DROP TABLE IF EXISTS temp.index_chunks")
    if urls is not None and not isinstance(urls, UrlSlice):
        vectors.index_docs_above(conn, base)


@dataclass(frozen=True)
class UrlSlice:
    """The pages with low <= url < high (high None: no upper bound), one slice of a full build."""

    low: str
    high: str | None


_IN_SLICE = "url >= $low AND ($high IS NULL OR url < $high)"
# Chunks per slice of a full build. Tokenising every chunk in one statement held all their terms at once: at
# 1,000,000 chunks it ran out of a 4 GB memory limit (BENCHMARKS.md, "Selection latency at 1,000,000
# chunks"). Slices of pages in url order number docs as one statement would; each slice's postings are
# sorted by term, so a term's rows lie in one run per slice instead of one.
REBUILD_SLICE_CHUNKS = 100_000


def url_slices(conn: duckdb.DuckDBPyConnection, size: int) -> list[UrlSlice]:
    """Consecutive slices of the pages, in url order, of about ``size`` chunks each."""
    counts = conn.execute("SELECT url, count(*) FROM chunks GROUP BY url ORDER BY url").fetchall()
    starts, held = [], size
    for url, n in counts:
        if held >= size:
            starts.append(url)
            held = 0
        held += n
    return [UrlSlice(low, starts[i + 1] if i + 1 < len(starts) else None) for i, low in enumerate(starts)]


def rebuild(conn: duckdb.DuckDBPyConnection) -> None:
    """Rebuild every selection index from the stored chunks; run it in one transaction (docs are renumbered).
    In slices of ``REBUILD_SLICE_CHUNKS`` chunks, so its memory does not grow with the corpus."""
    search_scope.changed(conn)
    try:
        _rebuild(conn)
    finally:
        search_scope.changed(conn)


def _rebuild(conn: duckdb.DuckDBPyConnection) -> None:
    for statement in CLEAR_INDEX:
        conn.execute(statement)
    pieces = url_slices(conn, REBUILD_SLICE_CHUNKS)
    for piece in pieces:
        index_pages(conn, piece)
    if len(pieces) > 1:
        sort_postings(conn)
    # The slices appended their new terms in slice order: rewritten in term order (a vocabulary, not postings).
    conn.execute("CREATE OR REPLACE TEMP TABLE sorted_terms AS SELECT * FROM bm25_terms ORDER BY term")
    conn.execute("DELETE FROM bm25_terms")
    conn.execute("INSERT INTO bm25_terms SELECT * FROM temp.sorted_terms")
    conn.execute("DROP TABLE temp.sorted_terms")
    vectors.rebuild_all(conn)


# Postings per piece when a full build rewrites them in one term order (sort_postings): the sort's memory.
SORT_PIECE_POSTINGS = 10_000_000


def sort_postings(conn: duckdb.DuckDBPyConnection) -> None:
    """Rewrite bm25_postings in (term, doc) order, in term ranges of about SORT_PIECE_POSTINGS rows each.

    Each slice of a full build sorts its own postings, so a term's rows lay in one run per slice and a
    question scanned row groups of every slice (BENCHMARKS.md, "Selection latency at 1,000,000 chunks").
    Ranges come from the document frequencies (a term's df is its number of postings), and the slices'
    runs make each range's rows a few contiguous stretches, so every pass reads little else.
    """
    piece = SORT_PIECE_POSTINGS
    starts, held = [], piece
    for term, df in conn.execute("SELECT term, df FROM bm25_terms WHERE df > 0 ORDER BY term").fetchall():
        if held >= piece:
            starts.append(term)
            held = 0
        held += df
    conn.execute(f"CREATE OR REPLACE TABLE bm25_postings_sorted {schema.POSTINGS_COLUMNS}")
    for i in range(max(1, len(starts))):  # open-ended at both ends: every row is copied, counted or not
        conn.execute("INSERT INTO bm25_postings_sorted SELECT * FROM bm25_postings WHERE ($low IS NULL OR term >= $low) "
                     "AND ($high IS NULL OR term < $high) ORDER BY term, doc",
                     {"low": starts[i] if i > 0 else None, "high": starts[i + 1] if i + 1 < len(starts) else None})
    conn.execute("DROP TABLE bm25_postings")
    conn.execute("ALTER TABLE bm25_postings_sorted RENAME TO bm25_postings")


def recount_statistics(conn: duckdb.DuckDBPyConnection) -> None:
    """Set bm25_terms and bm25_stats to the counts of the index rows (RECOUNT)."""
    for statement in RECOUNT:
        conn.execute(statement)


def tables_exist(conn: duckdb.DuckDBPyConnection) -> bool:
    return all(table_exists(conn, t) for t in schema.SELECTION_TABLES)


def doc_count(conn: duckdb.DuckDBPyConnection) -> int | None:
    row = conn.execute("SELECT count(*) FROM selection_docs").fetchone()
    return None if row is None else int(row[0])


def counted_docs(conn: duckdb.DuckDBPyConnection) -> int:
    """The docs bm25_stats counts (BM25's document count): equal to doc_count while the statistics hold."""
    row = conn.execute("SELECT coalesce(sum(docs), 0) FROM bm25_stats").fetchone()
    return 0 if row is None else int(row[0])


# -- rankings (jobs/select.py) --------------------------------------------------------------------

SCOPE = "($urls IS NULL OR list_contains($urls, url))"


def keyword_rank(conn: duckdb.DuckDBPyConnection, keywords: Sequence[str], scope: Sequence[str] | None, *,
                 pool: int, heading_boost: int) -> list[tuple[Any, ...]]:
    """Chunks holding the keywords, best first: (chunk_id, url, heading_path, text, token_estimate, matched,
    score, ordinal); score = keywords found, + ``heading_boost`` when one is in the heading path."""
    return conn.execute(
        f"""
        WITH scored AS (
            SELECT chunk_id, url, ordinal, heading_path, text, token_estimate,
                   list_filter($kw, k -> contains(lower(heading_path || ' ' || text), k)) AS matched,
                   len(list_filter($kw, k -> contains(lower(heading_path), k))) > 0 AS in_heading
            FROM chunks WHERE {SCOPE}
        )
        SELECT chunk_id, url, heading_path, text, token_estimate, matched,
               len(matched) + CASE WHEN in_heading THEN {heading_boost} ELSE 0 END AS score, ordinal
        FROM scored WHERE len(matched) > 0
        ORDER BY score DESC, url, ordinal
        LIMIT $pool
        """,
        {"kw": list(keywords), "urls": scope, "pool": pool},
    ).fetchall()


def bm25_rank(conn: duckdb.DuckDBPyConnection, question: str,
              scope: Sequence[str] | search_scope.DocScope | None, *, pool: int,
              k1: float, b: float, heading_weight: float) -> list[tuple[Any, ...]]:
    """BM25_SQL's rows, best first: (chunk_id, url, heading_path, text, token_estimate, score, ordinal).

    ``scope``: urls, or their docs resolved once (``search_scope.resolve``). Unscoped or by resolved docs, in an
    index of PRUNE_MIN_DOCS docs or more, the common terms' postings are summed only for docs holding a rarer term
    when that is proven to give the same rows (``_pruned_rank``). Raises duckdb.CatalogException when the index
    tables are missing.
    """
    # The stemmers the indexed chunks were indexed with, and their docs: the question is stemmed in its language
    # among them (pipelines/languages.py question_stemmer; English when the index holds only English).
    stats = conn.execute("SELECT lang, docs FROM bm25_stats WHERE docs > 0 ORDER BY 1").fetchall()
    lang = languages.question_stemmer(question, [name for name, _ in stats])
    params = {"pool": pool, "k1": k1, "b": b, "heading_weight": heading_weight}
    docs = scope if isinstance(scope, search_scope.DocScope) else None
    # Scoped by urls, questions are not pruned: finding the scope's docs is most of their cost, and a pruned try
    # pays it again. By resolved docs, below PRUNE_MIN_SCOPE of them neither: the scope's filter already leaves
    # few postings to sum (BENCHMARKS.md, "inside a job's scope").
    scoped = docs is not None and not docs.whole
    if ((scope is None or docs is not None) and (not scoped or docs.fraction >= PRUNE_MIN_SCOPE)  # type: ignore[union-attr]
            and sum(n for _, n in stats) >= PRUNE_MIN_DOCS and k1 >= 0 and 0 <= b <= 1 and heading_weight >= 0):
        terms = conn.execute(BM25_TERMS_SQL, {"q": question, "lang": lang}).fetchall()
        rows = _pruned_rank(conn, terms, params, docs)
        if rows is not None:
            return rows
    if docs is not None:
        return conn.execute(bm25_sql(docs), {"q": question, "lang": lang, **params}).fetchall()
    return conn.execute(BM25_SQL, {"q": question, "urls": scope, "lang": lang, **params}).fetchall()


# Below this many docs pruning costs more than it saves: its own query for the terms, and the fixed cost of a
# second query, against fewer postings to sum (BENCHMARKS.md, "Selection latency at 1,000,000 chunks").
PRUNE_MIN_DOCS = 300_000
# The share of the docs from which a scoped question is pruned: below it the full query, filtered by the scope's
# docs, sums fewer postings than the pruned one reads (BENCHMARKS.md, "inside a job's scope").
PRUNE_MIN_SCOPE = 0.2


# MaxScore: a term adds at most idf × (k1 + 1) to a doc's score (tf·(k1 + 1) / (tf + K) < k1 + 1 for K ≥ 0, that
# is k1 ≥ 0 and 0 ≤ b ≤ 1). So a doc holding none of the essential terms scores at most the bound of the
# others; when that bound is below the pool-th best score of the docs holding an essential term, no other doc
# enters the pool or ties with it, and BM25_PRUNED_SQL returns BM25_SQL's rows. The margin covers rounding
# (each term's part is rounded to 1e-18 before the exact sum, the score returned as DOUBLE).
def question_ceiling(conn: duckdb.DuckDBPyConnection, question: str, k1: float) -> float:
    """The most bm25 score a chunk could have for ``question``: each of its indexed terms, stemmed as bm25_rank
    stems it, adds at most idf × (k1 + 1) (below); 0 when none is indexed."""
    stats = conn.execute("SELECT lang FROM bm25_stats WHERE docs > 0 ORDER BY 1").fetchall()
    lang = languages.question_stemmer(question, [name for (name,) in stats])
    return sum(idf for _, idf, _ in conn.execute(BM25_TERMS_SQL, {"q": question, "lang": lang}).fetchall()) * (k1 + 1)


def _bound(terms: Sequence[tuple[Any, ...]], k1: float) -> float:
    return sum(idf for _, idf, _ in terms) * (k1 + 1) * (1 + 1e-9) + 1e-12


def _pruned_rank(conn: duckdb.DuckDBPyConnection, terms: Sequence[tuple[Any, ...]], params: dict[str, Any],
                 scope: search_scope.DocScope | None = None) -> list[tuple[Any, ...]] | None:
    """BM25_SQL's rows for the question's ``terms`` (BM25_TERMS_SQL: term, idf, df; commonest first) among the
    docs of ``scope`` (None: every doc), or None when pruning cannot be proven exact (BM25_SQL then ranks). First
    the rarest terms holding about ``pool`` docs of the scope are essential (their df scaled by the scope's share
    of the docs); if the bound fails, the pool-th score found makes a bound that holds for fewer common terms.
    The bound is the same inside a scope: a doc of the scope without an essential term scores at most it."""
    if not terms:
        return []
    pool, k1 = params["pool"], params["k1"]
    share = 1.0 if scope is None else scope.fraction
    common, held = len(terms), 0.0
    while common > 0 and held < pool:
        common -= 1
        held += terms[common][2] * share
    sql = bm25_pruned_sql(scope)
    for _ in range(2):
        if common == 0:
            return None
        rows = conn.execute(sql, {"terms": [t[0] for t in terms], "idfs": [t[1] for t in terms],
                                              "essential": [i >= common for i in range(len(terms))], **params}).fetchall()
        if len(rows) < pool:
            return None
        if rows[-1][5] > _bound(terms[:common], k1):
            return rows
        common = max((n for n in range(common) if _bound(terms[:n], k1) < rows[-1][5]), default=0)
    return None


def has_pages(conn: duckdb.DuckDBPyConnection) -> bool:
    """Whether any chunk comes from a paged document (a PDF); cheap: row groups without one are skipped."""
    return conn.execute("SELECT 1 FROM chunks WHERE page IS NOT NULL LIMIT 1").fetchone() is not None


def chunk_pages(conn: duckdb.DuckDBPyConnection, chunk_ids: Sequence[str]) -> dict[str, int]:
    """chunk_id → the page it starts on, for the chunks of paged documents (PDFs) among ``chunk_ids``."""
    if not chunk_ids:
        return {}
    return dict(conn.execute(
        "SELECT chunk_id, page FROM chunks WHERE page IS NOT NULL AND list_contains($ids, chunk_id)",
        {"ids": list(chunk_ids)}).fetchall())


def idf(conn: duckdb.DuckDBPyConnection, words: Sequence[str]) -> dict[str, float]:
    """word → its BM25 idf, for the words whose stem is indexed (statistics as BM25_SQL reads them)."""
    return dict(conn.execute(
        """WITH words AS (SELECT w, stem(w, 'porter') AS term FROM (SELECT unnest($words) AS w)),
                df AS (SELECT term, df::BIGINT AS df FROM bm25_terms
                       WHERE df > 0 AND term IN (SELECT term FROM words))
           SELECT w, log((st.num_docs - df.df + 0.5) / (df.df + 0.5) + 1)
           FROM words JOIN df USING (term), (SELECT sum(docs)::BIGINT AS num_docs FROM bm25_stats) st""",
        {"words": list(words)}).fetchall())
