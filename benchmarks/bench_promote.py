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

import contextlib
import sys
from collections.abc import Sequence
from typing import Any

import bench_recall as br
import devset_cli


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
    parser = devset_cli.parser(__doc__)
    parser.add_argument("--variants", default="e3,e5,b3,b5")
    devset_cli.add_probe(parser)
    args = parser.parse_args(argv)
    from jobs.select import Selector

    variants = args.variants.split(",")
    budgets = [int(b) for b in args.budgets.split(",")]
    with contextlib.ExitStack() as stack:
        devset, store, client = devset_cli.opened(stack, args)
        # The fused order as before round 7 (embedding_first 0); the variants reorder it here.
        sel = Selector(store.conn, embedder=client, embedding_model=br.EMBEDDING_MODEL, ensure_fts=store.load_fts,
                       embedding_first=0)
        rows = []
        for q, wanted in devset_cli.answerable(devset, store, args.probe):
            pool = sel.select(q.question, "hybrid").candidates
            rank = next((c.rank for c in pool if c.chunk_id in wanted), None)
            row: dict[str, Any] = {"id": q.id, "half": br.half(q.id), "para": q.id.startswith("para-"), "rank": rank}
            for v in ["base", *variants]:
                order = pool if v == "base" else promoted(pool, int(v[1:]), v[0] == "b")
                for budget, cell in devset_cli.packed_cells(order, wanted, q.expect, budgets).items():
                    row[(v, budget)] = cell
            rows.append(row)
            print(".", end="", flush=True)
        print()
        devset_cli.report(rows, ["base", *variants], budgets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
