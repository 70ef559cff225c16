"""Benchmark: the fixed cost of a run (issue 24, item 7): a one-URL job, warm database, no Ollama.

What cron waits for when nothing changed, taken apart (each a subprocess, median of ``--repeat`` runs
after one warm-up, on one page of the Python manual served by the test site with a robots.txt):

- start-up: ``webqa --version`` and the imports of a run (``python -c "import jobs.runner, crawler.run, …"``);
- robots: ``webqa crawl URL`` with the robots.txt cache removed, less the same with it (a first
  fetch of robots.txt, and the host's delay before the page, which politeness keeps);
- crawl: ``webqa crawl URL`` with everything warm (robots.txt cached, the page answers 304);
- selection and report: ``webqa run JOB --no-crawl`` (bm25 + the extractive answerer, Ollama down);
- the whole run: ``webqa -q run JOB`` (goal: at most 1.5 s wall);
- connection refused: ``webqa crawl`` of 1 refused URL, 17 on 17 ports of one host, 17 on one port.

    .venv/bin/python benchmarks/bench_fixed_cost.py [--repeat 5] [--max-wait 30]

Writes benchmarks/results/fixed_cost.json. Ollama is a closed loopback port (connection refused).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import common

PAGE = "library/json.html"
IMPORTS = "import jobs.cli, jobs.runner, crawler.run, scrapy.crawler, duckdb, ollama"


def closed_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])  # closed again when the socket is: nothing listens there


def timed(cmd: Sequence[str], env: dict[str, str]) -> tuple[int, float, float, dict[str, float]]:
    """Exit code, wall and CPU seconds (the process and the children it reaped) of one run, and the machine's
    other load meanwhile. Lighter than common.run_measured, whose /proc sampling every 0.1 s takes CPU
    from a run that lasts about a second on two cores."""
    load = common.MachineLoad()
    started = time.perf_counter()
    proc = subprocess.Popen([str(c) for c in cmd], cwd=common.REPO, env={**os.environ, **env},
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _pid, status, usage = os.wait4(proc.pid, 0)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    wall = time.perf_counter() - started
    cpu = usage.ru_utime + usage.ru_stime
    return os.waitstatus_to_exitcode(status), wall, cpu, load.finish(cpu)


def median_wall(cmd: Sequence[str], repeat: int, env: dict[str, str], before: Any = None) -> dict[str, Any]:
    walls, cpus, others, codes = [], [], [], set()
    for i in range(repeat + 1):
        if before is not None:
            before()
        code, wall, cpu, load = timed(cmd, env)
        codes.add(code)
        if i:  # the first is the warm-up
            walls.append(wall)
            cpus.append(cpu)
            others.append(load.get("others_cores", float("nan")))
    return {"median_s": round(statistics.median(walls), 3), "min_s": round(min(walls), 3),
            "max_s": round(max(walls), 3), "cpu_median_s": round(statistics.median(cpus), 3),
            "others_cores": round(statistics.median(others), 2), "exit_codes": sorted(codes)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--max-wait", type=float, default=30.0, help="seconds to wait for a quiet machine")
    args = parser.parse_args(argv)
    common.require_corpus()
    machine = common.machine_info()
    common.print_machine(machine)
    load = common.wait_for_quiet(args.max_wait)
    env = {**common.CRAWL_ENV, "OLLAMA_HOST": f"http://127.0.0.1:{closed_port()}"}
    webqa = str(common.WEBQA)
    figures: dict[str, Any] = {"load_before": load}
    with common.corpus_site(["127.0.0.1"]) as site, common.temp_dir("fixed-cost") as tmp:
        site.add(0, "/robots.txt", "User-agent: *\nAllow: /\n", content_type="text/plain")
        url = site.url(0, "/" + PAGE)
        db = tmp / "webqa.duckdb"
        robots_cache = Path(str(db) + ".robots.json")
        job = tmp / "job.yaml"
        job.write_text(
            "name: one-page\n"
            f"urls: [{url}]\n"
            "crawl: {allow_private_networks: true}\n"
            "questions:\n  - Does json.dumps allow NaN and Infinity values by default?\n"
            "output: {dir: out}\n", encoding="utf-8")
        first = common.run_measured([webqa, "-q", "run", job, "--db", db], env=env)
        figures["first_run_s"] = round(first.wall_s, 3)
        print(f"first run (cold database): {first.wall_s:.2f} s, exit {first.returncode}: {first.stderr.strip()[:300]}")
        if first.returncode not in (0, 1):
            return 1

        steps = {
            "startup_version": ([webqa, "--version"], None),
            "startup_imports": ([str(common.PYTHON), "-c", IMPORTS], None),
            "crawl_robots_cold": ([webqa, "-q", "crawl", url, "--db", db, "--allow-private-networks"],
                                  lambda: robots_cache.unlink(missing_ok=True)),
            "crawl_warm": ([webqa, "-q", "crawl", url, "--db", db, "--allow-private-networks"], None),
            "select_and_report": ([webqa, "-q", "run", job, "--db", db, "--no-crawl"], None),
            "whole_run": ([webqa, "-q", "run", job, "--db", db], None),
        }
        for name, (cmd, before) in steps.items():
            figures[name] = median_wall(cmd, args.repeat, env, before)
            f = figures[name]
            print(f"{name:20} {f['median_s']:6.2f} s (min {f['min_s']:.2f}, max {f['max_s']:.2f}; CPU {f['cpu_median_s']:.2f} s; "
                  f"others kept {f['others_cores']:.2f} cores busy; exit {f['exit_codes']})")
        figures["robots_s"] = round(figures["crawl_robots_cold"]["median_s"] - figures["crawl_warm"]["median_s"], 3)
        print(f"{'robots (cold - warm)':20} {figures['robots_s']:6.2f} s")

        refused_db = tmp / "refused.duckdb"
        one = [f"http://127.0.0.1:{closed_port()}/gone.html"]
        ports = [f"http://127.0.0.1:{closed_port()}/p{i}.html" for i in range(17)]
        same = closed_port()
        paths = [f"http://127.0.0.1:{same}/p{i}.html" for i in range(17)]
        for name, urls in (("refused_1", one), ("refused_17_ports", ports), ("refused_17_paths", paths)):
            figures[name] = median_wall([webqa, "-q", "crawl", *urls, "--db", refused_db, "--allow-private-networks"],
                                        max(1, args.repeat // 2), env,
                                        lambda: Path(str(refused_db) + ".robots.json").unlink(missing_ok=True))
            print(f"{name:20} {figures[name]['median_s']:6.2f} s (exit {figures[name]['exit_codes']})")
    figures["load_after"] = common.wait_for_quiet(0)
    common.save_result("fixed_cost", figures, command=common.command_line(), machine=machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
