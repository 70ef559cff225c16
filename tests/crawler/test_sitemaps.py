"""Sitemaps as a URL source (issue 27 item 1): `sitemap: URL` in a URL list or a job, read like pages.

The crawls are real `webqa crawl` and `webqa run` subprocesses against the loopback site; the site's request
log is the witness for what was (not) fetched, fetch_log for what was recorded. The parsing and its bounds
are pure functions (crawler/sitemaps.py), tested on their own first.
"""

from __future__ import annotations

import gzip
from datetime import datetime
from pathlib import Path

import pytest

from crawler import sitemaps
from crawler.run import CrawlOptions, run_crawl
from crawler.urllist import collect_urls, read_url_file
from pipelines.errors import ConfigError
from tests.support.site_server import SiteServer
from tests.support.crawling import crawl_api, fetch_log, ok, page, pages, run_cli, summary
from tests.support.proxy import ForwardingProxy, crawl_through
from tests.support.sitemaps import index, urlset
from tests.support.run import webqa

XML = "application/xml"


# -- pure functions ---------------------------------------------------------------------------------


def test_the_listing_syntax_in_text_and_yaml_files(tmp_path: Path) -> None:
    text = tmp_path / "urls.txt"
    text.write_text("https://a.org/p.html\nsitemap: https://a.org/sitemap.xml\nSitemap:https://a.org/robots.txt\n"
                    "sitemap: https://a.org/sitemap.xml\nsitemap: ftp://a.org/x\n", encoding="utf-8")
    listed, problems = collect_urls(read_url_file(text))
    assert [(u.url, u.sitemap) for u in listed] == [
        ("https://a.org/p.html", False), ("https://a.org/sitemap.xml", True), ("https://a.org/robots.txt", True)]
    assert [(p.origin, p.duplicate) for p in problems] == [(f"{text}:4", True), (f"{text}:5", False)]
    assert "unsupported scheme 'ftp'" in problems[1].reason

    listed_yaml = tmp_path / "urls.yaml"
    listed_yaml.write_text("- https://a.org/p.html\n- sitemap: https://a.org/sitemap.xml.gz\n", encoding="utf-8")
    listed, problems = collect_urls(read_url_file(listed_yaml))
    assert [(u.url, u.sitemap) for u in listed] == [("https://a.org/p.html", False), ("https://a.org/sitemap.xml.gz", True)]
    assert problems == []


def test_lastmod_counts_to_the_end_of_what_it_names() -> None:
    assert sitemaps.lastmod_end("2024-05-01") == datetime(2024, 5, 2)
    assert sitemaps.lastmod_end("2024-05-01T10:30:00+02:00") == datetime(2024, 5, 1, 8, 30)
    assert sitemaps.lastmod_end("2024-05-01T10:30Z") == datetime(2024, 5, 1, 10, 30)
    assert sitemaps.lastmod_end("2024-12") == datetime(2025, 1, 1)
    assert sitemaps.lastmod_end("2024") == datetime(2025, 1, 1)
    assert sitemaps.lastmod_end("yesterday") is None and sitemaps.lastmod_end(None) is None
    # Stored the same morning as a date-only lastmod: not known to be current.
    assert not sitemaps.unchanged_since("2024-05-01", datetime(2024, 5, 1, 9))
    assert sitemaps.unchanged_since("2024-05-01", datetime(2024, 5, 2, 0, 0, 1))
    assert not sitemaps.unchanged_since("2024-05-01", None)


