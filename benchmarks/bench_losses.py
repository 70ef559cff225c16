"""Benchmark helper: each answerable dev-set question whose answer misses the prompt, per budget, with its ranks.

The product's evaluation (``jobs.evaluate.evaluate``, hybrid, first attempt, top_k 40) at each ``--budgets``
value; one line per lost question: budget, half, id, the answer's rank in the pool, its rank in the order
packing used, the last rank packed (the cut) and the loss (not in pool / below cut / truncated / upstream).
Works for every dev set's first-stage model (``--embedding-model multilingual-e5-small`` for ``es``), which
bench_stage.py does not.

    nice .venv/bin/python benchmarks/bench_losses.py --devset es --embedding-model multilingual-e5-small --budgets 3000,6000
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path

import bench_recall as br


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--devset", choices=sorted(br.DEVSETS), default="python")
    parser.add_argument("--db", type=Path, default=None, help="another copy of the devset database")
    parser.add_argument("--embedding-model", default=br.EMBEDDING_MODEL,
                        choices=("all-minilm", "all-mpnet-base-v2", "multilingual-e5-small"))
    parser.add_argument("--budgets", default="3000,6000")
    parser.add_argument("--embedding-first", type=int, default=0, help="selection.embedding_first (jobs/embedding_first.py)")
    args = parser.parse_args(argv)
    kind = br.crawled_devset(args.devset, args.db)
    from jobs.evaluate import Packing, evaluate
    from jobs.runstore import RunStore
    from jobs.select import Selector

    netloc, _stored, _ = br.stored_netloc(kind.db)
    devset = br.load_devset(netloc)
    with contextlib.ExitStack() as stack:
        client = br.embedding_client(stack, args.embedding_model)
        store = stack.enter_context(RunStore.open(kind.db))
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
