"""Run every benchmark in turn, then render BENCHMARKS.md's tables from their results.

Each script runs as its own process and prints its figures; the whole set takes about 10–15 minutes
on a 2-core machine (longer when other work keeps the machine busy: each script first waits up to
``--max-wait`` seconds for a quiet machine).

    .venv/bin/python benchmarks/run_all.py [--max-wait 15] [--no-report]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import common

SCRIPTS = ("bench_crawl.py", "bench_politeness.py", "bench_select.py", "bench_runner.py", "diag_duckdb.py")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-wait", default="15", help="passed to every script (default 15)")
    parser.add_argument("--no-report", action="store_true", help="do not rewrite BENCHMARKS.md")
    parser.add_argument("--only", help="comma-separated script names to run (default: all)")
    args = parser.parse_args()
    common.stop_cleanly_on_sigterm()
    scripts = [s for s in SCRIPTS if not args.only or s.removesuffix(".py") in args.only or s in args.only]
    started = time.perf_counter()
    failed = []
    for script in scripts:
        extra = ["--profile"] if script == "bench_select.py" else []
        cmd = [str(common.PYTHON), str(common.REPO / "benchmarks" / script), "--max-wait", args.max_wait, *extra]
        print(f"=== {script} ({time.perf_counter() - started:.0f} s since start)", flush=True)
        child = subprocess.Popen(cmd, cwd=common.REPO)
        try:
            returncode = child.wait()
        except BaseException:
            child.terminate()  # the script removes its temporary folders and stops its servers
            child.wait(timeout=60)
            raise
        if returncode != 0:
            failed.append(script)
    if not args.no_report:
        subprocess.run([str(common.PYTHON), str(common.REPO / "benchmarks" / "report.py")], cwd=common.REPO, check=False)
    print(f"=== done in {time.perf_counter() - started:.0f} s" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
