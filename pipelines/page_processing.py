"""Process-pool worker: clean one page and chunk it, within a CPU deadline, never raising.

``process_page`` is a top-level function taking and returning picklable values so it
can be submitted to a ``ProcessPoolExecutor`` as is (``pipelines/extraction.py`` does).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pipelines import defaults
from pipelines.chunk import Chunk, split_blocks
from pipelines.clean import CleanResult, clean_page
from pipelines.cpu_deadline import CpuDeadlineExceeded, cpu_deadline
from pipelines.formats import Unreadable, extract_document


@dataclass(frozen=True)
class PageResult:
    clean: CleanResult | None
    chunks: list[Chunk] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0  # wall-clock time spent in process_page
    skipped: str | None = None  # why the document gives no text on purpose (a PDF without a text layer)


def _format_seconds(seconds: float) -> str:
    return f"{seconds:g}"


def process_page(
    html: str | bytes,
    url: str,
    *,
    max_seconds: float = 10.0,
    max_tokens: int = defaults.CHUNK_TOKENS,
    overlap_tokens: int = defaults.CHUNK_OVERLAP,
    kind: str = "html",
    pdf_max_pages: int = defaults.PDF_MAX_PAGES,
) -> PageResult:
    """Clean ``html`` (a web page; the bytes of a document of another ``kind``: pipelines/formats.py) and
    split it into chunks.

    ``max_seconds`` is CPU time of this process (``pipelines/cpu_deadline.py``), enforced only when called
    from a main thread; a worker stuck without using CPU is left to the pool's wall-clock backstop
    (``pipelines/extraction.py``).
    """
    start = time.perf_counter()
    clean: CleanResult | None = None
    try:
        with cpu_deadline(max_seconds):
            if kind == "html" or not isinstance(html, bytes):
                clean, blocks = clean_page(html, url)
            else:
                clean, blocks = extract_document(kind, html, url, pdf_max_pages=pdf_max_pages)
            chunks = split_blocks(blocks, url, max_tokens=max_tokens, overlap_tokens=overlap_tokens)
    except Unreadable as unreadable:
        seconds = time.perf_counter() - start
        if unreadable.outcome == "skipped":
            return PageResult(clean=None, skipped=unreadable.reason, seconds=seconds)
        return PageResult(clean=None, error=unreadable.reason, seconds=seconds)
    except CpuDeadlineExceeded:
        error = f"extraction used more than {_format_seconds(max_seconds)} s of CPU"
        return PageResult(clean=clean, chunks=[], error=error, seconds=time.perf_counter() - start)
    except Exception as err:
        detail = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
        error = f"extraction failed: {type(err).__name__}" + (f": {detail}" if detail else "")
        return PageResult(clean=clean, chunks=[], error=error, seconds=time.perf_counter() - start)
    return PageResult(clean=clean, chunks=chunks, error=None, seconds=time.perf_counter() - start)
