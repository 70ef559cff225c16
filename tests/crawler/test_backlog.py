"""The coordinator's backlog (crawler/distributed/backlog.py): workers wait while too many items wait for the
one writer, and the writer takes them a batch at a time. A real redis-server on loopback, real DuckDB files;
the last test runs real coordinator and worker processes against a real multi-host site."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import signal
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pytest

from tests.support.redis import (  # noqa: F401 - procs, redis_server and redis_url are fixtures, used by name
    REDIS_SERVER, Procs, crawl_rows, procs, redis_keys, redis_server, redis_url, wait_for)
from tests.support.site_server import SiteServer

pytestmark = [
    pytest.mark.e2e,  # every test here starts redis-server
    pytest.mark.skipif(REDIS_SERVER is None,
                       reason="redis-server is not installed (apt-get install -y redis-server; .ci/run does)"),
]


def _frontier(url: str, prefix: str = "webqa:t"):  # type: ignore[no-untyped-def]
    from crawler.distributed.queue import Frontier, Keys, connect

    return Frontier(connect(url), Keys(prefix), lease_seconds=30, token="w1")


def _page(n: int, url: str | None = None):  # type: ignore[no-untyped-def]
    from pipelines.items import ExtractedPage, FetchedPage
    from pipelines.page_processing import process_page

    url = url or f"http://127.0.0.1:9/p{n}.html"
    html = (f"<html><head><title>Page {n}</title></head><body><h1>Page {n}</h1>"
            f"<p>The text of page number {n}, a sentence long enough to be kept as content.</p></body></html>")
    result = process_page(html, url)
    assert result.clean is not None
    page = FetchedPage(url=url, final_url=url, status=200, content_type="text/html", etag=None, last_modified=None,
                       html=html, html_bytes=len(html), content_hash=hashlib.sha256(html.encode()).hexdigest(),
                       depth=1, fetched_at=datetime(2026, 1, 1, tzinfo=timezone.utc))
    clean = result.clean
    return ExtractedPage(page=page, title=clean.title, lang=clean.lang, extractor=clean.method, text=clean.text,
                         text_bytes=clean.text_bytes, chunks=list(result.chunks), seconds=result.seconds)


def test_a_hand_over_is_refused_while_the_backlog_is_full_and_the_lease_is_kept(redis_url: str) -> None:
    from crawler.distributed.backlog import FULL

    frontier = _frontier(redis_url)
    frontier.push("http://a/1", b"{}", 0, "a")
    assert frontier.pop() is not None
    frontier.r.rpush(frontier.keys.items, b"x", b"y")
    assert frontier.ack("http://a/1", b"item", bound=2) == FULL
    assert frontier.held == {"http://a/1"} and frontier.r.zcard(frontier.keys.leases) == 1
    assert frontier.push_item(b"other", bound=2) == FULL
    assert frontier.r.llen(frontier.keys.items) == 2  # nothing was added
    frontier.r.lpop(frontier.keys.items)
    assert frontier.ack("http://a/1", b"item", bound=2) == 1
    assert frontier.held == set() and frontier.r.zcard(frontier.keys.leases) == 0
    assert frontier.r.lrange(frontier.keys.items, 0, -1) == [b"y", b"item"]


def test_a_worker_waits_for_room_then_hands_over_and_never_overfills(redis_url: str) -> None:
    from crawler.distributed.backlog import BacklogWait

    frontier = _frontier(redis_url)
    key = frontier.keys.items
    frontier.r.rpush(key, *[b"old"] * 3)
    seen: list[int] = []
    taken: list[bytes] = []
    stop = threading.Event()

    def writer() -> None:  # a slow coordinator: takes one item every 0.2 s, noting the length first
        while not stop.is_set():
            seen.append(int(frontier.r.llen(key)))
            raw = frontier.r.lpop(key)
            if raw is not None:
                taken.append(raw)
            time.sleep(0.2)

    async def hand_over_all() -> BacklogWait:
        wait = BacklogWait(3, 60.0, frontier.items_waiting)
        await asyncio.gather(*(wait.hand_over(lambda bound, i=i: frontier.push_item(b"new%d" % i, bound))
                               for i in range(6)))
        return wait

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        wait = asyncio.run(hand_over_all())
    finally:
        stop.set()
        thread.join(5)
    assert wait.waits >= 1 and wait.forced == 0 and not wait.paused
    assert max(seen) <= 3  # the bound held throughout
    handed = taken + frontier.r.lrange(key, 0, -1)
    assert Counter(handed) == Counter([b"old"] * 3 + [b"new%d" % i for i in range(6)])  # none lost, none twice


def test_a_worker_hands_over_anyway_after_its_bounded_wait(redis_url: str) -> None:
    from crawler.distributed.backlog import BacklogWait

    frontier = _frontier(redis_url)
    frontier.r.rpush(frontier.keys.items, b"old")

    async def hand_over() -> tuple[BacklogWait, float]:
        wait = BacklogWait(1, 0.3, frontier.items_waiting)
        _result, waited = await wait.hand_over(lambda bound: frontier.push_item(b"new", bound))
        return wait, waited

    wait, waited = asyncio.run(hand_over())
    assert (wait.waits, wait.forced) == (1, 1) and waited == wait.wait_seconds >= 0.3
    assert frontier.r.lrange(frontier.keys.items, 0, -1) == [b"old", b"new"]


def test_the_writer_stores_a_batch_in_one_go_and_a_restart_stores_none_twice(redis_url: str, tmp_path: Path) -> None:
    from crawler.distributed.backlog import TAKE, take
    from crawler.distributed.coordinator import Writer
    from crawler.distributed.items import encode_item
    from pipelines.store import Store

    frontier = _frontier(redis_url)
    r, keys = frontier.r, frontier.keys
    items = [_page(n) for n in range(7)]
    twice = dataclasses.replace(items[0])  # the same URL again: a batch names each page once
    r.rpush(keys.items, *[encode_item(i) for i in [*items, twice]], b"not an item")
    with Store.open(tmp_path / "w.duckdb") as store:
        run = store.begin_crawl(None, urls_requested=7)
        writer = Writer(r, keys, store, run, None, 1 << 20, batch=4)
        assert writer.drain() == 4 and r.llen(keys.items) == 5 and r.llen(keys.writing) == 0
        # Killed after a batch was committed and before Redis heard of it: the batch is still in `writing`.
        raws = take(r, r.register_script(TAKE), keys.items, keys.writing, 3)
        writer.sink.write_now(*(i for i in items[4:7]))
        assert len(raws) == 3 and r.llen(keys.writing) == 3
        again = Writer(r, keys, store, run, None, 1 << 20, batch=4)
        assert again.resume() == 3 and r.llen(keys.writing) == 0
        assert again.drain(limit=100) == 2
        pages = store.conn.execute("SELECT url, count(*) FROM pages GROUP BY url").fetchall()
    assert sorted(pages) == sorted((i.page.url, 1) for i in items)
    counts = {k.decode(): int(v) for k, v in r.hgetall(keys.counts).items()}
    # 7 pages stored (the 3 resumed count as changed: whether they were new is no longer known), the
    # repeated URL unchanged, the bad entry a failure; none counted twice.
    assert (counts["fetched"], counts["new"], counts.get("changed"), counts.get("unchanged"), counts["failed"]) \
        == (8, 4, 3, 1, 1)


HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


def _sample_backlog(client, key: bytes, stop: threading.Event, seen: list[int]) -> None:  # type: ignore[no-untyped-def]
    while not stop.is_set():
        try:
            seen.append(int(client.llen(key)))
        except Exception:  # noqa: BLE001 - the crawl's keys vanish at its end
            return
        time.sleep(0.02)


def test_workers_pause_while_the_writer_is_stopped_and_resume_losing_nothing(procs: Procs) -> None:
    import redis

    site = SiteServer(HOSTS).start()
    every: set[str] = set()
    seeds = []
    for host in HOSTS:
        links = "".join(f'<a href="/p{j}.html">page {j}</a> ' for j in range(12))
        site.add(host, "/", f"<html><body><h1>Home of {host}</h1><p>The pages of this host.</p>{links}</body></html>")
        for j in range(12):
            site.add(host, f"/p{j}.html", f"<html><head><title>Page {j}</title></head><body><h1>Page {j}</h1>"
                                          f"<p>The text of page {j} on {host}, long enough to be kept.</p></body></html>")
            every.add(site.url(host, f"/p{j}.html"))
        seeds.append(site.url(host, "/"))
        every.add(site.url(host, "/"))
    client = redis.Redis.from_url(procs.redis_url, socket_timeout=5, socket_connect_timeout=5)
    procs.env.update(WEBQA_REDIS_BACKLOG="4", WEBQA_REDIS_BACKLOG_WAIT="300")
    seen: list[int] = []
    stop = threading.Event()
    try:
        coordinator = procs.coordinator(seeds, "--depth", "1", "--delay", "0.1")
        wait_for(lambda: client.hkeys("webqa:crawls"), 60, "the published crawl")
        items_key = client.hkeys("webqa:crawls")[0] + b":items"
        workers = [procs.worker(), procs.worker()]
        wait_for(lambda: any(r.path.startswith("/p") for r in site.log), 60, "the first pages")
        coordinator.send_signal(signal.SIGSTOP)  # the writer stops: a commit stalled, a slow disk
        sampler = threading.Thread(target=_sample_backlog, args=(client, items_key, stop, seen))
        sampler.start()
        wait_for(lambda: client.llen(items_key) >= 4, 60, "the backlog to reach its bound")
        time.sleep(1.5)  # the workers keep cleaning pages meanwhile, and hold them
        assert max(seen) == 4, max(seen)
        coordinator.send_signal(signal.SIGCONT)
        out = procs.finish(coordinator)
        stop.set()
        sampler.join(5)
        assert coordinator.returncode == 0, out[-4000:]
        assert f"fetched {len(every)} (new {len(every)}, changed 0, unchanged 0)" in out, out[-2000:]
        assert max(seen) == 4, max(seen)  # never above the bound, the end included
        lines = [procs.finish(w, 60) for w in workers]
        assert all(w.returncode == 0 for w in workers)
        # Each worker's summary counts the items that waited; at least one worker waited.
        assert any("waited" in line and "for the coordinator's writer" in line for line in lines), lines
        pages, log = crawl_rows(procs.db)
        assert Counter(pages) == Counter(every) and not log  # every page stored once, nothing lost
        with duckdb.connect(str(procs.db), read_only=True) as conn:
            assert conn.execute("SELECT count(*) - count(DISTINCT (url, ordinal)) FROM chunks").fetchone() == (0,)
        assert redis_keys(procs.redis_url) == []
    finally:
        stop.set()
        client.close()
        site.stop()


def test_a_bad_backlog_setting_is_one_error_line(redis_url: str, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from tests.support.crawling import REPO

    env = dict(os.environ, WEBQA_REDIS_BACKLOG="lots")
    done = subprocess.run([sys.executable, "-m", "jobs.cli", "crawl", "--redis", redis_url, "--db",
                           str(tmp_path / "w.duckdb"), "http://127.0.0.1:9/"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "Error: WEBQA_REDIS_BACKLOG='lots': expected a whole number of items (0: no bound)"], done.stderr
    assert not (tmp_path / "w.duckdb").exists()  # nothing was started
