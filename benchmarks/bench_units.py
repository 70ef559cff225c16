"""Benchmark: the embedding list when a chunk also scores as its best short unit (issue 23, the first stage).

Why it is measured: most answers in neither list's top 50 are one list item (an asciidoc option, a FAQ entry, a
glossary term) inside a chunk of a dozen items, and the question scores far higher against that item alone than
against the 150-word windows the chunk is embedded as (benchmarks/diag_pool_miss.py). Here every chunk's lines
are grouped into units (a line of fewer than ``--min-words`` words joins the lines after it, so an option's name
stays with its description; longer than 150 words, cut), each embedded once with the chunk's heading path
(``--no-heading``: without) and cached under build-first/; a chunk's embedding score becomes the larger of its
best window (the product's) and its best unit. The embedding list so ordered is fused with bm25 as the product
fuses (min-max, union of both top 50s) and packed as the product packs (whole chunks, top_k 40), against the
product's order (``base``). ``--probe N`` asks bench_fusion's exact-term questions instead.

    nice .venv/bin/python benchmarks/bench_units.py --devset git --db build-first/devset-git.duckdb
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import bench_fusion as bf
import bench_recall as br
import devset_cli


def units(text: str, min_words: int, cap: int = 150) -> list[str]:
    """The chunk's lines grouped: a line of fewer than ``min_words`` words joins what follows; cut at ``cap``."""
    made: list[str] = []
    pending: list[str] = []
    for line in text.split("\n"):
        words = line.split()
        if not words:
            continue
        pending.extend(words)
        if len(pending) >= min_words:
            made.extend(" ".join(pending[i:i + cap]) for i in range(0, len(pending), cap))
            pending = []
    if pending:
        made.append(" ".join(pending))
    return made


def unit_matrix(conn: Any, client: Any, model: str, min_words: int, heading: bool, cache: Path) -> tuple[Any, list[str]]:
    """(unit vectors as rows, the chunk_id of each row), embedded once and kept in ``cache``."""
    import numpy as np

    rows = conn.execute("SELECT chunk_id, heading_path, text FROM chunks ORDER BY url, ordinal").fetchall()
    texts, owners = [], []
    for cid, head, text in rows:
        made = units(text, min_words)
        if len(made) < 2:
            continue  # one unit is the chunk itself: its windows already score it
        for u in made:
            texts.append(f"{head}\n\n{u}" if heading and head else u)
            owners.append(cid)
    key = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    path = cache / f"units-{key}.npy"
    if path.exists():
        return np.load(path), owners
    print(f"  embedding {len(texts)} units of {len(rows)} chunks", flush=True)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    vecs: dict[int, Any] = {}
    for start in range(0, len(order), 256):
        part = order[start:start + 256]
        got = client.embed([texts[i] for i in part], model=model)
        for i, v in zip(part, got, strict=True):
            vecs[i] = v
        print(f"\r  {start + len(part)}/{len(order)}", end="", flush=True)
    out = np.array([vecs[i] for i in range(len(texts))], dtype=np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    np.save(path, out)
    print()
    return out, owners


def with_units(em_all: Sequence[Any], qvec: Any, matrix: Any, owners: Sequence[str], deep: int,
               discount: float = 0.0) -> list[Any]:
    """The embedding list re-ordered: each chunk's score the larger of its best window and its best unit less
    ``discount`` (a short unit's cosine runs higher than a window's for the same match)."""
    sims = matrix @ qvec - discount
    best: dict[str, float] = {}
    for cid, s in zip(owners, sims.tolist(), strict=True):
        if s > best.get(cid, -2.0):
            best[cid] = s
    scored = [replace(c, score=max(c.score, best.get(c.chunk_id, -2.0))) for c in em_all]
    scored.sort(key=lambda c: (-c.score, c.url, c.ordinal))
    return [replace(c, embedding_score=c.score) for c in scored[:deep]]


def main(argv: Sequence[str] | None = None) -> int:
    parser = devset_cli.parser(__doc__, models=True)
    parser.add_argument("--min-words", type=int, default=12)
    parser.add_argument("--no-heading", action="store_true")
    parser.add_argument("--probe", type=int, default=0, metavar="N")
    parser.add_argument("--cache", type=Path, default=Path("build-first"))
    parser.add_argument("--discounts", default="0", help="variants: a unit's cosine less each of these")
    args = parser.parse_args(argv)
    import numpy as np
    from jobs.select import HYBRID_BM25_WEIGHT, Selector, _unit_length
    from jobs.prefixes import prefixes_for

    product = f"mm@{HYBRID_BM25_WEIGHT:g}"
    budgets = [int(b) for b in args.budgets.split(",")]
    discounts = [float(d) for d in args.discounts.split(",")]
    with contextlib.ExitStack() as stack:
        devset, store, client = devset_cli.opened(stack, args)
        conn = store.conn
        matrix, owners = unit_matrix(conn, client, args.embedding_model, args.min_words, not args.no_heading,
                                     args.cache)
        common = dict(embedder=client, embedding_model=args.embedding_model, ensure_fts=store.load_fts,
                      embedding_first=0, approximate=False)
        deep = Selector(conn, pool=200, **common)
        every = Selector(conn, pool=1_000_000, **common)
        pre = prefixes_for(args.embedding_model)
        asked = bf.probes(conn, args.probe) if args.probe else devset.questions
        rows = []
        for q in asked:
            if not q.expect:
                continue
            wanted = q.wanted if args.probe else devset_cli.answer_chunks(store, q)
            bm = deep.bm25(q.question, None)
            em_all = every.embedding(q.question, None)
            qvec = np.array(_unit_length(client.embed([pre.query + q.question], model=args.embedding_model)[0]),
                            dtype=np.float32)
            lists = [("base", em_all[:200])] + [(f"units-{d:g}", with_units(em_all, qvec, matrix, owners, 200, d))
                                                for d in discounts]
            bound = bf.question_bound(conn, q.question)
            row: dict[str, Any] = {"id": q.id, "half": br.half(q.id), "para": q.id.startswith("para-")}
            ranks = []
            for v, em in lists:
                order = bf.fused(product, bm, em, bound)
                ranks.append(next((c.rank for c in order if c.chunk_id in wanted), None))
                ranks.append(next((i for i, c in enumerate(em, 1) if c.chunk_id in wanted), None))
                for budget, cell in devset_cli.packed_cells(order, wanted, q.expect, budgets).items():
                    row[(v, budget)] = cell
            row["rank"] = ranks[0]  # the base's pool rank: what report() counts as "not in pool"
            row["ranks"] = ranks
            rows.append(row)
            print(".", end="", flush=True)
        print()
        names = ["base", *(f"units-{d:g}" for d in discounts)]
        devset_cli.report(rows, names, budgets)
        for i, v in enumerate(names):
            print(f"{v}: answer in the pool, tune / check: " + " / ".join(
                f"{sum(1 for r in rows if r['half'] == h and r['ranks'][2 * i] is not None)}/"
                f"{sum(1 for r in rows if r['half'] == h)}" for h in ("tune", "check")))
        print("\nhalf id  (pool rank, embedding rank) for " + " / ".join(names) + " (where the pool rank moves, within 50)")
        for r in rows:
            pools = r["ranks"][0::2]
            if len(set(pools)) > 1 and min(p or 999 for p in pools) <= 50:
                print(r["half"], r["id"], " / ".join(f"{p},{e}" for p, e in zip(pools, r["ranks"][1::2])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
