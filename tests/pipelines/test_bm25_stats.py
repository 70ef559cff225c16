"""BM25's stored statistics (bm25_terms, bm25_stats) stay equal to a recount from the index rows through page
inserts, re-crawl edits and deletes, and BM25 ranks exactly as when it counted them per question from the rows.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest

from jobs.runstore import RunStore
from pipelines import languages, schema, search_index
from pipelines.store import Store
from tests.support.index_pages import QUESTIONS, URLS, random_page

# BM25_SQL as it was before the statistics were stored: document count and average length over every doc,
# document frequencies counted from the question's postings.
_COUNTED_STATS = """hits AS MATERIALIZED (
    SELECT p.term, p.doc, p.tf_heading, p.tf_text, p.len FROM bm25_postings p WHERE p.term IN (SELECT term FROM tokens)
),
stats AS (SELECT count(*) AS num_docs, sum(len) / count(len) AS avgdl FROM selection_docs),
qterms AS (
    SELECT term, log(((st.num_docs - df) + 0.5) / (df + 0.5) + 1) AS idf
    FROM (SELECT term, count(*) AS df FROM hits GROUP BY term), stats st
),
"""


def counted_bm25_sql() -> str:
    head, rest = search_index.BM25_SQL.split("stats AS (", 1)
    scored = rest[rest.index("scored AS MATERIALIZED"):]
    assert "FROM bm25_postings h JOIN" in scored
    return head + _COUNTED_STATS + scored.replace("FROM bm25_postings h JOIN", "FROM hits h JOIN", 1)


def stored(conn: Any) -> tuple[list[Any], list[Any]]:
    return (conn.execute("SELECT term, df FROM bm25_terms WHERE df > 0 ORDER BY ALL").fetchall(),
            conn.execute("SELECT lang, docs, total_len FROM bm25_stats WHERE docs > 0 ORDER BY ALL").fetchall())


def recounted(conn: Any) -> tuple[list[Any], list[Any]]:
    return (conn.execute("SELECT term, count(*) FROM bm25_postings GROUP BY term ORDER BY ALL").fetchall(),
            conn.execute("SELECT lang, count(*), sum(len) FROM selection_docs GROUP BY lang ORDER BY ALL").fetchall())


def rankings(store: Store, sql: str | None) -> dict[tuple[str, int, str], list[tuple[Any, ...]]]:
    """Every question's bm25 rows (ids, scores, order), unscoped and scoped, narrow and wide; ``sql`` None:
    the product's search_index.bm25_rank, else that SQL with the stemmer told from every doc's language."""
    store.load_fts()
    conn = store.conn
    got = {}
    for pool in (3, 1000):
        for question in QUESTIONS:
            for scope in (None, URLS[2:8]):
                if sql is None:
                    rows = search_index.bm25_rank(conn, question, scope, pool=pool, k1=1.2, b=0.5, heading_weight=3.0)
                else:
                    langs = [r[0] for r in conn.execute("SELECT DISTINCT lang FROM selection_docs ORDER BY 1").fetchall()]
                    rows = conn.execute(sql, {"q": question, "urls": scope, "pool": pool, "k1": 1.2, "b": 0.5,
                                              "heading_weight": 3.0,
                                              "lang": languages.question_stemmer(question, langs)}).fetchall()
                got[(question, pool, str(scope))] = [(r[0], r[5]) for r in rows]
    return got


def crawl_randomly(store: RunStore, seed: int, steps: int = 80) -> dict[str, int]:
    """Inserts, re-crawl edits (a page's chunks replaced), unchanged re-saves and deletes, some pages in Spanish."""
    rng = random.Random(seed)
    ops = {"new": 0, "changed": 0, "unchanged": 0, "deleted": 0}
    saved: dict[str, Any] = {}
    for step in range(steps):
        url = rng.choice(URLS)
        roll = rng.random()
        if url in saved and roll < 0.2:
            assert store.delete_page(url)
            del saved[url]
            ops["deleted"] += 1
            continue
        if url in saved and roll < 0.35:
            record, chunks = saved[url]
        else:
            record, chunks = random_page(rng, url, step)
            record = dataclasses.replace(record, lang="es" if rng.random() < 0.3 else "en")
            saved[url] = (record, chunks)
        ops[store.save_page(record, chunks, crawl_run_id=step)] += 1
    return ops


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_stored_statistics_equal_a_recount_after_inserts_edits_and_deletes(tmp_path: Path, seed: int) -> None:
    with RunStore.open(tmp_path / "s.duckdb") as store:
        ops = crawl_randomly(store, seed)
        assert all(ops.values()), ops
        terms, stats = stored(store.conn)
        assert (terms, stats) == recounted(store.conn)
        assert len(terms) > 10 and {lang for lang, *_ in stats} == {"porter", "spanish"}
        # A term whose last doc left (a page edited or deleted) leaves bm25_terms with it.
        assert store.conn.execute("SELECT count(*) FROM bm25_terms WHERE df <= 0").fetchone() == (0,)
        # Deleting every page leaves no document and no term counted, nor any row for the terms seen.
        for url in URLS:
            store.delete_page(url)
        assert stored(store.conn) == ([], []) == recounted(store.conn)
        assert store.conn.execute("SELECT count(*) FROM bm25_terms").fetchone() == (0,)


def test_a_chunk_id_repeated_in_one_batch_is_counted_once_per_posting(tmp_path: Path) -> None:
    urls = ["http://a.test/", "http://b.test/"]
    rows = [("same-id", url, 0, "Intro", "widget port alpha", 3, "h", "k") for url in urls]
    with RunStore.open(tmp_path / "d.duckdb") as store:
        store.load_fts()
        with store.transaction():
            search_index.index_pages(store.conn, urls, rows)
        assert store.conn.execute("SELECT count(DISTINCT doc) FROM bm25_postings").fetchone() == (2,)
        assert stored(store.conn) == recounted(store.conn)


def test_a_drifted_document_count_makes_the_index_stale(tmp_path: Path) -> None:
    with RunStore.open(tmp_path / "g.duckdb") as store:
        crawl_randomly(store, 4)
        assert not store.fts_is_stale()
        store.conn.execute("UPDATE bm25_stats SET docs = docs + 1 WHERE lang = 'porter'")
        assert store.fts_is_stale()
        store.rebuild_fts()
        assert not store.fts_is_stale() and stored(store.conn) == recounted(store.conn)


def test_bm25_ranks_as_when_it_counted_the_statistics_per_question(tmp_path: Path) -> None:
    with RunStore.open(tmp_path / "r.duckdb") as store:
        crawl_randomly(store, 5)
        now, before = rankings(store, None), rankings(store, counted_bm25_sql())
    assert now == before
    # Not vacuous: many rankings, scores tied across pages, and narrow pools cut inside the ties.
    assert sum(len(r) for r in now.values()) > 100
    assert any(len({s for _, s in r}) < len(r) for r in now.values())


def test_a_full_build_counts_the_statistics_as_page_writes_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Several slices, and their postings rewritten in several term ranges, as at a million chunks.
    monkeypatch.setattr(search_index, "REBUILD_SLICE_CHUNKS", 5)
    monkeypatch.setattr(search_index, "SORT_PIECE_POSTINGS", 40)
    with RunStore.open(tmp_path / "f.duckdb") as store:
        crawl_randomly(store, 6)
        incremental = rankings(store, None)
        postings = "SELECT p.term, s.chunk_id, p.tf_heading, p.tf_text, p.len FROM bm25_postings p JOIN selection_docs s USING (doc)"
        before = sorted(store.conn.execute(postings).fetchall())
        store.rebuild_fts()
        assert sorted(store.conn.execute(postings).fetchall()) == before
        # Stored in one (term, doc) order across the slices: a question's rows in one run.
        store.conn.execute("SET threads = 1")
        stored_order = store.conn.execute("SELECT term, doc FROM bm25_postings").fetchall()
        assert stored_order == sorted(stored_order) and len({t for t, _ in stored_order}) > 10
        assert stored(store.conn) == recounted(store.conn)
        # A full build drops the terms whose last doc left, and writes them in term order.
        assert store.conn.execute("SELECT count(*) FROM bm25_terms WHERE df = 0").fetchone() == (0,)
        terms = [t for (t,) in store.conn.execute("SELECT term FROM bm25_terms").fetchall()]
        assert terms == sorted(terms)
        assert rankings(store, None) == incremental


def test_a_database_of_schema_10_gets_its_statistics_counted_without_a_full_build(tmp_path: Path) -> None:
    db = tmp_path / "v10.duckdb"
    with RunStore.open(db) as store:
        crawl_randomly(store, 8)
        before = rankings(store, None)
        store.conn.execute("DROP TABLE bm25_terms")  # what schema 10 had: no stored statistics
        store.conn.execute("DROP TABLE bm25_stats")
        store.conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', '10')")
        docs = store.conn.execute("SELECT list(doc ORDER BY doc) FROM selection_docs").fetchone()
    with RunStore.open(db) as store:
        assert not store.fts_is_stale()
        assert store.conn.execute("SELECT list(doc ORDER BY doc) FROM selection_docs").fetchone() == docs  # not rebuilt
        assert stored(store.conn) == recounted(store.conn) and stored(store.conn)[0]
        assert rankings(store, None) == before
        assert store.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            str(schema.SCHEMA_VERSION),)


