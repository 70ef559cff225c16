"""How the loopback test site answers a request: one listening socket per address, and the handler that
serves a scripted route (with its delay, trickle, drop or custom handler), a static directory (with
conditional GET and gzip), or a 404, recording each request in the site's log."""

from __future__ import annotations

import gzip as gzip_module
import math
import socket
import socketserver
import struct
import time
import traceback
import urllib.parse
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from tests.support.site_http import (
    RequestInfo, RequestRecord, Route, StaticDir, accepts_gzip, content_type_for, http_date, parse_http_date,
    path_only, small_html, strong_etag, to_bytes,
)

if TYPE_CHECKING:
    from tests.support.site_server import SiteServer

# How long an idle keep-alive connection may hold a handler thread. Long enough
# for any test, short enough that leaked connections do not pile up threads.
IDLE_TIMEOUT = 30.0


class HostHTTPServer(ThreadingHTTPServer):
    """One listening socket for one loopback address."""

    daemon_threads = True
    # Benchmarks open many connections at once; the default backlog of 5 drops SYNs.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], site: SiteServer) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.site = site
        self.host = address[0]
        super().__init__(address, RequestHandler, bind_and_activate=False)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS lookup that
        # can stall for seconds in sandboxes; the name is never used here.
        socketserver.TCPServer.server_bind(self)
        self.server_name = self.host
        self.server_port = self.server_address[1]

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Keep stderr quiet; failures are kept for tests to inspect.
        self.site._note_error(traceback.format_exc())


class RequestHandler(BaseHTTPRequestHandler):
    server: HostHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "webqa-site/1.0"
    sys_version = ""
    # The stdlib default (HTTP/0.9) makes error replies to garbage request lines
    # omit the status line; a status line is what a client test wants to see.
    default_request_version = "HTTP/1.0"
    timeout = IDLE_TIMEOUT
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
            if isinstance(found, Route):
                self._serve_route(found, headers, request_body, head_only)
            elif found is not None:
                static_dir, relpath = found
                self._serve_static(static_dir, relpath, headers, head_only)
            else:
                self._send_simple(404, "Not Found", path_only(self.path), head_only)
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
            small_html(f"{status} {title}", text),
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
            since = parse_http_date(ims)
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
            etag = lowered.get("etag") or strong_etag(body)
            if "last-modified" in lowered:
                lm_value = parse_http_date(lowered["last-modified"])
            else:
                lm_value = last_modified
            if "etag" not in lowered:
                out.append(("ETag", etag))
            if "last-modified" not in lowered and lm_value is not None:
                out.append(("Last-Modified", http_date(lm_value)))
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
        if use_gzip and accepts_gzip(request_headers.get("accept-encoding")):
            body = gzip_module.compress(body, mtime=0)  # mtime=0: deterministic bytes
            out.append(("Content-Encoding", "gzip"))
        self._send(
            status, list(extra) + out, body, head_only,
            chunk_size=chunk_size, chunk_interval=chunk_interval,
        )

    def _serve_route(
        self, route: Route, headers: dict[str, str], request_body: bytes, head_only: bool
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
                path=path_only(target),
                query=urllib.parse.parse_qs(target.partition("?")[2].partition("#")[0]),
                method=self.command,
                headers=dict(headers),
                body=request_body,
            )
            status, out_headers, body = route.handler(info)
            self._send(status, list(out_headers.items()), to_bytes(body), head_only)
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
        self, static_dir: StaticDir, relpath: str, headers: dict[str, str], head_only: bool
    ) -> None:
        if self.command not in ("GET", "HEAD"):
            self._send(
                405,
                [("Allow", "GET, HEAD"), ("Content-Type", "text/html; charset=utf-8")],
                small_html("405 Method Not Allowed", self.command),
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
            if not path_only(self.path).endswith("/"):
                # Like real servers: /dir -> /dir/ so relative links resolve.
                query = self.path.partition("?")[2]
                # Collapse leading slashes so "//host/x" cannot become an off-site Location.
                location = "/" + path_only(self.path).lstrip("/") + "/" + (f"?{query}" if query else "")
                self._send(
                    301,
                    [("Location", location), ("Content-Type", "text/html; charset=utf-8")],
                    small_html("301 Moved Permanently", location),
                    head_only,
                )
                return
            fs_path = fs_path / "index.html"
        try:
            body = fs_path.read_bytes()
            mtime = fs_path.stat().st_mtime
        except OSError:  # missing, a directory without index.html, unreadable, ...
            self._send_simple(404, "Not Found", path_only(self.path), head_only)
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
