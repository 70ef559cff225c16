"""Benchmark: does the extractive answerer's confidence mean what it says? (issue 24, item 6)

For every question of the development sets (the Python and PostgreSQL manuals, ``benchmarks/devset``),
answer it the way `webqa run --answerer extractive` does (bm25 selection at the job defaults, the wider
retry, ``jobs/extractive.py``) over the crawled devset database, and count per confidence: how many
answers, and how many contain one of the question's ``expect`` phrases (case- and whitespace-insensitive,
as `webqa eval` compares). Questions the corpus cannot answer (``none-*``) count as wrong unless "Not
enough information". Reported per tuning and check half (``bench_recall.half``).

Goal: confidence high ⇒ an expect phrase is in the answer for at least 90% of those answers.

    .venv/bin/python benchmarks/bench_extractive.py [--devset python|postgresql|all]

Needs the manuals (scripts/install-corpus.sh, scripts/install-corpus-postgresql.sh); crawls each devset
database once (as bench_recall.py does, reused afterwards). Writes benchmarks/results/extractive.json.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import bench_recall
import common


def answer_all(devset_name: str) -> list[dict[str, Any]]:
    from jobs.answer import AskSettings, QuestionSpec
    from jobs.evaluate import normalise
    from jobs.llm import OllamaAccess
    from jobs.session import open_session

    kind = bench_recall.use_devset(devset_name)
    if not kind.corpus.exists():
        print(f"  {devset_name}: no manual at {kind.corpus}; run {kind.install}")
        return []
    if not kind.db.exists():
        bench_recall.crawl(bench_recall.DEFAULT_PORT, kind.db)
    netloc, _urls, _finished = bench_recall.stored_netloc(kind.db)
    devset = bench_recall.load_devset(netloc or "127.0.0.1")
    results = []
    with common.temp_dir("extractive") as tmp:
        db = tmp / "devset.duckdb"
        shutil.copy(kind.db, db)  # answers are stored: keep the shared devset database as it was
        access = OllamaAccess(None, None, None, None)
        with open_session(db, access, embedding_model=None, no_chunks="no chunks") as session:
            answerer = session.answerer(AskSettings(method="bm25", answerer="extractive"))
            for q in devset.questions:
                outcome = answerer.answer(QuestionSpec(q.id, q.question, None))
                data = (outcome.final.data if outcome.final is not None else None) or {}
                validation = outcome.final.validation if outcome.final is not None else None
                nei = bool(validation and validation.not_enough_information)
                text = normalise(str(data.get("answer") or ""))
                hit = any(normalise(p) in text for p in q.expect) if q.expect else False
                results.append({"devset": devset_name, "id": q.id, "half": bench_recall.half(q.id),
                                "answerable": bool(q.expect), "confidence": "nei" if nei else data.get("confidence"),
                                "hit": hit, "answer": data.get("answer")})
    return results


def table(results: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """{half: {confidence: {"n", "hit", "share"}}} with an "all" half."""
    cells: dict[str, dict[str, dict[str, Any]]] = defaultdict(lambda: defaultdict(lambda: {"n": 0, "hit": 0}))
    for r in results:
        for half in (r["half"], "all"):
            cell = cells[half][str(r["confidence"])]
            cell["n"] += 1
            cell["hit"] += int(r["hit"] or (r["confidence"] == "nei" and not r["answerable"]))
    for half in cells.values():
        for cell in half.values():
            cell["share"] = round(cell["hit"] / cell["n"], 3) if cell["n"] else None
    return {h: dict(v) for h, v in cells.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devset", choices=("python", "postgresql", "all"), default="all")
    parser.add_argument("--show", action="store_true", help="print every high-confidence answer that misses")
    args = parser.parse_args(argv)
    machine = common.machine_info()
    figures: dict[str, Any] = {}
    for name in ("python", "postgresql") if args.devset == "all" else (args.devset,):
        results = answer_all(name)
        if not results:
            continue
        cells = table(results)
        figures[name] = cells
        print(f"{name}: {len(results)} questions")
        for half in ("tune", "check", "all"):
            row = cells.get(half, {})
            print(f"  {half:5}  " + "  ".join(
                f"{conf}: {row[conf]['hit']}/{row[conf]['n']}" for conf in ("high", "medium", "low", "nei") if conf in row))
        if args.show:
            for r in results:
                if r["confidence"] == "high" and not r["hit"]:
                    print(f"    miss {r['id']}: {str(r['answer'])[:160]}")
    if not figures:
        print("no devset could be answered", file=sys.stderr)
        return 1
    common.save_result("extractive", figures, command=common.command_line(), machine=machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
