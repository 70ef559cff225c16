"""The embedding index: the vector cache (``embeddings``), the windows chunks are embedded as
(``chunk_windows``) and the typed unit-length copies selection ranks by (``unit_vectors_<dims>``).

This module is the only code that writes SQL on those tables (their DDL is in pipelines/schema.py).
It reads ``chunks`` (what to embed) and ``selection_docs`` (the docs its vector rows are keyed by).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

import duckdb

from pipelines import search_scope, vector_codes
from pipelines.sql import insert_rows, table_exists


def embed_text(heading: str, text: str) -> str:
    """What is embedded for a chunk: the heading path carries meaning its body often leaves out."""
    return f"{heading}\n\n{text}" if heading else text


def embed_key(heading: str, text: str) -> str:
    return hashlib.sha256(embed_text(heading, text).encode("utf-8")).hexdigest()


# Embedding models read a few hundred word pieces and silently drop the rest, fewer words of documentation than
# a chunk holds: the second half of a chunk was invisible to embedding selection.
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


def _rebuild_sql(dims: int) -> str:
    """One slice of a full build: the docs numbered in [$low, $high)."""
    return (f"INSERT INTO {unit_vectors_table(dims)} "
            f"{_unit_rows(dims, _INDEXED_WINDOWS + chr(10) + '    WHERE s.doc >= $low AND s.doc < $high')}")


# Docs per slice of a full build: one statement over every doc sorted all the vectors at once (peak RSS
# 4,959 MiB at 300,000 chunks); slices of docs in order write the same rows with memory bounded by a slice
# (BENCHMARKS.md, "Selection latency at 1,000,000 chunks").
REBUILD_SLICE_DOCS = 100_000


def _index_sql(dims: int, listed: bool) -> str:
    """Rows for the docs numbered above ``$base`` (just indexed) whose windows have cached vectors; ``listed``:
    the cache is searched for the windows' keys ``$keys`` only."""
    where = "list_contains($keys, e.embed_key)" if listed else "TRUE"
    return (f"INSERT INTO {unit_vectors_table(dims)} "
            f"{_unit_rows(dims, _INDEXED_WINDOWS + chr(10) + '    WHERE s.doc > $base', where)}")


# Up to this many window keys, index_docs_above binds them as a list: cheaper than the join for a few keys,
# dearer for many (BENCHMARKS.md, "Figures behind code comments").
_LISTED_KEYS = 100


# The distinct window keys of the docs numbered above ``$base``.
_NEW_WINDOW_KEYS = f"SELECT DISTINCT window_key FROM ({_INDEXED_WINDOWS}\n    WHERE s.doc > $base)"


def _unindex_sql(dims: int) -> str:
    return f"DELETE FROM {unit_vectors_table(dims)} WHERE list_contains($urls, url)"


# The indexed windows whose keys are ``$keys``.
_KEYED_WINDOWS = f"{_INDEXED_WINDOWS}\n    WHERE w.window_key IN (SELECT unnest($keys))"


def _add_sql(dims: int) -> tuple[str, str]:
    """Rows for windows ``$keys`` (of ``$scheme``) of chunks already in selection_docs: after their vectors
    were cached for ``$model``, or after the windows were mapped (``$model`` NULL: every model's cached
    vectors, e.g. those of one-window chunks embedded before windows existed).

    Two statements (DuckDB binds parameters per statement): drop any rows the windows had, so an
    ``INSERT OR REPLACE`` of a vector never leaves two, then add them.
    """
    table = unit_vectors_table(dims)
    windows = _KEYED_WINDOWS
    return (
        f"DELETE FROM {table} t USING ({windows}) x "
        f"WHERE ($model IS NULL OR t.model = $model) AND t.doc = x.doc AND t.part = x.part",
        f"INSERT INTO {table} {_unit_rows(dims, windows, '($model IS NULL OR e.model = $model)')}",
    )


def rebuild_unit_vectors(conn: duckdb.DuckDBPyConnection, dims: int) -> None:
    """(Re)build the typed vector table for ``dims`` from the cache. Needs selection_docs."""
    table = unit_vectors_table(dims)
    conn.execute(f"CREATE OR REPLACE TABLE {table} (model VARCHAR, doc INTEGER, url VARCHAR, ordinal INTEGER, "
                 f"part INTEGER, vector FLOAT[{int(dims)}])")
    high = conn.execute("SELECT coalesce(max(doc), 0) FROM selection_docs").fetchone()[0]  # type: ignore[index]
    for low in range(0, int(high) + 1, REBUILD_SLICE_DOCS):
        conn.execute(_rebuild_sql(dims), {"scheme": EMBED_SCHEME, "low": low, "high": low + REBUILD_SLICE_DOCS})
    # The codes are kept only once a selection has used them (past 200,000 windows, or `approximate: true`): every
    # other database would hold each vector twice and encode it on every insert for nothing.
    if table_exists(conn, vector_codes.codes_table(dims)):
        vector_codes.rebuild(conn, dims)


