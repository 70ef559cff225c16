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
    # Where a noindex directive for webqa was found (meta tag, X-Robots-Tag), or None (pipelines/robots_meta.py).
    noindex: str | None = None
    # What the response is (pipelines/formats.py): "html" (decoded into ``html``) or "pdf" (its bytes in ``body``).
    kind: str = "html"
    body: bytes | None = None
    # The same-host canonical URL it names (<link rel="canonical">, Link header), when not its own.
    canonical: str | None = None


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


def dropped_reason(outcome: str, status: int | None, reason: str) -> str | None:
    """Why a URL's stored page is no longer answered from after this outcome, or None when it still is.

    The site removed the page (404, 410) or refuses it now (robots.txt disallows it or asks for a
    Crawl-delay above the limit; it is no longer HTML): a page change, not a failure, so it is not
    answered from a stale copy and does not make a run partial. A failure (timeout, refused, 5xx)
    keeps the stored copy, answered from and marked stale.
    """
    if status in (404, 410) and outcome == "failed":
        return f"HTTP {status}"
    if outcome == "skipped" and reason.startswith(DROPPING_SKIPS):
        return reason
    return None


def is_failure(outcome: str, reason: str) -> bool:
    """Whether a URL's outcome is a failure to report (and, with a stored copy, answer from as stale).

    Failed, of course; and two skips that are not a choice of the site's: the SSRF guard's refusal
    ("blocked", never what a job listing the URL wants) and a robots.txt the host could not serve (5xx,
    429: the host is in trouble). Other skips (robots.txt rules, not HTML, an invalid or duplicate line,
    a crawl stopped by a signal) are on purpose.
    """
    return outcome == "failed" or reason.startswith(FAILING_SKIPS)


# The spider's and the robots.txt middleware's words for skips that drop a stored page (see dropped_reason),
# and for skips that are failures all the same (see is_failure).
DROPPING_SKIPS = ("disallowed by robots.txt", "robots.txt Crawl-delay", "not HTML", "binary content", "noindex",
                  "PDF is encrypted", "PDF has no text layer")
FAILING_SKIPS = ("blocked", "robots.txt unreachable")
