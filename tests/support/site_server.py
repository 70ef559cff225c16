"""A real multi-host HTTP test site on loopback, with a request log for politeness assertions.

Crawl tests need a server the crawler cannot tell from a real one: a separate
socket per "host" (127.0.0.1, 127.0.0.2, ... are all loopback on Linux, so per-host
politeness is observable without DNS tricks), robots.txt, conditional GET,
redirects and the misbehaving cases (slow, trickling, dropped connections).
The request log records when each request line arrived, so tests can assert
on the delays the crawler kept between requests to one host. This module is the
scripting API, the fixtures and the script mode; site_handler.py answers the
requests, site_http.py holds what the answers are made of.

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
import math
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.support.corpus import CORPUS_DIR
from tests.support.site_handler import HostHTTPServer
from tests.support.site_http import (
    FIXED_LAST_MODIFIED, Handler, HostState, RequestInfo, RequestRecord, Route, StaticDir, content_type_for,
    path_only, small_html, to_bytes,
)

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

HostRef = int | str

_BIND_ATTEMPTS = 20
# serve_forever notices shutdown() only between polls: this bounds stop(), which
# runs in every test's teardown. 50 idle wake-ups a second per host cost nothing.
_POLL_INTERVAL = 0.02


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
        self._state: dict[str, HostState] = {h: HostState() for h in self.hosts}
        self._lock = threading.RLock()  # routes, log, errors, connections
        self._log: list[RequestRecord] = []
        self._errors: list[str] = []
        self._conns: set[socket.socket] = set()
        self._servers: dict[str, HostHTTPServer] = {}
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

    def _bind_all(self) -> dict[str, HostHTTPServer]:
        """Bind every host on one port number; fall back to per-host ports."""
        attempts = 1 if self._requested_port else _BIND_ATTEMPTS
        last_error: OSError | None = None
        for _ in range(attempts):
            servers: dict[str, HostHTTPServer] = {}
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

    def _bind_one(self, host: str, port: int) -> HostHTTPServer:
        srv = HostHTTPServer((host, port), self)
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

    def _put(self, ref: HostRef, path: str, route: Route) -> None:
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
            Route(
                status=status,
                body=to_bytes(body),
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
                route, body=to_bytes(body), last_modified=last_modified
            )

    def redirect(self, host: HostRef, path: str, to_url: str, status: int = 301) -> None:
        self._put(
            host,
            path,
            Route(
                status=status,
                body=small_html(f"{status} Redirect", to_url),
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
            Route(status=status, body=to_bytes(body), content_type=content_type, delay=seconds),
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
            Route(
                body=body,
                content_type=content_type,
                chunk_size=bytes_per_chunk,
                chunk_interval=interval,
            ),
        )

    def drop(self, host: HostRef, path: str, *, reset: bool = False) -> None:
        """Close the connection without answering (FIN; RST when ``reset``)."""
        self._put(host, path, Route(drop=True, reset=reset, conditional=False))

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
            dirs.append(StaticDir(prefix=prefix, directory=root, gzip=gzip))
            dirs.sort(key=lambda d: len(d.prefix), reverse=True)  # longest prefix wins
            self._state[h].static = dirs

    def _lookup(self, host: str, target: str) -> Route | tuple[StaticDir, str] | None:
        path = path_only(target)
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
            and (path is None or r.path == path or path_only(r.path) == path)
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
            if r.path not in excluded and path_only(r.path) not in excluded
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
