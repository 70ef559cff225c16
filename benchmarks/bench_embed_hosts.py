"""Benchmark: embedding windows over one and several Ollama hosts (issue 29, item 1).

Each host is a fake Ollama (tests/support/fake_ollama.py) on its own loopback address that costs a fixed
time per window (a sleep per text, like a server that embeds one batch at a time), so the figure is the
spread, not a model's speed. The workload is the product's own path: ``Selector.embed_missing`` on a
real DuckDB store of ``--windows`` one-window chunks, through the real ``ollama`` client and
jobs/embed_pool.py, vectors inserted in bulk as in a run. Each host count gets a fresh store.

    .venv/bin/python benchmarks/bench_embed_hosts.py [--windows 1536] [--cost-ms 4] [--hosts 1 2 4] [--dims 64]

Prints windows/s and the process's CPU seconds per 1,000 windows (less noisy on a shared machine) for
each host count; writes benchmarks/results/embed_hosts.json.

``--real`` measures the absolute figure instead: each host is benchmarks/embed_server.py serving the real
all-MiniLM-L6-v2 (torch on CPU, ``--threads`` each; scripts/install-bench.sh), on its own loopback address,
and each window is ``--words`` words of English (the product's windows are up to 150). Then the robust
figure is the servers' CPU seconds per window (read from /proc), printed beside windows/s and the load:

    nice .venv/bin/python benchmarks/bench_embed_hosts.py --real --windows 512 --words 140 --hosts 1 2 --threads 1
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import common
from bench_recall import embed_server_process, embedding_packages_missing

from jobs.embed_pool import embedder_for
from jobs.llm import OllamaClient, OllamaSettings
from jobs.runstore import RunStore
from jobs.select import Selector
from tests.support.fake_ollama import FakeOllama, hashed_embedding
from tests.support.run import GARDEN, LIGHTHOUSE, WIDGET
from tests.support.store import make_chunks, page_record

MODEL = "nomic-embed-text"
PER_PAGE = 32


# English for --words: the test site's three pages, cut into windows that differ (a rotation per window).
_WORDS = re.sub(r"<[^>]+>", " ", WIDGET + GARDEN + LIGHTHOUSE).split()


def window_text(n: int, words: int) -> str:
    if not words:
        return f"Window {n} talks about topic {n * 7919 % 1000}."
    start = n * 7919 % len(_WORDS)
    rotated = _WORDS[start:] + _WORDS[:start]
    return f"Window {n}: " + " ".join((rotated * (words // len(rotated) + 1))[:words])


def build_store(path: Path, windows: int, words: int = 0) -> RunStore:
    store = RunStore.open(path)
    for page in range(0, windows, PER_PAGE):
        url = f"http://bench.test/page-{page // PER_PAGE}"
        sections = [((f"Page {page}", f"Part {i}"), window_text(page + i, words))
                    for i in range(min(PER_PAGE, windows - page))]
        chunks = make_chunks(url, sections)
        store.save_page(page_record(url, chunks), chunks, crawl_run_id=None)
    store.rebuild_fts()
    return store


def costly(cost_s: float, dims: int = 64) -> Any:
    def embed(text: str) -> list[float]:
        time.sleep(cost_s)
        return hashed_embedding(text, dims)
    return embed


REAL_MODEL = "all-minilm"


@contextlib.contextmanager
def real_server(address: str, threads: int) -> Iterator[tuple[str, int]]:
    """benchmarks/embed_server.py (all-MiniLM-L6-v2) on ``address``: its URL and PID."""
    with embed_server_process(["--host", address, "--threads", str(threads)], start_wait=300) as (url, pid, _):
        yield url, pid


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_real(hosts: int, windows: int, words: int, threads: int, workdir: Path) -> dict[str, Any]:
    with ExitStack() as stack:
        servers = [stack.enter_context(real_server(f"127.0.0.{i + 1}", threads)) for i in range(hosts)]
        clients = [OllamaClient(OllamaSettings(host=url, embedding_model=REAL_MODEL, timeout_s=600)) for url, _ in servers]
        embedder = embedder_for(clients)
        store = stack.enter_context(build_store(workdir / f"real-{hosts}.duckdb", windows, words))
        selector = Selector(store.conn, embedder=embedder, embedding_model=REAL_MODEL, ensure_fts=store.load_fts)
        clients[0].embed(["warm up"], model=REAL_MODEL)  # not counted: the first forward pass allocates
        load = common.MachineLoad()
        served0 = [cpu_seconds(pid) for _, pid in servers]
        cpu0, wall0 = time.process_time(), time.perf_counter()
        done = selector.embed_missing()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        served = sum(cpu_seconds(pid) - before for (_, pid), before in zip(servers, served0, strict=True))
        other = load.finish(served)
        for client in clients:
            client.close()
    assert done == windows, f"embedded {done} of {windows} windows"
    return {"hosts": hosts, "windows": done, "words": words, "threads_per_server": threads,
            "wall_s": round(wall, 2), "windows_per_s": round(done / wall, 2),
            "server_cpu_s_per_window": round(served / done, 4), "webqa_cpu_s_per_1000": round(cpu / done * 1000, 3),
            "other_load": common.load_note(other)}


def measure(hosts: int, windows: int, cost_s: float, workdir: Path, dims: int = 64) -> dict[str, Any]:
    with ExitStack() as stack:
        fakes = [stack.enter_context(FakeOllama(host=f"127.0.0.{i + 1}")) for i in range(hosts)]
        for fake in fakes:
            fake.embed_fn = costly(cost_s, dims)
        clients = [OllamaClient(OllamaSettings(host=f.url, embedding_model=MODEL)) for f in fakes]
        embedder = embedder_for(clients)
        store = stack.enter_context(build_store(workdir / f"hosts-{hosts}.duckdb", windows))
        selector = Selector(store.conn, embedder=embedder, embedding_model=MODEL, ensure_fts=store.load_fts)
        load = common.MachineLoad()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        done = selector.embed_missing()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        other = load.finish(0.0)  # the fakes run in this process: its own CPU is all the benchmark's
        requests = [len(f.requests_to("/api/embed")) for f in fakes]
        for client in clients:
            client.close()
    assert done == windows, f"embedded {done} of {windows} windows"
    return {"hosts": hosts, "windows": done, "wall_s": round(wall, 3), "windows_per_s": round(done / wall, 1),
            "cpu_s_per_1000": round(cpu / done * 1000, 3), "requests_per_host": requests,
            "other_load": common.load_note(other)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=1536)
    parser.add_argument("--cost-ms", type=float, default=4.0, help="what each fake host spends per window")
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--dims", type=int, default=64, help="length of the fake hosts' vectors")
    parser.add_argument("--real", action="store_true", help="real all-MiniLM-L6-v2 servers (see the module doc)")
    parser.add_argument("--words", type=int, default=140, help="--real: words per window")
    parser.add_argument("--threads", type=int, default=1, help="--real: torch threads per server")
    parser.add_argument("--compare-serial", type=int, default=0, metavar="ROUNDS",
                        help="each host count this many times with inserts overlapping the next slice's embedding "
                             "(the product) and serial (as before 2a667fb), interleaved; prints the medians")
    args = parser.parse_args()
    machine = common.machine_info()
    common.print_machine(machine)
    if args.real:
        main_real(args, machine)
        return
    if args.compare_serial:
        main_compare(args, machine)
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="webqa-bench-embed-") as tmp:
        for hosts in args.hosts:
            row = measure(hosts, args.windows, args.cost_ms / 1000, Path(tmp), args.dims)
            rows.append(row)
            print(f"{hosts} host(s): {row['windows']} windows in {row['wall_s']} s = {row['windows_per_s']} windows/s; "
                  f"CPU {row['cpu_s_per_1000']} s per 1,000 windows; requests per host {row['requests_per_host']}; "
                  f"{row['other_load']}")
    base = rows[0]["windows_per_s"]
    for row in rows:
        row["speed_up"] = round(row["windows_per_s"] / base, 2)
    ideal = 1000 / args.cost_ms
    print(f"ideal for one host: {ideal:.0f} windows/s; speed-up: "
          + ", ".join(f"{r['hosts']} → ×{r['speed_up']}" for r in rows))
    figures = {"cost_ms_per_window": args.cost_ms, "dims": args.dims, "ideal_one_host_per_s": round(ideal, 1),
               "runs": rows}
    print(f"saved {common.save_result('embed_hosts', figures, command=common.command_line(), machine=machine)}")


def serial_inserts(embed: Any, parts: Any) -> Any:
    """Selector.embed_missing's loop before 2a667fb: embed a slice, insert it, then embed the next."""
    for part in parts:
        yield part, embed(part)


