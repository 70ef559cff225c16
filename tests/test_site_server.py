"""Tests for the loopback test site (tests/support/site_server.py), with plain http.client/urllib."""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.corpus import MISSING, has_manual
from tests.support.site_server import (
    FIXED_LAST_MODIFIED,
    PYTHON_DOCS_DIR,
    RequestInfo,
    SiteServer,
)

REPO_ROOT = Path(__file__).resolve().parent.parent


def fetch(
    server: SiteServer,
    host: int | str,
    target: str,
    headers: dict[str, str] | None = None,
    method: str = "GET",
    timeout: float = 5.0,
) -> tuple[int, dict[str, str], bytes]:
    """One raw request: http.client sends the target verbatim (no normalising, no redirects)."""
    addr = server.host(host)
    conn = http.client.HTTPConnection(addr, server.port_for(addr), timeout=timeout)
    try:
        conn.request(method, target, headers=headers or {})
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body
    finally:
        conn.close()


# -- hosts, routes, 404 ----------------------------------------------------------


def test_each_host_serves_its_own_routes_on_one_port(site: SiteServer) -> None:
    site.add(0, "/page.html", body="<p>one</p>")
    site.add("127.0.0.2", "/page.html", body="<p>two</p>")
    site.add(1, "/only-two.html", body="<p>only two</p>")

    assert site.url(0, "/page.html") == f"http://127.0.0.1:{site.port}/page.html"
    assert site.url(1, "page.html") == f"http://127.0.0.2:{site.port}/page.html"
    with urllib.request.urlopen(site.url(0, "/page.html"), timeout=5) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/html; charset=utf-8"
        assert resp.read() == b"<p>one</p>"
    with urllib.request.urlopen(site.url(1, "/page.html"), timeout=5) as resp:
        assert resp.read() == b"<p>two</p>"
    # Routes are per host: host 0 does not know host 1's page.
    assert fetch(site, 0, "/only-two.html")[0] == 404
    assert fetch(site, 1, "/only-two.html")[0] == 200
    assert [r.host for r in site.log] == ["127.0.0.1", "127.0.0.2", "127.0.0.1", "127.0.0.2"]


def test_unknown_path_is_404_with_small_html(site: SiteServer) -> None:
    status, headers, body = fetch(site, 0, "/nope?x=1")
    assert status == 404
    assert headers["content-type"].startswith("text/html")
    assert headers["content-length"] == str(len(body))
    assert b"Not Found" in body and b"/nope" in body
    assert site.log[-1].status == 404


def test_route_with_status_headers_and_query_matching(site: SiteServer) -> None:
    site.add(0, "/gone", body="bye", status=410, headers={"X-Why": "test"}, content_type="text/plain")
    site.add(0, "/q", body="plain q")
    site.add(0, "/q?special=1", body="special q")
    status, headers, body = fetch(site, 0, "/gone")
    assert (status, headers["x-why"], headers["content-type"], body) == (410, "test", "text/plain", b"bye")
    assert "etag" not in headers  # validators only on 200 routes
    assert fetch(site, 0, "/q?other=2")[2] == b"plain q"
    assert fetch(site, 0, "/q?special=1")[2] == b"special q"


def test_handler_route_gets_request_info(site: SiteServer) -> None:
    seen: list[RequestInfo] = []

    def handler(info: RequestInfo) -> tuple[int, dict[str, str], bytes]:
        seen.append(info)
        return 201, {"X-Echo": info.query["a"][0], "Content-Type": "text/plain"}, info.body.upper()

    site.add(1, "/api", handler=handler)
    status, headers, body = fetch(site, 1, "/api?a=b", method="POST")
    assert status == 201 and headers["x-echo"] == "b" and body == b""
    addr = site.host(1)
    conn = http.client.HTTPConnection(addr, site.port, timeout=5)
    conn.request("POST", "/api?a=c", body=b"hello", headers={"X-Test": "1"})
    resp = conn.getresponse()
    assert (resp.status, resp.getheader("X-Echo"), resp.read()) == (201, "c", b"HELLO")
    conn.close()
    assert seen[-1].method == "POST" and seen[-1].path == "/api" and seen[-1].target == "/api?a=c"
    assert seen[-1].headers["x-test"] == "1" and seen[-1].host == "127.0.0.2"


