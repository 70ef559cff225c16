"""The embedding index at scale (issue 29, item 2): memory of the first question and of the index build, the
embedding leg's parts, and the codes' recall on realistic vectors, on a database built by bench_select.py.

Each subcommand runs in a process of its own (its peak RSS, VmHWM, is its own) and prints one JSON line:

    .venv/bin/python benchmarks/bench_vectors_scale.py first-question DB     # the Selector's look for un-embedded windows
    .venv/bin/python benchmarks/bench_vectors_scale.py recall DB --real-vectors REAL.duckdb [--rescore 1000,300]
    .venv/bin/python benchmarks/bench_vectors_scale.py index-build DB [--memory-limit none]   # unit vectors + codes

DB: ``bench_select.py --build SOURCE DB SIZE [--no-index]`` (chunks, windows and hashed vectors).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import common
from bench_select import _VECTOR_SQL, DIMS, MODEL, PrecomputedEmbedder, _vm_kib


def _mib(field: str) -> int:
    return round(_vm_kib(field) / 1024)


def first_question(db: Path, approximate: str, limit: str | None) -> None:
    """The first question's own costs: the look for windows without vectors (Selector.embed_missing over the
    whole database, which finds none on a built bench database), then one embedding selection."""
    from jobs.select import Selector
    from pipelines.store import Store

    out: dict[str, Any] = {"load_average_1m": os.getloadavg()[0]}
    with Store.open(db) as store:
        question = "How do I read a file line by line?"
        vector = store.conn.execute(f"SELECT {_VECTOR_SQL % '$q'}", {"q": "question " + question}).fetchone()[0]
        if limit:  # DuckDB's own bound on its cache (default: 80% of the machine's memory)
            store.conn.execute(f"SET memory_limit = '{limit}'")
        selector = Selector(store.conn, embedder=PrecomputedEmbedder({question: vector}), embedding_model=MODEL,
                            approximate={"on": True, "off": False}[approximate])
        out["rss_before_mib"] = _mib("VmRSS")
        t, cpu = time.perf_counter(), time.process_time()
        out["missing_windows"] = selector.embed_missing(None)
        out["lookup_s"], out["lookup_cpu_s"] = round(time.perf_counter() - t, 2), round(time.process_time() - cpu, 2)
        out["lookup_peak_mib"] = _mib("VmHWM")
        t, cpu = time.perf_counter(), time.process_time()
        selection = selector.select(question, "embedding")
        out["select_s"], out["select_cpu_s"] = round(time.perf_counter() - t, 2), round(time.process_time() - cpu, 2)
        out["candidates"] = len(selection.candidates)
        out["peak_mib"] = _mib("VmHWM")
        out["rss_after_mib"] = _mib("VmRSS")
    print(json.dumps(out))


def index_build(db: Path, limit: str | None, checkpoint: bool) -> None:
    """The embedding index's full build alone: selection_docs numbered by SQL as a full build numbers them
    (committed first; bm25's postings are not this benchmark's), then every unit vector and its binary code in
    one transaction, as ``Store.rebuild_fts`` builds them, under its memory limit (``limit``: another one;
    'none': DuckDB's default, 80% of the machine's memory, as before)."""
    from pipelines import vector_codes, vectors
    from pipelines.duckdb_connect import memory_limit
    from pipelines.defaults import INDEX_BUILD_MEMORY_LIMIT
    from pipelines.store import Store

    with Store.open(db) as store:
        conn = store.conn
        with store.transaction():
            conn.execute("DELETE FROM bm25_postings")
            conn.execute("DELETE FROM selection_docs")
            conn.execute("INSERT INTO selection_docs SELECT (row_number() OVER (ORDER BY url, ordinal))::INTEGER, "
                         "chunk_id, url, ordinal, embed_key, 0, 'porter' FROM chunks ORDER BY 1")
            conn.execute(vector_codes._ddl(DIMS))  # the codes are kept: a database whose selections used them
        limit = limit or INDEX_BUILD_MEMORY_LIMIT
        bound = contextlib.nullcontext() if limit == "none" else memory_limit(conn, limit)
        out: dict[str, Any] = {"memory_limit": limit, "load_average_1m": os.getloadavg()[0],
                               "rss_before_mib": _mib("VmRSS")}
        t, cpu = time.perf_counter(), time.process_time()
        with bound:
            with store.transaction():
                vectors.rebuild_all(conn)
            if checkpoint:
                conn.execute("CHECKPOINT")
        out.update(build_s=round(time.perf_counter() - t, 1), build_cpu_s=round(time.process_time() - cpu, 1),
                   peak_mib=_mib("VmHWM"), load_average_1m_after=os.getloadavg()[0])
        out["peak_with_checkpoint_mib"] = _mib("VmHWM")
        out["rows"] = {table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                       for table in (vectors.unit_vectors_table(DIMS), vector_codes.codes_table(DIMS))}
    print(json.dumps(out))


def real_questions(real: Path, count: int) -> list[list[float]]:
    """``count`` question vectors: real all-minilm vectors of ``real`` (evenly spaced in key order) plus noise
    of scale 0.08 (cosine to their vector about 0.75), unit length; deterministic."""
    import duckdb
    import numpy as np

    from bench_select import REAL_MODEL

    with duckdb.connect(str(real), read_only=True) as conn:
        rows = conn.execute(f"SELECT vector FROM embeddings WHERE model = $m AND dims = {DIMS} ORDER BY embed_key",
                            {"m": REAL_MODEL}).fetchall()
    vectors = np.asarray([r[0] for r in rows], dtype=np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    seeds = vectors[np.linspace(0, len(vectors) - 1, count).astype(int)]
    noisy = seeds + 0.08 * np.random.default_rng(29).uniform(-1, 1, seeds.shape)
    return (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).tolist()


def recall(db: Path, real: Path, count: int, rescore: list[int]) -> None:
    """The codes' first stage against the exact scan on a --real-vectors database: recall of the exact top 50
    chunks per question, identical rankings, CPU per question, and whether two fresh caches agree."""
    from pipelines import vector_codes, vectors
    from pipelines.store import Store

    questions = real_questions(real, count)
    out: dict[str, Any] = {"questions": len(questions), "load_average_1m": os.getloadavg()[0], "rescore": {}}
    with Store.open(db) as store:
        conn = store.conn
        exact, cpu_exact = [], []
        for vector in questions:
            cpu = time.process_time()
            exact.append([r[0] for r in vectors.rank(conn, vector, MODEL, None, pool=50)])
            cpu_exact.append(time.process_time() - cpu)
        out["exact_cpu_median_ms"] = round(common.median(cpu_exact) * 1000, 1)
        for windows in rescore:
            runs = []
            for _ in range(2):  # two fresh caches: the same answer both times
                cache, ranked, cpu_s = vector_codes.CodeCache(), [], []
                cache.get(conn, DIMS, MODEL)
                for vector in questions:
                    cpu = time.process_time()
                    rows = vector_codes.rank(conn, cache, vector, MODEL, pool=50, windows=windows)
                    cpu_s.append(time.process_time() - cpu)
                    ranked.append([r[0] for r in rows] if rows is not None else None)
                runs.append((ranked, cpu_s))
            ranked, cpu_s = runs[0]
            recalls = [len(set(r or []) & set(e)) / len(e) for r, e in zip(ranked, exact, strict=True)]
            fig = {"mean_recall_top50": round(sum(recalls) / len(recalls), 4), "min_recall_top50": min(recalls),
                   "questions_all_50": sum(r == 1.0 for r in recalls),
                   "same_order": sum(r == e for r, e in zip(ranked, exact, strict=True)),
                   "repeatable": runs[0][0] == runs[1][0], "cpu_median_ms": round(common.median(cpu_s) * 1000, 1),
                   "cpu_p95_ms": round(common.percentile(cpu_s, 95) * 1000, 1)}
            out["rescore"][str(windows)] = fig
            print(f"    rescore {windows}: {fig}", file=sys.stderr, flush=True)
        out["peak_mib"] = _mib("VmHWM")
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    first = sub.add_parser("first-question", help="peak memory and time of the first question's look-up")
    first.add_argument("db", type=Path)
    first.add_argument("--approximate", choices=("on", "off"), default="off")
    first.add_argument("--memory-limit", help="DuckDB's memory limit (default: DuckDB's, 80%% of the machine's memory)")
    build = sub.add_parser("index-build", help="peak memory and time of the embedding index's full build")
    build.add_argument("db", type=Path)
    build.add_argument("--no-checkpoint", action="store_true", help="leave the checkpoint to the close (before)")
    build.add_argument("--memory-limit", help="DuckDB's memory limit instead of the product's ('none': DuckDB's default)")
    rec = sub.add_parser("recall", help="the codes' recall of the exact top 50 on a --real-vectors database")
    rec.add_argument("db", type=Path)
    rec.add_argument("--real-vectors", type=Path, required=True, help="the database the build's vectors came from")
    rec.add_argument("--questions", type=int, default=120)
    rec.add_argument("--rescore", default="1000", help="windows re-scored exactly, comma-separated")
    args = parser.parse_args()
    if args.command == "first-question":
        first_question(args.db, args.approximate, args.memory_limit)
    elif args.command == "recall":
        recall(args.db, args.real_vectors, args.questions, [int(k) for k in args.rescore.split(",") if k])
    elif args.command == "index-build":
        index_build(args.db, args.memory_limit, not args.no_checkpoint)


if __name__ == "__main__":
    sys.exit(main())