def ensure_unit_vectors(conn: duckdb.DuckDBPyConnection, dims: int) -> None:
    """Build the typed vector table for ``dims`` if it is missing (vectors of a new length, or a database
    indexed before the table existed)."""
    if not table_exists(conn, unit_vectors_table(dims)):
        rebuild_unit_vectors(conn, dims)


def vector_table_dims(conn: duckdb.DuckDBPyConnection) -> list[int]:
    """The lengths that have a typed vector table (unit_vectors_<dims>)."""
    rows = conn.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' AND starts_with(table_name, ?)",
        [UNIT_VECTORS_PREFIX]).fetchall()
    return sorted(int(name.removeprefix(UNIT_VECTORS_PREFIX)) for (name,) in rows
                  if name.removeprefix(UNIT_VECTORS_PREFIX).isdigit())


def add_unit_vectors(conn: duckdb.DuckDBPyConnection, model: str | None, keys: Sequence[str],
                     dims: Iterable[int] | None = None) -> None:
    """Keep the typed vector tables in step with an insert into ``embeddings`` of window ``keys`` for
    ``model``, or (``model`` None) with newly mapped windows whose vectors any model may have cached.

    Chunks indexed later get their rows when they are indexed (search_index.index_pages).
    """
    if not keys or not table_exists(conn, "selection_docs"):
        return
    if dims is None:
        dims = [d for (d,) in conn.execute(
            "SELECT DISTINCT dims FROM embeddings WHERE embed_key IN (SELECT unnest($keys))", {"keys": list(keys)}
        ).fetchall()]
    for d in sorted(set(dims)):
        if table_exists(conn, unit_vectors_table(d)):
            params = {"model": model, "keys": list(keys), "scheme": EMBED_SCHEME}
            vector_codes.delete_windows(conn, d, _KEYED_WINDOWS, params)
            for statement in _add_sql(d):
                conn.execute(statement, params)
            vector_codes.sync(conn, d, "v.doc IN (SELECT doc FROM (" + _KEYED_WINDOWS + "))",
                              {"keys": list(keys), "scheme": EMBED_SCHEME})
        else:
            rebuild_unit_vectors(conn, d)


def unindex_pages(conn: duckdb.DuckDBPyConnection, urls: Sequence[str]) -> None:
    """Drop the vector rows of the pages ``urls`` (before their docs leave selection_docs)."""
    for dims in vector_table_dims(conn):
        conn.execute(_unindex_sql(dims), {"urls": list(urls)})
        vector_codes.delete_urls(conn, dims, urls)


def index_docs_above(conn: duckdb.DuckDBPyConnection, base: int) -> None:
    """Add the vector rows of the docs numbered above ``base`` (just indexed) whose windows have cached vectors.

    The cache is searched for those windows' keys, bound as a list: joined to the windows instead, the
    statement read every cached vector, a cost that grew with the cache (BENCHMARKS.md, "The daily re-crawl as
    a crawl"). New text has no windows yet (they are made when a question embeds it): nothing to copy.
    """
    dims = vector_table_dims(conn)
    if not dims:
        return
    keys = [key for (key,) in conn.execute(_NEW_WINDOW_KEYS, {"base": base, "scheme": EMBED_SCHEME}).fetchall()]
    if not keys:
        return
    # A bound list is tested row by row: cheaper than the join for a few keys, dearer for many (a batch of
    # changed pages whose text was seen before).
    listed = len(keys) <= _LISTED_KEYS
    for d in dims:
        conn.execute(_index_sql(d, listed), {"base": base, "scheme": EMBED_SCHEME, **({"keys": keys} if listed else {})})
        vector_codes.sync(conn, d, "v.doc > $base", {"base": base})


def rebuild_all(conn: duckdb.DuckDBPyConnection) -> None:
    """Rebuild every typed vector table after selection_docs was renumbered, and drop the legacy ones."""
    for (dims,) in conn.execute("SELECT DISTINCT dims FROM embeddings ORDER BY dims").fetchall():
        rebuild_unit_vectors(conn, dims)
    legacy = conn.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' AND starts_with(table_name, ?)",
        [LEGACY_VECTOR_TABLE_PREFIX]).fetchall()
    for (table,) in legacy:
        conn.execute(f'DROP TABLE "{table}"')


def drop_vector_tables(conn: duckdb.DuckDBPyConnection) -> None:
    for dims in vector_table_dims(conn):
        conn.execute(f"DROP TABLE {unit_vectors_table(dims)}")
        vector_codes.drop(conn, dims)


# -- the vector cache (jobs/select.py Selector.embed_missing) ------------------------------------

