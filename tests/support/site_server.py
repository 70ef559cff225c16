"""A real multi-host HTTP test site on loopback, with a request log for politeness assertions.

Crawl tests need a server the crawler cannot tell from a real one: a separate
socket per "host" (127.0.0.1, 127.0.0.2, ... are all loopback on Linux, so per-host
politeness is observable without DNS tricks), robots.txt, conditional GET,
redirects and the misbehaving cases (slow, trickling, dropped connections).
The request log records when each request line arrived, so tests can assert
on the delays the crawler kept between requests to one host.

Usage in tests::

    def test_x(site: SiteServer) -> None:
        site.add(0, "/robots.txt", body="User-agent: *\\nDisallow: /private/\\n",
                 content_type="text/plain")
        site.add(1, "/a.html", body="<html>...</html>")
        url = site.url(1, "/a.html")            # http://127.0.0.2:PORT/a.html
        ...
        assert site.min_gap("127.0.0.2") >= 1.0

As a script (manual checks, benchmarks)::

    python -m tests.support.site_server --dir "$(python -m tests.support.corpus)" \\
        --hosts 127.0.0.1,127.0.0.2 --port 8765
"""

from __future__ import annotations

import argparse
import dataclasses
import email.utils
import gzip as gzip_module
import hashlib
import html
import math
import mimetypes
import os
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
import traceback
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.support.corpus import CORPUS_DIR

try:  # The script mode must work where only the runtime deps are installed.
    import pytest
except ImportError:  # pragma: no cover - exercised only outside the test venv
    pytest = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_HOSTS",
    "FIXED_LAST_MODIFIED",
    "PYTHON_DOCS_DIR",
    "RequestInfo",
    "RequestRecord",
    "SiteServer",
    "content_type_for",
]

DEFAULT_HOSTS: tuple[str, ...] = ("127.0.0.1", "127.0.0.2")
#: Debian's python3.11-doc manual; the crawl corpus for the `corpus` marker (see tests/support/corpus.py).
PYTHON_DOCS_DIR = CORPUS_DIR
#: Last-Modified of routes unless set: fixed so that runs are reproducible.
FIXED_LAST_MODIFIED: float = 1704067200.0  # 2024-01-01T00:00:00Z

HostRef = int | str
#: A custom handler: gets the request, returns (status, headers, body).
Handler = Callable[["RequestInfo"], tuple[int, Mapping[str, str], bytes]]

# How long an idle keep-alive connection may hold a handler thread. Long enough
# for any test, short enough that leaked connections do not pile up threads.
_IDLE_TIMEOUT = 30.0
_BIND_ATTEMPTS = 20
# serve_forever notices shutdown() only between polls: this bounds stop(), which
# runs in every test's teardown. 50 idle wake-ups a second per host cost nothing.
_POLL_INTERVAL = 0.02

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


def _to_bytes(body: str | bytes) -> bytes:
    return body.encode("utf-8") if isinstance(body, str) else bytes(body)


def _strong_etag(body: bytes) -> str:
    return '"' + hashlib.sha1(body).hexdigest() + '"'


def _http_date(ts: float) -> str:
    return email.utils.formatdate(ts, usegmt=True)


def _parse_http_date(value: str) -> float | None:
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed is None:  # pragma: no cover - older Pythons returned None
        return None
    return parsed.timestamp()


def _accepts_gzip(accept_encoding: str | None) -> bool:
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


def _path_only(target: str) -> str:
    return target.split("?", 1)[0].split("#", 1)[0]


def _small_html(title: str, text: str) -> bytes:
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
class _Route:
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
class _StaticDir:
    prefix: str  # always ends with "/"
    directory: Path
    gzip: bool


@dataclass
class _HostState:
    routes: dict[str, _Route] = field(default_factory=dict)
    static: list[_StaticDir] = field(default_factory=list)


