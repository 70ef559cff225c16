"""Peak memory of `webqa run` against the number of questions (extractive answerer, bm25, no LLM).

A run streams each result to answers.jsonl and writes report.md and answers.csv from that file, one
question at a time, so its memory should not grow with the number of questions. This crawls the three
pages of the test site (tests/support/site_server.py) once, then runs jobs of N questions (the same five
questions, repeated under distinct ids) with `--no-crawl`, and prints the peak RSS of each run.

    .venv/bin/python benchmarks/bench_many_questions.py [--sizes 100,1000,10000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.site_server import SiteServer  # noqa: E402
from tests.support.run import GARDEN, LIGHTHOUSE, QUESTIONS, WIDGET  # noqa: E402

WEBQA = [sys.executable, "-m", "jobs.cli"]


def peak_rss_mb(command: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Run ``command`` in a fresh child; its peak RSS (from a wrapper process of its own), wall time and exit."""
    wrapper = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", wrapper, *command], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=3600)
    seconds = time.monotonic() - started
    return int(done.stdout.strip().splitlines()[-1]) / 1024, seconds, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    args = parser.parse_args()
    env = {**os.environ, "WEBQA_ALLOW_PRIVATE_NETWORKS": "1"}
    with tempfile.TemporaryDirectory() as tmp, SiteServer() as site:
        site.add(0, "/widget.html", WIDGET)
        site.add(0, "/garden.html", GARDEN)
        site.add(0, "/lighthouse.html", LIGHTHOUSE)
        db = Path(tmp) / "bench.duckdb"
        urls = [site.url(0, p) for p in ("/widget.html", "/garden.html", "/lighthouse.html")]
        subprocess.run([*WEBQA, "-q", "crawl", *urls, "--db", str(db), "--delay", "0"], check=True, env=env, cwd=REPO)
        texts = [q for q, _needle in QUESTIONS.values()]
        print("| questions | peak RSS (MB) | wall (s) | exit |\n|---|---|---|---|")
        for size in (int(s) for s in args.sizes.split(",")):
            job = Path(tmp) / f"job-{size}.yaml"
            questions = [{"id": f"q{i}", "question": texts[i % len(texts)]} for i in range(size)]
            job.write_text(json.dumps({
                "name": f"many-{size}", "questions": questions, "answerer": "extractive",
                "selection": {"method": "bm25"}, "output": {"formats": ["jsonl", "markdown", "csv"]},
            }), encoding="utf-8")
            mb, seconds, code = peak_rss_mb([*WEBQA, "-q", "run", str(job), "--no-crawl", "--db", str(db),
                                             "--out", str(Path(tmp) / "out")], env)
            print(f"| {size} | {mb:.0f} | {seconds:.0f} | {code} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
