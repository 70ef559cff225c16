"""`selection.approximate`: "auto" by default (the codes past APPROXIMATE_MIN_WINDOWS, the exact scan below),
always forces the codes, true is auto (its meaning before auto), false the exact scan; the session's Selector follows the job file."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.config import parse_job
from pipelines.errors import ConfigError
from jobs.llm import OllamaAccess
from jobs.runstore import RunStore
from jobs.select import Selector
from jobs.session import open_session
from pipelines import vector_codes
from tests.support.index_pages import VocabEmbedder
from tests.support.pages_db import pages_db
from tests.support.store import make_chunks, page_record


def _db(tmp_path: Path) -> Path:
    db = tmp_path / "a.duckdb"
    url = "http://a.test/guide"
    chunks = make_chunks(url, [(("Guide",), "Install the widget server on port 8080.")])
    with RunStore.open(db) as store:
        store.save_page(page_record(url, chunks), chunks, crawl_run_id=None)
    return db


def _pages_db(tmp_path: Path) -> Path:
    return pages_db(tmp_path)


def test_auto_is_the_default_everywhere(tmp_path: Path) -> None:
    assert parse_job("name: t\nquestions: [q]\n").selection.approximate == "auto"
    with RunStore.open(_db(tmp_path)) as store:
        assert Selector(store.conn).approximate is None  # `webqa ask` and every library caller: by corpus size


@pytest.mark.parametrize(("text", "expected"), [("", None), ("selection:\n  approximate: auto\n", None),
                                                ("selection:\n  approximate: true\n", None),
                                                ("selection:\n  approximate: always\n", True),
                                                ("selection:\n  approximate: false\n", False)])
def test_the_session_selector_follows_the_job(tmp_path: Path, text: str, expected: bool | None) -> None:
    job = parse_job("name: t\nquestions: [q]\n" + text)
    with open_session(_db(tmp_path), OllamaAccess(None, None, None, None), embedding_model=None, no_chunks="none",
                      approximate=job.selection.approximate) as session:
        assert session.selector.approximate is expected


@pytest.mark.parametrize("value", ["maybe", "Auto", "1"])
def test_a_wrong_value_is_one_error_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_job(f"name: t\nquestions: [q]\nselection:\n  approximate: {value}\n", "job.yaml")
    assert "approximate" in str(err.value) and "job.yaml" in str(err.value)
    assert "expected auto, always, true or false" in str(err.value) and value in str(err.value)


def _codes_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> list[int]:
    """How many selections the codes ranked, for a job whose selection section is ``text``, on a real store."""
    calls: list[int] = []
    real = vector_codes.rank
    monkeypatch.setattr(vector_codes, "rank", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    job = parse_job("name: t\nquestions: [q]\n" + text)
    access = OllamaAccess(None, VocabEmbedder(), None, None)  # type: ignore[arg-type]  # the Embedder protocol
    with open_session(_pages_db(tmp_path), access, embedding_model="m", no_chunks="none",
                      approximate=job.selection.approximate) as session:
        assert session.selector.select("widget", "embedding").method_used == "embedding"
    return calls


def test_the_default_takes_the_codes_past_the_threshold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jobs.select.APPROXIMATE_MIN_WINDOWS", 1)
    assert _codes_calls(tmp_path, monkeypatch, "") == [1]


def test_the_default_scans_exactly_below_the_threshold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _codes_calls(tmp_path, monkeypatch, "") == []


@pytest.mark.parametrize(("text", "threshold", "expected"), [("selection:\n  approximate: always\n", 10**9, [1]),
                                                             ("selection:\n  approximate: false\n", 1, [])])
def test_always_and_false_force_either_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str,
                                         threshold: int, expected: list[int]) -> None:
    monkeypatch.setattr("jobs.select.APPROXIMATE_MIN_WINDOWS", threshold)
    assert _codes_calls(tmp_path, monkeypatch, text) == expected


def test_true_keeps_its_meaning_from_before_auto_by_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Jobs written when true meant "past the threshold" must not turn lossy on a small corpus.
    monkeypatch.setattr("jobs.select.APPROXIMATE_MIN_WINDOWS", 10**9)
    assert _codes_calls(tmp_path, monkeypatch, "selection:\n  approximate: true\n") == []
