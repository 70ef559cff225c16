"""Benchmark: tail packing (issue 23, round 7), simulated on the product's pool and packing.

Whole chunks in pool order until ``share`` of the token budget is used; every later candidate is sent as the
150-word window its embedding matched best (the window vectors the first stage stored: no extra embedding),
while it fits the budget; pieces of one page merged in page order as the answerer does. So ranks ~10–40 get a
foothold without cutting the top answers. Compared with the default packing per half and budget: in prompt
[paraphrased], the losses (not in pool / below cut / truncated), and every question that moves.

    nice .venv/bin/python benchmarks/bench_tail.py --devset git --shares 0.5,0.67 --budgets 3000,6000
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

import bench_recall as br
import devset_cli


def best_windows(conn: Any, space: str, qvec: np.ndarray, cands: Sequence[Any]) -> dict[str, int]:
    """chunk_id → index of its best-scoring stored window (by the question's cosine)."""
    from pipelines.vectors import unit_vectors_table

    table = unit_vectors_table(len(qvec))
    out: dict[str, int] = {}
    for c in cands:
        rows = conn.execute(f"SELECT part, vector FROM {table} WHERE model = ? AND url = ? AND ordinal = ? ORDER BY part",
                            [space, c.url, c.ordinal]).fetchall()
        if rows:
            scores = [float(np.dot(np.asarray(v, dtype=np.float32), qvec)) for _p, v in rows]
            out[c.chunk_id] = int(rows[int(np.argmax(scores))][0])
    return out


def lexical_windows(cands: Sequence[Any], windows: dict[str, int]) -> dict[str, int]:
    """``windows`` with every candidate the embedding list did not rank (no embedding score) given instead the
    window holding most of its matched question stems (the first on ties): what the product knows without
    fetching more vectors."""
    from pipelines.vectors import embed_windows

    out = dict(windows)
    for c in cands:
        if c.embedding_score is None:
            texts = [t.lower() for t in embed_windows("", c.text)]
            counts = [sum(1 for m in c.matched if m in t) for t in texts]
            out[c.chunk_id] = counts.index(max(counts)) if counts else 0
    return out


def window_piece(c: Any, part: int) -> Any:
    """The candidate cut to its stored window ``part`` (span in words, so a cut shows as a gap)."""
    from pipelines.vectors import EMBED_WINDOW_OVERLAP, EMBED_WINDOW_WORDS

    words = c.text.split()
    if len(words) <= EMBED_WINDOW_WORDS:
        return c
    start = part * (EMBED_WINDOW_WORDS - EMBED_WINDOW_OVERLAP)
    end = min(len(words), start + EMBED_WINDOW_WORDS)
    return replace(c, text=" ".join(words[start:end]), span=(start, end, len(words)))


def tail_pack(costed: Sequence[Any], windows: dict[str, int], budget: int, share: float, top_k: int = 40) -> list[Any]:
    from jobs.answer import prompt_costed

    sent: list[Any] = []
    used = 0
    for c in costed:
        if len(sent) >= top_k:
            break
        if used + c.tokens <= share * budget:
            sent.append(c)
            used += c.tokens
            continue
        piece = window_piece(c, windows.get(c.chunk_id, 0))
        cost = prompt_costed([piece])[0].tokens
        if used + cost <= budget:
            sent.append(replace(piece, tokens=cost))
            used += cost
    return sent


def sources_of(sent: Sequence[Any]) -> list[Any]:
    from jobs.answer import page_units
    from jobs.prompt import Source, prompt_order

    units = prompt_order(page_units(sent, merge=True))
    return [Source(i, u.lead.chunk_id, u.lead.url, u.heading, u.text) for i, u in enumerate(units, start=1)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = devset_cli.parser(__doc__)
    parser.add_argument("--shares", default="0.5,0.67")
    args = parser.parse_args(argv)
    from jobs.answer import packed_sources, prompt_costed
    from jobs.evaluate import answer_in_sources, evidence_tokens
    from jobs.select import Selector, _unit_length

    with contextlib.ExitStack() as stack:
        devset, store, client = devset_cli.opened(stack, args)
        sel = Selector(store.conn, embedder=client, embedding_model=br.EMBEDDING_MODEL, ensure_fts=store.load_fts)
        rows = []
        for q, wanted in devset_cli.answerable(devset, store):
            pool = sel.select(q.question, "hybrid").candidates
            costed = prompt_costed(pool)
            qvec = np.asarray(_unit_length(client.embed([q.question], model=br.EMBEDDING_MODEL)[0]), dtype=np.float32)
            windows = best_windows(store.conn, sel.vector_space, qvec, costed)
            rank = next((c.rank for c in pool if c.chunk_id in wanted), None)
            row: dict[str, Any] = {"id": q.id, "half": br.half(q.id), "para": q.id.startswith("para-"), "rank": rank}
            for budget in (int(b) for b in args.budgets.split(",")):
                base = packed_sources(costed, top_k=40, token_budget=budget, merge=False)  # the product's default
                row[("base", budget)] = (answer_in_sources(base.sources, q.expect),
                                         any(c.chunk_id in wanted for c in base.packed.sent), evidence_tokens(base.sources),
                                         len(base.sources))
                for share in (float(s) for s in args.shares.split(",")):
                    for name, chosen in ((share, windows), (f"{share}L", lexical_windows(costed, windows))):
                        sent = tail_pack(costed, chosen, budget, share)
                        srcs = sources_of(sent)
                        row[(name, budget)] = (answer_in_sources(srcs, q.expect),
                                               any(c.chunk_id in wanted for c in sent), evidence_tokens(srcs), len(srcs))
            rows.append(row)
            print(".", end="", flush=True)
        print()
        report(rows, args)
    return 0


def report(rows: list[dict[str, Any]], args: Any) -> None:
    budgets = [int(b) for b in args.budgets.split(",")]
    variants: list[Any] = ["base"]
    for share in (float(s) for s in args.shares.split(",")):
        variants += [share, f"{share}L"]
    devset_cli.report(rows, variants, budgets)


if __name__ == "__main__":
    sys.exit(main())
