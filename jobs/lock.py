"""One run per database at a time: an advisory lock file beside the DuckDB file.

DuckDB itself refuses a second writer, but only while a connection is open; a run also crawls (in
the same process, with its own connection) and writes reports. The lock covers the whole run, and
the kernel releases it when the holder dies, even by SIGKILL, so a crashed run never blocks cron.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from pathlib import Path
from types import TracebackType

from jobs.errors import DatabaseLockedError, StoreError


class RunLock:
    def __init__(self, db_path: str | Path, wait_seconds: float = 0.0, poll_seconds: float = 0.2) -> None:
        self.path = Path(f"{db_path}.lock")
        self.wait_seconds = wait_seconds
        self.poll_seconds = poll_seconds
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            raise StoreError(f"{self.path.with_suffix('')}: folder {self.path.parent} does not exist") from None
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot create the lock file: {exc.strerror or exc}") from None
        deadline = time.monotonic() + self.wait_seconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
                    os.close(fd)
                    raise self._busy(holder) from None
                time.sleep(self.poll_seconds)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"PID {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}".encode(), 0)
        except OSError as exc:  # a full disk: nothing of the run could be written either
            os.close(fd)
            raise StoreError(f"{self.path}: cannot write the lock file: {exc.strerror or exc}; free space on that "
                             "disk and rerun") from None
        self._fd = fd

    def _busy(self, holder: str) -> DatabaseLockedError:
        """Without --wait, suggest it; after a --wait that ran out, waiting longer is rarely the fix."""
        db = self.path.with_suffix("")
        if not self.wait_seconds:
            return DatabaseLockedError(f"{db} is busy: held by {holder or 'another webqa process'}; "
                                       "use --wait SECONDS to queue behind it")
        pid = re.match(r"PID (\d+)", holder)
        if pid is None:  # written by an older webqa, or emptied just now
            return DatabaseLockedError(f"{db} is still locked after waiting {self.wait_seconds:g}s; check which "
                                       f"process holds {self.path} (fuser {self.path})")
        return DatabaseLockedError(f"{db} is still locked by PID {pid[1]} after waiting {self.wait_seconds:g}s "
                                   f"({holder}); check that process (ps -p {pid[1]}): is it stuck, or does its "
                                   "run need longer?")

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
