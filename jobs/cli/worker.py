"""`webqa worker`: fetch pages for a crawl shared through Redis (`webqa crawl --redis`)."""

from __future__ import annotations

import argparse

from jobs.cli.console import Console
from jobs.cli.options import non_negative_int, positive_float
from jobs.errors import ConfigError, ExitCode

NAME = "worker"
HELP = "fetch pages for a crawl shared through Redis (webqa crawl --redis)"
DESCRIPTION = ("Join the crawl a `webqa crawl --redis URL` coordinator published, fetch and clean its pages until "
               "the coordinator ends it, then exit.")


def add_arguments(worker: argparse.ArgumentParser) -> None:
    worker.add_argument("--redis", required=True, metavar="URL",
                        help="the coordinator's Redis, e.g. redis://host:6379/0")
    worker.add_argument("--wait", type=positive_float, default=600.0, metavar="SECONDS",
                        help="how long to wait for a crawl to be published (default 600)")
    worker.add_argument("--workers", type=non_negative_int, default=0,
                        help="extraction processes (default: one per core)")


def handle(args: argparse.Namespace, console: Console) -> int:
    try:
        from crawler.distributed.worker import run_worker
    except ImportError as exc:  # redis and scrapy-redis are the optional extra
        raise ConfigError(f"`webqa worker` needs the redis extra: pip install 'webqa[redis]' ({exc})") from None
    summary = run_worker(args.redis, wait=args.wait, extract_workers=args.workers, verbose=args.verbose)
    console.result(summary.line())
    return ExitCode.OK
