"""robots.txt per RFC 9309, replacing Scrapy's RobotsTxtMiddleware.

Why not the stock middleware (Scrapy 2.19):

* requests queued while robots.txt is still downloading share one Deferred, and every waiter but the
  first receives ``None`` (allow all), so disallowed paths were fetched;
* a robots.txt answered with 5xx or not answered at all counts as allow-all, where RFC 9309 §2.3.1.4
  says the crawler must assume a complete disallow;
* Crawl-delay is ignored.

Here: one fetch per origin that every queued request awaits; 2xx → rules, 4xx → allow all, 5xx/429
→ the host is skipped for the run (IgnoreRequest mentioning robots.txt); a network failure (DNS,
refused, timeout, dropped) also keeps every page of the host unrequested, but re-raises that error
so the pages are recorded as failed for the real cause. Crawl-delay slows the host's downloader
slot, or skips the host when above WEBQA_MAX_CRAWL_DELAY (``inf`` included; ``nan`` is ignored). Successful answers are cached across runs
in WEBQA_ROBOTS_CACHE for WEBQA_ROBOTS_CACHE_TTL seconds.

The decision logic is a set of pure functions (``classify_status``, ``robots_text``, ``decide``, the
cache helpers) so it can be tested without a crawl; ``RobotsPolicyMiddleware`` only fetches,
remembers and applies.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import SplitResult, urlsplit

from protego import Protego
from scrapy import Request, signals
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from pipelines import defaults

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

log = logging.getLogger(__name__)

#: RFC 9309 §2.5: crawlers must parse at least 500 KiB; more is not worth reading.
MAX_ROBOTS_BYTES = 500 * 1024
#: RFC 9309 §2.3.1.2: follow at least five consecutive redirects.
MAX_ROBOTS_REDIRECTS = 5
#: RFC 9309 §2.4: a cached robots.txt should not be used for more than 24 hours.
DEFAULT_CACHE_TTL = 24 * 3600.0
DEFAULT_MAX_CRAWL_DELAY = defaults.MAX_CRAWL_DELAY
CACHE_VERSION = 1

Verdict = Literal["rules", "allow_all", "unreachable"]

DEFAULT_PORTS = {"http": 80, "https": 443}


# -- pure helpers -----------------------------------------------------------------------------------


def origin_of(url: str | SplitResult) -> str:
    """``scheme://host:port``: robots.txt applies per scheme, host and port (RFC 9309 §2.2.1)."""
    parts = urlsplit(url) if isinstance(url, str) else url
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port or DEFAULT_PORTS.get(scheme, 0)
    if ":" in host:  # IPv6 literal: brackets keep the port unambiguous
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def robots_url_for(url: str | SplitResult) -> str:
    parts = urlsplit(url) if isinstance(url, str) else url
    # Userinfo never goes to robots.txt; netloc without it keeps an explicit port as written.
    netloc = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{netloc}/robots.txt"


def product_token(user_agent: str) -> str:
    """The product token robots.txt groups are matched against: ``webqa/0.1 (...)`` → ``webqa``."""
    first = user_agent.strip().split(None, 1)[0] if user_agent.strip() else ""
    token = first.split("/", 1)[0]
    return token.lower() or "*"


def classify_status(status: int) -> Verdict:
    """RFC 9309 §2.3.1: what a robots.txt HTTP status means for the host.

    2xx: rules to parse. 4xx ("unavailable", incl. 401/403): no rules, allow all. 429 is a server
    asking us to back off, and 5xx an error: both "unreachable", so the host is off limits. A 3xx
    that reaches us was not followed (no Location, or too many hops): unavailable, like 4xx.
    """
    if 200 <= status < 300:
        return "rules"
    if status == 429:
        return "unreachable"
    if 300 <= status < 500:
        return "allow_all"
    return "unreachable"


def robots_text(body: bytes, limit: int = MAX_ROBOTS_BYTES) -> str:
    """Decode at most ``limit`` bytes of robots.txt as UTF-8 (RFC 9309 §2.3).

    When the body is cut, the last partial line is dropped: a rule cut mid-value could turn
    ``Allow: /docs/private-but-allowed`` into ``Allow: /``, i.e. widen what we may fetch.
    """
    if len(body) > limit:
        body = body[:limit]
        newline = body.rfind(b"\n")
        body = body[: newline + 1] if newline >= 0 else b""
    text = body.decode("utf-8", errors="replace")
    return text.removeprefix("\ufeff")


