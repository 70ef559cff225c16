"""Benchmark 5 (and 6): runner overhead per question, with an LLM that answers at once.

``webqa run JOB.yaml --no-crawl`` of a job with 30 questions about the manual, on a copy of benchmark
1's database (``benchmarks/results/corpus.duckdb``; crawled here if missing), against ``FakeOllama``
(tests/support/fake_ollama.py) running in this process. Its chat responder answers instantly with valid JSON:
the first words of SOURCE 1 as a verbatim quote, confidence high, so every answer is grounded and no
question takes the wider retry. Its embeddings are the fake's hashed 64-dimension vectors.

Wall time per question = process wall time ÷ questions, minus nothing: the fake's time is included
and is close to zero (the sum of the chat latencies the product recorded is printed next to it).
Runs, in order, each on the same database copy:

* bm25, 30 questions;
* hybrid, 30 questions, embedding cache cold (the run embeds every chunk through the fake first);
* hybrid, 30 questions, cache warm (the steady state of a daily job);
* hybrid, 1 question, cache warm: the fixed cost (start-up, checks, reports), so the marginal cost of
  a question is (T30 − T1) / 29;

    .venv/bin/python benchmarks/bench_runner.py [--db CORPUS.duckdb]
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

import common

_SOURCE = re.compile(r'<source n="(\d+)"[^>]*>\n(.*?)\n</source n="\1">', re.DOTALL)


def grounded_reply(body: dict[str, Any]) -> dict[str, Any]:
    """Quote the first words of the first source, as a diligent model would."""
    from tests.support.fake_ollama import user_prompt

    match = _SOURCE.search(user_prompt(body))
    if match is None:
        return {"answer": "Not enough information", "citations": [], "confidence": "low"}
    quote = " ".join(match.group(2).split()[:12])
    return {"answer": f"{quote} [{match.group(1)}]", "citations": [{"source": int(match.group(1)), "quote": quote}],
            "confidence": "high"}


def write_job(path: Path, *, questions: list[str], method: str, host: str, out: Path) -> None:
    job = {
        "name": "bench-runner",
        "questions": questions,
        "model": "llama3.2:3b",
        "embedding_model": "nomic-embed-text",
        "selection": {"method": method, "top_k": 6, "token_budget": 3000},
        "answerer": "llm",
        "fallback_extractive": False,
        "output": {"dir": str(out), "formats": ["jsonl", "markdown"]},
        "ollama": {"host": host, "max_attempts": 1},
    }
    path.write_text(yaml.safe_dump(job, sort_keys=False, allow_unicode=True))


def run_figures(db: Path, run_id: int) -> dict[str, Any]:
    import duckdb

    conn = duckdb.connect(str(db), read_only=True)
    try:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE final), count(*) FILTER (WHERE attempt = 2), "
            "count(*) FILTER (WHERE final AND grounded), count(*) FILTER (WHERE error IS NOT NULL), "
            "coalesce(sum(latency_s), 0), list_distinct(list(method)) FROM answers WHERE run_id = ?", [run_id]
        ).fetchone()
        status = conn.execute("SELECT status, epoch(finished_at - started_at) FROM runs WHERE run_id = ?",
                              [run_id]).fetchone()
    finally:
        conn.close()
    return {"final_answers": row[0], "retries": row[1], "grounded": row[2], "errors": row[3],
            "chat_latency_sum_s": round(row[4], 3), "methods_used": row[5], "status": status[0],
            "run_row_seconds": round(status[1], 3) if status[1] is not None else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="source database (default: benchmarks/results/corpus.duckdb)")
    parser.add_argument("--max-wait", type=float, default=15.0,
                        help="wait up to this many seconds for a quiet machine before each run (default 15)")
    args = parser.parse_args()
    common.stop_cleanly_on_sigterm()
    machine = common.machine_info()
    common.print_machine(machine)
    source = common.ensure_corpus_db(args.db)

    from tests.support.fake_ollama import FakeOllama

    questions = list(common.QUESTIONS)
    plan = [("bm25", questions, "bm25, 30 questions"),
            ("hybrid", questions, "hybrid, 30 questions, embedding cache cold"),
            ("hybrid", questions, "hybrid, 30 questions, embedding cache warm"),
            ("hybrid", questions[:1], "hybrid, 1 question, cache warm (fixed cost)")]
    runs: list[dict[str, Any]] = []
    with common.temp_dir("runner") as tmp, FakeOllama() as fake:
        fake.chat_responder = grounded_reply
        db = tmp / "run.duckdb"
        shutil.copyfile(source, db)
        chunks = _count_chunks(db)
        print(f"database: copy of {source.name}, {chunks} chunks; fake Ollama at {fake.url}")
        for method, qs, label in plan:
            job = tmp / "job.yaml"
            write_job(job, questions=qs, method=method, host=fake.url, out=tmp / "out")
            quiet = common.wait_for_quiet(args.max_wait)
            chat0, embed0 = len(fake.requests_to("/api/chat")), len(fake.requests_to("/api/embed"))
            measured = common.run_measured([common.WEBQA, "--quiet", "run", job, "--no-crawl", "--db", db,
                                            "--out", tmp / "out"])
            if measured.returncode != 0:
                print(measured.stdout, measured.stderr)
                measured.check()
            run_id = int(re.search(r"Run (\d+)", measured.stdout).group(1))
            figures = run_figures(db, run_id)
            entry = {
                "label": label, "method": method, "questions": len(qs), **measured.summary(), "before": quiet,
                "per_question_s": round(measured.wall_s / len(qs), 4),
                "chat_requests": len(fake.requests_to("/api/chat")) - chat0,
                "embed_requests": len(fake.requests_to("/api/embed")) - embed0,
                **figures,
            }
            runs.append(entry)
            print(f"  {label}: {measured.wall_s:.2f} s wall = {entry['per_question_s'] * 1000:.0f} ms/question; "
                  f"{figures['final_answers']} answers ({figures['grounded']} grounded, {figures['retries']} retries, "
                  f"{figures['errors']} errors), {entry['chat_requests']} chat + {entry['embed_requests']} embed "
                  f"requests; chat latency sum {figures['chat_latency_sum_s']:.2f} s; peak RSS "
                  f"{measured.max_rss_mib:.0f} MiB; {common.load_note(measured.load)}")

    warm30, warm1 = runs[2], runs[3]
    marginal = (warm30["wall_s"] - warm1["wall_s"]) / (warm30["questions"] - warm1["questions"])
    result = {"chunks": chunks, "runs": runs,
              "marginal_per_question_s": round(marginal, 4), "fixed_cost_s": round(warm1["wall_s"] - marginal, 3)}
    path = common.save_result("runner", result, command=common.command_line(), machine=machine)
    print()
    print("[5] runner overhead per question (webqa run --no-crawl, fake Ollama answering at once; wall ÷ questions, "
          "minus nothing):")
    for r in runs:
        print(f"    {r['label']:<45} {r['wall_s']:7.2f} s  {r['per_question_s'] * 1000:7.0f} ms/question  "
              f"peak RSS {r['max_rss_mib']:.0f} MiB")
    print(f"    marginal cost of one more question (hybrid, warm): {marginal * 1000:.0f} ms; fixed cost per run "
          f"{result['fixed_cost_s']:.2f} s")
    print(f"results: {path.relative_to(common.REPO)}")


def _count_chunks(db: Path) -> int:
    import duckdb

    conn = duckdb.connect(str(db), read_only=True)
    try:
        return int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
