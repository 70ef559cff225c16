"""Selection inside a job's scope at scale: bm25 and hybrid (and the embedding leg) as the product asks them,
``Selector.select(question, method, urls=scope)`` with the scope resolved once per run, against the scoped
full query of before (BM25_SQL with the urls bound, per question), for scopes of a fraction of the pages.

    nice .venv/bin/python benchmarks/bench_bm25_scope.py DB [--questions 30] [--fractions 0.01,0.1,1.0]
        [--methods bm25,hybrid,embedding] [--repeat 2] [--before 5] [--product]

DB: a bench_select.py database (``--reindex-one`` built: postings, vectors and codes), opened for writing as
the product opens it (nothing is written when every window has its vector and codes). Per fraction: a fresh
Selector (``approximate=True``: the codes' first stage inside the scope), its first question (resolving the
scope, cutting the codes) apart, then every question ``--repeat`` times: CPU and wall per question, median and
p95 over questions; the load average; the first ``--before`` questions also as before (bm25 by the scoped full
query, the embedding leg by the exact scan), compared with the Selector's rows (bm25: equal; codes: recall of the
exact top 50). One JSON line at the end with everything and the process's memory.

``--product``: the questions as ``webqa run`` asks them instead, through jobs/answer.py QuestionAnswerer
(extractive, dry run: selection, packing and the prompt; no LLM) with the job's default scope checked against
the pages once per run, as jobs/answer_phase.py does; that check's CPU (a semi-join on the urls) apart, and the
check of before (``list_contains`` over every page) timed once. The bench database has chunks but no pages
(bench_select.py): the chunks' urls are added to ``pages`` once, so the check has pages to find.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from bench_select import _VECTOR_SQL, MODEL, PrecomputedEmbedder, _vm_kib  # noqa: E402

from jobs.select import BM25_B, BM25_HEADING_WEIGHT, BM25_K1, DEFAULT_POOL, Selector  # noqa: E402
from pipelines import search_index  # noqa: E402
from pipelines.store import Store  # noqa: E402


def timed(f: Callable[[], Any]) -> tuple[float, float, Any]:
    cpu, wall = time.process_time(), time.perf_counter()
    rows = f()
    return time.process_time() - cpu, time.perf_counter() - wall, rows


def _summary(cpu: dict[str, list[float]], wall: dict[str, list[float]]) -> dict[str, float]:
    per_cpu = [common.median(v) * 1000 for v in cpu.values()]
    per_wall = [common.median(v) * 1000 for v in wall.values()]
    return {"cpu_median_ms": round(common.median(per_cpu), 1), "cpu_p95_ms": round(common.percentile(per_cpu, 95), 1),
            "wall_median_ms": round(common.median(per_wall), 1), "wall_p95_ms": round(common.percentile(per_wall, 95), 1),
            "load_average_1m": round(os.getloadavg()[0], 2)}


def _before(store: Store, questions: list[str], scope: list[str], selector: Selector) -> dict[str, Any]:
    """The scoped full query of before (urls bound, their docs found per question), and whether the Selector's
    bm25 rows are the same (chunk, score, order)."""
    params = {"pool": DEFAULT_POOL, "k1": BM25_K1, "b": BM25_B, "heading_weight": BM25_HEADING_WEIGHT, "lang": "porter"}
    cpu, wall, same = [], [], 0
    for q in questions:
        c, w, rows = timed(lambda: store.conn.execute(search_index.BM25_SQL, {"q": q, "urls": scope, **params}).fetchall())
        cpu.append(c)
        wall.append(w)
        now = [(x.chunk_id, x.score) for x in selector.select(q, "bm25", urls=scope).candidates]
        same += now == [(r[0], float(r[5])) for r in rows]
    return {"questions": len(questions), "cpu_mean_ms": round(sum(cpu) / len(cpu) * 1000, 1),
            "wall_mean_ms": round(sum(wall) / len(wall) * 1000, 1), "rows_equal": same}


def _exact(store: Store, questions: list[str], scope: list[str], selector: Selector) -> dict[str, Any]:
    """The embedding leg of before inside a scope (the exact scan), and the codes' recall of its top 50."""
    exact = Selector(store.conn, embedder=selector.embedder, embedding_model=MODEL, ensure_fts=store.load_fts,
                     approximate=False)
    cpu, wall, recall, same = [], [], [], 0
    exact.select(questions[0], "embedding", urls=scope)  # the first question's own costs apart (embed_missing)
    for q in questions:
        c, w, ranked = timed(lambda: exact.select(q, "embedding", urls=scope))
        cpu.append(c)
        wall.append(w)
        want = [x.chunk_id for x in ranked.candidates]
        got = [x.chunk_id for x in selector.select(q, "embedding", urls=scope).candidates]
        recall.append(len(set(want) & set(got)) / max(1, len(want)))
        same += got == want
    return {"questions": len(questions), "cpu_mean_ms": round(sum(cpu) / len(cpu) * 1000, 1),
            "wall_mean_ms": round(sum(wall) / len(wall) * 1000, 1), "recall_mean": round(sum(recall) / len(recall), 4),
            "recall_min": round(min(recall), 4), "identical": same}


def _method(selector: Selector, method: str, questions: list[str], scope: list[str], repeat: int) -> dict[str, Any]:
    c, w, first = timed(lambda: selector.select(questions[0], method, urls=scope))
    if first.method_used != method:
        raise SystemExit(f"{method} fell back to {first.method_used}: {first.notice}")
    cpu: dict[str, list[float]] = {}
    wall: dict[str, list[float]] = {}
    for _ in range(repeat):
        for q in questions:
            c2, w2, _sel = timed(lambda: selector.select(q, method, urls=scope))
            cpu.setdefault(q, []).append(c2)
            wall.setdefault(q, []).append(w2)
    return {"first_cpu_ms": round(c * 1000, 1), "first_wall_ms": round(w * 1000, 1), **_summary(cpu, wall)}


