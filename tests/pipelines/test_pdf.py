"""PDF documents (issue 27, item 2): text per page, chunks by the outline or by page, citations to #page=N,
scanned and encrypted PDFs skipped with the reason, page caps, conditional re-crawl and change detection.

The PDFs are written by hand (tests/support/pdfs.py) and served by the loopback site; crawls and runs are
`webqa` subprocesses, answers come from the fake Ollama.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.chunk import split_blocks
from pipelines.formats import Unreadable, document_kind
from pipelines.pdf import _join_lines, extract_pdf
from tests.support.fake_ollama import FakeOllama, user_prompt
from tests.support.site_server import SiteServer
from tests.support.crawling import crawl_api, fetch_log, ok, pages, rows, run_cli, summary
from tests.support.pdfs import MANUAL, OUTLINE, make_pdf, prose_about
from tests.support.redis import (  # noqa: F401 - procs, redis_server and redis_url are fixtures, used by name
    REDIS_SERVER, Procs, procs, redis_server, redis_url)
from tests.support.responders import quoting, run_quietly
from tests.support.run import prompt_question, webqa

PDF = "application/pdf"


def test_outline_headings_and_page_numbers() -> None:
    result, blocks = extract_pdf(make_pdf(MANUAL, outline=OUTLINE, title="Lumen Manual", header="Lumen guide"),
                                 "https://x/m.pdf")
    chunks = split_blocks(blocks, "https://x/m.pdf")
    assert result.method == "pdf" and result.title == "Lumen Manual"
    assert [(c.heading_path, c.page) for c in chunks] == [
        (("Lumen Manual",), 1), (("Lumen Manual", "Installation"), 2), (("Lumen Manual", "Troubleshooting"), 3)]
    assert "Lumen guide" not in result.text  # the running header of every page is dropped
    assert "twelve volts" in chunks[1].text


def test_without_an_outline_every_page_is_a_section() -> None:
    result, blocks = extract_pdf(make_pdf(MANUAL), "https://x/m.pdf")
    chunks = split_blocks(blocks, "https://x/m.pdf")
    assert [(c.heading_path, c.page) for c in chunks] == [(("Page 1",), 1), (("Page 2",), 2), (("Page 3",), 3)]


def test_unreadable_pdfs_say_why() -> None:
    with pytest.raises(Unreadable, match="PDF has no text layer") as scan:
        extract_pdf(make_pdf(MANUAL, image_pages=True), "u")
    assert scan.value.outcome == "skipped"
    with pytest.raises(Unreadable, match=r"PDF is encrypted \(it needs a password\)") as locked:
        extract_pdf(make_pdf(MANUAL, user_password="secret"), "u")
    assert locked.value.outcome == "skipped"
    # Encrypted for permissions only (an empty user password): read like any other.
    assert "twelve volts" in extract_pdf(make_pdf(MANUAL, user_password=""), "u")[0].text
    with pytest.raises(Unreadable, match=r"PDF has 3 pages, more than crawl.pdf_max_pages \(2\)") as long:
        extract_pdf(make_pdf(MANUAL), "u", max_pages=2)
    assert long.value.outcome == "failed"
    with pytest.raises(Unreadable, match="not a readable PDF") as broken:
        extract_pdf(b"%PDF-1.4\n" + b"\x00garbage" * 100, "u")
    assert broken.value.outcome == "failed"


def test_words_broken_at_a_line_end_are_joined_unless_written_with_a_hyphen() -> None:
    lines = ["The instal-", "lation of the Debian-", "specific parts, and Debian-", "Specific ones"]
    assert _join_lines(lines, {"debian-specific"}) == (
        "The installation of the Debian-specific parts, and Debian- Specific ones")
    assert _join_lines(["the Debian-", "specific parts"], set()) == "the Debianspecific parts"
    assert document_kind("application/octet-stream", b"%PDF-1.7\n...") == "pdf"
    assert document_kind("image/png", b"%PDF-1.7") is None and document_kind("text/html", b"") == "html"


@pytest.mark.e2e
def test_a_crawl_stores_pdfs_and_skips_unreadable_ones(site: SiteServer, tmp_path: Path) -> None:
    site.add(0, "/manual.pdf", make_pdf(MANUAL, outline=OUTLINE, title="Lumen Manual"), content_type=PDF)
    site.add(0, "/scan.pdf", make_pdf(MANUAL, image_pages=True), content_type=PDF)
    site.add(0, "/locked.pdf", make_pdf(MANUAL, user_password="secret"), content_type=PDF)
    site.add(0, "/download", make_pdf(MANUAL), content_type="application/octet-stream")
    manual, scan, locked, download = (site.url(0, p) for p in ("/manual.pdf", "/scan.pdf", "/locked.pdf", "/download"))
    db = tmp_path / "w.duckdb"

    result = ok(run_cli("-q", manual, scan, locked, download, db=db))

    assert result.stdout == "" and result.stderr == ""  # skipped on purpose: no failure, exit 0
    stored = pages(db)
    assert set(stored) == {manual, download}
    assert stored[manual]["extractor"] == "pdf" and stored[manual]["title"] == "Lumen Manual"
    assert rows(db, "SELECT heading_path, page FROM chunks WHERE url = ? ORDER BY ordinal", [manual]) == [
        ("Lumen Manual", 1), ("Lumen Manual › Installation", 2), ("Lumen Manual › Troubleshooting", 3)]
    log = fetch_log(db)
    assert log[scan][:2] == ("skipped", "PDF has no text layer (3 pages of images: a scan?); OCR it to make it searchable")
    assert log[locked][:2] == ("skipped", "PDF is encrypted (it needs a password); not read")

    # The same crawl again: conditional requests, 304s. Then the manual changes: a new version is stored.
    again = summary(ok(run_cli(manual, download, db=db)))
    assert again["not_modified"] == 2
    changed = MANUAL[:2] + [["Troubleshooting", *prose_about("faults", "A red light means the bus is short-circuited.")]]
    site.set_body(0, "/manual.pdf", make_pdf(changed, outline=OUTLINE, title="Lumen Manual"))
    third = summary(ok(run_cli(manual, db=db)))
    assert third["changed"] == 1
    assert any("short-circuited" in text for (text,) in rows(db, "SELECT text FROM chunks WHERE url = ?", [manual]))


@pytest.mark.e2e
def test_the_page_cap_fails_a_long_pdf(site: SiteServer, tmp_path: Path) -> None:
    site.add(0, "/long.pdf", make_pdf(MANUAL), content_type=PDF)
    site.add(0, "/short.pdf", make_pdf(MANUAL[:1]), content_type=PDF)
    db = tmp_path / "w.duckdb"

    ok(crawl_api(db, urls=[site.url(0, "/long.pdf"), site.url(0, "/short.pdf")], pdf_max_pages=2), 1)

    assert set(pages(db)) == {site.url(0, "/short.pdf")}
    assert fetch_log(db)[site.url(0, "/long.pdf")][:2] == (
        "failed", "PDF has 3 pages, more than crawl.pdf_max_pages (2); not read")


@pytest.mark.e2e
def test_a_run_cites_the_pdf_page(site: SiteServer, tmp_path: Path, fake_ollama: FakeOllama) -> None:
    site.add(0, "/manual.pdf", make_pdf(MANUAL, outline=OUTLINE, title="Lumen Manual"), content_type=PDF)
    url = site.url(0, "/manual.pdf")
    fake_ollama.chat_responder = quoting("twelve volts")

    db, run_dir, (answer,) = run_quietly(tmp_path, f"name: lumen\nurls: [{url}]\ncrawl: {{delay: 0}}\n"
                                         "questions: [\"Which supply voltage does the Lumen controller need?\"]\n"
                                         "selection: {method: bm25, top_k: 1}\n", fake_ollama.url)

    assert answer["grounded"] is True
    (citation,) = answer["citations"]
    assert citation["url"] == url and citation["link"] == f"{url}#page=2"
    links = {source["number"]: source["link"] for source in answer["sources"]}
    assert links[citation["source"]] == f"{url}#page=2"
    assert f"{url}#page=3" in links.values()  # the first attempt's best chunk, on the troubleshooting page
    assert f"]({url}#page=2)" in (run_dir / "report.md").read_text(encoding="utf-8")
    explained = webqa("explain", str(answer["answer_id"]), "--db", db, "--no-prompt")
    assert f"<{url}#page=2>" in explained.stdout
    assert prompt_question(user_prompt(fake_ollama.requests_to("/api/chat")[-1].body)).startswith("Which supply")
    assert json.loads(rows(db, "SELECT citations FROM answers WHERE answer_id = ?", [answer["answer_id"]])[0][0])[0][
        "link"] == f"{url}#page=2"


@pytest.mark.e2e
def test_a_pdf_is_bounded_in_cpu_like_a_page(site: SiteServer, tmp_path: Path) -> None:
    site.add(0, "/big.pdf", make_pdf([page for _ in range(20) for page in MANUAL]), content_type=PDF)
    db = tmp_path / "w.duckdb"

    ok(crawl_api(db, urls=[site.url(0, "/big.pdf")], extra_settings={"WEBQA_PDF_EXTRACT_TIMEOUT": 0.05}), 3)

    assert fetch_log(db)[site.url(0, "/big.pdf")][:2] == ("failed", "extraction used more than 0.05 s of CPU")


@pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed (apt-get install -y redis-server)")
def test_a_pdf_crawled_through_redis_keeps_its_pages(procs: Procs, site: SiteServer) -> None:
    site.add(0, "/manual.pdf", make_pdf(MANUAL, outline=OUTLINE, title="Lumen Manual"), content_type=PDF)
    url = site.url(0, "/manual.pdf")

    coordinator = procs.coordinator([url], "--delay", "0")
    worker = procs.worker()
    out = procs.finish(coordinator)
    procs.finish(worker, 60)

    assert coordinator.returncode == 0, out[-3000:]
    assert rows(procs.db, "SELECT page FROM chunks WHERE url = ? ORDER BY ordinal", [url]) == [(1,), (2,), (3,)]
