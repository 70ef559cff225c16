"""Every error webqa reports to a user, and the exit codes cron sees.

Library code raises these; only the CLI edge turns them into one ``Error: …`` line and an exit code.
It sits in the bottom layer and imports nothing from the project, so that pipelines/, crawler/ and
jobs/ all raise from it without importing upwards (``jobs.errors`` re-exports it for jobs/ code).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from os import PathLike
from enum import IntEnum
from typing import Protocol


class ExitCode(IntEnum):
    """Process exit codes, documented in the README for cron."""

    OK = 0  # every question answered / the crawl did its work
    PARTIAL = 1  # the run finished, but some questions or URLs failed
    USAGE = 2  # bad command line, job file or input: nothing was attempted
    FAILED = 3  # the job could not do its work (no URL fetched, LLM unavailable, …)
    LOCKED = 4  # another webqa process holds the database
    CHANGED = 5  # --fail-on-change and at least one answer changed
    INTERRUPTED = 130  # SIGINT/SIGTERM: stopped cleanly after the current step (SIGTERM too, not 143)


class WorkSummary(Protocol):
    """What a step had done when an error stopped it (e.g. ``crawler.run.CrawlSummary``)."""

    @property
    def problems(self) -> Sequence[object]:
        """Inputs skipped on the way (each prints as one line)."""
        ...

    def line(self) -> str:
        """The one summary line the CLI prints before the error."""
        ...


class WebqaError(Exception):
    """A failure the user can act on; ``str(err)`` is the one line shown after ``Error:``."""

    exit_code: ExitCode = ExitCode.FAILED


class ConfigError(WebqaError):
    """A job file, URL list or option that cannot be used as given."""

    exit_code = ExitCode.USAGE


class DatabaseLockedError(WebqaError):
    """Another process holds the DuckDB file."""

    exit_code = ExitCode.LOCKED


class StoreError(WebqaError):
    """What is stored cannot be used: the database (its folder, its lock file, the output folder) cannot be
    opened, is not a webqa database, or does not hold what was asked for. A failed write is ``WriteFailedError``."""


class NoSuchDatabase(StoreError):
    """The --db file does not exist, for a command that only reads it (opening it would create it empty)."""

    def __init__(self, path: str | PathLike[str]) -> None:
        super().__init__(f"{path}: no such database; run `webqa crawl URL… --db {path}` (or `webqa run` without "
                         "--no-crawl) first, or pass the --db that holds the pages")
        self.path = path


def require_database(path: str | PathLike[str]) -> None:
    """Raise :class:`NoSuchDatabase` unless ``path`` exists: the one check and wording every command uses."""
    if not os.path.exists(path):
        raise NoSuchDatabase(path)


class LLMError(WebqaError):
    """Ollama could not give an answer (after retries)."""


class LLMUnavailableError(LLMError):
    """Ollama cannot be reached at all; the run may fall back to the extractive answerer."""


class ModelNotFoundError(LLMError):
    """The model is not pulled on the Ollama server; retrying cannot help."""


class NothingToDoError(WebqaError):
    """The inputs led to no work at all (no URL could be processed, no chunk stored)."""

    def __init__(self, message: str, summary: WorkSummary | None = None) -> None:
        super().__init__(message)
        self.summary = summary  # what was done before giving up, for the CLI's summary line


class WriteFailedError(StoreError):
    """Writing to the database or the output folder failed (disk full, read-only, I/O error, a file size limit).

    What was committed before stays; a run stopped by it can be continued with ``--resume``. A crawl stopped
    by it carries its ``summary``, which counts only what the store committed.
    """

    def __init__(self, message: str, summary: WorkSummary | None = None) -> None:
        super().__init__(message)
        self.summary = summary


class Interrupted(WebqaError):
    """SIGINT or SIGTERM stopped the work: what was finished is stored, the rest was not done.

    ``immediate`` is a second signal: in-flight work was abandoned, not waited for.
    """

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, message: str, summary: WorkSummary | None = None, *, immediate: bool = False) -> None:
        super().__init__(message)
        self.summary = summary
        self.immediate = immediate
