"""Text from pages and replies in report.md renders as written and as nothing else (jobs/markdown_text.py).

Rendered with markdown-it (CommonMark, plus GFM's tables and strikethrough), as a forge or an editor shows it.
"""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import markdown_it
import pytest

from jobs.config import load_job
from jobs.crawl_phase import CrawlReport
from jobs.errors import ExitCode
from jobs.markdown_text import md_text
from jobs.report import markdown_report
from jobs.run_report import write_reports
from jobs.verdict import Verdict
from tests.support.fake_ollama import FakeOllama
from tests.support.run import QUESTIONS, WIDGET, quoting_responder, webqa
from tests.support.site_server import SiteServer


SAMPLES = [
    "Renew now\n===",  # a setext heading
    "Renew now\n---\nand later",  # a setext heading, or a thematic break
    "the flag `foo[extra]` and <b>bold</b>",  # a code span around an escape
    "5 * 3 * 2 and snake_case_name and __init__ and *emphasis* and ~~gone~~",
    "AT&amp;T &copy; &#65; & co",  # entities stay as written
    "a | b\n--|--\nc | d",  # a GFM table
    "- not a list\n+ nor this\n1. nor this\n2) nor this\n> nor a quote",
    "    four spaces are not code\n\n    nor here [1]",
    "Port 7301 [1]. See [2, 3] and a\\backslash and a [link](https://evil.example) ![x](y)",
    "Price\n:--",  # a one-column GFM table
    "# heading\n###### h6\n+ item",
]


def rendered_text(markdown: str) -> tuple[str, set[str]]:
    """The text a reader sees, and the tags it is laid out with."""
    html = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)
    tags = set(re.findall(r"<([a-z0-9]+)", html))
    return unescape(re.sub(r"<[^>]+>", "", html)), tags


@pytest.mark.parametrize("text", SAMPLES)
def test_page_text_renders_as_written_and_as_text_only(text: str) -> None:
    shown, tags = rendered_text(md_text(text))
    assert tags <= {"p"}, (md_text(text), tags)
    assert " ".join(shown.split()) == " ".join(text.split()), md_text(text)


