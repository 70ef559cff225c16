"""Canonical pages and identical text, stored once: which pages of a batch stand for others.

Pure decisions for the store's write path (``Store.save_pages`` runs the SQL): a page is a *duplicate* of
another stored page, and has no chunks of its own, when

- it names that page as its canonical URL (``<link rel="canonical">`` or an HTTP ``Link: <…>; rel="canonical"``
  header, same host only) and that page's text covers most of its own (``COVERED``): a canonical that points
  somewhere unrelated (every page of a misconfigured site naming the home page) is not taken at its word;
- or its text is identical to that page's: the same chunks, heading paths and texts (``text_hash``).

The page that holds the chunks is the named canonical, or of identical texts the page with the shortest URL
(then the first in order): the same pages give the same holder whatever order they arrive in. Questions
scoped to a duplicate search its page instead (``Store.stored_urls``), so selection never meets two copies.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pipelines.chunk import Chunk

# A canonical page must hold this share of the duplicate's five-word shingles.
COVERED = 0.8
SHINGLE = 5
_WORDS = re.compile(r"\w+", re.UNICODE)

CANONICAL = "rel=canonical"
SAME_TEXT = "same text"


def text_hash(chunks: Sequence[Chunk]) -> str | None:
    """What "the same text" compares: the page's chunks, heading paths and texts in order (None: no chunks).

    The same string as schema 8's migration builds from stored chunks (pipelines/schema.py).
    """
    if not chunks:
        return None
    joined = "\x1e".join(f"{chunk.heading}\x1f{chunk.text}" for chunk in sorted(chunks, key=lambda c: c.ordinal))
    return hashlib.sha256(joined.encode("utf-8", "surrogatepass")).hexdigest()


def _shingles(text: str) -> set[tuple[str, ...]]:
    words = _WORDS.findall(text.lower())
    if len(words) < SHINGLE:
        return {tuple(words)} if words else set()
    return {tuple(words[i:i + SHINGLE]) for i in range(len(words) - SHINGLE + 1)}


def covers(canonical_text: str, text: str) -> bool:
    """Whether ``canonical_text`` holds at least ``COVERED`` of ``text``'s five-word shingles."""
    own = _shingles(text)
    if not own:
        return False
    return len(own & _shingles(canonical_text)) >= COVERED * len(own)


@dataclass(frozen=True)
class Incoming:
    """A page of the batch being written, as the decision needs it."""

    url: str
    text: str
    text_hash: str | None  # None: nothing worth de-duplicating (no chunks)
    canonical: str | None  # the same-host canonical it names, other than itself


def holder_key(url: str) -> tuple[int, str]:
    """Of identical texts, the page with the smallest key holds the chunks: the shortest URL, then the first."""
    return len(url), url


def decide(batch: Sequence[Incoming], stored_by_hash: Mapping[str, str],
           stored_texts: Mapping[str, str]) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """url → (the page it duplicates, why) for the pages of ``batch`` that are duplicates; and the stored pages
    that no longer hold their text, because a page of the batch with the same text comes first (``holder_key``),
    each with that page.

    ``stored_by_hash``: text hash → a stored page holding its own chunks, outside the batch. ``stored_texts``:
    the text of the stored pages (outside the batch, holding their own chunks) that pages of the batch name as
    canonical. Within the batch, a canonical that is itself a duplicate is not followed (no chains).
    """
    by_url = {page.url: page for page in batch}
    decided: dict[str, tuple[str, str]] = {}
    for page in batch:
        target = page.canonical
        if not target or target == page.url or not page.text_hash:
            continue
        in_batch = by_url.get(target)
        if in_batch is not None:
            text = in_batch.text if in_batch.canonical in (None, target) else None
        else:
            text = stored_texts.get(target)
        if text is not None and covers(text, page.text):
            decided[page.url] = (target, CANONICAL)
    same: dict[str, list[str]] = {}
    for page in batch:
        if page.url not in decided and page.text_hash:
            same.setdefault(page.text_hash, []).append(page.url)
    demoted: dict[str, str] = {}
    for text_hash, urls in same.items():
        stored = stored_by_hash.get(text_hash)
        holder = min([*urls, *([stored] if stored else [])], key=holder_key)
        decided.update({url: (holder, SAME_TEXT) for url in urls if url != holder})
        if stored and stored != holder:
            demoted[stored] = holder
    # A canonical target in the batch that turned out a duplicate itself leads nowhere: undo (no chains).
    for url, (target, why) in list(decided.items()):
        if why == CANONICAL and target in decided:
            del decided[url]
    return decided, demoted


def still_holds(why: str, duplicate_text: str, duplicate_hash: str | None, holder_text: str, holder_hash: str | None) -> bool:
    """Whether a stored duplicate still duplicates its holder after the holder was written anew."""
    if why == CANONICAL:
        return covers(holder_text, duplicate_text)
    return duplicate_hash is not None and duplicate_hash == holder_hash
