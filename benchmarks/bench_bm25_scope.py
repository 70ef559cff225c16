"""BM25 inside a selection scope (a job's pages) at scale: BM25_SQL scoped against bm25_rank (the product's
path; it prunes unscoped questions only), CPU and wall per question, for scopes of a fraction of the pages.

    nice .venv/bin/python benchmarks/bench_bm25_scope.py DB QUESTIONS FRACTIONS
    e.g. DB = a bench_select.py database of 1,000,000 chunks (opened read-only), 10, 0.01,0.1,1.0
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import duckdb  # noqa: E402

from pipelines import search_index  # noqa: E402

PARAMS = {"pool": 40, "k1": 1.2, "b": 0.75, "heading_weight": 2.0}


def timed(f: Callable[[], Any]) -> tuple[float, float, Any]:
    cpu, wall = time.process_time(), time.perf_counter()
    rows = f()
    return time.process_time() - cpu, time.perf_counter() - wall, rows


def main(db: str, count: int, fractions: str) -> None:
    conn = duckdb.connect(db, read_only=True)
    search_index.load_fts(conn)
    urls = [u for (u,) in conn.execute("SELECT DISTINCT url FROM selection_docs ORDER BY url").fetchall()]
    questions = list(common.QUESTIONS)[:count]
    rng = random.Random(1)
    for fraction in (float(x) for x in fractions.split(",")):
        scope = sorted(rng.sample(urls, max(1, int(len(urls) * fraction))))
        totals, same = [0.0, 0.0, 0.0, 0.0], 0
        for q in questions:
            full = timed(lambda: conn.execute(search_index.BM25_SQL, {"q": q, "urls": scope, "lang": "porter",
                                                                       **PARAMS}).fetchall())
            ranked = timed(lambda: search_index.bm25_rank(conn, q, scope, **PARAMS))
            totals = [t + x for t, x in zip(totals, (*full[:2], *ranked[:2]))]
            same += full[2] == ranked[2]
        ms = [round(t / len(questions) * 1000) for t in totals]
        print(f"scope {fraction:.0%} ({len(scope)} of {len(urls)} urls): BM25_SQL {ms[0]} ms CPU ({ms[1]} wall) | "
              f"bm25_rank {ms[2]} ms CPU ({ms[3]} wall) | rows equal {same}/{len(questions)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