def _pages(store: Store) -> None:
    if store.conn.execute("SELECT count(*) FROM pages").fetchone()[0] == 0:  # type: ignore[index]
        store.conn.execute("INSERT INTO pages (url) SELECT DISTINCT url FROM selection_docs")


def _product(store: Store, selector: Selector, method: str, questions: list[str], scope: list[str],
             repeat: int) -> dict[str, Any]:
    """The questions as a run asks them: QuestionAnswerer.answer with the job's default scope checked once."""
    from jobs.answer import AskSettings, QuestionAnswerer, QuestionSpec

    check_cpu, _w, stored = timed(lambda: store.stored_urls(scope))
    old_cpu, _w, old = timed(lambda: store.conn.execute(
        "SELECT url FROM pages WHERE list_contains($urls, url) UNION SELECT duplicate_of FROM pages WHERE "
        "list_contains($urls, url) AND duplicate_of IS NOT NULL ORDER BY 1", {"urls": list(scope)}).fetchall())
    assert [u for (u,) in old] == stored == scope, "the bench's scope is every stored page of it"
    answerer = QuestionAnswerer(store, selector, None, AskSettings(method=method, answerer="extractive",  # type: ignore[arg-type]
                                                                   dry_run=True))
    default = tuple(stored)
    answerer.checked_scope(default, list(default))
    selecting: list[float] = []
    select = selector.select

    def timed_select(*a: Any, **kw: Any) -> Any:  # the selection's share of each answer
        c, _w, got = timed(lambda: select(*a, **kw))
        selecting.append(c)
        return got

    selector.select = timed_select  # type: ignore[method-assign]
    c, w, first = timed(lambda: answerer.answer(QuestionSpec("q0", questions[0], default)))
    if first.selection is None or first.selection.method_used != method:
        raise SystemExit(f"{method}: {first.error or first.selection and first.selection.notice}")
    cpu: dict[str, list[float]] = {}
    wall: dict[str, list[float]] = {}
    for _ in range(repeat):
        for n, q in enumerate(questions):
            c2, w2, _o = timed(lambda: answerer.answer(QuestionSpec(f"q{n}", q, default)))
            cpu.setdefault(q, []).append(c2)
            wall.setdefault(q, []).append(w2)
    del selector.select
    return {"select_cpu_median_ms": round(common.median(selecting[1:]) * 1000, 1), "scope_check_cpu_ms": round(check_cpu * 1000, 1), "scope_check_before_cpu_ms": round(old_cpu * 1000, 1),
            "first_cpu_ms": round(c * 1000, 1), "first_wall_ms": round(w * 1000, 1), **_summary(cpu, wall)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("db", type=Path)
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--fractions", default="0.01,0.1,1.0")
    parser.add_argument("--methods", default="bm25,hybrid,embedding")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--before", type=int, default=5, help="questions also asked by the full query of before")
    parser.add_argument("--product", action="store_true", help="through QuestionAnswerer, as `webqa run` asks")
    args = parser.parse_args()
    questions = list(common.QUESTIONS)[: args.questions]
    out: dict[str, Any] = {"db": str(args.db), "questions": len(questions), "repeat": args.repeat, "fractions": {}, "product": args.product}
    with Store.open(args.db) as store:
        store.load_fts()
        if args.product:
            _pages(store)
        urls = [u for (u,) in store.conn.execute("SELECT DISTINCT url FROM selection_docs ORDER BY url").fetchall()]
        vectors = {q: store.conn.execute(f"SELECT {_VECTOR_SQL % '$q'}", {"q": "question " + q}).fetchone()[0]
                   for q in questions}
        out["rss_before_mib"] = round(_vm_kib("VmRSS") / 1024)
        rng = random.Random(1)
        for fraction in (float(x) for x in args.fractions.split(",")):
            scope = sorted(rng.sample(urls, max(1, int(len(urls) * fraction))))
            selector = Selector(store.conn, embedder=PrecomputedEmbedder(vectors), embedding_model=MODEL,
                                ensure_fts=store.load_fts, approximate=True)
            figures: dict[str, Any] = {"urls": len(scope), "of_urls": len(urls)}
            for method in args.methods.split(","):
                measure = _product if args.product else lambda *a: _method(*a[1:])
                figures[method] = measure(store, selector, method, questions, scope, args.repeat)
                print(f"scope {fraction:.0%} {method}: {json.dumps(figures[method])}", file=sys.stderr, flush=True)
            if args.before:
                figures["before_bm25"] = _before(store, questions[: args.before], scope, selector)
                print(f"scope {fraction:.0%} before: {json.dumps(figures['before_bm25'])}", file=sys.stderr, flush=True)
                figures["before_embedding"] = _exact(store, questions[: args.before], scope, selector)
                print(f"scope {fraction:.0%} exact embedding: {json.dumps(figures['before_embedding'])}", file=sys.stderr,
                      flush=True)
            docs = selector.docs_of(scope)
            figures["scope_docs"] = None if docs is None else len(docs.docs)
            figures["filter"] = None if docs is None else ("none" if docs.whole else "in" if docs.inside else "not in")
            figures["rss_mib"] = round(_vm_kib("VmRSS") / 1024)
            out["fractions"][str(fraction)] = figures
    out["vm_hwm_mib"] = round(_vm_kib("VmHWM") / 1024)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
