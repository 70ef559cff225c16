"""The approximate first stage of embedding selection on large corpora: binary codes of the unit vectors.

Every row of ``unit_vectors_<dims>`` has a twin in ``vector_codes_<dims>``: its sign bits (``code``, one bit
per dimension, padded to whole 64-bit words) and its unit vector as raw float32 bytes (``vector``). A
question is scanned by Hamming distance between its own sign bits and every code (popcount of xor, in
numpy, over codes held in memory: 80 MB at a million chunks), the ``WIDE_WINDOWS`` nearest are ranked again
by the question's floats against their bits, the best ``RESCORE_WINDOWS`` are fetched by key (``id``) and
re-scored exactly (their dot product with the question), and the chunks ranked by their best window as the
exact scan ranks them.

Why this shape (figures: BENCHMARKS.md, "Selection latency at 1,000,000 chunks"): the exact scan reads
every float of every window per question; DuckDB's bit_count loops over bits, and fetching a few hundred
FLOAT[N] rows by doc costs about as much as scanning them all, BLOBs by row id less (still ~90 ms at 1M: a
scan), BLOBs by an indexed key a lookup per row.

Deterministic: windows tied on distance are taken in (doc, part) order, and the re-score breaks ties by
url, ordinal and part as the exact scan does. The table is kept in step with ``unit_vectors_<dims>`` by
pipelines/vectors.py wherever that one is written (page by page; a full build streams in batches).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np

from pipelines import search_scope
from pipelines.sql import table_exists

CODES_PREFIX = "vector_codes_"
# Windows re-scored exactly: enough to hold the exact top 50 chunks' best windows (recall measured in
# BENCHMARKS.md, "Selection latency at 1,000,000 chunks").
RESCORE_WINDOWS = 1000
# Windows kept by the Hamming distance and ranked again by the question's own floats against their sign
# bits (``asymmetric``) before the exact re-score: Hamming alone throws away how large each of the
# question's components is, and on real vectors (the dev set) lost top-50 chunks that this keeps.
WIDE_WINDOWS = 20_000
# Rows encoded per batch by a full build: bounds its memory (a batch of FLOAT[384] is ~80 MB in numpy).
BUILD_BATCH = 50_000


def codes_table(dims: int) -> str:
    return f"{CODES_PREFIX}{int(dims)}"


def code_words(dims: int) -> int:
    """64-bit words per code: one bit per dimension."""
    return -(-int(dims) // 64)


def encode(vectors: np.ndarray) -> np.ndarray:
    """Sign bits of each row of ``vectors`` (n × dims) as n × code_words(dims) uint64 (bit set: > 0)."""
    n, dims = vectors.shape
    bits = np.zeros((n, code_words(dims) * 64), dtype=bool)
    bits[:, :dims] = vectors > 0
    return np.packbits(bits, axis=1).view(np.uint64).reshape(n, code_words(dims))


def hamming(columns: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Bits differing between each code and the query's code (words uint64). The codes are held by word
    (``columns``: words × n, each word's row contiguous): a word at a time over contiguous memory took a quarter
    of the time of whole codes at once (BENCHMARKS.md, "Selection latency at 1,000,000 chunks")."""
    distances = np.bitwise_count(columns[0] ^ query[0]).astype(np.uint16)
    for word in range(1, len(columns)):
        distances += np.bitwise_count(columns[word] ^ query[word])
    return distances