def main_compare(args: argparse.Namespace, machine: dict[str, Any]) -> None:
    import statistics

    import jobs.select

    ways = {"overlapped": jobs.select.embedded_ahead, "serial": serial_inserts}
    seen: dict[tuple[str, int], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="webqa-bench-embed-") as tmp:
        for round_ in range(args.compare_serial):
            for way, loop in ways.items():
                jobs.select.embedded_ahead = loop  # type: ignore[assignment]
                for hosts in args.hosts:
                    workdir = Path(tmp) / f"{way}-{round_}"
                    workdir.mkdir(exist_ok=True)
                    seen.setdefault((way, hosts), []).append(
                        measure(hosts, args.windows, args.cost_ms / 1000, workdir, args.dims))
    rows = []
    for (way, hosts), runs in sorted(seen.items(), key=lambda item: (item[0][1], item[0][0])):
        rate = statistics.median(r["windows_per_s"] for r in runs)
        cpu = statistics.median(r["cpu_s_per_1000"] for r in runs)
        rows.append({"inserts": way, "hosts": hosts, "windows_per_s_median": rate, "cpu_s_per_1000_median": cpu,
                     "windows_per_s": [r["windows_per_s"] for r in runs], "loads": [r["other_load"] for r in runs]})
        print(f"{hosts} host(s), {way} inserts: median {rate} windows/s {[r['windows_per_s'] for r in runs]}; "
              f"CPU {cpu} s per 1,000 windows")
    figures = {"cost_ms_per_window": args.cost_ms, "dims": args.dims, "rounds": args.compare_serial, "runs": rows}
    print(f"saved {common.save_result('embed_hosts_inserts', figures, command=common.command_line(), machine=machine)}")


def main_real(args: argparse.Namespace, machine: dict[str, Any]) -> None:
    missing = embedding_packages_missing()
    if missing:
        raise SystemExit(missing)
    rows = []
    with tempfile.TemporaryDirectory(prefix="webqa-bench-embed-real-") as tmp:
        for hosts in args.hosts:
            row = measure_real(hosts, args.windows, args.words, args.threads, Path(tmp))
            rows.append(row)
            print(f"{hosts} real server(s), {args.threads} thread(s) each: {row['windows']} windows of {args.words} words "
                  f"in {row['wall_s']} s = {row['windows_per_s']} windows/s; servers' CPU "
                  f"{row['server_cpu_s_per_window']} s per window; webqa's {row['webqa_cpu_s_per_1000']} s per 1,000; "
                  f"{row['other_load']}")
    figures = {"model": "all-MiniLM-L6-v2 (benchmarks/embed_server.py)", "runs": rows}
    print(f"saved {common.save_result('embed_hosts_real', figures, command=common.command_line(), machine=machine)}")


if __name__ == "__main__":
    main()
