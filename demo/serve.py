#!/usr/bin/env python3
"""Serve the demo site (demo/site) on 127.0.0.1 only, quietly. Standard library only.

    python3 demo/serve.py                 # port 8787, or a free port if 8787 is taken
    python3 demo/serve.py --port 0        # any free port
    python3 demo/serve.py --port 9000 --strict-port --port-file /tmp/port

The chosen port is printed as one line ("Serving … at http://127.0.0.1:PORT/") and, with
--port-file, written to that file once the socket is listening: a script can wait for the file
and then crawl. Files are served with Last-Modified, and If-Modified-Since gets a 304, so a second
crawl of the demo shows webqa's conditional requests. No request log: stop it with Ctrl-C or
SIGTERM.
"""

from __future__ import annotations

import argparse
import errno
import functools
import os
import signal
import sys
import tempfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOST = "127.0.0.1"  # never reachable from other machines
DEFAULT_PORT = 8787
DEFAULT_ROOT = Path(__file__).resolve().parent / "site"


class QuietHandler(SimpleHTTPRequestHandler):
    server_version = "lumen-demo/1.0"

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass

    def list_directory(self, path: str | os.PathLike[str]) -> None:
        # A real documentation site does not list its folders.
        self.send_error(404, "Not Found")
        return None


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        # A crawler closing a connection early is not worth a traceback.
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def make_server(root: Path, port: int, strict: bool) -> QuietServer:
    handler = functools.partial(QuietHandler, directory=str(root))
    try:
        return QuietServer((HOST, port), handler)
    except OSError as exc:
        if strict or port == 0 or exc.errno != errno.EADDRINUSE:
            raise
        print(f"serve.py: port {port} is in use; using a free port instead", file=sys.stderr)
        return QuietServer((HOST, 0), handler)


def write_port_file(path: Path, port: int) -> None:
    # Atomic: a reader never sees an empty or half-written file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".port-")
    with os.fdopen(fd, "w") as out:
        out.write(f"{port}\n")
    os.replace(tmp, path)


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve the webqa demo site on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to listen on (default {DEFAULT_PORT}; 0 = any free port)")
    parser.add_argument("--strict-port", action="store_true",
                        help="fail when the port is taken instead of falling back to a free one")
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="folder to serve (default: demo/site)")
    parser.add_argument("--port-file", type=Path, help="write the chosen port to this file once listening")
    args = parser.parse_args(argv)

    if not (args.root / "index.html").is_file():
        print(f"serve.py: {args.root} has no index.html", file=sys.stderr)
        return 2
    try:
        server = make_server(args.root, args.port, args.strict_port)
    except OSError as exc:
        print(f"serve.py: cannot listen on {HOST}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 1
    port = server.server_address[1]
    # SIGTERM (from the demo script's trap) ends serve_forever like Ctrl-C does.
    signal.signal(signal.SIGTERM, _stop)
    if args.port_file:
        write_port_file(args.port_file, port)
    print(f"Serving {args.root} at http://{HOST}:{port}/", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if args.port_file:
            try:
                args.port_file.unlink()
            except FileNotFoundError:
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