def test_handler_exception_gives_500_and_is_kept(site: SiteServer) -> None:
    def broken(info: RequestInfo) -> tuple[int, dict[str, str], bytes]:
        raise RuntimeError("boom in handler")

    site.add(0, "/broken", handler=broken)
    assert fetch(site, 0, "/broken")[0] == 500
    assert len(site.errors) == 1 and "boom in handler" in site.errors[0]


# -- redirects, conditional GET, gzip, HEAD, keep-alive ------------------------------


def test_redirect_status_and_location(site: SiteServer) -> None:
    target = site.url(1, "/new.html")
    site.redirect(0, "/old.html", target)
    site.redirect(0, "/temp", "/elsewhere", status=302)
    status, headers, _ = fetch(site, 0, "/old.html")
    assert (status, headers["location"]) == (301, target)
    status, headers, _ = fetch(site, 0, "/temp")
    assert (status, headers["location"]) == (302, "/elsewhere")


def test_conditional_get_etag_and_last_modified(site: SiteServer) -> None:
    site.add(0, "/doc.html", body="version 1")
    status, headers, body = fetch(site, 0, "/doc.html")
    etag, last_modified = headers["etag"], headers["last-modified"]
    assert status == 200 and body == b"version 1"
    assert etag == '"' + hashlib.sha1(b"version 1").hexdigest() + '"'
    assert last_modified == "Mon, 01 Jan 2024 00:00:00 GMT"

    status, headers, body = fetch(site, 0, "/doc.html", {"If-None-Match": etag})
    assert (status, body, headers["etag"]) == (304, b"", etag)
    assert fetch(site, 0, "/doc.html", {"If-None-Match": '"other", W/' + etag})[0] == 304
    assert fetch(site, 0, "/doc.html", {"If-None-Match": '"other"'})[0] == 200
    status, _, body = fetch(site, 0, "/doc.html", {"If-Modified-Since": last_modified})
    assert (status, body) == (304, b"")
    assert fetch(site, 0, "/doc.html", {"If-Modified-Since": "Sun, 31 Dec 2023 23:59:59 GMT"})[0] == 200
    # If-None-Match wins over If-Modified-Since (RFC 9110 13.2.2).
    assert fetch(site, 0, "/doc.html", {"If-None-Match": '"x"', "If-Modified-Since": last_modified})[0] == 200

    site.set_body(0, "/doc.html", "version 2")
    status, headers, body = fetch(site, 0, "/doc.html", {"If-None-Match": etag})
    assert (status, body) == (200, b"version 2")
    assert headers["etag"] == '"' + hashlib.sha1(b"version 2").hexdigest() + '"'
    status, headers2, body = fetch(site, 0, "/doc.html", {"If-Modified-Since": last_modified})
    assert (status, body) == (200, b"version 2")
    assert headers2["last-modified"] != last_modified
    assert fetch(site, 0, "/doc.html", {"If-Modified-Since": headers2["last-modified"]})[0] == 304


def test_validators_configurable(site: SiteServer) -> None:
    site.add(0, "/custom", body="x", headers={"ETag": 'W/"v7"'}, last_modified=FIXED_LAST_MODIFIED + 86400)
    site.add(0, "/none", body="x", conditional=False)
    status, headers, _ = fetch(site, 0, "/custom")
    assert headers["etag"] == 'W/"v7"' and headers["last-modified"] == "Tue, 02 Jan 2024 00:00:00 GMT"
    assert fetch(site, 0, "/custom", {"If-None-Match": 'W/"v7"'})[0] == 304
    status, headers, _ = fetch(site, 0, "/none", {"If-None-Match": "*"})
    assert status == 200 and "etag" not in headers and "last-modified" not in headers


