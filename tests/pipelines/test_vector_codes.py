"""Binary codes of the embedding vectors (pipelines/vector_codes.py): the encoding, the scan and its ties,
the table kept in step with unit_vectors page by page, an old database encoded on first use, and the
approximate ranking against the exact one, on real DuckDB files."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from jobs.runstore import RunStore
from jobs.select import Selector
from pipelines import search_index, vector_codes, vectors
from pipelines.sql import table_exists
from tests.support.index_pages import QUESTIONS, URLS, VocabEmbedder, random_page as _page


class SpreadEmbedder:
    """64 dimensions from the text's words, signs varied: codes that differ, scores that mostly do."""

    def embed(self, texts: Sequence[str], *, model: str | None = None) -> list[list[float]]:
        out = []
        for text in texts:
            rng = random.Random(" ".join(sorted(set(text.lower().split()))[:6]))
            out.append([rng.uniform(-1, 1) for _ in range(64)])
        return out


def _save_pages(store: RunStore, rng: random.Random) -> None:
    """Every page of URLS, one crawl run each."""
    for step, url in enumerate(URLS):
        record, chunks = _page(rng, url, step)
        store.save_page(record, chunks, crawl_run_id=step)


def test_encode_sets_a_bit_per_positive_dimension() -> None:
    vectors_ = np.zeros((2, 70), dtype=np.float32)
    vectors_[0, [0, 3, 69]] = 0.5
    vectors_[1, :] = -1.0
    vectors_[1, 64] = 0.0  # zero is not positive
    codes = vector_codes.encode(vectors_)
    assert codes.shape == (2, 2) and codes.dtype == np.uint64
    bits = np.unpackbits(codes.view(np.uint8), axis=1)
    assert list(np.flatnonzero(bits[0])) == [0, 3, 69]
    assert not bits[1].any()
    assert list(vector_codes.hamming(codes.T.copy(), codes[0])) == [0, 3]


def test_nearest_breaks_ties_by_position_whatever_the_partition() -> None:
    distances = np.array([5, 1, 3, 1, 3, 3, 0, 3], dtype=np.int32)
    assert list(vector_codes.nearest(distances, 4)) == [6, 1, 3, 2]
    assert list(vector_codes.nearest(distances, 5)) == [6, 1, 3, 2, 4]
    assert list(vector_codes.nearest(distances, 20)) == [6, 1, 3, 2, 4, 5, 7, 0]


def test_nearest_is_the_full_sort_cut_at_k() -> None:
    rng = np.random.default_rng(4)
    distances = rng.integers(0, 40, size=5000).astype(np.uint16)  # ties everywhere
    reference = np.lexsort((np.arange(len(distances)), distances))
    for k in (1, 7, 123, 4999, 5000):
        assert list(vector_codes.nearest(distances, k)) == list(reference[:k])


def _twins_match(store: RunStore) -> int:
    """Asserts the codes table holds exactly one twin per unit vector row, with its code and vector; returns rows."""
    conn = store.conn
    total = 0
    for dims in vectors.vector_table_dims(conn):
        unit = conn.execute(f"SELECT model, doc, url, ordinal, part, vector::FLOAT[] FROM {vectors.unit_vectors_table(dims)} "
                            "ORDER BY ALL").fetchall()
        twins = conn.execute(f"SELECT model, doc, url, ordinal, part, code, vector FROM {vector_codes.codes_table(dims)} "
                             "ORDER BY model, doc, part").fetchall()
        assert [r[:5] for r in twins] == [r[:5] for r in unit]
        for (*_k, vector), (*_t, code, raw) in zip(unit, twins, strict=True):
            matrix = np.asarray([vector], dtype=np.float32)
            assert np.array_equal(np.frombuffer(raw, dtype="<f4"), matrix[0])
            assert code == vector_codes.encode(matrix)[0].tobytes()
        total += len(unit)
    return total


def _ranking(selector: Selector, question: str) -> list[tuple[str, float]]:
    return [(c.chunk_id, round(c.score, 5)) for c in selector.select(question, "embedding").candidates]