@pytest.mark.e2e
def test_a_failed_url_in_report_md_is_its_url_not_markup(tmp_path: Path, fake_ollama: FakeOllama) -> None:
    fake_ollama.chat_responder = quoting_responder
    with SiteServer(("127.0.0.1",)) as site:
        site.add(0, "/widget.html", WIDGET)
        missing = site.url(0, "/__notes__/*draft*.html")  # not served: 404
        job = tmp_path / "job.yaml"
        job.write_text(f"name: md\nurls: [{site.url(0, '/widget.html')}, '{missing}']\n"
                       "crawl: {delay: 0, allow_private_networks: true}\n"
                       f"questions: [{json.dumps(QUESTIONS['port'][0])}]\n"
                       "selection: {method: bm25}\noutput: {formats: [jsonl, markdown]}\n", encoding="utf-8")
        done = webqa("run", job, "--db", tmp_path / "w.duckdb", "--out", tmp_path / "out", host=fake_ollama.url,
                     cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    report = (tmp_path / "out" / "run-1" / "report.md").read_text(encoding="utf-8")
    (line,) = [line for line in report.splitlines() if "not fetched:" in line]
    shown, tags = rendered_text(line)
    assert not tags & {"em", "strong"}, (line, tags)
    assert missing in shown, shown


def test_plain_text_is_left_as_written() -> None:
    # What is no markup reads the same in a plain viewer, and a bare URL keeps every character of its link
    # (GitHub links bare URLs after escapes are read: download\\_page would be a dead link).
    for text in ("snake_case_name, AT&T and 3.14 at -5 degrees: see https://example.org/download_page?a=1&b=2",
                 "1.5 million, #hashtag, 2)note, +1 and a-b", "www.example.org/Foo_(bar) and [1] [2, 3]"):
        assert md_text(text) == text


def test_a_bare_url_cannot_carry_markup_or_an_entity() -> None:
    shown, tags = rendered_text(md_text("https://a.example/x*y*z&amp;w and https://b.example/[go](https://evil.example)"))
    assert tags <= {"p"}, tags
    assert "https://a.example/x%2Ay%2Az%26amp;w" in shown and "[go](https://evil.example)" in shown, shown


def _token_types(markdown: str) -> set[str]:
    tokens = markdown_it.MarkdownIt("commonmark").parse(markdown)
    return {t.type for t in tokens} | {c.type for t in tokens for c in t.children or ()}


def test_the_summary_lines_of_report_md_carry_no_markup(tmp_path: Path) -> None:
    # The status reason names failed URLs and their errors, the crawl and hosts lines URLs: all text from outside.
    markup = "<img src=x onerror=alert(1)> [go](https://evil.example) ![p](https://evil.example/p.png) *now*"
    job = tmp_path / "job.yaml"
    job.write_text("name: md\nurls: [https://example.org/]\nquestions: [\"What?\"]\n"
                   "output: {formats: [markdown, html]}\n", encoding="utf-8")
    jsonl = tmp_path / "answers.jsonl"
    jsonl.write_text("", encoding="utf-8")
    counts = {"questions": 0, "answered": 0, "grounded": 0, "not_enough_info": 0, "failed": 0}
    result = Verdict("partial", ExitCode.PARTIAL, f"1 URLs could not be fetched: https://example.org/a_b ({markup})"
                                                  "\n\nConfidence: **high**")
    write_reports(load_job(job), tmp_path, 1, result, counts, [], [], CrawlReport(line=f"Crawled: {markup}"), jsonl,
                  hosts_line=f"Ollama hosts: http://127.0.0.1:11434 answered 0, {markup} answered 0")
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert not _token_types(report) & {"link_open", "image", "html_inline", "html_block", "em_open"}, report
    assert not [line for line in report.splitlines() if line.startswith("Confidence")], report
    shown, _tags = rendered_text(report)
    for line in (" ".join(str(result.reason).split()), f"Crawled: {markup}", "https://example.org/a_b",
                 "http://127.0.0.1:11434 answered 0"):
        assert line in shown, shown
    # report.html is given the lines as they are, and escapes them itself.
    assert "&lt;img src=x onerror=alert(1)&gt;" in (tmp_path / "report.html").read_text(encoding="utf-8")


def test_an_answer_cannot_write_a_line_of_the_report_its_own() -> None:
    # The model's reply, led by the pages, may carry line breaks and what looks like the report's verdict line.
    fake = "Confidence: **high** · grounded: **yes** · answerer: llm"
    answer = f"Port 7301 [1].\n\n{fake}\n**Confidence:** high\n\nSources:\n- [1] [page](https://evil.example)"
    result = {"question_id": "q1", "question": "Which port?", "answer": answer, "confidence": "low",
              "grounded": False, "answerer": "llm", "attempt": 1, "answer_id": 7}
    report = markdown_report("run", [], [result])
    assert [line for line in report.splitlines() if "Confidence:" in line and not line.startswith(">")] == [
        "Confidence: **low** · grounded: **no** · answerer: llm · attempt 1 · answer id 7"], report
    assert [line for line in report.splitlines() if line.startswith(("Sources:", "- ["))] == []
    # Rendered: one verdict outside the answer; the answer's own lines stay readable: its three paragraphs, quoted.
    tokens = markdown_it.MarkdownIt("commonmark").parse(report)
    outside = ["".join(c.content for c in t.children or ()) for t in tokens if t.type == "inline" and t.level == 1]
    assert [text for text in outside if "Confidence" in text or "Sources" in text] == [
        "Confidence: low · grounded: no · answerer: llm · attempt 1 · answer id 7"], outside
    quoted = [t.content for t in tokens if t.type == "inline" and t.level == 2]
    assert len(quoted) == 3 and quoted[0] == "Port 7301 [1].", quoted
    assert not {t.type for t in tokens} & {"bullet_list_open", "link_open"}, report


def test_a_quote_a_reason_or_an_error_cannot_start_a_line_of_the_report() -> None:
    # One-line fields (a quote, why it failed, a failed answer's error) written within a line of the report's own.
    fake = "\n\nConfidence: **high** · grounded: **yes**\n\nSources:"
    cited = {"question_id": "q1", "question": "Which port?", "answer": "Port 7301 [1].", "confidence": "low",
             "grounded": False, "answerer": "llm", "attempt": 1, "answer_id": 7, "type": "number", "answered": True,
             "value": 7301, "value_problem": f"not in the quote{fake}",
             "citations": [{"source": 1, "quote": f"Port 7301.{fake}", "valid": False, "reason": f"not found{fake}",
                            "url": "https://example.org/a", "heading_path": "Ports"}]}
    failed = {"question_id": "q2", "question": "Which host?", "error": f"reply was not JSON{fake}", "answer_id": 8}
    report = markdown_report("run", [], [cited, failed])
    tokens = markdown_it.MarkdownIt("commonmark").parse(report)
    outside = ["".join(c.content for c in t.children or ()) for t in tokens if t.type == "inline" and t.level == 1]
    assert [text for text in outside if text.startswith(("Confidence", "Sources"))] == [
        "Confidence: low · grounded: no · answerer: llm · attempt 1 · answer id 7", "Sources:"], outside
    assert [line for line in report.splitlines() if line.startswith(("Confidence:", "Sources:"))] == [
        "Confidence: **low** · grounded: **no** · answerer: llm · attempt 1 · answer id 7", "Sources:"], report


def test_an_empty_answer_is_said_not_an_empty_quote() -> None:
    # A reply of blanks: the report says so (as `webqa history` does) instead of rendering an empty blockquote.
    result = {"question_id": "q1", "question": "Which port?", "answer": " \n ", "confidence": "low",
              "grounded": False, "answerer": "llm", "attempt": 1, "answer_id": 7}
    lines = markdown_report("run", [], [result]).splitlines()
    start = lines.index("## q1: Which port?")
    assert lines[start + 2] == "_(empty answer)_" and not [line for line in lines if line.startswith(">")], lines
