"""Diagnostic: each question's keyword share — bm25's best score over the question's ceiling — as the second
stage's ``keyword_gate`` compares it (round 10 of issue 23: which questions a gate opens on).

    nice .venv/bin/python benchmarks/diag_gate.py --devset git [--questions benchmarks/devset/fresh/git.yaml]
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence

import bench_recall as br
import devset_cli


def main(argv: Sequence[str] | None = None) -> int:
    args = devset_cli.parser(__doc__, budgets=False).parse_args(argv)
    from jobs.runstore import RunStore
    from jobs.select import Selector
    from pipelines import search_index

    with contextlib.ExitStack() as stack:
        kind = br.crawled_devset(args.devset, args.db, args.questions)
        netloc, _stored, _ = br.stored_netloc(kind.db)
        devset = br.load_devset(netloc)
        store = stack.enter_context(RunStore.open(kind.db))
        # bm25's list is in the hybrid pool whole, so its best is the pool's best bm25 score (_keyword_share's).
        sel = Selector(store.conn, embedder=None, embedding_model=None, ensure_fts=store.load_fts)
        for q in devset.questions:
            best = max((c.bm25_score or 0.0 for c in sel.bm25(q.question, None)), default=0.0)
            ceiling = search_index.question_ceiling(store.conn, q.question, sel.bm25_params.k1)
            print(br.half(q.id), q.id, round(best / ceiling, 3) if ceiling > 0 else 0.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
