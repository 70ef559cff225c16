"""A tiny HTTP forward proxy on loopback with a request log, and a stand-in for public DNS: what lets a
"public" site live on loopback while the SSRF guard is on (tests/test_ssrf_proxy.py, tests/test_sitemaps.py)."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from tests.support.crawling import REPO


class ForwardingProxy:
    """A tiny HTTP forward proxy on 127.0.0.1 that logs every request it receives.

    ``aliases`` maps a host name in the request line to a loopback ``host:port`` (a stand-in for the
    public DNS the proxy would use), so a "public" site can live on loopback.
    """

    def __init__(self, aliases: dict[str, str] | None = None) -> None:
        self.aliases = aliases or {}
        self.log: list[str] = []  # absolute request targets, as received
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"
            timeout = 10  # every wait is bounded, also a half-open connection

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                proxy.log.append(self.path)
                parts = urlsplit(self.path)
                netloc = proxy.aliases.get(parts.hostname or "", parts.netloc)
                host, _, port = netloc.partition(":")
                upstream = http.client.HTTPConnection(host, int(port or 80), timeout=10)
                try:
                    path = parts.path + (f"?{parts.query}" if parts.query else "")
                    upstream.request("GET", path or "/", headers={"Host": parts.netloc, "Connection": "close"})
                    answer = upstream.getresponse()
                    body = answer.read()
                    self.send_response(answer.status)
                    for name, value in answer.getheaders():
                        if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                            self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                finally:
                    upstream.close()

            def do_CONNECT(self) -> None:
                # A tunnel, as playwright's own HTTP client asks for even for http: URLs (crawl.render).
                proxy.log.append(f"CONNECT {self.path}")
                host, _, port = proxy.aliases.get(self.path.rsplit(":", 1)[0], self.path).partition(":")
                upstream = socket.create_connection((host, int(port or 80)), timeout=10)
                self.send_response(200, "Connection established")
                self.end_headers()
                _pipe(self.connection, upstream)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> ForwardingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def _pipe(client: socket.socket, upstream: socket.socket) -> None:
    """Copy bytes both ways until either side closes or is idle for 10 s."""
    def copy(source: socket.socket, sink: socket.socket) -> None:
        try:
            source.settimeout(10)
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    other = threading.Thread(target=copy, args=(upstream, client), daemon=True)
    other.start()
    copy(client, upstream)
    other.join(timeout=10)
    upstream.close()


# The crawl, with a stand-in for public DNS: docs.example resolves to a public address here, as a
# public site would; everything else resolves as usual.
_CLI = """
import runpy, sys
from scrapy.resolver import CachingThreadedResolver
from twisted.internet import defer
real = CachingThreadedResolver.getHostByName
def public_dns(self, name, timeout=()):
    return defer.succeed("93.184.215.14") if name == "docs.example" else real(self, name, timeout)
CachingThreadedResolver.getHostByName = public_dns
sys.argv = ["webqa", *sys.argv[1:]]
runpy.run_module("jobs.cli", run_name="__main__")
"""


def crawl_through(proxy: ForwardingProxy, *args: str, no_proxy: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "no_proxy")}
    env.pop("WEBQA_ALLOW_PRIVATE_NETWORKS", None)  # the guard on, as in production
    env.update(http_proxy=proxy.url, no_proxy=no_proxy)
    return subprocess.run([sys.executable, "-c", _CLI, "crawl", *args, "--delay", "0"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=env)
