"""Crawling through Redis in tests: a private redis-server on loopback, the coordinator and worker processes
of one test (each logging to its own file), and what they left in Redis and DuckDB."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.support.crawling import REPO

REDIS_SERVER = shutil.which("redis-server")
WEBQA = [sys.executable, "-m", "jobs.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_redis(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A private redis-server on loopback (no persistence) and its URL."""
    for _attempt in range(5):
        port = free_port()
        server = subprocess.Popen(
            [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp), "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and server.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return server, f"redis://127.0.0.1:{port}/0"
            except OSError:
                time.sleep(0.05)
        stop_server(server)
    pytest.fail("redis-server did not start")


def stop_server(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.terminate()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(5)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A private redis-server on loopback, stopped after the test; the test may stop it sooner."""
    server, url = start_redis(tmp_path)
    try:
        yield server, url
    finally:
        stop_server(server)


@pytest.fixture
def redis_url(redis_server: tuple[subprocess.Popen[bytes], str]) -> str:
    return redis_server[1]


def lease_holders(url: str) -> set[int]:
    """The pids of the workers holding leases now (a holder entry is "host:pid:uuid|score")."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    pids = set()
    for prefix in client.hkeys("webqa:crawls"):
        for holder in client.hvals(prefix + b":holders"):
            pids.add(int(holder.decode().split("|")[0].split(":")[1]))
    return pids


def redis_keys(url: str) -> list[bytes]:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    return sorted(client.keys("*"))


class Procs:
    """The coordinator and workers of one test, each logging to its own file; all killed at the end."""

    def __init__(self, tmp: Path, redis_url: str) -> None:
        self.tmp = tmp
        self.redis_url = redis_url
        self.db = tmp / "webqa.duckdb"
        self.env = dict(os.environ, WEBQA_ALLOW_PRIVATE_NETWORKS="1", WEBQA_REDIS_GRACE="1",
                        WEBQA_REDIS_LEASE="4", WEBQA_REDIS_WORKER_WAIT="60", PYTHONUNBUFFERED="1")
        self.procs: list[subprocess.Popen[str]] = []
        self.logs: dict[int, Path] = {}

    def _start(self, name: str, args: list[str]) -> subprocess.Popen[str]:
        log = self.tmp / f"{name}-{len(self.procs)}.log"
        proc = subprocess.Popen([*WEBQA, *args], cwd=REPO, env=self.env, text=True,
                                stdout=log.open("w"), stderr=subprocess.STDOUT)
        self.procs.append(proc)
        self.logs[proc.pid] = log
        return proc

    def coordinator(self, urls: list[str], *extra: str, db: Path | None = None) -> subprocess.Popen[str]:
        return self._start("coordinator", ["crawl", "--redis", self.redis_url, "--db", str(db or self.db), *extra,
                                           *urls])

    def worker(self) -> subprocess.Popen[str]:
        return self._start("worker", ["worker", "--redis", self.redis_url, "--wait", "60", "--workers", "1"])

    def output(self, proc: subprocess.Popen[str]) -> str:
        return self.logs[proc.pid].read_text()

    def finish(self, proc: subprocess.Popen[str], timeout: float = 120) -> str:
        proc.wait(timeout)
        out = self.output(proc)
        assert "Traceback" not in out, out[-4000:]
        return out

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def procs(tmp_path: Path, redis_url: str) -> Iterator[Procs]:
    p = Procs(tmp_path, redis_url)
    try:
        yield p
    finally:
        p.close()


def crawl_rows(db: Path) -> tuple[list[str], list[tuple[str, str, str]]]:
    with duckdb.connect(str(db), read_only=True) as conn:
        pages = [r[0] for r in conn.execute("SELECT url FROM pages").fetchall()]
        log = conn.execute("SELECT url, outcome, reason FROM fetch_log").fetchall()
    return pages, log


def wait_for(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)
