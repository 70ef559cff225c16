"""One politeness gate per host for every worker, in Redis.

Scrapy's download delay is kept per process: two workers each waiting 0.5 s between requests to a
host together send it a request every 0.25 s or closer. Here a request is sent only at a slot the gate
booked for it, and the gate (a Lua script, so atomic across workers) books a host for one request at a
time (or ``concurrency`` of them), start to start ``delay + margin`` apart, as Scrapy's own delay on one
machine is counted:

* a booking takes the host's next free slot, ``max(now, next_at)``, and moves ``next_at`` to
  ``slot + delay + margin``; the worker sleeps until its slot and sends, with no second round trip.
  The margin (``DEFAULT_MARGIN``) covers the spread between two requests' slot-to-wire times where the lateness
  below cannot (a host allowed ``concurrency`` above 1 is booked again before the previous answer);
* a host is booked only while fewer than ``concurrency`` requests hold it: the next booking waits for
  the release at the end of the previous download (should its worker die, the hold goes when the
  worker's alive key expires, a lease after its last beat). A worker refused waits until the holder's
  slot, then asks again;
* the release may push ``next_at`` further: the answer came ``late`` after the slot, so the server saw
  the request at ``slot + late`` at the latest, and the next slot is no sooner than ``delay`` after that.
  On an idle machine and a near server the answer comes within the margin and nothing moves; on a
  loaded one (a worker woken late, a request queued in the reactor) the gap at the server still holds;
* ``delay`` is the larger of the job's (or the host's override) and robots.txt's Crawl-delay, which
  the robots middleware records here; a Retry-After pauses the host for everyone (``pause``), set
  when the response is downloaded, before the release lets the next request book the host.

All times are Redis's clock (``TIME``), the one clock workers on several machines share.

The module also holds the two middlewares that feed the gate: robots.txt fetched once per origin for
all workers and shared in Redis, and Retry-After pauses in the gate instead of in the process.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import socket
import time
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, urlsplit

from scrapy import signals
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import DeferredLock

from crawler.distributed.entries import describe
from crawler.distributed.queue import Keys, connect
from crawler.middlewares.retry_after import RetryAfterMiddleware
from crawler.middlewares.robots import RobotsPolicyMiddleware, RobotsResult, cache_entry, origin_of, result_from_cache

if TYPE_CHECKING:
    import redis
    from scrapy import Request
    from scrapy.crawler import Crawler

log = logging.getLogger(__name__)

#: Added to every booked gap: two workers' requests leave a few milliseconds after their slots, not
#: always the same few (BENCHMARKS.md, "Crawling through Redis").
DEFAULT_MARGIN = 0.005
#: How soon a request refused because its host is held (a download in flight) asks again, at least.
BUSY_POLL = 0.02
#: The longest a request waits for its host's turn before it is given up as failed.
DEFAULT_MAX_WAIT = 3600.0

_NOW = "local t = redis.call('TIME'); local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
_DELAY = "local delay = math.max(tonumber(ARGV[1]), tonumber(redis.call('HGET', KEYS[1], 'crawl_delay') or '0'))\n"
_NEXT = "local next_at = tonumber(redis.call('HGET', KEYS[1], 'next_at') or '0')\n"

# KEYS: host hash, holders. ARGV: delay ms, concurrency, hold ms, token (owner#n), margin ms, max wait ms,
# the prefix of the owners' alive keys (GateMiddleware sets its own while it lives).
# Returns {1, ms until the booked slot, the slot} or {0, ms to wait before asking again}.
ACQUIRE = _NOW + _DELAY + _NEXT + """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
-- A hold whose worker stopped saying it is alive (killed) frees the host now, not after the hold.
for _, holder in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  local owner = string.match(holder, '^(.*)#')
  if owner and redis.call('EXISTS', ARGV[7] .. owner) == 0 then redis.call('ZREM', KEYS[2], holder) end
end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[2]) then
  -- held: the earliest holder's slot (its score less the hold) is when its release may come soonest
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {0, math.max(0, tonumber(first[2]) - tonumber(ARGV[3]) - now)}
end
local slot = math.max(now, next_at)
if slot - now > tonumber(ARGV[6]) then return {0, slot - now} end
redis.call('ZADD', KEYS[2], slot + tonumber(ARGV[3]), ARGV[4])
redis.call('HSET', KEYS[1], 'next_at', slot + delay + tonumber(ARGV[5]))
redis.call('HINCRBY', KEYS[1], 'grants', 1)
return {1, slot - now, slot}
"""

# KEYS: host hash, holders. ARGV: delay ms, token, margin ms, late ms (how long after its slot the
# answer came), slot ms (Redis time of the slot).
RELEASE = _NOW + _DELAY + _NEXT + """
redis.call('ZREM', KEYS[2], ARGV[2])
local late = tonumber(ARGV[4])
if late > tonumber(ARGV[3]) then
  -- the server saw it by slot + late: the next leaves no sooner than delay after that
  redis.call('HSET', KEYS[1], 'next_at', math.max(next_at, tonumber(ARGV[5]) + late + delay))
  redis.call('HINCRBY', KEYS[1], 'late', 1)
