"""SIGINT and SIGTERM handled alike, for a stretch of work, by whichever layer is running it.

The run, the crawl, the Redis coordinator and the question loop each decide what a stop signal means
while they run; this installs their handler for both signals and puts back what was there before.
Only the main thread can install handlers: elsewhere (a run in a test thread) it does nothing.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import FrameType
from typing import Self

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

Handler = Callable[[int, "FrameType | None"], None]


@contextmanager
def stop_signals(handler: Handler) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class StopSignalScope:
    """Base for an object whose ``_handle`` is the stop-signal handler while it is entered (``with``)."""

    _installed: AbstractContextManager[None] | None = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._installed = stop_signals(self._handle)
        self._installed.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed is not None:
            self._installed.__exit__(None, None, None)
            self._installed = None
