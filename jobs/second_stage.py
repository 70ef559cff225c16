"""The second stage: score the pool's best candidates by their sentence windows, reorder, cut passages.

The first stage (jobs/select.py) ranks whole chunks; the answer is usually among its top 40 but often not
among the few whole chunks that fit the token budget (BENCHMARKS.md, "Answer in the prompt (selection)"). This stage
takes the top ``candidates`` and, for each, scores every sentence window (jobs/passages.py) against the
question with an embedding model: the job's own, or a second one served by the same Ollama
(``selection.second_stage.embedding_model``). Then:

- **order**: a candidate's stage score is its best window's cosine; with ``weight`` above 0 the top
  candidates are reordered by ``(1 - weight) × first-stage score + weight × stage score``, each min-max
  scaled within them (ties by URL and position, as everywhere). Below the top ``candidates`` the order
  is kept.
- **passages**: with ``passage_words`` set, each scored candidate is sent as its passage (the best window
  grown within that many words) instead of the whole chunk, so more distinct candidates fit the budget.

Window vectors are cached in the database like chunk windows (each text embedded once per model, ever).
Without an embedding (bm25 selection, no model) windows are scored by the question's stems they hold.
Every embedding call is the client's bounded call (timeout, retries with a stop and a wait); when it
fails, this question and the next keep the first stage's order (and lexical passages), the failure is
said once and recorded per answer (``RerankTrail`` status ``failed``/``skipped``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import duckdb

from jobs.errors import LLMError
from jobs.extractive import stem
from jobs.passages import best_passage, lexical_scores, units, window_text, windows
from jobs.prefixes import EmbeddingPrefixes, prefixes_for, vector_space
from jobs.rerank import RerankTrail
from jobs.select import Candidate, Embedder, Selector, _min_max, question_keywords
from pipelines import defaults, search_index, vectors
from pipelines.vectors import embed_text, text_key

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class StageSettings:
    candidates: int = defaults.SECOND_STAGE_CANDIDATES
    # The model that scores windows; None: the selection's own embedding model.
    embedding_model: str | None = None
    # Share of the stage score in the order of the top candidates; 0 keeps the first stage's order.
    weight: float = defaults.SECOND_STAGE_WEIGHT
    # Send each scored candidate as a passage of at most this many words; None: whole chunks.
    passage_words: int | None = None
    # A window's score is its cosine plus this share of its idf-weighted question stems (exact terms the
    # embedding may miss); under bm25 the stems alone.
    lexical_weight: float = 0.0
    # The best this many (after any reorder) are sent whole all the same: a passage can miss the answer,
    # and below the first few the chunk would not have fit the budget whole anyway.
    whole_top: int = 0
    # Score the union of each first-stage list's top ``candidates`` (bm25's and the embedding's, by their own
    # scores) instead of the fused order's top ``candidates``: a paraphrase the embedding ranks well can sit
    # far down the fused order.
    union: bool = False
    # Score only questions whose best keyword (bm25) match holds less than this share of the most the question's
    # words can score: an exact-term question keeps the first stage's order, which the window cosines would
    # move its exact hits down from (BENCHMARKS.md, round 9); None: every question.
    keyword_gate: float | None = None


def stage_pool(candidates: Sequence[Candidate], n: int, union: bool) -> tuple[list[Candidate], list[Candidate]]:
    """The candidates the stage scores and the rest, both in the given order: the top ``n``, or with ``union``
    those in the top ``n`` of either list by its own score (bm25's, the embedding's; ties by URL and
    position); candidates without either score count by their place in the order."""
    if not union:
        return list(candidates[:n]), list(candidates[n:])
    chosen: set[int] = set()
    for field in ("bm25_score", "embedding_score"):
        scored = [(i, c) for i, c in enumerate(candidates) if getattr(c, field) is not None]
        scored.sort(key=lambda e: (-getattr(e[1], field), e[1].url, e[1].ordinal))
        chosen.update(i for i, _c in scored[:n])
    unscored = [i for i, c in enumerate(candidates) if c.bm25_score is None and c.embedding_score is None]
    chosen.update(unscored[: max(0, n - len(chosen))])
    top = [c for i, c in enumerate(candidates) if i in chosen]
    return top, [c for i, c in enumerate(candidates) if i not in chosen]


def fuse_order(candidates: Sequence[Candidate], weight: float) -> list[Candidate]:
    """The candidates ordered by the weighted sum of their min-max scaled first-stage score and stage
    score; ties by URL, then position in the page. ``weight`` 0 keeps the order as it is."""
    if weight <= 0 or len(candidates) < 2:
        return list(candidates)
    first = _min_max([c.score for c in candidates])
    second = _min_max([c.stage_score if c.stage_score is not None else 0.0 for c in candidates])
    keyed = [((1.0 - weight) * a + weight * b, c) for a, b, c in zip(first, second, candidates, strict=True)]
    keyed.sort(key=lambda e: (-round(e[0], 8), e[1].url, e[1].ordinal))
    return [c for _score, c in keyed]


def as_passage(candidate: Candidate, scores: Sequence[float], words: int | None) -> Candidate:
    """The candidate with its stage score and, when ``words`` is set and the chunk is longer, its text cut
    to its passage (``span`` says where it lies in the chunk)."""
    spans = units(candidate.text)
    if not spans:
        return replace(candidate, stage_score=None)
    wins = windows(spans)
    passage = best_passage(candidate.text, spans, wins, scores, words or 10**9)
    scored = replace(candidate, stage_score=round(passage.score, 6))
    if words is None or passage.whole(candidate.text):
        return scored
    return replace(scored, text=candidate.text[passage.start : passage.end],
                   span=(passage.start, passage.end, len(candidate.text)))


class SecondStage:
    """The second stage of one run or ask: the selector's store and embedder, and the settings."""

    def __init__(self, selector: Selector, settings: StageSettings, *, prefixes: EmbeddingPrefixes | None = None,
                 embedder: Embedder | None = None) -> None:
        self.selector = selector
        self.settings = settings
        # The client that embeds the windows: the selector's (the job's Ollama) unless given.
        self.embedder = embedder if embedder is not None else selector.embedder
        own = settings.embedding_model is None
        self.model = selector.embedding_model if own else settings.embedding_model
        self.prefixes = selector.prefixes if own else (prefixes or prefixes_for(self.model or ""))
        self.space = vector_space(self.model, self.prefixes) if self.model else None
        self.error: str | None = None  # why embeddings cannot be used (said once, then kept)
        self.notice: str | None = None  # the one notice of a failure, for the run's summary

    def apply(self, question: str, candidates: Sequence[Candidate], *, embeddings: bool = True
              ) -> tuple[list[Candidate], RerankTrail]:
        """The candidates with the top ones scored (reordered when ``weight`` > 0, cut to passages when
        ``passage_words``), ranks renumbered, and the trail. ``embeddings`` False: the selection fell
        back to bm25, so only a second model (if any) may embed; otherwise windows are scored lexically."""
        s = self.settings
        top, rest = stage_pool(candidates, s.candidates, s.union)
        before = [c.chunk_id for c in top]
        trail = RerankTrail("unchanged", before, before, model=self.model)
        started = time.monotonic()
        gate = s.keyword_gate
        share = self._keyword_share(question, candidates) if gate is not None and top else None
        scores = None
        usable = self.model and self.embedder is not None and (embeddings or s.embedding_model)
        if not top:
            trail.status, trail.error = "skipped", "no candidates"
        elif share is not None and gate is not None and share >= gate:
            # Passages (if asked) are still cut, by the question's words, as when no embedding is usable.
            trail.status, trail.error = "skipped", (f"the best keyword match holds {share:.3f} of the question "
                                                    f"(keyword_gate {gate:g}): first-stage order kept")
        elif not usable:
            trail.status, trail.error = "skipped", "no embedding for this selection: windows scored by the question's words"
        elif self.error:
            trail.status, trail.error = "failed", self.error
        else:
            try:
                scores = self._embedding_scores(question, top)
            except LLMError as exc:
                self.error = f"second stage unavailable ({exc}); first-stage order kept"
                self.notice = self.notice or self.error
                log.info("%s", self.error)  # the notice is said by the run (once), not here
                trail.status, trail.error = "failed", self.error
        stems, idf = self._stem_weights(question)
        lexical = [lexical_scores(stems, c.heading, _window_texts(c), idf) for c in top]
        if scores is None:
            scores, weight = lexical, 0.0
        else:
            weight = s.weight
            if s.lexical_weight:
                scores = [[e + s.lexical_weight * x for e, x in zip(em, lx, strict=True)]
                          for em, lx in zip(scores, lexical, strict=True)]
        whole = {c.chunk_id: c for c in top}
        scored = [as_passage(c, sc, s.passage_words) for c, sc in zip(top, scores, strict=True)]
        ordered = fuse_order(scored, weight)
        ordered = [replace(c, text=whole[c.chunk_id].text, span=None) if i < s.whole_top else c
                   for i, c in enumerate(ordered)] + rest
        trail.after = [c.chunk_id for c in ordered[: len(top)]]
        if trail.status == "unchanged" and trail.after != before:
            trail.status = "reranked"
        trail.seconds = time.monotonic() - started
        return [replace(c, rank=i) for i, c in enumerate(ordered, start=1)], trail

    def _keyword_share(self, question: str, candidates: Sequence[Candidate]) -> float | None:
        """The best bm25 score among the candidates over the question's ceiling (search_index.question_ceiling);
        None without a keyword index. The scores are bm25's own: RM3 expansion, which fuses them, is not a job
        setting. Under embedding selection no candidate has one: 0, the stage runs."""
        best = max((c.bm25_score for c in candidates if c.bm25_score is not None), default=0.0)
        try:
            self.selector.load_keywords()
            ceiling = search_index.question_ceiling(self.selector.conn, question, self.selector.bm25_params.k1)
        except duckdb.Error:
            return None
        return best / ceiling if ceiling > 0 else 0.0

    def _stem_weights(self, question: str) -> tuple[list[str], list[float] | None]:
        """The question's stems and their idf in the store (rare terms weigh more); None: equal weights."""
        words = question_keywords(question)
        stems = list(dict.fromkeys(stem(w) for w in words))
        try:
            self.selector.load_keywords()
            idf = search_index.idf(self.selector.conn, words)
        except duckdb.Error:
            return stems, None
        by_stem: dict[str, float] = {}
        for word in words:
            by_stem[stem(word)] = max(by_stem.get(stem(word), 0.0), idf.get(word, 0.0))
        return stems, [by_stem[s] for s in stems]

    def _embedding_scores(self, question: str, top: Sequence[Candidate]) -> list[list[float]]:
        assert self.model and self.space and self.embedder is not None
        embedder = self.embedder
        per_candidate = [[embed_text(c.heading, w) for w in _window_texts(c)] for c in top]
        texts = sorted({t for group in per_candidate for t in group})
        keys = {t: text_key(t) for t in texts}
        cached = vectors.cached_vectors(self.selector.conn, self.space, list(keys.values()))
        missing = [t for t in texts if keys[t] not in cached]
        if missing:
            fresh = embedder.embed([self.prefixes.document + t for t in missing], model=self.model)
            vectors.insert_vectors(self.selector.conn, self.space, [keys[t] for t in missing], fresh, index=False)
            cached.update({keys[t]: v for t, v in zip(missing, fresh, strict=True)})
        query = _unit(embedder.embed([self.prefixes.query + question], model=self.model)[0])
        unit = {key: _unit(v) for key, v in cached.items()}
        return [[_dot(query, unit[keys[t]]) for t in group] for group in per_candidate]


