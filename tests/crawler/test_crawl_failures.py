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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.crawling import REPO
from tests.support.site_server import SiteServer
from tests.support.crawling import mount_tmpfs, page

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


def kill_mid_crawl_and_watch_children(command: list[str], site: SiteServer, stderr: Path) -> None:
    """Start ``command``, wait until it crawls with extraction workers running and the slow page in
    flight, SIGKILL the process alone, and assert that each of its descendants exits within 5 s and
    that none of them writes to the crawl's stderr (cron mails it) on the way out."""
    with stderr.open("w") as err:
        proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
    _watch(proc, site)
    text = stderr.read_text(encoding="utf-8")
    assert "leaked" not in text and "Traceback" not in text, text


def _watch(proc: subprocess.Popen[bytes], site: SiteServer) -> None:
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


@pytest.mark.e2e
def test_killed_crawl_leaves_no_process_behind(slow_site: SiteServer, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "jobs.cli", "crawl", *site_urls(slow_site), "--db", str(tmp_path / "w.duckdb"),
               "--delay", "0", "--workers", "2"]
    kill_mid_crawl_and_watch_children(command, slow_site, tmp_path / "stderr.txt")


@pytest.mark.e2e
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
    kill_mid_crawl_and_watch_children(command, slow_site, tmp_path / "stderr.txt")


# -- a full disk -----------------------------------------------------------------------------