# A hash join on the scope's urls: list_contains per chunk grows with the scope (BENCHMARKS.md, "inside a job's
# scope").
_SCOPE = "($urls IS NULL OR url IN (SELECT unnest($urls)))"


def add_windows(conn: duckdb.DuckDBPyConnection, scope: Sequence[str] | None) -> list[str]:
    """Record the windows of chunks in scope that have none under the current scheme; their keys."""
    params = {"urls": scope, "scheme": EMBED_SCHEME}
    # Keys first, texts only of the chunks without windows: joined with every chunk's text, the look-up held
    # the texts of a million chunks when none was missing (BENCHMARKS.md, "Selection latency at 1,000,000 chunks").
    keys = [key for (key,) in conn.execute(
        f"SELECT DISTINCT embed_key FROM chunks WHERE {_SCOPE} AND embed_key NOT IN "
        "(SELECT embed_key FROM chunk_windows WHERE scheme = $scheme)", params).fetchall()]
    if not keys:
        return []
    chunks = conn.execute(
        f"""
        SELECT embed_key, any_value(heading_path), any_value(text) FROM chunks
        WHERE {_SCOPE} AND embed_key IN (SELECT unnest($keys))
        GROUP BY embed_key ORDER BY embed_key
        """,
        {"urls": scope, "keys": keys},
    ).fetchall()
    rows = [
        (key, EMBED_SCHEME, index, text_key(window))
        for key, heading, text in chunks
        for index, window in enumerate(embed_windows(heading, text))
    ]
    if rows:
        insert_rows(conn, "INSERT OR IGNORE INTO chunk_windows VALUES", rows)
    return sorted({key for _chunk, _scheme, _part, key in rows})


# The window keys (of ``$scheme``) of the chunks in scope without a vector for ``$model``: keys only, so that the
# look-up holds no text (the texts are read for these keys alone, usually none).
_MISSING_WINDOW_KEYS = f"""
SELECT DISTINCT w.window_key FROM chunk_windows w
WHERE w.scheme = $scheme AND w.embed_key IN (SELECT embed_key FROM chunks WHERE {_SCOPE})
  AND w.window_key NOT IN (SELECT embed_key FROM embeddings WHERE model = $model)
"""


def windows_without_vectors(conn: duckdb.DuckDBPyConnection, scope: Sequence[str] | None,
                            model: str | None) -> list[tuple[str, int, str, str]]:
    """(window_key, part, heading_path, text of a chunk it belongs to) of each window of the chunks in
    scope that has no vector for ``model`` yet, by window key."""
    params = {"urls": scope, "model": model, "scheme": EMBED_SCHEME}
    keys = [key for (key,) in conn.execute(_MISSING_WINDOW_KEYS, params).fetchall()]
    if not keys:
        return []
    return conn.execute(
        """
        SELECT w.window_key, arg_min(w.part, c.embed_key), arg_min(c.heading_path, c.embed_key),
               arg_min(c.text, c.embed_key)
        FROM chunk_windows w JOIN chunks c USING (embed_key)
        WHERE w.scheme = $scheme AND ($urls IS NULL OR c.url IN (SELECT unnest($urls)))
          AND w.window_key IN (SELECT unnest($keys))
        GROUP BY w.window_key ORDER BY w.window_key
        """,
        {"urls": scope, "scheme": EMBED_SCHEME, "keys": keys},
    ).fetchall()


def cached_vectors(conn: duckdb.DuckDBPyConnection, model: str, keys: Sequence[str]) -> dict[str, list[float]]:
    """The cached vectors of the texts ``keys`` for ``model`` (those it has)."""
    if not keys:
        return {}
    rows = conn.execute("SELECT embed_key, vector FROM embeddings WHERE model = $model "
                        "AND embed_key IN (SELECT unnest($keys))", {"model": model, "keys": list(keys)}).fetchall()
    return {key: list(vector) for key, vector in rows}