def test_parse_bounds_and_refusals() -> None:
    parsed = sitemaps.parse_sitemap(urlset("https://a.org/1", ("https://a.org/2", "2024-01-01"), "https://a.org/3").encode(),
                                    max_entries=2)
    assert parsed.kind == "urlset" and parsed.truncated
    assert [(e.url, e.lastmod) for e in parsed.entries] == [("https://a.org/1", None), ("https://a.org/2", "2024-01-01")]
    with pytest.raises(sitemaps.SitemapError, match=r"the document is <html>, expected <urlset> or <sitemapindex>"):
        sitemaps.parse_sitemap(b"<html><body><p>hello</p></body></html>", max_entries=10)
    # An entity is never expanded (no XXE, no billion laughs).
    xxe = (b'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
           b'<urlset><url><loc>https://a.org/&e;</loc></url></urlset>')
    assert all("root:" not in e.url for e in sitemaps.parse_sitemap(xxe, max_entries=10).entries)
    bomb = gzip.compress(b" " * (sitemaps.MAX_BYTES + 1))
    with pytest.raises(sitemaps.SitemapError, match="after decompression"):
        sitemaps.sitemap_body(bomb)
    assert sitemaps.sitemap_body(gzip.compress(b"<urlset/>")) == b"<urlset/>"
    assert sitemaps.robots_sitemaps(b"User-agent: *\nSitemap: /s.xml\nsitemap: https://b.org/t.xml\nSitemap: /s.xml\n",
                                    "https://a.org/robots.txt") == ["https://a.org/s.xml", "https://b.org/t.xml"]


def test_a_sitemap_is_refused_through_redis_in_one_line(tmp_path: Path) -> None:
    options = CrawlOptions(urls=["sitemap: https://a.org/sitemap.xml"], redis="redis://127.0.0.1:1/0")
    with pytest.raises(ConfigError, match=r"^argument 1: sitemap: https://a.org/sitemap.xml: sitemaps are read by a "
                                          r"crawl on one machine, not through Redis"):
        run_crawl(options, tmp_path / "w.duckdb")


# -- crawls -----------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_sitemap_index_with_a_gzip_child_under_allow_deny_and_one_host(site: SiteServer, tmp_path: Path) -> None:
    for name in ("a", "b", "c", "private"):
        site.add(0, f"/{name}.html", page(name.upper()))
    site.add(1, "/elsewhere.html", page("Elsewhere"))
    site.add(0, "/sitemap.xml", index(site.url(0, "/pages.xml"), site.url(0, "/more.xml.gz")), content_type=XML)
    site.add(0, "/pages.xml", urlset(site.url(0, "/a.html"), site.url(0, "/private.html"), site.url(1, "/elsewhere.html")),
             content_type=XML)
    site.add(0, "/more.xml.gz", gzip.compress(urlset(site.url(0, "/b.html"), site.url(0, "/c.html"),
                                                     site.url(0, "/a.html")).encode()), content_type="application/gzip")
    listing = tmp_path / "urls.txt"
    listing.write_text(f"sitemap: {site.url(0, '/sitemap.xml')}\n", encoding="utf-8")
    db = tmp_path / "w.duckdb"

    result = ok(run_cli("-i", str(listing), "--deny", "/private", db=db))

    assert set(pages(db)) == {site.url(0, f"/{n}.html") for n in ("a", "b", "c")}
    assert site.requests_for(1) == [], "an entry on another host is never requested"
    assert site.requests_for(0, "/private.html") == [], "crawl.deny holds for sitemap entries"
    assert len(site.requests_for(0, "/a.html")) == 1, "listed by two sitemaps, fetched once"
    other = fetch_log(db)[site.url(1, "/elsewhere.html")]
    assert other[0] == "skipped" and "on another host than 127.0.0.1" in other[1]
    assert site.url(0, "/sitemap.xml") not in fetch_log(db), "a sitemap read is no fetch_log row"
    assert summary(result)["fetched"] == 3
    assert "sitemaps read 3 (6 URLs, 0 unchanged by lastmod)" in result.stdout


