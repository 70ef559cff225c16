"""`webqa run` end to end through the real CLI: a crawled test site, the fake Ollama, DuckDB rows.

The site is crawled once per module in a subprocess (Twisted's reactor cannot restart) and the
database copied for each test. Every command runs as a subprocess with OLLAMA_HOST pointing at the
fake server, so what is tested is what cron runs: arguments, exit codes, stdout/stderr, files.

The helpers (pages, the quoting fake LLM, `webqa()`) live in tests/support/run.py.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from pipelines.store import Store
from tests.support.fake_ollama import Fail, FakeOllama, Garbage, user_prompt
from tests.support.run import (  # noqa: F401 - crawled, db and llm are fixtures, used by name
    ALL, QUESTIONS, REPO, UNANSWERABLE, WEBQA, Crawled, chat_prompts, crawled, db, free_port, job_yaml, lines, llm,
    prompt_question, prompt_sources, quoting_answer, quoting_responder, read_jsonl, rows, run_dir, run_job, webqa,
    write_job)

pytestmark = pytest.mark.e2e  # every test here starts a child process (tests/support/e2e.py)

# --------------------------------------------------------------------------------------------
# The happy path


def test_five_questions_answered_end_to_end(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    job = write_job(tmp_path, job_yaml(ALL))
    done = run_job(tmp_path, job, db, host=llm.url)

    assert done.returncode == 0, done.stderr
    assert re.search(r"Run \d+ done: 5/5 answered \(5 grounded, 0 not enough information\), 0 failed", done.stdout)
    assert "Traceback" not in done.stderr
    out = run_dir(tmp_path)
    assert {p.name for p in out.iterdir()} == {"answers.jsonl", "report.md", "answers.csv"}
    for name in ("answers.jsonl", "report.md", "answers.csv"):
        assert str(out / name) in done.stdout  # the outputs are listed for the user

    # One model call per question: every first answer was good, so no retry.
    assert len(llm.requests_to("/api/chat")) == 5

    results = read_jsonl(out / "answers.jsonl")
    assert [r["question_id"] for r in results] == ALL
    for r in results:
        needle = QUESTIONS[r["question_id"]][1]
        assert needle in r["answer"]
        assert r["confidence"] == "high" and r["grounded"] is True and r["error"] is None
        assert r["attempt"] == 1 and r["answerer"] == "llm" and isinstance(r["answer_id"], int)
        assert len(r["citations"]) == 1
        citation = r["citations"][0]
        assert citation["valid"] is True and citation["reason"] is None
        assert needle in citation["quote"]
        # The cited source is the page that holds the fact.
        source = next(s for s in r["sources"] if s["number"] == citation["source"])
        assert source["url"] == citation["url"] and source["chunk_id"] == citation["chunk_id"]

    with (out / "answers.csv").open(encoding="utf-8", newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [row["question_id"] for row in table] == ALL
    assert all(row["grounded"] == "True" and row["confidence"] == "high" for row in table)
    assert all(QUESTIONS[row["question_id"]][1] in row["answer"] for row in table)

    report = (out / "report.md").read_text(encoding="utf-8")
    assert report.count("\n## ") == 5
    for qid, (question, needle) in QUESTIONS.items():
        assert f"## {qid}: {question}" in report
        assert needle in report
    assert report.count("grounded: **yes**") == 5

    answers = rows(db, "SELECT * FROM answers ORDER BY answer_id")
    assert len(answers) == 5
    assert {a["question_id"] for a in answers if a["final"]} == set(ALL)
    finals = rows(db, "SELECT question_id, count(*) AS n FROM answers WHERE final GROUP BY question_id")
    assert all(f["n"] == 1 for f in finals) and len(finals) == 5
    assert all(a["grounded"] and a["answerer"] == "llm" and a["model"] == "llama3.2:3b" for a in answers)
    assert {a["answer_id"] for a in answers} == {r["answer_id"] for r in results}
    (run,) = rows(db, "SELECT * FROM runs")
    assert run["status"] == "done" and run["questions"] == 5 and run["answered"] == 5 and run["grounded"] == 5
    assert run["finished_at"] is not None and run["failed"] == 0
    assert all(a["run_id"] == run["run_id"] for a in answers)
    # Every attempt keeps its prompt, exactly as sent, and its selection trail.
    prompts = rows(db, "SELECT * FROM prompts ORDER BY answer_id")
    assert sorted(p["prompt"] for p in prompts) == sorted(chat_prompts(llm))
    assert all(json.loads(p["raw_reply"]) for p in prompts)
    sent = rows(db, "SELECT answer_id, count(*) AS n FROM selections WHERE sent GROUP BY answer_id")
    assert len(sent) == 5 and all(s["n"] == 2 for s in sent)  # top_k 2


def test_full_run_with_its_crawl(tmp_path: Path, crawled: Crawled, llm: FakeOllama) -> None:
    """No --no-crawl: the job's URLs are crawled into a fresh database, then answered."""
    db = tmp_path / "fresh.duckdb"
    urls = "urls:\n" + "".join(f"  - {u}\n" for u in crawled.urls.values())
    extra = urls + "crawl:\n  delay: 0\n  allow_private_networks: true\n"
    job = write_job(tmp_path, job_yaml(["port", "steps"], extra=extra))
    done = webqa("run", job, "--db", db, "--out", tmp_path / "out", host=llm.url, cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert "fetched 3 (new 3" in done.stderr  # the crawl summary
    assert re.search(r"Run \d+ done: 2/2 answered \(2 grounded", done.stdout)
    results = read_jsonl(run_dir(tmp_path) / "answers.jsonl")
    assert [r["grounded"] for r in results] == [True, True]
    assert "port 8731" in results[0]["answer"] and "212 steps" in results[1]["answer"]
    (run,) = rows(db, "SELECT * FROM runs")
    (crawl,) = rows(db, "SELECT * FROM crawl_runs")
    assert run["crawl_run_id"] == crawl["crawl_run_id"] and crawl["status"] == "done"
    assert rows(db, "SELECT count(*) AS n FROM pages")[0]["n"] == 3


# --------------------------------------------------------------------------------------------
# Validation and the wider retry


def test_failed_citations_trigger_a_wider_retry(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    llm.script_chat({
        "answer": "It listens on port 8731 [1] [9].",
        "citations": [{"source": 9, "quote": "The dashboard server listens on port 8731"},
                      {"source": 1, "quote": "The server listens on port 9999 by default"}],
        "confidence": "high",
    })
    job = write_job(tmp_path, job_yaml(["port"]))
    done = run_job(tmp_path, job, db, host=llm.url)

    assert done.returncode == 0, done.stderr
    prompts = chat_prompts(llm)
    assert len(prompts) == 2  # the first answer, then one retry; no more
    assert len(prompt_sources(prompts[1])) > len(prompt_sources(prompts[0])) == 2

    first, second = rows(db, "SELECT * FROM answers ORDER BY attempt")
    assert (first["attempt"], second["attempt"]) == (1, 2)
    assert first["grounded"] is False and first["failed_citations"] == 2 and first["retry_reason"] is None
    checks = json.loads(first["citations"])
    assert [c["valid"] for c in checks] == [False, False]
    assert checks[0]["reason"] == "source 9 was not sent"
    assert checks[1]["reason"].startswith("quote not found in source 1")
    assert second["retry_reason"] == "2 citation(s) failed validation"
    assert second["grounded"] is True and second["failed_citations"] == 0
    # The final flag moved to the better attempt, and only one is final.
    assert (first["final"], second["final"]) == (False, True)
    stored = {p["answer_id"]: p["prompt"] for p in rows(db, "SELECT answer_id, prompt FROM prompts")}
    assert stored[first["answer_id"]] == prompts[0] and stored[second["answer_id"]] == prompts[1]
    sent = rows(db, "SELECT answer_id, count(*) FILTER (WHERE sent) AS n FROM selections GROUP BY answer_id "
                    "ORDER BY answer_id")
    assert [s["n"] for s in sent] == [2, len(prompt_sources(prompts[1]))]

    (result,) = read_jsonl(run_dir(tmp_path) / "answers.jsonl")
    assert result["attempt"] == 2 and result["attempts"] == 2 and result["grounded"] is True
    assert result["answer_id"] == second["answer_id"]
    assert result["retry_reason"] == "2 citation(s) failed validation"


def test_worse_retry_leaves_the_first_attempt_final(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    # Attempt 1 is grounded but says "low"; the retry says "Not enough information".
    def responder(body: Mapping[str, Any]) -> dict[str, Any]:
        prompt = user_prompt(body)
        if len(prompt_sources(prompt)) <= 2:
            return {**quoting_answer(prompt), "confidence": "low"}
        return {"answer": "Not enough information", "citations": [], "confidence": "low"}

    llm.chat_responder = responder
    job = write_job(tmp_path, job_yaml(["python"]))
    done = run_job(tmp_path, job, db, host=llm.url)

    assert done.returncode == 0, done.stderr
    first, second = rows(db, "SELECT * FROM answers ORDER BY attempt")
    assert second["retry_reason"] == "low confidence" and second["not_enough_info"] is True
    assert (first["final"], second["final"]) == (True, False)
    (result,) = read_jsonl(run_dir(tmp_path) / "answers.jsonl")
    assert result["attempt"] == 1 and "Python 3.9" in result["answer"] and result["attempts"] == 2


def test_not_enough_information_is_retried_once_and_counted(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    job = write_job(tmp_path, job_yaml(["port", {"id": "roof", "question": UNANSWERABLE}]))
    done = run_job(tmp_path, job, db, host=llm.url)

    assert done.returncode == 0, done.stderr
    assert re.search(r"done: 2/2 answered \(1 grounded, 1 not enough information\), 0 failed", done.stdout)
    roof = rows(db, "SELECT * FROM answers WHERE question_id = 'roof' ORDER BY attempt")
    assert [a["attempt"] for a in roof] == [1, 2]  # retried once with a wider selection, no more
    assert roof[1]["retry_reason"] == "not enough information"
    assert all(a["not_enough_info"] and a["answer"] == "Not enough information" for a in roof)
    assert sum(a["final"] for a in roof) == 1
    roof_prompts = [p for p in chat_prompts(llm) if prompt_question(p) == UNANSWERABLE]
    assert len(roof_prompts) == 2
    assert len(prompt_sources(roof_prompts[1])) > len(prompt_sources(roof_prompts[0]))
    (run,) = rows(db, "SELECT * FROM runs")
    assert (run["status"], run["answered"], run["grounded"], run["not_enough_info"]) == ("done", 2, 1, 1)
    results = {r["question_id"]: r for r in read_jsonl(run_dir(tmp_path) / "answers.jsonl")}
    assert results["roof"]["not_enough_information"] is True and results["roof"]["citations"] == []
    report = (run_dir(tmp_path) / "report.md").read_text(encoding="utf-8")
    assert "not enough information: 1" in report


def test_min_similarity_in_the_job_answers_without_the_llm(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    # No chunk is the question itself, so no similarity reaches 1: every question is below the floor.
    text = job_yaml(["port", {"id": "roof", "question": UNANSWERABLE}], method="hybrid").replace(
        "  token_budget: 1000\n", "  token_budget: 1000\n  min_similarity: 1\n")
    done = run_job(tmp_path, write_job(tmp_path, text), db, host=llm.url)

    assert done.returncode == 0, done.stderr
    assert re.search(r"done: 2/2 answered \(0 grounded, 2 not enough information\), 0 failed", done.stdout)
    assert llm.requests_to("/api/chat") == [] and llm.requests_to("/api/embed")
    answers = rows(db, "SELECT question_id, answerer, attempt, answer FROM answers ORDER BY question_id")
    assert [(a["question_id"], a["answerer"], a["attempt"]) for a in answers] == [("port", "threshold", 1),
                                                                                 ("roof", "threshold", 1)]
    results = read_jsonl(run_dir(tmp_path) / "answers.jsonl")
    assert all("below min_similarity 1" in r["notice"] for r in results)


def test_retry_wider_false_asks_once(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    text = job_yaml([{"id": "roof", "question": UNANSWERABLE}]).replace(
        "  token_budget: 1000\n", "  token_budget: 1000\n  retry_wider: false\n")
    done = run_job(tmp_path, write_job(tmp_path, text), db, host=llm.url)
    assert done.returncode == 0, done.stderr
    assert len(llm.requests_to("/api/chat")) == 1
    assert len(rows(db, "SELECT * FROM answers")) == 1


# --------------------------------------------------------------------------------------------
# Ollama failures


def test_busy_server_is_retried_then_answers(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    llm.script_chat(Fail(503), Fail(503))
    job = write_job(tmp_path, job_yaml(["port"], max_attempts=3))
    done = run_job(tmp_path, job, db, host=llm.url)

    assert done.returncode == 0, done.stderr
    assert len(llm.requests_to("/api/chat")) == 3
    (answer,) = rows(db, "SELECT * FROM answers")
    assert answer["grounded"] is True and answer["error"] is None and "port 8731" in answer["answer"]


def test_server_error_fails_one_question_and_the_others_are_answered(tmp_path: Path, db: Path,
                                                                     llm: FakeOllama) -> None:
    def responder(body: Mapping[str, Any]) -> Any:
        if prompt_question(user_prompt(body)) == QUESTIONS["port"][0]:
            return Fail(500)  # this question breaks the model, every time
        return quoting_responder(body)

    llm.chat_responder = responder
    job = write_job(tmp_path, job_yaml(["port", "tomatoes", "steps"]))
    done = run_job(tmp_path, job, db, host=llm.url)

    assert done.returncode == 1, done.stderr  # partial
    assert re.search(r"Run \d+ partial: 2/3 answered .*, 1 failed", done.stdout)
    assert "Traceback" not in done.stderr
    answers = {a["question_id"]: a for a in rows(db, "SELECT * FROM answers")}
    assert set(answers) == {"port", "tomatoes", "steps"}
    assert "HTTP 500" in answers["port"]["error"] and "after 2 attempts" in answers["port"]["error"]
    port_requests = [p for p in chat_prompts(llm) if prompt_question(p) == QUESTIONS["port"][0]]
    assert len(port_requests) == 2  # ollama.max_attempts, then the question fails without a wider retry
    assert answers["port"]["final"] is True and answers["port"]["answer"] is None
    assert answers["tomatoes"]["grounded"] and answers["steps"]["grounded"]
    (run,) = rows(db, "SELECT * FROM runs")
    assert (run["status"], run["failed"], run["answered"]) == ("partial", 1, 2)
    results = {r["question_id"]: r for r in read_jsonl(run_dir(tmp_path) / "answers.jsonl")}
    assert "HTTP 500" in results["port"]["error"] and results["tomatoes"]["grounded"] is True
    report = (run_dir(tmp_path) / "report.md").read_text(encoding="utf-8")
    assert "**Failed:**" in report and "HTTP 500" in report


def test_failed_retry_keeps_the_first_answer(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    """A wider retry that errors must not turn an answered question into a failed one."""
    llm.script_chat({"answer": "Not enough information", "citations": [], "confidence": "low"}, Fail(500), Fail(500))
    job = write_job(tmp_path, job_yaml(["port"]))
    done = run_job(tmp_path, job, db, host=llm.url)

    assert done.returncode == 0, done.stdout + done.stderr
    first, second = rows(db, "SELECT * FROM answers ORDER BY attempt")
    assert first["final"] is True and first["error"] is None
    assert second["final"] is False and "HTTP 500" in second["error"]
    (result,) = read_jsonl(run_dir(tmp_path) / "answers.jsonl")
    assert result["error"] is None and result["attempt"] == 1 and result["not_enough_information"] is True


def test_missing_model_stops_the_run_and_keeps_earlier_answers(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    def responder(body: Mapping[str, Any]) -> dict[str, Any]:
        llm.models.discard("llama3.2:3b")  # someone ran `ollama rm` during the run
        return quoting_responder(body)

    llm.chat_responder = responder
    job = write_job(tmp_path, job_yaml(["port", "tomatoes", "steps"]))
    done = run_job(tmp_path, job, db, host=llm.url)

    assert done.returncode == 3, done.stderr
    assert lines(done.stderr)[-1] == (f"Error: model llama3.2:3b is not available on {llm.url}; "
                                      "run `ollama pull llama3.2:3b`")
    assert "Traceback" not in done.stderr
    assert len(llm.requests_to("/api/chat")) == 2  # the third question was never asked
    answers = {a["question_id"]: a for a in rows(db, "SELECT * FROM answers")}
    assert answers["port"]["grounded"] is True and answers["port"]["final"] is True  # kept
    assert "steps" not in answers
    (run,) = rows(db, "SELECT * FROM runs")
    assert run["status"] == "failed" and run["finished_at"] is not None
    results = read_jsonl(run_dir(tmp_path) / "answers.jsonl")
    assert results[0]["question_id"] == "port" and results[0]["grounded"] is True


def test_missing_model_at_start_says_what_to_pull(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    llm.models = {"nomic-embed-text"}
    done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port"])), db, host=llm.url)
    assert done.returncode == 3
    assert lines(done.stderr) == [f"Error: model llama3.2:3b is not available on {llm.url}; "
                                  "run `ollama pull llama3.2:3b`"]
    assert llm.requests_to("/api/chat") == []


def test_hybrid_without_the_embedding_model_selects_with_bm25(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    """A degraded run (bm25 instead of hybrid) is not a clean one: exit 1 and one line saying why, under -q too."""
    llm.models = {"llama3.2:3b"}
    done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port", "steps"], method="hybrid")), db, "-q", host=llm.url)
    assert done.returncode == 1, done.stderr
    (summary,) = lines(done.stderr)  # -q: one line, naming why
    assert done.stdout == ""
    assert summary.startswith("Run 1 partial: 2/2 answered") and summary.endswith(
        f"degraded: embedding model nomic-embed-text is not available on {llm.url}; "
        "run `ollama pull nomic-embed-text`; selected with bm25 instead of hybrid")
    results = read_jsonl(run_dir(tmp_path) / "answers.jsonl")
    assert [r["method_used"] for r in results] == ["bm25", "bm25"] and all(r["grounded"] for r in results)
    assert "ollama pull nomic-embed-text" in results[0]["notice"]
    assert llm.requests_to("/api/embed") == []
    assert "partial (degraded: embedding model" in (run_dir(tmp_path) / "report.md").read_text(encoding="utf-8")


def test_a_job_that_allows_degraded_runs_exits_0(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    llm.models = {"llama3.2:3b"}
    job = write_job(tmp_path, job_yaml(["port"], method="hybrid", extra="allow_degraded: true\n"))
    done = run_job(tmp_path, job, db, host=llm.url)
    assert done.returncode == 0, done.stderr
    assert any(line.startswith("Notice: embedding model") for line in lines(done.stderr))


def test_ollama_down_falls_back_to_extractive_answers(tmp_path: Path, db: Path) -> None:
    host = f"http://127.0.0.1:{free_port()}"
    job = write_job(tmp_path, job_yaml(ALL, method="hybrid"))
    done = run_job(tmp_path, job, db, host=host)

    # Degraded: the answers are there, but cron must hear that the model did not write them.
    assert done.returncode == 1, done.stderr
    notices = [line for line in lines(done.stderr) if line.startswith("Notice")]
    assert len(notices) == 1 and host in notices[0] and "extractive" in notices[0]
    assert "Traceback" not in done.stderr and "WARNING" not in done.stderr
    answers = rows(db, "SELECT * FROM answers WHERE final ORDER BY answer_id")
    assert len(answers) == 5 and {a["answerer"] for a in answers} == {"extractive"}
    assert all(a["method"] == "bm25" and a["model"] is None for a in answers)
    results = {r["question_id"]: r for r in read_jsonl(run_dir(tmp_path) / "answers.jsonl")}
    assert "8731" in results["port"]["answer"] and results["port"]["grounded"] is True
    (run,) = rows(db, "SELECT * FROM runs")
    assert run["answerer"] == "extractive" and host in run["notes"]
    assert (run["status"], run["exit_code"]) == ("partial", 1) and run["reason"].startswith("degraded: Ollama")
    report = (run_dir(tmp_path) / "report.md").read_text(encoding="utf-8")
    assert "notice:" in report and "partial (degraded: Ollama is not reachable" in report.split("## ")[0]


def test_ollama_down_without_fallback_is_one_error_line(tmp_path: Path, db: Path) -> None:
    host = f"http://127.0.0.1:{free_port()}"
    job = write_job(tmp_path, job_yaml(ALL, extra="fallback_extractive: false\n"))
    done = run_job(tmp_path, job, db, host=host)

    assert done.returncode == 3
    (line,) = lines(done.stderr)
    assert line.startswith(f"Error: Ollama is not reachable at {host}")
    assert "ollama serve" in line
    assert rows(db, "SELECT * FROM answers") == []


def test_non_json_reply_is_asked_again_then_fails_the_question(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    # Its text is no answer: it goes to the prompts table for `webqa explain`, never into the report.
    llm.script_chat(Garbage("Sure! The port is probably 8080."), Garbage("I think it is port 8080."))
    text = job_yaml(["port"]).replace("  token_budget: 1000\n", "  token_budget: 1000\n  retry_wider: false\n")
    done = run_job(tmp_path, write_job(tmp_path, text), db, host=llm.url)

    assert done.returncode == 3, done.stderr  # the only question failed
    assert len(llm.requests_to("/api/chat")) == 2  # the client asked once more, then gave up
    (answer,) = rows(db, "SELECT * FROM answers")
    assert answer["valid_json"] is False and answer["grounded"] is False
    assert answer["error"] == "the model's reply was not valid JSON" and answer["answer"] is None
    (prompt,) = rows(db, "SELECT * FROM prompts")
    assert prompt["raw_reply"] == "I think it is port 8080."
    (result,) = read_jsonl(run_dir(tmp_path) / "answers.jsonl")
    assert result["error"] == "the model's reply was not valid JSON" and "answer" not in result


def test_non_json_reply_fails_one_question_and_the_others_are_answered(tmp_path: Path, db: Path,
                                                                     llm: FakeOllama) -> None:
    llm.script_chat(Garbage(), Garbage())
    done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port", "steps"])), db, host=llm.url)
    assert done.returncode == 1, done.stderr  # partial
    assert len(llm.requests_to("/api/chat")) == 3  # a failed question gets no wider retry
    results = {r["question_id"]: r for r in read_jsonl(run_dir(tmp_path) / "answers.jsonl")}
    assert results["port"]["error"] == "the model's reply was not valid JSON"
    assert "212 steps" in results["steps"]["answer"]


# --------------------------------------------------------------------------------------------
# Dry run


def test_dry_run_sends_nothing_and_writes_selection_and_prompt(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    job = write_job(tmp_path, job_yaml(ALL, method="hybrid"))
    done = run_job(tmp_path, job, db, "--dry-run", host=llm.url)

    assert done.returncode == 0, done.stderr
    assert llm.requests_to("/api/chat") == []
    assert re.search(r"^Run \d+ done \(dry run, no LLM called\): 5/5 questions selected, 0 failed$", done.stdout, re.M)
    results = read_jsonl(run_dir(tmp_path) / "answers.jsonl")
    assert [r["question_id"] for r in results] == ALL
    for r in results:
        assert r["method_used"] == "hybrid" and "answer" not in r
        chunks = r["chunks"]
        assert [c["rank"] for c in chunks] == list(range(1, len(chunks) + 1))
        assert len(chunks) > 2
        for c in chunks:
            assert {"chunk_id", "url", "heading_path", "text", "score", "bm25_score", "embedding_score"} <= set(c)
        scores = [c["score"] for c in chunks]
        assert scores == sorted(scores, reverse=True)
        assert [c["sent"] for c in chunks[:2]] == [True, True] and not any(c["sent"] for c in chunks[2:])
        # The exact prompt: the sent chunks' texts, numbered, and the question last.
        sources = prompt_sources(r["prompt"])
        assert sorted(sources.values()) == sorted(c["text"] for c in chunks if c["sent"])
        assert prompt_question(r["prompt"]) == QUESTIONS[r["question_id"]][0]
        assert any(QUESTIONS[r["question_id"]][1] in c["text"] for c in chunks)
        assert all(c["bm25_score"] is not None or c["embedding_score"] is not None for c in chunks)
    assert llm.requests_to("/api/embed")  # hybrid really used the embeddings
    assert rows(db, "SELECT * FROM answers") == []
    (run,) = rows(db, "SELECT * FROM runs")
    assert run["dry_run"] is True and run["status"] == "done"
    assert "(dry run)" in (run_dir(tmp_path) / "report.md").read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------------
# Bad input


def test_missing_job_file(tmp_path: Path, db: Path) -> None:
    done = webqa("run", tmp_path / "nope.yaml", "--no-crawl", "--db", db, cwd=tmp_path)
    assert done.returncode == 2
    assert lines(done.stderr) == [f"Error: {tmp_path / 'nope.yaml'}: no such file; check the path"]


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path, db: Path) -> None:
    job = write_job(tmp_path, "name: broken\nquestions:\n  - 'unclosed\n  - fine\nmodel: [x\n")
    done = webqa("run", job, "--no-crawl", "--db", db, cwd=tmp_path)
    assert done.returncode == 2
    (line,) = lines(done.stderr)
    assert re.match(rf"Error: {re.escape(str(job))}:\d+:\d+: ", line), line


def test_unknown_key_names_file_line_and_key(tmp_path: Path, db: Path) -> None:
    job = write_job(tmp_path, "name: typo\nquestions:\n  - What?\nselection:\n  top_kk: 3\n")
    done = webqa("run", job, "--no-crawl", "--db", db, cwd=tmp_path)
    assert done.returncode == 2
    assert lines(done.stderr) == [f"Error: {job}:5: selection.top_kk: unknown key; did you mean 'top_k'?"]
    assert rows(db, "SELECT * FROM runs") == []


def test_question_about_pages_never_crawled_fails_alone(tmp_path: Path, db: Path, llm: FakeOllama,
                                                        crawled: Crawled) -> None:
    never = crawled.site.url(1, "/never-crawled.html")
    job = write_job(tmp_path, job_yaml([
        "port",
        {"id": "ghost", "question": "What is on the page?", "urls": [never]},
        {"id": "scoped", "question": QUESTIONS["steps"][0],
         "urls": ["HTTP://" + crawled.urls["lighthouse"].removeprefix("http://") + "#visiting"]},
    ]))
    done = run_job(tmp_path, job, db, host=llm.url)

    assert done.returncode == 1, done.stderr
    results = {r["question_id"]: r for r in read_jsonl(run_dir(tmp_path) / "answers.jsonl")}
    assert results["ghost"]["error"] == (f"question ghost: none of its urls were crawled ({never}); "
                                         "add them to the job's urls")
    assert results["port"]["grounded"] is True
    # A URL written with another host case still names the crawled page.
    assert results["scoped"]["grounded"] is True
    assert {c["url"] for c in results["scoped"]["chunks"]} == {crawled.urls["lighthouse"]}
    assert f"ghost: failed: question ghost: none of its urls were crawled" in done.stderr
    (run,) = rows(db, "SELECT * FROM runs")
    assert (run["status"], run["failed"], run["answered"]) == ("partial", 1, 2)


def test_empty_database_is_a_clear_error(tmp_path: Path, llm: FakeOllama) -> None:
    empty = tmp_path / "empty.duckdb"
    Store.open(empty).close()  # a webqa database with every table and no page
    done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port"])), empty, host=llm.url)
    assert done.returncode == 3
    (line,) = lines(done.stderr)
    assert line.startswith("Error: ") and "no chunks" in line and str(empty) in line


def test_missing_database_is_a_clear_error(tmp_path: Path, llm: FakeOllama) -> None:
    missing = tmp_path / "missing.duckdb"
    done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port"])), missing, host=llm.url)
    assert done.returncode == 3
    (line,) = lines(done.stderr)
    assert line.startswith(f"Error: {missing}: no such database")
    assert not missing.exists()


def test_database_in_a_missing_folder_is_a_clear_error(tmp_path: Path, llm: FakeOllama) -> None:
    nowhere = tmp_path / "no" / "such" / "dir" / "webqa.duckdb"
    done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port"])), nowhere, host=llm.url)
    assert done.returncode in (2, 3)
    (line,) = lines(done.stderr)
    assert line.startswith("Error: ") and "Traceback" not in done.stderr and str(nowhere.parent) in line


# --------------------------------------------------------------------------------------------
# Overlapping runs

_HOLD_LOCK = """
import sys, time
from jobs.lock import RunLock
with RunLock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
print(f"released {time.time()}", flush=True)
"""


def _hold_lock(db: Path, seconds: float) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(db), str(seconds)], stdout=subprocess.PIPE,
                              text=True, cwd=REPO)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return holder


def test_second_run_on_a_locked_database_exits_4(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    holder = _hold_lock(db, 30)
    try:
        done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port"])), db, host=llm.url)
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 4
    (line,) = lines(done.stderr)
    assert line.startswith(f"Error: {db} is busy") and f"PID {holder.pid}" in line and "--wait" in line
    assert llm.requests_to("/api/chat") == []


def test_wait_queues_behind_the_running_job(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    holder = _hold_lock(db, 3)
    try:
        done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port"])), db, "--wait", "30", host=llm.url)
    finally:
        rest, _ = holder.communicate(timeout=30)
    assert done.returncode == 0, done.stderr
    released = datetime.fromtimestamp(float(rest.split()[1]), timezone.utc).replace(tzinfo=None)
    (run,) = rows(db, "SELECT * FROM runs")
    assert run["started_at"] >= released  # it queued behind the holder instead of failing
    assert len(rows(db, "SELECT * FROM answers")) == 1


class Gate:
    """A fake-LLM responder that holds every answer until the test opens the gate."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.entered = threading.Event()

    def __call__(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self.entered.set()
        self.opened.wait(timeout=30)
        return quoting_responder(body)


def _start_run(tmp_path: Path, job: Path, db: Path, out: str, host: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*WEBQA, "run", str(job), "--no-crawl", "--db", str(db), "--out", str(tmp_path / out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**os.environ, "OLLAMA_HOST": host})


def test_run_holds_the_lock_while_answering(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    """A real overlapping run: the first one waits on the LLM; the second is refused."""
    gate = Gate()
    llm.chat_responder = gate
    job = write_job(tmp_path, job_yaml(["port"]))
    first = _start_run(tmp_path, job, db, "o1", llm.url)
    try:
        assert gate.entered.wait(timeout=30), "the first run never asked the LLM"
        second = webqa("run", job, "--no-crawl", "--db", db, "--out", tmp_path / "o2", host=llm.url, cwd=tmp_path)
        assert second.returncode == 4, second.stderr
        assert len(lines(second.stderr)) == 1 and "busy" in second.stderr
    finally:
        gate.opened.set()
        out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert len(llm.requests_to("/api/chat")) == 1


def test_sigterm_finishes_the_current_question_and_stops(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    gate = Gate()
    llm.chat_responder = gate
    job = write_job(tmp_path, job_yaml(["port", "tomatoes", "steps"]))
    run = _start_run(tmp_path, job, db, "out", llm.url)
    try:
        assert gate.entered.wait(timeout=30)
        run.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # let the handler note the signal before the answer arrives
    finally:
        gate.opened.set()
        out, err = run.communicate(timeout=60)
    assert run.returncode == 130, err
    assert re.search(r"Run \d+ interrupted: 1/3 answered", out)
    assert len(llm.requests_to("/api/chat")) == 1
    (answer,) = rows(db, "SELECT * FROM answers")
    assert answer["question_id"] == "port" and answer["grounded"] is True
    (run_row,) = rows(db, "SELECT * FROM runs")
    assert run_row["status"] == "interrupted" and run_row["finished_at"] is not None
    assert [r["question_id"] for r in read_jsonl(run_dir(tmp_path) / "answers.jsonl")] == ["port"]


def test_parallel_questions_are_all_answered_and_reported_in_order(tmp_path: Path, db: Path,
                                                                   llm: FakeOllama) -> None:
    in_flight, most = 0, 0
    full = threading.Condition()

    def responder(body: Mapping[str, Any]) -> dict[str, Any]:
        # Hold each answer until three questions wait on the model together (or 5 s passed).
        nonlocal in_flight, most
        with full:
            in_flight += 1
            most = max(most, in_flight)
            full.notify_all()
            full.wait_for(lambda: most >= 3, timeout=5)
            in_flight -= 1
        return quoting_responder(body)

    llm.chat_responder = responder
    job = write_job(tmp_path, job_yaml(ALL, parallel=3))
    done = run_job(tmp_path, job, db, host=llm.url)
    assert done.returncode == 0, done.stderr
    assert most == 3  # ollama.parallel questions wait on the model at the same time, no more
    assert len(llm.requests_to("/api/chat")) == 5
    assert sorted(r["question_id"] for r in read_jsonl(run_dir(tmp_path) / "answers.jsonl")) == sorted(ALL)
    with (run_dir(tmp_path) / "answers.csv").open(encoding="utf-8", newline="") as handle:
        assert [row["question_id"] for row in csv.DictReader(handle)] == ALL
    answers = rows(db, "SELECT * FROM answers")
    assert len(answers) == 5 and all(a["grounded"] and a["final"] for a in answers)


# --------------------------------------------------------------------------------------------
# Embedding task prefixes


def _embedded_texts(llm: FakeOllama) -> list[str]:
    texts: list[str] = []
    for request in llm.requests_to("/api/embed"):
        given = request.body["input"]
        texts.extend([given] if isinstance(given, str) else given)
    return texts


def test_the_embedding_models_task_prefixes_reach_ollama(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    # nomic-embed-text (the default) is asked to name the task before each text it embeds.
    question = QUESTIONS["port"][0]
    done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port"], method="hybrid")), db, "--dry-run", host=llm.url)
    assert done.returncode == 0, done.stderr
    texts = _embedded_texts(llm)
    documents = [t for t in texts if t != f"search_query: {question}"]
    assert len(documents) == len(texts) - 1 and all(t.startswith("search_document: ") for t in documents)
    spaces = rows(db, "SELECT model, count(*) AS n FROM embeddings GROUP BY model")
    assert spaces == [{"model": "nomic-embed-text + 'search_document:'", "n": len(documents)}]

    # A job's own prefixes replace the model's; a new document prefix embeds the chunks again, beside the
    # first vectors, which stay for jobs that keep the model's.
    llm.requests.clear()
    own = job_yaml(["port"], method="hybrid").replace(
        "token_budget: 1000\n", "token_budget: 1000\n  query_prefix: 'Question: '\n  document_prefix: ''\n")
    done = run_job(tmp_path, write_job(tmp_path, own), db, "--dry-run", host=llm.url)
    assert done.returncode == 0, done.stderr
    texts = _embedded_texts(llm)
    assert f"Question: {question}" in texts
    assert sorted(t for t in texts if t != f"Question: {question}") == sorted(t.removeprefix("search_document: ")
                                                                             for t in documents)
    spaces = rows(db, "SELECT model, count(*) AS n FROM embeddings GROUP BY model ORDER BY model")
    assert spaces == [{"model": "nomic-embed-text", "n": len(documents)},
                      {"model": "nomic-embed-text + 'search_document:'", "n": len(documents)}]
