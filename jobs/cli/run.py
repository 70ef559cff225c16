"""`webqa run`: crawl a job's URLs (incrementally) and answer every question; the exit code tells cron."""

from __future__ import annotations

import argparse
from pathlib import Path

from jobs.cli.console import Console
from jobs.cli.options import add_db, add_private_networks, interactive, positive_float
from jobs.errors import ConfigError, Interrupted, WebqaError

NAME = "run"
HELP = "crawl and answer every question of a job file"
DESCRIPTION = ("Crawl a job's URLs (incrementally) and answer every question; the exit code tells cron whether "
               "every question was answered.")


def add_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("job", type=Path, metavar="JOB.yaml", help="the job file")
    add_db(run)
    run.add_argument("--no-crawl", action="store_true", help="answer from the pages already stored")
    run.add_argument("--refresh", action="store_true", help="fetch pages even when recrawl_after says they are fresh")
    run.add_argument("--out", type=Path, metavar="DIR", help="output folder (default: the job's output.dir)")
    run.add_argument("--dry-run", action="store_true",
                     help="call no LLM: write each question's selection and exact prompt to the JSONL output")
    run.add_argument("--answerer", choices=("llm", "extractive"), help="override the job's answerer")
    add_private_networks(run)
    run.add_argument("--wait", type=positive_float, default=0.0, metavar="SECONDS",
                     help="wait this long for another run on the same database to finish (default: exit at once)")
    run.add_argument("--resume", action="store_true",
                     help="continue the job's last run if it was killed, interrupted or stopped by a full disk (same "
                          "run id): stopped in its crawl, fetch the pages it had not fetched, then answer; stopped "
                          "while answering, ask only the questions without an answer, without crawling; otherwise "
                          "start a new run")
    run.add_argument("--fail-on-change", action="store_true",
                     help="exit 5 when an answer changed (other verdict or quotes), is new or is no longer answered "
                          "since the job's previous successful run (failures keep their own exit codes)")
    run.add_argument("--fail-on-reworded", action="store_true",
                     help="as --fail-on-change, and a reworded answer (same verdict and quotes, other words) "
                          "counts as a change too")


def handle(args: argparse.Namespace, console: Console) -> int:
    from jobs.config import load_job

    if args.resume and args.dry_run:
        raise ConfigError("--resume continues a run that answers questions; it cannot be combined with --dry-run")
    job = load_job(args.job)
    # Imported after the job file is read: a bad job file is reported without paying for Scrapy's import.
    from jobs.runner import Notify, RunOptions, run_job

    options = RunOptions(db=Path(args.db), crawl=not args.no_crawl, out_dir=args.out, dry_run=args.dry_run,
                         refresh=args.refresh, wait_seconds=args.wait, answerer=args.answerer,
                         verbose=args.verbose, progress=interactive(args), resume=args.resume,
                         fail_on_change=args.fail_on_change, fail_on_reworded=args.fail_on_reworded,
                         allow_private_networks=args.allow_private_networks)
    try:
        result = run_job(job, options, Notify(console.notifier(), console.important))
    except WebqaError as exc:
        run_id = getattr(exc, "run_id", None)
        if run_id is not None:  # stdout's summary line names the run, whatever stopped it
            status = "interrupted" if isinstance(exc, Interrupted) else "failed"
            console.result(f"Run {run_id} {status} (exit {int(exc.exit_code)}); see `webqa runs`")
        raise
    console.result(result.line())
    for path in result.outputs:
        console.result(f"  {path}")
    console.verdict = result.line()
    return int(result.exit_code)
