"""`webqa runs`: list the runs recorded in the database, newest first."""

from __future__ import annotations

import argparse

from jobs.cli.console import Console, print_json, show
from jobs.cli.options import add_db, non_negative_int, reading_runs
from jobs.errors import ExitCode

NAME = "runs"
HELP = "list the runs recorded in the database, newest first"
DESCRIPTION = ("List runs (newest first): status (a run whose process died shows as 'killed'), times, counts and "
               "how many answers changed.")


def add_arguments(runs: argparse.ArgumentParser) -> None:
    add_db(runs)
    runs.add_argument("--job", metavar="NAME", help="only the runs of this job")
    runs.add_argument("--limit", type=non_negative_int, default=20, metavar="N",
                      help="show at most N runs (default 20; 0: all)")
    runs.add_argument("--json", action="store_true", help="print a JSON list")


def handle(args: argparse.Namespace, console: Console) -> int:
    from jobs.history import list_runs, render_runs, runs_json

    with reading_runs(args.db) as store:
        runs = list_runs(store, args.job, args.limit or None)
    if args.json:
        print_json(runs_json(runs))
    else:
        show(render_runs(runs))
    return ExitCode.OK
