"""Benchmark: each list's top N first (issue 23, round 7), simulated on the product's pool and packing.

The hybrid pool orders chunks by min-max fusion; a chunk only one list ranks scores at most half, so a
paraphrase the embedding alone ranks 3rd–9th sits at pool ranks 11–20, below the cut. Here the pool is
reordered before packing: the candidates in the top N of the fused order, of the embedding list (by their
cosine) or, with ``b``, of bm25's list (by their bm25 score) come first, in fused order; the rest after them,
in fused order. Whole chunks, the product's packing. Per half and budget: in prompt [paraphrased], losses,
and every question that moves against the default order.

    nice .venv/bin/python benchmarks/bench_promote.py --devset git --variants e3,e5,b3,b5 --budgets 3000,6000
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bench_recall as br


def promoted(pool: Sequence[Any], n: int, both: bool) -> list[Any]:
    """``pool`` with the top ``n`` of the fused order, of the embedding list and (``both``) of bm25's first; ``eN``
    is the product's ``selection.embedding_first: N`` (jobs/embedding_first.py), checked equal below."""
    if not both:
        from jobs.embedding_first import embedding_first

        return embedding_first(pool, n)
    first = {c.chunk_id for c in pool[:n]}
    fields = ("embedding_score", "bm25_score") if both else ("embedding_score",)
    for field in fields:
        scored = sorted((c for c in pool if getattr(c, field) is not None),
                        key=lambda c: (-getattr(c, field), c.url, c.ordinal))
        first.update(c.chunk_id for c in scored[:n])
    return [c for c in pool if c.chunk_id in first] + [c for c in pool if c.chunk_id not in first]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--devset", choices=sorted(br.DEVSETS), default="python")
    parser.add_argument("--db", type=Path, default=None)
    parser.add_argument("--budgets", default="3000,6000")
    parser.add_argument("--variants", default="e3,e5,b3,b5")
    args = parser.parse_args(argv)
    kind = br.crawled_devset(args.devset, args.db)
    from jobs.answer import packed_sources, prompt_costed
    from jobs.evaluate import answer_in_sources, contains_any, evidence_tokens
    from jobs.runstore import RunStore
    from jobs.select import Selector

    netloc, _stored, _ = br.stored_netloc(kind.db)
    devset = br.load_devset(netloc)
    variants = args.variants.split(",")
    budgets = [int(b) for b in args.budgets.split(",")]
    with contextlib.ExitStack() as stack:
        client = br.embedding_client(stack)
        store = stack.enter_context(RunStore.open(kind.db))
        # The fused order as before round 7 (embedding_first 0); the variants reorder it here.
        sel = Selector(store.conn, embedder=client, embedding_model=br.EMBEDDING_MODEL, ensure_fts=store.load_fts,
                       embedding_first=0)
        rows = []
        for q in devset.questions:
            if not q.expect:
                continue
            wanted = {cid for cid, _h, text in store.chunk_texts([q.url, *q.also_urls]) if contains_any(text, q.expect)}
            pool = sel.select(q.question, "hybrid").candidates
            rank = next((c.rank for c in pool if c.chunk_id in wanted), None)
            row: dict[str, Any] = {"id": q.id, "half": br.half(q.id), "para": q.id.startswith("para-"), "rank": rank}
            for v in ["base", *variants]:
                order = pool if v == "base" else promoted(pool, int(v[1:]), v[0] == "b")
                costed = prompt_costed(order)
                for budget in budgets:
                    packed = packed_sources(costed, top_k=40, token_budget=budget, merge=False)
                    row[(v, budget)] = (answer_in_sources(packed.sources, q.expect),
                                        any(c.chunk_id in wanted for c in packed.packed.sent),
                                        evidence_tokens(packed.sources), len(packed.sources))
            rows.append(row)
            print(".", end="", flush=True)
        print()
        report(rows, ["base", *variants], budgets)
    return 0


def report(rows: list[dict[str, Any]], variants: Sequence[str], budgets: Sequence[int]) -> None:
    for budget in budgets:
        for v in variants:
            for name in ("tune", "check"):
                part = [r for r in rows if r["half"] == name]
                got = sum(r[(v, budget)][0] for r in part)
                para = [r for r in part if r["para"]]
                got_para = sum(r[(v, budget)][0] for r in para)
                lost = [r for r in part if not r[(v, budget)][0]]
                pool = sum(1 for r in lost if r["rank"] is None)
                trunc = sum(1 for r in lost if r["rank"] is not None and r[(v, budget)][1])
                tokens = sorted(r[(v, budget)][2] for r in part)
                print(f"{budget} {v:>5} {name}: in prompt {got}/{len(part)} = {got / len(part):.3f} "
                      f"[para {got_para}/{len(para)}]; not in pool {pool} / below cut {len(lost) - pool - trunc} / "
                      f"truncated {trunc}; tokens median {tokens[len(tokens) // 2]}")
            if v != "base":
                for r in rows:
                    if r[(v, budget)][0] != r[("base", budget)][0]:
                        print(f"    {'GAINED' if r[(v, budget)][0] else 'LOST'} {r['half']} {r['id']} (pool rank {r['rank']})")


if __name__ == "__main__":
    sys.exit(main())
