"""Diagnostic: each answerable question's answer rank in the hybrid pool, in bm25's and the embedding's lists,
and its page's rank among the pool's pages (round 7 of issue 23: what could lift answers below the cut).

    nice .venv/bin/python benchmarks/diag_ranks.py --devset git
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence

import bench_recall as br
import devset_cli


def _rank(cands: Sequence[object], wanted: set[str]) -> int | None:
    return next((i for i, c in enumerate(cands, start=1) if c.chunk_id in wanted), None)  # type: ignore[attr-defined]


def main(argv: Sequence[str] | None = None) -> int:
    parser = devset_cli.parser(__doc__, budgets=False)
    parser.add_argument("--deep", type=int, default=200)
    args = parser.parse_args(argv)
    from jobs.select import Selector

    with contextlib.ExitStack() as stack:
        devset, store, client = devset_cli.opened(stack, args)
        sel = Selector(store.conn, embedder=client, embedding_model=br.EMBEDDING_MODEL, ensure_fts=store.load_fts)
        deep = Selector(store.conn, embedder=client, embedding_model=br.EMBEDDING_MODEL, ensure_fts=store.load_fts,
                        pool=args.deep)
        print("half id pool bm25 emb deep_bm25 deep_emb page_rank same_page_before cos_ans cos_top bm25_ans")
        for q, wanted in devset_cli.answerable(devset, store):
            pool = sel.select(q.question, "hybrid").candidates
            bm, em = deep.bm25(q.question, None), deep.embedding(q.question, None)
            r = _rank(pool, wanted)
            pages = list(dict.fromkeys(c.url for c in pool))
            ans = pool[r - 1] if r else None
            page_rank = pages.index(ans.url) + 1 if ans else None
            same = sum(1 for c in pool[: (r or 1) - 1] if ans and c.url == ans.url)
            e = _rank(em, wanted)
            b = _rank(bm, wanted)
            print(br.half(q.id), q.id, r, b if b and b <= 50 else "-", e if e and e <= 50 else "-", b, e, page_rank,
                  same, round(em[e - 1].score, 3) if e else None, round(em[0].score, 3) if em else None,
                  round(bm[b - 1].score, 2) if b else None, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
