"""Canonical pages and identical text stored once (issue 27, item 5).

The decision is pure (pipelines/duplicates.py); the write path is the real store; the crawls are `webqa crawl`
subprocesses against the loopback site and a `webqa run` with the fake Ollama shows that selection, scoped to
a duplicate, meets its text once, from the page that holds it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines import duplicates, schema
from pipelines.duplicates import CANONICAL, SAME_TEXT, Incoming, covers, decide
from pipelines.store import Store
from tests.support.fake_ollama import FakeOllama
from tests.support.site_server import SiteServer
from tests.support.crawling import chunk_ids, ok, page, pages, prose, rows, run_cli, summary
from tests.support.responders import quoting, run_quietly

ARTICLE = page("Lantern", ("Fuel", "Wicks"))


def test_what_counts_as_a_duplicate() -> None:
    text, other = prose("lantern", 8), prose("harbour", 8)
    assert covers(text + " A footer line of the printed edition.", text)
    assert not covers(other, text) and not covers(text, "")
    batch = [
        Incoming("/a", text, "h1", None),
        Incoming("/a?print", text + " Printed.", "h2", "/a"),       # names /a, which holds its text
        Incoming("/home-claim", other, "h3", "/a"),                 # names /a, but /a holds nothing of its text
        Incoming("/a-copy", text, "h1", None),                      # the same chunks as /a
        Incoming("/b", other, "h4", "/stored"),                     # names a stored page covering it
    ]
    assert decide(batch, {}, {"/stored": other}) == ({
        "/a?print": ("/a", CANONICAL), "/a-copy": ("/a", SAME_TEXT), "/b": ("/stored", CANONICAL)}, {})
    # Of identical texts the shortest URL holds them, whichever came first; no chains through a duplicate.
    assert decide([Incoming("/newer", text, "h1", None)], {"h1": "/old"}, {}) == ({"/newer": ("/old", SAME_TEXT)}, {})
    assert decide([Incoming("/n", text, "h1", None), Incoming("/m", text, "h1", None)], {"h1": "/older"}, {}) == (
        {"/n": ("/m", SAME_TEXT)}, {"/older": "/m"})
    assert decide([Incoming("/x", text, "h1", "/y"), Incoming("/y", text + " y", "h5", "/z"),
                   Incoming("/z", text + " y z", "h6", None)], {}, {}) == ({"/y": ("/z", CANONICAL)}, {})


def _article(canonical: str | None = None, extra: str = "") -> str:
    head = '<meta charset="utf-8">' + (f'<link rel="canonical" href="{canonical}">' if canonical else "")
    return page("Lantern", ("Fuel", "Wicks"), head=head, extra=extra)


@pytest.mark.e2e
def test_canonical_and_identical_pages_are_stored_once(site: SiteServer, tmp_path: Path) -> None:
    site.add(0, "/lantern.html", _article())
    site.add(0, "/lantern-print.html", _article("/lantern.html", extra="<p>Printed from the lantern guide.</p>"))
    site.add(0, "/lantern", _article(), headers={"Link": f'<{site.url(0, "/lantern.html")}>; rel="canonical"'})
    site.add(0, "/guide.html", page("Guide", ("Setup",)))
    site.add(0, "/guide-copy.html", page("Guide", ("Setup",)))
    site.add(0, "/misconfigured.html", page("Harbour", ("Tides",), head='<link rel="canonical" href="/guide.html">'))
    db = tmp_path / "w.duckdb"
    listed = [site.url(0, p) for p in ("/lantern.html", "/lantern-print.html", "/lantern", "/guide.html",
                                       "/guide-copy.html", "/misconfigured.html")]

    result = ok(run_cli(*listed, db=db))

    assert set(pages(db)) == set(listed)  # every page keeps its row (validators, links) …
    holders = {url for (url,) in rows(db, "SELECT DISTINCT url FROM chunks")}
    # … but only one of each text has chunks; the misconfigured canonical (an unrelated page) is not honoured.
    assert holders == {site.url(0, "/lantern.html"), site.url(0, "/guide.html"), site.url(0, "/misconfigured.html")}
    with Store.open(db) as store:
        assert store.duplicates() == [
            {"url": site.url(0, "/guide-copy.html"), "duplicate_of": site.url(0, "/guide.html"), "reason": SAME_TEXT},
            {"url": site.url(0, "/lantern"), "duplicate_of": site.url(0, "/lantern.html"), "reason": CANONICAL},
            {"url": site.url(0, "/lantern-print.html"), "duplicate_of": site.url(0, "/lantern.html"), "reason": CANONICAL},
        ]
        # A question scoped to a duplicate searches the page holding its text.
        assert store.stored_urls([site.url(0, "/guide-copy.html")]) == [
            site.url(0, "/guide-copy.html"), site.url(0, "/guide.html")]
    assert "duplicates 3 (stored once" in result.stdout and summary(result)["new"] == 6

    # The same crawl again: 304s, the duplicates stay duplicates.
    again = ok(run_cli(*listed, db=db))
    assert summary(again)["not_modified"] == 6 and "duplicates 3" in again.stdout
    assert {url for (url,) in rows(db, "SELECT DISTINCT url FROM chunks")} == holders


@pytest.mark.e2e
def test_the_canonical_page_is_followed_like_a_link(site: SiteServer, tmp_path: Path) -> None:
    site.add(0, "/lantern.html", _article())
    site.add(0, "/lantern-print.html", _article("/lantern.html"))
    db = tmp_path / "w.duckdb"

    ok(run_cli(site.url(0, "/lantern-print.html"), db=db))  # depth 0: the canonical is not fetched
    assert chunk_ids(db, site.url(0, "/lantern-print.html"))
    ok(run_cli(site.url(0, "/lantern-print.html"), "--depth", "1", db=db))

    assert set(pages(db)) == {site.url(0, "/lantern.html"), site.url(0, "/lantern-print.html")}
    assert not chunk_ids(db, site.url(0, "/lantern-print.html")), "its text is held by the canonical page now"
    assert chunk_ids(db, site.url(0, "/lantern.html"))


@pytest.mark.e2e
def test_a_duplicate_whose_page_changes_gets_its_own_text_back(site: SiteServer, tmp_path: Path) -> None:
    site.add(0, "/guide.html", page("Guide", ("Setup",)))
    site.add(0, "/guide-copy.html", page("Guide", ("Setup",)))
    urls = [site.url(0, "/guide.html"), site.url(0, "/guide-copy.html")]
    db = tmp_path / "w.duckdb"
    ok(run_cli(*urls, db=db))
    assert not chunk_ids(db, urls[1]) and pages(db)[urls[1]]["duplicate_of"] == urls[0]

    site.set_body(0, "/guide.html", page("Guide", ("Setup", "Upgrade")))
    ok(run_cli(*urls, db=db))
    # Its page now says something else: the copy is released, to be fetched in full ...
    assert pages(db)[urls[1]]["duplicate_of"] is None and pages(db)[urls[1]]["content_hash"] is None
    ok(run_cli(*urls, db=db))
    # ... and holds its own text again.
    assert chunk_ids(db, urls[1]) and pages(db)[urls[1]]["content_hash"] is not None


@pytest.mark.e2e
def test_migration_hashes_stored_chunks_as_the_write_path_does(site: SiteServer, tmp_path: Path) -> None:
    site.add(0, "/guide.html", page("Guide", ("Setup", "Ünïcode")))
    db = tmp_path / "w.duckdb"
    ok(run_cli(site.url(0, "/guide.html"), db=db))
    with Store.open(db) as store:
        written = store.conn.execute("SELECT text_hash FROM pages").fetchone()
        store.conn.execute("UPDATE pages SET text_hash = NULL")
        store.conn.execute(schema.MIGRATIONS[8][-1])
        assert store.conn.execute("SELECT text_hash FROM pages").fetchone() == written
        assert written[0] is not None and len(written[0]) == 64
    assert duplicates.text_hash([]) is None


@pytest.mark.e2e
def test_selection_never_sends_two_copies(site: SiteServer, tmp_path: Path, fake_ollama: FakeOllama) -> None:
    site.add(0, "/guide.html", page("Guide", ("Setup",)))
    site.add(0, "/guide-copy.html", page("Guide", ("Setup",)))
    site.add(0, "/guide-print.html", page("Guide", ("Setup",), head='<link rel="canonical" href="/guide.html">',
                                          extra="<p>Printed copy.</p>"))
    urls = [site.url(0, p) for p in ("/guide.html", "/guide-copy.html", "/guide-print.html")]
    needle = prose("Guide Setup").split(". ")[1]
    fake_ollama.chat_responder = quoting(needle[:40])

    _db, _run_dir, answers = run_quietly(
        tmp_path, "name: guide\nurls:\n" + "".join(f"  - {u}\n" for u in urls) + "crawl: {delay: 0}\n"
        "questions:\n  - What does the Guide Setup note explain?\n"
        f"  - id: scoped\n    question: What does the Guide Setup note explain?\n    urls: [{urls[1]}]\n"
        "selection: {method: bm25, top_k: 10}\n", fake_ollama.url)

    assert len(answers) == 2
    for answer in answers:
        texts = [chunk["text"] for chunk in answer["chunks"]]
        assert len(texts) == len(set(texts)) and texts, answer["question_id"]
        assert {chunk["url"] for chunk in answer["chunks"]} == {urls[0]}
        assert answer["grounded"] and answer["citations"][0]["url"] == urls[0]


@pytest.mark.e2e
def test_the_shortest_url_holds_the_text_whatever_came_first(site: SiteServer, tmp_path: Path) -> None:
    site.add(0, "/guide.html", page("Guide", ("Setup",)))
    site.add(0, "/guide-copy.html", page("Guide", ("Setup",)))
    short, long = site.url(0, "/guide.html"), site.url(0, "/guide-copy.html")
    db = tmp_path / "w.duckdb"
    ok(run_cli(long, db=db))
    assert chunk_ids(db, long)

    ok(run_cli(long, short, db=db))

    assert chunk_ids(db, short) and not chunk_ids(db, long)
    assert pages(db)[long]["duplicate_of"] == short
