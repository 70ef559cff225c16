"""Stop signals around a command: before and after its own handling they stop it (exit 130), once its
outcome is decided they change nothing."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from jobs.cli.console import Console


def exit_now(console: Console, code: int) -> None:
    """A second signal: what had to be recorded is; do not wait for threads still talking to a server."""
    console.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def signals_until_exit() -> None:
    """From here to the process's end a stop signal is ignored: the command has recorded its outcome and its
    exit code says it (130 after a first signal). A Python handler would not do: interpreter shutdown puts
    the default action back, which ends the process as killed (143 for SIGTERM); an ignored signal stays so."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


class Outcome:
    """Whether the command has its outcome (its exit code decided): later stop signals change nothing."""

    decided = False


def _stop(_signum: int, _frame: Any) -> None:
    """SIGINT and SIGTERM outside a command's own handling: stop (exit 130) until the outcome is decided."""
    if not Outcome.decided:
        raise KeyboardInterrupt


def signals_until_handled() -> None:
    """Before and after a command's own handling, SIGTERM stops like SIGINT (KeyboardInterrupt: exit 130)."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
                signal.signal(sig, _stop)
