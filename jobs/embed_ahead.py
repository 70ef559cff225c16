"""One slice of windows embedded while the previous one is inserted (jobs/select.py Selector.embed_missing).

Kept apart from jobs/embed_pool.py so that jobs/select.py does not import the Ollama client for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["embedded_ahead"]

Part = TypeVar("Part")
Result = TypeVar("Result")


def embedded_ahead(embed: Callable[[Part], Result], parts: Sequence[Part]) -> Iterator[tuple[Part, Result]]:
    """``(part, embed(part))`` for each part in order, the next part's ``embed`` running on a thread of its own
    while the caller handles this one (inserts its vectors), so the hosts are not left idle during the insert.

    One part ahead at most: memory holds two parts' vectors. An error of ``embed`` is raised when its part's
    turn comes; a caller that stops early waits for the part in flight (bounded by the client's timeouts).
    """
    if not parts:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-ahead") as ahead:
        future = ahead.submit(embed, parts[0])
        for index, part in enumerate(parts):
            result = future.result()
            if index + 1 < len(parts):
                future = ahead.submit(embed, parts[index + 1])
            yield part, result