end
return 1
"""

# KEYS: host hash. ARGV: pause ms. Retry-After: nobody sends to the host before now + pause.
PAUSE = _NOW + _NEXT + """
redis.call('HSET', KEYS[1], 'next_at', math.max(next_at, now + tonumber(ARGV[1])))
return 1
"""

# KEYS: host hash. ARGV: crawl delay ms. Raises the host's delay; counted from now the first time.
CRAWL_DELAY = _NOW + _NEXT + """
local old = tonumber(redis.call('HGET', KEYS[1], 'crawl_delay') or '0')
if tonumber(ARGV[1]) <= old then return 0 end
redis.call('HSET', KEYS[1], 'crawl_delay', ARGV[1])
redis.call('HSET', KEYS[1], 'next_at', math.max(next_at, now + tonumber(ARGV[1])))
return 1
"""


def _ms(seconds: float) -> int:
    return max(0, int(round(seconds * 1000)))


def _late_ms(seconds: float) -> int:
    """Lateness in whole ms, never less than it was: rounded up, plus the ms Redis's TIME floors the slot by, so
    that ``slot + late + delay`` is no sooner than ``delay`` after the server saw the request (a CI run's server saw
    two requests a fraction of a ms closer than the delay when lateness was rounded to the nearest ms)."""
    return math.ceil(max(0.0, seconds) * 1000) + 1


class Gate:
    """The per-host booking scripts, with this crawl's delays (job default and per-host overrides)."""

    def __init__(self, client: redis.Redis, keys: Keys, *, delay: float, hosts: dict[str, dict[str, Any]] | None = None,
                 hold_seconds: float = 60.0, margin: float = DEFAULT_MARGIN) -> None:
        self.r = client
        self.keys = keys
        self.delay = delay
        self.hosts = hosts or {}
        self.hold_ms = _ms(hold_seconds)
        self.alive_prefix = f"{keys.prefix}:alive:"
        self.margin_ms = _ms(margin)
        self._acquire = client.register_script(ACQUIRE)
        self._release = client.register_script(RELEASE)
        self._pause = client.register_script(PAUSE)
        self._crawl_delay = client.register_script(CRAWL_DELAY)

    def policy(self, host: str) -> tuple[float, int]:
        override = self.hosts.get(host) or {}
        delay = override.get("delay")
        return (self.delay if delay is None else float(delay)), int(override.get("concurrency") or 1)

    def acquire(self, host: str, token: str, max_wait: float = DEFAULT_MAX_WAIT) -> tuple[bool, float, int]:
        """Book ``host`` for ``token``: (True, seconds until the slot, the slot in Redis ms) when booked,
        else (False, seconds to wait before asking again, 0). No slot further than ``max_wait`` is booked."""
        delay, concurrency = self.policy(host)
        booked, wait_ms, *slot = self._acquire(
            keys=[self.keys.gate(host), self.keys.gate_holders(host)],
            args=[_ms(delay), concurrency, self.hold_ms, token, self.margin_ms, _ms(max_wait), self.alive_prefix])
        if booked:
            return True, int(wait_ms) / 1000, int(slot[0]) if slot else 0
        return False, max(BUSY_POLL, int(wait_ms) / 1000 + BUSY_POLL), 0

    def release(self, host: str, token: str, late: float = 0.0, slot_ms: int = 0) -> None:
        delay, _ = self.policy(host)
        self._release(keys=[self.keys.gate(host), self.keys.gate_holders(host)],
                      args=[_ms(delay), token, self.margin_ms, _late_ms(late), slot_ms])

    def pause(self, host: str, seconds: float) -> None:
        self._pause(keys=[self.keys.gate(host)], args=[_ms(seconds)])

    def set_crawl_delay(self, host: str, seconds: float) -> None:
        self._crawl_delay(keys=[self.keys.gate(host)], args=[_ms(seconds)])


