"""Benchmark: fusions of the bm25 and embedding lists that do not scale by each list's best and worst (issue 23).

The product's hybrid (jobs/select.py) min-max scales each list's top 50 and adds them (``mm``), 0 for a list that
did not rank a chunk; a chunk only one list ranks scores at most half, and every score moves when a list's best or
50th changes (Git's regression since dfcf52e). Here each question's two lists are taken 200 deep once, and the
union of their top 50s is ordered by each fusion below, then packed as the product packs (whole chunks, top_k
40). ``base`` is the product's fusion (``mm`` at its HYBRID_BM25_WEIGHT), checked equal to
``Selector.select(…, "hybrid")`` per question. ``--probe N`` asks exact-term questions made from the pages
instead (round 8: a fusion that gains paraphrases can lose these, which the dev sets hardly hold).

Fusions: ``KIND``, ``BMKIND/EMKIND`` (bm25's scaling / the embedding's), optionally ``@W`` (bm25's weight,
default .5), optionally ``#N`` (each list's top N makes the pool and its statistics instead of 50). Kinds:
  mm      min-max over the top 50 (the product), missing 0
  mmfill  min-max, a chunk the other list ranks 51st-200th gets its scaled (negative) score, below that the 200th's
  max     score / the list's best, missing 0
  z       z-score over the top 50 (mean, standard deviation), missing: its own score from the 200, else the 200th's
  dbsf    (score - (mean - 3 sd)) / 6 sd over the top 50 (distribution-based), missing 0
  zdeep   z-score over the 200, missing: the 200th's
  ideal   bm25 only: score / the question's own bound, sum of its terms' idf x (k1 + 1) (no list statistic)
  idealfill, maxfill   ideal, max; a chunk missing from the list gets the list's 50th (the most it can score)
  idealdeep, maxdeep   ideal, max; a chunk missing from the list gets its own score from the 200, else the 200th's
  mmconf, mmsqrt       bm25 only: min-max times (its best / the question's ceiling), or that ratio's square root
  raw     the score as it is (the embedding's cosine), missing 0
  rrf     1 / (60 + rank), missing 0

    nice .venv/bin/python benchmarks/bench_fusion.py --devset git --variants mm@.4,z,ideal/raw@.3 --budgets 3000,6000
"""

from __future__ import annotations

import contextlib
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import bench_recall as br
import devset_cli

TOP = 50


def _minmax(scores: Sequence[float]) -> tuple[float, float]:
    high, low = max(scores), min(scores)
    return low, (high - low) or 1.0


def _scalers(kind: str, top: Sequence[float], deep: Sequence[float],
             bound: float) -> tuple[Callable[[float], float], float | None]:
    """(score -> scaled, the scaled value of a chunk missing from the list, None: use its deep score)."""
    if kind == "ideal":
        return (lambda s: s / (bound or 1.0)), 0.0
    if kind == "idealfill":  # missing: the list's 50th, the most an unranked chunk can score
        return (lambda s: s / (bound or 1.0)), min(top) / (bound or 1.0)
    if kind in ("mmconf", "mmsqrt"):  # bm25 only: min-max, times how much of the question its best holds
        low, span = _minmax(top)
        held = max(top) / (bound or 1.0)
        factor = held if kind == "mmconf" else held ** 0.5
        return (lambda s: factor * (s - low) / span), 0.0
    if kind == "idealdeep":  # missing: its own score from the 200, else the 200th's (near its true score)
        return (lambda s: s / (bound or 1.0)), None
    if kind == "maxdeep":
        high = max(top) or 1.0
        return (lambda s: s / high), None
    if kind == "maxfill":
        high = max(top) or 1.0
        return (lambda s: s / high), min(top) / high
    if kind == "raw":
        return (lambda s: s), 0.0
    if kind == "mm":
        low, span = _minmax(top)
        return (lambda s: (s - low) / span), 0.0
    if kind == "mmfill":
        low, span = _minmax(top)
        return (lambda s: (s - low) / span), None
    if kind == "max":
        high = max(top) or 1.0
        return (lambda s: s / high), 0.0
    if kind in ("z", "zdeep", "dbsf"):
        sample = deep if kind == "zdeep" else top
        mean, sd = statistics.fmean(sample), (statistics.pstdev(sample) or 1.0)
        if kind == "dbsf":
            return (lambda s: (s - (mean - 3 * sd)) / (6 * sd)), 0.0
        return (lambda s: (s - mean) / sd), None
    raise SystemExit(f"unknown fusion {kind!r}")


