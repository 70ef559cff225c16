"""A bound on the CPU time of a block of code: ``with cpu_deadline(seconds): …``.

The bound is CPU time (user + system) of this process, not wall time: work slowed by other processes
on a loaded machine is not cut off, work that burns CPU (regex backtracking, a huge DOM) is. It is
enforced with ``ITIMER_PROF``/SIGPROF when entered from a main thread (the previous handler and any
outer timer are restored on exit); elsewhere the block just runs unbounded. SIGPROF is only acted upon
between Python bytecodes, so a single long C call can overrun the deadline until it returns.
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType, TracebackType


class CpuDeadlineExceeded(BaseException):
    """BaseException on purpose: trafilatura and clean_page catch ``Exception`` to survive
    bad pages, and must not swallow the deadline."""


def can_use_cpu_timer(max_seconds: float) -> bool:
    # Signal handlers can only be installed from the main thread of the main interpreter;
    # ProcessPoolExecutor workers run their tasks there, threads do not.
    return (
        max_seconds > 0
        and hasattr(signal, "setitimer")
        and hasattr(signal, "SIGPROF")
        and threading.current_thread() is threading.main_thread()
    )


class cpu_deadline:  # noqa: N801 - used as a context manager, named like one
    """Raises ``CpuDeadlineExceeded`` inside the block once it has used ``max_seconds`` of CPU."""

    def __init__(self, max_seconds: float) -> None:
        self.max_seconds = max_seconds
        self.armed = False
        self.installed = False
        self.previous_handler: object = signal.SIG_DFL
        self.previous_timer: tuple[float, float] = (0.0, 0.0)
        self.cpu_start = 0.0

    def __enter__(self) -> cpu_deadline:
        self.cpu_start = time.process_time()  # what ITIMER_PROF counts: this process's user + system time
        if can_use_cpu_timer(self.max_seconds):
            self.previous_handler = signal.signal(signal.SIGPROF, self._on_deadline)
            self.installed = True
            self.armed = True
            self.previous_timer = signal.setitimer(signal.ITIMER_PROF, self.max_seconds)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        try:
            self.restore()
        except CpuDeadlineExceeded:
            self.restore()  # the signal cut the first restore short: finish it, and report the deadline
            raise

    def _on_deadline(self, signum: int, frame: FrameType | None) -> None:
        # Ignore a signal delivered after the work finished but before we disarmed.
        if self.armed:
            self.armed = False
            raise CpuDeadlineExceeded

    def restore(self) -> None:
        """Idempotent: disarm, and give back the previous handler and what is left of an outer timer."""
        self.armed = False
        if not self.installed:
            return
        signal.setitimer(signal.ITIMER_PROF, 0)
        # None means the old handler was installed from C; the default is the best we can do.
        signal.signal(signal.SIGPROF, self.previous_handler if self.previous_handler is not None else signal.SIG_DFL)  # type: ignore[arg-type]
        remaining, interval = self.previous_timer
        if remaining > 0:
            # Someone else's timer (a sampling profiler) was running: give it back what is left of it.
            left = remaining - (time.process_time() - self.cpu_start)
            signal.setitimer(signal.ITIMER_PROF, max(left, 1e-3), interval)
        self.installed = False