def format_seconds(value: float) -> str:
    return "inf" if value >= INFINITE_CRAWL_DELAY else f"{value:g}"


#: What ``Crawl-delay: inf`` is read as: Protego drops non-finite values (that made ``inf`` mean
#: "no delay"), so they are rewritten to the largest finite float, which exceeds every cap.
INFINITE_CRAWL_DELAY = sys.float_info.max
_CRAWL_DELAY_LINE = re.compile(r"^([ \t]*crawl[- ]delay[ \t]*:[ \t]*)([^#\r\n]*)", re.IGNORECASE | re.MULTILINE)


def cap_infinite_delays(text: str) -> str:
    """robots.txt with every ``Crawl-delay`` of +infinity (``inf``, ``Infinity``, ``1e999``) made finite."""

    def finite(match: re.Match[str]) -> str:
        try:
            value = float(match.group(2).strip())
        except ValueError:
            return match.group(0)
        return match.group(1) + repr(INFINITE_CRAWL_DELAY) if value == math.inf else match.group(0)

    return _CRAWL_DELAY_LINE.sub(finite, text)


@dataclass
class RobotsResult:
    """What robots.txt says about one origin: parsed rules, allow all, or unreachable."""

    verdict: Verdict
    #: Why, in words for the log and skip reasons: "HTTP 503", "HTTP 404", "ResponseNeverReceived".
    detail: str
    #: robots.txt text (already cut to MAX_ROBOTS_BYTES) when verdict == "rules".
    body: str | None = None
    #: Unix time of the fetch; drives the cache TTL.
    fetched_at: float = 0.0
    #: Where the text came from: "network" or "cache".
    source: str = "network"
    parser: Protego | None = field(default=None, repr=False, compare=False)
    #: The network error that made robots.txt unreachable (DNS, refused, timeout, dropped): the
    #: host's pages fail with it too, so a dead host shows as failed rather than as a robots skip.
    error: BaseException | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.verdict == "rules" and self.parser is None:
            self.parser = Protego.parse(cap_infinite_delays(self.body or ""))

    @property
    def cacheable(self) -> bool:
        # Failures are never cached: the next run must try again rather than inherit a verdict.
        return self.verdict in ("rules", "allow_all")


def result_from_response(status: int, body: bytes, now: float) -> RobotsResult:
    verdict = classify_status(status)
    detail = f"HTTP {status}"
    if verdict == "rules":
        return RobotsResult("rules", detail, body=robots_text(body), fetched_at=now)
    return RobotsResult(verdict, detail, fetched_at=now)


def result_from_exception(exc: BaseException, now: float) -> RobotsResult:
    """A robots.txt that could not be downloaded.

    Too many redirects is "unavailable" (RFC 9309 §2.3.1.2 lets crawlers treat it like a 4xx);
    everything else (DNS, refused, reset, timeout, cancelled) is "unreachable".
    """
    text = str(exc)
    if isinstance(exc, IgnoreRequest) and "redirect" in text.lower():
        return RobotsResult("allow_all", f"more than {MAX_ROBOTS_REDIRECTS} redirects", fetched_at=now)
    name = type(exc).__name__
    detail = f"{name}: {text}" if text else name
    network_error = None if isinstance(exc, IgnoreRequest) else exc
    return RobotsResult("unreachable", detail[:200], fetched_at=now, error=network_error)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    #: The IgnoreRequest message when not allowed; always mentions "robots.txt" so the spider
    #: records the URL as skipped because of robots.txt.
    message: str | None = None
    #: Stats key suffix when not allowed: disallowed, unreachable, crawl_delay_exceeded.
    stat: str | None = None
    #: Seconds the host asks for between requests, when allowed and it asks.
    crawl_delay: float | None = None
    #: Raise this instead of IgnoreRequest(message): robots.txt failed at the network level.
    error: BaseException | None = None


