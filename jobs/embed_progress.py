"""A one-line progress display on a terminal while a run embeds windows (``embed: on_crawl``).

Like the crawl's (crawler/progress.py): one stderr line rewritten in place, only when the run was told it may
(``RunOptions.progress``: stderr is a terminal, neither -q nor -v). Nothing here decides that.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["EmbedProgress", "eta_text", "progress_text"]


def progress_text(done: int, total: int, elapsed_s: float, width: int) -> str:
    """``  1,200/9,791 windows  41.5 windows/s  ETA 3 min 27 s``, at most ``width - 1`` characters (a line
    filling the last column wraps on some terminals); the rate and ETA only once something is done."""
    parts = [f"{done:,}/{total:,} windows"]
    if done > 0 and elapsed_s > 0:
        rate = done / elapsed_s
        parts.append(f"{rate:.1f} windows/s")
        if done < total:
            parts.append(f"ETA {eta_text((total - done) / rate)}")
    line = "  " + "  ".join(parts)
    limit = width - 1
    if limit <= 0:
        return ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def eta_text(seconds: float) -> str:
    """``42 s``, ``3 min 27 s``, ``2 h 05 min``."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


class EmbedProgress:
    """``progress(done, total)`` for Selector.embed_missing: redraws the line at most every ``interval``
    seconds (and at the end); :meth:`close` ends it with a newline if anything was drawn."""

    def __init__(self, stream: TextIO, *, interval: float = 0.5, width: Callable[[], int] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.interval = interval
        self.clock = clock
        self.started = clock()
        self.last: float | None = None
        self._width = width

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if total <= 0 or (self.last is not None and now - self.last < self.interval and done < total):
            return
        self.last = now
        width = self._width() if self._width is not None else _terminal_width(self.stream)
        # Padding to the width overwrites a longer previous line without a terminal escape sequence.
        self.stream.write("\r" + progress_text(done, total, now - self.started, width).ljust(width - 1))
        self.stream.flush()

    def close(self) -> None:
        if self.last is not None:
            self.stream.write("\n")
            self.stream.flush()


def _terminal_width(stream: TextIO) -> int:
    from crawler.progress import terminal_width  # the crawl's rule ($COLUMNS, then the terminal, else 80)

    return terminal_width(stream)
