"""A crawl that ends badly: killed (no process may outlive it), out of disk (no page reported that was
not stored), out of time (crawl.max_duration). Every crawl runs as a subprocess against the loopback
test site, into a real DuckDB file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.crawling import REPO
from tests.site_server import SiteServer
from tests.test_crawl import page

# -- processes -------------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first), or None when gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text.rsplit(")", 1)[1].split()


def descendants(root: int) -> dict[int, int]:
    """Every living descendant of ``root``, recursively, as pid → parent pid."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(int(entry.name))) is not None:
            parents[int(entry.name)] = int(fields[1])
    found: dict[int, int] = {}
    todo = [root]
    while todo:
        parent = todo.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = ppid
                todo.append(pid)
    return found


def alive(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")  # a zombie has exited; only its reaper lags


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "(gone)"


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def kill_mid_crawl_and_watch_children(command: list[str], site: SiteServer) -> None:
    """Start ``command``, wait until it crawls with extraction workers running and the slow page in
    flight, SIGKILL the process alone, and assert that each of its descendants exits within 5 s."""
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: dict[int, int] = {}
    try:
        def mid_crawl() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"the crawl ended (exit {proc.returncode}) before it could be killed")
            seen.update(descendants(proc.pid))
            # A worker is a child of the forkserver, itself a child of the crawling process.
            worker = any(ppid != proc.pid for ppid in seen.values())
            return worker and bool(site.requests_for(1, "/slow.html"))

        wait_for(mid_crawl, "extraction workers and the slow request")
        seen.update(descendants(proc.pid))
        kinds = " ".join(cmdline(pid) for pid in seen)
        assert "forkserver" in kinds and "resource_tracker" in kinds, kinds  # what is being checked exists
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

        deadline = time.monotonic() + 5
        while (left := [pid for pid in seen if alive(pid)]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left, "still alive 5 s after the crawl was killed:\n" + "\n".join(f"{p}: {cmdline(p)}" for p in left)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for pid in seen:  # only processes this test started
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def slow_site(site: SiteServer) -> SiteServer:
    for name in ("first", "second", "third"):
        site.add(0, f"/{name}.html", page(f"{name.title()} page"))
    site.slow(1, "/slow.html", 60, page("Slow"))
    return site


def site_urls(site: SiteServer) -> list[str]:
    return [site.url(0, f"/{n}.html") for n in ("first", "second", "third")] + [site.url(1, "/slow.html")]


def test_killed_crawl_leaves_no_process_behind(slow_site: SiteServer, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "jobs.cli", "crawl", *site_urls(slow_site), "--db", str(tmp_path / "w.duckdb"),
               "--delay", "0", "--workers", "2"]
    kill_mid_crawl_and_watch_children(command, slow_site)


def test_killed_run_leaves_no_process_behind(slow_site: SiteServer, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: orphans\n"
        "urls:\n" + "".join(f"  - {u}\n" for u in site_urls(slow_site))
        + "crawl:\n  delay: 0\n  allow_private_networks: true\n"
        "answerer: extractive\n"
        "questions:\n  - What does the first page explain?\n",
        encoding="utf-8",
    )
    command = [sys.executable, "-m", "jobs.cli", "run", str(job), "--db", str(tmp_path / "w.duckdb"),
               "--out", str(tmp_path / "out")]
    kill_mid_crawl_and_watch_children(command, slow_site)
