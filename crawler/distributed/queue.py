"""The shared frontier in Redis: admission (duplicates, max_pages), a leased queue, items handed over.

A request is never removed from Redis when a worker takes it: ``pop`` moves it from the queue to the
leases (with an expiry in Redis time), the worker renews its leases while it lives, and ``ack`` removes
the lease and pushes the URL's item for the coordinator in one script, so a URL is always queued,
leased, or delivered, never lost. A lease that expires (its worker died) goes back to the queue on the
next ``pop`` or ``reap``. A retry or a redirect of a leased request replaces its lease by a queue entry.

Every request is keyed by its ``webqa_id``: the URL as listed or discovered (one item per such URL,
``crawler/spiders/urls.py``), which its redirects and retries keep in ``meta``.

The queue class and the scheduler are scrapy-redis's, adapted to Scrapy 2.19 (no ``spider=`` in stats
calls; the queue is kept at close, ``SCHEDULER_PERSIST``, and the coordinator removes it at the end).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import re
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis
from scrapy_redis.queue import Base

from scrapy.utils.request import request_from_dict
from scrapy_redis.scheduler import Scheduler

from crawler.distributed.backlog import FULL, PUSH_ITEM
from crawler.distributed.entries import checked_request, dead_letter, dead_letter_key, describe
from pipelines.errors import ExitCode, WebqaError
from pipelines.redact import inert

log = logging.getLogger(__name__)

PREFIX = "webqa"
#: The crawls running on this Redis, prefix → JSON (job, database, start): how a worker finds one.
REGISTRY = f"{PREFIX}:crawls"
#: Seconds a taken request stays leased without renewal; workers renew every third of it.
DEFAULT_LEASE_SECONDS = 60.0
#: Every call to Redis gives up after this long: a dead Redis is an error, not a hang.
SOCKET_TIMEOUT = 10.0


class RedisLost(WebqaError):
    """Redis stopped answering mid-crawl (exit 3): one line, what was stored stays, rerun to carry on."""

    exit_code = ExitCode.FAILED


def connect(url: str) -> redis.Redis:
    """A client for ``url`` with bounded connects and reads; raises ``redis.RedisError`` if unreachable."""
    client = redis.Redis.from_url(
        url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=5.0, health_check_interval=30,
    )
    client.ping()
    return client


def crawl_prefix(job_name: str | None, db_path: str | Path) -> str:
    """The key prefix of one crawl: its job (or "crawl") and a hash of the machine, database and job.

    Two jobs, or two databases, share a Redis without mixing frontiers; the same command run again on
    the same machine finds its unfinished crawl (the coordinator resumes it)."""
    ident = f"{socket.gethostname()}\0{Path(db_path).resolve()}\0{job_name or ''}"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", job_name or "crawl")[:40]
    return f"{PREFIX}:{name}-{hashlib.sha1(ident.encode()).hexdigest()[:10]}"


@dataclass(frozen=True)
class Keys:
    """The Redis keys of one crawl namespace."""

    prefix: str = PREFIX

    def __getattr__(self, name: str) -> str:  # keys.queue → "webqa:job-0123456789:queue"
        if name.startswith("_"):
            raise AttributeError(name)
        return f"{self.prefix}:{name}"

    def gate(self, host: str) -> str:
        return f"{self.prefix}:gate:{host}"

    def gate_holders(self, host: str) -> str:
        return f"{self.prefix}:gate:{host}:holders"

    def pattern(self) -> str:
        return f"{self.prefix}:*"


# Milliseconds of Redis's own clock: the one clock every worker on every machine shares.
_NOW = "local t = redis.call('TIME'); local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"

# Expired leases back to the queue with their old score (kept in the holder entry "token|score").
_REAP = """
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
for _, id in ipairs(expired) do
  local holder = redis.call('HGET', KEYS[4], id) or '|0'
  local score = string.match(holder, '|(.*)$') or '0'
  redis.call('ZREM', KEYS[2], id)
  redis.call('HDEL', KEYS[4], id)
  redis.call('ZADD', KEYS[1], score, id)
  redis.call('HINCRBY', KEYS[5], 'requeued', 1)
