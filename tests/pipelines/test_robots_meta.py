"""Robots meta tags and X-Robots-Tag (issue 27 item 4): noindex pages are not stored for answering, the links
of nofollow pages are not followed, and `crawl.obey_noindex: false` stores pages the user owns.

The decision is a pure function (pipelines/robots_meta.py); the crawls are real `webqa crawl` subprocesses
against the loopback site, whose request log shows what was followed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.robots_meta import Directives, header_directives, page_directives
from pipelines.store import Store
from tests.support.site_server import SiteServer
from tests.support.crawling import crawl_api, fetch_log, ok, page, pages, run_cli, summary


def test_which_directives_apply_to_webqa() -> None:
    assert page_directives([("robots", "noindex, follow")], [], "webqa") == Directives(noindex='<meta name="robots">')
    assert page_directives([("ROBOTS", "None")], [], "webqa") == Directives('<meta name="robots">', '<meta name="robots">')
    assert page_directives([("webqa", "nofollow")], [], "webqa") == Directives(nofollow='<meta name="webqa">')
    assert page_directives([("googlebot", "noindex")], [], "webqa") == Directives()
    assert page_directives([("description", "noindex")], ["index, follow", "all"], "webqa") == Directives()
    assert page_directives([], ["noindex"], "webqa") == Directives(noindex="X-Robots-Tag")
    assert page_directives([], ["googlebot: noindex, nofollow"], "webqa") == Directives()
    assert page_directives([], ["googlebot: noarchive, webqa: noindex"], "webqa") == Directives(noindex="X-Robots-Tag")
    assert page_directives([], ["WebQA: nofollow"], "webqa") == Directives(nofollow="X-Robots-Tag")
    # A directive with a value of its own is not a user agent's name.
    assert header_directives(["unavailable_after: 25 Jun 2010 15:00:00 PST, noindex"], "webqa") == [
        "unavailable_after: 25 jun 2010 15:00:00 pst", "noindex"]


def _meta(content: str) -> str:
    return f'<meta charset="utf-8"><meta name="robots" content="{content}">'


@pytest.mark.e2e
def test_noindex_is_not_stored_and_nofollow_is_not_followed(site: SiteServer, tmp_path: Path) -> None:
    # The hub asks not to be indexed but to be followed: its links are pages to store.
    site.add(0, "/hub.html", page("Hub", links=["/a.html", "/nf.html", "/xnf.html"], head=_meta("noindex, follow")))
    site.add(0, "/a.html", page("A"))
    site.add(0, "/nf.html", page("No follow", links=["/behind-meta.html"], head=_meta("nofollow")))
    site.add(0, "/xnf.html", page("Header no follow", links=["/behind-header.html"]),
             headers={"X-Robots-Tag": "webqa: nofollow"})
    site.add(0, "/behind-meta.html", page("Behind meta"))
    site.add(0, "/behind-header.html", page("Behind header"))
    site.add(0, "/x.html", page("Header noindex"), headers={"X-Robots-Tag": "noindex"})
    site.add(0, "/other-bot.html", page("Other bot"), headers={"X-Robots-Tag": "googlebot: noindex"})
    db = tmp_path / "w.duckdb"
    hub, x = site.url(0, "/hub.html"), site.url(0, "/x.html")

    result = ok(run_cli("-q", hub, x, site.url(0, "/other-bot.html"), "--depth", "2", db=db))

    assert result.stdout == "" and result.stderr == ""  # a noindex page is a skip on purpose, not a failure
    assert set(pages(db)) == {site.url(0, p) for p in ("/a.html", "/nf.html", "/xnf.html", "/other-bot.html")}
    log = fetch_log(db)
    assert log[hub][0] == "skipped" and log[hub][1].startswith('noindex (<meta name="robots">): the page asks')
    assert log[x][0] == "skipped" and log[x][1].startswith("noindex (X-Robots-Tag)")
    assert site.requests_for(0, "/behind-meta.html") == [] and site.requests_for(0, "/behind-header.html") == []
    # The nofollow page keeps no links, so that a 304 next time does not lead on to them either.
    second = ok(run_cli(hub, x, site.url(0, "/other-bot.html"), "--depth", "2", db=db))
    assert summary(second)["not_modified"] == 4
    assert site.requests_for(0, "/behind-meta.html") == []


@pytest.mark.e2e
def test_obey_noindex_false_stores_pages_the_user_owns(site: SiteServer, tmp_path: Path) -> None:
    site.add(0, "/mine.html", page("Mine"), headers={"X-Robots-Tag": "noindex"})
    db = tmp_path / "w.duckdb"

    ok(crawl_api(db, urls=[site.url(0, "/mine.html")], obey_noindex=False))

    assert set(pages(db)) == {site.url(0, "/mine.html")}


@pytest.mark.e2e
def test_a_stored_page_that_turns_noindex_is_dropped(site: SiteServer, tmp_path: Path) -> None:
    url, other = site.url(0, "/p.html"), site.url(0, "/q.html")
    site.add(0, "/p.html", page("Page"))
    site.add(0, "/q.html", page("Other page"))
    db = tmp_path / "w.duckdb"
    ok(crawl_api(db, urls=[url, other], job_name="j"))

    site.set_body(0, "/p.html", page("Page", head=_meta("noindex")))
    ok(crawl_api(db, urls=[url, other], job_name="j"))

    with Store.open(db) as store:
        assert store.dropped_pages()[url].startswith("noindex")
        assert store.job_scope("j") == [other]
