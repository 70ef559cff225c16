"""A dead host costs little: a refused connection is not retried, and does not spend the host's delay.

Issue 24: a refused URL cost ~10 s (its robots.txt tried three times, a delay apart) and 17 refused
URLs took 18 s. Both are checked by what happens, not by how long it takes: the retries Scrapy logs,
and whether a crawl with a long delay gets through its URLs before ``--max-duration`` stops it.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support.site_server import SiteServer
from tests.support.run import WIDGET, rows, webqa

pytestmark = pytest.mark.e2e  # every test here starts a child process (tests/support/e2e.py)


def closed_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()  # nothing listens there any more: connecting is refused


def test_a_refused_robots_txt_is_not_retried(tmp_path: Path) -> None:
    (port,) = closed_ports(1)
    url = f"http://127.0.0.1:{port}/page.html"
    done = webqa("-v", "crawl", url, "--db", tmp_path / "w.duckdb", "--delay", "0", "--allow-private-networks")
    assert done.returncode == 3, done.stderr
    assert "Retrying <GET" not in done.stderr and "Gave up retrying" not in done.stderr
    assert rows(tmp_path / "w.duckdb", "SELECT url, outcome, reason FROM fetch_log") == [
        {"url": url, "outcome": "failed", "reason": "connection refused"}]


def test_refused_connections_do_not_spend_the_hosts_delay(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    with SiteServer(hosts=("127.0.0.1",)) as site:
        site.add(0, "/robots.txt", "User-agent: *\nAllow: /\n", content_type="text/plain")
        site.add(0, "/widget.html", WIDGET)
        live = site.url(0, "/widget.html")
        first = webqa("-q", "crawl", live, "--db", db, "--delay", "0", "--allow-private-networks")
        assert first.returncode == 0, first.stderr  # robots.txt of the live port is cached from here on
        refused = [f"http://127.0.0.1:{port}/p.html" for port in closed_ports(3)]
        # One host (127.0.0.1), a 30 s delay: were a refusal a request, two URLs at most would be tried
        # before --max-duration stops the crawl at 15 s.
        # The live page last: a request that reached the server does make the next one wait.
        done = webqa("-q", "crawl", *refused, live, "--db", db, "--delay", "30",
                     "--max-duration", "15", "--allow-private-networks", timeout=120)
    assert done.returncode == 1, done.stderr  # the refused URLs failed; nothing was cut short
    (crawl,) = rows(db, "SELECT status, not_modified, failed, skipped FROM crawl_runs WHERE crawl_run_id = 2")
    assert crawl == {"status": "done", "not_modified": 1, "failed": 3, "skipped": 0}
    assert [r.path for r in site.requests_for(0)].count("/widget.html") == 2
