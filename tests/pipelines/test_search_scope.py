"""A run's scope resolved once (pipelines/search_scope.py): bm25 inside it, pruned or not, ranks exactly as the
scoped full query, and a scope resolved before pages are written is never used after."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest

from jobs.runstore import RunStore
from jobs.select import Selector
from pipelines import search_index, search_scope
from tests.support.scope_pages import URLS, VOCAB, full_bm25, zipf_pages

def test_bm25_in_a_resolved_scope_is_the_scoped_full_query_pruned_or_not(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_index, "PRUNE_MIN_DOCS", 1)  # pruned from the first doc on (300,000 in the product)
    monkeypatch.setattr(search_index, "PRUNE_MIN_SCOPE", 0.0)  # and in any scope (a fifth of the docs in the product)
    rng = random.Random(5)
    with RunStore.open(tmp_path / "s.duckdb") as store:
        zipf_pages(store, rng, URLS)
        store.load_fts()
        queries: list[str] = []

        class Recording:  # which kind of query answered each question
            def execute(self, sql: str, params: Any = None) -> Any:
                queries.append("p" if "candidates AS" in sql else "f" if "scored AS" in sql else "")
                return store.conn.execute(sql, params)

        paths: dict[str, list[str]] = {"in": [], "out": [], "whole": []}
        for size in (1, 3, 15, 40, 59, 60):
            scope = sorted(rng.sample(URLS, size))
            docs = search_scope.resolve(store.conn, scope)
            kind = "whole" if docs.whole else "in" if docs.inside else "out"
            for _ in range(40):
                question = " ".join(rng.sample(VOCAB, rng.randint(1, 5)))
                pool = rng.choice([1, 3, 10, 40])
                queries.clear()
                got = search_index.bm25_rank(Recording(), question, docs, pool=pool, k1=1.2, b=0.5,  # type: ignore[arg-type]
                                             heading_weight=3.0)
                assert got == full_bm25(store, question, scope, pool), (question, size, pool)
                paths[kind].append("".join(queries))
    # Not vacuous: the scope's docs listed, the docs outside it listed, every doc (no filter); each pruned often,
    # and by the full query too.
    for kind, path in paths.items():
        assert sum(p.startswith("p") and "f" not in p for p in path) > 10, (kind, path)
    assert any("f" in p for p in paths["in"])

    # Below PRUNE_MIN_SCOPE of the docs the full query alone (its filter leaves few postings to sum).
    monkeypatch.setattr(search_index, "PRUNE_MIN_SCOPE", 0.2)
    with RunStore.open(tmp_path / "s.duckdb") as store:
        store.load_fts()
        for urls in (URLS[:3], URLS[:30]):
            docs = search_scope.resolve(store.conn, urls)
            queries.clear()
            got = search_index.bm25_rank(Recording(), "w0 w1 w30", docs, pool=3, k1=1.2, b=0.5,  # type: ignore[arg-type]
                                         heading_weight=3.0)
            assert got == full_bm25(store, "w0 w1 w30", urls, 3)
            assert ("p" in queries) == (docs.fraction >= 0.2), (docs.fraction, queries)


def _asked(selector: Selector, question: str, scope: list[str]) -> list[tuple[str, float]]:
    return [(c.chunk_id, c.score) for c in selector.select(question, "bm25", urls=scope).candidates]


def test_a_scope_is_resolved_once_per_run_and_again_after_pages_are_written(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_index, "PRUNE_MIN_DOCS", 1)
    rng = random.Random(8)
    resolved: list[int] = []
    real = search_scope.resolve
    monkeypatch.setattr(search_scope, "resolve", lambda conn, urls, previous=None: (
        resolved.append(0) if previous is None or not previous.current(urls) else None) or real(conn, urls, previous))
    with RunStore.open(tmp_path / "w.duckdb") as store:
        zipf_pages(store, rng, URLS)
        selector = Selector(store.conn, ensure_fts=store.load_fts, pool=10)
        scope = rng.sample(URLS, 20)
        for question in ("w0 w3", "w1 w20 w30", "w39"):
            got = _asked(selector, question, scope)
            assert [(r[0], r[5]) for r in full_bm25(store, question, sorted(scope), 10)] == got
        assert len(resolved) == 1
        # Pages of the scope written between questions (new docs, old ones gone): resolved again, never stale.
        zipf_pages(store, rng, scope[:5], version=1)
        store.delete_page(scope[5])
        for question in ("w0 w3", "w1 w20 w30", "w39"):
            got = _asked(selector, question, scope)
            assert [(r[0], r[5]) for r in full_bm25(store, question, sorted(scope), 10)] == got
        assert len(resolved) == 2
        # Another scope (another job's questions) is resolved for itself.
        _asked(selector, "w0", URLS[:3])
        assert len(resolved) == 3


def test_a_scope_of_every_page_looks_for_unembedded_windows_without_a_filter(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # A job whose pages are the whole database paid a filter of every chunk by its url list (12 s CPU at 1M).
    from pipelines import vectors
    from tests.support.index_pages import VocabEmbedder

    asked: list[Any] = []
    real = vectors.windows_without_vectors
    monkeypatch.setattr(vectors, "windows_without_vectors", lambda conn, scope, model: asked.append(scope) or real(
        conn, scope, model))
    rng = random.Random(9)
    with RunStore.open(tmp_path / "all.duckdb") as store:
        zipf_pages(store, rng, URLS[:20])
        stored = [u for (u,) in store.conn.execute("SELECT DISTINCT url FROM selection_docs ORDER BY url").fetchall()]
        every = Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", ensure_fts=store.load_fts)
        some = Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", ensure_fts=store.load_fts)
        assert every.select("w0", "hybrid", urls=stored).method_used == "hybrid"
        assert some.select("w0", "hybrid", urls=stored[:3]).method_used == "hybrid"
    assert asked == [None, stored[:3]]


def test_a_scope_resolved_while_a_write_is_uncommitted_is_stale_after_the_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The generation moved only before the write: a question on another cursor between it and the COMMIT
    # resolved the old docs under the new generation, and kept them until the next write.
    rng = random.Random(3)
    with RunStore.open(tmp_path / "r.duckdb") as store:
        zipf_pages(store, rng, URLS[:40])
        store.load_fts()
        reader = store.conn.cursor()
        reader.execute("LOAD fts")
        selector = Selector(reader, pool=10)
        scope = sorted(URLS[:5] + URLS[50:55])  # five stored pages, five written below
        selector.select("w0 w1", "bm25", urls=scope)
        real = search_index.index_pages
        asked: list[int] = []

        def index_then_question(conn: Any, urls: Any, rows: Any = ()) -> None:
            real(conn, urls, rows)
            asked.append(len(selector.select("w0 w1", "bm25", urls=scope).candidates))  # before the commit

        monkeypatch.setattr(search_index, "index_pages", index_then_question)
        zipf_pages(store, rng, URLS[50:55], version=1)
        monkeypatch.setattr(search_index, "index_pages", real)
        assert len(asked) == 5
        got = [(c.chunk_id, c.score) for c in selector.select("w0 w1", "bm25", urls=scope).candidates]
        assert got == [(r[0], r[5]) for r in full_bm25(store, "w0 w1", scope, 10)]
        assert {c.url for c in selector.select("w0 w1", "bm25", urls=scope).candidates} & set(URLS[50:55])
