"""The pool the second stage orders: hybrid keeps the union of its two lists, and the stage scores the union of
each list's top N (not the fused order's top N), so a chunk the embedding ranks well but the fusion ranks low
is scored and can be lifted into what packing takes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from jobs.runstore import RunStore
from jobs.second_stage import SecondStage, StageSettings, stage_pool
from jobs.select import Candidate, Selector
from tests.support.store import make_chunks, page_record

A, B = "http://a.test/guide", "http://b.test/notes"


def cand(name: str, *, bm25: float | None = None, emb: float | None = None, url: str = A, ordinal: int = 0,
         text: str | None = None) -> Candidate:
    return Candidate(name, url, name, text or f"text of {name}.", 10, score=0.0, bm25_score=bm25,
                     embedding_score=emb, ordinal=ordinal)


def ids(candidates: Sequence[Candidate]) -> list[str]:
    return [c.chunk_id for c in candidates]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RunStore]:
    with RunStore.open(tmp_path / "pool.duckdb") as opened:
        chunks = make_chunks(A, [(("Guide",), "Nothing here.")])
        opened.save_page(page_record(A, chunks), chunks, crawl_run_id=None)
        opened.rebuild_fts()
        yield opened


def test_hybrid_keeps_every_chunk_of_either_list(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    sel = Selector(store.conn, embedder=object(), embedding_model="m", pool=2)  # type: ignore[arg-type]
    bm25 = [Candidate("a", A, "a", "a", 1, score=3.0, bm25_score=3.0), Candidate("b", A, "b", "b", 1, score=1.0,
                                                                               bm25_score=1.0, ordinal=1)]
    cosine = [Candidate("c", B, "c", "c", 1, score=0.9, embedding_score=0.9),
              Candidate("d", B, "d", "d", 1, score=0.8, embedding_score=0.8, ordinal=1)]
    monkeypatch.setattr(sel, "bm25", lambda q, scope: bm25)
    monkeypatch.setattr(sel, "embedding", lambda q, scope: cosine)
    fused = sel.hybrid("q", None)
    # Four chunks from two lists of two: the fusion's last two (b and d, each last in its list) are kept.
    assert ids(fused) == ["a", "c", "b", "d"]
    assert [c.score for c in fused] == [0.5, 0.5, 0.0, 0.0]


def test_the_stage_pool_is_the_union_of_each_lists_top_n() -> None:
    # Fused order: a, b, c, d, e. bm25's own order: a, b, c; the embedding's: e, d, a.
    order = [cand("a", bm25=9, emb=0.5), cand("b", bm25=8), cand("c", bm25=7), cand("d", emb=0.6), cand("e", emb=0.7)]
    top, rest = stage_pool(order, 2, union=True)
    assert ids(top) == ["a", "b", "d", "e"] and ids(rest) == ["c"]  # in the fused order, c not in either top 2
    top, rest = stage_pool(order, 2, union=False)
    assert ids(top) == ["a", "b"] and ids(rest) == ["c", "d", "e"]


def test_the_stage_pool_without_list_scores_is_the_top_n() -> None:
    # keyword selection (no bm25 or embedding score): the first n in order.
    order = [cand(name) for name in "abcd"]
    top, rest = stage_pool(order, 3, union=True)
    assert ids(top) == ["a", "b", "c"] and ids(rest) == ["d"]


def test_the_stage_pool_breaks_score_ties_by_url_then_position() -> None:
    order = [cand("x", bm25=1.0, url=B), cand("y", bm25=1.0, url=A, ordinal=2), cand("z", bm25=1.0, url=A, ordinal=1)]
    top, _rest = stage_pool(order, 2, union=True)
    assert ids(top) == ["y", "z"]  # a.test before b.test; kept in the given order


class FixedScores(SecondStage):
    """The stage with each candidate's window scores given (the embedding call is what the product makes)."""

    def __init__(self, selector: Selector, settings: StageSettings, scores: dict[str, float]) -> None:
        super().__init__(selector, settings)
        self.fixed = scores

    def _embedding_scores(self, question: str, top: Sequence[Candidate]) -> list[list[float]]:
        return [[self.fixed[c.chunk_id]] for c in top]


def test_a_chunk_low_in_the_fusion_but_in_the_embeddings_top_n_is_scored_and_lifted(store: RunStore) -> None:
    sel = Selector(store.conn, embedder=object(), embedding_model="m")  # type: ignore[arg-type]
    order = [cand("a", bm25=9, emb=0.2), cand("b", bm25=8), cand("c", bm25=7), cand("d", emb=0.6)]
    order = [Candidate(c.chunk_id, c.url, c.heading, c.text, c.tokens, rank=i, score=s, bm25_score=c.bm25_score,
                       embedding_score=c.embedding_score) for i, (c, s) in enumerate(zip(order, [1.0, 0.5, 0.4, 0.3]), 1)]
    windows = {"a": 0.2, "b": 0.1, "c": 0.9, "d": 0.9}
    staged, trail = FixedScores(sel, StageSettings(candidates=2, weight=1.0, union=True), windows).apply("q", order)
    # The union of each list's top 2 is a, b (bm25) and d, a (embedding): c is not scored and stays last.
    assert ids(staged) == ["d", "a", "b", "c"] and [c.rank for c in staged] == [1, 2, 3, 4]
    assert staged[0].stage_score == 0.9 and staged[3].stage_score is None
    assert trail.status == "reranked" and trail.after == ["d", "a", "b"]
    fused_top, _ = FixedScores(sel, StageSettings(candidates=2, weight=1.0, union=False), windows).apply("q", order)
    assert ids(fused_top) == ["a", "b", "c", "d"]  # the fused top 2 only: d is never scored
