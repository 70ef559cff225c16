"""Selection: which stored chunks the LLM gets to see. The product, and where most failures start.

Every method returns ranked candidates with their scores and the reasons (matched keywords or terms),
deterministically: ties are broken by page URL and position in the page, never by chance.

- ``keyword``: the article's method. Keywords are the question's lower-case words longer than three
  letters minus stop words; score = keywords found in the chunk, +2 when one is in the heading path.
- ``bm25``: Okapi BM25 over DuckDB's full-text index of the heading path and the text (Porter stemming);
  heading terms count three times (``BM25_HEADING_WEIGHT``).
- ``embedding``: cosine similarity in DuckDB between Ollama embeddings; a chunk is embedded as windows
  of 150 words (models ignore what lies past their context) and scores as its best window; each text is
  embedded once per model, ever (cached by its hash).
- ``hybrid``: normalised score fusion of bm25 and embedding: each list's scores are min-max scaled to
  [0, 1] within the question's pool, and a chunk's score is the mean of the two (0 for a list that did
  not rank it). See ``HYBRID_BM25_WEIGHT`` for the measurement behind it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import duckdb

from jobs.errors import LLMError, WebqaError
from jobs.extractive import content_words, stem
from jobs.prefixes import EmbeddingPrefixes, prefixes_for, vector_space
from pipelines.schema import terms as index_terms
from pipelines.schema import tokenize, unit_vectors_table
from pipelines.store import (EMBED_SCHEME, add_unit_vectors, embed_windows, ensure_unit_vectors, insert_rows,
                             text_key)

log = logging.getLogger(__name__)

METHODS = ("keyword", "bm25", "embedding", "hybrid")
# Hybrid = min-max normalised score fusion (CombSUM), equal weights, chosen over reciprocal-rank fusion on the
# dev set (figures: BENCHMARKS.md, "Figures behind code comments"). Rank fusion throws away how far ahead a
# list's best hit is: a bm25 score far above the rest of its list (an exact term match) or a cosine far above
# the others (a paraphrase) counts the same as a close call, so single-list hits were pushed out of the top 5.
# Scaling each list to [0, 1] keeps that margin; equal weights because neither list is reliably better and the
# dev set is too small to tune a weight honestly.
HYBRID_BM25_WEIGHT = 0.5
# How many candidates each method ranks; packing and the wider retry never need more.
DEFAULT_POOL = 50
HEADING_BOOST = 2

# Okapi BM25 with the fts extension's formula (its match_bm25 macro; how BM25_SQL computes it fast is
# told there), with two changes. Stop words are dropped from the question before stemming (match_bm25
# keeps their stems). And a term in the heading path counts BM25_HEADING_WEIGHT times (BM25F-style field
# weighting). Section titles name what a section is about ("Where to patch", "Generators"), and the page
# title is in every chunk's path. With b = 0.5 (match_bm25: 0.75) long chunks, which hold most answers in
# reference pages, are penalised less. Both changes raised bm25 recall on the dev set, hybrid's by at most
# one question (figures: BENCHMARKS.md, "Figures behind code comments").
BM25_K1 = 1.2
BM25_B = 0.5
BM25_HEADING_WEIGHT = 3.0


@dataclass(frozen=True)
class Bm25Params:
    k1: float = BM25_K1
    b: float = BM25_B
    heading_weight: float = BM25_HEADING_WEIGHT


@dataclass(frozen=True)
class Rm3Params:
    """Pseudo-relevance feedback for bm25 (RM3): expand the question with the terms that weigh most in
    the first pass's top documents, rank again, and interpolate the two lists.

    ``weight`` is the expanded list's share of the fused score; 0 turns it off.
    """

    feedback_docs: int = 5
    terms: int = 10
    weight: float = 0.5


# The fts extension's own settings, for comparison (a heading term counts once).
MATCH_BM25_PARAMS = Bm25Params(k1=1.2, b=0.75, heading_weight=1.0)


class Embedder(Protocol):
    def embed(self, texts: Sequence[str], *, model: str | None = None) -> list[list[float]]: ...


@dataclass(frozen=True)
class Candidate:
    chunk_id: str
    url: str
    heading: str
    text: str
    tokens: int
    rank: int = 0
    score: float = 0.0
    keyword_score: float | None = None
    bm25_score: float | None = None
    embedding_score: float | None = None
    matched: tuple[str, ...] = ()
    ordinal: int = 0  # position in its page: the tie-break after the URL


@dataclass
class Selection:
    question: str
    method: str  # as asked
    method_used: str  # after fallbacks
    candidates: list[Candidate]
    notice: str | None = None

    @property
    def best_similarity(self) -> float | None:
        """The highest embedding cosine among the candidates; None when no embedding list was used."""
        scores = [c.embedding_score for c in self.candidates if c.embedding_score is not None]
        return max(scores) if scores else None


@dataclass
class Packed:
    sent: list[Candidate]
    dropped: list[tuple[Candidate, str]] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(c.tokens for c in self.sent)


def question_keywords(question: str) -> list[str]:
    """The article's keywords: distinct content words of the question, in order."""
    return list(dict.fromkeys(content_words(question)))