end
"""

# KEYS: queue, leases, reqs, holders, stats. ARGV: lease ms, token.
POP = _NOW + _REAP + """
local item = redis.call('ZPOPMIN', KEYS[1])
if #item == 0 then return false end
local id, score = item[1], item[2]
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), id)
redis.call('HSET', KEYS[4], id, ARGV[2] .. '|' .. score)
return {id, redis.call('HGET', KEYS[3], id)}
"""

REAP = _NOW + _REAP + "return #expired"

# KEYS: queue, leases, reqs, holders, hostseq. ARGV: id, request, priority, token, host.
# A leased id is replaced only by its own holder (a retry or redirect); a stranger's push is refused.
# Within a priority, the n-th request of every host comes before the (n+1)-th of any: hosts take
# turns, so a worker's downloads are not all waiting for the gate of the one host linked most.
PUSH = """
local holder = redis.call('HGET', KEYS[4], ARGV[1])
if holder then
  if string.match(holder, '^([^|]*)') ~= ARGV[4] then return 0 end
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
local score = -tonumber(ARGV[3]) * 1e12 + redis.call('HINCRBY', KEYS[5], ARGV[5], 1)
redis.call('ZADD', KEYS[1], score, ARGV[1])
return 1
"""

# KEYS: leases, holders. ARGV: lease ms, token, ids...
RENEW = _NOW + """
local renewed = 0
for i = 3, #ARGV do
  local holder = redis.call('HGET', KEYS[2], ARGV[i])
  if holder and string.match(holder, '^([^|]*)') == ARGV[2] then
    redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[i])
    renewed = renewed + 1
  end
end
return renewed
"""

# KEYS: leases, holders, reqs, items. ARGV: id, token, item, bound (0: none).
# The item and the end of the lease in one step: a worker dying in between cannot lose or double it.
# With `bound` items already waiting for the writer, nothing is done (-1): the worker waits (backlog.py).
ACK = """
local holder = redis.call('HGET', KEYS[2], ARGV[1])
if not holder or string.match(holder, '^([^|]*)') ~= ARGV[2] then return 0 end
local bound = tonumber(ARGV[4] or '0')
if bound > 0 and redis.call('LLEN', KEYS[4]) >= bound then return -1 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('RPUSH', KEYS[4], ARGV[3])
return 1
"""

# KEYS: seen, scheduled, reached, counts. ARGV: url, depth, fresh (0/1), max_pages.
# The spider's `seen` and `scheduled` (crawler/spiders/urls.py), shared: 0 seen before, -1 over
# max_pages, 1 admitted for fetching, 2 admitted as fresh (reached, not fetched).
ADMIT = """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 0 end
if ARGV[3] == '1' then
  redis.call('SADD', KEYS[1], ARGV[1])
  redis.call('HSETNX', KEYS[3], ARGV[1], ARGV[2])
  redis.call('HINCRBY', KEYS[4], 'fresh', 1)
  return 2
end
local max = tonumber(ARGV[4])
if max > 0 and tonumber(redis.call('GET', KEYS[2]) or '0') >= max then return -1 end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('INCR', KEYS[2])
redis.call('HSETNX', KEYS[3], ARGV[1], ARGV[2])
return 1
"""

# KEYS: queue, leases, items, processing. One consistent reading of what is left to do.
STATE = """
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]),
        redis.call('LLEN', KEYS[3]), redis.call('LLEN', KEYS[4])}
