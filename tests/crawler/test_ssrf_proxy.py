"""The SSRF guard behind an HTTP proxy (issue 13 row 4): a real forwarding proxy on loopback.

Scrapy's HttpProxyMiddleware takes ``http_proxy``/``no_proxy`` from the environment. The guard used to
trust the proxy's *host name*, so a target on the proxy's host (``no_proxy`` then sends it straight
there) passed unchecked; through the proxy, any private target would be fetched by the proxy for us.
Now every request's target is checked whatever the proxy variables say. Witnesses: the target site's
and the proxy's request logs. Crawls run as subprocesses with the guard on (the variable conftest sets
is removed, as in tests/crawler/test_hardening.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.site_server import SiteServer
from tests.support.crawling import fetch_log, ok, page, pages
from tests.support.proxy import ForwardingProxy, crawl_through

pytestmark = pytest.mark.e2e  # every test here starts a child process (tests/support/e2e.py)

HINT = "(SSRF guard); set allow_private_networks to crawl private networks"


@pytest.fixture
def proxy(site: SiteServer) -> Iterator[ForwardingProxy]:
    # docs.example is the "public" site behind the proxy: the test site's second host.
    with ForwardingProxy({"docs.example": f"127.0.0.2:{site.port}"}) as server:
        yield server


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