def gate_from_settings(crawler: Crawler) -> Gate:
    settings = crawler.settings
    url = settings.get("WEBQA_REDIS_URL")
    if not url:
        raise NotConfigured("WEBQA_REDIS_URL is not set: no shared politeness gate (a crawl on one machine)")
    gate = getattr(crawler, "_webqa_gate", None)
    if gate is None:
        gate = Gate(connect(url), Keys(settings.get("WEBQA_REDIS_PREFIX") or "webqa"),
                    delay=settings.getfloat("WEBQA_GATE_DELAY", 1.0), hosts=settings.getdict("WEBQA_GATE_HOSTS"),
                    hold_seconds=settings.getfloat("DOWNLOAD_TIMEOUT", 30.0) + 30.0,
                    margin=settings.getfloat("WEBQA_GATE_MARGIN", DEFAULT_MARGIN))
        crawler._webqa_gate = gate  # type: ignore[attr-defined]  # one gate per process, shared by the middlewares
    return gate


async def _sleep(seconds: float) -> None:
    from twisted.internet import reactor, task

    await maybe_deferred_to_future(task.deferLater(reactor, seconds, lambda: None))


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


class GateWaitTooLong(IgnoreRequest):
    """The host's turn did not come within WEBQA_GATE_MAX_WAIT; recorded as failed with the message."""

    outcome = "failed"


class GateMiddleware:
    """Holds every request (robots.txt included) until the host's gate grants it; last before the wire."""

    def __init__(self, crawler: Crawler, gate: Gate, max_wait: float) -> None:
        self.crawler = crawler
        self.gate = gate
        self.max_wait = max_wait
        self._tokens = itertools.count(1)
        # One asker per host in this process; the others wait here, not in Redis (no thundering herd).
        self._turns: dict[str, DeferredLock] = {}
        # The owner of this process's holds; its alive key lasts a lease and is renewed every third of it.
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._alive_seconds = max(1, int(round(crawler.settings.getfloat("WEBQA_LEASE_SECONDS", 60.0))))
        self._beat_loop: Any = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> GateMiddleware:
        mw = cls(crawler, gate_from_settings(crawler), crawler.settings.getfloat("WEBQA_GATE_MAX_WAIT", DEFAULT_MAX_WAIT))
        # Fires for every request leaving the downloader, answered or failed.
        crawler.signals.connect(mw._left, signal=signals.request_left_downloader)
        crawler.signals.connect(mw._opened, signal=signals.spider_opened)
        crawler.signals.connect(mw._closed, signal=signals.spider_closed)
        return mw

    def _opened(self) -> None:
        from twisted.internet import task

        self._beat()
        self._beat_loop = task.LoopingCall(self._beat)
        self._beat_loop.start(self._alive_seconds / 3, now=False)

    def _beat(self) -> None:
        try:
            self.gate.r.set(self.gate.alive_prefix + self._owner, 1, ex=self._alive_seconds)
        except Exception as exc:  # noqa: BLE001 - a missed beat frees this worker's holds early, nothing worse
            log.warning("Cannot tell Redis this worker's gate holds are alive: %s", exc)

    def _closed(self) -> None:
        if self._beat_loop is not None and self._beat_loop.running:
            self._beat_loop.stop()
        try:
            self.gate.r.delete(self.gate.alive_prefix + self._owner)
        except Exception:  # noqa: BLE001 - it expires anyway
            pass

    async def process_request(self, request: Request) -> None:
        host = _host(request.url)
        if not host:
            return None
        token = f"{self._owner}#{next(self._tokens)}"
        deadline = time.monotonic() + self.max_wait
        turn = self._turns.setdefault(host, DeferredLock())
        await maybe_deferred_to_future(turn.acquire())
        try:
            while True:
                asked = time.monotonic()
                booked, wait, slot_ms = self.gate.acquire(host, token, max(0.0, deadline - asked))
                if booked:
                    # Sleep until the slot and send, no second round trip. Redis ran the script after
                    # `asked`: asked + wait is no later than the slot, the right end to count lateness from
                    # (from the answer's arrival, a worker descheduled meanwhile would count too little).
                    if wait > 0:
                        await _sleep(wait)
                    request.meta["webqa_gate"] = (host, token, asked + wait, slot_ms)
                    return None
                if time.monotonic() + wait > deadline:
                    raise GateWaitTooLong(f"politeness gate: {host} had no free turn within {self.max_wait:g} s")
                await _sleep(wait)
        finally:
            turn.release()

    def _left(self, request: Request, **_: Any) -> None:
        held = request.meta.pop("webqa_gate", None)
        if held is not None:
            host, token, due, slot_ms = held
            # The server saw the request before it answered: the answer's time, counted from the slot, bounds
            # when the request arrived, whatever the worker's own delays between its slot and the wire.
            try:
                self.gate.release(host, token, max(0.0, time.monotonic() - due), slot_ms)
            except Exception as exc:  # noqa: BLE001 - the hold then ends with this worker's alive key
                log.warning("Cannot release %s's politeness gate in Redis: %s", host, exc)