def fused(variant: str, bm_deep: Sequence[Any], em_deep: Sequence[Any], bound: float) -> list[Any]:
    """The union of both lists' top 50, ordered by ``variant`` (ties by url and position, as the product);
    ``bound``: the question's highest possible bm25 score."""
    variant, _, deeper = variant.partition("#")  # "#N": each list's top N in the pool and its scaling
    top = int(deeper) if deeper else TOP
    kinds, _, weight = variant.partition("@")
    bm_kind, _, em_kind = kinds.partition("/")
    w = float(weight) if weight else 0.5
    lists = [(w, bm_deep, bm_kind), (1.0 - w, em_deep, em_kind or bm_kind)]
    union: dict[str, Any] = {}
    for _w, deep, _k in lists:
        for c in deep[:top]:
            union.setdefault(c.chunk_id, c)
    score = dict.fromkeys(union, 0.0)
    for lw, deep, kind in lists:
        if kind == "rrf":
            for rank, c in enumerate(deep[:top], start=1):
                score[c.chunk_id] += lw / (60 + rank)
            continue
        if not deep:
            continue
        scale, missing = _scalers(kind, [c.score for c in deep[:top]], [c.score for c in deep], bound)
        own = {c.chunk_id: c.score for c in deep}
        floor = deep[-1].score
        for cid in union:
            if cid in own and (missing is None or any(c.chunk_id == cid for c in deep[:top])):
                score[cid] += lw * scale(own[cid])
            elif missing is None:
                score[cid] += lw * scale(floor)
            else:
                score[cid] += lw * missing
    # Both scores onto the candidate, as the product's hybrid carries them.
    bm_scores = {c.chunk_id: c.score for c in bm_deep[:top]}
    em_scores = {c.chunk_id: c.score for c in em_deep[:top]}
    order = sorted(union.values(), key=lambda c: (-round(score[c.chunk_id], 8), c.url, c.ordinal))
    return [replace(c, score=round(score[c.chunk_id], 8), bm25_score=bm_scores.get(c.chunk_id),
                    embedding_score=em_scores.get(c.chunk_id), rank=i) for i, c in enumerate(order, start=1)]


def question_bound(conn: Any, question: str) -> float:
    """The highest bm25 score any chunk could have for ``question``: each term adds at most idf x (k1 + 1)."""
    from jobs.select import Bm25Params
    from pipelines import languages, search_index

    stats = conn.execute("SELECT lang FROM bm25_stats WHERE docs > 0 ORDER BY 1").fetchall()
    lang = languages.question_stemmer(question, [name for (name,) in stats])
    terms = conn.execute(search_index.BM25_TERMS_SQL, {"q": question, "lang": lang}).fetchall()
    return sum(idf for _, idf, _ in terms) * (Bm25Params().k1 + 1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = devset_cli.parser(__doc__, models=True)
    parser.add_argument("--variants", default="mm,mm@.4,ideal/max,ideal/max@.4,ideal/raw,z,dbsf,rrf")
    parser.add_argument("--deep", type=int, default=200)
    devset_cli.add_probe(parser)
    args = parser.parse_args(argv)
    from jobs.select import HYBRID_BM25_WEIGHT, Selector

    product = f"mm@{HYBRID_BM25_WEIGHT:g}"
    variants = [product, *(v for v in args.variants.split(",") if v and v != product)]
    budgets = [int(b) for b in args.budgets.split(",")]
    with contextlib.ExitStack() as stack:
        devset, store, client = devset_cli.opened(stack, args)
        common = dict(embedder=client, embedding_model=args.embedding_model, ensure_fts=store.load_fts,
                      embedding_first=0, approximate=False)
        sel = Selector(store.conn, **common)
        deep = Selector(store.conn, pool=args.deep, **common)
        rows, differ = [], 0
        asked = devset_cli.probes(store.conn, args.probe) if args.probe else devset.questions
        for q in asked:
            if not q.expect:
                continue
            wanted = q.wanted if args.probe else devset_cli.answer_chunks(store, q)
            products = sel.select(q.question, "hybrid").candidates
            bm, em = deep.bm25(q.question, None), deep.embedding(q.question, None)
            bound = question_bound(store.conn, q.question)
            row: dict[str, Any] = {"id": q.id, "half": br.half(q.id), "para": q.id.startswith("para-")}
            for v in variants:
                order = fused(v, bm, em, bound)
                row[("rank", v)] = next((c.rank for c in order if c.chunk_id in wanted), None)
                if v == product:
                    if [c.chunk_id for c in order] != [c.chunk_id for c in products]:
                        differ += 1
                    row["rank"] = row[("rank", v)]
                for budget, cell in devset_cli.packed_cells(order, wanted, q.expect, budgets).items():
                    row[(v, budget)] = cell
            rows.append(row)
            print(".", end="", flush=True)
        print(f"\nbase ({product}) differs from the product's hybrid order on {differ} of {len(rows)} questions")
        renamed = [{**r, **{("base", b): r[(product, b)] for b in budgets}} for r in rows]
        devset_cli.report(renamed, ["base", *variants[1:]], budgets)
        for v in variants:  # the report's "not in pool" is the base's; each fusion's own pool can be deeper
            print(f"{v}: answer in the pool, tune / check: " + " / ".join(
                f"{sum(1 for r in rows if r['half'] == h and r[('rank', v)] is not None)}/"
                f"{sum(1 for r in rows if r['half'] == h)}" for h in ("tune", "check")))
        print("\nthe answer's pool rank under each fusion, where any fusion changes what reaches the prompt:")
        print("half id " + " ".join(variants))
        for r in rows:
            if len({r[(v, b)][0] for v in variants for b in budgets}) > 1:
                print(r["half"], r["id"], " ".join(str(r[("rank", v)]) for v in variants))
    return 0


if __name__ == "__main__":
    sys.exit(main())
