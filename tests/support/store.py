"""Pages written straight into a store, without a crawl: chunks with stable ids and the page record they
belong to, for selection and answering tests on a small database."""

from __future__ import annotations

import hashlib

from pipelines.chunk import Chunk, estimate_tokens
from pipelines.store import PageRecord, utcnow


def make_chunks(url: str, sections: list[tuple[tuple[str, ...], str]]) -> list[Chunk]:
    chunks = []
    for ordinal, (path, text) in enumerate(sections):
        chunk_id = hashlib.sha256(f"{url}\x1f{ordinal}".encode()).hexdigest()[:16]
        chunks.append(Chunk(chunk_id, ordinal, path, text, estimate_tokens(text),
                            hashlib.sha256(text.encode()).hexdigest()))
    return chunks


def page_record(url: str, chunks: list[Chunk]) -> PageRecord:
    text = "\n\n".join(c.text for c in chunks)
    return PageRecord(url=url, final_url=url, status=200, fetched_at=utcnow(), content_type="text/html", etag=None,
                      last_modified=None, content_hash=hashlib.sha256(text.encode()).hexdigest(), title=url,
                      lang="en", extractor="main", html_bytes=len(text), text_bytes=len(text), text=text,
                      html=f"<html><body>{text}</body></html>")
