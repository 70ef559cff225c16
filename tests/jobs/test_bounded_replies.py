"""Bounded model replies end to end: what a trickling, looping or huge reply does to a real `webqa run`.

Every run is a subprocess of the real CLI against the fake Ollama and a crawled loopback site (the
helpers and fixtures come from tests/support/run.py), so exit codes, answers.jsonl, report.md and the
DuckDB rows are what cron would see.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.config import parse_job
from pipelines.chunk import estimate_tokens
from tests.support.fake_ollama import FakeOllama, Garbage, Huge, Trickle
from tests.support.site_server import SiteServer
from tests.support.run import (  # noqa: F401 - fixtures are used by name
    QUESTIONS,
    UNANSWERABLE,
    WEBQA,
    crawled,
    db,
    free_port,
    job_yaml,
    llm,
    read_jsonl,
    rows,
    run_dir,
    run_job,
    webqa,
    write_job,
)

pytestmark = pytest.mark.e2e  # every test here starts a child process (tests/support/e2e.py)

LOOPING = '{ "answer": "You can delete the folder with rmdir() and ' * 20  # a small model looping, cut off


def _ollama_keys(yaml_extra: str) -> str:
    """Job-file lines added under the `ollama:` mapping that job_yaml writes last."""
    return "".join(f"  {line}\n" for line in yaml_extra.strip().splitlines())


def _runner_passes_reply_timeout() -> bool:
    """Whether `webqa run` hands ollama.reply_timeout to the client (jobs/runner.py's ollama_settings)."""
    from jobs.runner import ollama_settings

    job = parse_job("name: t\nquestions: [q]\nollama:\n  reply_timeout: 7\n")
    return getattr(ollama_settings(job), "reply_timeout_s", None) == 7


# --------------------------------------------------------------------------------------------
# (a) A model that trickles a token at a time never trips the per-read timeout


@pytest.mark.skipif(not _runner_passes_reply_timeout(),
                    reason="jobs/runner.py ollama_settings does not pass ollama.reply_timeout to OllamaSettings yet")
@pytest.mark.parametrize(("questions", "expected_exit"), [(["port"], 3), (["port", "steps"], 1)])
def test_trickling_model_fails_the_question_at_the_reply_deadline(
        tmp_path: Path, db: Path, llm: FakeOllama, questions: list[str], expected_exit: int) -> None:
    llm.script_chat(Trickle(0.2))  # the first question trickles forever; any other is answered
    text = job_yaml(questions) + _ollama_keys("reply_timeout: 2")
    # Bounded: the subprocess is killed (and the test fails) if the run does not end by itself.
    done = run_job(tmp_path, write_job(tmp_path, text), db, host=llm.url, timeout=60)

    assert done.returncode == expected_exit, done.stderr
    assert "Traceback" not in done.stderr
    results = {r["question_id"]: r for r in read_jsonl(run_dir(tmp_path) / "answers.jsonl")}
    assert results["port"]["error"].startswith("no complete reply within 2 s")
    assert "answer" not in results["port"]
    if "steps" in results:
        assert "212 steps" in results["steps"]["answer"] and results["steps"]["error"] is None
    # Not retried: a trickling model would trickle again.
    assert len([p for p in llm.requests_to("/api/chat")]) == len(questions)


# --------------------------------------------------------------------------------------------
# (b) A reply that is not JSON twice fails the question; its text is never reported as an answer


def test_invalid_json_twice_fails_the_question_without_showing_the_reply(tmp_path: Path, db: Path,
                                                                        llm: FakeOllama) -> None:
    llm.script_chat(Garbage(LOOPING), Garbage(LOOPING))
    done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port"])), db, host=llm.url)

    assert done.returncode == 3, done.stderr  # every question failed
    assert "0/1 answered" in done.stdout and "1 failed" in done.stdout
    assert len(llm.requests_to("/api/chat")) == 2  # asked once more, then given up; no wider retry
    out = run_dir(tmp_path)
    (result,) = read_jsonl(out / "answers.jsonl")
    assert result["error"] == "the model's reply was not valid JSON"
    assert "answer" not in result and "confidence" not in result
    for name in ("answers.jsonl", "report.md"):
        assert "rmdir()" not in (out / name).read_text(encoding="utf-8"), name
    assert f"webqa explain {result['answer_id']}" in (out / "report.md").read_text(encoding="utf-8")

    (answer,) = rows(db, "SELECT * FROM answers")
    assert answer["answer"] is None and answer["valid_json"] is False and answer["grounded"] is False
    assert answer["error"] == "the model's reply was not valid JSON" and answer["answer_id"] == result["answer_id"]
    (prompt,) = rows(db, "SELECT raw_reply FROM prompts")
    assert prompt["raw_reply"] == LOOPING

    explained = webqa("explain", str(result["answer_id"]), "--db", db, "--no-prompt")
    assert explained.returncode == 0, explained.stderr
    assert "Error: the model's reply was not valid JSON" in explained.stdout
    assert '{ "answer": "You can delete the folder with rmdir()' in explained.stdout


BLANK = {"answer": "  \n\t ", "answered": True, "citations": [], "confidence": "high"}


def test_a_blank_answer_no_retry_replaces_fails_the_question(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    # A reply of the right shape whose answer is blanks is no answer: cron is told (the question failed), not shown
    # "answered, not grounded" with nothing after it.
    llm.script_chat(BLANK, BLANK)
    done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port"])), db, host=llm.url)

    assert done.returncode == 3, done.stderr  # every question failed
    assert "0/1 answered" in done.stdout and "1 failed" in done.stdout, done.stdout
    (result,) = read_jsonl(run_dir(tmp_path) / "answers.jsonl")
    assert result["error"] == "the model's reply had an empty answer", result
    stored = rows(db, "SELECT answer, error FROM answers ORDER BY attempt")
    assert stored and all(a == {"answer": None, "error": "the model's reply had an empty answer"} for a in stored)


def test_a_blank_first_answer_is_asked_again_wider(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    llm.script_chat(BLANK)  # then the fake's ordinary, grounded answer
    done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port"])), db, host=llm.url)

    assert done.returncode == 0, done.stderr
    (result,) = read_jsonl(run_dir(tmp_path) / "answers.jsonl")
    assert result["attempt"] == 2 and result["grounded"] is True and result["error"] is None, result
    first, second = rows(db, "SELECT * FROM answers ORDER BY attempt")
    assert first["error"] == "the model's reply had an empty answer" and first["final"] is False
    assert second["retry_reason"] == "the model's reply had an empty answer" and second["final"] is True


def test_a_blank_answer_that_says_not_answered_is_not_enough_information(tmp_path: Path, db: Path,
                                                                        llm: FakeOllama) -> None:
    llm.script_chat({"answer": "", "answered": False, "citations": [], "confidence": "low"})
    done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port"])), db, host=llm.url)

    assert done.returncode == 0, done.stderr
    (said,) = rows(db, "SELECT * FROM answers WHERE attempt = 1")
    assert said["answer"] == "Not enough information" and said["not_enough_info"] is True and said["error"] is None


def test_invalid_json_on_the_wider_retry_keeps_the_first_answer(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    # First answer: not enough information (so a wider retry is made); the retry loops twice.
    llm.script_chat({"answer": "Not enough information", "citations": [], "confidence": "low"},
                    Garbage(LOOPING), Garbage(LOOPING))
    done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port"])), db, host=llm.url)

    assert done.returncode == 0, done.stderr
    (result,) = read_jsonl(run_dir(tmp_path) / "answers.jsonl")
    assert result["answer"] == "Not enough information" and result["attempt"] == 1 and result["error"] is None
    first, second = rows(db, "SELECT * FROM answers ORDER BY attempt")
    assert first["final"] is True and second["final"] is False
    assert second["error"] == "the model's reply was not valid JSON" and second["answer"] is None


# --------------------------------------------------------------------------------------------
# (c) A 10 MB reply is cut off early: a failed attempt, and memory stays flat


_PEAK_RSS = """\
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:])
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)  # KiB on Linux: the run's peak
sys.exit(done.returncode)
"""


def test_a_10_mb_reply_fails_the_attempt_and_memory_stays_small(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    llm.script_chat(Huge(10 * 1024 * 1024))
    job = write_job(tmp_path, job_yaml(["port"]))
    # A fresh parent process, so its RUSAGE_CHILDREN peak is the run's alone.
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_RSS, *WEBQA, "run", str(job), "--no-crawl", "--db", str(db),
         "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**_env(), "OLLAMA_HOST": llm.url},
    )
    assert done.returncode == 3, done.stderr
    peak_kib = int(done.stdout.strip().splitlines()[-1])
    assert peak_kib < 300 * 1024, f"peak RSS {peak_kib // 1024} MiB"

    out = run_dir(tmp_path)
    (result,) = read_jsonl(out / "answers.jsonl")
    assert result["error"] == "reply longer than 65536 bytes (model llama3.2:3b)"
    assert "answer" not in result
    assert (out / "answers.jsonl").stat().st_size < 64 * 1024  # the prompt is in it, the reply is not
    assert "rmdir()" not in (out / "report.md").read_text(encoding="utf-8")
    (prompt,) = rows(db, "SELECT raw_reply FROM prompts")
    assert len(prompt["raw_reply"].encode("utf-8")) == 65536  # what arrived before the cap, for explain
    assert len(llm.requests_to("/api/chat")) == 1  # not retried


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("WEBQA_DB", "OLLAMA_HOST")}


# --------------------------------------------------------------------------------------------
# (d) num_predict goes with every chat request


def test_every_chat_request_carries_num_predict(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port", "steps"])), db, host=llm.url)
    assert done.returncode == 0, done.stderr
    options = [r.body["options"] for r in llm.requests_to("/api/chat")]
    assert len(options) == 2 and all(o["num_predict"] == 1024 for o in options)


def test_num_predict_in_the_job_overrides_the_default(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    text = job_yaml(["port"]) + _ollama_keys("options: {num_predict: 256}")
    done = run_job(tmp_path, write_job(tmp_path, text), db, host=llm.url)
    assert done.returncode == 0, done.stderr
    (request,) = llm.requests_to("/api/chat")
    assert request.body["options"] == {"num_predict": 256, "temperature": 0, "num_ctx": 8192}


# --------------------------------------------------------------------------------------------
# (e) Everything a source puts in the prompt counts against the budget


LONG_HEADING = "Frequently asked question about the harbour ferry " * 2000  # ~100 kB
FERRY = f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Harbour Ferry</title></head>
<body><main><article>
<h1>Harbour Ferry</h1>
<p>The harbour ferry crosses the bay between the old town and the lighthouse pier all year round. Tickets are sold
on board and at the kiosk by the pier, and bicycles travel free of charge outside the morning rush hour.</p>
<h2>{LONG_HEADING}</h2>
<p>The first ferry leaves the old town pier at six in the morning and the last one returns at eleven at night.
In winter the ferry runs every forty minutes, in summer every twenty minutes, and on public holidays it keeps
the Sunday timetable that is posted at both piers.</p>
</article></main></body></html>"""


@pytest.fixture(scope="module")
def ferry_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("ferry")
    with SiteServer() as site:
        site.add(0, "/ferry.html", body=FERRY)
        db = tmp / "ferry.duckdb"
        done = subprocess.run([*WEBQA, "crawl", site.url(0, "/ferry.html"), "--db", str(db), "--delay", "0"],
                              capture_output=True, text=True, timeout=120, cwd=tmp)
        assert done.returncode == 0, done.stderr
    return db


def test_a_100_kb_heading_keeps_the_dry_run_prompt_within_the_budget(ferry_db: Path) -> None:
    (longest,) = rows(ferry_db, "SELECT max(length(heading_path)) AS n FROM chunks")
    assert longest["n"] > 50_000  # the page really stored the huge heading
    question = "When does the first ferry leave the old town pier?"
    done = webqa("ask", question, "--db", ferry_db, "--method", "bm25", "--dry-run", "--json", "--budget", "300")
    assert done.returncode == 0, done.stderr
    obj = json.loads(done.stdout)
    prompt = obj["prompt"]

    sources = prompt.split("<sources>\n", 1)[1].rsplit("\n</sources>", 1)[0]
    assert "first ferry leaves the old town pier" in sources  # the answering chunk still fits
    assert estimate_tokens(sources) <= 300
    # The rest of the prompt is the fixed template and the question: the budget is all that varies.
    from jobs.prompt import build_prompt

    assert estimate_tokens(prompt) <= 300 + estimate_tokens(build_prompt(question, []))
    assert len(prompt) < 5_000
    for source in obj["sources"]:  # what the prompt shows is short; the stored heading stays whole
        assert len(source["heading_path"]) > 50_000 or "Harbour Ferry" in source["heading_path"]


# --------------------------------------------------------------------------------------------
# (f) Ollama down: the extractive answerer says "Not enough information" when the pages do not answer


def test_extractive_fallback_does_not_answer_what_the_pages_do_not_say(tmp_path: Path, db: Path) -> None:
    host = f"http://127.0.0.1:{free_port()}"
    questions = ["port", {"id": "roof", "question": UNANSWERABLE},
                 {"id": "uninstall", "question": "How do I uninstall the Widget Toolkit dashboard?"}]
    done = run_job(tmp_path, write_job(tmp_path, job_yaml(questions)), db, host=host)

    assert done.returncode == 1, done.stderr  # degraded: answered extractively because Ollama was down
    results = {r["question_id"]: r for r in read_jsonl(run_dir(tmp_path) / "answers.jsonl")}
    assert {r["answerer"] for r in results.values()} == {"extractive"}
    assert "8731" in results["port"]["answer"] and results["port"]["grounded"] is True
    for qid in ("roof", "uninstall"):
        assert results[qid]["answer"] == "Not enough information", results[qid]
        assert results[qid]["citations"] == [] and results[qid]["confidence"] == "low"
