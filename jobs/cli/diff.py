"""`webqa diff`: what changed between two runs, answers and pages."""

from __future__ import annotations

import argparse

from jobs.cli.console import Console, print_json, show
from jobs.cli.options import add_db, reading_runs, run_id
from jobs.errors import ConfigError, ExitCode

NAME = "diff"
HELP = "what changed between two runs: answers and pages"
DESCRIPTION = ("Compare two runs: answers changed (on their evidence, not their wording), new, no longer answered; "
               "pages new, changed, unchanged, gone, and which answers cite them. Without run ids: the last two "
               "successful runs of the job (--job, or the only job). With one: that run against the run before it.")


def add_arguments(diff: argparse.ArgumentParser) -> None:
    diff.add_argument("run_a", type=run_id, nargs="?", metavar="RUN_A", help="the earlier run")
    diff.add_argument("run_b", type=run_id, nargs="?", metavar="RUN_B", help="the later run")
    add_db(diff)
    diff.add_argument("--job", metavar="NAME", help="the job whose last two successful runs to compare")
    diff.add_argument("--json", action="store_true", help="print one JSON object")


def handle(args: argparse.Namespace, console: Console) -> int:
    from jobs.history import compare_runs, default_pair, diff_json, previous_for, render_diff

    if args.run_a is not None and args.job:
        raise ConfigError("give run ids or --job, not both")
    with reading_runs(args.db) as store:
        if args.run_a is None:
            run_a, run_b = default_pair(store, args.job)
        elif args.run_b is None:
            run_a, run_b = previous_for(store, args.run_a), args.run_a
        else:
            run_a, run_b = args.run_a, args.run_b
        diff = compare_runs(store, run_a, run_b)
    if diff.run_a is not None and diff.run_a["job_name"] != diff.run_b["job_name"]:
        # Two jobs ask different questions of different pages: every answer would read as changed, new or gone.
        raise ConfigError(f"run {run_a} is of job {diff.run_a['job_name']} and run {run_b} of job "
                          f"{diff.run_b['job_name']}; compare two runs of one job (`webqa runs --job NAME` lists them)")
    if args.json:
        print_json(diff_json(diff))
    else:
        show("\n".join(render_diff(diff, between=True)).rstrip())
    return ExitCode.OK