def test_gzip_route_compresses_only_when_asked(site: SiteServer) -> None:
    page = b"<html>" + b"compressible " * 200 + b"</html>"
    site.add(0, "/z.html", body=page, gzip=True)
    site.add(0, "/plain.html", body=page)

    status, headers, body = fetch(site, 0, "/z.html", {"Accept-Encoding": "gzip, deflate"})
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert headers["vary"] == "Accept-Encoding"
    assert int(headers["content-length"]) == len(body) < len(page)
    assert gzip.decompress(body) == page

    status, headers, body = fetch(site, 0, "/z.html", {"Accept-Encoding": "identity"})
    assert "content-encoding" not in headers and body == page
    assert "content-encoding" not in fetch(site, 0, "/z.html", {"Accept-Encoding": "gzip;q=0"})[1]
    status, headers, body = fetch(site, 0, "/plain.html", {"Accept-Encoding": "gzip"})
    assert "content-encoding" not in headers and body == page


def test_head_and_keep_alive(site: SiteServer) -> None:
    site.add(0, "/a", body="aaaa")
    site.add(0, "/b", body="bb")
    conn = http.client.HTTPConnection("127.0.0.1", site.port, timeout=5)
    conn.request("HEAD", "/a")
    resp = conn.getresponse()
    assert resp.version == 11 and resp.getheader("Content-Length") == "4" and resp.read() == b""
    first_socket = conn.sock
    conn.request("GET", "/b")  # http.client would reconnect if the server had closed
    resp = conn.getresponse()
    assert resp.read() == b"bb"
    assert conn.sock is first_socket and first_socket is not None
    conn.close()
    assert [(r.method, r.path) for r in site.log] == [("HEAD", "/a"), ("GET", "/b")]


# -- static directories -----------------------------------------------------------


@pytest.fixture
def www(tmp_path: Path) -> Path:
    root = tmp_path / "www"
    (root / "sub").mkdir(parents=True)
    (root / "index.html").write_text("<h1>home</h1>")
    (root / "sub" / "page.html").write_text("<p>sub page</p>")
    (root / "sub" / "index.html").write_text("<p>sub index</p>")
    (root / "style.css").write_text("body{}")
    (tmp_path / "secret.txt").write_text("TOP SECRET")
    return root


def test_static_directory(site: SiteServer, www: Path) -> None:
    site.serve_dir(0, "/", www)
    site.serve_dir(1, "/docs", www)

    assert fetch(site, 0, "/")[2] == b"<h1>home</h1>"
    status, headers, body = fetch(site, 0, "/sub/page.html?q=1")
    assert (status, headers["content-type"], body) == (200, "text/html; charset=utf-8", b"<p>sub page</p>")
    assert fetch(site, 0, "/style.css")[1]["content-type"] == "text/css; charset=utf-8"
    assert fetch(site, 0, "/sub/")[2] == b"<p>sub index</p>"
    status, headers, _ = fetch(site, 0, "/sub")
    assert (status, headers["location"]) == (301, "/sub/")
    assert fetch(site, 0, "/missing.html")[0] == 404
    # Mounted under a prefix on the other host only.
    assert fetch(site, 1, "/docs/sub/page.html")[2] == b"<p>sub page</p>"
    assert fetch(site, 1, "/sub/page.html")[0] == 404
    assert (fetch(site, 1, "/docs")[0], fetch(site, 1, "/docs")[1]["location"]) == (301, "/docs/")


def test_static_conditional_get(site: SiteServer, www: Path) -> None:
    site.serve_dir(0, "/", www)
    page = www / "sub" / "page.html"
    os.utime(page, (1700000000, 1700000000))
    status, headers, _ = fetch(site, 0, "/sub/page.html")
    assert headers["etag"] == '"' + hashlib.sha1(page.read_bytes()).hexdigest() + '"'
    assert headers["last-modified"] == "Tue, 14 Nov 2023 22:13:20 GMT"
    assert fetch(site, 0, "/sub/page.html", {"If-None-Match": headers["etag"]})[0] == 304
    assert fetch(site, 0, "/sub/page.html", {"If-Modified-Since": headers["last-modified"]})[0] == 304
    page.write_text("<p>changed</p>")
    status, _, body = fetch(site, 0, "/sub/page.html", {"If-None-Match": headers["etag"]})
    assert (status, body) == (200, b"<p>changed</p>")