class SharedRetryAfterMiddleware(RetryAfterMiddleware):
    """Retry-After pauses the host in the gate, for every worker, instead of in this process."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SharedRetryAfterMiddleware:
        mw = super().from_crawler(crawler)
        mw.gate = gate_from_settings(crawler)  # type: ignore[attr-defined]
        return mw  # type: ignore[return-value]

    async def process_request(self, request: Request) -> None:
        return None  # the gate holds paused hosts

    def _pause_host(self, request: Request, delay: float) -> None:
        self.gate.pause(_host(request.url), delay)  # type: ignore[attr-defined]


class SharedFailure(IgnoreRequest):
    """A robots.txt network failure seen by another worker: the pages fail with the same reason."""

    outcome = "failed"


#: A shared robots.txt verdict holds the file's rules (at most MAX_ROBOTS_BYTES) and a little more.
MAX_ROBOTS_ENTRY_BYTES = 2 * 1024 * 1024

#: How long one worker may hold an origin's robots.txt fetch before others fetch it themselves.
ROBOTS_LOCK_SECONDS = 120.0


class SharedRobotsMiddleware(RobotsPolicyMiddleware):
    """robots.txt fetched once per origin for all workers, its verdict shared in Redis for the crawl;
    Crawl-delay goes to the gate rather than to this process's downloader slot."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SharedRobotsMiddleware:
        mw = super().from_crawler(crawler)
        assert isinstance(mw, SharedRobotsMiddleware)
        mw.gate = gate_from_settings(crawler)
        mw.lock_seconds = min(ROBOTS_LOCK_SECONDS, crawler.settings.getfloat("DOWNLOAD_TIMEOUT", 30.0) * 3)
        return mw

    async def _result_for(self, parts: SplitResult) -> RobotsResult:
        origin = origin_of(parts)
        if origin in self._results or origin in self._pending:
            return await super()._result_for(parts)
        deadline = time.monotonic() + self.lock_seconds * 2
        lock = f"{self.gate.keys.robots_lock}:{origin}"
        while True:
            shared = self._shared(origin)
            if shared is not None:
                self._results[origin] = shared
                return shared
            if self.gate.r.set(lock, "1", nx=True, ex=int(self.lock_seconds)):
                result = await super()._result_for(parts)
                self.gate.r.hset(self.gate.keys.robots, origin, json.dumps(self._entry(result)))
                self.gate.r.delete(lock)
                return result
            if time.monotonic() > deadline:  # the fetching worker died and its lock outlived the wait
                return await super()._result_for(parts)
            await _sleep(0.05)

    def _entry(self, result: RobotsResult) -> dict[str, Any]:
        entry = cache_entry(result)
        if result.verdict == "unreachable" and result.error is not None:
            from twisted.python.failure import Failure

            from crawler.spiders.urls import describe_failure

            entry["failed_as"] = describe_failure(Failure(result.error))[1]
        return entry

    def _shared(self, origin: str) -> RobotsResult | None:
        raw = self.gate.r.hget(self.gate.keys.robots, origin)
        if raw is None:
            return None
        try:
            entry = json.loads(raw) if len(raw) <= MAX_ROBOTS_ENTRY_BYTES else None
            if not isinstance(entry, dict):
                raise ValueError("not a JSON object of a size webqa writes")
            return self._from_entry(entry)
        except Exception as exc:  # noqa: BLE001 - not what a worker wrote: fetch robots.txt here instead
            log.warning("Ignoring the shared robots.txt verdict for %s in Redis: %s", origin, describe(exc))
            return None

    def _from_entry(self, entry: dict[str, Any]) -> RobotsResult | None:
        if entry.get("verdict") == "unreachable":
            failed_as = entry.get("failed_as")
            return RobotsResult("unreachable", str(entry.get("detail")), fetched_at=float(entry.get("fetched_at") or 0),
                                source="shared", error=SharedFailure(failed_as) if failed_as else None)
        # The coordinator loaded the cross-run cache with its TTL already applied: any age is fine here.
        return result_from_cache(entry, float(entry.get("fetched_at") or 0), float("inf"))

    def _apply_crawl_delay(self, request: Request, crawl_delay: float) -> None:
        self.gate.set_crawl_delay(_host(request.url), crawl_delay)

    def _request_done(self, request: Request, **kwargs: Any) -> None:
        return None  # the gate counts delays from the end of each download already

    def spider_closed(self) -> None:
        return None  # the coordinator writes the cross-run robots.txt cache
