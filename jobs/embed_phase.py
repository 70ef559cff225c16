"""``embed: on_crawl``: right after a run's crawl, the windows of the pages its questions search are embedded,
spread over every host with the embedding model (jobs/embed_pool.py), so that the first question does not wait.

Done after the crawl, not during it: the crawl's one DuckDB writer, which stores and indexes the pages with
slow commits (BENCHMARKS.md, figures behind code comments), would have to insert the vectors too, or a second
connection would contend with it for the same tables; and with Ollama on the crawling machine, embedding would
take the cores the extraction workers use. After the crawl nothing else competes, and the pages to embed are
known: the job's scope, as the questions will search it.

A failure to embed (no host with the model, every host gone, a bad reply) never fails the run here: one
notice, in the run's notes, and the questions then select with bm25 as when their own embedding fails
(jobs/select.py keeps the error, so they do not wait on the hosts again).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from jobs.embed_progress import EmbedProgress
from jobs.errors import LLMError
from jobs.select import EMBEDDING_METHODS, Selector

if TYPE_CHECKING:
    from jobs.runner import Run


def embeds_on_crawl(run: Run) -> bool:
    """Whether this run embeds ahead of its questions: the job says ``embed: on_crawl`` and the run crawled."""
    return run.job.embed == "on_crawl" and run.crawled


def embed_after_crawl(run: Run, selector: Selector, scope: list[str] | None, unavailable: str | None) -> int:
    """Embed the windows of ``scope`` (None: every stored page) that have no vector yet; how many were.

    ``unavailable``: why no host can embed (from connecting), said once unless the run said it already.
    """
    method = run.job.selection.method
    if selector.embedder is None:
        if method not in EMBEDDING_METHODS:  # a run selecting with embeddings has said why in its own notice
            _notice(run, f"embed: on_crawl: the windows were not embedded ({unavailable or 'no embedding host'})")
        return 0
    meter = EmbedProgress(sys.stderr) if run.options.progress else None
    seen = [0, 0]  # done, total: for the notice when embedding fails part-way

    def step(done: int, total: int) -> None:
        seen[:] = [done, total]
        run.signals.checkpoint("while embedding the windows of the crawled pages")
        if meter is not None:
            meter(done, total)

    started = time.monotonic()
    try:
        done = selector.embed_ahead(scope, progress=step)
    except LLMError as exc:
        then = (f"the questions select with bm25 instead of {method}" if method in EMBEDDING_METHODS
                else "the rest are embedded when a selection with embeddings needs them")
        _notice(run, f"embed: on_crawl: embedding stopped after {seen[0]} of {seen[1]} windows ({exc}); {then}")
        return seen[0]
    finally:
        if meter is not None:
            meter.close()
    if done:
        seconds = max(time.monotonic() - started, 1e-6)
        hosts = len(getattr(selector.embedder, "hosts", [None]))
        run.notify.info(f"Embedded {done} windows with {selector.embedding_model} on {hosts} host(s) in "
                        f"{seconds:.1f} s ({done / seconds:.1f} windows/s)")
    return done


def _notice(run: Run, notice: str) -> None:
    run.notify.important(f"Notice: {notice}")
    run.notices.append(notice)  # in the report and the run's notes, as every notice of a run
