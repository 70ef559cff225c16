"""Summary questions (jobs/summary.py): the whole page reaches the model, section by section, and every claim
of the reduced answer keeps the citation checked against its own source."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from jobs.select import Candidate
from jobs.summary import _renumber, sections
from tests.support.fake_ollama import FakeOllama, user_prompt
from tests.support.site_server import SiteServer
from tests.support.run import prompt_sources, read_jsonl, webqa

pytestmark = pytest.mark.e2e

TOPICS = ["Installation", "Configuration", "Upgrades", "Backups", "Monitoring", "Security"]
PAGE = "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Lumen operations guide</title></head>" \
       "<body><main><article><h1>Lumen operations guide</h1>" + "".join(
           f"<h2>{topic}</h2><p>The {topic.lower()} chapter explains how operators handle {topic.lower()} for the "
           f"Lumen server in production. Each step of {topic.lower()} is written down with the command to run and "
           f"the output to expect, so that a new operator can follow it without help from the original authors of "
           f"the server. Checklists at the end of the chapter list what to verify after {topic.lower()} is done.</p>"
           for topic in TOPICS) + "</article></main></body></html>"
SECTION = re.compile(r'<source n="(\d+)" url="[^"]*" section="([^"]*)">')


def first_sentences(body: dict[str, Any]) -> dict[str, Any]:
    """A model that summarises each source by its first sentence, cited with the prompt's own numbers."""
    sources = prompt_sources(user_prompt(body))
    picked = [(n, text.split(". ")[0].strip() + ".") for n, text in sorted(sources.items())]
    return {"answer": " ".join(f"{s} [{n}]" for n, s in picked),
            "citations": [{"source": n, "quote": s} for n, s in picked], "confidence": "high"}


def test_sections_are_cut_in_page_order_under_the_budget() -> None:
    chunks = [Candidate(f"c{i}", "u", "h", "t", tokens) for i, tokens in enumerate([40, 50, 30, 200, 10])]
    assert [[c.chunk_id for c in s] for s in sections(chunks, 100)] == [["c0", "c1"], ["c2"], ["c3"], ["c4"]]
    assert _renumber("A [1]. B [2, 3].", 4) == "A [5]. B [6, 7]."


def summary_job(tmp_path: Path, url: str, answerer: str = "llm") -> Path:
    job = tmp_path / "summary.yaml"
    job.write_text(
        f"name: guide\nurls:\n  - {url}\ncrawl:\n  delay: 0\n  allow_private_networks: true\n"
        "questions:\n  - id: guide\n    question: Summarise the Lumen operations guide.\n    kind: summary\n"
        f"answerer: {answerer}\nselection:\n  method: bm25\n  token_budget: 300\n"
        "output:\n  formats: [jsonl, markdown, html]\nollama:\n  max_attempts: 2\n  timeout: 20\n", encoding="utf-8")
    return job


@pytest.mark.parametrize("answerer", ["llm", "extractive"])
def test_a_summary_covers_every_section_and_cites_each(tmp_path: Path, fake_ollama: FakeOllama,
                                                       answerer: str) -> None:
    fake_ollama.chat_responder = first_sentences
    with SiteServer() as site:
        site.add(0, "/guide.html", PAGE)
        job = summary_job(tmp_path, site.url(0, "/guide.html"), answerer)
        done = webqa("run", job, "--db", tmp_path / "w.duckdb", "--out", tmp_path / "out", host=fake_ollama.url,
                     cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stderr
    (answer,) = read_jsonl(next((tmp_path / "out").glob("run-*")) / "answers.jsonl")
    if answerer == "llm":
        prompts = [user_prompt(r.body) for r in fake_ollama.requests_to("/api/chat")]
        assert len(prompts) > 1  # the budget cut the page into sections, one prompt each
        reached = {m.group(2).split(" › ")[-1] for p in prompts for m in SECTION.finditer(p)}
        assert set(TOPICS) <= reached  # each section's heading reached a prompt
    else:
        assert fake_ollama.requests_to("/api/chat") == []
    assert answer["grounded"] and not answer["not_enough_information"] and answer["attempts"] == 1
    cited = {c["heading_path"].split(" › ")[-1] for c in answer["citations"] if c["valid"]}
    assert set(TOPICS) <= cited and all(c["valid"] for c in answer["citations"])
    # Each claim's marker is the number of the citation that was checked for it, in one numbering.
    markers = [int(n) for n in re.findall(r"\[(\d+)\]", answer["answer"])]
    assert markers == [c["source"] for c in answer["citations"]] and len(set(markers)) == len(markers)
    for c in answer["citations"]:
        topic = c["heading_path"].split(" › ")[-1].lower()
        assert f"the {topic} chapter" in c["quote"].lower()


def test_a_summary_question_has_no_type(tmp_path: Path) -> None:
    job = tmp_path / "bad.yaml"
    job.write_text("name: j\nurls: [https://example.org/]\nquestions:\n  - question: Summarise.\n    kind: summary\n"
                   "    type: number\n", encoding="utf-8")
    done = webqa("run", job, "--db", tmp_path / "w.duckdb", cwd=tmp_path)
    assert done.returncode == 2 and "a summary question's answer is text, not number" in done.stderr
