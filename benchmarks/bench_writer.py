"""The one writer's ceiling in a crawl through Redis: pages/s the coordinator stores, its CPU, its backlog.

    nice .venv/bin/python benchmarks/bench_writer.py alone [--pages 300] [--items 600] [--batches 1,50]
    nice .venv/bin/python benchmarks/bench_writer.py crawl [--hosts 8] [--workers 1,2,4,6] [--replicate 2]
    nice .venv/bin/python benchmarks/bench_writer.py crawl --workers 4 --stall 20 --backlog 100

``alone``: the writer by itself, the way the coordinator runs it (``coordinator.Writer`` over a real
redis-server and a fresh DuckDB file), on items that real workers would send: ``--pages`` pages of the
Python manual cleaned here first (``process_page``), handed over ``--items`` times under distinct URLs,
all waiting in Redis before the clock starts. Its CPU seconds a page are the writer's ceiling on one
core (pages/s = 1 / CPU a page when the writer has its core to itself), which extrapolates to a bigger
machine; one batch of 1 is how the coordinator wrote before it took what waits as one transaction.

``crawl``: a whole crawl: the manual served by ``--hosts`` loopback hosts (``--replicate`` copies of it
under distinct paths), delay 0, one coordinator (``webqa crawl --redis``) and N worker processes (one
extraction process each). Once a second: pages stored (the coordinator's counts in Redis), items waiting
for the writer (the backlog), the coordinator's CPU and RSS, the workers' CPU and RSS (with their
extraction processes), Redis's memory, the workers' waits for room in the backlog, the load average.
``--stall S`` stops the coordinator (SIGSTOP) S seconds, 10 s after its first page, then lets it go on: what a
writer slower than its workers looks like (backlog at its bound, workers waiting, memory flat).

Figures: BENCHMARKS.md, "The writer's ceiling"; time series in benchmarks/results/writer.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import common

WEBQA = [sys.executable, "-m", "jobs.cli"]


# -- the writer alone -----------------------------------------------------------------------------


def _extracted(pages: list[str]) -> list[Any]:
    from pipelines.items import ExtractedPage, FetchedPage
    from pipelines.page_processing import process_page

    out = []
    for rel in pages:
        html = (common.CORPUS / rel).read_text("utf-8", "replace")
        url = f"http://127.0.0.1/{rel}"
        result = process_page(html, url)
        if result.clean is None:
            continue
        page = FetchedPage(url=url, final_url=url, status=200, content_type="text/html", etag=None,
                           last_modified=None, html=html, html_bytes=len(html.encode()),
                           content_hash=hashlib.sha256(html.encode()).hexdigest(), depth=0,
                           fetched_at=datetime.now(timezone.utc))
        clean = result.clean
        out.append(ExtractedPage(page=page, title=clean.title, lang=clean.lang, extractor=clean.method,
                                 text=clean.text, text_bytes=clean.text_bytes, chunks=list(result.chunks),
                                 seconds=result.seconds))
    return out


def _encoded(items: list[Any], count: int) -> list[bytes]:
    from crawler.distributed.items import encode_item

    raws = []
    for k in range(count):
        item = items[k % len(items)]
        url = item.page.url.replace("127.0.0.1/", f"127.0.0.1/c{k // len(items)}/")
        raws.append(encode_item(dataclasses.replace(item, page=dataclasses.replace(item.page, url=url, final_url=url))))
    return raws


def writer_alone(raws: list[bytes], batch: int, threads: int | None) -> dict[str, float]:
    from crawler.distributed.coordinator import Writer
    from crawler.distributed.queue import Keys, connect
    from pipelines.store import Store
    from tests.support.redis import start_redis, stop_server

    with common.temp_dir("writer") as tmp:
        server, url = start_redis(tmp)
        try:
            r = connect(url)
            keys = Keys("webqa:bench")
            for start in range(0, len(raws), 50):
                r.rpush(keys.items, *raws[start:start + 50])
            with Store.open(tmp / "bench.duckdb") as store:
                if threads:
                    store.set_threads(threads)
                run = store.begin_crawl(None, urls_requested=len(raws))
                writer = Writer(r, keys, store, run, None, 10 * 1024 * 1024, batch=batch)
                load = common.MachineLoad()
                cpu0 = time.process_time()
                while writer.drain():
                    pass
                cpu = time.process_time() - cpu0
                machine = load.finish(cpu)
                stored = int(r.hget(keys.counts, "fetched") or 0)
        finally:
            stop_server(server)
    return {"batch": batch, "threads": threads or "default", "pages": stored, "pages_s": stored / machine["wall_s"],
            "cpu_ms_page": 1000 * cpu / stored, "wall_ms_page": 1000 * machine["wall_s"] / stored, **machine}


def run_alone(args: argparse.Namespace) -> dict[str, Any]:
    pages = common.corpus_pages()[: args.pages]
    cpu0 = time.process_time()
    items = _extracted(pages)
    cleaning = (time.process_time() - cpu0) / len(items)
    raws = _encoded(items, args.items)
    mean_kib = sum(map(len, raws)) / len(raws) / 1024
    print(f"{len(items)} pages cleaned here ({1000 * cleaning:.0f} ms CPU a page, for comparison), handed over "
          f"{len(raws)} times; an item averages {mean_kib:.0f} KiB")
    print("| batch | DuckDB threads | pages | pages/s | CPU ms a page | wall ms a page | others' cores | load 1 min |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for threads in [int(t) or None for t in args.threads.split(",")]:
        for batch in [int(b) for b in args.batches.split(",")]:
            row = writer_alone(raws, batch, threads)
            rows.append(row)
            print(f"| {row['batch']} | {row['threads']} | {row['pages']} | {row['pages_s']:.1f} | "
                  f"{row['cpu_ms_page']:.1f} | {row['wall_ms_page']:.1f} | {row['others_cores']} | "
                  f"{row['loadavg_1m_end']} |", flush=True)
    return {"cleaning_cpu_ms_page": 1000 * cleaning, "item_kib": mean_kib, "rows": rows}


# -- a whole crawl, sampled once a second ------------------------------------------------------------


class Sampler(threading.Thread):
    """Once a second: what the coordinator stored, its backlog, CPU and RSS of each side, Redis's memory."""

    def __init__(self, redis_url: str, coordinator: int, workers: list[int], site: Any = None) -> None:
        super().__init__(daemon=True)
        import redis

        self.site = site  # its request log: what the workers downloaded so far

        self.r = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
        self.coordinator = coordinator
        self.workers = workers
        self.rows: list[dict[str, float]] = []
        self.done = threading.Event()
        self.started = time.monotonic()

    def _crawl(self) -> dict[str, float]:
        prefixes = self.r.hkeys("webqa:crawls")
        if not prefixes:
            return {}
        prefix = prefixes[0].decode()
        pipe = self.r.pipeline(transaction=False)
        pipe.hget(f"{prefix}:counts", "fetched")
        pipe.llen(f"{prefix}:items")
        pipe.hget(f"{prefix}:stats", "backlog_waits")
        pipe.hget(f"{prefix}:stats", "backlog_wait_ms")
        stored, backlog, waits, wait_ms = pipe.execute()
        return {"stored": int(stored or 0), "backlog": int(backlog), "waits": int(waits or 0),
                "wait_s": int(wait_ms or 0) / 1000}

    def run(self) -> None:
        while not self.done.is_set():
            row: dict[str, float] = {"t": round(time.monotonic() - self.started, 2)}
            if self.site is not None:
                row["downloaded"] = sum(1 for r in self.site.log if r.path != "/robots.txt")
            try:
                row.update(self._crawl())
                row["redis_mib"] = self.r.info("memory")["used_memory"] / 2**20
            except Exception:  # noqa: BLE001 - the crawl's keys vanish at its end
                pass
            row["coordinator_cpu_s"] = common._cpu_s(self.coordinator) or 0.0
            row["coordinator_mib"] = common._rss_kib(self.coordinator) / 1024
            pids = [p for w in self.workers for p in common.tree_pids(w)]
            row["workers_cpu_s"] = sum(common._cpu_s(p) or 0.0 for p in pids)
            row["workers_mib"] = sum(common._rss_kib(p) for p in pids) / 1024
            row["load"] = os.getloadavg()[0]
            self.rows.append(row)
            self.done.wait(1.0)


