"""Diagnostics behind the missed goals: what DuckDB calls cost as the product makes them, and as they could.

Not a benchmark of the product's goals; a set of side-by-side measurements that explain them (see
benchmarks/HISTORY.md, "What looked wrong in the product"). Each line: the product's way, then an alternative
that returns the same rows, each the median of several runs in one process.

1. Binding a 384-float query vector as a Python list parameter (``jobs/select.py`` embedding query) —
   counts the module look-ups it causes — vs passing the same vector as one JSON string cast in SQL.
2. Writing 50 selection rows with ``executemany`` (``RunStore.save_attempt``) and 15 chunk rows
   (``Store.save_page``) vs one statement reading the rows from one JSON string parameter.
3. BM25 over N chunks with ``fts_main_<table>.match_bm25`` over every chunk (``Selector.bm25``) vs the
   same BM25 formula over the fts tables, with the postings copied once in term order so the scan of
   a question's terms skips the rest (same top 50, same scores).

    .venv/bin/python benchmarks/diag_duckdb.py [--chunks 100000] [--db BENCH.duckdb]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common


class _Spy:
    def __init__(self) -> None:
        self.count = 0

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        self.count += 1
        return None


def _median_ms(fn: Callable[[], Any], runs: int = 7) -> float:
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def _lookups(fn: Callable[[], Any]) -> int:
    spy = _Spy()
    sys.meta_path.insert(0, spy)
    try:
        fn()
    finally:
        sys.meta_path.remove(spy)
    return spy.count


def bind_and_write(out: dict[str, Any]) -> None:
    import duckdb

    conn = duckdb.connect()
    vector = [((i * 7919) % 20000) / 10000 - 1 for i in range(384)]
    as_list = lambda: conn.execute("SELECT $q::FLOAT[384]", {"q": vector}).fetchall()  # noqa: E731
    as_json = lambda: conn.execute("SELECT $q::FLOAT[384]", {"q": json.dumps(vector)}).fetchall()  # noqa: E731
    out["vector_bind_list_ms"] = round(_median_ms(as_list), 2)
    out["vector_bind_list_lookups"] = _lookups(as_list)
    out["vector_bind_json_ms"] = round(_median_ms(as_json), 2)
    out["vector_bind_json_lookups"] = _lookups(as_json)

    conn.execute("CREATE TABLE s (answer_id BIGINT, chunk_id VARCHAR, url VARCHAR, heading_path VARCHAR, rank INT, "
                 "score DOUBLE, keyword_score DOUBLE, bm25_score DOUBLE, embedding_score DOUBLE, "
                 "matched_terms VARCHAR[], tokens INT, sent BOOLEAN, source_number INT, reason VARCHAR)")
    names = ["answer_id", "chunk_id", "url", "heading_path", "rank", "score", "keyword_score", "bm25_score",
             "embedding_score", "matched_terms", "tokens", "sent", "source_number", "reason"]
    rows = [[1, f"c{i:03d}", "http://127.0.0.1/library/json.html", "json › Basic Usage", i, 0.03, None, 7.5, 0.41,
             ["json", "pars"], 300, i < 6, i if i < 6 else None, "below top_k=6"] for i in range(50)]
    types = ('[{"answer_id":"BIGINT","chunk_id":"VARCHAR","url":"VARCHAR","heading_path":"VARCHAR","rank":"INTEGER",'
             '"score":"DOUBLE","keyword_score":"DOUBLE","bm25_score":"DOUBLE","embedding_score":"DOUBLE",'
             '"matched_terms":"VARCHAR[]","tokens":"INTEGER","sent":"BOOLEAN","source_number":"INTEGER",'
             '"reason":"VARCHAR"}]')
    payload = json.dumps([dict(zip(names, r)) for r in rows])
    many = lambda: conn.executemany(f"INSERT INTO s VALUES ({', '.join('?' * 14)})", rows)  # noqa: E731
    one = lambda: conn.execute(f"INSERT INTO s SELECT unnest(from_json($rows, '{types}'), recursive := true)",  # noqa: E731
                               {"rows": payload})
    out["selections_50_executemany_ms"] = round(_median_ms(many), 1)
    out["selections_50_executemany_lookups"] = _lookups(many)
    out["selections_50_one_json_ms"] = round(_median_ms(one), 2)
    before = conn.execute("SELECT count(*) FROM s").fetchone()[0]
    one()
    if conn.execute("SELECT count(*) FROM s").fetchone()[0] != before + 50:
        raise SystemExit("the JSON insert did not write 50 rows")

    conn.execute("CREATE TABLE c (chunk_id VARCHAR PRIMARY KEY, url VARCHAR NOT NULL, ordinal INTEGER NOT NULL, "
                 "heading_path VARCHAR NOT NULL, text VARCHAR NOT NULL, token_estimate INTEGER NOT NULL, "
                 "content_hash VARCHAR NOT NULL, embed_key VARCHAR NOT NULL)")
    conn.execute("CREATE INDEX c_url ON c (url)")
    text = "The json module exposes an API familiar to users of the marshal and pickle modules. " * 20
    counter = iter(range(10**9))

    def chunk_rows() -> list[list[Any]]:
        n = next(counter)
        return [[f"p{n}-{i}", f"http://h/{n}.html", i, "json › Basic Usage", text, 350, "h" * 64, "k" * 64]
                for i in range(15)]

    c_types = ('[{"chunk_id":"VARCHAR","url":"VARCHAR","ordinal":"INTEGER","heading_path":"VARCHAR","text":"VARCHAR",'
               '"token_estimate":"INTEGER","content_hash":"VARCHAR","embed_key":"VARCHAR"}]')
    c_names = ["chunk_id", "url", "ordinal", "heading_path", "text", "token_estimate", "content_hash", "embed_key"]
    c_many = lambda: conn.executemany("INSERT OR REPLACE INTO c VALUES (?, ?, ?, ?, ?, ?, ?, ?)", chunk_rows())  # noqa: E731
    c_one = lambda: conn.execute(  # noqa: E731
        f"INSERT OR REPLACE INTO c SELECT unnest(from_json($rows, '{c_types}'), recursive := true)",
        {"rows": json.dumps([dict(zip(c_names, r)) for r in chunk_rows()])})
    out["chunks_15_executemany_ms"] = round(_median_ms(c_many), 1)
    out["chunks_15_one_json_ms"] = round(_median_ms(c_one), 2)


def bm25_compare(db: Path, out: dict[str, Any]) -> None:
    from pipelines.store import Store

    with Store.open(db) as store:
        store.load_fts()
        conn = store.conn
        out["chunks"] = store.count_chunks()
        t0 = time.perf_counter()
        conn.execute("CREATE OR REPLACE TEMP TABLE terms_by_term AS SELECT * FROM fts_main_chunks.terms ORDER BY termid")
        out["terms_copy_s"] = round(time.perf_counter() - t0, 2)
        out["postings"] = conn.execute("SELECT count(*) FROM terms_by_term").fetchone()[0]
        product = """
            SELECT chunk_id, score FROM (
                SELECT chunk_id, url, ordinal, fts_main_chunks.match_bm25(chunk_id, $q) AS score FROM chunks
            ) WHERE score IS NOT NULL ORDER BY score DESC, url, ordinal LIMIT 50"""
        # The formula of DuckDB's match_bm25 (k = 1.2, b = 0.75, disjunctive), restricted to the question's terms.
        direct = """
            WITH tokens AS (SELECT DISTINCT stem(unnest(fts_main_chunks.tokenize($q)), 'porter') AS t),
            qterms AS (SELECT termid, docid FROM terms_by_term WHERE termid IN (
                SELECT termid FROM fts_main_chunks.dict d JOIN tokens ON d.term = tokens.t)),
            tf AS (SELECT termid, docid, count(*) AS tf FROM qterms GROUP BY ALL),
            scores AS (
                SELECT tf.docid, sum(log(((SELECT num_docs FROM fts_main_chunks.stats) - d.df + 0.5) / (d.df + 0.5) + 1)
                    * (tf.tf * 2.2 / (tf.tf + 1.2 * (0.25 + 0.75 * docs.len / (SELECT avgdl FROM fts_main_chunks.stats)))))
                    AS score
                FROM tf JOIN fts_main_chunks.dict d USING (termid) JOIN fts_main_chunks.docs docs USING (docid)
                GROUP BY tf.docid)
            SELECT c.chunk_id, s.score FROM scores s JOIN fts_main_chunks.docs docs USING (docid)
            JOIN chunks c ON c.chunk_id = docs.name ORDER BY s.score DESC, c.url, c.ordinal LIMIT 50"""
        product_ms, direct_ms, same, max_diff = [], [], 0, 0.0
        questions = [" ".join("".join(ch if ch.isalnum() else " " for ch in q.lower()).split())
                     for q in common.QUESTIONS[:10]]
        for q in questions:
            a = conn.execute(product, {"q": q}).fetchall()
            b = conn.execute(direct, {"q": q}).fetchall()
            # Near-identical copies score within rounding of each other, so their order may differ: compare
            # the sets of chunks and the scores in rank order.
            same += {r[0] for r in a} == {r[0] for r in b}
            max_diff = max([max_diff, *(abs(x[1] - y[1]) for x, y in zip(a, b))])
            product_ms.append(_median_ms(lambda: conn.execute(product, {"q": q}).fetchall(), runs=3))
            direct_ms.append(_median_ms(lambda: conn.execute(direct, {"q": q}).fetchall(), runs=3))
        out["bm25_questions"] = len(questions)
        out["bm25_same_top50"] = same
        out["bm25_max_score_diff"] = max_diff
        out["bm25_match_bm25_median_ms"] = round(statistics.median(product_ms), 1)
        out["bm25_term_ordered_median_ms"] = round(statistics.median(direct_ms), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000, help="bench database size for the BM25 comparison")
    parser.add_argument("--db", type=Path, help="an existing bench database (from bench_select.py --build)")
    parser.add_argument("--source", type=Path, help="corpus database to replicate (default: results/corpus.duckdb)")
    parser.add_argument("--max-wait", type=float, default=15.0,
                        help="wait up to this many seconds for a quiet machine before measuring (default 15)")
    parser.add_argument("--bm25-worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--bind-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    common.stop_cleanly_on_sigterm()
    if args.bind_worker:
        out: dict[str, Any] = {}
        bind_and_write(out)
        print(json.dumps(out))
        return
    if args.bm25_worker:
        out = {}
        bm25_compare(args.bm25_worker, out)
        print(json.dumps(out))
        return

    machine = common.machine_info()
    common.print_machine(machine)
    figures: dict[str, Any] = {}
    me = Path(__file__).resolve()
    # pandas is not installed here (it is not a webqa dependency); DuckDB's Python client looks for it.
    have_pandas = __import__("importlib.util").util.find_spec("pandas") is not None
    figures["pandas_installed"] = have_pandas
    figures["before"] = common.wait_for_quiet(args.max_wait)
    bind = common.run_measured([common.PYTHON, me, "--bind-worker"]).check()
    figures.update(json.loads(bind.stdout.strip().splitlines()[-1]))
    print(f"1. query vector, 384 floats: as a list parameter {figures['vector_bind_list_ms']:.1f} ms "
          f"({figures['vector_bind_list_lookups']} module look-ups), as one JSON string {figures['vector_bind_json_ms']:.2f} ms "
          f"({figures['vector_bind_json_lookups']}); pandas installed: {have_pandas}")
    print(f"2. 50 selection rows: executemany {figures['selections_50_executemany_ms']:.1f} ms "
          f"({figures['selections_50_executemany_lookups']} look-ups), one JSON parameter "
          f"{figures['selections_50_one_json_ms']:.2f} ms; 15 chunk rows: executemany "
          f"{figures['chunks_15_executemany_ms']:.1f} ms, one JSON parameter {figures['chunks_15_one_json_ms']:.2f} ms")
    with common.temp_dir("diag") as tmp:
        db = args.db
        if db is None:
            source = common.ensure_corpus_db(args.source)
            db = tmp / f"bench-{args.chunks}.duckdb"
            print(f"building a {args.chunks}-chunk bench database ...")
            common.run_measured([common.PYTHON, common.REPO / "benchmarks" / "bench_select.py", "--build", source, db,
                                 args.chunks], timeout=900).check()
        ran = common.run_measured([common.PYTHON, me, "--bm25-worker", db], timeout=900).check()
        figures.update(json.loads(ran.stdout.strip().splitlines()[-1]))
    figures["load"] = ran.load
    print(f"3. BM25 over {figures['chunks']:,} chunks ({figures['postings']:,} postings), {figures['bm25_questions']} "
          f"questions: match_bm25 {figures['bm25_match_bm25_median_ms']:.0f} ms median, term-ordered postings "
          f"{figures['bm25_term_ordered_median_ms']:.0f} ms (same top-50 chunks for "
          f"{figures['bm25_same_top50']}/{figures['bm25_questions']}, scores within {figures['bm25_max_score_diff']:.1e}; "
          f"copying the postings once: "
          f"{figures['terms_copy_s']:.1f} s); {common.load_note(ran.load)}")
    path = common.save_result("diag_duckdb", figures, command=common.command_line(), machine=machine)
    print(f"results: {path.relative_to(common.REPO)}")


if __name__ == "__main__":
    sys.exit(main())