def nearest(distances: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` smallest distances (small non-negative integers), ties by position, in that order
    (deterministic): every position below the k-th smallest distance, then the first ones at it."""
    if len(distances) <= k:
        return np.lexsort((np.arange(len(distances)), distances))
    below = np.cumsum(np.bincount(distances))
    cut = int(np.searchsorted(below, k))  # the k-th smallest distance
    inside = np.flatnonzero(distances < cut)
    tied = np.flatnonzero(distances == cut)[: k - len(inside)]
    picked = np.concatenate((inside, tied))
    return picked[np.lexsort((picked, distances[picked]))]


# Each byte value's 8 bits as ±1, most significant first (np.packbits' order).
_SIGNS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float32) * 2 - 1


def asymmetric(codes: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The question's dot product with each code read as a ±1 vector (n × words uint64; query: dims floats)."""
    dims = code_words(len(query)) * 64
    padded = np.zeros(dims, dtype=np.float32)
    padded[: len(query)] = query
    table = _SIGNS @ padded.reshape(dims // 8, 8).T  # 256 × bytes: each byte value's share of the score
    octets = codes.view(np.uint8)
    return table[octets, np.arange(dims // 8)].sum(axis=1, dtype=np.float32)


def first_stage(columns: np.ndarray, query: np.ndarray, windows: int, wide: int) -> np.ndarray:
    """Positions of the ``windows`` best codes (``columns``: words × n, see hamming) for the unit ``query``: the
    ``wide`` nearest by Hamming distance, then by asymmetric score; ties by position (deterministic)."""
    near = nearest(hamming(columns, encode(query[None, :])[0]), wide)
    if len(near) <= windows and len(near) == columns.shape[1]:
        return np.sort(near)
    scores = asymmetric(np.ascontiguousarray(columns[:, near].T), query)
    return near[np.lexsort((near, -scores))[:windows]]


# -- the table, kept in step with unit_vectors_<dims> ------------------------------------------------------

def _ddl(dims: int) -> str:
    # ``id`` is the key the scan fetches its candidates by: a key in an index is fetched row by row, where a
    # list of row ids is a scan of the whole table (BENCHMARKS.md, "Selection latency at 1,000,000 chunks").
    table = codes_table(dims)
    return (f"CREATE SEQUENCE IF NOT EXISTS {table}_ids; CREATE TABLE IF NOT EXISTS {table} (id BIGINT PRIMARY KEY "
            f"DEFAULT nextval('{table}_ids'), model VARCHAR, doc INTEGER NOT NULL, url VARCHAR NOT NULL, "
            "ordinal INTEGER NOT NULL, part INTEGER NOT NULL, code BLOB NOT NULL, vector BLOB NOT NULL)")


def _present(conn: duckdb.DuckDBPyConnection, dims: int) -> bool:
    """Whether the codes table exists with its keys; one from before them (no ``id``) is dropped, so that the
    first approximate question builds it again."""
    columns = {name for (name,) in conn.execute(
        "SELECT column_name FROM duckdb_columns() WHERE schema_name = 'main' AND table_name = ?",
        [codes_table(dims)]).fetchall()}
    if columns and "id" not in columns:
        drop(conn, dims)
    return "id" in columns


def _missing_sql(dims: int, where: str) -> str:
    """Rows of unit_vectors_<dims> (``v``, filtered by ``where``) without their twin."""
    return (f"SELECT v.model, v.doc, v.url, v.ordinal, v.part, v.vector FROM unit_vectors_{int(dims)} v "
            f"WHERE {where} AND NOT EXISTS (SELECT 1 FROM {codes_table(dims)} c WHERE c.model IS NOT DISTINCT FROM "
            "v.model AND c.doc = v.doc AND c.part = v.part) ORDER BY v.model, v.doc, v.part")


def _insert(conn: duckdb.DuckDBPyConnection, dims: int, rows: dict[str, np.ndarray]) -> None:
    matrix = np.stack(rows["vector"]).astype("<f4") if len(rows["vector"]) else np.zeros((0, dims), "<f4")
    codes = encode(matrix)
    batch = {  # noqa: F841 (read by DuckDB's replacement scan below)
        "model": rows["model"], "doc": rows["doc"], "url": rows["url"], "ordinal": rows["ordinal"],
        "part": rows["part"], "code": np.array([c.tobytes() for c in codes], dtype=object),
        "vector": np.array([v.tobytes() for v in matrix], dtype=object),
    }
    conn.execute(f"INSERT INTO {codes_table(dims)} (model, doc, url, ordinal, part, code, vector) SELECT * FROM batch")


def sync(conn: duckdb.DuckDBPyConnection, dims: int, where: str = "TRUE", params: dict[str, Any] | None = None,
         *, batched: bool = False) -> int:
    """Encode the rows of unit_vectors_<dims> matching ``where`` that have no twin yet; returns how many.
    ``batched`` (a full build): in doc ranges of ``BUILD_BATCH // 2`` docs, so its memory stays bounded
    (fetchnumpy holds a whole result). Without the table (a database from before the codes) nothing is
    done: a partial table would hide windows from the scan; the first approximate question builds it whole."""
    if not _present(conn, dims):
        return 0
    if not batched:
        return _encode_missing(conn, dims, where, params)
    bounds = conn.execute(f"SELECT min(doc), max(doc) FROM unit_vectors_{int(dims)} v WHERE {where}",
                          params or {}).fetchone()
    if bounds is None or bounds[0] is None:
        return 0
    step = max(1, BUILD_BATCH // 2)  # docs per batch: ~1.7 windows per doc on the bench corpus
    return sum(_encode_missing(conn, dims, f"{where} AND v.doc >= {start} AND v.doc < {start + step}", params)
               for start in range(int(bounds[0]), int(bounds[1]) + 1, step))


def _encode_missing(conn: duckdb.DuckDBPyConnection, dims: int, where: str, params: dict[str, Any] | None) -> int:
    rows = conn.execute(_missing_sql(dims, where), params or {}).fetchnumpy()
    if len(rows["doc"]):
        _insert(conn, dims, rows)
    return len(rows["doc"])


def rebuild(conn: duckdb.DuckDBPyConnection, dims: int) -> int:
    """Encode every row of unit_vectors_<dims> afresh (after that table was rebuilt)."""
    drop(conn, dims)
    conn.execute(_ddl(dims))
    return sync(conn, dims, batched=True)


def drop(conn: duckdb.DuckDBPyConnection, dims: int) -> None:
    # The key sequence stays: keys of a rebuilt table continue it, so a cache loaded before (CodeCache) never
    # meets its old keys on other windows with the same count and largest key.
    conn.execute(f"DROP TABLE IF EXISTS {codes_table(dims)}")


def delete_urls(conn: duckdb.DuckDBPyConnection, dims: int, urls: Sequence[str]) -> None:
    if table_exists(conn, codes_table(dims)):
        conn.execute(f"DELETE FROM {codes_table(dims)} WHERE list_contains($urls, url)", {"urls": list(urls)})


def delete_windows(conn: duckdb.DuckDBPyConnection, dims: int, windows: str, params: dict[str, Any]) -> None:
    """Drop the twins of the rows ``windows`` (doc, part) of ``$model`` (NULL: every model) that are replaced."""
    if table_exists(conn, codes_table(dims)):
        conn.execute(f"DELETE FROM {codes_table(dims)} t USING ({windows}) x WHERE ($model IS NULL OR "
                     "t.model = $model) AND t.doc = x.doc AND t.part = x.part", params)


# -- the scan ------------------------------------------------------------------------------------------------

@dataclass
class _Codes:
    fingerprint: tuple[Any, ...]
    rowids: np.ndarray  # keys (``id``) in the codes table, in (doc, part) order
    codes: np.ndarray  # words × n uint64 (each word's row contiguous: see hamming), same order
    docs: np.ndarray  # each row's doc and part, same order: a fetched key is checked against them
    parts: np.ndarray


class CodeCache:
    """The codes of one database held in memory (per model and length), reloaded when the table changed."""

    def __init__(self) -> None:
        self._loaded: dict[tuple[int, str | None], _Codes] = {}
        # The scopes' codes, the KEPT_SCOPES last asked: (the loaded codes and the scope's docs they were cut
        # for, the scope's codes and their positions among all, None: all). Cut once per scope while both hold.
        self._scoped: list[tuple[_Codes, np.ndarray, np.ndarray, np.ndarray | None]] = []

    def scoped(self, loaded: _Codes, docs: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        """The codes of the windows of ``docs`` (sorted doc ids; None: every window) as words × n, and their
        positions in ``loaded`` (None: all of them, in order)."""
        if docs is None:
            return loaded.codes, None
        at = next((i for i, k in enumerate(self._scoped) if k[0] is loaded and k[1] is docs), None)
        if at is None:
            mask = np.isin(loaded.docs, docs)
            positions = None if mask.all() else np.flatnonzero(mask)
            codes = loaded.codes if positions is None else np.ascontiguousarray(loaded.codes[:, positions])
            kept = (loaded, docs, codes, positions)
        else:
            kept = self._scoped.pop(at)
        self._scoped = [kept, *self._scoped[: search_scope.KEPT_SCOPES - 1]]
        return kept[2], kept[3]

    def rows(self, conn: duckdb.DuckDBPyConnection, dims: int) -> int | None:
        """Rows in the codes table (every model), or None when the table is missing (or from before its keys)."""
        if not _present(conn, dims):
            return None
        return int(conn.execute(f"SELECT count(*) FROM {codes_table(dims)}").fetchone()[0])  # type: ignore[index]

    def get(self, conn: duckdb.DuckDBPyConnection, dims: int, model: str | None, *, reload: bool = False) -> _Codes:
        table = codes_table(dims)
        # Every change moves the count or the largest key (keys come from a sequence, never reused); rank()
        # checks each fetched row's (doc, part) all the same.
        fingerprint = tuple(conn.execute(f"SELECT count(*), max(id) FROM {table}").fetchone() or ())
        loaded = self._loaded.get((dims, model))
        if reload or loaded is None or loaded.fingerprint != fingerprint:
            rows = conn.execute(f"SELECT id, code, doc, part FROM {table} WHERE model IS NOT DISTINCT FROM $model "
                                "ORDER BY doc, part", {"model": model}).fetchnumpy()
            codes = np.ascontiguousarray(np.frombuffer(b"".join(rows["code"]), dtype=np.uint64)
                                         .reshape(len(rows["code"]), code_words(dims)).T)
            loaded = _Codes(fingerprint, np.asarray(rows["id"], dtype=np.int64), codes,
                            np.asarray(rows["doc"], dtype=np.int64), np.asarray(rows["part"], dtype=np.int64))
            self._loaded[(dims, model)] = loaded
        return loaded


# The docs' chunk ids, then the chunks' text, by lists written into the statements: DuckDB looks a literal list of
# chunk ids up in the chunks' key index, where a join read both tables whole (BENCHMARKS.md, "Selection latency at
# 1,000,000 chunks").
_CHUNK_IDS = "SELECT doc, chunk_id FROM selection_docs WHERE doc IN ({docs})"
_CHUNKS = "SELECT chunk_id, url, heading_path, text, token_estimate, ordinal FROM chunks WHERE chunk_id IN ({ids})"


def rank(conn: duckdb.DuckDBPyConnection, cache: CodeCache, vector: Sequence[float], model: str | None, *,
         pool: int, windows: int | None = None, docs: np.ndarray | None = None) -> list[tuple[Any, ...]] | None:
    """The chunks best matching the unit-length ``vector`` by their best window, as pipelines.vectors.rank
    returns them, from the ``windows`` nearest codes re-scored exactly; only windows of ``docs`` (sorted doc ids
    of a scope; None: every window). None when those windows hold fewer than ``pool`` chunks (the caller scans
    exactly)."""
    windows = windows or RESCORE_WINDOWS
    query = np.asarray(vector, dtype=np.float32)
    for reload in (False, True):  # once more from a fresh load when the cached keys no longer match
        loaded = cache.get(conn, len(vector), model, reload=reload)
        codes, positions = cache.scoped(loaded, docs)
        order = first_stage(codes, query, windows, max(windows, WIDE_WINDOWS))
        if positions is not None:
            order = positions[order]  # in the same order: positions ascend as the scope's codes do
        if not len(order):
            return []
        got = _fetch(conn, loaded, order, model, len(vector))
        if got is not None:
            return _pool(conn, got, query, order, pool, windows)
    return None  # the table keeps changing under us: the caller scans exactly


def _fetch(conn: duckdb.DuckDBPyConnection, loaded: _Codes, order: np.ndarray, model: str | None,
           dims: int) -> dict[str, np.ndarray] | None:
    """The windows at ``order``'s cached keys, or None when any key now holds another window (or none)."""
    ids = ",".join(str(int(r)) for r in loaded.rowids[order])
    # Keys written into the statement, and no other condition: DuckDB then looks them up in the key's index; a
    # bound list is joined and another condition (the model's) makes it scan the table (BENCHMARKS.md).
    got = conn.execute(f"SELECT id, doc, url, ordinal, part, model, vector FROM {codes_table(dims)} WHERE id IN "
                       f"({ids})").fetchnumpy()
    expected = {int(r): (int(d), int(p), model) for r, d, p in zip(loaded.rowids[order], loaded.docs[order],
                                                                 loaded.parts[order], strict=True)}
    found = {int(r): (int(d), int(p), m) for r, d, p, m in zip(got["id"], got["doc"], got["part"], got["model"],
                                                             strict=True)}
    return got if found == expected else None


def _pool(conn: duckdb.DuckDBPyConnection, got: dict[str, np.ndarray], query: np.ndarray, order: np.ndarray,
          pool: int, windows: int) -> list[tuple[Any, ...]] | None:
    """The fetched windows re-scored exactly, best window per chunk, joined to the chunks' text."""
    dims = len(query)
    matrix = np.frombuffer(b"".join(got["vector"]), dtype="<f4").reshape(len(got["vector"]), dims)
    scores = matrix.astype(np.float64) @ query.astype(np.float64)
    best: dict[int, tuple[float, str, int]] = {}
    ranked = sorted(zip((-scores).tolist(), got["url"].tolist(), got["ordinal"].tolist(), got["part"].tolist(),
                        got["doc"].tolist(), strict=True))
    for negative, url, ordinal, _part, doc in ranked:
        if doc not in best:
            best[doc] = (-negative, url, ordinal)
            if len(best) == pool:
                break
    if len(best) < pool and len(order) == windows:
        return None
    return _chunks(conn, best, len(order))


def _chunks(conn: duckdb.DuckDBPyConnection, best: dict[int, tuple[float, str, int]], seen: int) -> list[tuple[Any, ...]]:
    """The chunks of the docs ``best`` (doc → score, url, ordinal; best first), as pipelines.vectors.rank returns
    them: (chunk_id, url, heading_path, text, token_estimate, score, ordinal, ``seen``)."""
    if not best:
        return []
    chunk_ids = dict(conn.execute(_CHUNK_IDS.format(docs=",".join(str(int(d)) for d in best))).fetchall())
    quoted = ",".join("'" + str(c).replace("'", "''") + "'" for c in chunk_ids.values())
    chunks = {row[0]: row for row in conn.execute(_CHUNKS.format(ids=quoted)).fetchall()} if chunk_ids else {}
    rows = []
    for doc, (score, _url, _ordinal) in best.items():
        chunk = chunks.get(chunk_ids.get(doc))
        if chunk is not None:  # as the join did: a doc without its chunk is left out
            chunk_id, url, heading, text, tokens, ordinal = chunk
            rows.append((chunk_id, url, heading, text, tokens, score, ordinal, seen))
    return rows
