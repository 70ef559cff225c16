"""A real DuckDB file holding every page of tests/support/index_pages.URLS (tests of the selection options)."""

from __future__ import annotations

import random
from pathlib import Path

from jobs.runstore import RunStore
from jobs.select import Selector
from tests.support.index_pages import URLS, VocabEmbedder, random_page


def pages_db(tmp_path: Path, *, embedded: bool = False) -> Path:
    """Every page of URLS, one crawl run each, in ``tmp_path/pages.duckdb``; ``embedded``: with their vectors
    (VocabEmbedder, model 'm') and no binary codes yet."""
    db, rng = tmp_path / "pages.duckdb", random.Random(11)
    with RunStore.open(db) as store:
        for step, url in enumerate(URLS):
            record, chunks = random_page(rng, url, step)
            store.save_page(record, chunks, crawl_run_id=step)
        if embedded:
            Selector(store.conn, embedder=VocabEmbedder(), embedding_model="m").embed_missing()
    return db
