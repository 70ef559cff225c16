"""crawl.render's own fetches (crawler/render_fetch.py): every request of a rendered page goes to the address the
SSRF guard checked (no second lookup to rebind), its body is capped at crawl.max_bytes, and the page's own
document is a conditional GET like a static page's.

Real crawls in subprocesses with the system's Chromium; the "public" site is docs.example behind
tests/support/proxy.py, or (rebinding) "localhost" answered with a public-looking address by webqa's resolver.
"""

from __future__ import annotations

import asyncio
import gzip
import tracemalloc
import zlib
from pathlib import Path

import httpx
import pytest
from scrapy.http import Headers

from crawler.render_browser import conditional_headers
from crawler.render_fetch import (
    PinnedFetcher, TooLarge, Unreadable, hop_headers, host_header, operator_proxy, pinned_url, request_headers, response_headers,
    without_cookies_set,
)
from tests.support.crawling import fetch_log, ok, pages, rows
from tests.support.proxy import ForwardingProxy
from tests.support.render import crawl, crawl_rebinding, needs_chromium
from tests.support.site_server import SiteServer

PUBLIC = "http://docs.example"
BUILT = "The harbor lantern is refilled every Tuesday at dawn by the night watch."


def _app(script: str) -> str:
    return ("<!doctype html><html><head><title>App</title></head><body><main id='app'></main>"
            f"<script>{script}</script></body></html>")


def _show(expr: str) -> str:
    """A script line that appends a paragraph with ``expr`` (a JS string expression) to the page."""
    return ("{ const p = document.createElement('p'); p.textContent = " + expr
            + "; document.getElementById('app').appendChild(p); }")


def _text(db: Path, url: str) -> str:
    return " ".join(r[0] for r in rows(db, "SELECT text FROM chunks WHERE url = ?", [url]))


# -- the pure parts ----------------------------------------------------------------------------


def test_a_pinned_request_names_the_checked_address_and_keeps_the_host() -> None:
    assert pinned_url("http://docs.example:8080/a/b?q=1#frag", "93.184.215.14") == "http://93.184.215.14:8080/a/b?q=1"
    assert pinned_url("https://docs.example", "2001:db8::1") == "https://[2001:db8::1]/"
    assert pinned_url("http://docs.example/x", None) == "http://docs.example/x"
    assert host_header("http://user:pw@docs.example:8080/x") == "docs.example:8080"
    assert host_header("https://[2001:db8::1]/") == "[2001:db8::1]"
    sent = request_headers({"host": "evil.example", "accept": "*/*", "accept-encoding": "br", ":authority": "x",
                            "content-length": "3", "cookie": "a=b"}, "http://docs.example/x")
    assert sent == {"accept": "*/*", "cookie": "a=b", "Host": "docs.example", "Accept-Encoding": "gzip, deflate"}
    got = httpx.Headers([("Content-Encoding", "gzip"), ("Set-Cookie", "a=1; Expires=Wed, 09 Jun 2027 10:18:14 GMT"),
                         ("Set-Cookie", "b=2"), ("Vary", "Accept"), ("Vary", "Cookie"), ("Location", "/next")])
    assert response_headers(got) == {"set-cookie": "a=1; Expires=Wed, 09 Jun 2027 10:18:14 GMT\nb=2",
                                     "vary": "Accept, Cookie", "location": "/next"}


def test_the_stored_validators_go_on_the_pages_own_request() -> None:
    headers = Headers({"If-None-Match": '"abc"', "If-Modified-Since": "Tue, 01 Dec 2026 10:00:00 GMT", "X": "y"})
    assert conditional_headers(headers) == {"If-None-Match": '"abc"', "If-Modified-Since": "Tue, 01 Dec 2026 10:00:00 GMT"}
    assert conditional_headers(Headers({})) == {}


