"""The Redis queue is input, not trust: poisoned items, requests, records and configs written into a real
redis-server on loopback, against real coordinator and worker processes and a real DuckDB file.

Each bad entry is set aside in the dead-letter list with one bounded line, counted as a failed record, never
handed out again, and never crashes a process; a request's meta from Redis cannot switch off robots.txt or
the size cap; a coordinator restarted after a poisoned entry finishes the crawl.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from crawler.distributed.entries import dead_letter_key
from tests.support.site_server import SiteServer
from tests.support.crawling import REPO
from tests.support.redis import (  # noqa: F401 - procs, redis_server and redis_url are fixtures, used by name
    REDIS_SERVER, Procs, crawl_rows, procs, redis_keys, redis_server, redis_url, wait_for)

pytestmark = pytest.mark.skipif(
    REDIS_SERVER is None, reason="redis-server is not installed (apt-get install -y redis-server; .ci/run does)")

HOST = "127.0.0.1"
BIG = 11 * 1024 * 1024  # over the default 10 MB size cap


def _client(url: str):  # type: ignore[no-untyped-def]
    import redis

    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)


def _site() -> tuple[SiteServer, list[str]]:
    site = SiteServer((HOST,)).start()
    site.add(HOST, "/robots.txt", "User-agent: *\nDisallow: /private/\n", content_type="text/plain")
    seeds = []
    for j in range(4):
        site.add(HOST, f"/p{j}.html", f"<html><head><title>Page {j}</title></head><body><h1>Page {j}</h1>"
                                      f"<p>Some text for page number {j}, long enough to be kept as content.</p></body></html>")
        seeds.append(site.url(HOST, f"/p{j}.html"))
    site.add(HOST, "/private/secret.html", "<html><body><h1>Private</h1><p>Not for crawlers.</p></body></html>")
    site.add(HOST, "/big.html", "<html><body><h1>Big</h1><p>" + "x" * BIG + "</p></body></html>")
    return site, seeds


def _published(client) -> str:  # type: ignore[no-untyped-def]
    """The crawl's key prefix once its coordinator has seeded it (state running)."""
    found: list[str] = []

    def running() -> bool:
        for prefix in client.hkeys("webqa:crawls"):
            if b'"running"' in (client.get(prefix + b":crawl") or b""):
                found.append(prefix.decode())
                return True
        return False

    wait_for(running, 60, "the crawl to be published")
    return found[0]


def _request(url: str, **meta: object) -> bytes:
    """A queued request as a worker would find it, with extra meta written by whoever else writes to Redis."""
    return json.dumps({
        "url": url, "callback": "parse", "errback": "on_error", "method": "GET", "headers": {},
        "body": {"__b64": ""}, "cookies": {}, "encoding": "utf-8", "priority": 0, "dont_filter": True,
        "flags": [], "cb_kwargs": {"listed_url": url},
        "meta": {"webqa_id": url, "webqa_depth": 0, "handle_httpstatus_list": [304, 404, 500], **meta},
    }).encode()


def _queue(client, prefix: str, request_id: str, data: bytes) -> None:  # type: ignore[no-untyped-def]
    client.hset(f"{prefix}:reqs", request_id, data)
    client.zadd(f"{prefix}:queue", {request_id: 0})


