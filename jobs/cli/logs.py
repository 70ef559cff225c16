"""The log handlers of one command: stderr at the level -v/-q ask for, and --log-file complete."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TextIO

from jobs.cli.console import Shown


def configure_logging(args: argparse.Namespace, log: TextIO | None = None) -> None:
    # The level sits on the handler, not only the root logger: Scrapy lowers the root level to DEBUG
    # when a crawl starts, and its chatter must not reach a cron mail.
    level = logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handlers: list[logging.Handler] = [handler]
    if log is not None:
        # The log file gets what a run without --quiet would show, --quiet or not.
        file_level = logging.DEBUG if args.verbose else logging.WARNING
        to_file = logging.StreamHandler(log)
        to_file.setLevel(file_level)
        to_file.setFormatter(logging.Formatter(f"%(asctime)s webqa[%(process)d] %(levelname)s %(name)s: %(message)s",
                                               datefmt="%Y-%m-%d %H:%M:%S"))
        handlers.append(to_file)
        level = min(level, file_level)
    for h in handlers:
        h.addFilter(Shown())
        if not args.verbose:
            h.addFilter(_hide_disabled_components)
    logging.basicConfig(level=level, handlers=handlers, force=True)
    # httpx logs each request's full URL at INFO: a webhook's path and query tokens (SECURITY.md), so its
    # request lines stay out of every log, -v included; its warnings still show.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _hide_disabled_components(record: logging.LogRecord) -> bool:
    # Every failed URL is already recorded in fetch_log and counted in the summary line; Scrapy's
    # and Twisted's own reports of the same failures (with tracebacks) only show with -v.
    return not record.name.startswith(("scrapy", "twisted", "asyncio", "py.warnings"))
