"""The values the crawl store reads and writes, and the helpers that shape them: no SQL here.

``Store`` (pipelines/store.py) owns the crawl tables and their SQL; what it binds and returns is built here.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any


def utcnow() -> datetime:
    # DuckDB TIMESTAMP is naive; we store UTC throughout.
    return datetime.now(timezone.utc).replace(tzinfo=None)


@dataclass(frozen=True)
class PageRecord:
    """A fetched, cleaned page ready to be stored."""

    url: str
    final_url: str
    status: int
    fetched_at: datetime
    content_type: str | None
    etag: str | None
    last_modified: str | None
    content_hash: str
    title: str | None
    lang: str | None
    extractor: str
    html_bytes: int
    text_bytes: int
    text: str
    html: str
    depth: int = 0
    extract_seconds: float = 0.0
    # Same-host out-links, normalised, in page order (see page_links in pipelines/schema.py).
    links: tuple[str, ...] = ()
    # The same-host canonical URL the page names, when not its own (pipelines/duplicates.py).
    canonical: str | None = None


@dataclass(frozen=True)
class Validators:
    """What a conditional request needs, and when the page was last known current (for freshness)."""

    etag: str | None
    last_modified: str | None
    # When the server last gave us the page or confirmed it with a 304 (``pages.checked_at``).
    fetched_at: datetime | None


@dataclass(frozen=True)
class PageBatch:
    """What ``Store.save_pages`` does with each page of a batch, from what is stored and the duplicates found."""

    states: list[str]  # "new" | "changed" | "unchanged", in the batch's order
    same: list[PageRecord]  # unchanged: only their fetch time, validators and role are refreshed
    written: list[tuple[PageRecord, Sequence[Any]]]  # new or changed: written in full
    # Unchanged pages whose role changed: now standing for another page's text (their chunks go), or
    # holding their text again (their chunks, at hand, are written).
    now_dup: list[str]
    now_holder: list[tuple[PageRecord, Sequence[Any]]]

    @classmethod
    def plan(cls, pages: Sequence[tuple[PageRecord, Sequence[Any]]], previous: dict[str, tuple[str | None, str | None]],
             dup_of: dict[str, tuple[str, str]]) -> PageBatch:
        """``previous``: url → (content_hash, duplicate_of) of the stored pages; ``dup_of``: the batch's duplicates."""
        states = ["unchanged" if previous.get(page.url, (None,))[0] == page.content_hash else
                  "changed" if page.url in previous else "new" for page, _ in pages]
        same = [page for (page, _), state in zip(pages, states) if state == "unchanged"]
        written = [(page, chunks) for (page, chunks), state in zip(pages, states) if state != "unchanged"]
        was_dup = {url for url, (_, of) in previous.items() if of is not None}
        now_dup = [page.url for page in same if page.url in dup_of and page.url not in was_dup]
        now_holder = [(page, chunks) for (page, chunks), state in zip(pages, states)
                      if state == "unchanged" and page.url in was_dup and page.url not in dup_of]
        return cls(states, same, written, now_dup, now_holder)


def group_links(rows: Sequence[tuple[str, str | None]]) -> dict[str, list[str]]:
    """url → its targets in row order from (url, target) rows; a None target leaves the url linking nowhere.

    Targets repeat across pages (navigation), so each is held once in memory.
    """
    links: dict[str, list[str]] = {}
    for url, target in rows:
        targets = links.setdefault(url, [])
        if target is not None:
            targets.append(sys.intern(target))
    return links


def compress_html(html: str) -> bytes:
    """A page's HTML as page_html.html_z stores it: UTF-8, zlib level 1 (fast; most of the gain of higher levels).

    ``surrogatepass``: a body decoded with errors kept must still store and read back as it was.
    """
    return zlib.compress(html.encode("utf-8", "surrogatepass"), 1)


def decompress_html(data: bytes) -> str:
    return zlib.decompress(data).decode("utf-8", "surrogatepass")


def bind_columns(rows: Sequence[Any], **columns: Any) -> dict[str, list[Any]]:
    """One list per named column (``name=function of a row``), for statements that unnest them."""
    return {name: [get(row) for row in rows] for name, get in columns.items()}


# pages columns bound by INSERT_PAGES, from a PageRecord.
PAGE_COLUMNS: dict[str, Any] = {
    "url": lambda p: p.url, "final_url": lambda p: p.final_url, "status": lambda p: p.status,
    "fetched": lambda p: p.fetched_at, "content_type": lambda p: p.content_type, "etag": lambda p: p.etag,
    "last_modified": lambda p: p.last_modified, "hash": lambda p: p.content_hash, "title": lambda p: p.title,
    "lang": lambda p: p.lang, "extractor": lambda p: p.extractor, "html_bytes": lambda p: p.html_bytes,
    "text_bytes": lambda p: p.text_bytes, "text": lambda p: p.text, "depth": lambda p: p.depth,
    "extract_seconds": lambda p: float(p.extract_seconds), "canonical": lambda p: p.canonical,
}


CRAWL_COUNT_COLUMNS = (
    "urls_requested", "fetched", "new", "changed", "unchanged", "not_modified", "skipped", "failed",
    "html_bytes", "text_bytes", "chunks",
)
