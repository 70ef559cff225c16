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
from tests.support.index_pages import random_page

VOCAB = [f"w{i}" for i in range(40)]
URLS = [f"http://p.test/{i}" for i in range(60)]


def _zipf_pages(store: RunStore, rng: random.Random, urls: list[str], version: int = 0) -> None:
    """Pages of Zipf-like words (w0 in most chunks, w39 in a few); every 7th page one text copied, tying across pages."""
    for n, url in enumerate(urls):
        record, chunks = random_page(rng, url, version)
        chunks = [dataclasses.replace(c, text=" ".join(VOCAB[min(int(rng.paretovariate(0.6)) - 1, 39)]
                                                       for _ in range(rng.randint(1, 30)))
                                      if n % 7 else "w0 w1 w30 w30") for c in chunks]
        store.save_page(record, chunks, crawl_run_id=version)


def _full(store: RunStore, question: str, scope: list[str], pool: int) -> list[Any]:
    return store.conn.execute(search_index.BM25_SQL, {"q": question, "urls": scope, "pool": pool, "k1": 1.2, "b": 0.5,
                                                      "heading_weight": 3.0, "lang": "porter"}).fetchall()


def test_bm25_in_a_resolved_scope_is_the_scoped_full_query_pruned_or_not(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_index, "PRUNE_MIN_DOCS", 1)  # pruned from the first doc on (300,000 in the product)
    monkeypatch.setattr(search_index, "PRUNE_MIN_SCOPE", 0.0)  # and in any scope (a fifth of the docs in the product)
    rng = random.Random(5)
    with RunStore.open(tmp_path / "s.duckdb") as store:
        _zipf_pages(store, rng, URLS)
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
                assert got == _full(store, question, scope, pool), (question, size, pool)
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
            assert got == _full(store, "w0 w1 w30", urls, 3)
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
        _zipf_pages(store, rng, URLS)
        selector = Selector(store.conn, ensure_fts=store.load_fts, pool=10)
        scope = rng.sample(URLS, 20)
        for question in ("w0 w3", "w1 w20 w30", "w39"):
            got = _asked(selector, question, scope)
            assert [(r[0], r[5]) for r in _full(store, question, sorted(scope), 10)] == got
        assert len(resolved) == 1
        # Pages of the scope written between questions (new docs, old ones gone): resolved again, never stale.
        _zipf_pages(store, rng, scope[:5], version=1)
        store.delete_page(scope[5])
        for question in ("w0 w3", "w1 w20 w30", "w39"):
            got = _asked(selector, question, scope)
            assert [(r[0], r[5]) for r in _full(store, question, sorted(scope), 10)] == got
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
        _zipf_pages(store, rng, URLS[:20])
        stored = [u for (u,) in store.conn.execute("SELECT DISTINCT url FROM selection_docs ORDER BY url").fetchall()]
        every = Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", ensure_fts=store.load_fts)
        some = Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", ensure_fts=store.load_fts)
        assert every.select("w0", "hybrid", urls=stored).method_used == "hybrid"
        assert some.select("w0", "hybrid", urls=stored[:3]).method_used == "hybrid"
    assert asked == [None, stored[:3]]
