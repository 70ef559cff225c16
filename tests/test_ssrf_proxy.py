"""The SSRF guard behind an HTTP proxy (issue 13 row 4): a real forwarding proxy on loopback.

Scrapy's HttpProxyMiddleware takes ``http_proxy``/``no_proxy`` from the environment. The guard used to
trust the proxy's *host name*, so a target on the proxy's host (``no_proxy`` then sends it straight
there) passed unchecked; through the proxy, any private target would be fetched by the proxy for us.
Now every request's target is checked whatever the proxy variables say. Witnesses: the target site's
and the proxy's request logs. Crawls run as subprocesses with the guard on (the variable conftest sets
is removed, as in tests/test_hardening.py).
"""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.site_server import SiteServer
from tests.support.crawling import REPO, fetch_log, ok, page, pages

HINT = "(SSRF guard); set allow_private_networks to crawl private networks"


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


@pytest.fixture
def proxy(site: SiteServer) -> Iterator[ForwardingProxy]:
    # docs.example is the "public" site behind the proxy: the test site's second host.
    with ForwardingProxy({"docs.example": f"127.0.0.2:{site.port}"}) as server:
        yield server


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


@pytest.mark.parametrize("robots", [False, True], ids=["ignore-robots", "robots"])
def test_target_on_the_proxy_host_with_no_proxy_is_blocked(
    site: SiteServer, proxy: ForwardingProxy, tmp_path: Path, robots: bool
) -> None:
    # The proxy listens on 127.0.0.1 and no_proxy names 127.0.0.1: the target went straight there.
    site.add(0, "/p/admin", page("Deleted everything"))
    site.add(0, "/robots.txt", "User-agent: *\nAllow: /\n", content_type="text/plain")
    target = site.url(0, "/p/admin?action=delete-everything")
    db = tmp_path / "w.duckdb"

    result = crawl_through(proxy, target, "--db", str(db), *([] if robots else ["--ignore-robots"]),
                           no_proxy="127.0.0.1,localhost")

    ok(result, 3)  # nothing could be fetched
    assert site.log == []  # neither the page nor /robots.txt
    assert proxy.log == []
    assert fetch_log(db)[target][:2] == ("skipped", f"blocked: 127.0.0.1 is a loopback address {HINT}")
    assert pages(db) == {}


def test_private_target_is_not_fetched_through_the_proxy(site: SiteServer, proxy: ForwardingProxy,
                                                         tmp_path: Path) -> None:
    site.add(1, "/internal.html", page("Internal"))
    target = site.url(1, "/internal.html")  # 127.0.0.2: only no_proxy's absence sends it to the proxy
    db = tmp_path / "w.duckdb"

    ok(crawl_through(proxy, target, "--db", str(db), no_proxy=""), 3)

    assert site.log == [] and proxy.log == []
    assert fetch_log(db)[target][:2] == ("skipped", f"blocked: 127.0.0.2 is a loopback address {HINT}")


def test_redirect_from_a_public_site_to_the_proxy_host_is_not_followed(
    site: SiteServer, proxy: ForwardingProxy, tmp_path: Path
) -> None:
    admin = site.url(0, "/p/admin?action=delete-everything")
    site.add(0, "/p/admin", page("Deleted everything"))
    site.redirect(1, "/start.html", admin, status=302)  # docs.example, reached through the proxy
    site.add(1, "/fine.html", page("Fine", extra="<p>A page of the public site, fetched through the proxy.</p>"))
    start, fine = "http://docs.example/start.html", "http://docs.example/fine.html"
    db = tmp_path / "w.duckdb"

    result = crawl_through(proxy, start, fine, "--db", str(db), no_proxy="127.0.0.1,localhost")

    ok(result, 1)  # the listed URL that redirected to a private address produced no page: partial
    assert "Not fetched (1):" in result.stderr
    # The public site was crawled through the proxy; the redirect hop to 127.0.0.1 went nowhere.
    assert sorted(proxy.log) == ["http://docs.example/fine.html", "http://docs.example/robots.txt",
                                 "http://docs.example/start.html"]
    assert site.requests_for(0) == []
    assert fetch_log(db)[start][:2] == ("skipped", f"blocked: 127.0.0.1 is a loopback address {HINT}")
    assert set(pages(db)) == {fine}
