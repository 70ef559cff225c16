"""`selection.approximate`: off unless the job asks; the session's Selector follows the job file."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.config import parse_job
from pipelines.errors import ConfigError
from jobs.llm import OllamaAccess
from jobs.runstore import RunStore
from jobs.select import Selector
from jobs.session import open_session
from tests.support.store import make_chunks, page_record


def _db(tmp_path: Path) -> Path:
    db = tmp_path / "a.duckdb"
    url = "http://a.test/guide"
    chunks = make_chunks(url, [(("Guide",), "Install the widget server on port 8080.")])
    with RunStore.open(db) as store:
        store.save_page(page_record(url, chunks), chunks, crawl_run_id=None)
    return db


def test_the_exact_scan_is_the_default_everywhere(tmp_path: Path) -> None:
    assert parse_job("name: t\nquestions: [q]\n").selection.approximate is False
    with RunStore.open(_db(tmp_path)) as store:
        assert Selector(store.conn).approximate is False  # `webqa ask` and every library caller


@pytest.mark.parametrize(("text", "expected"), [("", False), ("selection:\n  approximate: true\n", None)])
def test_the_session_selector_follows_the_job(tmp_path: Path, text: str, expected: bool | None) -> None:
    job = parse_job("name: t\nquestions: [q]\n" + text)
    with open_session(_db(tmp_path), OllamaAccess(None, None, None, None), embedding_model=None, no_chunks="none",
                      approximate=job.selection.approximate) as session:
        assert session.selector.approximate is expected  # None: by corpus size (200,000 windows)


def test_a_wrong_value_is_one_error_naming_the_key() -> None:
    with pytest.raises(ConfigError) as err:
        parse_job("name: t\nquestions: [q]\nselection:\n  approximate: maybe\n", "job.yaml")
    assert "approximate" in str(err.value) and "job.yaml" in str(err.value)
