"""Process-pool worker: clean one page and chunk it, within a time bound, never raising.

``process_page`` is a top-level function taking and returning picklable values so it
can be submitted to a ``ProcessPoolExecutor`` as is.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field, replace
from types import FrameType

from pipelines import defaults, languages
from pipelines.chunk import Chunk, split_blocks
from pipelines.clean import CleanResult, clean_page
from pipelines.formats import Unreadable, extract_document


@dataclass(frozen=True)
class PageResult:
    clean: CleanResult | None
    chunks: list[Chunk] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0  # wall-clock time spent in process_page
    skipped: str | None = None  # why the document gives no text on purpose (a PDF without a text layer)


class _ExtractionTimeout(BaseException):
    """BaseException on purpose: trafilatura and clean_page catch ``Exception`` to survive
    bad pages, and must not swallow the deadline."""


def _can_use_cpu_timer(max_seconds: float) -> bool:
    # Signal handlers can only be installed from the main thread of the main interpreter;
    # ProcessPoolExecutor workers run their tasks there, threads do not.
    return (
        max_seconds > 0
        and hasattr(signal, "setitimer")
        and hasattr(signal, "SIGPROF")
        and threading.current_thread() is threading.main_thread()
    )


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

    ``max_seconds`` is CPU time (user + system) of this process, not wall time: a page
    slowed by other processes on a loaded machine is not cut off, one that burns CPU
    (regex backtracking, a huge DOM) is. It is enforced with ``ITIMER_PROF``/SIGPROF when
    called from a main thread (the previous handler and any outer timer are restored
    afterwards); elsewhere the work just runs unbounded. SIGPROF is only acted upon between
    Python bytecodes, so a single long C call inside lxml can overrun the deadline until it
    returns; a worker stuck without using CPU is left to the pool's wall-clock backstop
    (``pipelines/extraction.py``).
    """
    start = time.perf_counter()
    cpu_start = time.process_time()  # what ITIMER_PROF counts: this process's user + system time
    clean: CleanResult | None = None
    use_timer = _can_use_cpu_timer(max_seconds)
    armed = [False]

    def on_deadline(signum: int, frame: FrameType | None) -> None:
        # Ignore a signal delivered after the work finished but before we disarmed.
        if armed[0]:
            armed[0] = False
            raise _ExtractionTimeout

    previous_handler: object = signal.SIG_DFL
    previous_timer: tuple[float, float] = (0.0, 0.0)
    installed = [False]

    def restore() -> None:
        """Idempotent: called again from the handlers in case the signal cut it short."""
        armed[0] = False
        if not installed[0]:
            return
        signal.setitimer(signal.ITIMER_PROF, 0)
        # None means the old handler was installed from C; the default is the best we can do.
        signal.signal(signal.SIGPROF, previous_handler if previous_handler is not None else signal.SIG_DFL)  # type: ignore[arg-type]
        remaining, interval = previous_timer
        if remaining > 0:
            # Someone else's timer (a sampling profiler) was running: give it back what is left of it.
            left = remaining - (time.process_time() - cpu_start)
            signal.setitimer(signal.ITIMER_PROF, max(left, 1e-3), interval)
        installed[0] = False

    try:
        try:
            if use_timer:
                previous_handler = signal.signal(signal.SIGPROF, on_deadline)
                installed[0] = True
                armed[0] = True
                previous_timer = signal.setitimer(signal.ITIMER_PROF, max_seconds)
            if kind == "html" or not isinstance(html, bytes):
                clean, blocks = clean_page(html, url)
            else:
                clean, blocks = extract_document(kind, html, url, pdf_max_pages=pdf_max_pages)
            if clean.lang is None and clean.text:
                # Undeclared: told from the text, since it chooses the page's stemmer (pipelines/languages.py).
                clean = replace(clean, lang=languages.detect(clean.text))
            chunks = split_blocks(blocks, url, max_tokens=max_tokens, overlap_tokens=overlap_tokens)
        finally:
            restore()
    except Unreadable as unreadable:
        restore()
        seconds = time.perf_counter() - start
        if unreadable.outcome == "skipped":
            return PageResult(clean=None, skipped=unreadable.reason, seconds=seconds)
        return PageResult(clean=None, error=unreadable.reason, seconds=seconds)
    except _ExtractionTimeout:
        restore()
        return PageResult(
            clean=clean,
            chunks=[],
            error=f"extraction used more than {_format_seconds(max_seconds)} s of CPU",
            seconds=time.perf_counter() - start,
        )
    except Exception as err:
        restore()
        detail = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
        error = f"extraction failed: {type(err).__name__}" + (f": {detail}" if detail else "")
        return PageResult(clean=clean, chunks=[], error=error, seconds=time.perf_counter() - start)
    return PageResult(clean=clean, chunks=chunks, error=None, seconds=time.perf_counter() - start)
