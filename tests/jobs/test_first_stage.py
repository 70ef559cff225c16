"""Which first stage ranked the embedding leg (codes or exact scan, and why) is recorded with each answer's selection
and printed by `webqa explain`: on a real DuckDB store, through QuestionAnswerer, the stored rows and explain_answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import first_stage
from jobs.answer import AskSettings, QuestionSpec
from jobs.config import parse_job
from jobs.explain import explain_answer
from jobs.llm import OllamaAccess
from jobs.runstore import RunStore
from jobs.select import Selector
from jobs.session import open_session
from pipelines import vector_codes, vectors
from tests.support.index_pages import VocabEmbedder
from tests.support.pages_db import pages_db


def _pages_db(tmp_path: Path) -> Path:
    return pages_db(tmp_path, embedded=True)


def _answer(db: Path, method: str, approximate: str) -> tuple[str, list[dict]]:
    """Answer one question as a job whose selection.approximate is ``approximate`` does; explain's text and the rows."""
    job = parse_job(f"name: t\nquestions: [q]\nselection:\n  method: {method}\n  approximate: {approximate}\n")
    access = OllamaAccess(None, VocabEmbedder(), None, None)  # type: ignore[arg-type]  # the Embedder protocol
    with open_session(db, access, embedding_model="m", no_chunks="none",
                      approximate=job.selection.approximate) as session:
        answerer = session.answerer(AskSettings(method=job.selection.method, answerer="extractive"))
        answer_id = answerer.answer(QuestionSpec("q", "widget server install")).attempts[0].answer_id
        assert answer_id is not None
        return explain_answer(session.store, answer_id), session.store.selections_of(answer_id)


def _stage_line(explained: str) -> str:
    [line] = [ln.strip() for ln in explained.splitlines() if "Embedding first stage:" in ln]
    return line


@pytest.mark.parametrize("method", ["embedding", "hybrid"])
@pytest.mark.parametrize(("approximate", "expected"), [
    ("always", "Embedding first stage: codes (approximate), forced (selection.approximate always)"),
    ("false", "Embedding first stage: exact scan, forced (selection.approximate false)")])
def test_forced_either_way_is_stored_and_explained(tmp_path: Path, method: str, approximate: str,
                                                   expected: str) -> None:
    explained, rows = _answer(_pages_db(tmp_path), method, approximate)
    assert _stage_line(explained) == expected
    assert first_stage.stored(rows) == expected.removeprefix("Embedding first stage: ")
    # Said once, not on every candidate's row.
    assert explained.count("embedding first stage") == 0 and explained.count("Embedding first stage") == 1


@pytest.mark.parametrize("approximate", ["auto", "true"])
def test_auto_says_the_window_count_either_side_of_the_threshold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 approximate: str) -> None:
    db = _pages_db(tmp_path)
    below, _ = _answer(db, "embedding", approximate)
    with RunStore.open(db) as store:
        assert vector_codes.CodeCache().rows(store.conn, 8) is None  # below the threshold no codes are written
        windows = int(store.conn.execute(f"SELECT count(*) FROM {vectors.unit_vectors_table(8)}").fetchone()[0])  # type: ignore[index]
    assert _stage_line(below) == f"Embedding first stage: exact scan, auto: {windows} embedded windows < 200000"
    monkeypatch.setattr("jobs.select.APPROXIMATE_MIN_WINDOWS", windows)
    past, _ = _answer(db, "hybrid", approximate)
    assert _stage_line(past) == f"Embedding first stage: codes (approximate), auto: {windows} embedded windows >= {windows}"


def test_a_read_only_database_says_it_fell_back(tmp_path: Path) -> None:
    with RunStore.open(_pages_db(tmp_path), read_only=True) as store:
        selector = Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", approximate=True)
        selection = selector.select("widget server install", "embedding")
    assert selection.method_used == "embedding" and selection.candidates
    assert selection.first_stage == ("exact scan, read-only fallback: the binary codes could not be written "
                                     "(selection.approximate always)")


def test_bm25_answers_record_no_stage_and_explain_prints_none(tmp_path: Path) -> None:
    explained, rows = _answer(_pages_db(tmp_path), "bm25", "always")
    assert first_stage.stored(rows) is None
    assert "first stage" not in explained.lower()