def insert_vectors(conn: duckdb.DuckDBPyConnection, model: str | None, keys: list[str],
                   vectors: list[list[float]], *, index: bool = True) -> None:
    """Cache ``vectors`` of the windows ``keys`` for ``model`` and add them to the typed tables (``index``
    False: only cache them; the second stage's sentence windows are looked up by key, never ranked)."""
    # Binding thousands of float lists as parameters takes minutes; a bulk read of a temporary
    # NDJSON file takes well under a second.
    fd, path = tempfile.mkstemp(suffix=".ndjson", prefix="webqa-embed-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            for key, vector in zip(keys, vectors, strict=True):
                out.write(json.dumps({"k": key, "v": vector}) + "\n")
        conn.execute(
            """
            INSERT OR REPLACE INTO embeddings
            SELECT $model, k, len(v), v FROM read_json($path, format = 'newline_delimited',
                                                columns = {'k': 'VARCHAR', 'v': 'FLOAT[]'})
            """,
            {"model": model, "path": path},
        )
    finally:
        os.unlink(path)
    if index:
        add_unit_vectors(conn, model, keys, {len(v) for v in vectors})


# Exact cosine over the unit-length copy of the cached vectors (unit_vectors_<dims>),
# one row per (indexed chunk, window), as a dot product with the unit-length question: no per-row cast, no
# join before the top ``pool`` is known, ties by the rows' url, ordinal and part. A chunk scores as its
# best window (embed_windows). The chunks ranked by their best window are the first
# distinct chunks of the windows ranked by score: so only the best ``pool × WINDOWS_PER_DOC`` windows are
# kept (a top-N heap, not a group per chunk over every window; faster, BENCHMARKS.md, "Figures behind code comments"). When
# those hold fewer than ``pool`` chunks, EMBEDDING_ALL_SQL groups them all. The last column is how many
# windows the first query kept.
WINDOWS_PER_DOC = 8
_EMBEDDING_SCOPE = "AND list_contains($urls, v.url)"
# The pool's chunks with their text, best first (``top``: doc, url, ordinal, score).
_EMBEDDING_RESULT = """
SELECT c.chunk_id, c.url, c.heading_path, c.text, c.token_estimate, top.score, c.ordinal, {windows_seen}
FROM top JOIN selection_docs s USING (doc) JOIN chunks c ON c.chunk_id = s.chunk_id
ORDER BY top.score DESC, top.url, top.ordinal
"""
EMBEDDING_SQL = """
WITH windows AS (
    SELECT v.doc, v.url, v.ordinal, array_inner_product(v.vector, $q::FLOAT[{dims}]) AS score
    FROM {table} v
    WHERE v.model = $model {scope}
    ORDER BY score DESC, v.url, v.ordinal, v.part
    LIMIT $windows
),
top AS (
    SELECT doc, url, ordinal, max(score) AS score FROM windows GROUP BY doc, url, ordinal
    ORDER BY score DESC, url, ordinal LIMIT $pool
)
""" + _EMBEDDING_RESULT.replace("{windows_seen}", "(SELECT count(*) FROM windows)")
EMBEDDING_ALL_SQL = """
WITH top AS (
    SELECT v.doc, v.url, v.ordinal, max(array_inner_product(v.vector, $q::FLOAT[{dims}])) AS score
    FROM {table} v
    WHERE v.model = $model {scope}
    GROUP BY v.doc, v.url, v.ordinal
    ORDER BY score DESC, v.url, v.ordinal
    LIMIT $pool
)
""" + _EMBEDDING_RESULT.replace("{windows_seen}", "NULL")




def rank(conn: duckdb.DuckDBPyConnection, vector: Sequence[float], model: str | None,
         scope: Sequence[str] | search_scope.DocScope | None, *, pool: int) -> list[tuple[Any, ...]]:
    """The chunks best matching the unit-length ``vector`` by their best window, best first: (chunk_id, url,
    heading_path, text, token_estimate, score, ordinal, windows seen); ``scope``: urls, or their docs resolved
    once (filtered by doc, the same rows). The typed table for the vector's length must exist
    (``ensure_unit_vectors``); raises duckdb.CatalogException when the index tables are missing."""
    dims = len(vector)
    # Bound as JSON text and cast in SQL: DuckDB's Python client converts a list of floats value by value
    # (with an import look-up each), far slower than one string (BENCHMARKS.md, "Figures behind code
    # comments").
    params = {"q": json.dumps(list(vector)), "model": model, "pool": pool, "windows": pool * WINDOWS_PER_DOC}
    table = unit_vectors_table(dims)
    if isinstance(scope, search_scope.DocScope):
        # By rowid: the scope's windows are found on the doc column alone and only their vectors are read (a
        # semi-join on the doc reads every window's vector first).
        scoped = "" if scope.whole else (f"AND v.rowid IN (SELECT w.rowid FROM {table} w WHERE w.model = $model "
                                         f"AND {scope.where('w.doc')})")
    else:
        scoped = _EMBEDDING_SCOPE if scope else ""
        params.update({"urls": list(scope)} if scope else {})
    rows = conn.execute(EMBEDDING_SQL.format(table=table, dims=dims, scope=scoped), params).fetchall()
    windows_seen = rows[0][-1] if rows else 0
    if len(rows) < pool and windows_seen == params["windows"]:
        # Fewer chunks than the pool among the best windows (chunks of many windows): rank every
        # chunk by its best window instead. Same ranking, slower.
        del params["windows"]
        rows = conn.execute(EMBEDDING_ALL_SQL.format(table=table, dims=dims, scope=scoped), params).fetchall()
    return rows
