"""`webqa reindex`: rebuild the selection indexes from the stored chunks."""

from __future__ import annotations

import argparse
import time

from jobs.cli.console import Console, show
from jobs.cli.options import add_db
from jobs.errors import ExitCode, require_database

NAME = "reindex"
HELP = "rebuild the selection indexes from the stored chunks"
DESCRIPTION = ("Rebuild BM25 postings, document statistics and embedding vector tables from every stored chunk. "
               "Crawls keep them current page by page; this is the full build, for checking or after editing the "
               "database by hand.")


def add_arguments(reindex: argparse.ArgumentParser) -> None:
    add_db(reindex)


def handle(args: argparse.Namespace, console: Console) -> int:
    from pipelines.store import Store

    require_database(args.db)
    started = time.perf_counter()
    with Store.open(args.db) as store:
        store.reindex()
        chunks = store.count_chunks()
    show(f"reindexed {chunks} chunks in {time.perf_counter() - started:.1f} s")
    return ExitCode.OK