def _summary(rows: list[dict[str, float]], workers: int) -> dict[str, float]:
    """Steady state: from the first page stored to the last, the rates over that span."""
    stored = [r for r in rows if r.get("stored")]
    first = next(r for r in rows if r.get("stored"))
    last = max(stored, key=lambda r: r["stored"])
    last = next(r for r in stored if r["stored"] == last["stored"])
    span = last["t"] - first["t"] or 1.0
    pages = last["stored"] - first["stored"]
    coordinator_cpu = last["coordinator_cpu_s"] - first["coordinator_cpu_s"]
    workers_cpu = last["workers_cpu_s"] - first["workers_cpu_s"]
    rates = sorted(b["stored"] - a["stored"] for a, b in zip(stored, stored[1:]))
    return {
        "workers": workers, "pages": last["stored"], "seconds": span, "pages_s": pages / span,
        "best_second": rates[-1] if rates else 0, "coordinator_cpu_pct": 100 * coordinator_cpu / span,
        "coordinator_ms_page": 1000 * coordinator_cpu / max(pages, 1),
        "workers_cores": workers_cpu / span, "workers_ms_page": 1000 * workers_cpu / max(pages, 1),
        "backlog_max": max(r.get("backlog", 0) for r in rows),
        "coordinator_mib_max": max(r["coordinator_mib"] for r in rows),
        "coordinator_mib_first": first["coordinator_mib"],
        # While pages were being stored: the end (the full-text index, the run's records) is not the writer's pace.
        "coordinator_mib_writing": max(r["coordinator_mib"] for r in stored if r["stored"] < last["stored"]),
        "redis_mib_max": max(r.get("redis_mib", 0) for r in rows),
        "workers_mib_max": max(r["workers_mib"] for r in rows),
        "waits": max(r.get("waits", 0) for r in rows), "wait_s": max(r.get("wait_s", 0) for r in rows),
        "load_max": max(r["load"] for r in rows),
    }


