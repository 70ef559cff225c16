"""crawl.render (issue 27 item 3): pages built by JavaScript, rendered by the system's Chromium, with every
request the browser makes through the SSRF guard and robots.txt, each render bounded.

The site is "public" (docs.example, behind tests/support/proxy.py, the guard on); 127.0.0.1 is a private host
the pages' scripts try to reach. The crawls run in subprocesses, like every crawl test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler.render import RenderPolicy, browser_proxy, rendered_text_problem, request_meta
from tests.support.site_server import SiteServer
from tests.support.crawling import chunk_ids, fetch_log, ok, page, pages, rows
from tests.support.proxy import ForwardingProxy
from tests.support.render import crawl, needs_chromium

PUBLIC = "http://docs.example"
ROBOTS = "User-agent: *\nDisallow: /private/\n"
# Text that is in no byte the server sends: the script assembles it from pieces.
BUILT = "The harbor lantern is refilled every Tuesday at dawn by the night watch."


def _app(script: str, title: str = "App") -> str:
    return (f"<!doctype html><html><head><title>{title}</title></head><body><main id='app'></main>"
            f"<script>{script}</script></body></html>")


def _build_text(expr: str) -> str:
    """A script that puts ``expr`` (a JS string expression) into the page as a heading and a paragraph."""
    return ("const main = document.getElementById('app');"
            "const h = document.createElement('h1'); h.textContent = 'Harbor notes'; main.appendChild(h);"
            f"const p = document.createElement('p'); p.textContent = {expr}; main.appendChild(p);")


def _public_site(site: SiteServer) -> None:
    site.add(1, "/robots.txt", ROBOTS, content_type="text/plain")
    site.add(0, "/robots.txt", "User-agent: *\nAllow: /\n", content_type="text/plain")
    site.add(0, "/secret", "internal admin token", content_type="text/plain")
    site.add(0, "/secret-redirected", "internal", content_type="text/plain")


# -- the pure parts ----------------------------------------------------------------------------


def test_the_policy_renders_every_page_or_the_matching_ones() -> None:
    assert not RenderPolicy.from_setting(None).enabled
    every = RenderPolicy.from_setting("js")
    assert every.wants("http://a.example/x.pdf") and every.setting() == "js"
    some = RenderPolicy.from_setting([r"/app/", r"\.spa$"])
    assert some.wants("http://a.example/app/1") and some.wants("http://a.example/b.spa")
    assert not some.wants("http://a.example/docs/1")
    assert request_meta(some, "http://a.example/docs/1", "ua") == {}
    meta = request_meta(some, "http://a.example/app/1", "webqa-test")
    assert meta["playwright"] is True and meta["playwright_context_kwargs"]["user_agent"] == "webqa-test"
    with pytest.raises(ValueError):
        RenderPolicy.from_setting("css")


def test_a_rendered_page_without_text_is_a_problem_and_one_with_text_is_not() -> None:
    assert rendered_text_problem("<html><head><title>T</title><script>x()</script></head><body>  </body></html>")
    assert rendered_text_problem("<html><body><noscript>enable JS</noscript><template>t</template></body></html>")
    # A single-page-app shell: scripts in the head and the body, a noscript plea, an empty root.
    assert rendered_text_problem("<html><head><script></script></head><body><div id=root></div>"
                                 "<script>var b=2</script><noscript>enable JS</noscript></body></html>")
    assert rendered_text_problem("<html><body><p>Hello</p></body></html>") is None


def test_the_operators_proxy_is_the_browsers() -> None:
    assert browser_proxy({}) == {}
    assert browser_proxy({"http_proxy": "http://10.0.0.5:3128", "no_proxy": "localhost"}) == {
        "proxy": {"server": "http://10.0.0.5:3128", "bypass": "localhost"}}
    assert browser_proxy({"HTTPS_PROXY": "proxy.corp:8080"}) == {"proxy": {"server": "http://proxy.corp:8080"}}


# -- real crawls -------------------------------------------------------------------------------


@pytest.mark.e2e
def test_a_crawl_that_renders_nothing_never_loads_playwright(site: SiteServer, tmp_path: Path) -> None:
    site.add(0, "/a.html", page("Plain page"))
    db = tmp_path / "w.duckdb"
    result = ok(crawl(db, None, urls=[site.url(0, "/a.html")]))
    assert "imported playwright: False False" in result.stdout
    assert set(pages(db)) == {site.url(0, "/a.html")}


@pytest.mark.e2e
@needs_chromium
def test_text_built_by_a_script_is_stored_and_the_scripts_private_fetches_are_refused(
        site: SiteServer, tmp_path: Path) -> None:
    _public_site(site)
    secret, hop = site.url(0, "/secret"), site.url(0, "/secret-redirected")
    data = '{"text": "%s"}' % BUILT.replace("harbor", "har\\u0062or")  # JSON escapes: not the text's bytes
    site.add(1, "/data.json", data, content_type="application/json")
    site.redirect(1, "/hop", hop, status=302)
    script = (
        # Its own text, fetched from its own host; then the private host, directly and through a redirect, and
        # a path robots.txt disallows: none of these may leave the browser.
        f"fetch('{secret}').catch(() => null); fetch('/hop').catch(() => null);"
        "fetch('/private/x').catch(() => null);"
        "fetch('/data.json').then(r => r.json()).then(d => {" + _build_text("d.text") + "});"
    )
    served = _app(script)
    assert BUILT not in served and BUILT not in data
    site.add(1, "/app.html", served)
    site.add(1, "/static.html", page("Static page"))
    db = tmp_path / "w.duckdb"
    with ForwardingProxy({"docs.example": f"127.0.0.2:{site.port}"}) as proxy:
        result = ok(crawl(db, proxy, urls=[f"{PUBLIC}/app.html", f"{PUBLIC}/static.html"], render="js"))

    stored = pages(db)
    assert set(stored) == {f"{PUBLIC}/app.html", f"{PUBLIC}/static.html"}
    text = " ".join(r[0] for r in rows(db, "SELECT text FROM chunks WHERE url = ?", [f"{PUBLIC}/app.html"]))
    assert BUILT in text
    assert chunk_ids(db, f"{PUBLIC}/static.html"), "a page without scripts renders too"
    assert site.requests_for(0) == [], "the private host received nothing"
    assert site.requests_for(1, "/private/x") == [], "robots.txt held for the browser's fetch"
    assert "browser requests refused 3 (SSRF guard or robots.txt)" in result.stdout
    assert "imported playwright: True True" in result.stdout


@pytest.mark.e2e
@needs_chromium
def test_only_pages_matching_the_patterns_are_rendered(site: SiteServer, tmp_path: Path) -> None:
    _public_site(site)
    built = _app(_build_text(f"'{BUILT}'"))
    site.add(1, "/app/one.html", built)
    site.add(1, "/docs/two.html", built)
    site.add(1, "/app/three.html", built)
    db = tmp_path / "w.duckdb"
    urls = [f"{PUBLIC}/app/one.html", f"{PUBLIC}/docs/two.html", f"{PUBLIC}/app/three.html"]
    with ForwardingProxy({"docs.example": f"127.0.0.2:{site.port}"}) as proxy:
        result = crawl(db, proxy, urls=urls, render=["/app/"], delay=1.0)
    ok(result)
    # The page left to Scrapy is the empty shell its HTML is (stored, nothing to read); the rendered one has text.
    assert set(pages(db)) == set(urls)
    # The host's delay holds between page loads, rendered or not (the pages' requests go through Scrapy's slot).
    loads = sorted(r.time for r in site.requests_for(1) if r.path.endswith(".html"))
    assert len(loads) == 3 and min(b - a for a, b in zip(loads, loads[1:])) >= 1.0
    assert BUILT in " ".join(r[0] for r in rows(db, "SELECT text FROM chunks WHERE url = ?", [f"{PUBLIC}/app/one.html"]))
    assert chunk_ids(db, f"{PUBLIC}/docs/two.html") == set()


@pytest.mark.e2e
@needs_chromium
def test_renders_that_hang_or_build_nothing_fail_with_the_reason(site: SiteServer, tmp_path: Path) -> None:
    _public_site(site)
    site.add(1, "/spin.html", _app("for (;;) {}"))  # the load event never comes
    site.add(1, "/late-spin.html", _app(_build_text("'Loaded, then stuck.'") + "setTimeout(() => { for (;;) {} }, 10);"))
    site.slow(1, "/never.html", 60)  # the page itself never arrives within the bound
    site.add(1, "/empty.html", _app("/* builds nothing */"))
    site.add(1, "/fine.html", _app(_build_text(f"'{BUILT}'")))
    db = tmp_path / "w.duckdb"
    urls = [f"{PUBLIC}/{name}.html" for name in ("spin", "late-spin", "never", "empty", "fine")]
    with ForwardingProxy({"docs.example": f"127.0.0.2:{site.port}"}) as proxy:
        result = crawl(db, proxy, urls=urls, render="js", timeout=3)
    ok(result, 1)
    log = fetch_log(db)
    for name in ("spin", "late-spin", "never"):  # each within the bound: the crawl went on and finished
        outcome, reason, _ = log[f"{PUBLIC}/{name}.html"]
        assert outcome == "failed" and reason.startswith("render timed out: the page "), (name, reason)
    assert log[f"{PUBLIC}/empty.html"][:2] == (
        "failed", "rendered page has no text (JavaScript rendering: its scripts built nothing to read)")
    assert set(pages(db)) == {f"{PUBLIC}/fine.html"}, "the other pages were rendered all the same"


@pytest.mark.e2e
@needs_chromium
def test_the_ssrf_guard_holds_for_the_browser_when_robots_txt_is_not_obeyed(site: SiteServer, tmp_path: Path) -> None:
    # Without robots.txt in the way (its fetch for the private host would be refused too), the guard alone.
    _public_site(site)
    secret, hop = site.url(0, "/secret"), site.url(0, "/secret-redirected")
    site.redirect(1, "/hop", hop, status=302)
    # Every other way a page reaches a host: a frame, an image, a stylesheet, a WebSocket.
    private = site.url(0, "/")
    others = (f"<iframe src='{private}frame'></iframe><img src='{private}img.png'>"
              f"<link rel='stylesheet' href='{private}style.css'><link rel='icon' href='{private}icon.png'>"
              f"<link rel='prefetch' href='{private}next.html'><a ping='{private}ping' href='/x'>x</a>"
              f"<script>try {{ new WebSocket('{private.replace('http', 'ws')}ws'); }} catch (e) {{}}</script>")
    site.add(1, "/app.html", _app(f"fetch('{secret}').catch(() => null); fetch('/hop').catch(() => null);"
                                  + _build_text(f"'{BUILT}'")).replace("</body>", others + "</body>"))
    db = tmp_path / "w.duckdb"
    with ForwardingProxy({"docs.example": f"127.0.0.2:{site.port}"}) as proxy:
        result = ok(crawl(db, proxy, urls=[f"{PUBLIC}/app.html"], render="js", obey_robots=False))
    assert site.requests_for(0) == [], "the private host received nothing"
    assert len(site.requests_for(1, "/hop")) == 1, "the public hop was fetched; its redirect was not followed"
    # The fetch, the redirect's hop and the frame; the image and the stylesheet are never fetched at all.
    assert "browser requests refused 3 (SSRF guard or robots.txt)" in result.stdout
    assert set(pages(db)) == {f"{PUBLIC}/app.html"}


@pytest.mark.e2e
def test_a_job_that_renders_without_chromium_is_one_line_before_anything_is_fetched(
        site: SiteServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site.add(0, "/a.html", page("Plain page"))
    monkeypatch.setenv("WEBQA_CHROMIUM", str(tmp_path / "no-chromium"))
    result = crawl(tmp_path / "w.duckdb", None, urls=[site.url(0, "/a.html")], render="js")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"Error: crawl.render needs Chromium at {tmp_path / 'no-chromium'}, which is missing: install it" in result.stderr
    assert site.requests_for(0) == []
