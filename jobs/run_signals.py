"""SIGINT/SIGTERM during a run, and how a run that stopped is recorded: status, exit code, resumable or not.

Whatever stops a run (a signal, a full disk, an error the user can act on, a bug), its row must not stay
"in progress": :func:`how_it_stopped` decides what to record and which error to raise.
"""

from __future__ import annotations

import logging
import signal
import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.errors import ExitCode, Interrupted, WebqaError
from jobs.storage_failures import is_storage_failure, storage_error
from pipelines.signals import StopSignalScope, stop_signals

log = logging.getLogger("jobs.runner")  # the run's log lines keep the logger name users filter on


def stop_after_current(flag: threading.Event) -> AbstractContextManager[None]:
    """SIGTERM/SIGINT: finish the question in hand, then stop and mark the run interrupted."""

    def handler(signum: int, frame: Any) -> None:
        if flag.is_set():
            raise KeyboardInterrupt  # a second signal means now
        flag.set()

    return stop_signals(handler)


class RunSignals(StopSignalScope):
    """SIGINT/SIGTERM for the whole run, between the two phases that stop gracefully on their own.

    The crawl (crawler/shutdown.py) and the question loop (``stop_after_current``) install handlers of
    their own while they run. Around them: before the lock is held the first signal stops at once
    (nothing has started); after that it is noted and the run stops at its next checkpoint, recorded as
    interrupted (a setup step such as checking Ollama is bounded by its own timeout). A second signal
    stops at once, wherever the run is.
    """

    def __init__(self) -> None:
        self.received: str | None = None  # the first signal, e.g. "SIGTERM"
        self.count = 0
        self.started = False  # the run row exists: note the first signal instead of stopping at once

    def _handle(self, signum: int, _frame: Any) -> None:
        self.count += 1
        if self.received is None:
            self.received = signal.Signals(signum).name
        if not self.started or self.count > 1:
            raise KeyboardInterrupt

    def checkpoint(self, where: str) -> None:
        if self.received is not None:
            raise Interrupted(f"{self.received}: the run stopped {where}; `webqa run --resume` continues it")


@dataclass
class Stop:
    """How a run stopped: the error to raise and what its row records."""

    error: BaseException
    status: str  # interrupted | failed
    code: ExitCode
    resumable: bool
    reason: str


def how_it_stopped(exc: BaseException, signals: RunSignals, phase: str, db: Path) -> Stop:
    """What to record for a run that ``exc`` stopped during its ``phase``, and the error to raise."""
    if signals.received is not None and not isinstance(exc, (Interrupted, KeyboardInterrupt)):
        # A signal that reached a library call mid-way (DuckDB: "Query interrupted") is still the signal.
        log.debug("Stopped by %s in %r", signals.received, exc)
        exc = KeyboardInterrupt() if signals.count > 1 else Interrupted(
            f"{signals.received}: the run stopped during its {phase}")
    if isinstance(exc, (Interrupted, KeyboardInterrupt)):
        return _interrupted(exc, phase)
    if is_storage_failure(exc):
        error = storage_error(exc, f"{db} or the output folder: cannot write")
        return Stop(error, "failed", ExitCode.FAILED, True, str(error))
    if isinstance(exc, WebqaError):
        return Stop(exc, "failed", exc.exit_code, False, str(exc))
    return Stop(exc, "failed", ExitCode.FAILED, False, f"crashed: {exc!r}")


def _interrupted(exc: Interrupted | KeyboardInterrupt, phase: str) -> Stop:
    immediate = isinstance(exc, KeyboardInterrupt) or (isinstance(exc, Interrupted) and exc.immediate)
    error: BaseException = exc if isinstance(exc, Interrupted) else Interrupted(
        f"stopped at once during the {phase}; what was finished is stored; `webqa run --resume` "
        "continues the run", immediate=True)
    reason = f"interrupted during the {phase}" + (" (at once)" if immediate else "")
    if isinstance(exc, Interrupted) and not immediate:
        error = Interrupted(f"{exc}; `webqa run --resume` finishes the crawl, then answers", exc.summary)
    return Stop(error, "interrupted", ExitCode.INTERRUPTED, True, reason)