def test_pruned_bm25_returns_exactly_the_full_rows_and_prunes_often(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Questions mixing rare and common words, pools cut inside ties: the pruned ranking (MaxScore) equals
    BM25_SQL's rows, scores included, whether its bound held at the first try, the second, or not at all. Questions
    scoped by urls take BM25_SQL alone (a scope resolved into docs is pruned too: tests/pipelines/test_search_scope.py)."""
    monkeypatch.setattr(search_index, "PRUNE_MIN_DOCS", 1)  # pruned from the first doc on (300,000 in the product)
    rng = random.Random(11)
    vocab = [f"w{i}" for i in range(40)]
    urls = [f"http://p.test/{i}" for i in range(60)]
    with RunStore.open(tmp_path / "p.duckdb") as store:
        for n, url in enumerate(urls):
            record, chunks = random_page(rng, url, 0)
            # Zipf-like words: w0 in most chunks, w39 in a few; copies of one text tie across pages.
            chunks = [dataclasses.replace(c, text=" ".join(vocab[min(int(rng.paretovariate(0.6)) - 1, 39)]
                                                           for _ in range(rng.randint(1, 30)))
                                          if n % 7 else "w0 w1 w30 w30") for c in chunks]
            store.save_page(record, chunks, crawl_run_id=1)
        store.load_fts()
        queries: list[str] = []

        class Recording:  # which queries answered each question
            def __init__(self, conn: Any) -> None:
                self.conn = conn

            def execute(self, sql: str, params: Any = None) -> Any:
                queries.append({search_index.BM25_PRUNED_SQL: "p", search_index.BM25_SQL: "f"}.get(sql, ""))
                return self.conn.execute(sql, params)

        paths: dict[bool, list[str]] = {False: [], True: []}
        for _ in range(240):
            question = " ".join(rng.sample(vocab, rng.randint(1, 5)))
            pool = rng.choice([1, 3, 10, 40])
            scope = rng.choice([None, rng.sample(urls, rng.choice([3, 15, 40, 60]))])
            queries.clear()
            got = search_index.bm25_rank(Recording(store.conn), question, scope, pool=pool, k1=1.2, b=0.5,  # type: ignore[arg-type]
                                         heading_weight=3.0)
            full = store.conn.execute(search_index.BM25_SQL, {"q": question, "urls": scope, "pool": pool, "k1": 1.2,
                                                              "b": 0.5, "heading_weight": 3.0, "lang": "porter"}).fetchall()
            assert got == full, (question, scope)
            paths[scope is not None].append("".join(queries))
    # Not vacuous: answered pruned at the first try, at the second, and by the full query after a failed bound.
    path = paths[False]
    assert path.count("p") > 10 and "pp" in path and any(p.startswith("p") and p.endswith("f") for p in path), path
    assert set(paths[True]) == {"f"}


def test_small_indexes_rank_without_pruning(tmp_path: Path) -> None:
    with RunStore.open(tmp_path / "small.duckdb") as store:
        crawl_randomly(store, 9)
        store.load_fts()
        queries: list[str] = []

        class Recording:
            def execute(self, sql: str, params: Any = None) -> Any:
                queries.append(sql)
                return store.conn.execute(sql, params)

        search_index.bm25_rank(Recording(), "widget server port", None, pool=1, k1=1.2, b=0.5,  # type: ignore[arg-type]
                               heading_weight=3.0)
    assert search_index.BM25_SQL in queries and search_index.BM25_PRUNED_SQL not in queries