@pytest.mark.e2e
def test_lastmod_skips_a_page_unchanged_since_its_stored_copy(site: SiteServer, tmp_path: Path) -> None:
    for name in ("old", "new", "plain"):
        site.add(0, f"/{name}.html", page(name.title()))
    site.add(0, "/sitemap.xml", urlset((site.url(0, "/old.html"), "2020-01-01"), (site.url(0, "/new.html"), "2999-01-01"),
                                       site.url(0, "/plain.html")), content_type=XML)
    db = tmp_path / "w.duckdb"
    listed = f"sitemap: {site.url(0, '/sitemap.xml')}"

    first = summary(ok(run_cli(listed, db=db)))
    second_run = ok(run_cli(listed, db=db))
    second = summary(second_run)

    assert first["new"] == 3 and first["fresh"] == 0
    # old: lastmod before its stored copy, not requested; new (a lastmod ahead) and plain (none): asked again.
    assert second["fresh"] == 1 and second["not_modified"] == 2
    assert len(site.requests_for(0, "/old.html")) == 1
    assert len(site.requests_for(0, "/new.html")) == 2 and len(site.requests_for(0, "/plain.html")) == 2
    assert "1 unchanged by lastmod" in second_run.stdout
    # refresh (webqa run --refresh) is "fetch anyway": lastmod does not hold the page back either.
    refreshed = ok(crawl_api(db, urls=[listed], refresh=True))
    assert "fresh 0" in refreshed.stdout and len(site.requests_for(0, "/old.html")) == 2


@pytest.mark.e2e
def test_a_bomb_and_deep_nesting_are_refused_and_the_rest_goes_on(site: SiteServer, tmp_path: Path) -> None:
    site.add(0, "/a.html", page("A"))
    site.add(0, "/deep.html", page("Deep"))
    site.add(0, "/good.xml", urlset(site.url(0, "/a.html")), content_type=XML)
    site.add(0, "/bomb.xml.gz", gzip.compress(b"<urlset>" + b" " * (sitemaps.MAX_BYTES + 1024)),
             content_type="application/gzip")
    site.add(0, "/i0.xml", index(site.url(0, "/i1.xml")), content_type=XML)
    site.add(0, "/i1.xml", index(site.url(0, "/i2.xml")), content_type=XML)
    site.add(0, "/i2.xml", index(site.url(0, "/leaf.xml")), content_type=XML)
    site.add(0, "/leaf.xml", urlset(site.url(0, "/deep.html")), content_type=XML)
    site.add(0, "/page.html", page("Not a sitemap"))
    db = tmp_path / "w.duckdb"
    listed = [f"sitemap: {site.url(0, p)}" for p in ("/good.xml", "/bomb.xml.gz", "/i0.xml", "/page.html")]

    result = ok(run_cli("-q", *listed, db=db), 1)  # partial: three sitemaps could not be read

    assert set(pages(db)) == {site.url(0, "/a.html")}
    log = fetch_log(db)
    assert log[site.url(0, "/bomb.xml.gz")][:2] == (
        "failed", f"sitemap: larger than {sitemaps.MAX_BYTES} bytes after decompression (a gzip bomb?); not read")
    assert log[site.url(0, "/leaf.xml")][:2] == (
        "failed", f"sitemap nested more than 2 sitemap indexes deep (listed by {site.url(0, '/i2.xml')}); not read")
    assert site.requests_for(0, "/leaf.xml") == [] and site.requests_for(0, "/deep.html") == []
    assert log[site.url(0, "/page.html")][:2] == (
        "failed", "sitemap: not a sitemap: the document is <html>, expected <urlset> or <sitemapindex>")
    lines = result.stderr.strip().splitlines()
    assert result.stdout == "" and len(lines) == 1, result.stderr
    assert site.url(0, "/bomb.xml.gz") in lines[0]


@pytest.mark.e2e
def test_the_sites_sitemaps_through_robots_txt(site: SiteServer, tmp_path: Path) -> None:
    site.add(0, "/robots.txt", f"User-agent: *\nDisallow: /secret\nSitemap: {site.url(0, '/s.xml')}\n",
             content_type="text/plain")
    site.add(0, "/s.xml", urlset(site.url(0, "/a.html"), site.url(0, "/secret.html")), content_type=XML)
    site.add(0, "/a.html", page("A"))
    site.add(0, "/secret.html", page("Secret"))
    site.add(1, "/robots.txt", "User-agent: *\nAllow: /\n", content_type="text/plain")
    db = tmp_path / "w.duckdb"

    result = ok(run_cli(f"sitemap: {site.url(0, '/robots.txt')}", f"sitemap:{site.url(1, '/robots.txt')}", db=db), 1)

    assert set(pages(db)) == {site.url(0, "/a.html")}
    log = fetch_log(db)
    assert log[site.url(0, "/secret.html")][:2] == ("skipped", "disallowed by robots.txt")
    assert site.requests_for(0, "/secret.html") == []
    assert log[site.url(1, "/robots.txt")][:2] == ("failed", "sitemap: robots.txt names no sitemap (no Sitemap: lines)")
    assert "Traceback" not in result.stderr


