"""The run's output folder: checked before the crawl without creating it, created when the reports are written.

One message for both: a run refused before its crawl leaves no empty folder behind, and a folder that became
unwritable during the crawl is told the same way.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from jobs.errors import StoreError
from jobs.storage_failures import is_storage_failure, storage_error

__all__ = ["check_output_folder", "make_output_folder"]


def check_output_folder(folder: Path) -> None:
    """Raise StoreError unless ``folder`` could be created and written: a trial folder is made and removed in
    ``folder`` or, when it does not exist yet, in the nearest folder above it that does."""
    if folder.is_symlink() and not folder.exists():  # a link to nothing (a mount not mounted): mkdir would fail later
        raise _cannot_create(folder, FileExistsError(17, "a link to a folder that does not exist"))
    existing = folder
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    try:
        Path(tempfile.mkdtemp(prefix=".webqa-check-", dir=existing)).rmdir()
    except OSError as exc:
        raise _cannot_create(folder, exc) from None


def make_output_folder(folder: Path) -> None:
    """Create ``folder`` for the reports; a full or failing disk is told with how to resume the recorded run."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if is_storage_failure(exc):
            raise storage_error(exc, f"{folder}: cannot create the output folder") from None
        raise _cannot_create(folder, exc) from None


def _cannot_create(folder: Path, exc: OSError) -> StoreError:
    return StoreError(f"{folder}: cannot create the output folder: {exc.strerror or exc}; fix it or pass --out DIR")
