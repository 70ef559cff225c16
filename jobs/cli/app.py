"""`webqa`'s entry point: parse, run the command's handler, turn its errors into `Error: …` and exit codes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from jobs.cli.console import Console
from jobs.cli.logs import configure_logging
from jobs.cli.options import check_db
from jobs.cli.parser import Parser, build_parser
from jobs.cli.signals import Outcome, exit_now, signals_until_exit, signals_until_handled
from jobs.errors import ExitCode, Interrupted, WebqaError

# A command gets its parsed arguments and the console that prints (and logs) its messages.
Handler = Callable[[argparse.Namespace, Console], int]


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:  # the process's own command line: main owns the process's signals
        signals_until_handled()
    try:
        return _main(argv)
    except KeyboardInterrupt:  # a signal as the outcome was being decided: the run is stopped either way
        return int(ExitCode.INTERRUPTED)
    finally:
        if argv is None:
            signals_until_exit()


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    Parser.quiet = any(w in ("-q", "--quiet") for w in words[: words.index("--") if "--" in words else None])
    args = parser.parse_args(argv)
    log: TextIO | None = None
    if args.log_file is not None:
        try:
            log = args.log_file.open("a", encoding="utf-8")
        except OSError as exc:
            print(f"Error: --log-file {args.log_file}: cannot open for appending: {exc.strerror or exc}",
                  file=sys.stderr)
            return int(ExitCode.USAGE)
    console = Console(args.quiet, log)
    configure_logging(args, log)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        console.close()
        return ExitCode.USAGE
    try:
        console.stamp(f"$ webqa {' '.join(words)}")
        check_db(args)
        code = int(handler(args, console))
        Outcome.decided = True
        console.quiet_line(code)
        console.stamp(f"exit {code}")
        return code
    except Interrupted as exc:
        code = _stopped(console, f"Interrupted: {exc}", int(exc.exit_code))
        if exc.immediate:
            exit_now(console, code)
        return code
    except WebqaError as exc:
        return _stopped(console, f"Error: {exc}", int(exc.exit_code))
    except KeyboardInterrupt:
        return _stopped(console, "Interrupted.", int(ExitCode.INTERRUPTED))
    except BrokenPipeError:
        # `webqa … | head`: the reader left; say nothing more.
        sys.stderr.close()
        return int(ExitCode.OK)
    finally:
        console.close()


def _stopped(console: Console, line: str, code: int) -> int:
    """The command ended on an error or a signal: its outcome is decided, and its one line says which."""
    Outcome.decided = True
    console.error(line)
    console.stamp(f"exit {code}")
    return code
