"""What comes out of Redis is input: every entry parsed, checked and bounded before use.

Whoever can write to the crawl's Redis can put anything in its lists and keys. Nothing read from there
is trusted to be what webqa wrote: an item, a queued request, the crawl's record and its config each
go through a parser here that checks the shape (JSON object, each field of the right type), a size
cap, and, for requests, an allow-list of what a request may carry (``meta``, headers, callbacks), so
no entry can switch off robots.txt, the size cap, the SSRF guard or the delay of the worker that
fetches it. A bad entry raises :class:`BadEntry` with a short reason; callers move it to the crawl's
dead-letter list (:func:`dead_letter`), count it and go on: it never crashes a process and is never
handed out again.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import types
import typing
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from crawler.distributed.backlog import MAX_BACKLOG_WAIT
from pipelines.chunk import Chunk
from pipelines.errors import ExitCode, WebqaError
from pipelines.items import ExtractedPage, FetchedPage, FetchOutcome
from pipelines.redact import inert

log = logging.getLogger(__name__)

#: A queued request is a URL and a little meta: far below this.
MAX_REQUEST_BYTES = 64 * 1024
#: The crawl's record and its config (stored links and validators of up to max_pages pages).
MAX_CONFIG_BYTES = 64 * 1024 * 1024
#: The dead-letter list keeps the newest entries, each cut to this many bytes, for a week.
DEAD_LETTER_KEEP = 100
DEAD_LETTER_ENTRY_BYTES = 4096
DEAD_LETTER_TTL = 7 * 24 * 3600
#: How much of a reason a log line or a fetch_log row quotes.
REASON_CHARS = 200


class BadEntry(ValueError):
    """An entry read from Redis that is not what webqa writes there; ``str()`` is a short reason."""


class RedisEntryError(WebqaError):
    """A key the crawl cannot go on without (its record or config) holds no valid entry (exit 3)."""

    exit_code = ExitCode.FAILED


def max_item_bytes(max_bytes: int) -> int:
    """The largest item a worker can send: the HTML (JSON-escaped), its text and chunks, with room."""
    return 16 * max(max_bytes, 1024 * 1024) + 16 * 1024 * 1024


def _reason(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if not isinstance(exc, BadEntry) else str(exc)
    return inert(text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…", one_line=True)


def _load(raw: bytes, limit: int, what: str) -> Any:
    if not isinstance(raw, (bytes, str)):
        raise BadEntry(f"{what} is not a string")
    if len(raw) > limit:
        raise BadEntry(f"{what} of {len(raw)} bytes is larger than the {limit} bytes allowed")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # RecursionError: [[[[…]]]] nested past Python's stack
        raise BadEntry(f"{what} is not JSON ({_reason(exc)})") from None


# -- typed fields, from the dataclasses themselves ----------------------------------------------------


def _check(value: Any, hint: Any, where: str) -> Any:
    """``value`` as ``hint`` asks (str, int, float, bool, None, X | None, list[X], tuple[X, ...], datetime,
    a dataclass); raises BadEntry naming ``where``."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _check(value, option, where)
            except BadEntry:
                continue
        raise BadEntry(f"{where} has the wrong type ({type(value).__name__})")
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise BadEntry(f"{where} is not a list")
        (item, *_rest) = typing.get_args(hint) or (Any,)
        checked = [_check(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(checked) if origin is tuple else checked
    if hint is Any:
        return value
    if hint is datetime:
        if not isinstance(value, str):
            raise BadEntry(f"{where} is not a date")
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            raise BadEntry(f"{where} is not a date") from None
    if dataclasses.is_dataclass(hint):
        return _dataclass(value, hint, where)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float) and isinstance(value, bool):
        raise BadEntry(f"{where} is not a number")
    if isinstance(hint, type) and isinstance(value, hint):
        return value
    raise BadEntry(f"{where} is {type(value).__name__}, not {getattr(hint, '__name__', hint)}")


def _dataclass(value: Any, cls: type, where: str, skip: tuple[str, ...] = ()) -> Any:
    if not isinstance(value, dict):
        raise BadEntry(f"{where} is not an object")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)} - set(skip)
    unknown = sorted(set(value) - names)
    if unknown:
        raise BadEntry(f"{where} has an unknown field {unknown[0][:40]!r}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if f.name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise BadEntry(f"{where} lacks {f.name!r}")
            continue
        kwargs[f.name] = _check(value[f.name], hints[f.name], f"{where}.{f.name}")
    return kwargs if skip else cls(**kwargs)


def _http_url(value: str, where: str) -> None:
    try:
        parts = urlsplit(value)
    except ValueError:
        raise BadEntry(f"{where} is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadEntry(f"{where} is not an http(s) URL")


def parse_item(raw: bytes, max_bytes: int) -> ExtractedPage | FetchOutcome:
    """An item a worker handed over (``items.encode_item``), checked field by field."""
    payload = _load(raw, max_item_bytes(max_bytes), "item")
    if not isinstance(payload, dict):
        raise BadEntry("item is not a JSON object")
    kind = payload.pop("kind", None)
    if kind == "outcome":
        item = _check(payload, FetchOutcome, "item")
        if item.outcome not in ("skipped", "failed", "not_modified"):
            raise BadEntry(f"item.outcome {item.outcome[:40]!r} is not skipped, failed or not_modified")
        return typing.cast(FetchOutcome, item)
    if kind != "page":
        raise BadEntry("item.kind is neither 'page' nor 'outcome'")
    page = _check(payload.pop("page", None), FetchedPage, "item.page")
    _http_url(page.url, "item.page.url")
    chunks = _check(payload.pop("chunks", []), list[Chunk], "item.chunks")
    rest = _dataclass(payload, ExtractedPage, "item", skip=("page", "chunks"))
    return ExtractedPage(page=page, chunks=chunks, **rest)


# -- queued requests ---------------------------------------------------------------------------------

#: The request meta a worker takes from the queue; every other key (dont_obey_robotstxt,
#: download_maxsize, download_timeout, proxy, download_slot, …) is dropped.
ALLOWED_META = frozenset({
    "webqa_id", "webqa_depth", "handle_httpstatus_list", "redirect_times", "redirect_ttl", "redirect_urls",
    "redirect_reasons", "retry_times", "depth",
})
#: Headers a queued request may carry: the conditional GET's validators (set before a retry is queued).
ALLOWED_HEADERS = frozenset({b"if-none-match", b"if-modified-since", b"referer"})
#: The spider callbacks a request may name (any other method of the spider must not be callable).
ALLOWED_CALLBACKS = {"callback": (None, "parse"), "errback": (None, "on_error")}


def checked_request(data: bytes, loads: typing.Callable[[bytes], Any]) -> dict[str, Any]:
    """A queued request's ``Request.to_dict()`` as decoded by ``loads``, reduced to what a worker may be
    told: an http(s) GET of a URL with the spider's own callbacks and the allowed meta and headers."""
    if len(data) > MAX_REQUEST_BYTES:
        raise BadEntry(f"request of {len(data)} bytes is larger than the {MAX_REQUEST_BYTES} bytes allowed")
    try:
        request = loads(data)
    except (ValueError, RecursionError, TypeError) as exc:
        raise BadEntry(f"request is not JSON ({_reason(exc)})") from None
    if not isinstance(request, dict):
        raise BadEntry("request is not a JSON object")
    url = request.get("url")
    if not isinstance(url, str):
        raise BadEntry("request has no URL")
    _http_url(url, "request.url")
    if str(request.get("method") or "GET").upper() != "GET" or request.get("body"):
        raise BadEntry("request is not a GET without a body")
    for key, allowed in ALLOWED_CALLBACKS.items():
        if request.get(key) not in allowed:
            raise BadEntry(f"request.{key} {str(request.get(key))[:40]!r} is not the spider's")
    meta = request.get("meta") or {}
    cb_kwargs = request.get("cb_kwargs") or {}
    headers = request.get("headers") or {}
    if not (isinstance(meta, dict) and isinstance(cb_kwargs, dict) and isinstance(headers, dict)):
        raise BadEntry("request meta, cb_kwargs or headers is not an object")
    if set(cb_kwargs) - {"listed_url"} or not isinstance(cb_kwargs.get("listed_url", ""), str):
        raise BadEntry("request.cb_kwargs holds more than listed_url")
    for key in ("webqa_depth", "depth", "redirect_times", "redirect_ttl", "retry_times"):
        value = meta.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 1000:
            raise BadEntry(f"request.meta.{key} is not a small whole number ≥ 0")
    for key in ("handle_httpstatus_list", "redirect_urls", "redirect_reasons"):
        if not isinstance(meta.get(key, []), list):
            raise BadEntry(f"request.meta.{key} is not a list")
    if not all(isinstance(s, int) and 100 <= s <= 599 for s in meta.get("handle_httpstatus_list", [])):
        raise BadEntry("request.meta.handle_httpstatus_list is not a list of HTTP statuses")
    dropped = sorted(str(k)[:40] for k in meta if k not in ALLOWED_META)
    if dropped:
        log.warning("Dropping request meta from Redis for %s: %s (not allowed from the queue)",
                    inert(url[:200], one_line=True), ", ".join(dropped[:5]))
    priority = request.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool) or abs(priority) > 1000:
        raise BadEntry("request.priority is not a small whole number")
    return {
        "url": url, "callback": request.get("callback"), "errback": request.get("errback"), "method": "GET",
        "headers": {k: v for k, v in headers.items() if isinstance(k, bytes) and k.lower() in ALLOWED_HEADERS},
        "meta": {k: v for k, v in meta.items() if k in ALLOWED_META}, "cb_kwargs": cb_kwargs,
        "priority": priority, "dont_filter": True, "encoding": "utf-8", "flags": [],
    }


# -- the crawl's record and config -------------------------------------------------------------------

_CRAWL_FIELDS = {"id": str, "state": str, "db": str, "crawl_run_id": int}


def parse_crawl(raw: bytes | None, key: str) -> dict[str, Any] | None:
    """The crawl's record (``Keys.crawl``), or None when there is none; RedisEntryError when it is garbage."""
    if raw is None:
        return None
    try:
        crawl = _load(raw, MAX_REQUEST_BYTES, f"Redis key {key}")
        if not isinstance(crawl, dict):
            raise BadEntry(f"Redis key {key} is not a JSON object")
        for name, kind in _CRAWL_FIELDS.items():
            if not isinstance(crawl.get(name), kind) or isinstance(crawl.get(name), bool):
                raise BadEntry(f"Redis key {key} has no valid {name!r}")
    except BadEntry as exc:
        raise RedisEntryError(f"{exc}: not a crawl webqa published; remove it (redis-cli del {key}) and rerun") from None
    return crawl


#: The config a worker crawls by (coordinator._config): each key's type. Lists and maps are checked below.
_CONFIG_FIELDS: dict[str, Any] = {
    "delay": (int, float), "contact": (str, type(None)), "obey_robots": bool, "max_crawl_delay": (int, float),
    "allow_private_networks": bool, "timeout": (int, float), "max_bytes": int, "depth": int, "max_pages": int,
    "allow": list, "deny": list, "follow": str, "stored_links": dict, "fresh": list, "validators": dict,
    "lease_seconds": (int, float), "hosts": dict,
}


def parse_config(raw: bytes | None, key: str) -> dict[str, Any]:
    """The crawl's config (``Keys.config``) checked key by key; RedisEntryError (one line) when it is not one."""
    try:
        if raw is None:
            raise BadEntry(f"Redis key {key} is missing")
        config = _load(raw, MAX_CONFIG_BYTES, f"Redis key {key}")
        if not isinstance(config, dict):
            raise BadEntry(f"Redis key {key} is not a JSON object")
        for name, kinds in _CONFIG_FIELDS.items():
            value = config.get(name)
            if not isinstance(value, kinds) or (isinstance(value, bool) and kinds is not bool):
                raise BadEntry(f"Redis key {key}: {name!r} is missing or of the wrong type")
        if config["delay"] < 0 or config["timeout"] <= 0 or config["max_bytes"] < 0 or config["lease_seconds"] <= 0:
            raise BadEntry(f"Redis key {key}: a delay, timeout, size or lease is out of range")
        # Optional (a coordinator older than the backlog's bound publishes none): a whole number of items
        # (0: no bound) and a positive wait of at most an hour.
        backlog, backlog_wait = config.get("backlog", 0), config.get("backlog_wait", 1)
        if (not isinstance(backlog, int) or isinstance(backlog, bool) or backlog < 0
                or not isinstance(backlog_wait, (int, float)) or isinstance(backlog_wait, bool)
                or not 0 < backlog_wait <= MAX_BACKLOG_WAIT):
            raise BadEntry(f"Redis key {key}: 'backlog' or 'backlog_wait' is out of range")
        if config["follow"] not in ("same_host", "none"):
            raise BadEntry(f"Redis key {key}: 'follow' is neither same_host nor none")
        for name in ("allow", "deny", "fresh"):
            if not all(isinstance(v, str) for v in config[name]):
                raise BadEntry(f"Redis key {key}: {name!r} is not a list of strings")
        for host, policy in config["hosts"].items():
            if not isinstance(policy, dict) or not all(
                    v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0)
                    for v in (policy.get("delay"), policy.get("concurrency"))):
                raise BadEntry(f"Redis key {key}: the policy of host {str(host)[:40]!r} is not valid")
        if not all(isinstance(v, list) and all(isinstance(u, str) for u in v) for v in config["stored_links"].values()):
            raise BadEntry(f"Redis key {key}: 'stored_links' is not a map of URL lists")
        if not all(isinstance(v, list) and len(v) == 2 and all(x is None or isinstance(x, str) for x in v)
                   for v in config["validators"].values()):
            raise BadEntry(f"Redis key {key}: 'validators' is not a map of [etag, last_modified]")
    except BadEntry as exc:
        raise RedisEntryError(f"{exc}: not a crawl config webqa published; remove the crawl's keys "
                              f"(redis-cli --scan --pattern '{key.rsplit(':', 1)[0]}:*' | xargs redis-cli del) and "
                              "rerun its coordinator") from None
    return config


