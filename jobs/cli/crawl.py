"""`webqa crawl`: fetch URLs (arguments and/or files), clean and chunk them into the database."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from jobs.cli.console import Console
from jobs.cli.options import add_db, add_private_networks, duration, interactive, non_negative_int, positive_float
from jobs.crawl_lines import not_fetched_lines, skipped_lines, workers_lost_line
from jobs.errors import ConfigError, ExitCode, Interrupted, NothingToDoError, WriteFailedError
from pipelines import defaults

NAME = "crawl"
HELP = "fetch, clean, chunk and store pages"
DESCRIPTION = "Fetch URLs (arguments and/or files), clean and chunk them into the database."


def add_arguments(crawl: argparse.ArgumentParser) -> None:
    crawl.add_argument("urls", nargs="*", metavar="URL",
                       help="URLs to crawl; 'sitemap:URL' crawls the pages a sitemap lists")
    crawl.add_argument("-i", "--input", action="append", default=[], type=Path, metavar="FILE",
                       help="file of URLs: one per line (# comments allowed) or a YAML list; repeatable")
    add_db(crawl)
    crawl.add_argument("--depth", type=non_negative_int, default=0, help="follow links this many levels (default 0)")
    crawl.add_argument("--max-pages", type=non_negative_int, default=0,
                       help="stop scheduling after N pages (0: no cap)")
    crawl.add_argument("--delay", type=positive_float, default=defaults.DELAY,
                       help=f"seconds between requests to one host (default {defaults.DELAY:g})")
    crawl.add_argument("--allow", action="append", default=[], metavar="REGEX", help="only follow links matching")
    crawl.add_argument("--deny", action="append", default=[], metavar="REGEX", help="never follow links matching")
    crawl.add_argument("--contact", metavar="URL", help="contact URL put in the User-Agent")
    crawl.add_argument("--ignore-robots", action="store_true",
                       help="do not obey robots.txt, robots meta tags or X-Robots-Tag (only for sites you own)")
    crawl.add_argument("--workers", type=non_negative_int, default=0,
                       help="extraction processes (default: one per core)")
    crawl.add_argument("--timeout", type=positive_float, default=defaults.TIMEOUT, metavar="SECONDS",
                       help=f"give up on a response after this long (default {defaults.TIMEOUT:g})")
    crawl.add_argument("--max-bytes", type=non_negative_int, default=defaults.MAX_BYTES, metavar="N",
                       help="largest body accepted, counted after decompression "
                            f"(default {defaults.MAX_BYTES // (1024 * 1024)} MiB)")
    add_private_networks(crawl)
    crawl.add_argument("--max-duration", type=duration, default=None, metavar="SECONDS",
                       help="stop after this long, keeping what was fetched (exit 1); default: no bound")
    crawl.add_argument("--redis", metavar="URL",
                       help="share the crawl through Redis (redis://host:6379/0): this command seeds it and stores "
                            "the pages, `webqa worker --redis URL` processes fetch them; needs webqa[redis]")


def handle(args: argparse.Namespace, console: Console) -> int:
    from crawler.run import CrawlOptions, run_crawl

    if not args.urls and not args.input:
        raise ConfigError("nothing to crawl: give URLs or -i FILE")
    options = CrawlOptions(
        urls=args.urls, urls_files=args.input, depth=args.depth, max_pages=args.max_pages, delay=args.delay,
        allow=args.allow, deny=args.deny, contact=args.contact, obey_robots=not args.ignore_robots,
        extract_workers=args.workers, verbose=args.verbose, progress=interactive(args),
        timeout=args.timeout, max_bytes=args.max_bytes or defaults.MAX_BYTES,
        allow_private_networks=args.allow_private_networks, max_duration=args.max_duration,
        redis=args.redis,
    )
    try:
        summary = run_crawl(options, args.db)
    except Interrupted as exc:
        if exc.summary is not None:
            console.important(exc.summary.line())  # type: ignore[attr-defined]
        raise
    except (NothingToDoError, WriteFailedError) as exc:
        if exc.summary is not None:
            _skipped(console, exc.summary)
            console.important(exc.summary.line())
            _failures(console, exc.summary)
        raise
    _skipped(console, summary)
    console.result(summary.line())
    console.verdict = "; ".join(filter(None, (summary.line(), summary.failures_phrase())))
    _failures(console, summary)
    lost = workers_lost_line(summary)
    if lost:
        console.important(lost)
    # A crawl stopped by --max-duration left URLs unfetched, and one that met a bug may have: partial, like
    # failed ones.
    partial = summary.failures or summary.stopped_after or summary.internal_errors
    return ExitCode.PARTIAL if partial else ExitCode.OK


def _skipped(console: Console, summary: Any) -> None:
    for line in skipped_lines(summary):
        console.info(line)


def _failures(console: Console, summary: Any) -> None:
    """The URLs that could not be fetched and why: for cron, so also under --quiet (as `webqa run` says them)."""
    for line in not_fetched_lines(summary):
        console.important(line)