@pytest.mark.parametrize(
    "target",
    [
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E%2Fsecret.txt",
        "/sub/../../secret.txt",
        "/sub/..%2f..%2fsecret.txt",
        "/..%5csecret.txt",
        "/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    ],
)
def test_static_traversal_refused(site: SiteServer, www: Path, target: str) -> None:
    site.serve_dir(0, "/", www)
    status, _, body = fetch(site, 0, target)
    assert status == 403
    assert b"SECRET" not in body and b"root:" not in body


def test_static_dot_dot_inside_names_is_fine(site: SiteServer, www: Path) -> None:
    (www / "a..b.html").write_text("dots")
    site.serve_dir(0, "/", www)
    assert fetch(site, 0, "/a..b.html")[:1] == (200,)


@pytest.mark.corpus
@pytest.mark.skipif(not has_manual(PYTHON_DOCS_DIR), reason=MISSING)
def test_serves_python_docs_on_two_hosts(site: SiteServer) -> None:
    for host in site.hosts:
        site.serve_dir(host, "/", PYTHON_DOCS_DIR)
    for host in site.hosts:
        status, headers, body = fetch(site, host, "/library/index.html")
        assert status == 200 and b"The Python Standard Library" in body
    # Debian symlinks this out of the tree; it must still be served.
    status, headers, body = fetch(site, 1, "/_static/jquery.js")
    assert status == 200 and headers["content-type"].startswith("text/javascript") and len(body) > 1000


# -- misbehaving routes ---------------------------------------------------------------


def test_slow_route_waits_and_log_time_is_request_start(site: SiteServer) -> None:
    site.slow(0, "/slow", 0.3, body="finally")
    started = time.monotonic()
    status, _, body = fetch(site, 0, "/slow")
    finished = time.monotonic()
    assert (status, body) == (200, b"finally")
    assert finished - started >= 0.3
    (record,) = site.requests_for(0, "/slow")
    assert record.time - started < 0.25  # stamped on arrival, before the sleep
    assert finished - record.time >= 0.3


def test_trickle_sends_all_bytes_slowly(site: SiteServer) -> None:
    site.trickle(0, "/trickle", total_bytes=100, bytes_per_chunk=10, interval=0.02)
    started = time.monotonic()
    status, headers, body = fetch(site, 0, "/trickle")
    assert status == 200 and headers["content-length"] == "100" and len(body) == 100
    assert time.monotonic() - started >= 10 * 0.02


def test_trickle_times_out_a_strict_client(site: SiteServer) -> None:
    site.trickle(0, "/trickle", total_bytes=100, bytes_per_chunk=1, interval=0.5)
    with pytest.raises(TimeoutError):
        fetch(site, 0, "/trickle", timeout=0.2)


def test_drop_closes_without_answer(site: SiteServer) -> None:
    site.drop(0, "/drop")
    site.drop(0, "/reset", reset=True)
    with pytest.raises(http.client.RemoteDisconnected):
        fetch(site, 0, "/drop")
    with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected)):
        fetch(site, 0, "/reset")
    assert [(r.path, r.status) for r in site.log] == [("/drop", None), ("/reset", None)]


def test_stop_is_prompt_with_a_sleeping_handler() -> None:
    server = SiteServer(("127.0.0.1",)).start()
    server.slow(0, "/forever", 60)
    errors: list[BaseException] = []

    def client() -> None:
        try:
            fetch(server, 0, "/forever", timeout=10)
        except BaseException as exc:  # the dropped connection is expected
            errors.append(exc)

    thread = threading.Thread(target=client)
    thread.start()
    while not server.log:
        time.sleep(0.01)
    port = server.port
    started = time.monotonic()
    server.stop()
    thread.join(5)
    assert not thread.is_alive() and time.monotonic() - started < 2
    assert errors  # the client got no answer
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1)


# -- request log --------------------------------------------------------------------