def crawl_once(args: argparse.Namespace, workers: int, site: Any, urls_file: Path, tmp: Path) -> dict[str, Any]:
    from tests.support.redis import start_redis, stop_server

    server, url = start_redis(tmp)
    db = tmp / f"crawl-{workers}.duckdb"
    env = dict(os.environ, WEBQA_ALLOW_PRIVATE_NETWORKS="1", WEBQA_REDIS_GRACE="1", WEBQA_REDIS_BACKLOG=str(args.backlog))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        coordinator = subprocess.Popen([*WEBQA, "crawl", "--redis", url, "--db", str(db), "--delay", "0", "--depth", "0",
                                        "-i", str(urls_file)], cwd=common.REPO, env=env, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
        procs.append(coordinator)
        procs += [subprocess.Popen([*WEBQA, "worker", "--redis", url, "--wait", "120", "--workers", "1"],
                                   cwd=common.REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                  for _ in range(workers)]
        site.reset_log()
        sampler = Sampler(url, coordinator.pid, [p.pid for p in procs[1:]], site)
        sampler.start()
        if args.stall:  # once the writer is busy: 10 s after its first page
            deadline = time.monotonic() + args.max_wait
            while not any(r.get("stored") for r in sampler.rows) and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(10)
            coordinator.send_signal(signal.SIGSTOP)
            time.sleep(args.stall)
            coordinator.send_signal(signal.SIGCONT)
        code = coordinator.wait(args.max_wait)
        sampler.done.set()
        sampler.join(5)
        for proc in procs[1:]:
            proc.wait(60)
        if code != 0:
            raise SystemExit(f"the coordinator exited {code}")
        return {"summary": _summary(sampler.rows, workers), "series": sampler.rows}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(10)
        stop_server(server)


def run_crawl(args: argparse.Namespace) -> dict[str, Any]:
    hosts = common.loopback_hosts(args.hosts)
    pages = common.corpus_pages()
    pages = [p if k == 0 else f"r{k}/{p}" for k in range(args.replicate) for p in pages]
    print(f"{len(pages)} pages of the manual over {len(hosts)} hosts, delay 0, backlog bound {args.backlog}; "
          f"{os.cpu_count()} cores; load average before {os.getloadavg()[0]:.1f}")
    print("| workers | pages | pages/s stored (best second) | coordinator CPU % (ms a page) | workers' cores (ms a page) "
          "| backlog max | coordinator RSS first / writing / end MiB | Redis max MiB | worker waits (s) | load max |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    runs = []
    with common.temp_dir("writer-crawl") as tmp, common.corpus_site(hosts) as site:
        for host in hosts:
            for k in range(1, args.replicate):
                site.serve_dir(host, f"/r{k}/", common.CORPUS)
        urls_file = tmp / "urls.txt"
        common.write_url_file(urls_file, pages, hosts, site.port)
        for n in [int(w) for w in args.workers.split(",")]:
            run = crawl_once(args, n, site, urls_file, tmp)
            s = run["summary"]
            print(f"| {n} | {s['pages']} | {s['pages_s']:.1f} ({s['best_second']}) | {s['coordinator_cpu_pct']:.0f} "
                  f"({s['coordinator_ms_page']:.1f}) | {s['workers_cores']:.2f} ({s['workers_ms_page']:.0f}) | "
                  f"{s['backlog_max']} | {s['coordinator_mib_first']:.0f} / {s['coordinator_mib_writing']:.0f} / "
                  f"{s['coordinator_mib_max']:.0f} | "
                  f"{s['redis_mib_max']:.0f} | {s['waits']} ({s['wait_s']:.0f}) | {s['load_max']:.1f} |", flush=True)
            if args.series:
                for row in run["series"]:
                    print("    " + json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}))
            runs.append(run)
    return {"runs": runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    alone = sub.add_parser("alone")
    alone.add_argument("--pages", type=int, default=300)
    alone.add_argument("--items", type=int, default=600)
    alone.add_argument("--batches", default="1,50")
    alone.add_argument("--threads", default="0", help="DuckDB threads (0: DuckDB's default), comma-separated")
    crawl = sub.add_parser("crawl")
    crawl.add_argument("--hosts", type=int, default=8)
    crawl.add_argument("--workers", default="1,2,4,6")
    crawl.add_argument("--replicate", type=int, default=1)
    crawl.add_argument("--backlog", type=int, default=500)
    crawl.add_argument("--stall", type=float, default=0.0)
    crawl.add_argument("--series", action="store_true", help="print the once-a-second samples")
    crawl.add_argument("--max-wait", type=float, default=1800.0)
    args = parser.parse_args()
    common.require_corpus()
    machine = common.machine_info()
    figures = run_alone(args) if args.mode == "alone" else run_crawl(args)
    common.save_result(f"writer-{args.mode}{'-stall' if getattr(args, 'stall', 0) else ''}", figures,
                       command=common.command_line(), machine=machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
