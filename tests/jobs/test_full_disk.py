"""A full disk at any point of `webqa run` and `webqa crawl` is one `Error:` line and exit 3: at the lock
file, the database's creation and tables, the run row, the crawl's pages, the answers, the outputs. A real
tmpfs filled to a few kilobytes of room (root needed: skipped elsewhere), a real site, the fake Ollama."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from jobs.storage_failures import storage_error
from tests.support.fake_ollama import FakeOllama
from tests.support.crawling import mount_tmpfs
from tests.support.run import (  # noqa: F401 - crawled is a fixture, used by name
    ALL, Crawled, crawled, job_yaml, lines, quoting_responder, rows, webqa, write_job)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "disk"
    folder.mkdir()
    if not mount_tmpfs(folder, "12m"):
        pytest.skip("cannot mount a small tmpfs here (needs root): no way to fill a disk for real")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)


def fill(folder: Path, room_kb: int) -> None:
    stat = os.statvfs(folder)
    left = stat.f_bavail * stat.f_frsize - room_kb * 1024
    if left > 0:
        (folder / "filler").write_bytes(b"x" * left)


def one_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 3, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    (error,) = [line for line in lines(done.stderr) if line.startswith("Error:")]
    return error


@pytest.mark.parametrize("room_kb", [0, 8, 16, 32, 256])
@pytest.mark.parametrize("stored", [False, True], ids=["new-database", "crawled-database"])
def test_a_full_disk_during_a_run_is_one_error_line(tmp_path: Path, disk: Path, crawled: Crawled, room_kb: int,
                                                    stored: bool) -> None:
    db = disk / "w.duckdb"
    if stored:
        shutil.copy(crawled.db, db)
    job = write_job(tmp_path, job_yaml(ALL, extra="crawl:\n  allow_private_networks: true\n").replace(
        "name: qa-test\n", f"name: qa-test\nurls: [{', '.join(crawled.urls.values())}]\n"))
    fill(disk, room_kb)
    with FakeOllama() as fake:
        fake.chat_responder = quoting_responder
        done = webqa("run", job, "--db", db, "--out", disk / "out", "-q", host=fake.url, cwd=tmp_path)
    error = one_error(done)
    assert str(db) in error and "No space left on device" in error, error


@pytest.mark.parametrize("room_kb", [0, 16, 64])
def test_a_full_disk_during_a_crawl_is_one_error_line(tmp_path: Path, disk: Path, crawled: Crawled,
                                                      room_kb: int) -> None:
    db = disk / "w.duckdb"
    fill(disk, room_kb)
    done = webqa("crawl", *crawled.urls.values(), "--db", db, "--delay", "0", cwd=tmp_path,
                 env={"WEBQA_ALLOW_PRIVATE_NETWORKS": "1"})
    error = one_error(done)
    assert str(db) in error and "No space left on device" in error, error



def test_a_read_only_output_folder_is_refused_before_the_crawl(tmp_path: Path, disk: Path, crawled: Crawled) -> None:
    # Found before anything is fetched or recorded, not after the crawl; and freeing space would not help.
    db = tmp_path / "w.duckdb"
    shutil.copy(crawled.db, db)
    remount = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True, timeout=30)
    if remount.returncode != 0:
        pytest.skip(f"cannot remount the tmpfs read-only here: {remount.stderr.strip()}")
    job = write_job(tmp_path, job_yaml(ALL, extra="crawl:\n  allow_private_networks: true\n").replace(
        "name: qa-test\n", f"name: qa-test\nurls: [{', '.join(crawled.urls.values())}]\n"))
    requests = len(crawled.site.log)
    with FakeOllama() as fake:
        done = webqa("run", job, "--db", db, "--out", disk / "out", "-q", host=fake.url, cwd=tmp_path)
    error = one_error(done)
    assert error == f"Error: {disk / 'out'}: cannot create the output folder: Read-only file system; fix it or pass --out DIR"
    assert len(crawled.site.log) == requests and fake.requests == []  # nothing fetched, nothing asked
    assert rows(db, "SELECT count(*) AS n FROM runs") == [{"n": 0}]


def test_a_write_the_disk_refuses_says_what_to_do_before_resuming() -> None:
    assert "(free space, then `webqa run --resume`)" in str(storage_error(OSError(errno.ENOSPC, "No space left"), "x"))
    assert "(make that file system writable, then" in str(storage_error(OSError(errno.EROFS, "Read-only"), "x"))
    assert "(check that disk, then" in str(storage_error(OSError(errno.EIO, "I/O error"), "x"))
    committed = duckdb.TransactionException(f"Failed to commit: {os.strerror(errno.EROFS)}")
    assert "(make that file system writable, then" in str(storage_error(committed, "x"))