def test_request_log_records_host_path_headers(site: SiteServer) -> None:
    site.add(1, "/p", body="x")
    fetch(site, 1, "/p?x=1", {"User-Agent": "webqa-test", "X-Custom": "Yes"})
    fetch(site, 0, "/missing")
    rec = site.log[0]
    assert (rec.host, rec.path, rec.method, rec.status) == ("127.0.0.2", "/p?x=1", "GET", 200)
    assert rec.headers["user-agent"] == "webqa-test" and rec.headers["x-custom"] == "Yes"
    assert all(k == k.lower() for k in rec.headers)
    assert site.paths(1) == ["/p?x=1"] and site.paths("127.0.0.1") == ["/missing"]
    assert site.requests_for(path="/p") == [rec]  # path matches without the query too
    assert site.requests_for(host=0) == [site.log[1]]
    site.reset_log()
    assert site.log == [] and site.paths(1) == []


def test_min_gap_from_spaced_requests(site: SiteServer) -> None:
    site.add(0, "/robots.txt", body="User-agent: *\nDisallow: /private/\n", content_type="text/plain")
    site.add(0, "/a", body="a")
    fetch(site, 0, "/a")
    fetch(site, 0, "/robots.txt")  # right after /a, but excluded by default
    time.sleep(0.25)
    fetch(site, 0, "/a")
    fetch(site, 1, "/elsewhere")  # other hosts do not count
    gap = site.min_gap(0)
    expected = site.log[2].time - site.log[0].time
    assert gap == expected and 0.25 <= gap < 1.0
    # Counting robots.txt, the gap is the quick back-to-back pair.
    assert site.min_gap("127.0.0.1", exclude_paths=()) < 0.2
    with pytest.raises(ValueError):
        site.min_gap(1)


def test_quiet_no_stderr(site: SiteServer, capfd: pytest.CaptureFixture[str]) -> None:
    site.add(0, "/a", body="a")
    fetch(site, 0, "/a")
    fetch(site, 0, "/404")
    with socket.create_connection(("127.0.0.1", site.port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/x.y\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.")  # a 400 from the stdlib parser
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    assert site.log[-1].status == 400


# -- factory and script mode ------------------------------------------------------------


def test_site_factory_more_hosts(site_factory: Callable[..., SiteServer]) -> None:
    server = site_factory(hosts=("127.0.0.1", "127.0.0.2", "127.0.0.3"))
    for i, host in enumerate(server.hosts):
        server.add(host, "/", body=f"host {i}")
    for i in range(3):
        with urllib.request.urlopen(server.url(i), timeout=5) as resp:
            assert resp.read() == f"host {i}".encode()
    assert {server.port_for(h) for h in server.hosts} == {server.port}


def test_fixed_port_conflict_is_reported() -> None:
    with SiteServer(("127.0.0.1",)) as first:
        with pytest.raises(OSError):
            SiteServer(("127.0.0.2", "127.0.0.1"), port=first.port).start()


@pytest.mark.e2e
def test_script_mode_serves_and_stops_on_sigint(www: Path) -> None:
    # faulthandler: if it does not stop, SIGABRT makes it print every thread's stack for the failure message.
    proc = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-m", "tests.support.site_server", "--dir", str(www),
         "--hosts", "127.0.0.1,127.0.0.2", "--port", "0"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        urls = [proc.stdout.readline().strip() for _ in range(2)]
        assert urls[0].startswith("http://127.0.0.1:") and urls[1].startswith("http://127.0.0.2:")
        assert urls[0].rsplit(":", 1)[1] == urls[1].rsplit(":", 1)[1]  # same port
        for url in urls:
            with urllib.request.urlopen(url + "sub/page.html", timeout=5) as resp:
                assert resp.read() == b"<p>sub page</p>"
        proc.send_signal(signal.SIGINT)
        try:
            # Generous: in full-suite runs on 2 cores it has taken more than 5 s.
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            _, err = proc.communicate(timeout=10)
            pytest.fail(f"still running 30 s after SIGINT; its threads:\n{err[-6000:]}")
        assert code == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
