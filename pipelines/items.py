"""What the spider hands the pipelines: a fetched page, or the reason there is none.

In pipelines/ (the bottom layer) because both the spider that makes them and the pipelines that
consume them import them, and pipelines/ never imports crawler/.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from pipelines.chunk import Chunk


@dataclass
class FetchedPage:
    """An HTML response, decoded by Scrapy (header charset, BOM or meta tag), not yet cleaned."""

    url: str  # as listed or discovered: the key in `pages`
    final_url: str  # after redirects
    status: int
    content_type: str | None
    etag: str | None
    last_modified: str | None
    html: str
    html_bytes: int  # bytes on the wire after decompression
    content_hash: str
    depth: int
    fetched_at: datetime
    # Same-host out-links, normalised, before the job's allow/deny: stored with the page, so that a
    # later 304 or fresh skip can still lead the crawl on to them.
    links: list[str] = field(default_factory=list)


@dataclass
class FetchOutcome:
    """A URL that produced no page to store: skipped on purpose, failed, or confirmed unchanged (304)."""

    url: str
    outcome: str  # skipped | failed | not_modified
    reason: str
    status: int | None = None
    etag: str | None = None
    last_modified: str | None = None


@dataclass
class ExtractedPage:
    """A page after the cleaner and chunker ran in the process pool."""

    page: FetchedPage
    title: str | None
    lang: str | None
    extractor: str
    text: str
    text_bytes: int
    chunks: list[Chunk] = field(default_factory=list)
    seconds: float = 0.0


def internal_failure(url: str, exc: BaseException, status: int | None = None) -> FetchOutcome:
    """The record of a URL whose handling raised what nothing expected: a bug in webqa, recorded as the
    URL's failure (so the crawl's summary and exit code count it) in words that say to report it."""
    lines = str(exc).strip().splitlines()
    detail = f": {lines[0][:300]}" if lines else ""
    return FetchOutcome(url, "failed", f"internal error: {type(exc).__name__}{detail}; please report it", status)
