"""Benchmark: the pool the second stage orders (issue 23, round 4): its depth, its fusion, and the stage over it.

Today's hybrid pool is the fused top 50 of bm25's top 50 and the embedding's top 50; a paraphrase the
embedding ranks 45th can fall out of it. Here each question is ranked once, deep (``--deep`` per list), and
each variant builds its pool from those lists exactly as ``Selector.hybrid`` would with that depth:

- ``score-N``: bm25 top N and embedding top N, min-max score fusion (today's), cut to the pool (50);
- ``score-uN`` / ``rrf-uN``: the same lists, the whole union kept (up to 2N), ordered by score fusion or by
  reciprocal-rank fusion (k = 60);
- ``…-sW``: then the product's second stage (``jobs.second_stage.SecondStage``, the job's own model, best
  ~40-word window) over the whole pool, reordered with stage weight W; ``…-cN-sW``: over the union of each
  list's top N only (``StageSettings.union``, the product's way), the rest of the pool after them;
  ``…-fN-sW``: over the fused order's top N (round 3's opt-in).

Then the product's costing and packing (``jobs.evaluate.evaluate``), per half: answer-in-prompt, the
paraphrased subset, pool recall (answer anywhere in the pool) and the losses. ``--diagnose`` prints, for each
answerable question not in today's pool, the answer's rank in each deep list.

    .venv/bin/python benchmarks/bench_recall.py --devset git --methods bm25,hybrid --quiet-table   # crawl + embed once
    nice -n 10 .venv/bin/python benchmarks/bench_pool.py --devset git --variants score-50,score-u40,rrf-u40,score-u40-s0.5

Results: ``benchmarks/results/pool-<devset>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import bench_recall as br
import common

RRF_K = 60
CUT = 50  # today's pool (jobs/select.py DEFAULT_POOL)


def parse_variant(name: str) -> dict[str, Any]:
    """``score-N`` | ``score-uN`` | ``rrf-uN`` [``-sW``] → fusion, depth, union, stage weight (None: no stage)."""
    parts = name.split("-")
    if parts[0] not in ("score", "rrf") or len(parts) < 2:
        raise SystemExit(f"unknown variant {name!r}")
    union = parts[1].startswith("u")
    depth = int(parts[1].lstrip("u"))
    weight = None
    candidates = None
    for part in parts[2:]:
        if part.startswith("s"):
            weight = float(part[1:])
        elif part.startswith("c"):
            candidates = int(part[1:])
        elif part.startswith("f"):
            candidates = -int(part[1:])
        else:
            raise SystemExit(f"unknown variant part {part!r} in {name!r}")
    return {"fusion": parts[0], "depth": depth, "union": union, "weight": weight, "candidates": candidates}


def fused(bm25: Sequence[Any], emb: Sequence[Any], fusion: str, depth: int, union: bool) -> list[Any]:
    """The pool as Selector.hybrid builds it from lists of ``depth``: score fusion (min-max, equal weights) or
    RRF; ties by URL and position; cut to 50 unless ``union``."""
    from jobs.select import _min_max

    lists = (bm25[:depth], emb[:depth])
    entries: dict[str, list[Any]] = {}
    for which, ranked in enumerate(lists):
        scaled = _min_max([c.score for c in ranked]) if fusion == "score" else [1.0 / (RRF_K + i) for i in
                                                                                  range(1, len(ranked) + 1)]
        for candidate, value in zip(ranked, scaled, strict=True):
            entry = entries.setdefault(candidate.chunk_id, [candidate, 0.0])
            entry[1] += (0.5 if fusion == "score" else 1.0) * value
            field = "bm25_score" if which == 0 else "embedding_score"
            if getattr(entry[0], field) is None:
                entry[0] = replace(entry[0], **{field: getattr(candidate, field)})
    order = sorted(entries.values(), key=lambda e: (-round(e[1], 8), e[0].url, e[0].ordinal))
    kept = order if union else order[:CUT]
    return [replace(c, score=round(s, 8), rank=i) for i, (c, s) in enumerate(kept, start=1)]


class PoolSelector:
    """Hybrid selection from deep bm25 and embedding lists ranked once per question; ``variant`` picks the pool."""

    def __init__(self, base: Any, deep: int) -> None:
        self.base = base
        self.deep = deep
        self.lists: dict[Any, tuple[list[Any], list[Any]]] = {}
        self.variant: dict[str, Any] = {}

    def deep_lists(self, question: str, urls: Sequence[str] | None) -> tuple[list[Any], list[Any]]:
        key = (question, tuple(urls) if urls else None)
        if key not in self.lists:
            scope = sorted(set(urls)) if urls else None
            self.base.pool = self.deep
            self.lists[key] = (self.base.bm25(question, scope), self.base.embedding(question, scope))
        return self.lists[key]

    def select(self, question: str, method: str, *, urls: Sequence[str] | None = None) -> Any:
        from jobs.select import Selection

        bm25, emb = self.deep_lists(question, urls)
        v = self.variant
        return Selection(question, method, "hybrid", fused(bm25, emb, v["fusion"], v["depth"], v["union"]))


class _Timed:
    def __init__(self, stage: Any) -> None:
        self.stage = stage
        self.seconds: list[float] = []

    def apply(self, question: str, candidates: Any, **kw: Any) -> Any:
        started = time.perf_counter()
        result = self.stage.apply(question, candidates, **kw)
        self.seconds.append(time.perf_counter() - started)
        return result


def run_variant(selector: PoolSelector, store: Any, questions: Sequence[Any], stage: Any, budget: int) -> dict[str, Any]:
    from jobs.evaluate import Packing, evaluate

    timed = _Timed(stage) if stage is not None else None
    funnels = evaluate(selector, store, questions, ["hybrid"], Packing(token_budget=budget), stage=timed)
    halves = br.headline(funnels, ["hybrid"])
    row: dict[str, Any] = {}
    for name in ("tune", "check", "all"):
        h = halves[name]["hybrid"]
        part = [f for f in funnels if f.answerable and (name == "all" or br.half(f.question.id) == name)]
        row[name] = {k: h[k] for k in ("n", "answer_in_prompt", "para_n", "para_answer_in_prompt",
                                         "evidence_tokens_median", "prompt_losses", "para_prompt_losses")}
        row[name]["in_pool"] = round(sum(f.ranks.get("hybrid") is not None for f in part) / (len(part) or 1), 3)
        para = [f for f in part if f.question.id.startswith("para-")]
        row[name]["para_in_pool"] = round(sum(f.ranks.get("hybrid") is not None for f in para) / (len(para) or 1), 3)
    sizes = [len(selector.select(f.question.question, "hybrid", urls=f.question.urls).candidates) for f in funnels]
    row["pool_size_median"] = statistics.median(sizes) if sizes else None
    secs = timed.seconds if timed else []
    row["stage_seconds"] = {"median": round(statistics.median(secs), 3) if secs else None,
                            "total": round(sum(secs), 1)}
    row["questions"] = [{"id": f.question.id, "half": br.half(f.question.id), "pool_rank": f.ranks.get("hybrid"),
                         "packing_rank": f.packing_ranks.get("hybrid"), "cut": f.cut_ranks.get("hybrid"),
                         "in_prompt": f.in_prompt.get("hybrid"), "loss": f.prompt_loss("hybrid")}
                        for f in funnels if f.answerable]
    row["_funnels"] = funnels
    return row


def diagnose(selector: PoolSelector, funnels: Sequence[Any]) -> list[dict[str, Any]]:
    """For each answerable question not in today's pool: the answer's rank in the deep bm25 and embedding lists."""
    out = []
    for f in funnels:
        if not f.answerable or f.ranks.get("hybrid") is not None or f.lost_upstream():
            continue
        bm25, emb = selector.deep_lists(f.question.question, f.question.urls)
        wanted = set(f.answer_chunks)
        rank = lambda ranked: next((i for i, c in enumerate(ranked, start=1) if c.chunk_id in wanted), None)  # noqa: E731
        out.append({"id": f.question.id, "half": br.half(f.question.id), "bm25": rank(bm25), "embedding": rank(emb)})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--devset", choices=sorted(br.DEVSETS), default="python")
    parser.add_argument("--variants", default="score-50,score-u40,rrf-u40,score-u40-s0.5")
    parser.add_argument("--budget", type=int, default=3000)
    parser.add_argument("--deep", type=int, default=120, help="how deep each list is ranked once per question")
    parser.add_argument("--diagnose", action="store_true")
    parser.add_argument("--results-name", default=None)
    parser.add_argument("--db", type=Path, default=None)
    args = parser.parse_args(argv)
    kind = br.crawled_devset(args.devset, args.db)
    from jobs.runstore import RunStore
    from jobs.second_stage import SecondStage, StageSettings
    from jobs.select import Selector

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    parsed = {v: parse_variant(v) for v in variants}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    netloc, _stored, _ = br.stored_netloc(kind.db)
    devset = br.load_devset(netloc)
    started = time.perf_counter()
    results: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        client = br.embedding_client(stack)
        store = stack.enter_context(RunStore.open(kind.db))
        base = Selector(store.conn, embedder=client, embedding_model=br.EMBEDDING_MODEL, ensure_fts=store.load_fts)
        base.embed_missing()
        selector = PoolSelector(base, args.deep)
        print(f"{args.devset}: {len(devset.questions)} questions; budget {args.budget}; lists ranked {args.deep} deep")
        print(f"{'variant':<18} {'pool':>4}  {'tune: prompt (para) pool':<26} {'check: prompt (para) pool (para)':<34} "
              f"{'s/q':>6}  check losses: not in pool / below cut / truncated")
        for name in variants:
            spec = parsed[name]
            selector.variant = spec
            stage = None
            if spec["weight"] is not None:
                n = spec["candidates"]
                stage = SecondStage(base, StageSettings(candidates=abs(n) if n else 10**6, weight=spec["weight"],
                                                        union=n is not None and n > 0))
            row = run_variant(selector, store, devset.questions, stage, args.budget)
            funnels = row.pop("_funnels")
            if args.diagnose and name == variants[0]:
                row["diagnosis"] = diagnose(selector, funnels)
                for d in row["diagnosis"]:
                    print(f"  not in pool: {d['id']:<28} {d['half']:<5} bm25 rank {d['bm25']}, embedding rank {d['embedding']}")
            results[name] = row
            t, c = row["tune"], row["check"]
            losses = c["prompt_losses"]
            print(f"{name:<18} {row['pool_size_median']:>4}  {t['answer_in_prompt']:.3f} ({_f(t['para_answer_in_prompt'])})"
                  f" {t['in_pool']:.3f}{'':<6} {c['answer_in_prompt']:.3f} ({_f(c['para_answer_in_prompt'])}) "
                  f"{c['in_pool']:.3f} ({c['para_in_pool']:.3f}){'':<6} {_f(row['stage_seconds']['median']):>6}  "
                  f"{losses['not in pool']} / {losses['below cut']} / {losses['truncated']}", flush=True)
    path = common.save_result(args.results_name or f"pool-{args.devset}",
                              {"variants": results, "budget": args.budget, "deep": args.deep,
                               "wall_s": round(time.perf_counter() - started, 1)},
                              command=common.command_line(), machine=common.machine_info())
    print(f"wrote {path.relative_to(common.REPO)}")
    return 0


def _f(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
