"""What several commands share on their command line: argument types, --db, the global options."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jobs.errors import ConfigError
from pipelines import defaults


def _argument(convert: Callable[[str], Any], what: str, ok: Callable[[Any], bool],
              in_range: str) -> Callable[[str], Any]:
    """An argparse ``type``: ``convert`` the text, then check it; each failure is one line naming the value."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {in_range}, got {text!r}")
        return value

    return parse


positive_float = _argument(float, "a number of seconds", lambda v: v >= 0, "a number ≥ 0")
duration = _argument(float, "a number of seconds", lambda v: v > 0, "a number > 0")
similarity = _argument(float, "a number between 0 and 1", lambda v: 0 < v <= 1, "a number between 0 and 1")
non_negative_int = _argument(int, "a whole number", lambda v: v >= 0, "a whole number ≥ 0")
positive_int = _argument(int, "a whole number", lambda v: v >= 1, "a whole number ≥ 1")
# A question as a job's `question:` takes it: words, not blanks.
question_text = _argument(str, "a question", lambda v: bool(v.strip()), "a question, not blanks")
run_id = _argument(int, "a run id (a whole number, see `webqa runs`)", lambda v: v >= 1, "a run id ≥ 1")


def default_db() -> str:
    """$WEBQA_DB, read when the command line is parsed (not at import), else ./webqa.duckdb."""
    return os.environ.get("WEBQA_DB", defaults.DB)


def add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=default_db(), metavar="PATH",
                        help="DuckDB file (default: $WEBQA_DB or ./webqa.duckdb)")


def add_private_networks(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-private-networks", action="store_true",
                        help="crawl loopback, private and link-local addresses (intranets); see SECURITY.md")


@contextmanager
def reading_runs(db: str) -> Iterator[Any]:
    """The --db of a command that reads runs: opened read-only, one line for a file no run ever wrote to."""
    from jobs.runstore import RunStore

    with RunStore.open(db, read_only=True) as store:
        store.require_runs()
        yield store


def check_db(args: argparse.Namespace) -> None:
    """A folder as --db would fail later with a DuckDB or lock-file message that hides the slip."""
    db = getattr(args, "db", None)
    if db is not None and Path(db).is_dir():
        raise ConfigError(f"--db {db}: is a folder; pass a file path such as {Path(db) / 'webqa.duckdb'}")


def add_global_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, after_command: bool) -> None:
    """-v, -q and --log-file: on the main parser with defaults, and on every subcommand without.

    A subcommand's default would overwrite what was given before its name (``webqa -q run JOB``), so
    there each option sets its attribute only when it is written (``webqa run JOB -q``).
    """
    flag, path = (argparse.SUPPRESS, argparse.SUPPRESS) if after_command else (False, None)
    parser.add_argument("-v", "--verbose", action="store_true", default=flag, help="show Scrapy's and webqa's log")
    parser.add_argument("-q", "--quiet", action="store_true", default=flag,
                        help="for cron: nothing on exit 0, else one line naming what happened (other commands: "
                             "their output only)")
    parser.add_argument("--log-file", type=Path, metavar="PATH", default=path,
                        help="append every message (progress, notices, errors, summaries, warnings), timestamped, "
                             "to PATH, whatever --quiet says")


def interactive(args: argparse.Namespace) -> bool:
    """Whether a progress line may redraw itself: a terminal, and neither --quiet nor -v's log in the way."""
    return sys.stderr.isatty() and not args.quiet and not args.verbose