def test_codes_follow_the_vectors_page_by_page_and_rank_like_the_exact_scan(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    with RunStore.open(tmp_path / "codes.duckdb") as store:
        for step in range(40):
            url = rng.choice(URLS)
            if step % 7 == 6:
                store.delete_page(url)
            else:
                record, chunks = _page(rng, url, step)
                store.save_page(record, chunks, crawl_run_id=step)
            if step % 5 == 4:  # vectors cached for what is new, then pages indexed after them; the first
                # approximate selection builds the codes, and from then on they are kept page by page
                Selector(store.conn, embedder=SpreadEmbedder(), embedding_model="m",
                         approximate=True).select("widget", "embedding")
        rows = _twins_match(store)
        assert rows > 20

        exact = Selector(store.conn, embedder=SpreadEmbedder(), embedding_model="m", approximate=False, pool=10)
        approx = Selector(store.conn, embedder=SpreadEmbedder(), embedding_model="m", approximate=True, pool=10)
        before = {q: _ranking(exact, q) for q in QUESTIONS}
        for question in QUESTIONS:  # every window re-scored: the same ranking, scores included
            assert _ranking(approx, question) == before[question]

        # A full build in slices of 3 docs (streamed: memory bounded by a slice) writes the same rows, and
        # re-encodes every one (docs renumbered).
        bm25 = {q: [(c.chunk_id, c.score) for c in exact.select(q, "bm25").candidates] for q in QUESTIONS}
        docs = store.conn.execute("SELECT chunk_id FROM selection_docs ORDER BY url, ordinal").fetchall()
        monkeypatch.setattr(vectors, "REBUILD_SLICE_DOCS", 3)
        monkeypatch.setattr(search_index, "REBUILD_SLICE_CHUNKS", 4)  # and the postings in slices of pages
        store.rebuild_fts()
        assert len(search_index.url_slices(store.conn, 4)) > 3
        # Docs numbered in (url, ordinal) order across slices, as one statement numbers them.
        assert store.conn.execute("SELECT chunk_id FROM selection_docs ORDER BY doc").fetchall() == docs
        assert _twins_match(store) == rows
        assert {q: [(c.chunk_id, c.score) for c in exact.select(q, "bm25").candidates] for q in QUESTIONS} == bm25
        assert {q: _ranking(exact, q) for q in QUESTIONS} == before
        assert {q: _ranking(approx, q) for q in QUESTIONS} == before


def test_without_an_approximate_selection_no_codes_are_kept(tmp_path: Path) -> None:
    # Off by default: a database whose selections never asked for the codes holds each vector once.
    rng = random.Random(11)
    with RunStore.open(tmp_path / "plain.duckdb") as store:
        _save_pages(store, rng)
        Selector(store.conn, embedder=SpreadEmbedder(), embedding_model="m").select("widget", "embedding")
        store.rebuild_fts()
        Selector(store.conn, embedder=SpreadEmbedder(), embedding_model="m").select("colours", "embedding")
        dims = vectors.vector_table_dims(store.conn)
        assert dims == [64]
        assert not table_exists(store.conn, vector_codes.codes_table(64))


def test_an_old_database_is_encoded_on_first_use_and_runs_repeat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(3)
    with RunStore.open(tmp_path / "old.duckdb") as store:
        _save_pages(store, rng)
        Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m").select("widget", "embedding")
        for dims in vectors.vector_table_dims(store.conn):  # as a database indexed before the codes existed
            vector_codes.drop(store.conn, dims)
        # Pages written meanwhile leave the codes alone: a table of only their rows would hide the others.
        record, chunks = _page(rng, URLS[0], 99)
        store.save_page(record, chunks, crawl_run_id=99)
        Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", approximate=False).select("colours", "embedding")
        exact = Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", approximate=False, pool=5)
        assert _ranking(exact, "widget server port")
        assert not store.conn.execute("SELECT count(*) FROM duckdb_tables() WHERE starts_with(table_name, ?)",
                                      [vector_codes.CODES_PREFIX]).fetchone()[0]

        approx = Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", approximate=True, pool=5)
        assert _ranking(approx, "widget server port") == _ranking(exact, "widget server port")
        assert _twins_match(store) > 0
        # A first stage narrower than the corpus, on vectors full of ties (8 counts): the same answer every
        # time, from a fresh cache too.
        monkeypatch.setattr(vector_codes, "RESCORE_WINDOWS", 8)
        first = {q: _ranking(approx, q) for q in QUESTIONS}
        again = Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", approximate=True, pool=5)
        assert {q: _ranking(again, q) for q in QUESTIONS} == first
        assert {q: _ranking(approx, q) for q in QUESTIONS} == first


def test_a_codes_build_interrupted_halfway_leaves_no_partial_table(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(4)
    with RunStore.open(tmp_path / "cut.duckdb") as store:
        _save_pages(store, rng)
        exact = Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", approximate=False, pool=5)
        expected = _ranking(exact, "widget server port")
        for dims in vectors.vector_table_dims(store.conn):
            vector_codes.drop(store.conn, dims)
        monkeypatch.setattr(vector_codes, "BUILD_BATCH", 2)  # many inserts, the second one interrupted
        real, calls = vector_codes._insert, []

        def cut(*args: object, **kwargs: object) -> None:
            calls.append(1)
            if len(calls) == 2:
                raise KeyboardInterrupt
            real(*args, **kwargs)

        monkeypatch.setattr(vector_codes, "_insert", cut)
        with pytest.raises(KeyboardInterrupt):
            Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", approximate=True).select("widget", "embedding")
        monkeypatch.setattr(vector_codes, "_insert", real)
        approx = Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", approximate=True, pool=5)
        assert _ranking(approx, "widget server port") == expected
        for dims in vectors.vector_table_dims(store.conn):
            counts = store.conn.execute(f"SELECT (SELECT count(*) FROM {vector_codes.codes_table(dims)}), "
                                        f"(SELECT count(*) FROM {vectors.unit_vectors_table(dims)})").fetchone()
            assert counts[0] == counts[1] > 0


def test_the_size_threshold_keeps_small_corpora_on_the_exact_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = vector_codes.rank
    monkeypatch.setattr(vector_codes, "rank", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    rng = random.Random(5)
    with RunStore.open(tmp_path / "small.duckdb") as store:
        _save_pages(store, rng)
        selector = Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m", approximate=None)  # by size
        selector.select("widget", "embedding")
        assert calls == []
        monkeypatch.setattr("jobs.select.APPROXIMATE_MIN_WINDOWS", 1)
        selector.select("widget", "embedding")
        assert calls == [1]


def test_asymmetric_scores_are_the_question_against_each_code_as_plus_or_minus_one() -> None:
    rng = np.random.default_rng(0)
    docs = rng.normal(size=(6, 70)).astype(np.float32)
    query = rng.normal(size=70).astype(np.float32)
    signs = np.where(docs > 0, 1.0, -1.0)
    assert vector_codes.asymmetric(vector_codes.encode(docs), query) == pytest.approx(signs @ query, abs=1e-4)


def test_the_first_stage_narrows_by_hamming_then_by_the_questions_floats() -> None:
    rng = np.random.default_rng(1)
    docs = rng.normal(size=(400, 64)).astype(np.float32)
    docs[10] = docs[20]  # a tie on both scores: the lower position first
    codes = vector_codes.encode(docs)
    query = docs[20] + rng.normal(0, 0.1, 64).astype(np.float32)
    query /= np.linalg.norm(query)
    codes = codes.T.copy()  # held by word
    picked = vector_codes.first_stage(codes, query, 5, 50)
    assert list(picked[:2]) == [10, 20]
    near = set(vector_codes.nearest(vector_codes.hamming(codes, vector_codes.encode(query[None, :])[0]), 50).tolist())
    assert set(picked.tolist()) <= near
    assert list(vector_codes.first_stage(codes, query, 5, 50)) == list(picked)
    assert sorted(vector_codes.first_stage(codes, query, 400, 400)) == list(range(400))


def _insert_windows(conn, dims: int, model: str, docs: range) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(docs.start)
    n = len(docs)
    vector_codes._insert(conn, dims, {
        "model": np.array([model] * n, dtype=object), "doc": np.arange(docs.start, docs.stop),
        "url": np.array([f"http://{model}.test/{d}" for d in docs], dtype=object), "ordinal": np.zeros(n, np.int64),
        "part": np.zeros(n, np.int64), "vector": list(rng.normal(size=(n, dims)).astype("<f4"))})


def test_keys_outlive_a_checkpoint_and_a_deleted_window_is_caught_not_scored(tmp_path: Path) -> None:
    # A checkpoint after deletes compacts the table and renumbers row ids: k rows deleted and k inserted (another
    # model's) gave back the same count and largest row id. Keys come from a sequence: kept, never reused.
    import duckdb

    dims = 8
    with duckdb.connect(str(tmp_path / "codes.duckdb")) as conn:
        conn.execute(vector_codes._ddl(dims))
        _insert_windows(conn, dims, "a", range(245_760))  # two row groups
        conn.execute("CHECKPOINT")
        cache = vector_codes.CodeCache()
        before = cache.get(conn, dims, "a")
        conn.execute(f"DELETE FROM {vector_codes.codes_table(dims)} WHERE doc BETWEEN 1000 AND 1999")
        _insert_windows(conn, dims, "b", range(1000))
        conn.execute("CHECKPOINT")
        fresh = cache.get(conn, dims, "a")
        assert fresh is not before  # the largest key moved
        assert np.array_equal(fresh.rowids, np.delete(before.rowids, range(1000, 2000)))  # the others kept theirs
        assert vector_codes._fetch(conn, before, np.arange(900, 1100), "a", dims) is None  # deleted: caught
        got = vector_codes._fetch(conn, fresh, np.arange(len(fresh.rowids) - 500, len(fresh.rowids)), "a", dims)
        assert got is not None and sorted(got["url"].tolist()) == sorted(f"http://a.test/{d}" for d in range(245_260, 245_760))


def test_a_codes_table_from_before_its_keys_is_built_again(tmp_path: Path) -> None:
    rng = random.Random(13)
    with RunStore.open(tmp_path / "keyless.duckdb") as store:
        _save_pages(store, rng)
        exact = Selector(store.conn, embedder=SpreadEmbedder(), embedding_model="m", approximate=False, pool=5)
        ranking = _ranking(exact, "widget server port")
        table = vector_codes.codes_table(64)
        store.conn.execute(f"CREATE TABLE {table} (model VARCHAR, doc INTEGER NOT NULL, url VARCHAR NOT NULL, "
                           "ordinal INTEGER NOT NULL, part INTEGER NOT NULL, code BLOB NOT NULL, vector BLOB NOT NULL)")
        approx = Selector(store.conn, embedder=SpreadEmbedder(), embedding_model="m", approximate=True, pool=5)
        assert _ranking(approx, "widget server port") == ranking
        assert _twins_match(store) > 0
        assert store.conn.execute(f"SELECT count(*) FROM {table} WHERE id IS NULL").fetchone() == (0,)


def test_the_codes_rank_inside_a_scope_as_the_scoped_exact_scan_and_follow_page_writes(tmp_path: Path,
                                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(12)
    calls: list[int] = []
    real = vector_codes.rank
    monkeypatch.setattr(vector_codes, "rank", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    with RunStore.open(tmp_path / "scoped.duckdb") as store:
        _save_pages(store, rng)
        exact = Selector(store.conn, embedder=SpreadEmbedder(), embedding_model="m", approximate=False, pool=6)
        approx = Selector(store.conn, embedder=SpreadEmbedder(), embedding_model="m", approximate=True, pool=6)

        def both(scope: list[str]) -> None:
            for question in QUESTIONS:  # every window of the scope re-scored: the same ranking, scores included
                expected = _ranking_in(exact, question, scope)
                assert _ranking_in(approx, question, scope) == expected and expected, (question, scope)

        for scope in (URLS[:1], URLS[2:7], URLS[:-1], URLS):
            both(scope)
        assert len(calls) == 4 * len(QUESTIONS)
        # Pages of the scope written between questions (new windows and codes, new docs): never the stale mask.
        scope = URLS[3:9]
        both(scope)
        for step, url in enumerate(scope[:3]):
            record, chunks = _page(rng, url, 50 + step)
            store.save_page(record, chunks, crawl_run_id=50 + step)
        store.delete_page(scope[4])
        both(scope)
        # A first stage narrower than the scope: only the scope's chunks, the same every time.
        monkeypatch.setattr(vector_codes, "RESCORE_WINDOWS", 8)
        first = {q: _ranking_in(approx, q, scope) for q in QUESTIONS}
        assert {c.url for q in QUESTIONS for c in approx.select(q, "embedding", urls=scope).candidates} <= set(scope)
        again = Selector(store.conn, embedder=SpreadEmbedder(), embedding_model="m", approximate=True, pool=6)
        assert {q: _ranking_in(again, q, scope) for q in QUESTIONS} == first
        assert len(calls) > 4 * len(QUESTIONS) + 3 * len(QUESTIONS)


def _ranking_in(selector: Selector, question: str, scope: list[str]) -> list[tuple[str, float]]:
    return [(c.chunk_id, round(c.score, 5)) for c in selector.select(question, "embedding", urls=scope).candidates]


def test_keys_stay_unique_across_rebuilds_and_drops(tmp_path: Path) -> None:
    # A rebuild (or a drop, then the first approximate question) restarted the keys at 1: a cache loaded before
    # met the same count and largest key over other windows.
    rng = random.Random(14)
    with RunStore.open(tmp_path / "keys.duckdb") as store:
        _save_pages(store, rng)
        Selector(store.conn, embedder=SpreadEmbedder(), embedding_model="m", approximate=True).select("widget", "embedding")
        (dims,) = vectors.vector_table_dims(store.conn)
        table = vector_codes.codes_table(dims)
        seen: list[list[int]] = []
        for step in range(3):
            seen.append([k for (k,) in store.conn.execute(f"SELECT id FROM {table} ORDER BY id").fetchall()])
            if step == 0:
                vector_codes.rebuild(store.conn, dims)
            else:
                vector_codes.drop(store.conn, dims)
                Selector(store.conn, embedder=SpreadEmbedder(), embedding_model="m",
                         approximate=True).select("widget", "embedding")
        seen.append([k for (k,) in store.conn.execute(f"SELECT id FROM {table} ORDER BY id").fetchall()])
        assert all(len(keys) == len(seen[0]) > 0 for keys in seen)
        assert all(min(later) > max(earlier) for earlier, later in zip(seen, seen[1:]))


def test_the_codes_of_several_scopes_are_cut_once_each(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the last scope's cut was kept: a job mixing scopes cut its codes again on every switch.
    cuts: list[int] = []
    real = np.isin
    monkeypatch.setattr(vector_codes.np, "isin", lambda a, b: cuts.append(len(b)) or real(a, b))
    rng = np.random.default_rng(1)
    docs = np.repeat(np.arange(50, dtype=np.int64), 2)
    loaded = vector_codes._Codes((), np.arange(100), rng.integers(0, 2**63, (4, 100), dtype=np.uint64), docs,
                                 np.tile([0, 1], 50))
    cache = vector_codes.CodeCache()
    job, own, every = np.arange(0, 30, dtype=np.int64), np.array([40, 41], dtype=np.int64), np.arange(50, dtype=np.int64)
    for _ in range(4):
        for scope in (job, own, every):
            codes, positions = cache.scoped(loaded, scope)
            if scope is every:
                assert codes is loaded.codes and positions is None
            else:
                assert positions is not None and (loaded.docs[positions] == np.repeat(scope, 2)).all()
                assert (codes == loaded.codes[:, positions]).all()
    assert cuts == [30, 2, 50]


def test_the_exact_scan_inside_a_scope_filters_by_the_scopes_docs_with_the_same_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # It filtered every window by list_contains on the scope's urls, slow in a large scope.
    from jobs.select import _unit_length
    from pipelines import search_scope

    rng = random.Random(13)
    scopes: list[object] = []
    real = vectors.rank
    monkeypatch.setattr(vectors, "rank", lambda conn, vector, model, scope, **kw: scopes.append(scope) or real(
        conn, vector, model, scope, **kw))
    with RunStore.open(tmp_path / "exact.duckdb") as store:
        _save_pages(store, rng)
        exact = Selector(store.conn, embedder=SpreadEmbedder(), embedding_model="m", approximate=False, pool=6)
        for scope in (URLS[:1], URLS[2:7], URLS[:-1], URLS):
            for question in QUESTIONS:
                scopes.clear()
                got = [(c.chunk_id, c.score) for c in exact.select(question, "embedding", urls=scope).candidates]
                assert len(scopes) == 1 and isinstance(scopes[0], search_scope.DocScope)
                vector = _unit_length(SpreadEmbedder().embed([question])[0])
                by_urls = real(store.conn, vector, exact.vector_space, sorted(scope), pool=6)
                assert got == [(r[0], r[5]) for r in by_urls] and got, (question, scope)
