"""The coordinator's backlog: the items workers handed over that its one DuckDB writer has not stored yet.

Workers clean pages faster, together, than one writer can store them once there are enough of them
(BENCHMARKS.md, "The writer's ceiling"). Without a bound, the list of items waiting in Redis would grow
for as long as the crawl lasts: every page's HTML, text and chunks held in Redis's memory. So a hand-over
is refused while ``backlog`` items are waiting (checked inside the same Redis script that ends the URL's
lease, so the bound holds however many workers push at once), and the worker waits, up to
``backlog_wait`` seconds, before it tries again: its downloads stop while its items wait (Scrapy backs
out when its scraper holds too much), so the crawl slows down to the writer's pace instead of piling up.
A worker still waiting after ``backlog_wait`` hands the item over anyway (one warning, counted): the
coordinator is stuck or gone, and the item is safer in Redis than in a worker that may be stopped.

The coordinator takes the items a batch at a time (``take``): one DuckDB transaction per batch instead of
one per page, which is most of what a page cost the writer. Its memory holds one batch, bounded by
``WRITE_BATCH`` items and ``WRITE_BATCH_BYTES``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

#: Items waiting for the writer above which workers wait: about 65 MB of Redis at the Python manual's
#: average item (129 KB: the page's HTML, text and chunks), and ten of the writer's batches.
DEFAULT_BACKLOG = 500
#: The longest a worker waits for room in the backlog before handing an item over anyway, and the most
#: that may be set (a config read from Redis must not hold workers for ever).
DEFAULT_BACKLOG_WAIT = 60.0
MAX_BACKLOG_WAIT = 3600.0
#: The writer's batch: as many items as the local store pipeline's batch of pages, and a byte cap, so a
#: run of large pages does not hold hundreds of megabytes in the coordinator.
WRITE_BATCH = 50
WRITE_BATCH_BYTES = 32 * 1024 * 1024
#: What a hand-over refused for want of room returns (the scripts' -1).
FULL = -1
#: A waiting worker asks again after this long, doubling up to the cap: the coordinator takes a batch
#: of 50 in well under a second, and a paused worker must not cost Redis more than a few calls a second.
FIRST_RETRY = 0.05
MAX_RETRY = 0.5

# KEYS: items, writing. ARGV: most items, most bytes. Moves the oldest items to `writing` (at least one
# if any wait), so a coordinator killed mid-batch finds them there (Writer.resume).
TAKE = """
local taken, bytes = {}, 0
while #taken < tonumber(ARGV[1]) do
  local raw = redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
  if not raw then break end
  taken[#taken + 1] = raw
  bytes = bytes + #raw
  if bytes >= tonumber(ARGV[2]) then break end
end
return taken
"""

# KEYS: items. ARGV: item, bound (0: none). A hand-over that ends no lease (a URL too long to request).
PUSH_ITEM = """
local bound = tonumber(ARGV[2])
if bound > 0 and redis.call('LLEN', KEYS[1]) >= bound then return -1 end
return redis.call('RPUSH', KEYS[1], ARGV[1])
"""


class BacklogWait:
    """One worker's side of the bound: hand an item over, waiting (bounded) while the backlog is full.

    ``try_hand_over(bound)`` runs the Redis script (off the reactor thread) and returns ``FULL`` when
    refused; ``room()`` asks how many items wait. Only one item of the worker polls while the backlog is
    full (the others queue behind it, each with the same bound on its wait), so a paused worker costs
    Redis one small call at a time, and an item is sent only when there is room for it.
    """

    def __init__(self, bound: int, max_wait: float, waiting: Callable[[], int],
                 stopping: Callable[[], bool] = lambda: False) -> None:
        self.bound = bound
        self.max_wait = max_wait
        self.waiting = waiting
        self.stopping = stopping
        self.paused = False
        self._lock = asyncio.Lock()
        self._queued = 0  # items of this worker waiting for room, the one polling included
        #: Items that had to wait, seconds they waited in all, items handed over past the bound.
        self.waits = 0
        self.wait_seconds = 0.0
        self.forced = 0

    async def hand_over(self, attempt: Callable[[int], Any]) -> tuple[Any, float]:
        """``attempt(bound)`` until it is not ``FULL``; past ``max_wait``, ``attempt(0)`` (no bound).
        Returns what the last attempt returned and the seconds this item waited for room."""
        loop = asyncio.get_running_loop()
        if self.bound <= 0:
            return await loop.run_in_executor(None, attempt, 0), 0.0
        if not self.paused:
            result = await loop.run_in_executor(None, attempt, self.bound)
            if result != FULL:
                return result, 0.0
        started = time.monotonic()
        self.waits += 1
        self._queued += 1
        try:
            async with self._lock:
                result = await self._wait_and_hand_over(attempt, started)
        finally:
            self._queued -= 1
            waited = time.monotonic() - started
            self.wait_seconds += waited
        return result, waited

    async def _wait_and_hand_over(self, attempt: Callable[[int], Any], started: float) -> Any:
        loop = asyncio.get_running_loop()
        if not self.paused:
            self.paused = True
            log.info("The coordinator has %d or more items waiting to be written: this worker waits for room",
                     self.bound)
        pause = FIRST_RETRY
        while True:
            waited = time.monotonic() - started
            if waited >= self.max_wait or self.stopping():
                if not self.stopping():
                    self.forced += 1
                    log.warning("The coordinator's backlog stayed full for %.0f s (WEBQA_REDIS_BACKLOG_WAIT): "
                                "handing an item over anyway; is the coordinator stuck?", waited)
                self.paused = False
                return await loop.run_in_executor(None, attempt, 0)
            if await loop.run_in_executor(None, self.waiting) < self.bound:
                result = await loop.run_in_executor(None, attempt, self.bound)
                if result != FULL:
                    if self._queued == 1:  # the last of the queue: the pause is over
                        self.paused = False
                        log.info("Room in the coordinator's backlog again: this worker goes on")
                    return result
            await asyncio.sleep(min(pause, max(0.0, self.max_wait - waited)))
            pause = min(pause * 2, MAX_RETRY)


def take(client: Any, script: Any, items_key: str, writing_key: str, most: int = WRITE_BATCH,
         most_bytes: int = WRITE_BATCH_BYTES) -> list[bytes]:
    """The oldest waiting items, moved to ``writing``: up to ``most`` of them and about ``most_bytes``."""
    return list(script(keys=[items_key, writing_key], args=[most, most_bytes], client=client))