@pytest.mark.e2e
def test_entries_to_a_private_or_other_host_are_refused_with_the_guard_on(site: SiteServer, tmp_path: Path) -> None:
    # docs.example is a "public" site behind a proxy (tests/support/proxy.py); 127.0.0.1 is private.
    secret = site.url(0, "/admin")
    site.add(0, "/admin", page("Admin"))
    site.add(1, "/robots.txt", "User-agent: *\nAllow: /\n", content_type="text/plain")
    site.add(1, "/ok.html", page("Public"))
    site.redirect(1, "/moved.html", secret, status=302)
    site.add(1, "/sitemap.xml", urlset("http://docs.example/ok.html", secret, "http://docs.example/moved.html"),
             content_type=XML)
    db = tmp_path / "w.duckdb"
    with ForwardingProxy({"docs.example": f"127.0.0.2:{site.port}"}) as proxy:
        result = crawl_through(proxy, "sitemap: http://docs.example/sitemap.xml", "--db", str(db),
                               no_proxy="127.0.0.1,localhost")

    ok(result, 1)  # the redirect the guard refused is a failure: partial
    assert set(pages(db)) == {"http://docs.example/ok.html"}
    assert site.requests_for(0) == [], "nothing on the private host was requested"
    log = fetch_log(db)
    assert log[secret][0] == "skipped" and "on another host than docs.example" in log[secret][1]
    assert log["http://docs.example/moved.html"][:2] == (
        "skipped", "blocked: 127.0.0.1 is a loopback address (SSRF guard); set allow_private_networks to crawl "
                   "private networks")


@pytest.mark.e2e
def test_max_pages_bounds_a_sitemaps_pages(site: SiteServer, tmp_path: Path) -> None:
    names = [f"p{i}" for i in range(6)]
    for name in names:
        site.add(0, f"/{name}.html", page(name))
    site.add(0, "/s.xml", urlset(*(site.url(0, f"/{n}.html") for n in names)), content_type=XML)
    db = tmp_path / "w.duckdb"

    ok(crawl_api(db, urls=[f"sitemap: {site.url(0, '/s.xml')}"], max_pages=2, sitemap_max_urls=4))

    assert set(pages(db)) == {site.url(0, "/p0.html"), site.url(0, "/p1.html")}
    assert fetch_log(db)[site.url(0, "/s.xml")][:2] == (
        "skipped", f"sitemap lists more URLs than crawl.sitemap_max_urls (4 for {site.url(0, '/s.xml')}); "
                   "the rest were not read")


@pytest.mark.e2e
def test_a_job_lists_a_sitemap(site: SiteServer, tmp_path: Path) -> None:
    site.add(0, "/a.html", page("Alpha"))
    site.add(0, "/s.xml", urlset(site.url(0, "/a.html")), content_type=XML)
    job = tmp_path / "job.yaml"
    job.write_text(f"name: sm\nurls:\n  - sitemap: {site.url(0, '/s.xml')}\ncrawl: {{delay: 0}}\n"
                   "questions: [\"What does the Alpha note explain?\"]\nanswerer: extractive\nselection: {method: bm25}\n", encoding="utf-8")
    db = tmp_path / "w.duckdb"

    result = webqa("-q", "run", job, "--db", db, "--out", tmp_path / "out", cwd=tmp_path)

    assert result.returncode == 0 and result.stdout == "" and result.stderr == "", result.stderr
    assert set(pages(db)) == {site.url(0, "/a.html")}
