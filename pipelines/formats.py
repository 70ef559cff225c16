"""Which documents webqa reads, by content type, and how each becomes text and blocks.

The spider asks ``document_kind`` what a response is and hands its bytes over; the extraction pool calls
``extract`` for that kind. A new kind (a rendered page, another document format) joins here: a kind name,
how it is recognised, and its extractor returning the cleaner's ``(CleanResult, blocks)``
(pipelines/page_processing.py calls it in the pool, under the page's CPU deadline).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI imports page_link; lxml and the cleaner load only where pages are cleaned
    from pipelines.blocks import Block
    from pipelines.clean import CleanResult

HTML_TYPES = ("text/html", "application/xhtml+xml")
PDF_TYPES = ("application/pdf", "application/x-pdf")
# Types servers give files they do not describe: the bytes decide.
_UNDESCRIBED = ("", "application/octet-stream", "binary/octet-stream", "application/download",
                "application/force-download")
PDF_MAGIC = b"%PDF-"


class Unreadable(Exception):
    """A document that yields no text, and why: ``outcome`` is "skipped" (the document's own state: encrypted,
    no text layer) or "failed" (webqa's limits, a broken file)."""

    def __init__(self, outcome: str, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


def document_kind(mime: str, body: bytes) -> str | None:
    """"html" or "pdf" for a response webqa reads, None for anything else (images, archives, …)."""
    if mime in HTML_TYPES:
        return "html"
    if mime in PDF_TYPES or (mime in _UNDESCRIBED and body[:1024].lstrip().startswith(PDF_MAGIC)):
        return "pdf"
    return None


def page_link(url: str, page: int | None) -> str:
    """Where a citation of a chunk points: the page of a paged document (``URL#page=N``), else the URL."""
    return f"{url}#page={page}" if page else url


def extract_document(kind: str, data: bytes, url: str, *, pdf_max_pages: int) -> tuple[CleanResult, list[Block]]:
    """The text and blocks of a document that is not a web page (see ``document_kind``); web pages, rendered or
    not, go to pipelines/clean.py ``clean_page``."""
    if kind == "pdf":
        from pipelines.pdf import extract_pdf

        return extract_pdf(data, url, max_pages=pdf_max_pages)
    raise Unreadable("failed", f"no extractor for documents of kind {kind!r}")
