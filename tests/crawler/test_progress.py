"""The crawl's TTY progress line: a pure function of the counts and the width, and a real run on a pty."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from crawler.progress import fit, progress_line
from tests.support.site_server import SiteServer
from tests.support.run import REPO, WEBQA

MANY = {"new": 123456, "changed": 2345, "unchanged": 34567, "not_modified": 4567, "skipped": 567, "failed": 67}


def test_line_shows_done_total_rate_and_host() -> None:
    line = progress_line(12, 40, 4.0, "docs.example.org", {"new": 10, "failed": 2}, 80)
    assert line == "  12/40 pages  3.0 pages/s  docs.example.org  (10 new, 2 failed)"


@pytest.mark.parametrize("width", [20, 40, 80, 120])
def test_line_never_fills_the_terminal_width(width: int) -> None:
    line = progress_line(987654, 1234567, 3.0, "a-very-long-host-name.subdomain.example.org", MANY, width)
    assert len(line) == width - 1  # the last column stays empty: no wrap
    assert line.endswith("…")


def test_a_narrow_terminal_cuts_the_counts_not_the_essentials() -> None:
    line = progress_line(5, 10, 4.0, "example.org", MANY, 50)
    assert line.startswith("  5/10 pages  1.2 pages/s  example.org") and line.endswith("…")


def test_no_rate_before_time_has_passed_and_no_host_yet() -> None:
    assert progress_line(0, 3, 0.0, None, {}, 80) == "  0/3 pages  0.0 pages/s"


def test_fit() -> None:
    assert fit("abcdef", 6) == "abcdef"
    assert fit("abcdefg", 6) == "abcde…"
    assert fit("abc", 0) == ""


@pytest.mark.e2e
def test_crawl_on_an_80_column_pty_draws_lines_that_fit(tmp_path: Path) -> None:
    page = "<html><body><main><h1>P</h1><p>" + "Words in a sentence. " * 30 + "</p></main></body></html>"
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    with SiteServer(hosts=("127.0.0.1",)) as site:
        urls = []
        for i in range(6):
            site.add(0, f"/p{i}.html", body=page.replace("<h1>P", f"<h1>Page {i}"))
            urls.append(site.url(0, f"/p{i}.html"))
        proc = subprocess.Popen([*WEBQA, "crawl", *urls, "--db", str(tmp_path / "db.duckdb"), "--delay", "0"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, cwd=REPO, env=env)
        os.close(slave)
        out = b""
        while True:  # read the pty as the crawl writes, until the child closes it
            ready, _, _ = select.select([master], [], [], 60)
            if not ready:
                break
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child exited and the pty is closed
                break
            if not data:
                break
            out += data
        os.close(master)
        stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out.decode()
    assert b"fetched 6" in stdout
    drawn = [part for part in out.decode().replace("\r\n", "\n").split("\r") if part.strip()]
    progress = [part.rstrip("\n") for part in drawn if "pages/s" in part]
    assert progress, out.decode()
    assert all(len(part) <= 79 for part in progress), [len(p) for p in progress]
    assert "6/6 pages" in progress[-1] and "127.0.0.1" in progress[-1]
