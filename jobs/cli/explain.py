"""`webqa explain`: why an answer came out as it did."""

from __future__ import annotations

import argparse

from jobs.cli.console import Console, show
from jobs.cli.options import add_db, reading_runs
from jobs.errors import ExitCode

NAME = "explain"
HELP = "show why an answer came out as it did"
DESCRIPTION = ("The debugging checklist for one answer: every candidate chunk with its scores and matched terms, "
               "what was sent and what dropped and why, the exact prompt, the raw reply and the citation checks.")


def add_arguments(explain: argparse.ArgumentParser) -> None:
    explain.add_argument("answer_id", type=int, metavar="ANSWER_ID")
    add_db(explain)
    explain.add_argument("--no-prompt", action="store_true", help="leave out the prompt text")


def handle(args: argparse.Namespace, console: Console) -> int:
    from jobs.explain import explain_answer

    with reading_runs(args.db) as store:
        show(explain_answer(store, args.answer_id, show_prompt=not args.no_prompt))
    return ExitCode.OK
