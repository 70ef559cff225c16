"""Benchmark: embedding windows over one and several Ollama hosts (issue 29, item 1).

Each host is a fake Ollama (tests/support/fake_ollama.py) on its own loopback address that costs a fixed
time per window (a sleep per text, like a server that embeds one batch at a time), so the figure is the
spread, not a model's speed. The workload is the product's own path: ``Selector.embed_missing`` on a
real DuckDB store of ``--windows`` one-window chunks, through the real ``ollama`` client and
jobs/embed_pool.py, vectors inserted in bulk as in a run. Each host count gets a fresh store.

    .venv/bin/python benchmarks/bench_embed_hosts.py [--windows 1536] [--cost-ms 4] [--hosts 1 2 4]

Prints windows/s and the process's CPU seconds per 1,000 windows (less noisy on a shared machine) for
each host count; writes benchmarks/results/embed_hosts.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import common

from jobs.embed_pool import embedder_for
from jobs.llm import OllamaClient, OllamaSettings
from jobs.runstore import RunStore
from jobs.select import Selector
from tests.support.fake_ollama import FakeOllama, hashed_embedding
from tests.support.store import make_chunks, page_record

MODEL = "nomic-embed-text"
PER_PAGE = 32


def build_store(path: Path, windows: int) -> RunStore:
    store = RunStore.open(path)
    for page in range(0, windows, PER_PAGE):
        url = f"http://bench.test/page-{page // PER_PAGE}"
        sections = [((f"Page {page}", f"Part {i}"), f"Window {page + i} talks about topic {(page + i) * 7919 % 1000}.")
                    for i in range(min(PER_PAGE, windows - page))]
        chunks = make_chunks(url, sections)
        store.save_page(page_record(url, chunks), chunks, crawl_run_id=None)
    store.rebuild_fts()
    return store


def costly(cost_s: float) -> Any:
    def embed(text: str) -> list[float]:
        time.sleep(cost_s)
        return hashed_embedding(text, 64)
    return embed


def measure(hosts: int, windows: int, cost_s: float, workdir: Path) -> dict[str, Any]:
    with ExitStack() as stack:
        fakes = [stack.enter_context(FakeOllama(host=f"127.0.0.{i + 1}")) for i in range(hosts)]
        for fake in fakes:
            fake.embed_fn = costly(cost_s)
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
    args = parser.parse_args()
    machine = common.machine_info()
    common.print_machine(machine)
    rows = []
    with tempfile.TemporaryDirectory(prefix="webqa-bench-embed-") as tmp:
        for hosts in args.hosts:
            row = measure(hosts, args.windows, args.cost_ms / 1000, Path(tmp))
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
    figures = {"cost_ms_per_window": args.cost_ms, "ideal_one_host_per_s": round(ideal, 1), "runs": rows}
    print(f"saved {common.save_result('embed_hosts', figures, command=common.command_line(), machine=machine)}")


if __name__ == "__main__":
    main()