"""


class Admission:
    SEEN = 0
    OVER_MAX = -1
    FETCH = 1
    FRESH = 2


class Frontier:
    """One process's handle on the shared frontier; ``held`` is the ids this process has leased."""

    def __init__(self, client: redis.Redis, keys: Keys = Keys(), *, lease_seconds: float = DEFAULT_LEASE_SECONDS,
                 token: str | None = None) -> None:
        self.r = client
        self.keys = keys
        self.lease_ms = int(lease_seconds * 1000)
        self.token = token or f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.held: set[str] = set()
        self.stopping = False  # set by a worker when the coordinator ended the crawl
        self._pop = client.register_script(POP)
        self._push = client.register_script(PUSH)
        self._renew = client.register_script(RENEW)
        self._ack = client.register_script(ACK)
        self._admit = client.register_script(ADMIT)
        self._reap = client.register_script(REAP)
        self._state = client.register_script(STATE)
        self._push_item = client.register_script(PUSH_ITEM)

    def _lease_keys(self) -> list[str]:
        k = self.keys
        return [k.queue, k.leases, k.reqs, k.holders]

    def admit(self, url: str, depth: int, *, fresh: bool, max_pages: int) -> int:
        k = self.keys
        return int(self._admit(keys=[k.seen, k.scheduled, k.reached, k.counts],
                               args=[url, depth, int(fresh), max_pages]))

    def push(self, request_id: str, data: bytes, priority: int = 0, host: str = "") -> bool:
        pushed = bool(self._push(keys=[*self._lease_keys(), self.keys.hostseq],
                                 args=[request_id, data, priority, self.token, host]))
        self.held.discard(request_id)
        if not pushed:
            log.warning("Not requeueing %s: its lease expired and another worker has it", request_id)
        return pushed

    def pop(self) -> tuple[str, bytes] | None:
        found = self._pop(keys=[*self._lease_keys(), self.keys.stats], args=[self.lease_ms, self.token])
        if not found:
            return None
        request_id, data = found[0].decode(), found[1]
        self.held.add(request_id)
        return request_id, data

    def renew(self) -> int:
        if not self.held:
            return 0
        k = self.keys
        return int(self._renew(keys=[k.leases, k.holders], args=[self.lease_ms, self.token, *sorted(self.held)]))

    def ack(self, request_id: str, item: bytes, bound: int = 0) -> int:
        """Hand the URL's item to the coordinator and end its lease: 1, or 0 if the lease was lost, or
        ``backlog.FULL`` (lease kept, nothing sent) if ``bound`` items already wait for the writer."""
        k = self.keys
        done = int(self._ack(keys=[k.leases, k.holders, k.reqs, k.items], args=[request_id, self.token, item, bound]))
        if done == FULL:
            return done
        self.held.discard(request_id)
        if not done:
            log.warning("Dropping the item for %s: its lease expired and another worker fetches it again", request_id)
        return done

    def push_item(self, item: bytes, bound: int = 0) -> int:
        """Hand over an item that ends no lease; ``backlog.FULL`` if ``bound`` items already wait."""
        return int(self._push_item(keys=[self.keys.items], args=[item, bound]))

    def items_waiting(self) -> int:
        return int(self.r.llen(self.keys.items))

    def reap(self) -> int:
        return int(self._reap(keys=[*self._lease_keys(), self.keys.stats], args=[]))

    def state(self) -> tuple[int, int, int, int]:
        """(queued, leased, items waiting, items being written)."""
        k = self.keys
        queued, leased, items, writing = self._state(keys=[k.queue, k.leases, k.items, k.writing])
        return int(queued), int(leased), int(items), int(writing)

    def queued(self) -> int:
        return int(self.r.zcard(self.keys.queue))


# -- requests as JSON ------------------------------------------------------------------------------
# JSON rather than scrapy-redis's default pickle: unpickling what a network service hands over would
# let anyone who can write to Redis run code on every worker.