def _limit_file_size(limit: int) -> Callable[[], None]:
    """preexec_fn: writes past ``limit`` bytes fail with EFBIG ("File too large") instead of killing the process."""
    def apply() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[tuple[Path, Callable[[], None] | None]]:
    """A folder whose disk fills after about 3 MB: a tmpfs, or else a file size limit for the crawl."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if mount_tmpfs(folder, "3m"):
        try:
            yield folder, None
        finally:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)
    else:
        yield folder, _limit_file_size(3 * 1024 * 1024)


@pytest.mark.e2e
def test_full_disk_stops_the_crawl_with_one_error_and_exit_3(site: SiteServer, small_disk: tuple[Path, Any],
                                                             tmp_path: Path) -> None:
    from tests.support.crawling import prose, rows, summary

    folder, preexec = small_disk
    urls = []
    for i in range(40):  # about 72 KB of HTML and as much text each: far more than the disk holds
        body = "".join(f"<p>{prose(f'p{i} s{k}', 8)}</p>" for k in range(60))
        site.add(0, f"/p{i}.html", page(f"Page {i}", extra=body))
        urls.append(site.url(0, f"/p{i}.html"))
    db = folder / "webqa.duckdb"

    # Without -q: its one line would be the Error alone, and the counts below are read from the summary line.
    result = subprocess.run([sys.executable, "-m", "jobs.cli", "crawl", *urls, "--db", str(db), "--delay", "0"],
                            cwd=REPO, capture_output=True, text=True, timeout=300, preexec_fn=preexec)

    assert result.returncode == 3, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    assert str(db) in errors[0] and ("No space left on device" in errors[0] or "File too large" in errors[0]), errors[0]
    counts = summary(result, "stderr")
    # The disk filled before the end. How many pages made it depends on how writes fell into batches
    # (a refused batch's space may not come back for the page-by-page retry): what matters is below,
    # that every page called fetched is stored.
    assert counts["fetched"] < len(urls)

    # A copy on a disk with room: DuckDB may need space to replay its write-ahead log.
    copy = tmp_path / "copy"
    copy.mkdir()
    for file in folder.glob("webqa.duckdb*"):
        (copy / file.name).write_bytes(file.read_bytes())
    stored = {url for (url,) in rows(copy / "webqa.duckdb", "SELECT url FROM pages")}
    assert len(stored) == counts["fetched"] == counts["new"]  # every page called fetched is stored
    assert stored <= set(urls)
    statuses = [status for (_, status) in rows(copy / "webqa.duckdb", "SELECT crawl_run_id, status FROM crawl_runs")]
    assert statuses and statuses[-1] != "done", statuses


# -- a bound on the crawl's duration ---------------------------------------------------------


@pytest.mark.e2e
def test_max_duration_stops_gracefully_keeps_what_was_fetched_and_exits_1(site: SiteServer, tmp_path: Path) -> None:
    from tests.support.crawling import pages, rows

    site.add(0, "/fast.html", page("Fast page"))
    # In flight when the bound passes: it is still stored; the link found on it is never followed.
    site.slow(1, "/slow.html", 4, page("Slow page", links=["/child.html"]))
    site.add(1, "/child.html", page("Child page"))
    fast, slow = site.url(0, "/fast.html"), site.url(1, "/slow.html")
    db = tmp_path / "w.duckdb"

    result = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "crawl", fast, slow, "--depth", "1", "--max-duration", "1.5",
         "--db", str(db), "--delay", "0"],
        cwd=REPO, capture_output=True, text=True, timeout=120)

    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("Crawled in ")]
    assert line.endswith("stopped after 1.5 s (crawl.max_duration)"), line
    assert "fetched 2 " in line, line
    assert set(pages(db)) == {fast, slow}
    assert not site.requests_for(1, "/child.html")
    assert rows(db, "SELECT status FROM crawl_runs") == [("timed_out",)]


@pytest.mark.e2e
def test_max_duration_drops_requests_waiting_for_their_hosts_delay(site: SiteServer, tmp_path: Path) -> None:
    """Scrapy's graceful close would still send every request already queued in a host's slot: with a
    1 s delay, ten pages on one host all went out after a 2 s bound."""
    from tests.support.crawling import fetch_log, pages

    urls = []
    for i in range(10):
        site.add(0, f"/p{i}.html", page(f"Page {i}"))
        urls.append(site.url(0, f"/p{i}.html"))
    db = tmp_path / "w.duckdb"

    result = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "crawl", *urls, "--max-duration", "2", "--db", str(db), "--delay", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=120)

    assert result.returncode == 1, result.stderr[-3000:]
    requested = {record.path for record in site.requests_for(0)} - {"/robots.txt"}
    assert 0 < len(requested) < len(urls), requested
    log = fetch_log(db)
    not_sent = {url for url, (outcome, reason, _) in log.items()
                if (outcome, reason) == ("skipped", "not fetched: the crawl reached crawl.max_duration")}
    assert not_sent and not_sent.isdisjoint(pages(db))
    assert set(pages(db)) | not_sent == set(urls)  # every URL is either stored or recorded as not sent


@pytest.mark.e2e
def test_max_duration_with_nothing_fetched_exits_3(site: SiteServer, tmp_path: Path) -> None:
    site.slow(0, "/slow.html", 30, page("Slow page"))
    db = tmp_path / "w.duckdb"

    result = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "-q", "crawl", site.url(0, "/slow.html"), "--max-duration", "1",
         "--timeout", "2", "--db", str(db), "--delay", "0"],
        cwd=REPO, capture_output=True, text=True, timeout=120)

    assert result.returncode == 3, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "stopped after 1 s (crawl.max_duration)" in errors[0], result.stderr
    from tests.support.crawling import rows

    assert rows(db, "SELECT status FROM crawl_runs") == [("timed_out",)]


def test_max_duration_in_the_job_and_on_the_command_line(tmp_path: Path) -> None:
    from crawler.run import CrawlOptions, crawl_settings
    from jobs.cli import build_parser
    from jobs.config import parse_job

    base = "name: t\nurls: [https://example.org/]\nquestions:\n  - Why is the sky blue?\n"
    assert parse_job(base + "crawl:\n  max_duration: 600\n").crawl.max_duration == 600.0
    assert parse_job(base).crawl.max_duration is None
    with pytest.raises(Exception, match="max_duration"):
        parse_job(base + "crawl:\n  max_duration: 0\n")
    assert build_parser().parse_args(["crawl", "--max-duration", "90", "x"]).max_duration == 90.0
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["crawl", "--max-duration", "0", "x"])
    assert exit_info.value.code == 2
    settings = crawl_settings(CrawlOptions(max_duration=90.0), tmp_path / "w.duckdb", {})
    assert settings["CLOSESPIDER_TIMEOUT"] == 90.0
    assert "CLOSESPIDER_TIMEOUT" not in crawl_settings(CrawlOptions(), tmp_path / "w.duckdb", {})
