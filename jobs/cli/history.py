"""`webqa history QUESTION_ID`: one question's answers run by run (jobs/question_history.py)."""

from __future__ import annotations

import argparse

from jobs.cli.console import Console, print_json, show
from jobs.cli.options import add_db, reading_runs
from jobs.errors import ExitCode

NAME = "history"
HELP = "one question's answers run by run: value, verdict, change, evidence"
DESCRIPTION = ("A question's final answer in every finished run of its job, oldest first: verdict, value (or "
               "answer), change since the run before, and the page its evidence came from with the fetch time of "
               "the copy answered from.")


def add_arguments(history: argparse.ArgumentParser) -> None:
    history.add_argument("question_id", metavar="QUESTION_ID", help="the question's id in the job file")
    add_db(history)
    history.add_argument("--job", metavar="NAME", help="the job (needed when the database holds several)")
    history.add_argument("--json", action="store_true", help="print a JSON list")


def handle(args: argparse.Namespace, console: Console) -> int:
    from jobs.question_history import question_history, render_history

    with reading_runs(args.db) as store:
        history = question_history(store, args.question_id, args.job)
    if args.json:
        print_json(history)
    else:
        show(render_history(args.question_id, history))
    return ExitCode.OK
