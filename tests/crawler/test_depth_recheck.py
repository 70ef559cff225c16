"""Pages below an unchanged page are re-checked, and each job knows the pages its crawls reached.

Real crawls (subprocesses, see tests/support/crawling.py) against the loopback site, read back from DuckDB.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from pipelines.store import Store
from tests.support.site_server import SiteServer
from tests.support.crawling import crawl_api, ok, page, pages, summary

pytestmark = pytest.mark.e2e  # every test here starts a child process (tests/support/e2e.py)


def job_pages(db: Path, job: str, crawl_run_id: int | None = None) -> list[str]:
    with Store.open(db, read_only=True) as store:
        return store.job_page_urls(job, crawl_run_id=crawl_run_id)


def requested(site: SiteServer, host: int = 0) -> list[str]:
    return sorted(r.path for r in site.requests_for(host) if r.path != "/robots.txt")


def docs_site(site: SiteServer, children: tuple[str, ...] = ("a", "b", "c")) -> str:
    """/index.html linking to /docs/<name>.html for each child; returns the index URL."""
    site.add(0, "/index.html", page("Index", links=[f"/docs/{name}.html" for name in children]))
    for name in children:
        site.add(0, f"/docs/{name}.html", page(f"Doc {name.upper()}"))
    return site.url(0, "/index.html")


def test_a_changed_page_below_an_unchanged_seed_is_fetched(site: SiteServer, tmp_path: Path) -> None:
    index = docs_site(site)
    db = tmp_path / "webqa.duckdb"
    first = summary(ok(crawl_api(db, urls=[index], depth=1, job_name="docs")))
    assert first["new"] == 4
    site.set_body(0, "/docs/b.html", page("Doc B", ("Install", "Upgrading")))
    site.reset_log()

    second = summary(ok(crawl_api(db, urls=[index], depth=1, job_name="docs")))

    # The seed answers 304; its stored links are followed all the same, conditionally.
    assert (second["not_modified"], second["changed"], second["fetched"]) == (3, 1, 1)
    assert [r.status for r in site.requests_for(0, "/index.html")] == [304]
    assert all(r.headers.get("if-none-match") for r in site.requests_for(0, "/docs/a.html"))
    assert "Upgrading" in pages(db)[site.url(0, "/docs/b.html")]["text"]
    assert job_pages(db, "docs") == sorted([index, *(site.url(0, f"/docs/{n}.html") for n in "abc")])


def test_a_page_no_longer_linked_is_reported_gone_and_kept(site: SiteServer, tmp_path: Path) -> None:
    index = docs_site(site)
    db = tmp_path / "webqa.duckdb"
    ok(crawl_api(db, urls=[index], depth=1, job_name="docs"))
    site.set_body(0, "/index.html", page("Index", links=["/docs/a.html", "/docs/b.html"]))

    result = ok(crawl_api(db, urls=[index], depth=1, job_name="docs"))

    assert "; gone 1 (no longer reached by the job)" in result.stdout
    gone = site.url(0, "/docs/c.html")
    with Store.open(db, read_only=True) as store:
        latest = store.job_page_urls("docs")
        assert store.gone_job_pages("docs", 2) == [gone]
        assert store.gone_job_pages("docs", 1) == []
    assert gone not in latest and len(latest) == 3
    assert gone in pages(db)  # the page stays; the job just no longer reaches it

    # A third crawl reaching the same pages has nothing gone: c went at crawl 2, not again.
    assert "gone" not in ok(crawl_api(db, urls=[index], depth=1, job_name="docs")).stdout


def test_jobs_sharing_a_database_each_know_their_own_pages(site: SiteServer, tmp_path: Path) -> None:
    index = docs_site(site, ("a", "b"))
    site.add(1, "/home.html", page("Home", links=["/guide.html"]))
    site.add(1, "/guide.html", page("Guide"))
    home = site.url(1, "/home.html")
    db = tmp_path / "webqa.duckdb"

    ok(crawl_api(db, urls=[index], depth=1, job_name="docs"))
    ok(crawl_api(db, urls=[home], depth=1, job_name="guide"))
    ok(crawl_api(db, urls=[home]))  # no job name: nothing recorded

    assert job_pages(db, "docs") == sorted([index, site.url(0, "/docs/a.html"), site.url(0, "/docs/b.html")])
    assert job_pages(db, "guide") == [site.url(1, "/guide.html"), home]
    assert job_pages(db, "docs", crawl_run_id=1) == job_pages(db, "docs")
    assert job_pages(db, "nobody") == []
    with Store.open(db, read_only=True) as store:
        assert store.conn.execute("SELECT DISTINCT job_name FROM job_pages ORDER BY 1").fetchall() == [("docs",), ("guide",)]
        # The guide job's first crawl: nothing before it to be gone, the docs job's pages are not its own.
        assert store.gone_job_pages("guide", 2) == []


def test_allow_and_deny_apply_to_stored_links(site: SiteServer, tmp_path: Path) -> None:
    index = docs_site(site)
    db = tmp_path / "webqa.duckdb"
    # Links are stored before allow/deny: a denied page is not fetched, but its link is kept.
    ok(crawl_api(db, urls=[index], depth=1, deny=[r"/docs/c\.html$"], job_name="docs"))
    assert requested(site) == ["/docs/a.html", "/docs/b.html", "/index.html"]
    site.reset_log()

    # The seed answers 304: without the deny, its stored link to c is followed; the new deny holds for a.
    ok(crawl_api(db, urls=[index], depth=1, deny=[r"/docs/a\.html$"], job_name="docs"))

    assert requested(site) == ["/docs/b.html", "/docs/c.html", "/index.html"]
    assert [r.status for r in site.requests_for(0, "/index.html")] == [304]
    site.reset_log()
    ok(crawl_api(db, urls=[index], depth=1, allow=[r"/docs/b\.html$"], job_name="docs"))
    assert requested(site) == ["/docs/b.html", "/index.html"]
    assert job_pages(db, "docs") == [site.url(0, "/docs/b.html"), index]


def test_max_pages_holds_for_stored_links(site: SiteServer, tmp_path: Path) -> None:
    index = docs_site(site)
    db = tmp_path / "webqa.duckdb"
    ok(crawl_api(db, urls=[index], depth=1))
    site.reset_log()

    ok(crawl_api(db, urls=[index], depth=1, max_pages=2))

    assert [r.status for r in site.requests_for(0, "/index.html")] == [304]
    assert len(requested(site)) == 2


def test_a_fresh_seed_leads_on_to_its_stored_links(site: SiteServer, tmp_path: Path) -> None:
    index = docs_site(site)
    db = tmp_path / "webqa.duckdb"
    ok(crawl_api(db, urls=[index], depth=1, job_name="docs"))
    site.set_body(0, "/docs/a.html", page("Doc A", ("Install", "Upgrading")))
    site.reset_log()
    hour = timedelta(hours=1).total_seconds()

    # Every page is fresh: none is requested, yet each is reached, through the seed's stored links.
    result = ok(crawl_api(db, urls=[index], depth=1, recrawl_after=hour, job_name="docs"))
    assert requested(site) == []
    assert summary(result)["fresh"] == 4
    assert len(job_pages(db, "docs", crawl_run_id=2)) == 4
    # With only the seed fresh (its children checked long ago), the children are still re-checked.
    with Store.open(db) as store:
        store.conn.execute("UPDATE pages SET checked_at = checked_at - INTERVAL 2 HOUR WHERE url LIKE '%/docs/%'")
    site.reset_log()

    counts = summary(ok(crawl_api(db, urls=[index], depth=1, recrawl_after=hour, job_name="docs")))

    assert requested(site) == ["/docs/a.html", "/docs/b.html", "/docs/c.html"]
    assert (counts["fresh"], counts["changed"], counts["not_modified"]) == (1, 1, 2)
    assert "Upgrading" in pages(db)[site.url(0, "/docs/a.html")]["text"]
    # The fresh seed, never requested, is reached all the same.
    assert index in job_pages(db, "docs")


def test_a_page_stored_before_links_were_kept_is_fetched_once_in_full(site: SiteServer, tmp_path: Path) -> None:
    index = docs_site(site)
    db = tmp_path / "webqa.duckdb"
    ok(crawl_api(db, urls=[index], depth=1))
    with Store.open(db) as store:  # as a database written by an older webqa
        store.conn.execute("UPDATE pages SET links_at = NULL")
        store.conn.execute("DELETE FROM page_links")
    site.set_body(0, "/docs/c.html", page("Doc C", ("Install", "Upgrading")))
    site.reset_log()

    counts = summary(ok(crawl_api(db, urls=[index], depth=1)))

    assert [r.status for r in site.requests_for(0, "/index.html")] == [200]
    assert "if-none-match" not in site.requests_for(0, "/index.html")[0].headers
    assert counts["changed"] == 1 and "Upgrading" in pages(db)[site.url(0, "/docs/c.html")]["text"]
    site.reset_log()
    ok(crawl_api(db, urls=[index], depth=1))
    assert [r.status for r in site.requests_for(0, "/index.html")] == [304]
    assert len(requested(site)) == 4


def test_a_seed_failing_with_a_server_error_still_leads_on(site: SiteServer, tmp_path: Path) -> None:
    index = docs_site(site)
    db = tmp_path / "webqa.duckdb"
    ok(crawl_api(db, urls=[index], depth=1, job_name="docs"))
    site.add(0, "/index.html", "<h1>Down for maintenance</h1>", status=503)
    site.set_body(0, "/docs/c.html", page("Doc C", ("Install", "Upgrading")))

    result = ok(crawl_api(db, urls=[index], depth=1, job_name="docs"), code=1)  # the seed failed

    assert summary(result)["changed"] == 1 and "Upgrading" in pages(db)[site.url(0, "/docs/c.html")]["text"]
    assert "gone" not in result.stdout and len(job_pages(db, "docs")) == 4
    # A page the server says is gone leads nowhere: its links are not followed.
    site.add(0, "/index.html", "<h1>Not here</h1>", status=404)
    site.reset_log()
    ok(crawl_api(db, urls=[index], depth=1, job_name="docs"), code=3)  # nothing could be fetched
    assert requested(site) == ["/index.html"]
    with Store.open(db, read_only=True) as store:
        assert store.gone_job_pages("docs", 3) == [site.url(0, f"/docs/{n}.html") for n in "abc"]