def test_a_proxy_is_used_only_for_the_scheme_it_is_named_for(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", "proxy.internal:3128")
    # As Scrapy's HttpProxyMiddleware: an https URL with no https_proxy goes direct, never through http_proxy.
    assert operator_proxy("https://docs.example/a") is None
    assert operator_proxy("http://docs.example/a") == "http://proxy.internal:3128"
    monkeypatch.setenv("https_proxy", "http://tls-proxy.internal:3129")
    assert operator_proxy("https://docs.example/a") == "http://tls-proxy.internal:3129"


def test_credentials_do_not_follow_a_redirect_to_another_origin() -> None:
    headers = {"accept": "*/*", "Cookie": "session=A", "Authorization": "Bearer A", "x-app": "1"}
    first = "http://a.example/api"
    assert hop_headers(headers, first, "http://a.example:80/next") == headers
    for other in ("http://b.example/api", "https://a.example/api", "http://a.example:8080/api"):
        assert hop_headers(headers, first, other) == {"accept": "*/*", "x-app": "1"}, other
    assert hop_headers(headers, first, "http://b.example/", "b=1") == {"accept": "*/*", "x-app": "1", "cookie": "b=1"}
    assert without_cookies_set({"set-cookie": "a=1", "vary": "x"}) == {"vary": "x"}


class _EncodedServer:
    """A loopback server answering each path with (Content-Encoding, raw body) as given and a cookie, and logging
    the Accept-Encoding and Cookie of each request."""

    def __init__(self, bodies: dict[str, tuple[str, bytes]]) -> None:
        self.bodies = bodies
        self.accepted: list[str] = []
        self.cookies: list[str] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).decode("latin-1").split("\r\n")
            self.accepted += [v.strip() for k, _, v in (line.partition(":") for line in head[1:])
                              if k.lower() == "accept-encoding"]
            self.cookies += [v.strip() for k, _, v in (line.partition(":") for line in head[1:]) if k.lower() == "cookie"]
            encoding, body = self.bodies[head[0].split()[1]]
            writer.write(f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: {encoding}\r\n"
                         f"Set-Cookie: kept=1; Path=/\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()


def _fetch_all(bodies: dict[str, tuple[str, bytes]], max_bytes: int) -> tuple[_EncodedServer, dict[str, object], int]:
    """Each path of ``bodies`` fetched: (the server, the body or TooLarge's words by path, peak bytes traced)."""
    async def scenario() -> dict[str, object]:
        server = await asyncio.start_server(served.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        fetcher = PinnedFetcher(timeout=30, max_bytes=max_bytes)
        results: dict[str, object] = {}
        try:
            for path in bodies:
                try:
                    results[path] = (await fetcher.fetch("GET", f"http://a.example:{port}{path}", {}, None,
                                                         "127.0.0.1")).body
                except (TooLarge, Unreadable) as exc:
                    results[path] = str(exc).replace(f":{port}", "")
        finally:
            await fetcher.close()
            server.close()
            await server.wait_closed()
        return results

    served = _EncodedServer(bodies)
    tracemalloc.start()
    try:
        results = asyncio.run(scenario())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return served, results, peak


def test_a_gzip_bomb_is_cut_at_max_bytes_without_decoding_it_whole() -> None:
    text = BUILT.encode() * 100
    deflated = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    bodies = {
        "/bomb": ("gzip", gzip.compress(b"\0" * (256 << 20), compresslevel=9)),  # ~260 KB on the wire
        "/page": ("gzip", gzip.compress(text)),
        "/zlib": ("deflate", zlib.compress(text)),
        "/raw-deflate": ("deflate", deflated.compress(text) + deflated.flush()),
        "/plain": ("identity", text),
    }
    served, results, peak = _fetch_all(bodies, max_bytes=1 << 20)
    assert results["/bomb"] == ("response too large: http://a.example/bomb passed 1048576 bytes, more than 1048576 "
                                "(DOWNLOAD_MAXSIZE, crawl.max_bytes)")
    # Decoded a bounded step at a time: never near the 256 MiB the body holds (httpx's aiter_bytes decoded a
    # whole network chunk at once, tens of MiB per step).
    assert peak < 16 << 20, f"peak {peak} bytes while reading"
    assert [results[p] for p in ("/page", "/zlib", "/raw-deflate", "/plain")] == [text] * 4
    assert served.accepted == ["gzip, deflate"] * 5, "only what is decoded with a bound is asked for"
    assert served.cookies == [], "the fetcher keeps no cookies of its own (the browser sends its own)"


def test_a_gzip_body_cut_short_is_unreadable_not_a_shorter_page() -> None:
    whole = gzip.compress(BUILT.encode() * 100)
    bodies = {"/cut": ("gzip", whole[: len(whole) // 2]), "/whole": ("gzip", whole)}
    _served, results, _peak = _fetch_all(bodies, max_bytes=1 << 20)
    assert results["/cut"] == "response not read: http://a.example/cut has a gzip body cut short (the stream does not end)"
    assert results["/whole"] == BUILT.encode() * 100


def test_a_brotli_or_unknown_encoding_is_refused_not_decoded() -> None:
    brotli = pytest.importorskip("brotli")
    text = BUILT.encode()
    bodies = {"/br": ("br", brotli.compress(text)), "/zstd": ("zstd", b"(\xb5/\xfd" + b"x" * 20),
              "/twice": ("gzip, gzip", gzip.compress(gzip.compress(text))), "/ok": ("gzip", gzip.compress(text))}
    _, results, _ = _fetch_all(bodies, max_bytes=1 << 20)
    assert results["/br"] == ("response not read: http://a.example/br has Content-Encoding 'br', which is not "
                              "decoded (only gzip and deflate are, their decoded size bounded by crawl.max_bytes)")
    assert "has Content-Encoding 'zstd', which is not decoded" in str(results["/zstd"])
    assert "has Content-Encoding 'gzip, gzip', which is not decoded" in str(results["/twice"])
    assert results["/ok"] == text


class _RawServer:
    """A loopback HTTP/1.1 server that keeps connections open and logs (connection, Host) of each request;
    ``/big`` answers 30,000 bytes in chunks, without a Content-Length."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str]] = []
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        try:
            while head := await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10):
                lines = head.decode("latin-1").split("\r\n")
                host = next((v.strip() for k, _, v in (line.partition(":") for line in lines[1:]) if k.lower() == "host"), "")
                self.seen.append((number, host))
                if lines[0].split()[1] == "/big":
                    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                    for _ in range(30):
                        writer.write(b"3e8\r\n" + b"x" * 1000 + b"\r\n")
                    writer.write(b"0\r\n\r\n")
                else:
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()


def test_no_connection_is_shared_between_names_and_a_body_without_length_is_capped_while_read() -> None:
    async def scenario() -> tuple[_RawServer, list[object]]:
        raw = _RawServer()
        server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        fetcher = PinnedFetcher(timeout=10, max_bytes=20_000)
        results: list[object] = []
        try:
            for name in ("a.example", "b.example", "a.example"):
                results.append(await fetcher.fetch("GET", f"http://{name}:{port}/", {}, None, "127.0.0.1"))
            with pytest.raises(TooLarge) as too_large:
                await fetcher.fetch("GET", f"http://a.example:{port}/big", {}, None, "127.0.0.1")
            results.append(str(too_large.value))
        finally:
            await fetcher.close()
            server.close()
            await server.wait_closed()
        return raw, results

    raw, results = asyncio.run(scenario())
    port = raw.seen[0][1].rsplit(":", 1)[1]
    # Each request on a connection of its own, each naming its host: nothing verified for one name carries another's.
    assert [host for _, host in raw.seen] == [f"{n}:{port}" for n in ("a.example", "b.example", "a.example", "a.example")]
    assert len({number for number, _ in raw.seen}) == 4
    assert [r.body for r in results[:3]] == [b"ok"] * 3  # type: ignore[attr-defined]
    assert results[3] == (f"response too large: http://a.example:{port}/big passed 20000 bytes, more than 20000 "
                          "(DOWNLOAD_MAXSIZE, crawl.max_bytes)")


# -- real crawls -------------------------------------------------------------------------------


@pytest.mark.e2e
@needs_chromium
def test_a_rebinding_name_is_fetched_at_the_address_checked_never_at_a_second_answer(
        site: SiteServer, tmp_path: Path) -> None:
    # webqa's resolver answers "localhost" with a public-looking address (which reaches 127.0.0.2, the public
    # site); the system's answer, which a fetcher that resolves again gets, is 127.0.0.1, the private host.
    page_url = f"http://localhost:{site.port}/app.html"
    site.add(1, "/app.html", _app("fetch('/data.json').then(r => r.json()).then(d => " + _show("d.text") + ");"))
    site.add(1, "/data.json", '{"text": "%s"}' % BUILT, content_type="application/json")
    site.add(0, "/app.html", _app(_show("'private page'")))
    site.add(0, "/data.json", '{"text": "private data"}', content_type="application/json")
    db = tmp_path / "w.duckdb"
    result = ok(crawl_rebinding(db, urls=[page_url], render="js", obey_robots=False))
    assert site.requests_for(0) == [], "the private host received nothing"
    assert [r.path for r in site.requests_for(1)] == ["/app.html", "/data.json"]
    assert all(r.headers.get("host") == f"localhost:{site.port}" for r in site.requests_for(1))
    assert BUILT in _text(db, page_url), result.stdout


@pytest.mark.e2e
@needs_chromium
def test_a_response_over_max_bytes_is_not_read_and_says_why(site: SiteServer, tmp_path: Path) -> None:
    site.add(1, "/robots.txt", "User-agent: *\nAllow: /\n", content_type="text/plain")
    site.add(1, "/small.json", '{"text": "%s"}' % BUILT, content_type="application/json")
    site.add(1, "/big.json", '{"text": "%s"}' % ("x" * 40_000), content_type="application/json")
    script = "".join(f"fetch('/{name}.json').then(r => r.json()).then(d => " + _show("d.text") + ").catch(() => null);"
                     for name in ("big", "small"))
    site.add(1, "/app.html", _app(script))
    site.add(1, "/huge.html", _app(_show("'never read'")).replace("</body>", "<!--" + "y" * 40_000 + "--></body>"))
    db = tmp_path / "w.duckdb"
    with ForwardingProxy({"docs.example": f"127.0.0.2:{site.port}"}) as proxy:
        result = crawl(db, proxy, urls=[f"{PUBLIC}/app.html", f"{PUBLIC}/huge.html"], render="js", max_bytes=20_000)
    ok(result, 1)
    # The sub-resource over the cap is dropped (the page renders without it); the page over the cap fails.
    text = _text(db, f"{PUBLIC}/app.html")
    assert BUILT in text and "xxxx" not in text
    outcome, reason, _ = fetch_log(db)[f"{PUBLIC}/huge.html"]
    assert outcome == "failed"
    assert reason.startswith(f"response too large: {PUBLIC}/huge.html says it has 40"), reason
    assert reason.endswith("bytes, more than 20000 (DOWNLOAD_MAXSIZE, crawl.max_bytes)"), reason
    assert "browser responses over crawl.max_bytes 2 (not read)" in result.stdout
    assert set(pages(db)) == {f"{PUBLIC}/app.html"}


@pytest.mark.e2e
@needs_chromium
def test_a_rendered_page_whose_gzip_body_is_cut_short_fails_with_that_reason(site: SiteServer, tmp_path: Path) -> None:
    site.add(1, "/robots.txt", "User-agent: *\nAllow: /\n", content_type="text/plain")
    whole = gzip.compress(_app(_show("'never read'")).encode())
    site.add(1, "/cut.html", whole[: len(whole) // 2], headers={"Content-Encoding": "gzip"})
    site.add(1, "/app.html", _app(_show(f"'{BUILT}'")))
    db = tmp_path / "w.duckdb"
    with ForwardingProxy({"docs.example": f"127.0.0.2:{site.port}"}) as proxy:
        result = crawl(db, proxy, urls=[f"{PUBLIC}/cut.html", f"{PUBLIC}/app.html"], render="js")
    outcome, reason, _ = fetch_log(db)[f"{PUBLIC}/cut.html"]
    assert outcome == "failed", result.stdout[-2000:]
    assert reason == f"response not read: {PUBLIC}/cut.html has a gzip body cut short (the stream does not end)"
    assert set(pages(db)) == {f"{PUBLIC}/app.html"}


@pytest.mark.e2e
@needs_chromium
def test_an_unchanged_rendered_page_is_a_304_like_a_static_one(site: SiteServer, tmp_path: Path) -> None:
    # On loopback with private networks allowed: the forwarding proxy would not pass the validators on.
    site.add(1, "/app.html", _app(_show(f"'{BUILT}'")))
    site.add(1, "/other.html", _app(_show("'Another page, first version.'")))
    db = tmp_path / "w.duckdb"
    app, other = site.url(1, "/app.html"), site.url(1, "/other.html")
    ok(crawl(db, None, urls=[app, other], render="js"))
    before = pages(db)
    site.set_body(1, "/other.html", _app(_show("'Another page, second version.'")))
    site.reset_log()
    second = ok(crawl(db, None, urls=[app, other], render="js"))
    [request] = site.requests_for(1, "/app.html")
    assert request.headers.get("if-none-match") == before[app]["etag"]
    assert request.headers.get("if-modified-since") == before[app]["last_modified"]
    assert request.status == 304
    assert "fetched 1 (new 0, changed 1, unchanged 0), not modified 1," in second.stdout
    assert "Traceback" not in second.stderr, second.stderr
    assert "second version" in _text(db, other)
    assert BUILT in _text(db, app), "the stored copy stays"


@pytest.mark.e2e
@needs_chromium
def test_cookies_and_credentials_do_not_follow_a_redirect_to_another_host(site: SiteServer, tmp_path: Path) -> None:
    # Host A's page sets a cookie and fetches /go with an Authorization header; /go redirects to host B,
    # whose answer tries to plant a cookie on A (it is handed to the page as the answer to A's URL).
    site.add(1, "/collect", "ok", content_type="text/plain", headers={"Set-Cookie": "planted=BY-HOST-B; Path=/"})
    site.redirect(0, "/go", site.url(1, "/collect"), status=302)
    site.add(0, "/after", "ok", content_type="text/plain")
    # And back: A -> B -> A, where A's own cookies (from the browser's jar) go again, the Authorization not.
    site.redirect(0, "/go2", site.url(1, "/bounce"), status=302)
    site.redirect(1, "/bounce", site.url(0, "/back"), status=302)
    site.add(0, "/back", "ok", content_type="text/plain")
    script = ("document.cookie = 'session=SECRET-OF-HOST-A; path=/';"
              "const auth = {headers: {'Authorization': 'Bearer TOKEN-OF-A'}};"
              "fetch('/go', auth).then(r => r.text()).then(() => fetch('/after'))"
              ".then(() => fetch('/go2', auth)).catch(() => null);" + _show(f"'{BUILT}'"))
    site.add(0, "/app.html", _app(script))
    ok(crawl(tmp_path / "c.duckdb", None, urls=[site.url(0, "/app.html")], render="js", obey_robots=False))
    [hop] = site.requests_for(1, "/collect")
    assert hop.headers.get("cookie") is None and hop.headers.get("authorization") is None, dict(hop.headers)
    [go] = site.requests_for(0, "/go")  # the test would prove nothing if A's own request carried neither
    assert "SECRET-OF-HOST-A" in (go.headers.get("cookie") or "") and go.headers.get("authorization")
    [after] = site.requests_for(0, "/after")
    assert "planted" not in (after.headers.get("cookie") or ""), after.headers.get("cookie")
    assert "SECRET-OF-HOST-A" in (after.headers.get("cookie") or "")
    [bounce] = site.requests_for(1, "/bounce")
    assert bounce.headers.get("cookie") is None and bounce.headers.get("authorization") is None
    [back] = site.requests_for(0, "/back")
    assert back.headers.get("authorization") is None
    assert "SECRET-OF-HOST-A" in (back.headers.get("cookie") or "") and "planted" not in back.headers["cookie"]
