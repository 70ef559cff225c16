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
  not rank it). See ``HYBRID_BM25_WEIGHT`` for the measurement behind it. Every chunk of either list is
  kept: the pool is their union.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import duckdb

from jobs.embed_ahead import embedded_ahead
from jobs import first_stage
from jobs.errors import LLMError, WebqaError
from jobs.extractive import content_words, stem
from jobs.prefixes import EmbeddingPrefixes, prefixes_for, vector_space
from pipelines import defaults, search_index, search_scope, vector_codes, vectors
from pipelines.duckdb_connect import transaction
from pipelines.vectors import embed_windows

log = logging.getLogger(__name__)

METHODS = defaults.SELECTION_METHODS
EMBEDDING_METHODS = defaults.EMBEDDING_METHODS
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
# From this many embedded windows (every model), embedding selection scans binary codes and re-scores the
# nearest exactly (pipelines/vector_codes.py) instead of the exact scan: below it the exact scan costs less
# (the crossing measured: BENCHMARKS.md, "Selection latency at 1,000,000 chunks").
APPROXIMATE_MIN_WINDOWS = 200_000
# Hybrid packs the embedding list's top this many among the fused top as many (jobs/embedding_first.py): 0, off,
# unless the job asks, since it cost plain questions on some dev sets (BENCHMARKS.md, "Answer in the prompt (selection)").
EMBEDDING_FIRST = 0

# Okapi BM25 with the fts extension's formula (its match_bm25 macro; how BM25_SQL in
# pipelines/search_index.py computes it fast is told there), with two changes. Stop words are dropped from
# the question before stemming (match_bm25 keeps their stems). And a term in the heading path counts
# BM25_HEADING_WEIGHT times (BM25F-style field weighting). Section titles name what a section is about ("Where to patch", "Generators"), and the page
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
    page: int | None = None  # the page of a paged document (a PDF) it starts on: cited as url#page=N
    # Set by the second stage (jobs/second_stage.py): its score (the best window's) and, when the candidate
    # is sent as a passage, (start, end, length) of the passage in the chunk's text (``text`` is the passage).
    stage_score: float | None = None
    span: tuple[int, int, int] | None = None
    # Set when selection.embedding_first moved it ahead of its fused rank: why ("embedding #3").
    first_by: str | None = None


