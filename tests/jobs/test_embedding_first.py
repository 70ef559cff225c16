"""`selection.embedding_first`: the embedding list's best few packed among the fused best, each saying why;
off (0) by default; the order on a real store, the job key, the selection row that `webqa explain` prints."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from jobs.answer import packed_sources, selection_rows
from jobs.config import parse_job
from jobs.embedding_first import embedding_first
from jobs.llm import OllamaAccess
from jobs.runstore import RunStore
from jobs.select import Candidate, Selection, Selector
from jobs.session import open_session
from pipelines.errors import ConfigError
from tests.support.fake_ollama import FakeOllama
from tests.support.index_pages import QUESTIONS, URLS, VocabEmbedder, random_page
from tests.support.run import QUESTIONS as RUN_QUESTIONS  # the fixture site's questions
from tests.support.run import (  # noqa: F401 - crawled, db and llm are fixtures, used by name
    crawled, db, job_yaml, llm, rows, run_job, webqa, write_job)


def _c(cid: str, cosine: float | None, url: str = "http://a/", ordinal: int = 0) -> Candidate:
    return Candidate(cid, url, "H", f"text {cid}", 10, embedding_score=cosine, ordinal=ordinal)


def test_the_embeddings_top_n_join_the_fused_top_n_in_fused_order() -> None:
    fused = [_c("A", 0.1), _c("B", None), _c("C", 0.9), _c("D", 0.8), _c("E", 0.95)]
    out = embedding_first(fused, 2)
    assert [c.chunk_id for c in out] == ["A", "B", "C", "E", "D"]
    assert [c.first_by for c in out] == [None, None, "embedding #2", "embedding #1", None]
    assert embedding_first(fused, 0) == fused


def test_equal_cosines_are_taken_by_url_then_position() -> None:
    fused = [_c("A", None), _c("B", 0.5, "http://b/", 1), _c("C", 0.5, "http://b/", 0), _c("D", 0.5, "http://a/", 9)]
    assert [c.chunk_id for c in embedding_first(fused, 1)] == ["A", "D", "B", "C"]


def _store(tmp_path: Path) -> RunStore:
    store = RunStore.open(tmp_path / "pages.duckdb")
    rng = random.Random(3)
    for step, url in enumerate(URLS):
        record, chunks = random_page(rng, url, step)
        store.save_page(record, chunks, crawl_run_id=step)
    return store


@pytest.mark.parametrize("n", [1, 3])
def test_the_hybrid_pool_on_a_real_store(tmp_path: Path, n: int) -> None:
    with _store(tmp_path) as store:
        plain = Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", ensure_fts=store.load_fts)
        first = Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", ensure_fts=store.load_fts,
                         embedding_first=n)
        moved = 0
        for question in QUESTIONS:
            fused = plain.select(question, "hybrid").candidates
            ordered = first.select(question, "hybrid").candidates
            best = [c.chunk_id for c in plain.embedding(question, None)[:n]]
            head = {c.chunk_id for c in fused[:n]} | set(best)
            assert [c.chunk_id for c in ordered[: len(head)]] == [c.chunk_id for c in fused if c.chunk_id in head]
            assert [c.chunk_id for c in ordered[len(head):]] == [c.chunk_id for c in fused if c.chunk_id not in head]
            assert [c.rank for c in ordered] == list(range(1, len(ordered) + 1))
            assert {c.chunk_id: c.score for c in ordered} == {c.chunk_id: c.score for c in fused}
            moved += sum(1 for c in ordered if c.first_by)
        assert moved > 0  # the store has paraphrase-like cases: some embedding-only chunks were moved up


def test_the_job_key_reaches_the_selector(tmp_path: Path) -> None:
    assert parse_job("name: t\nquestions: [q]\n").selection.embedding_first == 0
    job = parse_job("name: t\nquestions: [q]\nselection:\n  embedding_first: 4\n")
    with _store(tmp_path):
        pass
    with open_session(tmp_path / "pages.duckdb", OllamaAccess(None, None, None, None), embedding_model=None, no_chunks="none",
                      embedding_first=job.selection.embedding_first) as session:
        assert session.selector.embedding_first == 4
    with pytest.raises(ConfigError) as err:
        parse_job("name: t\nquestions: [q]\nselection:\n  embedding_first: -1\n", "job.yaml")
    assert "embedding_first" in str(err.value) and "job.yaml" in str(err.value)


def test_a_moved_candidate_says_why_in_its_selection_row() -> None:
    ranked = [Candidate("A", "http://a/", "H", "Alpha.", 5, rank=1),
              Candidate("E", "http://e/", "H", "Echo.", 5, rank=2, embedding_score=0.9, first_by="embedding #1")]
    evidence = packed_sources(ranked, top_k=10, token_budget=100, merge=False)
    rows = {r["chunk_id"]: r for r in selection_rows(Selection("q", "hybrid", "hybrid", ranked), evidence.packed,
                                                     evidence.sources, evidence)}
    assert rows["A"]["reason"] == "rank 1 within top_k and budget"
    assert rows["E"]["reason"] == ("rank 2 within top_k and budget; moved into the fused top as the embedding #1 "
                                   "(selection.embedding_first)")


@pytest.mark.e2e
def test_webqa_run_stores_and_explain_shows_the_moved_candidates(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    text = job_yaml(list(RUN_QUESTIONS), method="hybrid", top_k=3)
    job = write_job(tmp_path, text.replace("  token_budget: 1000\n", "  token_budget: 1000\n  embedding_first: 1\n"))
    done = run_job(tmp_path, job, db, host=llm.url)
    assert done.returncode == 0, done.stderr
    moved = rows(db, "SELECT answer_id, rank, reason FROM selections WHERE reason LIKE '%selection.embedding_first%'")
    assert moved, "no candidate was moved up on the fixture site"
    assert all(re.search(r"moved into the fused top as the embedding #\d+ \(selection\.embedding_first\)", m["reason"]) for m in moved)
    explained = webqa("explain", str(moved[0]["answer_id"]), "--db", db)
    assert explained.returncode == 0, explained.stderr
    assert "moved into the fused top as the embedding #" in explained.stdout


@pytest.mark.parametrize(("extra", "says"), [
    ("  method: bm25\n", "method hybrid only"),
    ("  top_k: 4\n", "fewer than top_k (4)"),
    ("  second_stage: {weight: 0.5}\n", "no effect with selection.rerank or selection.second_stage"),
    ("  rerank: {}\n", "no effect with selection.rerank or selection.second_stage"),
])
def test_a_setting_that_would_leave_it_without_effect_is_one_error(extra: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_job(f"name: t\nquestions: [q]\nselection:\n  embedding_first: 4\n{extra}", "job.yaml")
    assert "embedding_first" in str(err.value) and "job.yaml" in str(err.value) and says in str(err.value)


def test_a_second_stage_of_weight_zero_keeps_it() -> None:
    job = parse_job("name: t\nquestions: [q]\nselection:\n  embedding_first: 4\n  second_stage: {weight: 0}\n")
    assert job.selection.embedding_first == 4
