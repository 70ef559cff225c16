"""Which errors mean the disk or file system refused a write, and the one line that says so.

Disk full, a read-only file system, an I/O error: the environment, not the job. A run stopped by one is
resumable (`webqa run --resume`), since everything stored before it stays.
"""

from __future__ import annotations

import errno
import os

import duckdb

from jobs.errors import WriteFailedError

_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG)
# DuckDB reports a write the disk refused at COMMIT as a TransactionException, naming the OS error.
_OS_WRITE_ERRORS = tuple(os.strerror(code) for code in _WRITE_ERRNOS)


def is_storage_failure(exc: BaseException) -> bool:
    """Disk full, read-only file system, I/O error: the environment, not the job."""
    if isinstance(exc, WriteFailedError):
        return True
    if isinstance(exc, OSError) and exc.errno in _WRITE_ERRNOS:
        return True
    return isinstance(exc, duckdb.IOException) or (isinstance(exc, duckdb.Error) and any(
        os_error in str(exc) for os_error in _OS_WRITE_ERRORS))


def storage_error(exc: BaseException, what: str) -> WriteFailedError:
    """``exc`` as the WriteFailedError line that names ``what`` could not be written and how to go on."""
    if isinstance(exc, WriteFailedError):
        return exc
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0][:300]
    return WriteFailedError(f"{what}: {detail}; what was stored before stays ({_remedy(exc)}, then `webqa run --resume`)")


def _remedy(exc: BaseException) -> str:
    """What to do before resuming: freeing space does not help a read-only file system or a failing disk."""
    code = exc.errno if isinstance(exc, OSError) else None
    if code == errno.EROFS or (code is None and os.strerror(errno.EROFS) in str(exc)):
        return "make that file system writable"
    if code == errno.EIO or (code is None and os.strerror(errno.EIO) in str(exc)):
        return "check that disk"
    return "free space"
