"""Pages for tests of selection inside a scope (tests/pipelines/test_search_scope.py, tests/jobs/test_scope_run.py)."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from jobs.runstore import RunStore
from pipelines import search_index
from tests.support.index_pages import random_page

VOCAB = [f"w{i}" for i in range(40)]
URLS = [f"http://p.test/{i}" for i in range(60)]


def zipf_pages(store: RunStore, rng: random.Random, urls: list[str], version: int = 0) -> None:
    """Pages of Zipf-like words (w0 in most chunks, w39 in a few); every 7th page one text copied, tying across pages."""
    for n, url in enumerate(urls):
        record, chunks = random_page(rng, url, version)
        chunks = [dataclasses.replace(c, text=" ".join(VOCAB[min(int(rng.paretovariate(0.6)) - 1, 39)]
                                                       for _ in range(rng.randint(1, 30)))
                                      if n % 7 else "w0 w1 w30 w30") for c in chunks]
        store.save_page(record, chunks, crawl_run_id=version)


def full_bm25(store: RunStore, question: str, scope: list[str], pool: int) -> list[Any]:
    """The scoped full query's rows (urls bound, their docs found per question)."""
    return store.conn.execute(search_index.BM25_SQL, {"q": question, "urls": scope, "pool": pool, "k1": 1.2, "b": 0.5,
                                                      "heading_weight": 3.0, "lang": "porter"}).fetchall()