def pack(candidates: Sequence[Candidate], *, top_k: int, token_budget: int) -> Packed:
    """Take candidates in rank order while they fit ``top_k`` and the token budget.

    A chunk too large for what is left is skipped, not a reason to stop: a smaller, lower-ranked chunk
    may still fit. Duplicates of a sent chunk (same text, or text wholly inside a sent chunk's, such as
    a section copied onto another page) are dropped: they cost tokens and add nothing.
    """
    sent: list[Candidate] = []
    dropped: list[tuple[Candidate, str]] = []
    seen_text: dict[str, str] = {}
    used = 0
    for candidate in candidates:
        key = " ".join(candidate.text.split())
        inside = next((chunk_id for text, chunk_id in seen_text.items() if key and key in text), None)
        if len(sent) >= top_k:
            dropped.append((candidate, f"below top_k={top_k}"))
        elif inside is not None:
            dropped.append((candidate, f"duplicate of {inside}"))
        elif used + candidate.tokens > token_budget:
            dropped.append((candidate, f"over token budget ({used}+{candidate.tokens} > {token_budget})"))
        else:
            sent.append(candidate)
            seen_text[key] = candidate.chunk_id
            used += candidate.tokens
    return Packed(sent, dropped)


class Selector:
    """Ranks chunks of one store for a question. Reads only; embeddings are written to the cache."""

    def __init__(
        self,
        conn: duckdb.DuckDBPyConnection,
        *,
        embedder: Embedder | None = None,
        embedding_model: str | None = None,
        pool: int = DEFAULT_POOL,
        ensure_fts: Callable[[], None] | None = None,
        embedding_unavailable: str | None = None,
        bm25_params: Bm25Params = Bm25Params(),
        prefixes: EmbeddingPrefixes | None = None,
        rm3: Rm3Params | None = None,
    ) -> None:
        self.rm3 = rm3
        self.conn = conn
        self.embedder = embedder
        self.embedding_model = embedding_model
        # The model's task prefixes unless given (jobs/prefixes.py); its vectors are cached under its
        # vector space, the model with its document prefix.
        self.prefixes = prefixes if prefixes is not None else prefixes_for(embedding_model or "")
        self.vector_space = vector_space(embedding_model, self.prefixes) if embedding_model else None
        self.pool = pool
        self.bm25_params = bm25_params
        self._ensure_fts = ensure_fts
        # Why embeddings cannot be used, when the caller already knows (e.g. the model is not pulled).
        self._embedding_error: str | None = embedding_unavailable
        self._embedded_scopes: set[tuple[str, ...] | None] = set()
        self._vector_tables: set[int] = set()  # vector lengths whose typed table is known to exist

    # -- public ---------------------------------------------------------------------------------

    def select(self, question: str, method: str, *, urls: Sequence[str] | None = None) -> Selection:
        if method not in METHODS:
            raise WebqaError(f"unknown selection method {method!r}; use one of {', '.join(METHODS)}")
        scope = sorted(set(urls)) if urls else None
        notice = None
        used = method
        if method in ("embedding", "hybrid") and not self._embeddings_usable(scope):
            used = "bm25"
            notice = f"{method} selection unavailable ({self._embedding_error}); using bm25"
        if used == "keyword":
            ranked = self.keyword(question, scope)
        elif used == "bm25":
            ranked = self.bm25(question, scope)
        else:
            try:
                ranked = self.embedding(question, scope) if used == "embedding" else self.hybrid(question, scope)
            except LLMError as exc:
                # Embedding the question itself failed (Ollama went away, the model was removed):
                # this question, and the next ones, are still answerable from bm25.
                self._embedding_error = str(exc)
                log.warning("Embedding selection unavailable: %s", exc)
                used = "bm25"
                notice = f"{method} selection unavailable ({exc}); using bm25"
                ranked = self.bm25(question, scope)
        return Selection(question, method, used, _ranked(ranked), notice)

    def keyword(self, question: str, scope: list[str] | None) -> list[Candidate]:
        keywords = question_keywords(question)
        if not keywords:
            return []
        rows = self.conn.execute(
            f"""
            WITH scored AS (
                SELECT chunk_id, url, ordinal, heading_path, text, token_estimate,
                       list_filter($kw, k -> contains(lower(heading_path || ' ' || text), k)) AS matched,
                       len(list_filter($kw, k -> contains(lower(heading_path), k))) > 0 AS in_heading
                FROM chunks WHERE {_SCOPE}
            )
            SELECT chunk_id, url, heading_path, text, token_estimate, matched,
                   len(matched) + CASE WHEN in_heading THEN {HEADING_BOOST} ELSE 0 END AS score, ordinal
            FROM scored WHERE len(matched) > 0
            ORDER BY score DESC, url, ordinal
            LIMIT $pool
            """,
            {"kw": keywords, "urls": scope, "pool": self.pool},
        ).fetchall()
        return [
            Candidate(cid, url, heading, text, tokens, score=float(score), keyword_score=float(score),
                      matched=tuple(matched), ordinal=ordinal)
            for cid, url, heading, text, tokens, matched, score, ordinal in rows
        ]

    def bm25(self, question: str, scope: list[str] | None) -> list[Candidate]:
        first = self._bm25(question, scope)
        rm3 = self.rm3
        if rm3 is None or rm3.weight <= 0 or not first:
            return first
        terms = self.expansion_terms(question, first[: rm3.feedback_docs], rm3.terms)
        if not terms:
            return first
        expanded = self._bm25(question + " " + " ".join(terms), scope)
        return fuse([(1.0 - rm3.weight, first), (rm3.weight, expanded)], self.pool, "bm25_score")

    def expansion_terms(self, question: str, top: Sequence[Candidate], count: int) -> list[str]:
        """RM3's feedback terms: words of the top documents weighted by the document's share of the
        first-pass score × the word's share of the document × its idf; question words left out."""
        asked = {stem(w) for w in content_words(question)}
        total = sum(c.score for c in top) or 1.0
        weights: dict[str, float] = {}
        for candidate in top:
            words = content_words(candidate.heading + " " + candidate.text)
            words = [w for w in words if w.isalpha() and stem(w) not in asked]
            for word in words:
                weights[word] = weights.get(word, 0.0) + (candidate.score / total) / len(words)
        if not weights:
            return []
        # Document frequencies from the postings themselves (the index keeps no statistics, see BM25_SQL).
        idf = dict(self.conn.execute(
            """WITH words AS (SELECT w, stem(w, 'porter') AS term FROM (SELECT unnest($words) AS w)),
                    df AS (SELECT term, count(*) AS df FROM bm25_postings
                           WHERE term IN (SELECT term FROM words) GROUP BY term)
               SELECT w, log((st.num_docs - df.df + 0.5) / (df.df + 0.5) + 1)
               FROM words JOIN df USING (term), (SELECT count(*) AS num_docs FROM selection_docs) st""",
            {"words": sorted(weights)}).fetchall())
        ranked = sorted(((weights[w] * idf[w], w) for w in weights if w in idf), key=lambda x: (-x[0], x[1]))
        return [w for _score, w in ranked[:count]]

    def _bm25(self, question: str, scope: list[str] | None) -> list[Candidate]:
        if self._ensure_fts is not None:
            self._ensure_fts()
        if not _fts_terms(question):
            return []
        try:
            params = self.bm25_params
            rows = self.conn.execute(BM25_SQL, {"q": question, "urls": scope, "pool": self.pool, "k1": params.k1,
                                                "b": params.b, "heading_weight": params.heading_weight}).fetchall()
        except duckdb.CatalogException:
            # No index tables: a database opened read-only before any webqa of this version wrote to it
            # (Store.fts_is_stale reports it, so `webqa crawl` builds them).
            raise WebqaError(_NO_INDEX) from None
        terms = _stems(question)
        return [
            Candidate(cid, url, heading, text, tokens, score=float(score), bm25_score=float(score),
                      matched=_matched_stems(terms, heading + " " + text), ordinal=ordinal)
            for cid, url, heading, text, tokens, score, ordinal in rows
        ]

    def embedding(self, question: str, scope: list[str] | None) -> list[Candidate]:
        assert self.embedder is not None and self.embedding_model
        vector = _unit_length(self.embedder.embed([self.prefixes.query + question], model=self.embedding_model)[0])
        dims = len(vector)
        # Bound as JSON text and cast in SQL: DuckDB's Python client converts a list of floats value by value
        # (with an import look-up each), far slower than one string (BENCHMARKS.md, "Figures behind code
        # comments").
        params = {"q": json.dumps(vector), "model": self.vector_space, "pool": self.pool,
                  "windows": self.pool * WINDOWS_PER_DOC, **({"urls": scope} if scope else {})}
        scoped = _EMBEDDING_SCOPE if scope else ""
        table = unit_vectors_table(dims)
        try:
            if dims not in self._vector_tables:
                ensure_unit_vectors(self.conn, dims)
                self._vector_tables.add(dims)
            rows = self.conn.execute(EMBEDDING_SQL.format(table=table, dims=dims, scope=scoped), params).fetchall()
            windows_seen = rows[0][-1] if rows else 0
            if len(rows) < self.pool and windows_seen == params["windows"]:
                # Fewer chunks than the pool among the best windows (chunks of many windows): rank every
                # chunk by its best window instead. Same ranking, slower.
                del params["windows"]
                rows = self.conn.execute(EMBEDDING_ALL_SQL.format(table=table, dims=dims, scope=scoped),
                                         params).fetchall()
        except duckdb.CatalogException:
            # No index tables (see bm25).
            raise WebqaError(_NO_INDEX) from None
        terms = _stems(question)
        return [
            Candidate(cid, url, heading, text, tokens, score=float(score), embedding_score=float(score),
                      matched=_matched_stems(terms, heading + " " + text), ordinal=ordinal)
            for cid, url, heading, text, tokens, score, ordinal, _ in rows
        ]

    def hybrid(self, question: str, scope: list[str] | None) -> list[Candidate]:
        bm25, embedding = self.bm25(question, scope), self.embedding(question, scope)
        fused: dict[str, dict[str, Any]] = {}
        for weight, ranked in ((HYBRID_BM25_WEIGHT, bm25), (1.0 - HYBRID_BM25_WEIGHT, embedding)):
            for candidate, scaled in zip(ranked, _min_max([c.score for c in ranked]), strict=True):
                entry = fused.setdefault(candidate.chunk_id, {"candidate": candidate, "score": 0.0})
                entry["score"] += weight * scaled
                merged: Candidate = entry["candidate"]
                entry["candidate"] = replace(
                    merged,
                    bm25_score=merged.bm25_score if merged.bm25_score is not None else candidate.bm25_score,
                    embedding_score=merged.embedding_score if merged.embedding_score is not None else candidate.embedding_score,
                )
        order = sorted(fused.values(), key=lambda e: (-round(e["score"], 8), e["candidate"].url, e["candidate"].ordinal))
        return [replace(e["candidate"], score=round(e["score"], 8)) for e in order[: self.pool]]

    # -- embeddings cache -------------------------------------------------------------------------

    def _embeddings_usable(self, scope: list[str] | None) -> bool:
        if self.embedder is None or not self.embedding_model:
            self._embedding_error = self._embedding_error or "no embedding model configured"
            return False
        if self._embedding_error:
            return False
        key = tuple(scope) if scope else None
        if key in self._embedded_scopes or None in self._embedded_scopes:
            return True
        try:
            self.embed_missing(scope)
        except LLMError as exc:
            self._embedding_error = str(exc)
            log.warning("Embedding selection unavailable: %s", exc)
            return False
        self._embedded_scopes.add(key)
        return True

    def embed_missing(self, scope: list[str] | None = None, batch: int = 256) -> int:
        """Embed every window of the chunks in scope that has no vector for the model yet; returns how many."""
        assert self.embedder is not None and self.embedding_model
        mapped = self._add_windows(scope)
        # Windows mapped just now may already have vectors (a one-window chunk embedded before windows
        # existed, text repeated on another page): selection must see those too.
        add_unit_vectors(self.conn, None, mapped)
        rows = self.conn.execute(
            f"""
            SELECT w.window_key, arg_min(w.part, c.embed_key), arg_min(c.heading_path, c.embed_key),
                   arg_min(c.text, c.embed_key)
            FROM chunk_windows w JOIN chunks c USING (embed_key)
            WHERE w.scheme = $scheme AND ($urls IS NULL OR list_contains($urls, c.url))
              AND w.window_key NOT IN (SELECT embed_key FROM embeddings WHERE model = $model)
            GROUP BY w.window_key ORDER BY w.window_key
            """,
            {"urls": scope, "model": self.vector_space, "scheme": EMBED_SCHEME},
        ).fetchall()
        for start in range(0, len(rows), batch):
            part = rows[start : start + batch]
            texts = [self.prefixes.document + embed_windows(heading, text)[index] for _key, index, heading, text in part]
            vectors = self.embedder.embed(texts, model=self.embedding_model)
            self._insert_vectors([key for key, _i, _h, _t in part], vectors)
        if rows:
            log.info("Embedded %d chunk windows with %s", len(rows), self.embedding_model)
        return len(rows)

    def _add_windows(self, scope: list[str] | None) -> list[str]:
        """Record the windows of chunks in scope that have none under the current scheme; their keys."""
        chunks = self.conn.execute(
            f"""
            SELECT embed_key, any_value(heading_path), any_value(text) FROM chunks
            WHERE {_SCOPE}
              AND embed_key NOT IN (SELECT embed_key FROM chunk_windows WHERE scheme = $scheme)
            GROUP BY embed_key ORDER BY embed_key
            """,
            {"urls": scope, "scheme": EMBED_SCHEME},
        ).fetchall()
        rows = [
            (key, EMBED_SCHEME, index, text_key(window))
            for key, heading, text in chunks
            for index, window in enumerate(embed_windows(heading, text))
        ]
        if rows:
            insert_rows(self.conn, "INSERT OR IGNORE INTO chunk_windows VALUES", rows)
        return sorted({key for _chunk, _scheme, _part, key in rows})

    def _insert_vectors(self, keys: list[str], vectors: list[list[float]]) -> None:
        # Binding thousands of float lists as parameters takes minutes; a bulk read of a temporary
        # NDJSON file takes well under a second.
        fd, path = tempfile.mkstemp(suffix=".ndjson", prefix="webqa-embed-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                for key, vector in zip(keys, vectors, strict=True):
                    out.write(json.dumps({"k": key, "v": vector}) + "\n")
            self.conn.execute(
                """
                INSERT OR REPLACE INTO embeddings
                SELECT $model, k, len(v), v FROM read_json($path, format = 'newline_delimited',
                                                    columns = {'k': 'VARCHAR', 'v': 'FLOAT[]'})
                """,
                {"model": self.vector_space, "path": path},
            )
        finally:
            os.unlink(path)
        add_unit_vectors(self.conn, self.vector_space, keys, {len(v) for v in vectors})


_NO_INDEX = "the full-text index is missing; run `webqa crawl` (or `webqa run`) once to build it"
_SCOPE = "($urls IS NULL OR list_contains($urls, url))"

# How BM25_SQL computes the formula above (tests/test_select.py checks the scores against the fts
# extension's match_bm25 with its parameters). It reads bm25_postings (term, doc, counts in heading and
# text, doc length; pipelines/schema.py), so the per-question work is: the question's terms' rows, their
# document frequencies counted from those same rows, the document count and average length from
# selection_docs (nothing is kept as a running total, so nothing can drift), a sum per doc, and only then
# the url and ordinal of the best-scoring docs for the tie-break and the text of the top ``pool``. The question
# is tokenised by the same SQL as the chunks (pipelines/schema.py tokenize). The per-doc sum is taken in
# DECIMAL(38, 18), exact and so independent of the order DuckDB's parallel aggregate adds the terms in:
# summed as DOUBLE, scores differed run to run in the last bit, which reordered tied chunks (copies of a
# section on several pages) between runs. Against match_bm25 scores differ by at most ~1e-15.
BM25_SQL = f"""
WITH words AS (SELECT unnest({tokenize("$q")}) AS w),
-- Stop words leave the question before stemming, as they left the text when it was indexed: match_bm25
-- stems them too, and "are" became "ar", matching every AR and ARFLAGS of the sysconfig page.
tokens AS (SELECT DISTINCT w AS term FROM ({index_terms("SELECT w FROM words")})),
hits AS MATERIALIZED (
    SELECT p.term, p.doc, p.tf_heading, p.tf_text, p.len FROM bm25_postings p WHERE p.term IN (SELECT term FROM tokens)
),
stats AS (SELECT count(*) AS num_docs, sum(len) / count(len) AS avgdl FROM selection_docs),
qterms AS (
    SELECT term, log(((st.num_docs - df) + 0.5) / (df + 0.5) + 1) AS idf
    FROM (SELECT term, count(*) AS df FROM hits GROUP BY term), stats st
),
scored AS MATERIALIZED (
    SELECT h.doc,
           sum((q.idf * ((h.tf_heading * $heading_weight + h.tf_text) * ($k1 + 1))
                / ((h.tf_heading * $heading_weight + h.tf_text) + $k1 * ((1 - $b) + $b * (h.len / st.avgdl))))
               ::DECIMAL(38, 18)) AS score
    FROM hits h JOIN qterms q USING (term), stats st
    WHERE $urls IS NULL OR h.doc IN (SELECT doc FROM selection_docs WHERE list_contains($urls, url))
    GROUP BY h.doc
),
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

# Exact cosine over the unit-length copy of the cached vectors (pipelines/schema.py unit_vectors_<dims>),
# one row per (indexed chunk, window), as a dot product with the unit-length question: no per-row cast, no
# join before the top ``pool`` is known, ties by the rows' url, ordinal and part. A chunk scores as its
# best window (pipelines.store.embed_windows). The chunks ranked by their best window are the first
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


def fuse(lists: Sequence[tuple[float, Sequence[Candidate]]], pool: int, keep: str) -> list[Candidate]:
    """Weighted min-max fusion of ranked lists of the same kind (``keep``: the score field to carry)."""
    fused: dict[str, list[Any]] = {}
    for weight, ranked in lists:
        for candidate, scaled in zip(ranked, _min_max([c.score for c in ranked]), strict=True):
            entry = fused.setdefault(candidate.chunk_id, [candidate, 0.0])
            entry[1] += weight * scaled
    order = sorted(fused.values(), key=lambda e: (-round(e[1], 8), e[0].url, e[0].ordinal))
    return [replace(c, score=round(score, 8), **{keep: round(score, 8)}) for c, score in order[:pool]]


def _unit_length(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else list(vector)


def _ranked(candidates: list[Candidate]) -> list[Candidate]:
    return [replace(c, rank=i) for i, c in enumerate(candidates, start=1)]


def _min_max(scores: list[float]) -> list[float]:
    """Scores scaled to [0, 1] within their list (best 1, worst 0); a single or all-equal list scores 1."""
    if not scores:
        return []
    high, low = max(scores), min(scores)
    if high == low:
        return [1.0] * len(scores)
    return [(s - low) / (high - low) for s in scores]


def _fts_terms(question: str) -> list[str]:
    # Only to tell a question without any word from one BM25 can look up; BM25_SQL tokenises it itself.
    return [w for w in "".join(ch if ch.isalnum() or ch in "-_." else " " for ch in question.lower()).split() if w]


def _stems(question: str) -> list[str]:
    return list(dict.fromkeys(stem(w) for w in question_keywords(question)))


def _matched_stems(stems: list[str], text: str) -> tuple[str, ...]:
    lowered = text.lower()
    return tuple(s for s in stems if s in lowered)
