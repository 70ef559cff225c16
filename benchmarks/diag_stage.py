"""Diagnostic: one question through the second stage, candidate by candidate (round 10 of issue 23).

For each of the first stage's top N: its fused rank and score, bm25 and cosine, its cost in prompt tokens,
its window count and best window's cosine (the stage score), the combined score of ``weight`` and the rank
it gets; then where the budgets cut. The keyword share (bm25's best over the question's ceiling) says
whether the gate opens.

    nice .venv/bin/python benchmarks/diag_stage.py --devset python --db build-int/diag-python.duckdb --ids para-deque-capped
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence

import bench_recall as br
import devset_cli


def main(argv: Sequence[str] | None = None) -> int:
    parser = devset_cli.parser(__doc__)
    parser.add_argument("--ids", required=True, help="comma-separated question ids")
    parser.add_argument("--weight", type=float, default=0.5)
    parser.add_argument("--show", type=int, default=20)
    parser.add_argument("--window-model", default=None, choices=(None, "multilingual-e5-small"),
                        help="score the windows by a second stand-in (the selection's model by default)")
    args = parser.parse_args(argv)
    from jobs.answer import prompt_costed
    from jobs.second_stage import SecondStage, StageSettings, _window_texts
    from jobs.select import Selector, pack

    ids = set(args.ids.split(","))
    budgets = [int(b) for b in args.budgets.split(",")]
    with contextlib.ExitStack() as stack:
        devset, store, client = devset_cli.opened(stack, args)
        sel = Selector(store.conn, embedder=client, embedding_model=br.EMBEDDING_MODEL, ensure_fts=store.load_fts)
        second = br.embedding_client(stack, args.window_model) if args.window_model else None
        stage = SecondStage(sel, StageSettings(weight=args.weight, keyword_gate=None,
                                               embedding_model=args.window_model), embedder=second)
        for q in devset.questions:
            if q.id not in ids:
                continue
            wanted = devset_cli.answer_chunks(store, q)
            costed = prompt_costed(sel.select(q.question, "hybrid").candidates)
            top = costed[:40]
            share = stage._keyword_share(q.question, costed)
            windows = stage._embedding_scores(q.question, top)
            staged, _ = stage.apply(q.question, costed)
            new_rank = {c.chunk_id: c.rank for c in staged}
            first = [c.score for c in top]
            best = [max(w) if w else 0.0 for w in windows]
            lo, hi, slo, shi = min(first), max(first), min(best), max(best)
            print(f"\n{br.half(q.id)} {q.id}: {q.question}\n  keyword share {share:.3f}; stage scores over the "
                  f"top 40: min {slo:.3f} max {shi:.3f}; first-stage min {lo:.4f} max {hi:.4f}")
            for budget in budgets:
                cut_before = max(c.rank for c in pack(costed, top_k=40, token_budget=budget).sent)
                cut_after = max(c.rank for c in pack(staged, top_k=40, token_budget=budget).sent)
                print(f"  {budget}: last rank packed {cut_before} before, {cut_after} after")
            print("  rank  fused   bm25    cos  tok  win  stage  f.mm  s.mm  comb  new  ans  chunk")
            for i, c in enumerate(top):
                if i >= args.show and c.chunk_id not in wanted and new_rank[c.chunk_id] > args.show:
                    continue
                fm = (c.score - lo) / (hi - lo) if hi > lo else 0.0
                sm = (best[i] - slo) / (shi - slo) if shi > slo else 0.0
                comb = (1 - args.weight) * fm + args.weight * sm
                mark = "*" if c.chunk_id in wanted else ""
                print(f"  {c.rank:>4} {c.score:.4f} {_f(c.bm25_score):>6} {_f(c.embedding_score):>6} {c.tokens:>4} "
                      f"{len(_window_texts(c)):>4} {best[i]:.3f} {fm:.3f} {sm:.3f} {comb:.3f} {new_rank[c.chunk_id]:>4} "
                      f"{mark:>4}  {c.url.rsplit('/', 1)[-1]}#{c.ordinal} {c.heading[:50]!r}")
            answer = next((i for i, c in enumerate(top) if c.chunk_id in wanted), None)
            if answer is None:
                continue
            texts = _window_texts(top[answer])
            print(f"  the answer's windows (rank {answer + 1}):")
            for w, t in zip(windows[answer], texts):
                print(f"    {w:.3f} {' '.join(t.split())[:150]!r}")
            print("  the best window of each candidate that jumped over it:")
            for i, c in enumerate(top):
                if i > answer and new_rank[c.chunk_id] < new_rank[top[answer].chunk_id]:
                    t = _window_texts(c)[windows[i].index(best[i])]
                    print(f"    {i + 1:>3} -> {new_rank[c.chunk_id]:>3} {best[i]:.3f} {' '.join(t.split())[:150]!r}")
    return 0


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    sys.exit(main())
