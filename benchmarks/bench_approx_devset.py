"""Benchmark: the codes' first stage (``selection.approximate``) against the exact scan, question by question.

On one dev set's database (crawled and embedded by ``bench_recall.py --devset NAME``), every question is
selected twice by the product's Selector: exact (``approximate=False``) and with the codes forced on
(``approximate=True``, whatever the corpus size). It prints, per half and budget, answer-in-prompt both ways and
every question whose prompt, pool rank or embedding top 50 differs; and the recall of the exact embedding top 50
by the codes (mean, min, how many identical). It counts the questions the codes really ranked
(``vector_codes.rank`` returning a pool), so a silent fall-back to the exact scan cannot pass for "no loss".
At a dev set's size (4,000–9,000 windows) the Hamming stage keeps every window (``WIDE_WINDOWS`` 20,000): what
is measured is the asymmetric stage choosing ``RESCORE_WINDOWS`` of them, and the exact re-score.

    nice .venv/bin/python benchmarks/bench_approx_devset.py --devset git [--rescore-windows 300] [--budgets 3000,6000]
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Sequence
from typing import Any

import bench_recall as br
import devset_cli


class _Counted:
    """``vector_codes.rank`` wrapped: how many rankings the codes returned, how many fell back (None)."""

    def __init__(self, rank: Any) -> None:
        self.rank, self.used, self.fell_back = rank, 0, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        rows = self.rank(*args, **kwargs)
        if rows is None:
            self.fell_back += 1
        else:
            self.used += 1
        return rows


def _compare(exact: list[Any], codes: list[Any], budget: int) -> list[str]:
    lines = []
    for name in ("tune", "check"):
        pairs = [(e, c) for e, c in zip(exact, codes, strict=True) if e.answerable and br.half(e.question.id) == name]
        got_e = sum(bool(e.in_prompt.get("hybrid")) for e, _ in pairs)
        got_c = sum(bool(c.in_prompt.get("hybrid")) for _, c in pairs)
        para = [(e, c) for e, c in pairs if e.question.id.startswith("para-")]
        pe = sum(bool(e.in_prompt.get("hybrid")) for e, _ in para)
        pc = sum(bool(c.in_prompt.get("hybrid")) for _, c in para)
        lines.append(f"{budget} {name}: in prompt exact {got_e}/{len(pairs)} [{pe}/{len(para)}], "
                     f"codes {got_c}/{len(pairs)} [{pc}/{len(para)}]")
    for e, c in zip(exact, codes, strict=True):
        if not e.answerable:
            continue
        if e.in_prompt.get("hybrid") != c.in_prompt.get("hybrid") or e.ranks.get("hybrid") != c.ranks.get("hybrid"):
            lines.append(f"  differs: {br.half(e.question.id)} {e.question.id} in prompt {e.in_prompt.get('hybrid')} → "
                         f"{c.in_prompt.get('hybrid')}, pool rank {e.ranks.get('hybrid')} → {c.ranks.get('hybrid')}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = devset_cli.parser(__doc__, models=True)
    parser.add_argument("--rescore-windows", type=int, default=None, help="windows re-scored exactly (default 1,000)")
    args = parser.parse_args(argv)
    from jobs.evaluate import Packing, evaluate
    from jobs.select import Selector
    from pipelines import vector_codes

    if args.rescore_windows:
        vector_codes.RESCORE_WINDOWS = args.rescore_windows
    counted = _Counted(vector_codes.rank)
    vector_codes.rank = counted  # the Selector calls it through the module
    with contextlib.ExitStack() as stack:
        devset, store, client = devset_cli.opened(stack, args)
        windows = store.conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]
        print(f"{args.devset}: {windows} windows; codes re-score {vector_codes.RESCORE_WINDOWS}, wide {vector_codes.WIDE_WINDOWS}")
        selectors = {mode: br._CachedSelector(Selector(store.conn, embedder=client, embedding_model=args.embedding_model,
                                                       ensure_fts=store.load_fts, approximate=mode))
                     for mode in (False, True)}
        for budget in (int(b) for b in args.budgets.split(",")):
            runs = {}
            for mode, selector in selectors.items():
                started, cpu = time.perf_counter(), time.process_time()
                runs[mode] = evaluate(selector, store, devset.questions, ["hybrid"], Packing(token_budget=budget))
                print(f"  ({'codes' if mode else 'exact'} {time.perf_counter() - started:.0f} s wall, "
                      f"{time.process_time() - cpu:.0f} s CPU)", flush=True)
            print("\n".join(_compare(runs[False], runs[True], budget)), flush=True)
        print(f"codes rankings used {counted.used}, fell back to exact {counted.fell_back}")
        recall = br.approximate_recall(store.conn, client, args.embedding_model, store,
                                       [q.question for q in devset.questions])
        print(f"recall of the exact embedding top 50: {recall}; codes used {counted.used}, fell back {counted.fell_back}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
