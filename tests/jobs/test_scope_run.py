"""A run's scope inside the product path (jobs/answer.py QuestionAnswerer, jobs/select.py Selector): the job's
default scope is checked against the pages once per run, and a job mixing scopes resolves each of them once."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from jobs.answer import AskSettings, QuestionAnswerer, QuestionSpec
from jobs.runstore import RunStore
from jobs.select import Selector
from pipelines import search_scope
from tests.support.scope_pages import URLS, zipf_pages


def test_the_job_scope_is_checked_against_the_pages_once_per_run_not_per_question(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(4)
    with RunStore.open(tmp_path / "q.duckdb") as store:
        zipf_pages(store, rng, URLS[:40])
        job = tuple(store.stored_urls(URLS[:30] + ["http://never.test/"]))  # as answer_all checks them
        assert job == tuple(sorted(URLS[:30]))
        checked: list[tuple[str, ...]] = []
        real = RunStore.stored_urls
        monkeypatch.setattr(RunStore, "stored_urls", lambda self, urls: checked.append(tuple(urls)) or real(self, urls))
        selector = Selector(store.conn, ensure_fts=store.load_fts, pool=10)
        answerer = QuestionAnswerer(store, selector, None, AskSettings(method="bm25", answerer="extractive",
                                                                       dry_run=True))
        answerer.checked_scope(job, list(job))
        outcomes = [answerer.answer(QuestionSpec(f"q{i}", q, job)) for i, q in enumerate(("w0 w3", "w1 w20", "w39"))]
        assert checked == []
        assert all(o.selection is not None and {c.url for c in o.selection.candidates} <= set(job) for o in outcomes)
        # A question with its own urls is still checked (and told when none was crawled).
        own = answerer.answer(QuestionSpec("own", "w0", (URLS[35], "http://never.test/")))
        assert checked == [(URLS[35], "http://never.test/")]
        assert own.selection is not None and {c.url for c in own.selection.candidates} == {URLS[35]}
        assert "none of its urls" in (answerer.answer(QuestionSpec("none", "w0", ("http://never.test/",))).error or "")


def test_stored_urls_finds_the_pages_and_what_their_duplicates_stand_for(tmp_path: Path) -> None:
    rng = random.Random(6)
    with RunStore.open(tmp_path / "d.duckdb") as store:
        zipf_pages(store, rng, URLS[:10])
        store.conn.execute("UPDATE pages SET duplicate_of = ? WHERE url = ?", [URLS[1], URLS[2]])
        assert store.stored_urls([]) == []
        assert store.stored_urls([URLS[2], URLS[5], "http://never.test/", URLS[5]]) == sorted([URLS[1], URLS[2],
                                                                                                URLS[5]])


def test_a_job_mixing_scopes_resolves_each_scope_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(9)
    resolutions: list[int] = []
    real = search_scope.resolve

    def counting(conn: Any, urls: Any, previous: Any = None) -> Any:
        got = real(conn, urls, previous)
        resolutions.append(got is not previous)
        return got

    monkeypatch.setattr(search_scope, "resolve", counting)
    with RunStore.open(tmp_path / "m.duckdb") as store:
        zipf_pages(store, rng, URLS)
        selector = Selector(store.conn, ensure_fts=store.load_fts, pool=10)
        job = URLS[:30]
        for _ in range(5):
            selector.select("w0 w3", "bm25", urls=job)
            selector.select("w0 w3", "bm25", urls=URLS[40:42])
        assert sum(resolutions) == 2
        # Past the bound the least recently used scope goes, with its temporary table.
        for n in range(search_scope.KEPT_SCOPES):
            selector.select("w0", "bm25", urls=URLS[n:n + 2])
        assert sum(resolutions) == 2 + search_scope.KEPT_SCOPES
        tables = store.conn.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary "
                                    "AND table_name LIKE 'scope_docs_%'").fetchone()
        assert tables == (search_scope.KEPT_SCOPES,)
        before = sum(resolutions)
        selector.select("w0 w3", "bm25", urls=job)  # evicted: resolved again
        assert sum(resolutions) == before + 1
