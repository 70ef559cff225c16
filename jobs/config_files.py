"""Reading a job file from disk: bounded, never blocking, UTF-8, each problem one line naming the file.

A job file holds settings, not data: anything near the size limit is a mistake or an attack, and a
FIFO or a device given as the job would block (while the run lock is held) or never end.
"""

from __future__ import annotations

from pathlib import Path

from crawler.urllist import NotARegularFileError, read_bounded
from jobs.config_messages import job_error

MAX_JOB_BYTES = 1024 * 1024  # 1 MiB; long URL lists belong in urls_file
TOO_LARGE = "job file is larger than 1 MiB; a job file holds settings only; put long URL lists in urls_file"


def read_job_bytes(path: Path, display: str) -> bytes:
    """The whole file, refusing folders, FIFOs, devices and sockets and anything over ``MAX_JOB_BYTES``."""
    try:
        # Checked before any read: a FIFO blocks and /dev/zero never ends.
        data = read_bounded(path, MAX_JOB_BYTES)  # one byte more at most: "too large" even when stat() cannot tell
    except NotARegularFileError as exc:
        if exc.kind == "a folder":
            raise job_error(display, "is a folder, not a job file; give the path of the file") from None
        raise job_error(display, f"is {exc.kind}, not a regular file; give the path of a job file") from None
    except FileNotFoundError:
        raise job_error(display, "no such file; check the path") from None
    except PermissionError:
        raise job_error(display, "cannot read the job file (permission denied); check its permissions") from None
    except IsADirectoryError:
        raise job_error(display, "is a folder, not a job file; give the path of the file") from None
    except OSError as exc:
        raise job_error(display, f"cannot read the job file: {exc.strerror or exc}") from None
    if len(data) > MAX_JOB_BYTES:
        raise job_error(display, TOO_LARGE)
    return data


def decode_job(data: bytes, display: str) -> str:
    """The file's text; a byte that is not UTF-8 is reported with its line."""
    try:
        return data.decode("utf-8-sig")  # -sig: editors on Windows like to add a BOM
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise job_error(display, "not UTF-8 text; save the file as UTF-8", line=line) from None
