"""Issue 27's "Done when", end to end: a site on loopback with a sitemap index, a PDF, a page built by
JavaScript, a noindex page, a canonical duplicate and a Swedish page. One `webqa run` stores exactly what it
should, answers from the PDF with a #page=N citation and from the JavaScript page, and refuses the script's
fetch of a private address (the private host's log stays empty).

docs.example is the "public" site behind tests/support/proxy.py, with the SSRF guard on as in production;
127.0.0.1 is the private host. The model is tests/fake_ollama.py, quoting the sentence of its sources that
holds the answer.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

from tests.fake_ollama import FakeOllama, user_prompt
from tests.site_server import SiteServer
from tests.support.crawling import fetch_log, page, pages, rows
from tests.support.pdfs import MANUAL, OUTLINE, make_pdf
from tests.support.proxy import ForwardingProxy
from tests.support.render import needs_chromium, webqa_through
from tests.support.responders import quoting
from tests.support.run import prompt_question, read_jsonl
from tests.support.sitemaps import index, urlset

XML = "application/xml"
SITE = "http://docs.example"
PDF_QUESTION = "Which supply voltage does the Lumen controller need?"
JS_QUESTION = "How often does the Lumen dashboard refresh its readings?"
JS_FACT = "The Lumen dashboard refreshes its readings every ninety seconds."
SWEDISH = ("<p>Lumen-styrenheten kopplas till elnätet med en skruvplint. Kontrollera att matningen är avstängd "
           "innan du öppnar höljet. Lamporna tänds i tur och ordning när enheten startar.</p>")


def _app_page(secret: str) -> str:
    """A dashboard whose text exists only once its script has run; the script also reaches for a private host."""
    words = JS_FACT.split(" ")
    script = (
        f"fetch('{secret}').catch(() => null);"
        "const main = document.getElementById('app');"
        "const h = document.createElement('h1'); h.textContent = 'Lumen dashboard'; main.appendChild(h);"
        "const p = document.createElement('p');"
        f"p.textContent = {words!r}.join(' ') + ' It shows the lamp states of every bus.';"
        "main.appendChild(p);"
    )
    return (f"<!doctype html><html><head><title>Dashboard</title></head><body><main id='app'></main>"
            f"<script>{script}</script></body></html>")


def _serve(site: SiteServer) -> str:
    """The site on host 1 (docs.example); returns the private URL its script asks for (host 0)."""
    secret = site.url(0, "/internal/token")
    site.add(0, "/internal/token", "private", content_type="text/plain")
    site.add(1, "/robots.txt", f"User-agent: *\nAllow: /\nSitemap: {SITE}/sitemap.xml\n", content_type="text/plain")
    site.add(1, "/sitemap.xml", index(f"{SITE}/pages.xml", f"{SITE}/docs.xml.gz"), content_type=XML)
    site.add(1, "/pages.xml", urlset(*(f"{SITE}/{name}" for name in (
        "guide.html", "guide-print.html", "drafts.html", "app.html", "sv.html"))), content_type=XML)
    site.add(1, "/docs.xml.gz", gzip.compress(urlset(f"{SITE}/manual.pdf").encode()), content_type="application/gzip")
    site.add(1, "/guide.html", page("Guide", ("Setup",)))
    site.add(1, "/guide-print.html", page("Guide", ("Setup",), head='<link rel="canonical" href="/guide.html">',
                                          extra="<p>Printed copy.</p>"))
    site.add(1, "/drafts.html", page("Drafts"), headers={"X-Robots-Tag": "noindex"})
    site.add(1, "/app.html", _app_page(secret))
    site.add(1, "/sv.html", page("Lumen på svenska", ("Installation",), extra=SWEDISH, lang="sv"))
    site.add(1, "/manual.pdf", make_pdf(MANUAL, outline=OUTLINE, title="Lumen Manual"), content_type="application/pdf")
    return secret


def _model() -> Any:
    """Each question answered with a quote of the sentence holding its fact."""
    by_question = {PDF_QUESTION: quoting("twelve volts"), JS_QUESTION: quoting("ninety seconds")}

    def responder(body: dict[str, Any]) -> dict[str, Any]:
        return by_question[prompt_question(user_prompt(body))](body)
    return responder


@needs_chromium
def test_one_run_over_a_site_of_every_kind_with_a_page_built_by_javascript(
        site: SiteServer, tmp_path: Path, fake_ollama: FakeOllama) -> None:
    secret = _serve(site)
    assert JS_FACT not in _app_page(secret), "the fact is only in the page once its script has run"
    fake_ollama.chat_responder = _model()
    job = tmp_path / "job.yaml"
    job.write_text(
        f"name: site\nurls:\n  - sitemap: {SITE}/robots.txt\n"
        "crawl: {delay: 0, render: {js: ['/app\\.html$']}}\n"
        f"questions: [{PDF_QUESTION!r}, {JS_QUESTION!r}]\nselection: {{method: bm25}}\n", encoding="utf-8")
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    with ForwardingProxy({"docs.example": f"127.0.0.2:{site.port}"}) as proxy:
        result = webqa_through(proxy, "-q", "run", str(job), "--db", str(db), "--out", str(out), host=fake_ollama.url)
    assert result.returncode == 0 and result.stdout == "" and "Traceback" not in result.stderr, result.stderr

    stored = pages(db)
    assert set(stored) == {f"{SITE}/{name}" for name in (
        "guide.html", "guide-print.html", "app.html", "sv.html", "manual.pdf")}
    assert stored[f"{SITE}/guide-print.html"]["duplicate_of"] == f"{SITE}/guide.html"
    assert all(stored[f"{SITE}/{name}"]["duplicate_of"] is None
               for name in ("guide.html", "app.html", "sv.html", "manual.pdf"))
    with_chunks = {u for (u,) in rows(db, "SELECT DISTINCT url FROM chunks")}
    assert with_chunks == {f"{SITE}/{name}" for name in ("guide.html", "app.html", "sv.html", "manual.pdf")}
    assert fetch_log(db)[f"{SITE}/drafts.html"][:2][0] == "skipped"
    assert fetch_log(db)[f"{SITE}/drafts.html"][1].startswith("noindex (X-Robots-Tag)")
    assert site.requests_for(0) == [], "the script's fetch of the private host never left the browser"
    assert site.requests_for(1, "/internal/token") == []

    (run_dir,) = sorted(out.glob("run-*"))
    answers = {a["question"]: a for a in read_jsonl(run_dir / "answers.jsonl")}
    pdf, js = answers[PDF_QUESTION], answers[JS_QUESTION]
    assert pdf["grounded"] and pdf["citations"][0]["link"] == f"{SITE}/manual.pdf#page=2"
    assert js["grounded"] and js["citations"][0]["link"] == f"{SITE}/app.html"
    assert "ninety seconds" in js["citations"][0]["quote"]