# -- the dead-letter list -----------------------------------------------------------------------------


def dead_letter_key(prefix: str) -> str:
    """Outside the crawl's namespace (``webqa:deadletter:<job>-<hash>``): it outlives the crawl, for a week."""
    head, _, name = prefix.partition(":")
    return f"{head}:deadletter:{name}"


def dead_letter(client: Any, prefix: str, raw: bytes, why: str, source: str, pipe: Any = None) -> None:
    """Keep a bad entry (cut to DEAD_LETTER_ENTRY_BYTES) in the dead-letter list with why, and say so in one
    bounded line. With ``pipe``, queued on that pipeline (the caller executes it with its own steps)."""
    key = dead_letter_key(prefix)
    record = json.dumps({"from": source, "why": why, "bytes": len(raw),
                         "entry": bytes(raw[:DEAD_LETTER_ENTRY_BYTES]).decode("utf-8", "replace")})
    target = pipe if pipe is not None else client.pipeline(transaction=True)
    target.rpush(key, record)
    target.ltrim(key, -DEAD_LETTER_KEEP, -1)
    target.expire(key, DEAD_LETTER_TTL)
    if pipe is None:
        target.execute()
    log.warning("Invalid entry in Redis %s moved to %s: %s", source, key, why)


def describe(exc: BaseException) -> str:
    """A bad entry's reason, bounded and printable."""
    return _reason(exc)
