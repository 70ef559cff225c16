"""Which first stage ranked the embedding leg (codes or exact scan, and why) is recorded with each answer's selection
and printed by `webqa explain`: on a real DuckDB store, through QuestionAnswerer, the stored rows and explain_answer."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from jobs import first_stage
from jobs.answer import AskSettings, QuestionAnswerer, QuestionSpec
from jobs.explain import explain_answer
from jobs.runstore import RunStore
from jobs.select import Selector
from pipelines import vector_codes
from tests.support.index_pages import URLS, VocabEmbedder, random_page


def _pages_db(tmp_path: Path) -> Path:
    """Every page of index_pages.URLS in a real DuckDB file, with their vectors and no binary codes yet."""
    db, rng = tmp_path / "pages.duckdb", random.Random(11)
    with RunStore.open(db) as store:
        for step, url in enumerate(URLS):
            record, chunks = random_page(rng, url, step)
            store.save_page(record, chunks, crawl_run_id=step)
        Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m").embed_missing()
    return db


def _answer(store: RunStore, method: str, approximate: bool | None) -> tuple[str, list[dict]]:
    selector = Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", ensure_fts=store.load_fts,
                        approximate=approximate)
    answerer = QuestionAnswerer(store, selector, None, AskSettings(method=method, answerer="extractive"))
    outcome = answerer.answer(QuestionSpec("q", "widget server install"))
    answer_id = outcome.attempts[0].answer_id
    assert answer_id is not None
    return explain_answer(store, answer_id), store.selections_of(answer_id)


def _stage_line(explained: str) -> str:
    [line] = [ln.strip() for ln in explained.splitlines() if "Embedding first stage:" in ln]
    return line


@pytest.mark.parametrize("method", ["embedding", "hybrid"])
@pytest.mark.parametrize(("approximate", "expected"), [
    (True, "Embedding first stage: codes (approximate), forced (selection.approximate true)"),
    (False, "Embedding first stage: exact scan, forced (selection.approximate false)")])
def test_forced_either_way_is_stored_and_explained(tmp_path: Path, method: str, approximate: bool,
                                                   expected: str) -> None:
    with RunStore.open(_pages_db(tmp_path)) as store:
        explained, rows = _answer(store, method, approximate)
        assert _stage_line(explained) == expected
        assert first_stage.stored(rows) == expected.removeprefix("Embedding first stage: ")
        # Said once, not on every candidate's row.
        assert explained.count("embedding first stage") == 0 and explained.count("Embedding first stage") == 1


def test_auto_says_the_window_count_either_side_of_the_threshold(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with RunStore.open(_pages_db(tmp_path)) as store:
        below, _ = _answer(store, "embedding", None)
        windows = vector_codes.CodeCache().rows(store.conn, 8)
        assert windows is None  # below the threshold auto neither reads nor writes codes
        assert _stage_line(below).startswith("Embedding first stage: exact scan, auto: ")
        assert _stage_line(below).endswith(f" embedded windows < {200_000}")
        monkeypatch.setattr("jobs.select.APPROXIMATE_MIN_WINDOWS", 1)
        past, _ = _answer(store, "embedding", None)
        windows = vector_codes.CodeCache().rows(store.conn, 8)
        assert windows
        assert _stage_line(past) == f"Embedding first stage: codes (approximate), auto: {windows} embedded windows >= 1"


def test_a_read_only_database_says_it_fell_back(tmp_path: Path) -> None:
    with RunStore.open(_pages_db(tmp_path), read_only=True) as store:
        selector = Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", approximate=True)
        selection = selector.select("widget server install", "embedding")
    assert selection.method_used == "embedding" and selection.candidates
    assert selection.first_stage == ("exact scan, read-only fallback: the binary codes could not be written "
                                     "(selection.approximate true)")


def test_bm25_answers_record_no_stage_and_explain_prints_none(tmp_path: Path) -> None:
    with RunStore.open(_pages_db(tmp_path)) as store:
        explained, rows = _answer(store, "bm25", True)
    assert first_stage.stored(rows) is None
    assert "first stage" not in explained.lower()
