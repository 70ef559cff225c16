"""A page cannot write markup into report.md: its links, images and HTML stay text, its source link stays its own.

report.md is read rendered (a forge, an editor's preview). A page whose heading ends a link early and whose
sentence carries a Markdown link is crawled, quoted by the model and reported twice (the second run after an
edit, so the "What changed" section shows the quotes before and now): every link of the report must lead to
the page, and the ``[1]`` markers stay readable.
"""

from __future__ import annotations

import re
from urllib.parse import quote
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from jobs.markdown_text import md_text, md_url
from tests.support.fake_ollama import FakeOllama, user_prompt
from tests.support.run import prompt_sources, webqa
from tests.support.site_server import SiteServer

pytestmark = pytest.mark.e2e  # every test here starts a child process (tests/support/e2e.py)

PAGE = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Orbit licence</title></head>
<body><main><article>
<h1>Licence](https://evil.example/phish) [the licence page</h1>
<p>The Orbit licence renewal costs {price} euros per year; renew at [the renewal portal](https://evil.example/renew)
before it expires. ![badge](https://evil.example/pixel.png) &lt;img src="https://evil.example/i.png"&gt; is the badge
shown to observers who renewed on time.</p>
<p>Other licence notes for observers are kept elsewhere in this document about licensing matters for telescopes.</p>
</article></main></body></html>
"""

# A link, an image or raw HTML that a Markdown renderer would honour: an unescaped "](", "![" or "<tag".
_MARKUP = re.compile(r"(?<!\\)\]\((?P<target>[^)\s]*)|(?<!\\)!\[|(?<!\\)<(?P<tag>[a-z]+)[\s>]")


def _quote_the_price(body: Mapping[str, Any]) -> dict[str, Any]:
    for number, text in sorted(prompt_sources(user_prompt(body)).items()):
        for sentence in re.split(r"(?<=\.)\s+", text):
            if "renewal costs" in sentence:
                return {"answer": f"{sentence} [{number}]", "citations": [{"source": number, "quote": sentence}],
                        "confidence": "high"}
    return {"answer": "Not enough information", "citations": [], "confidence": "low"}


def test_page_markup_stays_text_in_report_md(tmp_path: Path, fake_ollama: FakeOllama) -> None:
    fake_ollama.chat_responder = _quote_the_price
    with SiteServer(("127.0.0.1",)) as site:
        site.add(0, "/licence.html", PAGE.format(price="forty"))
        page = site.url(0, "/licence.html")
        job = tmp_path / "job.yaml"
        job.write_text(f"name: licence\nurls: [{page}]\ncrawl: {{delay: 0, allow_private_networks: true}}\n"
                       "questions:\n  - id: renewal\n    question: How much does the Orbit licence renewal cost?\n"
                       "selection: {method: bm25}\noutput: {formats: [jsonl, markdown]}\n", encoding="utf-8")
        for price in ("forty", "fifty"):
            site.add(0, "/licence.html", PAGE.format(price=price))
            done = webqa("run", job, "--db", tmp_path / "w.duckdb", "--out", tmp_path / "out", "--refresh",
                         host=fake_ollama.url, cwd=tmp_path)
            assert done.returncode == 0, done.stderr
    report = (tmp_path / "out" / "run-2" / "report.md").read_text(encoding="utf-8")
    assert "fifty euros" in report and "forty euros" in report  # both runs' quotes are in the report
    links = [m.group("target") for m in _MARKUP.finditer(report) if m.group("target") is not None]
    assert links and all(link.startswith(page) for link in links), links
    smuggled = [m.group(0) for m in _MARKUP.finditer(report) if m.group("target") is None]
    assert smuggled == [], smuggled
    assert "before it expires. [1]" in report  # the source marker is left as written
    diff = webqa("diff", "--db", tmp_path / "w.duckdb", cwd=tmp_path)
    assert diff.returncode == 0 and "fifty euros" in diff.stdout, diff.stderr
    assert [m.group(0) for m in _MARKUP.finditer(diff.stdout) if m.group("target") is None or
            not m.group("target").startswith(page)] == []


def test_md_text_and_md_url_neutralise_only_markup() -> None:
    assert md_text("Port 7301 [1]. See [2, 3]") == "Port 7301 [1]. See [2, 3]"
    assert md_text("[1](https://e.example) [2]: https://e.example") == r"\[1\](https://e.example) \[2\]: https://e.example"
    assert md_text("a\\b <b>x</b>\n# not a heading") == "a\\\\b \\<b\\>x\\</b\\>\n\\# not a heading"
    assert md_url("https://h.example/a (b)<c>") == "https://h.example/a%20%28b%29%3Cc%3E"


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs Chromium at /usr/bin/chromium")
def test_a_quote_that_starts_on_its_heading_lands_on_the_page_in_chromium(tmp_path: Path) -> None:
    # Where report.html sends a reader: the real browser scrolls to the quote only when the directive matches.
    from playwright.sync_api import sync_playwright

    from jobs.report_html import text_fragment

    filler = "".join(f"<p>Filler paragraph {i} says nothing about the server at all.</p>" for i in range(150))
    page_html = (f"<!DOCTYPE html><html><body>{filler}<h2 id='config'>Configuration</h2><p>The control server "
                 f"listens on port 7301 unless another port is configured.</p>{filler}"
                 "<p id='end'>The end of the server notes.</p></body></html>")
    matched = "Configuration\nThe control server listens on port 7301 unless another port is configured."
    # A second directive, at the end, that always matches: the browser scrolls to the first that does, so a wait
    # with a bound tells which matched (nothing to wait for if it stayed at the top).
    end = "&text=" + quote("The end of the server notes.")
    seen = ("id => { const r = document.getElementById(id).getBoundingClientRect(); "
            "return r.top >= 0 && r.bottom <= innerHeight; }")
    with SiteServer(("127.0.0.1",)) as site, sync_playwright() as playwright:
        site.add(0, "/page.html", page_html)
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            shown = {}
            for name, directive in (("ours", text_fragment(matched)), ("joined", ":~:text=" + quote(
                    "Configuration The control server") + "," + quote("another port is configured."))):
                tab = browser.new_page()
                tab.goto(f"{site.url(0, '/page.html')}#{directive}{end}")
                tab.wait_for_function(f"window.scrollY > 1000 && (({seen})('config') || ({seen})('end'))",
                                      timeout=10_000)
                shown[name] = {part: tab.evaluate(f"({seen})('{part}')") for part in ("config", "end")}
                tab.close()
        finally:
            browser.close()
    assert shown["joined"] == {"config": False, "end": True}, shown  # the term across the heading matches nothing
    assert shown["ours"] == {"config": True, "end": False}, shown