def decide(result: RobotsResult, url: str, token: str, max_crawl_delay: float) -> Decision:
    """May ``url`` be fetched by the agent ``token`` under ``result``?"""
    if result.verdict == "allow_all":
        return Decision(True)
    if result.verdict == "unreachable":
        return Decision(
            False,
            f"robots.txt unreachable ({result.detail}): host treated as disallowed (RFC 9309)",
            "unreachable",
            error=result.error,
        )
    parser = result.parser
    assert parser is not None  # rules results always carry a parser
    # Protego picks the group whose product token matches ours and falls back to `*`.
    # Protego ignores malformed values (`soon`, `nan`, negative); `inf` arrives as INFINITE_CRAWL_DELAY
    # and, like 1e9, asks for more than any cap: the host is skipped.
    delay = parser.crawl_delay(token)
    if delay is not None and delay > max_crawl_delay:
        return Decision(
            False,
            f"robots.txt Crawl-delay {format_seconds(delay)} s exceeds the maximum "
            f"{format_seconds(max_crawl_delay)} s; host skipped",
            "crawl_delay_exceeded",
        )
    if not parser.can_fetch(url, token):
        return Decision(False, "disallowed by robots.txt", "disallowed")
    return Decision(True, crawl_delay=delay or None)


def _fresh_copy(exc: BaseException) -> BaseException:
    """A copy per request, so that tracebacks of different requests do not pile onto one object."""
    try:
        clone = copy.copy(exc)
    except Exception:  # an exception type that cannot be copied: share the original
        return exc
    clone.__traceback__ = None
    return clone


# -- cache file -------------------------------------------------------------------------------------


def cache_entry(result: RobotsResult) -> dict[str, Any]:
    return {"verdict": result.verdict, "detail": result.detail, "body": result.body, "fetched_at": result.fetched_at}


def result_from_cache(entry: Any, now: float, ttl: float) -> RobotsResult | None:
    """The cached result if it is well formed, cacheable and younger than ``ttl`` seconds."""
    if not isinstance(entry, dict):
        return None
    verdict = entry.get("verdict")
    fetched_at = entry.get("fetched_at")
    body = entry.get("body")
    if verdict not in ("rules", "allow_all") or not isinstance(fetched_at, (int, float)):
        return None
    # A fetch time in the future means a clock jump: trust it no more than an expired one.
    if not (0 <= now - fetched_at < ttl):
        return None
    if verdict == "rules" and not isinstance(body, str):
        return None
    return RobotsResult(
        verdict, str(entry.get("detail") or "cached"), body=body if verdict == "rules" else None,
        fetched_at=float(fetched_at), source="cache",
    )


