"""Selection indexes kept page by page give the same rankings as a full rebuild (`webqa reindex`).

A random sequence of page inserts, changes, unchanged re-saves and deletions is written through
Store.save_page / Store.delete_page (each indexing its own chunks), with embedding selections in between
(which cache vectors and add them to the typed vector tables). Then every ranking is taken, the indexes
are rebuilt from scratch, and every ranking is taken again: they must be identical, scores included.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from jobs.select import Selector
from jobs.runstore import RunStore
from pipelines import vectors
from pipelines.chunk import Chunk
from pipelines.store import PageRecord
from tests.support.index_pages import QUESTIONS, URLS, VocabEmbedder, random_page as _page

def _rankings(store: RunStore) -> dict[tuple[str, str, int, str], list[tuple[str, float]]]:
    """Every question's ranking by every index-reading method, unscoped and scoped, wide and narrow."""
    got = {}
    for pool in (2, 1000):
        selector = Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", pool=pool,
                            ensure_fts=store.load_fts)
        for method in ("bm25", "embedding", "hybrid"):
            for question in QUESTIONS:
                for scope in (None, URLS[1:7]):
                    ranked = selector.select(question, method, urls=scope).candidates
                    got[(method, question, pool, str(scope))] = [(c.chunk_id, c.score) for c in ranked]
    return got


def _index_rows(store: RunStore) -> dict[str, list[tuple[object, ...]]]:
    """The index tables with doc numbers replaced by chunk ids (a full build renumbers docs)."""
    conn = store.conn
    vectors = ("SELECT v.model, s.chunk_id, v.url, v.ordinal, v.part, v.vector::FLOAT[] "
               "FROM unit_vectors_8 v JOIN selection_docs s USING (doc) ORDER BY ALL")
    return {
        "docs": conn.execute("SELECT chunk_id, url, ordinal, embed_key, len FROM selection_docs ORDER BY ALL").fetchall(),
        "postings": conn.execute("SELECT p.term, s.chunk_id, p.tf_heading, p.tf_text, p.len FROM bm25_postings p "
                                 "JOIN selection_docs s USING (doc) ORDER BY ALL").fetchall(),
        "vectors": conn.execute(vectors).fetchall() if store.has_table("unit_vectors_8") else [],
    }


@pytest.mark.parametrize("seed,listed_keys", [(1, None), (2, None), (3, None), (4, 0)])
def test_incremental_indexes_rank_like_a_full_rebuild(tmp_path: Path, seed: int, listed_keys: int | None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    if listed_keys is not None:  # the cached vectors' copy by join, as for a batch with many window keys
        monkeypatch.setattr(vectors, "_LISTED_KEYS", listed_keys)
    rng = random.Random(seed)
    operations = {"new": 0, "changed": 0, "unchanged": 0, "deleted": 0}
    with RunStore.open(tmp_path / "inc.duckdb") as store:
        stored: dict[str, tuple[PageRecord, list[Chunk]]] = {}
        for step in range(70):
            url = rng.choice(URLS)
            roll = rng.random()
            if url in stored and roll < 0.2:
                assert store.delete_page(url)
                del stored[url]
                operations["deleted"] += 1
            elif url in stored and roll < 0.35:
                record, chunks = stored[url]
                operations[store.save_page(record, chunks, crawl_run_id=step)] += 1
            else:
                record, chunks = _page(rng, url, step)
                operations[store.save_page(record, chunks, crawl_run_id=step)] += 1
                stored[url] = (record, chunks)
            if step % 9 == 4:  # embed what is new: vectors reach the typed table through add_unit_vectors
                Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m").select("widget", "embedding")
        assert all(operations.values()), operations  # every kind of write happened
        assert not store.fts_is_stale()

        incremental, incremental_rows = _rankings(store), _index_rows(store)
        store.rebuild_fts()
        full, full_rows = _rankings(store), _index_rows(store)

    assert incremental_rows == full_rows
    assert incremental == full
    # The comparison is not vacuous: rankings with ties, and narrow pools cut inside them.
    assert sum(len(r) for r in full.values()) > 100
    assert any(len({s for _, s in r}) < len(r) for r in full.values())


@pytest.mark.e2e
def test_webqa_reindex_rebuilds_in_full(tmp_path: Path) -> None:
    import subprocess

    from tests.support.run import WEBQA

    db = tmp_path / "webqa.duckdb"
    rng = random.Random(7)
    with RunStore.open(db) as store:
        for url in URLS[:4]:
            store.save_page(*_page(rng, url, 0), crawl_run_id=1)
        before = _index_rows(store)["postings"]
        chunks = store.count_chunks()
        store.conn.execute("DELETE FROM bm25_postings")  # damaged by hand: a full build repairs it
    done = subprocess.run([*WEBQA, "reindex", "--db", str(db)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"reindexed {chunks} chunks in ")
    with RunStore.open(db) as store:
        assert _index_rows(store)["postings"] == before and not store.fts_is_stale()