@dataclass
class Selection:
    question: str
    method: str  # as asked
    method_used: str  # after fallbacks
    candidates: list[Candidate]
    notice: str | None = None
    # Which first stage ranked the embedding leg, and why (jobs/first_stage.py); None without an embedding leg.
    first_stage: str | None = None

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
        approximate: bool | None = None,
        embedding_first: int = EMBEDDING_FIRST,
    ) -> None:
        self.rm3 = rm3
        self.embedding_first = embedding_first
        # The codes' first stage: None by corpus size (APPROXIMATE_MIN_WINDOWS, the default: no question lost on
        # any dev set with it forced on), True always, False never (`selection.approximate`).
        self.approximate = approximate
        self._codes = vector_codes.CodeCache()
        self._first_stage: str | None = None  # the last embedding leg's (select() runs under the caller's lock)
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
        # Scopes whose windows all have vectors, by the index's generation: pages written since have new windows.
        self._embedded_scopes: set[tuple[int, tuple[str, ...] | None]] = set()
        self._vector_tables: set[int] = set()  # vector lengths whose typed table is known to exist
        self._paged: bool | None = None  # whether any chunk is from a paged document (a PDF)
        self._scopes = search_scope.Scopes(conn)  # the last scopes' docs, each resolved once (docs_of)

    # -- public ---------------------------------------------------------------------------------

    def load_keywords(self) -> None:
        """Make the keyword index's SQL usable (its stemmer, from the fts extension), for bm25 and for callers
        that read the index themselves (the second stage's idf and keyword_gate) under any method."""
        if self._ensure_fts is not None:
            self._ensure_fts()

    def select(self, question: str, method: str, *, urls: Sequence[str] | None = None) -> Selection:
        if method not in METHODS:
            raise WebqaError(f"unknown selection method {method!r}; use one of {', '.join(METHODS)}")
        scope = self._sorted(urls)
        notice = self._first_stage = None
        used = method
        if method in EMBEDDING_METHODS and not self._embeddings_usable(scope):
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
        return Selection(question, method, used, self._with_pages(_ranked(ranked)), notice,
                         first_stage=self._first_stage if used in EMBEDDING_METHODS else None)

    def _sorted(self, urls: Sequence[str] | None) -> list[str] | None:
        """The distinct urls sorted, the same list for the same urls (search_scope.Scopes.sorted)."""
        return self._scopes.sorted(urls) if urls else None

    def docs_of(self, scope: list[str] | None) -> search_scope.DocScope | None:
        """The docs of ``scope`` (sorted, distinct urls), resolved once while the index's docs stay as they are:
        every question of a run has the same scope. None for no scope."""
        return None if scope is None else self._scopes.docs(scope)

    def _covers_all(self, scope: list[str] | None) -> bool:
        """Whether the scope holds every indexed doc (its windows are then looked for without a filter)."""
        try:
            docs = self.docs_of(scope)
        except duckdb.CatalogException:  # no index tables yet: the bm25 leg says so
            return False
        return docs is not None and docs.whole

    def _with_pages(self, candidates: list[Candidate]) -> list[Candidate]:
        """The candidates with the page of those from PDFs, which their citations link to. A database without
        paged chunks (asked once) costs no query per question."""
        if self._paged is None:
            self._paged = search_index.has_pages(self.conn)
        if not self._paged:
            return candidates
        pages = search_index.chunk_pages(self.conn, [c.chunk_id for c in candidates])
        return [replace(c, page=pages[c.chunk_id]) if c.chunk_id in pages else c for c in candidates]

    def keyword(self, question: str, scope: list[str] | None) -> list[Candidate]:
        keywords = question_keywords(question)
        if not keywords:
            return []
        rows = search_index.keyword_rank(self.conn, keywords, scope, pool=self.pool, heading_boost=HEADING_BOOST)
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
        idf = search_index.idf(self.conn, sorted(weights))
        ranked = sorted(((weights[w] * idf[w], w) for w in weights if w in idf), key=lambda x: (-x[0], x[1]))
        return [w for _score, w in ranked[:count]]

    def _bm25(self, question: str, scope: list[str] | None) -> list[Candidate]:
        self.load_keywords()
        if not _fts_terms(question):
            return []
        try:
            params = self.bm25_params
            rows = search_index.bm25_rank(self.conn, question, self.docs_of(scope), pool=self.pool, k1=params.k1,
                                          b=params.b, heading_weight=params.heading_weight)
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
        try:
            if dims not in self._vector_tables:
                vectors.ensure_unit_vectors(self.conn, dims)
                self._vector_tables.add(dims)
            rows = self._approximate_rank(vector, scope)
            if rows is None:
                rows = vectors.rank(self.conn, vector, self.vector_space, self.docs_of(scope), pool=self.pool)
        except duckdb.CatalogException:
            # No index tables (see bm25).
            raise WebqaError(_NO_INDEX) from None
        terms = _stems(question)
        return [
            Candidate(cid, url, heading, text, tokens, score=float(score), embedding_score=float(score),
                      matched=_matched_stems(terms, heading + " " + text), ordinal=ordinal)
            for cid, url, heading, text, tokens, score, ordinal, _ in rows
        ]

    def _approximate_rank(self, vector: list[float], scope: list[str] | None) -> list[tuple[Any, ...]] | None:
        """The codes' ranking, inside the scope's docs, when it applies (enough windows, codes present), else None;
        either way ``_first_stage`` says which stage ranks and why."""
        dims = len(vector)
        if self.approximate is False:
            self._first_stage = first_stage.decided(False, None, APPROXIMATE_MIN_WINDOWS, codes=False)
            return None
        windows = self._codes.rows(self.conn, dims)
        count = windows if windows is not None else self._vector_count(dims)
        if windows is None and (self.approximate or count >= APPROXIMATE_MIN_WINDOWS):
            windows = self._encode(dims)  # a database indexed before the codes existed
            if windows is None:
                self._first_stage = first_stage.decided(self.approximate, count, APPROXIMATE_MIN_WINDOWS,
                                                        codes=False, read_only=True)
                return None
        codes = windows is not None and (self.approximate or windows >= APPROXIMATE_MIN_WINDOWS)
        self._first_stage = first_stage.decided(self.approximate, windows if windows is not None else count,
                                                APPROXIMATE_MIN_WINDOWS, codes=codes)
        if not codes:
            return None
        docs = self.docs_of(scope)
        return vector_codes.rank(self.conn, self._codes, vector, self.vector_space, pool=self.pool,
                                 docs=None if docs is None or docs.whole else docs.docs)

    def _vector_count(self, dims: int) -> int:
        return int(self.conn.execute(f"SELECT count(*) FROM {vectors.unit_vectors_table(dims)}").fetchone()[0])  # type: ignore[index]

    def _encode(self, dims: int) -> int | None:
        try:
            log.info("Encoding the %d-dimension vectors as binary codes (once) ...", dims)
            with transaction(self.conn):  # interrupted halfway, a partial table would hide windows for good
                vector_codes.rebuild(self.conn, dims)
        except duckdb.Error as exc:  # a read-only database: the exact scan
            log.info("Binary codes unavailable (%s); scanning exactly", exc)
            return None
        return self._codes.rows(self.conn, dims)

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
        # The whole union is kept (up to twice the pool): a chunk near the end of one list scores low in the
        # fusion, yet the second stage can lift it (BENCHMARKS.md, "Answer in the prompt (selection)"); the fused order of
        # the rest is unchanged by what follows it.
        from jobs.embedding_first import embedding_first  # it builds on Candidate, defined here

        return embedding_first([replace(e["candidate"], score=round(e["score"], 8)) for e in order], self.embedding_first)

    # -- embeddings cache -------------------------------------------------------------------------

    def _embeddings_usable(self, scope: list[str] | None) -> bool:
        if self.embedder is None or not self.embedding_model:
            self._embedding_error = self._embedding_error or "no embedding model configured"
            return False
        if self._embedding_error:
            return False
        at = search_scope.generation()
        key = (at, tuple(scope) if scope else None)
        if key in self._embedded_scopes or (at, None) in self._embedded_scopes:
            return True
        try:
            self.embed_missing(None if self._covers_all(scope) else scope)
        except LLMError as exc:
            self._embedding_error = str(exc)
            log.warning("Embedding selection unavailable: %s", exc)
            return False
        self._embedded_scopes.add(key)
        return True

    def embed_ahead(self, scope: list[str] | None, *, progress: Callable[[int, int], None] | None = None) -> int:
        """Embed every window of the chunks in ``scope`` now (a run's ``embed: on_crawl``), so that questions
        over that scope embed only themselves; returns how many. A failure is raised and also kept, so the
        questions select with bm25 as when their own first embedding failed, without waiting on the hosts again."""
        try:
            done = self.embed_missing(scope, progress=progress)
        except LLMError as exc:
            self._embedding_error = str(exc)
            raise
        self._embedded_scopes.add((search_scope.generation(), tuple(sorted(set(scope))) if scope else None))
        return done

    def embed_missing(self, scope: list[str] | None = None, batch: int = 256, *,
                      progress: Callable[[int, int], None] | None = None) -> int:
        """Embed every window of the chunks in scope that has no vector for the model yet; returns how many.
        ``progress(done, total)`` is called before the first slice and after each (it may raise to stop)."""
        assert self.embedder is not None and self.embedding_model
        mapped = vectors.add_windows(self.conn, scope)
        # Windows mapped just now may already have vectors (a one-window chunk embedded before windows
        # existed, text repeated on another page): selection must see those too.
        vectors.add_unit_vectors(self.conn, None, mapped)
        rows = vectors.windows_without_vectors(self.conn, scope, self.vector_space)
        # Hosts wait while a slice is inserted: a slice per host keeps several hosts as busy as one.
        batch *= getattr(self.embedder, "width", 1)
        parts = [rows[start : start + batch] for start in range(0, len(rows), batch)]
        done = 0
        if progress is not None:
            progress(done, len(rows))
        # The next slice is embedded while this one is inserted (BENCHMARKS.md, "Embedding over several hosts").
        with closing(embedded_ahead(self._embed_part, parts)) as embedded_parts:  # closed: no slice left in flight
            for part, embedded in embedded_parts:
                vectors.insert_vectors(self.conn, self.vector_space, [key for key, _i, _h, _t in part], embedded)
                done += len(part)
                if progress is not None:
                    progress(done, len(rows))
        if rows:
            log.info("Embedded %d chunk windows with %s", len(rows), self.embedding_model)
        return len(rows)

    def _embed_part(self, part: list[tuple[str, int, str, str]]) -> list[list[float]]:
        assert self.embedder is not None
        texts = [self.prefixes.document + embed_windows(heading, text)[index] for _key, index, heading, text in part]
        return self.embedder.embed(texts, model=self.embedding_model)


_NO_INDEX = "the full-text index is missing; run `webqa crawl` (or `webqa run`) once to build it"

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
