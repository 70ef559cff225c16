"""Random pages for index tests: a small vocabulary, so many chunks tie, and pages of 0-5 chunks.

Shared by tests/pipelines/test_incremental_index.py and test_vector_codes.py (page-by-page updates).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

from pipelines.chunk import Chunk, estimate_tokens
from pipelines.store import PageRecord, utcnow
from pipelines.vectors import EMBED_WINDOW_WORDS

VOCAB = ("widget", "server", "port", "tomatoes", "colours", "journal", "configure", "library", "install",
         "linux", "garden", "sunny", "themes", "descriptors", "generators", "encoder", "json", "csv")
URLS = [f"http://{host}.test/{page}" for host in ("a", "b", "c") for page in ("guide", "notes", "faq", "api")]
QUESTIONS = ("widget server port", "How do I install on Linux?", "tomatoes in a sunny garden", "json encoder",
             "colours and themes", "descriptors generators", "journal", "zzz-not-a-word")


class VocabEmbedder:
    """Counts of a small vocabulary: many chunks share a vector, so ties are everywhere."""

    def embed(self, texts: Sequence[str], *, model: str | None = None) -> list[list[float]]:
        return [[float(t.lower().count(word)) for word in VOCAB[:8]] for t in texts]


def _text(rng: random.Random) -> str:
    if rng.random() < 0.1:  # a chunk of several embedding windows
        return " ".join(rng.choice(VOCAB) for _ in range(EMBED_WINDOW_WORDS + rng.randint(10, 200)))
    if rng.random() < 0.2:  # a section repeated across pages: identical scores, ordered by url and position
        return "Identical paragraph about widget colours and themes."
    return " ".join(rng.choice(VOCAB + ("the", "and", "is", "Linux's", "2.1", "Café")) for _ in range(rng.randint(0, 25)))


def random_page(rng: random.Random, url: str, version: int) -> tuple[PageRecord, list[Chunk]]:
    chunks = []
    for ordinal in range(rng.randint(0, 5)):
        heading = ("Guide", rng.choice(VOCAB).title()) if rng.random() < 0.7 else ()
        text = _text(rng)
        chunk_id = hashlib.sha256(f"{url}\x1f{ordinal}".encode()).hexdigest()[:16]
        chunks.append(Chunk(chunk_id, ordinal, heading, text, estimate_tokens(text),
                            hashlib.sha256(text.encode()).hexdigest()))
    body = f"{url} v{version} " + "\n".join(c.text for c in chunks)
    record = PageRecord(url=url, final_url=url, status=200, fetched_at=utcnow(), content_type="text/html",
                        etag=None, last_modified=None, content_hash=hashlib.sha256(body.encode()).hexdigest(),
                        title=url, lang="en", extractor="main", html_bytes=len(body), text_bytes=len(body),
                        text=body, html=f"<html>{body}</html>")
    return record, chunks
