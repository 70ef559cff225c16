"""Benchmark helper: each answerable dev-set question whose answer misses the prompt, per budget, with its ranks.

The product's evaluation (``jobs.evaluate.evaluate``, hybrid, first attempt, top_k 40) at each ``--budgets``
value; one line per lost question: budget, half, id, the answer's rank in the pool, its rank in the order
packing used, the last rank packed (the cut) and the loss (not in pool / below cut / truncated / upstream).
Works for every dev set's first-stage model (``--embedding-model multilingual-e5-small`` for ``es``), which
bench_stage.py does not.

    nice .venv/bin/python benchmarks/bench_losses.py --devset es --embedding-model multilingual-e5-small --budgets 3000,6000
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence

import bench_recall as br
import devset_cli


def main(argv: Sequence[str] | None = None) -> int:
    parser = devset_cli.parser(__doc__, models=True)
    parser.add_argument("--embedding-first", type=int, default=0, help="selection.embedding_first (jobs/embedding_first.py)")
    args = parser.parse_args(argv)
    from jobs.evaluate import Packing, evaluate
    from jobs.select import Selector

    with contextlib.ExitStack() as stack:
        devset, store, client = devset_cli.opened(stack, args)
        selector = Selector(store.conn, embedder=client, embedding_model=args.embedding_model, ensure_fts=store.load_fts,
                            embedding_first=args.embedding_first)
        for budget in (int(b) for b in args.budgets.split(",")):
            funnels = [f for f in evaluate(selector, store, devset.questions, ["hybrid"], Packing(token_budget=budget))
                       if f.answerable]
            for name in ("tune", "check"):
                half = [f for f in funnels if br.half(f.question.id) == name]
                para = [f for f in half if f.question.id.startswith("para-")]
                got = sum(bool(f.in_prompt.get("hybrid")) for f in half)
                got_para = sum(bool(f.in_prompt.get("hybrid")) for f in para)
                print(f"{budget} {name}: in prompt {got}/{len(half)}, paraphrased {got_para}/{len(para)}", flush=True)
            for f in funnels:
                if not f.in_prompt.get("hybrid"):
                    print(budget, br.half(f.question.id), f.question.id, "pool", f.ranks.get("hybrid"), "pack",
                          f.packing_ranks.get("hybrid"), "cut", f.cut_ranks.get("hybrid"), f.prompt_loss("hybrid"),
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