def _encode(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"__b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {("__b64:" + base64.b64encode(k).decode("ascii")) if isinstance(k, bytes) else str(k): _encode(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"cannot send {type(value).__name__} through Redis: {value!r}"[:200])


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__b64"}:
            return base64.b64decode(value["__b64"])
        return {(base64.b64decode(k[6:]) if k.startswith("__b64:") else k): _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


class JsonSerializer:
    """The ``serializer`` scrapy-redis queues take: ``dumps``/``loads`` of ``Request.to_dict()``."""

    @staticmethod
    def dumps(obj: dict[str, Any]) -> bytes:
        return json.dumps(_encode(obj), separators=(",", ":")).encode()

    @staticmethod
    def loads(data: bytes) -> dict[str, Any]:
        return _decode(json.loads(data))


# scrapy-redis's SCHEDULER_SERIALIZER names a module with dumps/loads: this one.
dumps = JsonSerializer.dumps
loads = JsonSerializer.loads


def request_id(request: Any) -> str:
    return str(request.meta.get("webqa_id") or request.cb_kwargs.get("listed_url") or request.url)


class LeasedQueue(Base):
    """scrapy-redis's queue interface over the spider's ``Frontier``: pop leases, push replaces a lease."""

    def __init__(self, server: Any, spider: Any, key: str, serializer: Any = None) -> None:
        super().__init__(server, spider, key, serializer or JsonSerializer)
        self.frontier: Frontier = spider.frontier

    def __len__(self) -> int:
        # Scrapy asks this from an engine callback: Redis lost there must not raise out of the reactor (a
        # traceback per tick under -v); the lease renewal is what decides that the worker stops.
        try:
            return self.frontier.queued()
        except redis.RedisError:
            return 0

    def push(self, request: Any) -> None:
        self.frontier.push(request_id(request), self._encode_request(request), request.priority,
                           urlsplit(request.url).hostname or "")

    def pop(self, timeout: int = 0) -> Any:
        try:
            found = None if self.frontier.stopping else self.frontier.pop()
            self._failing = False
        except redis.RedisError as exc:  # the worker's lease renewal decides when Redis has been gone too long
            if not getattr(self, "_failing", False):  # once per outage, not every heartbeat
                log.warning("Cannot take a request from Redis: %s", exc)
            self._failing = True
            return None
        if found is None:
            return None
        request_id_, data = found
        try:
            return request_from_dict(checked_request(data, self.serializer.loads), spider=self.spider)
        except Exception as exc:  # noqa: BLE001 - a bad entry must not stop the worker, nor come back
            self._reject(request_id_, data, describe(exc))
            return None

    def _reject(self, request_id_: str, data: bytes, why: str) -> None:
        """A queued request that is not one webqa wrote: its URL fails with the reason (the lease ends with
        that record, so it is never handed out again) and the entry goes to the dead-letter list."""
        from crawler.distributed.items import encode_item
        from pipelines.items import FetchOutcome

        key = dead_letter_key(self.frontier.keys.prefix)
        shown = inert(request_id_[:500], one_line=True)
        try:
            dead_letter(self.server, self.frontier.keys.prefix, data, why, self.frontier.keys.queue)
            self.frontier.ack(request_id_, encode_item(FetchOutcome(
                shown, "failed", f"invalid request in the Redis queue: {why}; kept in {key}")))
        except redis.RedisError as exc:  # the lease expires and the next worker meets the entry again
            log.warning("Cannot set aside the invalid queued request %s: %s", shown, exc)
            self.frontier.held.discard(request_id_)

    def clear(self) -> None:
        """Never from a worker: the coordinator removes the crawl's keys when the crawl is over."""


class LeasingScheduler(Scheduler):
    """scrapy-redis's scheduler with the leased queue and Scrapy 2.19's stats calls (no ``spider=``)."""

    @classmethod
    def from_crawler(cls, crawler: Any) -> LeasingScheduler:
        instance = cls.from_settings(crawler.settings)
        instance.stats = crawler.stats
        return instance

    def enqueue_request(self, request: Any) -> bool:
        # Every request was admitted once by the shared `seen` set (Frontier.admit) and carries
        # dont_filter: scrapy-redis's duplicate filter would drop a redirect to a URL already seen,
        # and the listed URL would vanish without a row (see UrlsSpider._request).
        if not request.dont_filter and self.df.request_seen(request):
            self.df.log(request, self.spider)
            return False
        self.queue.push(request)
        if self.stats:
            self.stats.inc_value("scheduler/enqueued/redis")
        return True

    def next_request(self) -> Any:
        request = self.queue.pop()
        if request is not None and self.stats:
            self.stats.inc_value("scheduler/dequeued/redis")
        return request

    def close(self, reason: str) -> None:
        """The queue is shared: never flushed by a worker closing (scrapy-redis would, without PERSIST)."""


def delete_namespace(client: redis.Redis, keys: Keys) -> int:
    """Remove every key of the crawl namespace and its registry entry; returns how many keys."""
    client.hdel(REGISTRY, keys.prefix)
    removed = 0
    for key in client.scan_iter(match=keys.pattern(), count=500):
        removed += int(client.delete(key))
    return removed
