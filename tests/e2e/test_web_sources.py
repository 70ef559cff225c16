"""Issue 27 together: one `webqa run` over a site reached through its sitemap index, holding a PDF, a noindex
page, a canonical duplicate and an ordinary page, stores exactly what it should and cites the PDF's page.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tests.support.fake_ollama import FakeOllama
from tests.support.site_server import SiteServer
from tests.support.crawling import fetch_log, page, pages, rows
from tests.support.pdfs import MANUAL, OUTLINE, make_pdf
from tests.support.responders import quoting, run_quietly
from tests.support.sitemaps import index, urlset

pytestmark = pytest.mark.e2e  # every test here starts a child process (tests/support/e2e.py)

XML = "application/xml"


def test_one_run_over_a_site_of_every_kind(site: SiteServer, tmp_path: Path, fake_ollama: FakeOllama) -> None:
    url = site.url
    site.add(0, "/robots.txt", f"User-agent: *\nAllow: /\nSitemap: {url(0, '/sitemap.xml')}\n", content_type="text/plain")
    site.add(0, "/sitemap.xml", index(url(0, "/pages.xml"), url(0, "/docs.xml.gz")), content_type=XML)
    site.add(0, "/pages.xml", urlset(url(0, "/guide.html"), url(0, "/guide-print.html"), url(0, "/drafts.html")),
             content_type=XML)
    site.add(0, "/docs.xml.gz", gzip.compress(urlset(url(0, "/manual.pdf")).encode()), content_type="application/gzip")
    site.add(0, "/guide.html", page("Guide", ("Setup",)))
    site.add(0, "/guide-print.html", page("Guide", ("Setup",), head='<link rel="canonical" href="/guide.html">',
                                          extra="<p>Printed copy.</p>"))
    site.add(0, "/drafts.html", page("Drafts"), headers={"X-Robots-Tag": "noindex"})
    site.add(0, "/manual.pdf", make_pdf(MANUAL, outline=OUTLINE, title="Lumen Manual"), content_type="application/pdf")
    fake_ollama.chat_responder = quoting("twelve volts")

    db, _run_dir, (answer,) = run_quietly(
        tmp_path, f"name: site\nurls:\n  - sitemap: {url(0, '/robots.txt')}\ncrawl: {{delay: 0}}\n"
                  "questions: [\"Which supply voltage does the Lumen controller need?\"]\nselection: {method: bm25}\n",
        fake_ollama.url)

    assert set(pages(db)) == {url(0, "/guide.html"), url(0, "/guide-print.html"), url(0, "/manual.pdf")}
    assert {u for (u,) in rows(db, "SELECT DISTINCT url FROM chunks")} == {url(0, "/guide.html"), url(0, "/manual.pdf")}
    assert fetch_log(db)[url(0, "/drafts.html")][1].startswith("noindex (X-Robots-Tag)")
    assert answer["grounded"] and answer["citations"][0]["link"] == f"{url(0, '/manual.pdf')}#page=2"
    texts = [chunk["text"] for chunk in answer["chunks"]]
    assert len(texts) == len(set(texts))
