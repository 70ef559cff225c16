"""The `webqa` parser: the global options, then one subcommand per command module, in the order of --help."""

from __future__ import annotations

import argparse
import importlib
from typing import NoReturn

from jobs.cli.options import add_global_options
from jobs.errors import ExitCode

# The command modules of this package, in the order `webqa --help` lists them.
COMMANDS = ("crawl", "worker", "run", "runs", "reindex", "diff", "ask", "explain", "schema", "eval")


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage error under --quiet is the one line --quiet promises (exit 2)."""

    quiet = False

    def error(self, message: str) -> NoReturn:
        if Parser.quiet:
            self.exit(int(ExitCode.USAGE), f"Error: {self.prog}: {message}\n")
        super().error(message)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("webqa")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed; run scripts/setup.sh)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="webqa",
        description="Crawl URL lists politely, store them in DuckDB, and answer questions about them with a local LLM.",
    )
    parser.add_argument("--version", action="version", version=f"webqa {_version()}",
                        help="print the installed version and exit")
    add_global_options(parser, after_command=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"jobs.cli.{name}")
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.DESCRIPTION)
        module.add_arguments(command)
        command.set_defaults(handler=module.handle)
        # Last, in their own section: each command's help starts with its own options.
        add_global_options(command.add_argument_group("global options (also accepted before COMMAND)"),
                           after_command=True)
    return parser