def test_poisoned_entries_are_set_aside_and_the_crawl_finishes(procs: Procs) -> None:
    site, seeds = _site()
    client = _client(procs.redis_url)
    try:
        coordinator = procs.coordinator(seeds, "--delay", "0.05")
        prefix = _published(client)
        # Items that no worker wrote: not JSON, JSON of the wrong shape, and 30 MB of junk.
        client.rpush(f"{prefix}:items", b"{not json", json.dumps({"kind": "page", "page": {"url": 1}}),
                     b"x" * (30 * 1024 * 1024))
        # Requests: undecodable (it used to be leased again forever), and two whose meta switch guards off.
        poison = site.url(HOST, "/poison.html")
        _queue(client, prefix, poison, b"\xff\xfe not a request")
        private, big = site.url(HOST, "/private/secret.html"), site.url(HOST, "/big.html")
        _queue(client, prefix, private, _request(private, dont_obey_robotstxt=True))
        _queue(client, prefix, big, _request(big, download_maxsize=0, download_warnsize=0))
        worker = procs.worker()
        out = procs.finish(coordinator)
        worker_out = procs.finish(worker, 60)

        # Every URL ends recorded; the poisoned entries are failed records, so cron reads "partial".
        assert coordinator.returncode == 1, out[-3000:]
        assert worker.returncode == 0, worker_out[-3000:]
        pages, log = crawl_rows(procs.db)
        assert sorted(pages) == sorted(seeds)
        reasons = {url: (outcome, reason) for url, outcome, reason in log}
        assert reasons[private] == ("skipped", "disallowed by robots.txt")
        assert reasons[big][0] == "failed" and reasons[big][1].startswith("response too large"), reasons[big]
        assert reasons[poison][0] == "failed" and "invalid request in the Redis queue" in reasons[poison][1]
        invalid_items = [r for u, o, r in log if r.startswith("invalid item in Redis")]
        assert len(invalid_items) == 3 and all(len(r) < 400 for r in invalid_items), invalid_items
        assert "/private/" not in " ".join(site.paths(HOST))  # robots.txt held for the request from Redis
        # Each bad entry is one bounded line in the logs, never a traceback nor the entry itself.
        for text in (out, worker_out):
            assert "Traceback" not in text and max(map(len, text.splitlines())) < 1000
        assert sum("Invalid entry in Redis" in line for line in out.splitlines()) == 3
        # Set aside, cut short, outliving the crawl's keys for a week.
        kept = [json.loads(e) for e in client.lrange(dead_letter_key(prefix), 0, -1)]
        assert len(kept) == 4 and all(len(e["entry"]) <= 4096 for e in kept)
        assert 0 < client.ttl(dead_letter_key(prefix)) <= 7 * 24 * 3600
        assert redis_keys(procs.redis_url) == [dead_letter_key(prefix).encode()]
    finally:
        client.close()
        site.stop()


def test_a_coordinator_restarted_after_a_poisoned_entry_finishes_the_crawl(procs: Procs) -> None:
    site, seeds = _site()
    client = _client(procs.redis_url)
    try:
        first = procs.coordinator(seeds, "--delay", "0.05")
        prefix = _published(client)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        # What a coordinator killed while writing a poisoned item leaves: the item in its `writing` list.
        client.rpush(f"{prefix}:writing", b'{"kind": "page", "page": [')
        again = procs.coordinator(seeds, "--delay", "0.05")
        worker = procs.worker()
        out = procs.finish(again)
        procs.finish(worker, 60)
        assert again.returncode == 1, out[-3000:]
        pages, log = crawl_rows(procs.db)
        assert sorted(pages) == sorted(seeds)
        assert [r for _u, _o, r in log if r.startswith("invalid item in Redis: item is not JSON")]
        with duckdb.connect(str(procs.db), read_only=True) as conn:
            assert conn.execute("SELECT status FROM crawl_runs").fetchall() == [("done",)]
    finally:
        client.close()
        site.stop()


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize(("crawl", "config", "expected"), [
    (b'{"id": "c1", "state": "running", "db": "/x.duckdb", "crawl_run_id": 1}', b"garbage{",
     "Error: Redis key webqa:evil:config is not JSON"),
    (b'{"id": "c1", "state": "running", "db": "/x.duckdb", "crawl_run_id": 1}',
     json.dumps({"delay": "soon"}).encode(), "Error: Redis key webqa:evil:config: 'delay' is missing or of the wrong"),
    (b"[1, 2", b"{}", "Error: Redis key webqa:evil:crawl is not JSON"),
])
def test_a_garbage_crawl_or_config_key_is_one_error_line_for_the_worker(
        procs: Procs, crawl: bytes, config: bytes, expected: str) -> None:
    client = _client(procs.redis_url)
    try:
        client.hset("webqa:crawls", "webqa:evil", "{}")
        client.set("webqa:evil:crawl", crawl)
        client.set("webqa:evil:config", config)
        done = _cli("worker", "--redis", procs.redis_url, "--wait", "5", env=procs.env)
    finally:
        client.close()
    assert done.returncode == 3, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(expected) and "redis-cli" in line, line


def test_a_garbage_crawl_record_is_one_error_line_for_the_coordinator(procs: Procs) -> None:
    from crawler.distributed.queue import crawl_prefix

    prefix = crawl_prefix(None, procs.db)
    client = _client(procs.redis_url)
    try:
        client.set(f"{prefix}:crawl", b"\x00\x01 not json")
    finally:
        client.close()
    started = time.monotonic()
    done = _cli("crawl", "--redis", procs.redis_url, "--db", str(procs.db), "-q", "http://127.0.0.1:9/",
                env=procs.env)
    assert done.returncode == 3 and time.monotonic() - started < 60, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"Error: Redis key {prefix}:crawl is not JSON") and f"redis-cli del {prefix}:crawl" in line