class _HostHTTPServer(ThreadingHTTPServer):
    """One listening socket for one loopback address."""

    daemon_threads = True
    # Benchmarks open many connections at once; the default backlog of 5 drops SYNs.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], site: SiteServer) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.site = site
        self.host = address[0]
        super().__init__(address, _Handler, bind_and_activate=False)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS lookup that
        # can stall for seconds in sandboxes; the name is never used here.
        socketserver.TCPServer.server_bind(self)
        self.server_name = self.host
        self.server_port = self.server_address[1]

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Keep stderr quiet; failures are kept for tests to inspect.
        self.site._note_error(traceback.format_exc())


class _Handler(BaseHTTPRequestHandler):
    server: _HostHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "webqa-site/1.0"
    sys_version = ""
    # The stdlib default (HTTP/0.9) makes error replies to garbage request lines
    # omit the status line; a status line is what a client test wants to see.
    default_request_version = "HTTP/1.0"
    timeout = _IDLE_TIMEOUT
    # Headers and body go out in separate writes (and trickle sends tiny chunks):
    # without TCP_NODELAY, Nagle + delayed ACK add ~40 ms stalls on loopback.
    disable_nagle_algorithm = True

    _record: RequestRecord | None = None
    _last_status: int | None = None
    _received: float = 0.0

    # -- connection bookkeeping ------------------------------------------------

    def setup(self) -> None:
        super().setup()
        self.server.site._track(self.request, add=True)

    def finish(self) -> None:
        self.server.site._track(self.request, add=False)
        try:
            super().finish()
        except OSError:
            pass  # the peer or stop() already closed it

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: no per-request stderr output."""

    def send_response_only(self, code: int, message: str | None = None) -> None:
        # Runs before any byte of the answer is written, so a client that has
        # its response always finds the record (with status) in the log.
        self._last_status = code
        if code >= 200:
            if self._record is None:
                # The stdlib parser rejected the request before _dispatch.
                words = (getattr(self, "requestline", "") or "").split()
                self._record = RequestRecord(
                    host=self.server.host,
                    path=words[1] if len(words) >= 2 else "",
                    method=words[0] if words else "",
                    headers={},
                    time=self._received,
                )
                self.server.site._append(self._record)
            self._record.status = code
        super().send_response_only(code, message)

    # -- request loop ----------------------------------------------------------

    def handle_one_request(self) -> None:
        # Same as the stdlib version, but timestamps the request line as soon as
        # it arrives (the log's time must not include our own route delays) and
        # sends every method to one dispatcher.
        self._record = None
        self._last_status = None
        try:
            self.raw_requestline = self.rfile.readline(65537)
        except (TimeoutError, OSError):
            self.close_connection = True  # idle keep-alive timeout or stop()
            return
        received = self._received = time.monotonic()
        if not self.raw_requestline:
            self.close_connection = True
            return
        if len(self.raw_requestline) > 65536:
            self.requestline = ""
            self.request_version = ""
            self.command = ""
            self.send_error(414)  # logged by send_response_only
            self.close_connection = True
            return
        if not self.parse_request():  # it already sent (and logged) the 4xx
            self.close_connection = True
            return
        # parse_request collapses a leading "//"; the log and the routes must
        # see the target exactly as the client sent it.
        words = self.requestline.split()
        if len(words) >= 2:
            self.path = words[1]
        try:
            self._dispatch(received)
            if not self.wfile.closed:
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True  # the client gave up: normal for timeout tests

    def _lower_headers(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            out[key] = f"{out[key]}, {value}" if key in out else value
        return out

    def _read_request_body(self, headers: Mapping[str, str]) -> bytes:
        if "transfer-encoding" in headers:
            # Chunked uploads are not needed by any test; answer and close so the
            # unread body cannot be parsed as the next request.
            self.close_connection = True
            return b""
        try:
            length = int(headers.get("content-length", "0") or "0")
        except ValueError:
            self.close_connection = True
            return b""
        return self.rfile.read(length) if length > 0 else b""

    def _dispatch(self, received: float) -> None:
        site = self.server.site
        host = self.server.host
        headers = self._lower_headers()
        record = RequestRecord(
            host=host, path=self.path, method=self.command, headers=headers, time=received
        )
        self._record = record
        site._append(record)
        request_body = self._read_request_body(headers)
        head_only = self.command == "HEAD"
        try:
            found = site._lookup(host, self.path)
            if isinstance(found, _Route):
                self._serve_route(found, headers, request_body, head_only)
            elif found is not None:
                static_dir, relpath = found
                self._serve_static(static_dir, relpath, headers, head_only)
            else:
                self._send_simple(404, "Not Found", _path_only(self.path), head_only)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            raise
        except Exception:  # a buggy test handler must not hang the client
            site._note_error(traceback.format_exc())
            self.close_connection = True
            if self._last_status is None:
                self._send_simple(500, "Internal Server Error", "handler failed", head_only)

    # -- responses -------------------------------------------------------------

    def _send(
        self,
        status: int,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        head_only: bool,
        *,
        chunk_size: int = 0,
        chunk_interval: float = 0.0,
    ) -> None:
        """Send a complete response; Content-Length is added unless given."""
        self.send_response(status)
        has_length = False
        for name, value in headers:
            has_length = has_length or name.lower() == "content-length"
            self.send_header(name, value)
        bodyless = status in (204, 304) or 100 <= status < 200
        if not has_length and not bodyless:
            self.send_header("Content-Length", str(len(body)))
        if bodyless or head_only:
            body = b""
        # One write for headers + body when not trickling: fewer syscalls, and the
        # client never sees the headers without the body for ordinary routes.
        self._headers_buffer.append(b"\r\n")
        head = b"".join(self._headers_buffer)
        self._headers_buffer = []
        if chunk_size <= 0 or not body:
            self.wfile.write(head + body)
            return
        self.wfile.write(head)
        stopping = self.server.site._stopping
        for start in range(0, len(body), chunk_size):
            if stopping.wait(chunk_interval):
                self.close_connection = True  # stop() wants the thread back
                return
            self.wfile.write(body[start : start + chunk_size])

    def _send_simple(self, status: int, title: str, text: str, head_only: bool) -> None:
        self._send(
            status,
            [("Content-Type", "text/html; charset=utf-8")],
            _small_html(f"{status} {title}", text),
            head_only,
        )

    def _not_modified(self, headers: Mapping[str, str], etag: str | None, last_modified: float | None) -> bool:
        """RFC 9110 §13.2.2: If-None-Match wins; If-Modified-Since only without it."""
        if self.command not in ("GET", "HEAD"):
            return False
        inm = headers.get("if-none-match")
        if inm is not None:
            if etag is None:
                return False
            if inm.strip() == "*":
                return True
            # Weak comparison, as If-None-Match requires.
            wanted = {tag.strip().removeprefix("W/") for tag in inm.split(",")}
            return etag.removeprefix("W/") in wanted
        ims = headers.get("if-modified-since")
        if ims is not None and last_modified is not None:
            since = _parse_http_date(ims)
            return since is not None and math.floor(last_modified) <= since
        return False

    def _serve_entity(
        self,
        *,
        status: int,
        body: bytes,
        content_type: str | None,
        extra: Sequence[tuple[str, str]],
        conditional: bool,
        last_modified: float | None,
        use_gzip: bool,
        request_headers: Mapping[str, str],
        head_only: bool,
        chunk_size: int = 0,
        chunk_interval: float = 0.0,
    ) -> None:
        """A body response with validators, 304 handling and optional gzip."""
        out: list[tuple[str, str]] = []
        lowered = {name.lower(): value for name, value in extra}
        etag: str | None = None
        lm_value: float | None = None
        if status == 200 and conditional:
            # Explicit headers override the generated validators.
            etag = lowered.get("etag") or _strong_etag(body)
            if "last-modified" in lowered:
                lm_value = _parse_http_date(lowered["last-modified"])
            else:
                lm_value = last_modified
            if "etag" not in lowered:
                out.append(("ETag", etag))
            if "last-modified" not in lowered and lm_value is not None:
                out.append(("Last-Modified", _http_date(lm_value)))
        if use_gzip:
            out.append(("Vary", "Accept-Encoding"))
        if etag is not None and self._not_modified(request_headers, etag, lm_value):
            keep = [(n, v) for n, v in extra if n.lower() not in ("content-type", "content-length")]
            self._send(304, keep + out, b"", head_only)
            return
        if content_type is not None and "content-type" not in lowered:
            out.insert(0, ("Content-Type", content_type))
        # The ETag stays the sha1 of the identity body for the gzip variant too:
        # strictly a strong ETag should differ per coding, but one value per page
        # keeps conditional-GET tests simple and matches what the crawler stores.
        if use_gzip and _accepts_gzip(request_headers.get("accept-encoding")):
            body = gzip_module.compress(body, mtime=0)  # mtime=0: deterministic bytes
            out.append(("Content-Encoding", "gzip"))
        self._send(
            status, list(extra) + out, body, head_only,
            chunk_size=chunk_size, chunk_interval=chunk_interval,
        )

    def _serve_route(
        self, route: _Route, headers: dict[str, str], request_body: bytes, head_only: bool
    ) -> None:
        site = self.server.site
        if route.delay > 0 and site._stopping.wait(route.delay):
            self.close_connection = True
            return
        if route.drop:
            self._drop(route.reset)
            return
        if route.handler is not None:
            target = self.path
            info = RequestInfo(
                host=self.server.host,
                target=target,
                path=_path_only(target),
                query=urllib.parse.parse_qs(target.partition("?")[2].partition("#")[0]),
                method=self.command,
                headers=dict(headers),
                body=request_body,
            )
            status, out_headers, body = route.handler(info)
            self._send(status, list(out_headers.items()), _to_bytes(body), head_only)
            return
        self._serve_entity(
            status=route.status,
            body=route.body,
            content_type=route.content_type,
            extra=route.headers,
            conditional=route.conditional,
            last_modified=route.last_modified,
            use_gzip=route.gzip,
            request_headers=headers,
            head_only=head_only,
            chunk_size=route.chunk_size,
            chunk_interval=route.chunk_interval,
        )

    def _drop(self, reset: bool) -> None:
        """Close the connection without any answer (FIN, or RST when reset)."""
        self.close_connection = True
        sock: socket.socket = self.request
        try:
            if reset:
                # Linger 0 turns close() into an RST; makefile() objects hold
                # references, so close them too or the fd would stay open.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.wfile.close()
                self.rfile.close()
                sock.close()
            else:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _serve_static(
        self, static_dir: _StaticDir, relpath: str, headers: dict[str, str], head_only: bool
    ) -> None:
        if self.command not in ("GET", "HEAD"):
            self._send(
                405,
                [("Allow", "GET, HEAD"), ("Content-Type", "text/html; charset=utf-8")],
                _small_html("405 Method Not Allowed", self.command),
                head_only,
            )
            return
        decoded = urllib.parse.unquote(relpath, errors="surrogateescape") if relpath else ""
        parts = decoded.split("/")
        # Refuse lexically: any ".." segment (after percent-decoding, so %2e%2e
        # and %2f are caught), backslashes and NULs. Symlinks inside the tree are
        # followed on purpose: Debian's doc tree links _static/jquery.js to
        # /usr/share/javascript, and a realpath containment check would 403 it.
        if any(p == ".." for p in parts) or "\\" in decoded or "\x00" in decoded or decoded.startswith("/"):
            self._send_simple(403, "Forbidden", "path outside the served directory", head_only)
            return
        fs_path = static_dir.directory.joinpath(*[p for p in parts if p not in ("", ".")])
        try:
            is_dir = fs_path.is_dir()
        except OSError:  # e.g. ENAMETOOLONG: no such file, not a server error
            is_dir = False
        if is_dir:
            if not _path_only(self.path).endswith("/"):
                # Like real servers: /dir -> /dir/ so relative links resolve.
                query = self.path.partition("?")[2]
                # Collapse leading slashes so "//host/x" cannot become an off-site Location.
                location = "/" + _path_only(self.path).lstrip("/") + "/" + (f"?{query}" if query else "")
                self._send(
                    301,
                    [("Location", location), ("Content-Type", "text/html; charset=utf-8")],
                    _small_html("301 Moved Permanently", location),
                    head_only,
                )
                return
            fs_path = fs_path / "index.html"
        try:
            body = fs_path.read_bytes()
            mtime = fs_path.stat().st_mtime
        except OSError:  # missing, a directory without index.html, unreadable, ...
            self._send_simple(404, "Not Found", _path_only(self.path), head_only)
            return
        self._serve_entity(
            status=200,
            body=body,
            content_type=content_type_for(fs_path),
            extra=(),
            conditional=True,
            last_modified=mtime,
            use_gzip=static_dir.gzip,
            request_headers=headers,
            head_only=head_only,
        )


class SiteServer:
    """HTTP servers on several loopback addresses sharing one port, with a request log.

    Hosts are referred to by index into ``hosts`` or by address string.
    Routes and static directories can be added before or after ``start()``.
    """

    def __init__(self, hosts: Sequence[str] = DEFAULT_HOSTS, port: int = 0) -> None:
        if not hosts:
            raise ValueError("SiteServer needs at least one host address")
        if len(set(hosts)) != len(hosts):
            raise ValueError(f"duplicate host addresses: {list(hosts)}")
        self.hosts: tuple[str, ...] = tuple(hosts)
        self._requested_port = port
        self._state: dict[str, _HostState] = {h: _HostState() for h in self.hosts}
        self._lock = threading.RLock()  # routes, log, errors, connections
        self._log: list[RequestRecord] = []
        self._errors: list[str] = []
        self._conns: set[socket.socket] = set()
        self._servers: dict[str, _HostHTTPServer] = {}
        self._threads: list[threading.Thread] = []
        # Set by stop(): wakes sleeping slow/trickle handlers so stop is prompt.
        self._stopping = threading.Event()

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> SiteServer:
        if self._servers:
            raise RuntimeError("SiteServer already started")
        self._stopping.clear()
        self._servers = self._bind_all()
        for host, srv in self._servers.items():
            thread = threading.Thread(
                target=srv.serve_forever,
                kwargs={"poll_interval": _POLL_INTERVAL},
                name=f"site-server-{host}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stop listening, wake delayed handlers and cut open connections. Idempotent."""
        self._stopping.set()
        servers, self._servers = self._servers, {}
        # shutdown() blocks until that server's loop polls; do all hosts at once.
        stoppers = [threading.Thread(target=srv.shutdown, daemon=True) for srv in servers.values()]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()
        for srv in servers.values():
            srv.server_close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)  # unblocks keep-alive readers
            except OSError:
                pass
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []

    def __enter__(self) -> SiteServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _bind_all(self) -> dict[str, _HostHTTPServer]:
        """Bind every host on one port number; fall back to per-host ports."""
        attempts = 1 if self._requested_port else _BIND_ATTEMPTS
        last_error: OSError | None = None
        for _ in range(attempts):
            servers: dict[str, _HostHTTPServer] = {}
            try:
                port = self._requested_port
                for host in self.hosts:
                    srv = self._bind_one(host, port)
                    servers[host] = srv
                    port = srv.server_address[1]  # the first bind picks the port
                return servers
            except OSError as exc:  # port taken on a later address: try another
                last_error = exc
                for srv in servers.values():
                    srv.server_close()
        if self._requested_port:
            raise OSError(
                f"cannot bind port {self._requested_port} on all of {self.hosts}"
            ) from last_error
        # Very unlikely on loopback; `port` raises so nobody builds a wrong URL.
        return {host: self._bind_one(host, 0) for host in self.hosts}

    def _bind_one(self, host: str, port: int) -> _HostHTTPServer:
        srv = _HostHTTPServer((host, port), self)
        try:
            srv.server_bind()
            srv.server_activate()
        except OSError:
            srv.server_close()
            raise
        return srv

    # -- addresses -------------------------------------------------------------

    def host(self, ref: HostRef) -> str:
        """Normalise a host index or address to the address string."""
        if isinstance(ref, int):
            try:
                return self.hosts[ref]
            except IndexError:
                raise IndexError(f"host index {ref} out of range for {self.hosts}") from None
        if ref not in self._state:
            raise KeyError(f"unknown host {ref!r}; hosts are {self.hosts}")
        return ref

    def port_for(self, ref: HostRef) -> int:
        host = self.host(ref)
        if host not in self._servers:
            raise RuntimeError("SiteServer is not started")
        return int(self._servers[host].server_address[1])

    @property
    def port(self) -> int:
        """The port shared by all hosts."""
        ports = {self.port_for(h) for h in self.hosts}
        if len(ports) != 1:
            raise RuntimeError(f"hosts ended up on different ports {ports}; use url()/port_for()")
        return ports.pop()

    def url(self, ref: HostRef = 0, path: str = "/") -> str:
        host = self.host(ref)
        if not path.startswith("/"):
            path = "/" + path
        netloc = f"[{host}]" if ":" in host else host
        return f"http://{netloc}:{self.port_for(host)}{path}"

    # -- routes ----------------------------------------------------------------

    def _put(self, ref: HostRef, path: str, route: _Route) -> None:
        if not path.startswith("/"):
            raise ValueError(f"route path must start with '/': {path!r}")
        host = self.host(ref)
        with self._lock:
            self._state[host].routes[path] = route

    def add(
        self,
        host: HostRef,
        path: str,
        body: str | bytes = b"",
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        content_type: str | None = "text/html; charset=utf-8",
        *,
        handler: Handler | None = None,
        gzip: bool = False,
        last_modified: float | None = None,
        conditional: bool = True,
    ) -> None:
        """Serve ``body`` at ``path`` on ``host`` (exact target, or path ignoring the query).

        200 routes get a strong ETag (quoted sha1 of the body) and Last-Modified
        (``last_modified`` epoch seconds, default FIXED_LAST_MODIFIED) and answer
        conditional requests with 304; ``ETag``/``Last-Modified`` in ``headers``
        override the generated values, ``conditional=False`` sends neither.
        ``gzip=True`` compresses when the client accepts gzip.
        ``handler=fn`` replaces all of that: fn(RequestInfo) -> (status, headers,
        body) is sent as is (Content-Length added unless fn sets it).
        """
        self._put(
            host,
            path,
            _Route(
                status=status,
                body=_to_bytes(body),
                headers=tuple((headers or {}).items()),
                content_type=content_type,
                handler=handler,
                gzip=gzip,
                conditional=conditional,
                last_modified=FIXED_LAST_MODIFIED if last_modified is None else last_modified,
            ),
        )

    def set_body(
        self, host: HostRef, path: str, body: str | bytes, *, last_modified: float | None = None
    ) -> None:
        """Change a page between crawls: the ETag follows the body, Last-Modified moves on.

        Last-Modified becomes ``last_modified`` or else now (rounded up), and at
        least one second after the old value: HTTP dates have one-second
        resolution, so an If-Modified-Since from the old version must not match.
        """
        h = self.host(host)
        with self._lock:
            route = self._state[h].routes.get(path)
            if route is None or route.handler is not None:
                raise KeyError(f"no body route {path!r} on {h}")
            if last_modified is None:
                last_modified = max(float(math.ceil(time.time())), route.last_modified + 1.0)
            self._state[h].routes[path] = dataclasses.replace(
                route, body=_to_bytes(body), last_modified=last_modified
            )

    def redirect(self, host: HostRef, path: str, to_url: str, status: int = 301) -> None:
        self._put(
            host,
            path,
            _Route(
                status=status,
                body=_small_html(f"{status} Redirect", to_url),
                headers=(("Location", to_url),),
                conditional=False,
            ),
        )

    def slow(
        self,
        host: HostRef,
        path: str,
        seconds: float,
        body: str | bytes = "<html><body>slow</body></html>",
        *,
        status: int = 200,
        content_type: str | None = "text/html; charset=utf-8",
    ) -> None:
        """Wait ``seconds`` after the request line, then answer normally."""
        self._put(
            host,
            path,
            _Route(status=status, body=_to_bytes(body), content_type=content_type, delay=seconds),
        )

    def trickle(
        self,
        host: HostRef,
        path: str,
        total_bytes: int,
        bytes_per_chunk: int,
        interval: float,
        *,
        content_type: str | None = "text/html; charset=utf-8",
    ) -> None:
        """Headers at once (Content-Length: total_bytes), then the body in chunks,
        waiting ``interval`` before each: about ceil(total/chunk) * interval in all."""
        if bytes_per_chunk <= 0:
            raise ValueError("bytes_per_chunk must be positive")
        filler = b"<!-- trickle -->\n"
        body = (filler * (total_bytes // len(filler) + 1))[:total_bytes]
        self._put(
            host,
            path,
            _Route(
                body=body,
                content_type=content_type,
                chunk_size=bytes_per_chunk,
                chunk_interval=interval,
            ),
        )

    def drop(self, host: HostRef, path: str, *, reset: bool = False) -> None:
        """Close the connection without answering (FIN; RST when ``reset``)."""
        self._put(host, path, _Route(drop=True, reset=reset, conditional=False))

    def serve_dir(
        self, host: HostRef, prefix: str, directory: str | os.PathLike[str], *, gzip: bool = False
    ) -> None:
        """Serve files under ``directory`` at ``prefix + relpath`` (index.html for dirs)."""
        root = Path(directory)
        if not root.is_dir():
            raise FileNotFoundError(f"not a directory: {root}")
        if not prefix.startswith("/"):
            raise ValueError(f"prefix must start with '/': {prefix!r}")
        if not prefix.endswith("/"):
            prefix += "/"
        h = self.host(host)
        with self._lock:
            dirs = [d for d in self._state[h].static if d.prefix != prefix]
            dirs.append(_StaticDir(prefix=prefix, directory=root, gzip=gzip))
            dirs.sort(key=lambda d: len(d.prefix), reverse=True)  # longest prefix wins
            self._state[h].static = dirs

    def _lookup(self, host: str, target: str) -> _Route | tuple[_StaticDir, str] | None:
        path = _path_only(target)
        with self._lock:
            state = self._state[host]
            route = state.routes.get(target) or state.routes.get(path)
            if route is not None:
                return route
            for static_dir in state.static:
                if path.startswith(static_dir.prefix):
                    return static_dir, path[len(static_dir.prefix) :]
                if path == static_dir.prefix[:-1]:  # "/docs" -> directory redirect
                    return static_dir, ""
        return None

    # -- request log -----------------------------------------------------------

    def _append(self, record: RequestRecord) -> None:
        with self._lock:
            self._log.append(record)

    def _note_error(self, text: str) -> None:
        with self._lock:
            self._errors.append(text)

    def _track(self, sock: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._conns.add(sock)
            else:
                self._conns.discard(sock)

    @property
    def log(self) -> list[RequestRecord]:
        """Snapshot of all requests in arrival order (a copy: safe to iterate)."""
        with self._lock:
            return list(self._log)

    @property
    def errors(self) -> list[str]:
        """Tracebacks of exceptions raised while serving (e.g. by a handler=)."""
        with self._lock:
            return list(self._errors)

    def reset_log(self) -> None:
        with self._lock:
            self._log.clear()

    def requests_for(self, host: HostRef | None = None, path: str | None = None) -> list[RequestRecord]:
        """Records for a host and/or path; ``path`` matches the full target or it without query."""
        h = None if host is None else self.host(host)
        return [
            r
            for r in self.log
            if (h is None or r.host == h)
            and (path is None or r.path == path or _path_only(r.path) == path)
        ]

    def paths(self, host: HostRef) -> list[str]:
        """Request targets sent to ``host``, in arrival order."""
        return [r.path for r in self.requests_for(host)]

    def min_gap(self, host: HostRef, exclude_paths: Sequence[str] = ("/robots.txt",)) -> float:
        """Smallest interval between consecutive request starts to ``host``.

        Raises ValueError with fewer than two requests: a vacuous infinity would
        let a politeness assertion pass on a crawl that never happened.
        """
        excluded = set(exclude_paths)
        times = sorted(
            r.time
            for r in self.requests_for(host)
            if r.path not in excluded and _path_only(r.path) not in excluded
        )
        if len(times) < 2:
            raise ValueError(f"min_gap needs two requests to {self.host(host)}, got {len(times)}")
        return min(b - a for a, b in zip(times, times[1:]))

    def __repr__(self) -> str:
        state = "started" if self._servers else "stopped"
        return f"<SiteServer {state} hosts={self.hosts}>"


# -- pytest fixtures -----------------------------------------------------------

if pytest is not None:

    @pytest.fixture
    def site() -> Iterator[SiteServer]:
        """A started SiteServer on 127.0.0.1 and 127.0.0.2, stopped after the test."""
        with SiteServer(DEFAULT_HOSTS) as server:
            yield server

    @pytest.fixture
    def site_factory() -> Iterator[Callable[..., SiteServer]]:
        """``site_factory(hosts=(...), port=0)`` -> started SiteServer, all stopped after the test."""
        created: list[SiteServer] = []

        def make(hosts: Sequence[str] = DEFAULT_HOSTS, port: int = 0) -> SiteServer:
            server = SiteServer(hosts, port).start()
            created.append(server)
            return server

        yield make
        for server in reversed(created):
            server.stop()


# -- script mode -----------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.site_server",
        description="Serve a directory at / on several loopback addresses (one port).",
    )
    parser.add_argument("--dir", required=True, type=Path, help="directory to serve")
    parser.add_argument("--hosts", default=",".join(DEFAULT_HOSTS), help="comma-separated addresses")
    parser.add_argument("--port", type=int, default=8765, help="shared port (0: pick a free one)")
    parser.add_argument("--gzip", action="store_true", help="gzip responses when asked")
    args = parser.parse_args(argv)
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    server = SiteServer(hosts, args.port)
    for host in hosts:
        server.serve_dir(host, "/", args.dir, gzip=args.gzip)

    # SIGTERM (benchmark harnesses) stops as cleanly as Ctrl-C.
    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    # Ctrl-C must reach this script whatever its parent left behind: an ignored SIGINT is inherited across
    # exec, and so is a blocked one (the full test suite's process has been seen to hand one down).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    server.start()
    try:
        for host in hosts:
            print(server.url(host, "/"), flush=True)  # stdout: URLs only, for scripts
        print("serving; Ctrl-C to stop", file=sys.stderr, flush=True)
        # Short sleeps: the kernel may hand SIGINT to a server thread, and then only a main thread that
        # wakes up runs Python's handler; a sleep of an hour kept it from stopping.
        while True:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
