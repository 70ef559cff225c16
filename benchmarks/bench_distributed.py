"""Pages/s of a crawl through Redis against the number of worker processes, next to the ceiling H/d.

    .venv/bin/python -m benchmarks.bench_distributed [--hosts 4] [--delay 0.25] [--pages 40] [--workers 1,2,4]

One redis-server on loopback, a site of H loopback hosts (tests/support/site_server.py) with ``--pages`` pages
each, one coordinator and N workers. Everything is measured at the server or in Redis, not in webqa:

* pages/s: pages requested / time between the first and the last page request (process start-up,
  which is seconds of imports, is not crawling);
* efficiency: pages/s divided by the ceiling H/d, the most a polite crawler may send;
* gap violations: same-host request pairs closer than d, over all hosts; the gaps' spread (min, median,
  90th percentile, max) tells a steady cost per request (median above d) from stalls (the tail);
* Redis cost per page: commands (those run inside the Lua scripts included) and the server's CPU time in
  them (INFO commandstats) per page;
* the machine's 1-minute load average when the row ended: on a shared machine, the context of the rest.

A crawl on one machine (no Redis) of the same site is measured the same way for comparison.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.site_server import SiteServer  # noqa: E402

WEBQA = [sys.executable, "-m", "jobs.cli"]


def _site(hosts: list[str], pages: int) -> tuple[SiteServer, list[str]]:
    site = SiteServer(hosts).start()
    seeds = []
    for host in hosts:
        links = "".join(f'<li><a href="/p{j}.html">page {j}</a></li>' for j in range(pages))
        site.add(host, "/", f"<html><body><h1>{host}</h1><p>Index of the pages.</p><ul>{links}</ul></body></html>")
        for j in range(pages):
            site.add(host, f"/p{j}.html", f"<html><head><title>Page {j}</title></head><body><h1>Page {j}</h1>"
                                          f"<p>Text of page {j} on {host}, a sentence or two of content.</p></body></html>")
        seeds.append(site.url(host, "/"))
    return site, seeds


def _measure(site: SiteServer, hosts: list[str], delay: float) -> dict[str, float]:
    records = [r for r in site.log if r.path != "/robots.txt"]
    times = sorted(r.time for r in records)
    span = times[-1] - times[0]
    violations, gaps = 0, []
    for host in hosts:
        ts = sorted(r.time for r in records if r.host == host)
        pairs = [b - a for a, b in zip(ts, ts[1:])]
        gaps += pairs
        violations += sum(1 for g in pairs if g < delay)
    rate = (len(records) - 1) / span
    gaps.sort()
    return {"pages": len(records), "seconds": span, "rate": rate, "ceiling": len(hosts) / delay,
            "efficiency": rate / (len(hosts) / delay), "violations": violations, "min_gap": gaps[0],
            "median_gap": gaps[len(gaps) // 2], "p90_gap": gaps[len(gaps) * 9 // 10], "max_gap": gaps[-1]}


def _redis(tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind",
                               "127.0.0.1", "--dir", str(tmp), "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.05)
    return server, port


def _redis_cost(port: int) -> tuple[int, int]:
    import redis

    stats = redis.Redis(port=port).info("commandstats")
    calls = sum(v["calls"] for v in stats.values())
    usec = sum(v["usec"] for v in stats.values())
    return calls, usec


def run_one(workers: int, hosts: list[str], pages: int, delay: float, env: dict[str, str]) -> dict[str, float]:
    site, seeds = _site(hosts, pages)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        db = tmp / "bench.duckdb"
        common = ["--db", str(db), "--depth", "1", "--delay", str(delay), *seeds]
        try:
            if workers == 0:  # on one machine
                subprocess.run([*WEBQA, "crawl", *common], cwd=REPO, env=env, check=True, timeout=900,
                               stdout=subprocess.DEVNULL)
                result = _measure(site, hosts, delay)
                result["redis_calls"] = result["redis_usec"] = 0
                return result
            server, port = _redis(tmp)
            try:
                url = f"redis://127.0.0.1:{port}/0"
                coordinator = subprocess.Popen([*WEBQA, "crawl", "--redis", url, *common], cwd=REPO, env=env,
                                               stdout=subprocess.DEVNULL)
                procs = [subprocess.Popen([*WEBQA, "worker", "--redis", url, "--wait", "60", "--workers", "1"],
                                          cwd=REPO, env=env, stdout=subprocess.DEVNULL) for _ in range(workers)]
                assert coordinator.wait(900) == 0
                for proc in procs:
                    proc.wait(60)
                result = _measure(site, hosts, delay)
                calls, usec = _redis_cost(port)
                result["redis_calls"] = calls / result["pages"]
                result["redis_usec"] = usec / result["pages"]
                return result
            finally:
                server.terminate()
                server.wait(10)
        finally:
            site.stop()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.25)
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--workers", default="0,1,2,4", help="0 = a crawl on one machine, without Redis")
    args = parser.parse_args()
    hosts = [f"127.0.0.{i + 1}" for i in range(args.hosts)]
    env = dict(os.environ, WEBQA_ALLOW_PRIVATE_NETWORKS="1", WEBQA_REDIS_GRACE="1")
    print(f"H={args.hosts} hosts, d={args.delay} s, {args.pages + 1} pages per host, ceiling H/d = "
          f"{args.hosts / args.delay:.1f} pages/s")
    print("| workers | pages | pages/s | ceiling H/d | efficiency | gap violations | same-host gap min / median / p90 / max (s) "
          "| Redis commands/page | Redis CPU µs/page | load average |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in [int(x) for x in args.workers.split(",")]:
        r = run_one(n, hosts, args.pages, args.delay, env)
        label = "one machine, no Redis" if n == 0 else str(n)
        print(f"| {label} | {r['pages']} | {r['rate']:.2f} | {r['ceiling']:.1f} | {r['efficiency']:.3f} | "
              f"{r['violations']} | {r['min_gap']:.3f} / {r['median_gap']:.3f} / {r['p90_gap']:.3f} / {r['max_gap']:.3f} | "
              f"{r['redis_calls']:.1f} | {r['redis_usec']:.0f} | {os.getloadavg()[0]:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
