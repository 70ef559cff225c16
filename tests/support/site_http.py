"""What the loopback test site says, apart from how it listens: content types, HTTP dates, entity tags,
gzip negotiation, the small pages it answers errors with, and the records of what it was asked and what it
was told to answer (tests/support/site_server.py scripts them, tests/support/site_handler.py serves them)."""

from __future__ import annotations

import email.utils
import hashlib
import html
import mimetypes
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: Last-Modified of routes unless set: fixed so that runs are reproducible.
FIXED_LAST_MODIFIED: float = 1704067200.0  # 2024-01-01T00:00:00Z
#: A custom handler: gets the request, returns (status, headers, body).
Handler = Callable[["RequestInfo"], tuple[int, Mapping[str, str], bytes]]

# Own table first so content types do not depend on the host's /etc/mime.types.
_CONTENT_TYPES: dict[str, str] = {
    ".html": "text/html; charset=utf-8",
    ".htm": "text/html; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".rst": "text/plain; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".json": "application/json",
    ".xml": "application/xml",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".ico": "image/vnd.microsoft.icon",
    ".webp": "image/webp",
    ".woff": "font/woff",
    ".woff2": "font/woff2",
    ".pdf": "application/pdf",
    ".zip": "application/zip",
    ".gz": "application/gzip",
    ".bz2": "application/x-bzip2",
    ".inv": "application/octet-stream",
}


def content_type_for(path: str | os.PathLike[str]) -> str:
    """Content-Type for a file name, by extension."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext in _CONTENT_TYPES:
        return _CONTENT_TYPES[ext]
    guessed, _ = mimetypes.guess_type(os.fspath(path))
    if guessed is None:
        return "application/octet-stream"
    return guessed + "; charset=utf-8" if guessed.startswith("text/") else guessed


def to_bytes(body: str | bytes) -> bytes:
    return body.encode("utf-8") if isinstance(body, str) else bytes(body)


def strong_etag(body: bytes) -> str:
    return '"' + hashlib.sha1(body).hexdigest() + '"'


def http_date(ts: float) -> str:
    return email.utils.formatdate(ts, usegmt=True)


def parse_http_date(value: str) -> float | None:
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed is None:  # pragma: no cover - older Pythons returned None
        return None
    return parsed.timestamp()


def accepts_gzip(accept_encoding: str | None) -> bool:
    """True if Accept-Encoding allows gzip (honours q=0 as a refusal)."""
    if not accept_encoding:
        return False
    for part in accept_encoding.split(","):
        name, _, params = part.strip().partition(";")
        if name.strip().lower() not in ("gzip", "x-gzip", "*"):
            continue
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if q > 0:
            return True
    return False


def path_only(target: str) -> str:
    return target.split("?", 1)[0].split("#", 1)[0]


def small_html(title: str, text: str) -> bytes:
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>"
        f"{html.escape(title)}</title></head><body><h1>{html.escape(title)}</h1>"
        f"<p>{html.escape(text)}</p></body></html>\n"
    ).encode("utf-8")


@dataclass
class RequestRecord:
    """One request as the server saw it.

    ``time`` is ``time.monotonic()`` when the request line arrived, before any
    route delay, so gaps between records are the client's pacing, not ours.
    ``status`` is None while the answer is still pending and stays None when
    the route dropped the connection without answering.
    """

    host: str
    path: str  # the request target as sent: percent-encoding and query kept
    method: str
    headers: dict[str, str]  # lower-case names; repeated headers joined by ", "
    time: float
    status: int | None = None


@dataclass(frozen=True)
class RequestInfo:
    """What a custom ``handler=`` route receives."""

    host: str
    target: str  # as sent, with query
    path: str  # target without query
    query: dict[str, list[str]]
    method: str
    headers: dict[str, str]  # lower-case names
    body: bytes


@dataclass(frozen=True)
class Route:
    status: int = 200
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str | None = "text/html; charset=utf-8"
    handler: Handler | None = None
    gzip: bool = False
    conditional: bool = True
    last_modified: float = FIXED_LAST_MODIFIED
    delay: float = 0.0
    chunk_size: int = 0  # > 0: trickle the body in chunks of this size
    chunk_interval: float = 0.0
    drop: bool = False
    reset: bool = False


@dataclass(frozen=True)
class StaticDir:
    prefix: str  # always ends with "/"
    directory: Path
    gzip: bool


@dataclass
class HostState:
    routes: dict[str, Route] = field(default_factory=dict)
    static: list[StaticDir] = field(default_factory=list)
