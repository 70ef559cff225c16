"""Where a command's messages go: the terminal as --quiet allows, and every one of them to --log-file."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

from pipelines.redact import inert, redact_text


class Console:
    """Where messages go: stderr as --quiet allows, and every one of them, timestamped, to --log-file.

    ``info`` is progress and summaries of steps, ``important`` is errors and notices, ``result`` is a
    command's final summary on stdout. The log file gets all three whatever --quiet says, so cron can
    keep stdout/stderr short and the file complete.

    Under --quiet nothing is printed while the command works: a command that exits 0 prints nothing at
    all, and any other exit code prints one line on stderr (``quiet_line``), which names what happened.
    """

    def __init__(self, quiet: bool = False, log: TextIO | None = None) -> None:
        self.quiet = quiet
        self.log = log
        self.verdict: str | None = None  # the command's one line for --quiet, set by its handler
        self.last_important: str | None = None

    def stamp(self, message: str) -> None:
        """To the log file only (the command line, the exit code)."""
        if self.log is None:
            return
        message = shown(message)
        prefix = f"{time.strftime('%Y-%m-%d %H:%M:%S')} webqa[{os.getpid()}] "
        try:
            self.log.write("".join(f"{prefix}{line}\n" for line in message.splitlines() or [""]))
            self.log.flush()
        except OSError:
            pass  # a full disk must not turn a finished run into a failure

    def info(self, message: str) -> None:
        if not self.quiet:
            print(shown(message), file=sys.stderr, flush=True)
        self.stamp(message)

    def important(self, message: str) -> None:
        if not self.quiet:
            print(shown(message), file=sys.stderr, flush=True)
        self.last_important = message
        self.stamp(message)

    def result(self, message: str) -> None:
        if not self.quiet:
            print(shown(message), flush=True)
        self.stamp(message)

    def error(self, message: str) -> None:
        """The line of a command that stopped on an error: printed under --quiet too (it is the one line)."""
        print(shown(message), file=sys.stderr, flush=True)
        self.verdict = None
        self.stamp(message)

    def quiet_line(self, code: int) -> None:
        """Under --quiet, at the end: nothing for exit 0, else the command's one line naming what happened."""
        if not self.quiet or code == 0:
            return
        line = self.verdict or self.last_important
        if line:
            print(shown(line), file=sys.stderr, flush=True)

    def notifier(self) -> Callable[[str], None]:
        """For the library's progress callbacks: notices and errors are important, the rest is progress."""

        def notify(message: str) -> None:
            if message.startswith(("Notice", "Error")):
                self.important(message)
            else:
                self.info(message)

        return notify

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None


def show(text: object = "") -> None:
    """print() for text that carries what came from outside (answers, quotes, URLs, headings): :func:`shown`."""
    print(shown(str(text)), flush=True)


def shown(message: str) -> str:
    """What may reach a terminal, cron mail or log file: no URL credentials, no control characters (text
    from pages, LLM replies and URLs is in many messages)."""
    return inert(redact_text(message))


class Shown(logging.Filter):
    """Log records as :func:`shown` makes messages: Scrapy logs its settings, a Redis URL with its password."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is logging's to report, as before
            return True
        cleaned = shown(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def print_json(obj: object) -> None:
    """A command's --json output: indented, non-ASCII as is, dates and paths as text."""
    import json

    print(json.dumps(obj, ensure_ascii=False, indent=2, default=str))
