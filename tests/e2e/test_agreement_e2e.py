"""An answer must not contradict its evidence, end to end on real pages: the Python manual's functools page is
crawled from a loopback server, the fake Ollama answers with a verbatim quote and an answer that states
another number or the opposite polarity; `webqa run` marks those ungrounded with the reason (the run's
summary counts them so, as any ungrounded answer) and `webqa explain` shows why. The same answers stated faithfully stay grounded."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.support.corpus import CORPUS_DIR, MISSING, has_manual
from tests.support.fake_ollama import FakeOllama, user_prompt
from tests.support.site_server import SiteServer
from tests.support.run import lines, prompt_question, prompt_sources, read_jsonl, rows, run_dir, webqa, write_job

# every test here starts a child process (tests/support/e2e.py)
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not has_manual(CORPUS_DIR), reason=MISSING)]

DEFAULT = "leaving the maxsize at its default value of 128"
DISABLED = "If maxsize is set to None, the LRU feature is disabled"
# question id -> (question, quote, contradicting answer, faithful answer, the reason expected)
CASES: dict[str, tuple[str, str, str, str, str]] = {
    "number": ("What is the default maxsize of functools.lru_cache?", DEFAULT,
               "The default maxsize of lru_cache is 256 [1].", "The default maxsize of lru_cache is 128 [1].",
               "answer says 256, source says 128"),
    "polarity": ("What happens to the LRU feature of lru_cache when maxsize is None?", DISABLED,
                 "When maxsize is None, the LRU feature is enabled [1].",
                 "When maxsize is None, the LRU feature is disabled and the cache can grow without bound [1].",
                 "answer says 'enabled', source says 'disabled'"),
}


@pytest.fixture(scope="module")
def crawled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp = tmp_path_factory.mktemp("manual")
    with SiteServer() as site:
        site.serve_dir(0, "/", CORPUS_DIR)
        db = tmp / "webqa.duckdb"
        done = subprocess.run([sys.executable, "-m", "jobs.cli", "crawl", site.url(0, "/library/functools.html"),
                               "--db", str(db), "--delay", "0"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        yield db


def responder(faithful: bool):  # type: ignore[no-untyped-def]
    def answer(body: Mapping[str, Any]) -> dict[str, Any]:
        prompt = user_prompt(body)
        for _id, (question, quote, wrong, right, _why) in CASES.items():
            if question == prompt_question(prompt):
                number = next(n for n, text in sorted(prompt_sources(prompt).items()) if quote in text)
                said = (right if faithful else wrong).replace("[1]", f"[{number}]")
                return {"answer": said, "citations": [{"source": number, "quote": quote}], "confidence": "high"}
        return {"answer": "Not enough information", "citations": [], "confidence": "low"}
    return answer


def run(tmp_path: Path, crawled: Path, faithful: bool) -> tuple[subprocess.CompletedProcess[str], Path]:
    db = tmp_path / "webqa.duckdb"
    db.write_bytes(crawled.read_bytes())
    job = write_job(tmp_path, "name: lru\nquestions:\n" + "".join(
        f"  - id: {qid}\n    question: {question!r}\n" for qid, (question, *_rest) in CASES.items())
        + "selection:\n  method: bm25\n  top_k: 4\n  token_budget: 3000\nollama:\n  timeout: 20\n"
        + "output:\n  formats: [jsonl, markdown]\n")
    with FakeOllama() as fake:
        fake.chat_responder = responder(faithful)
        done = webqa("run", job, "--no-crawl", "--db", db, "--out", tmp_path / "out", host=fake.url, cwd=tmp_path)
    return done, db


def test_an_answer_contradicting_its_quote_is_not_grounded_and_explained(tmp_path: Path, crawled: Path) -> None:
    done, db = run(tmp_path, crawled, faithful=False)

    assert done.returncode == 0, done.stderr
    assert re.match(r"Run \d+ done: 2/2 answered \(0 grounded", lines(done.stdout)[0]), done.stdout
    results = {r["question_id"]: r for r in read_jsonl(run_dir(tmp_path) / "answers.jsonl")}
    for qid, (*_rest, why) in CASES.items():
        result = results[qid]
        assert result["grounded"] is False
        ((citation),) = [c for c in result["citations"] if not c["valid"]]
        assert citation["reason"] == why, citation
        explained = webqa("explain", result["answer_id"], "--db", db)
        assert explained.returncode == 0 and why in explained.stdout, explained.stdout
    report = (run_dir(tmp_path) / "report.md").read_text(encoding="utf-8")
    assert "✗ answer says 256, source says 128" in report
    assert rows(db, "SELECT count(*) AS n FROM answers WHERE final AND grounded")[0]["n"] == 0


def test_the_same_answers_stated_faithfully_stay_grounded(tmp_path: Path, crawled: Path) -> None:
    done, _db = run(tmp_path, crawled, faithful=True)

    assert done.returncode == 0, done.stderr
    assert re.match(r"Run \d+ done: 2/2 answered \(2 grounded", lines(done.stdout)[0]), done.stdout
