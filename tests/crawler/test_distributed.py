"""Crawling through Redis: a real redis-server on loopback, real coordinator and worker processes, a real
multi-host site on loopback and a real DuckDB file (crawler/distributed/)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter

import duckdb
import pytest

from tests.support.site_server import SiteServer
from tests.support.crawling import REPO
from tests.support.redis import (  # noqa: F401 - procs, redis_server and redis_url are fixtures, used by name
    REDIS_SERVER, Procs, crawl_rows, lease_holders, procs, redis_keys, redis_server, redis_url, stop_server, wait_for)

pytestmark = [
    pytest.mark.e2e,  # every test here starts a child process (tests/support/e2e.py)
    pytest.mark.skipif(REDIS_SERVER is None,
                       reason="redis-server is not installed (apt-get install -y redis-server; .ci/run does)"),
]

HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4")


def _site(pages_per_host: int, *, slow: float = 0.0) -> tuple[SiteServer, list[str], set[str]]:
    """Each host: a home page linking to its pages; returns the site, the seeds and every page URL."""
    site = SiteServer(HOSTS).start()
    seeds, every = [], set()
    for host in HOSTS:
        links = "".join(f'<li><a href="/p{j}.html">page {j}</a></li>' for j in range(pages_per_host))
        site.add(host, "/", f"<html><head><title>{host}</title></head><body><h1>Home of {host}</h1>"
                            f"<p>An index of the pages served by this host.</p><ul>{links}</ul></body></html>")
        for j in range(pages_per_host):
            body = (f"<html><head><title>Page {j}</title></head><body><h1>Page {j} on {host}</h1>"
                    f"<p>Some text for page number {j}, long enough to be kept as content.</p></body></html>")
            if slow:
                site.slow(host, f"/p{j}.html", slow, body)
            else:
                site.add(host, f"/p{j}.html", body)
            every.add(site.url(host, f"/p{j}.html"))
        seeds.append(site.url(host, "/"))
        every.add(site.url(host, "/"))
    return site, seeds, every


def test_three_workers_share_one_polite_gate_and_store_every_page_once(procs: Procs) -> None:
    site, seeds, every = _site(6)
    try:
        coordinator = procs.coordinator(seeds, "--depth", "1", "--delay", "0.5")
        workers = [procs.worker() for _ in range(3)]
        out = procs.finish(coordinator)
        assert coordinator.returncode == 0, out[-4000:]
        for worker in workers:
            assert "Worker done" in procs.finish(worker, 60) and worker.returncode == 0
        # The same summary line as a crawl on one machine.
        assert f"fetched {len(every)} (new {len(every)}, changed 0, unchanged 0)" in out, out[-2000:]
        pages, log = crawl_rows(procs.db)
        assert sorted(pages) == sorted(every) and not log
        for host in HOSTS:
            requested = Counter(site.paths(host))
            assert requested["/robots.txt"] == 1, requested  # fetched once for all workers
            assert all(n == 1 for n in requested.values()), requested  # no page fetched twice
            # Server-side, across the three workers: the promised delay between requests to one host.
            assert site.min_gap(host, exclude_paths=()) >= 0.5
        assert redis_keys(procs.redis_url) == []  # the coordinator removed the crawl's keys at the end
    finally:
        site.stop()


def test_killed_worker_loses_no_url(procs: Procs) -> None:
    # Slow pages keep requests in flight, so the worker killed holds leases that must come back.
    site, seeds, every = _site(5, slow=0.6)
    try:
        coordinator = procs.coordinator(seeds, "--depth", "1", "--delay", "0.2")
        workers = {w.pid: w for w in (procs.worker(), procs.worker())}
        wait_for(lambda: sum(1 for r in site.log if r.path.startswith("/p")) >= 4, 60, "the first pages")
        # The victim is a worker holding leases (a worker leases up to 32 requests ahead: one may hold all).
        holders: set[int] = set()

        def leased() -> bool:
            holders.update(lease_holders(procs.redis_url) & set(workers))
            return bool(holders)

        wait_for(leased, 60, "a worker holding leases")
        victim = workers.pop(min(holders))
        survivor = next(iter(workers.values()))
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        out = procs.finish(coordinator)
        # The crawl finished with nothing lost (exit 0, as for a lost Ollama host), and cron hears that a
        # worker died: a Notice line after the usual summary.
        assert coordinator.returncode == 0, out[-4000:]
        assert "fetched " in out, out[-2000:]
        assert [line for line in out.splitlines() if line.startswith("Notice: workers lost: ")], out[-2000:]
        assert "stopped mid-crawl without finishing" in out and "Error:" not in out, out[-2000:]
        procs.finish(survivor, 60)
        assert survivor.returncode == 0
        pages, log = crawl_rows(procs.db)
        ended = pages + [url for url, _outcome, _reason in log]
        assert Counter(ended) == Counter(every), "every URL stored or failed, none twice"
        assert all(reason for _url, _outcome, reason in log)
        assert redis_keys(procs.redis_url) == []
    finally:
        site.stop()


def test_worker_cut_off_from_redis_exits_with_one_error_line(procs: Procs, redis_server) -> None:  # type: ignore[no-untyped-def]
    server, _url = redis_server
    site, seeds, _every = _site(5, slow=0.3)
    try:
        coordinator = procs.coordinator(seeds, "--depth", "1", "--delay", "0.2")
        worker = procs.worker()
        wait_for(lambda: sum(1 for r in site.log if r.path.startswith("/p")) >= 2, 60, "the first pages")
        stop_server(server)
        # Within a lease (4 s) and a renewal of losing Redis, each process says so in one line and fails.
        for proc in (worker, coordinator):
            out = procs.finish(proc, 60)
            assert proc.returncode == 3, out[-3000:]
            errors = [line for line in out.splitlines() if line.startswith("Error:")]
            assert len(errors) == 1 and "Redis" in errors[0], out[-3000:]
    finally:
        site.stop()


def test_killed_writer_resumes_from_redis_without_duplicates(procs: Procs) -> None:
    site, seeds, every = _site(6)
    try:
        first = procs.coordinator(seeds, "--depth", "1", "--delay", "0.3")
        workers = [procs.worker(), procs.worker()]
        wait_for(lambda: sum(1 for r in site.log if r.path.startswith("/p")) >= 6, 60, "the first pages")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        time.sleep(1.0)  # the workers go on handing items to Redis meanwhile
        again = procs.coordinator(seeds, "--depth", "1", "--delay", "0.3")
        out = procs.finish(again)
        assert again.returncode == 0, out[-4000:]
        for worker in workers:
            procs.finish(worker, 60)
        pages, log = crawl_rows(procs.db)
        assert Counter(pages) == Counter(every) and not log
        with duckdb.connect(str(procs.db), read_only=True) as conn:
            runs = conn.execute("SELECT crawl_run_id, status FROM crawl_runs").fetchall()
            chunk_dupes = conn.execute("SELECT count(*) - count(DISTINCT (url, ordinal)) FROM chunks").fetchone()
        assert runs == [(1, "done")]  # the restarted coordinator finished the same crawl run
        assert chunk_dupes == (0,)
    finally:
        site.stop()


def test_worker_gives_up_on_a_coordinator_killed_and_not_restarted(procs: Procs) -> None:
    site, seeds, _every = _site(20, slow=0.2)
    try:
        coordinator = procs.coordinator(seeds, "--depth", "1", "--delay", "0.5")
        procs.env["WEBQA_REDIS_COORDINATOR_WAIT"] = "1"
        worker = procs.worker()
        wait_for(lambda: sum(1 for r in site.log if r.path.startswith("/p")) >= 2, 60, "the first pages")
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait(10)
        # Its heartbeat key expires (10 s), then the worker waits 1 s more and stops, in one line.
        out = procs.finish(worker, 60)
        assert worker.returncode == 3, out[-3000:]
        errors = [line for line in out.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and "coordinator has not been heard of" in errors[0], out[-3000:]
    finally:
        site.stop()


def test_two_crawls_share_one_redis_without_mixing_frontiers(procs: Procs) -> None:
    import redis

    site, seeds, every = _site(4)
    client = redis.Redis.from_url(procs.redis_url, socket_timeout=5, socket_connect_timeout=5)
    try:
        dbs = (procs.tmp / "a.duckdb", procs.tmp / "b.duckdb")
        coordinators = [procs.coordinator(seeds[:2], "--depth", "1", "--delay", "0.2", db=dbs[0]),
                        procs.coordinator(seeds[2:], "--depth", "1", "--delay", "0.2", db=dbs[1])]

        def running() -> list[bytes]:
            return [p for p in client.hkeys("webqa:crawls") if b'"running"' in (client.get(p + b":crawl") or b"")]

        wait_for(lambda: len(running()) == 2, 60, "two published crawls")
        # A worker joins the crawl with the fewest workers: the second one joins the other crawl.
        first = procs.worker()
        wait_for(lambda: any(client.hlen(p + b":workers") for p in running()), 60, "the first worker to join")
        second = procs.worker()
        for coordinator in coordinators:
            out = procs.finish(coordinator)
            assert coordinator.returncode == 0, out[-3000:]
        for worker in (first, second):
            procs.finish(worker, 60)
            assert worker.returncode == 0
        for db, hosts in zip(dbs, (HOSTS[:2], HOSTS[2:])):
            pages, log = crawl_rows(db)
            assert sorted(pages) == sorted(u for u in every if any(f"//{h}:" in u for h in hosts)) and not log
        assert redis_keys(procs.redis_url) == []
    finally:
        client.close()
        site.stop()


def test_robots_disallow_is_honoured_by_every_worker(procs: Procs) -> None:
    site = SiteServer(HOSTS[:2]).start()
    try:
        seeds, blocked = [], set()
        for host in HOSTS[:2]:
            site.add(host, "/robots.txt", "User-agent: *\nDisallow: /private/\n", content_type="text/plain")
            links = "".join(f'<a href="/private/{j}.html">p</a><a href="/open/{j}.html">o</a>' for j in range(4))
            site.add(host, "/", f"<html><body><h1>Index</h1><p>Links to private and open pages.</p>{links}</body></html>")
            for j in range(4):
                for part in ("private", "open"):
                    site.add(host, f"/{part}/{j}.html",
                             f"<html><body><h1>{part} {j}</h1><p>The {part} page {j} has text.</p></body></html>")
                blocked.add(site.url(host, f"/private/{j}.html"))
            seeds.append(site.url(host, "/"))
        coordinator = procs.coordinator(seeds, "--depth", "1", "--delay", "0.1")
        workers = [procs.worker() for _ in range(3)]
        out = procs.finish(coordinator)
        assert coordinator.returncode == 0, out[-4000:]
        for worker in workers:
            procs.finish(worker, 60)
        assert not [r for r in site.log if r.path.startswith("/private/")]
        assert sum(1 for r in site.log if r.path == "/robots.txt") == 2  # one per host, shared by the workers
        _pages, log = crawl_rows(procs.db)
        assert {url for url, outcome, reason in log if reason == "disallowed by robots.txt"} == blocked
    finally:
        site.stop()


def test_a_crawl_on_one_machine_imports_no_redis() -> None:
    code = ("import sys, jobs.cli, crawler.run, jobs.runner; "
            "assert not [m for m in sys.modules if m.startswith(('redis', 'scrapy_redis'))]")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)