def load_cache(path: Path, now: float, ttl: float) -> dict[str, RobotsResult]:
    """Fresh entries of the cache file; a missing or unreadable file is an empty cache."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("Ignoring robots.txt cache %s: %s", path, exc)
        return {}
    entries = data.get("entries") if isinstance(data, dict) and data.get("version") == CACHE_VERSION else None
    if not isinstance(entries, dict):
        return {}
    fresh: dict[str, RobotsResult] = {}
    for origin, entry in entries.items():
        result = result_from_cache(entry, now, ttl)
        if result is not None:
            fresh[str(origin)] = result
    return fresh


def write_cache(path: Path, results: dict[str, RobotsResult]) -> None:
    """Write cacheable results atomically: a crash mid-write must not leave half a JSON file."""
    payload = {
        "version": CACHE_VERSION,
        "entries": {origin: cache_entry(r) for origin, r in sorted(results.items()) if r.cacheable},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, ensure_ascii=False, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# -- the middleware ---------------------------------------------------------------------------------


class RobotsPolicyMiddleware:
    """Fetch robots.txt once per origin, hold every request for that origin until it is known,
    then skip what it disallows and slow the host down to its Crawl-delay."""

    # Same as Scrapy's: robots.txt goes before the pages it governs.
    DOWNLOAD_PRIORITY = 1000

    def __init__(
        self,
        crawler: Crawler,
        *,
        token: str,
        max_crawl_delay: float,
        cache_path: Path | None,
        cache_ttl: float,
    ) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.token = token
        self.max_crawl_delay = max_crawl_delay
        self.cache_path = cache_path
        self.cache_ttl = cache_ttl
        self.default_delay = crawler.settings.getfloat("DOWNLOAD_DELAY")
        # Known results for this run, by origin.
        self._results: dict[str, RobotsResult] = {}
        # Origins whose robots.txt is being fetched → one Deferred per waiting request, so that each
        # waiter receives the result itself (the stock middleware chained waiters on one Deferred,
        # and callbacks returning None handed None to all but the first).
        self._pending: dict[str, list[Deferred[RobotsResult]]] = {}
        self._cache: dict[str, RobotsResult] = (
            load_cache(cache_path, time.time(), cache_ttl) if cache_path is not None else {}
        )
        # Downloader slot keys paced by a Crawl-delay (see `_request_done`).
        self._paced_slots: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RobotsPolicyMiddleware:
        settings = crawler.settings
        if not settings.getbool("ROBOTSTXT_OBEY"):
            raise NotConfigured("ROBOTSTXT_OBEY is off")
        token = settings.get("ROBOTSTXT_USER_AGENT") or product_token(settings.get("USER_AGENT") or "")
        cache = settings.get("WEBQA_ROBOTS_CACHE")
        mw = cls(
            crawler,
            token=product_token(token),
            max_crawl_delay=settings.getfloat("WEBQA_MAX_CRAWL_DELAY", DEFAULT_MAX_CRAWL_DELAY),
            cache_path=Path(cache) if cache else None,
            cache_ttl=settings.getfloat("WEBQA_ROBOTS_CACHE_TTL", DEFAULT_CACHE_TTL),
        )
        crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        # Both: response_downloaded fires before the slot is freed (success); request_left_downloader
        # also after failures.
        crawler.signals.connect(mw._request_done, signal=signals.response_downloaded)
        crawler.signals.connect(mw._request_done, signal=signals.request_left_downloader)
        return mw

    async def process_request(self, request: Request) -> None:
        if request.meta.get("dont_obey_robotstxt"):
            return None
        parts = urlsplit(request.url)
        if parts.scheme not in ("http", "https"):
            return None
        decision = await self.decision(request.url)
        if not decision.allowed:
            assert decision.message is not None
            self._inc(f"webqa/robots/{decision.stat}")
            log.debug("Skipping %s: %s", request.url, decision.message)
            if decision.error is not None:
                # The page is not requested either way (RFC 9309 §2.3.1.4), but a DNS failure or a
                # refused connection is the host's state, not a robots.txt rule: the spider records
                # it as failed with its usual reason, and the run's exit code shows a dead host.
                # No retries: they would only replay the same stored error.
                request.meta["dont_retry"] = True
                raise _fresh_copy(decision.error)
            raise IgnoreRequest(decision.message)
        if decision.crawl_delay:
            self._apply_crawl_delay(request, decision.crawl_delay)
        return None

    async def decision(self, url: str) -> Decision:
        """What robots.txt says about ``url`` (fetched once per origin); the browser's requests ask here too."""
        return decide(await self._result_for(urlsplit(url)), url, self.token, self.max_crawl_delay)

    async def _result_for(self, parts: SplitResult) -> RobotsResult:
        origin = origin_of(parts)
        known = self._results.get(origin)
        if known is not None:
            return known
        waiters = self._pending.get(origin)
        if waiters is not None:
            waiter: Deferred[RobotsResult] = Deferred()
            waiters.append(waiter)
            return await maybe_deferred_to_future(waiter)
        cached = self._cache.get(origin)
        if cached is not None:
            self._inc("webqa/robots/cache_hits")
            log.debug("robots.txt for %s from the cache (fetched %s)", origin, cached.fetched_at)
            self._results[origin] = cached
            return cached

        self._pending[origin] = []
        result: RobotsResult | None = None
        try:
            result = await self._fetch(robots_url_for(parts))
        finally:
            if result is None:  # cancelled (shutdown): nobody may take that as permission
                result = RobotsResult("unreachable", "fetch cancelled", fetched_at=time.time())
            self._results[origin] = result
            # Fire after storing: a waiter resumed synchronously must find the result, not re-fetch.
            for waiter in self._pending.pop(origin, []):
                if not waiter.called:  # a waiter cancelled at shutdown has already fired
                    waiter.callback(result)
        return result

    async def _fetch(self, url: str) -> RobotsResult:
        assert self.crawler.engine is not None
        request = Request(
            url,
            priority=self.DOWNLOAD_PRIORITY,
            callback=NO_CALLBACK,
            dont_filter=True,
            meta={
                "dont_obey_robotstxt": True,
                # RFC 9309 asks for five hops; RedirectMiddleware (left enabled) honours this cap
                # below REDIRECT_MAX_TIMES.
                "redirect_ttl": MAX_ROBOTS_REDIRECTS,
            },
        )
        self._inc("webqa/robots/requests")
        try:
            response = await self.crawler.engine.download_async(request)
        except Exception as exc:  # every failure has a verdict; none may escape as "allowed"
            result = result_from_exception(exc, time.time())
            log.debug("robots.txt %s failed: %r", url, exc)
        else:
            self._inc(f"webqa/robots/status/{response.status}")
            result = result_from_response(response.status, response.body, time.time())
            log.debug("robots.txt %s: HTTP %s → %s", url, response.status, result.verdict)
        if result.verdict == "unreachable":
            log.info("robots.txt %s unreachable (%s): skipping the host for this run", url, result.detail)
        return result

    def _apply_crawl_delay(self, request: Request, crawl_delay: float) -> None:
        """Make the host's downloader slot wait at least ``crawl_delay`` between requests.

        Both the live slot (if any) and the per-slot settings are raised: the first request for a
        host cached from an earlier run arrives before its slot exists, and Scrapy garbage-collects
        idle slots and rebuilds them from ``per_slot_settings``.
        """
        assert self.crawler.engine is not None
        downloader = self.crawler.engine.downloader
        key = downloader.get_slot_key(request)
        configured = dict(downloader.per_slot_settings.get(key, {}))
        delay = max(float(configured.get("delay", self.default_delay)), crawl_delay)
        if configured.get("delay") != delay or configured.get("jitter") != 0:
            log.debug("Crawl-delay for %s: %s s between requests", key, delay)
            # No jitter: Crawl-delay is a minimum, and jitter would go below it half of the time.
            downloader.per_slot_settings[key] = {**configured, "delay": delay, "jitter": 0}
        slot = downloader.slots.get(key)
        if slot is not None and (slot.delay < delay or slot.jitter):
            slot.delay = delay
            slot.jitter = 0
        if key not in self._paced_slots:
            self._paced_slots.add(key)
            if slot is not None:
                # The robots.txt request just finished on this slot: count the delay from now.
                slot.lastseen = max(slot.lastseen, time.monotonic())

    def _request_done(self, request: Request, **kwargs: Any) -> None:
        """Count a paced slot's delay from the end of its last download, not from its start.

        Scrapy measures DOWNLOAD_DELAY from when a request leaves the slot queue, so a request that
        spent long connecting (a fresh connection, a slow network) can reach the server less than
        the delay before the next one. A Crawl-delay is the site owner's explicit request, so for
        those hosts the next request waits the full delay after the previous one has finished:
        the gap the server sees is then at least the Crawl-delay.
        """
        key = request.meta.get("download_slot")
        if key is None or key not in self._paced_slots or self.crawler.engine is None:
            return
        slot = self.crawler.engine.downloader.slots.get(key)
        if slot is not None:
            # A latercall already scheduled from the old value re-checks the delay when it fires.
            slot.lastseen = max(slot.lastseen, time.monotonic())

    def spider_closed(self) -> None:
        if self.cache_path is None:
            return
        now = time.time()
        merged = {o: r for o, r in self._cache.items() if now - r.fetched_at < self.cache_ttl}
        merged.update({o: r for o, r in self._results.items() if r.cacheable})
        try:
            write_cache(self.cache_path, merged)
        except OSError as exc:
            log.warning("Cannot write robots.txt cache %s: %s", self.cache_path, exc)

    def _inc(self, key: str) -> None:
        if self.stats is not None:
            self.stats.inc_value(key)