def _window_texts(candidate: Candidate) -> list[str]:
    spans = units(candidate.text)
    return [window_text(candidate.text, spans, w) for w in windows(spans)] if spans else []


def _unit(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else list(vector)


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


def selection_stages(selection: Any) -> dict[str, Any]:
    """The job's ``selection.second_stage``, ``selection.passages`` and ``selection.rerank`` as the answerer's
    settings: ``stage`` (the window scores, the new order, passages) and ``rerank`` (the chat model's listwise
    rerank); None: off."""
    from jobs.rerank import RerankSettings

    second, passages, rerank = selection.second_stage, selection.passages, selection.rerank
    words = passages.words if passages is not None else None
    stage = None
    if second is not None:
        stage = StageSettings(max(second.candidates, passages.candidates if passages is not None else 0),
                              second.embedding_model, second.weight, words, keyword_gate=second.keyword_gate)
    elif passages is not None:
        stage = StageSettings(passages.candidates, None, 0.0, words)
    chat = (RerankSettings(candidates=rerank.candidates, excerpt_chars=rerank.excerpt_chars, timeout_s=rerank.timeout)
            if rerank is not None else None)
    return {"stage": stage, "rerank": chat}


def job_stage(selector: Selector, job: Any) -> SecondStage | None:
    """The second stage a job's answers use, on ``selector`` (what `webqa eval` measures); None when off."""
    settings = selection_stages(job.selection)["stage"]
    return SecondStage(selector, settings) if settings is not None else None
