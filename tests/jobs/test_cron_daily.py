"""The ordinary day, as cron sees it: the same job run twice, a URL listed twice, a page edited, removed,
refused by robots.txt. Nothing went wrong in any of them, so none may mail: exit 0 and, under -q, silence.

Each test runs `webqa` as a subprocess against the loopback test site and the fake Ollama, then checks the
exit code, what -q printed, the record in the database and the outputs (issue 24).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_ollama import FakeOllama
from tests.support.site_server import SiteServer
from tests.support.run import GARDEN, LIGHTHOUSE, QUESTIONS, WIDGET, job_file, quoting_responder, read_jsonl, rows, webqa

pytestmark = pytest.mark.e2e  # every test here starts a child process (tests/support/e2e.py)


def quiet_run(job: Path, db: Path, out: Path, *args: str, host: str) -> Any:
    return webqa("-q", "run", job, "--db", db, "--out", out, *args, host=host, timeout=180)


def the_run(db: Path, run_id: int | None = None) -> dict[str, Any]:
    found = rows(db, "SELECT * FROM runs ORDER BY run_id")
    return found[-1] if run_id is None else next(r for r in found if r["run_id"] == run_id)


def silent(done: Any) -> bool:
    return done.returncode == 0 and done.stdout == "" and done.stderr == ""


@pytest.fixture
def llm(fake_ollama: FakeOllama) -> FakeOllama:
    fake_ollama.chat_responder = quoting_responder
    return fake_ollama


@pytest.fixture
def site() -> Any:
    server = SiteServer().start()
    server.add(0, "/widget.html", WIDGET)
    server.add(0, "/garden.html", GARDEN)
    server.add(0, "/lighthouse.html", LIGHTHOUSE)
    yield server
    server.stop()


# --------------------------------------------------------------------------------------------
# A URL listed twice is one URL (row 1)


@pytest.mark.parametrize("where", ["urls_file", "inline", "both", "normalised"])
def test_a_url_listed_twice_is_fetched_once_and_never_stale(tmp_path: Path, llm: FakeOllama, site: SiteServer,
                                                            where: str) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    widget = site.url(0, "/widget.html")
    twice = {"urls_file": ([], [widget, widget]), "inline": ([widget, widget], []),
             "both": ([widget], [widget]),
             "normalised": ([widget], [widget.replace("http://127.0.0.1", "HTTP://127.0.0.1") + "#configuration"])}
    inline, listed = twice[where]
    extra = ""
    if listed:
        (tmp_path / "urls.txt").write_text("".join(f"{u}\n" for u in listed), encoding="utf-8")
        extra = "urls_file: urls.txt\n"
    job = job_file(tmp_path / "job.yaml", "daily", inline, ["port"], extra=extra)
    first = quiet_run(job, db, out, host=llm.url)
    assert silent(first), (first.returncode, first.stdout, first.stderr)
    second = quiet_run(job, db, out, host=llm.url)
    assert silent(second), (second.returncode, second.stdout, second.stderr)

    assert [r.path for r in site.requests_for(0)].count("/widget.html") == 2  # once per run
    crawls = rows(db, "SELECT new, not_modified, skipped, failed, urls_requested FROM crawl_runs ORDER BY crawl_run_id")
    assert crawls == [{"new": 1, "not_modified": 0, "skipped": 0, "failed": 0, "urls_requested": 1},
                      {"new": 0, "not_modified": 1, "skipped": 0, "failed": 0, "urls_requested": 1}]
    assert rows(db, "SELECT count(*) AS n FROM fetch_log")[0]["n"] == 0
    record = the_run(db, 2)
    assert (record["status"], record["exit_code"], record["reason"]) == ("done", 0, None)
    (answer,) = read_jsonl(out / "run-2" / "answers.jsonl")
    assert "stale_sources" not in answer and not any(s.get("stale") for s in answer["sources"])
    report = (out / "run-2" / "report.md").read_text(encoding="utf-8")
    assert "stale" not in report


def test_webqa_crawl_counts_a_duplicate_once(tmp_path: Path, site: SiteServer) -> None:
    db = tmp_path / "c.duckdb"
    widget = site.url(0, "/widget.html")
    (tmp_path / "urls.txt").write_text(f"{widget}\n{widget}\n", encoding="utf-8")
    done = webqa("-q", "crawl", "-i", tmp_path / "urls.txt", "--db", db, "--delay", "0")
    assert silent(done), (done.returncode, done.stdout, done.stderr)
    loud = webqa("crawl", "-i", tmp_path / "urls.txt", "--db", db, "--delay", "0")
    assert loud.returncode == 0, loud.stderr
    assert "fetched 0 (new 0, changed 0, unchanged 0), not modified 1, fresh 0, skipped 0, failed 0" in loud.stdout
    assert f"{tmp_path / 'urls.txt'}:2" in loud.stderr and "duplicate of" in loud.stderr


# --------------------------------------------------------------------------------------------
# Skips on purpose are not failures, and a stored page they refuse is dropped, not stale (item 2)


@pytest.mark.parametrize("refusal", ["robots", "crawl_delay", "not_html"])
def test_a_page_refused_now_is_dropped_not_stale_and_the_run_is_clean(tmp_path: Path, llm: FakeOllama,
                                                                     site: SiteServer, refusal: str) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    site.add(1, "/lighthouse.html", LIGHTHOUSE)  # another host: robots.txt is per host
    widget, lighthouse = site.url(0, "/widget.html"), site.url(1, "/lighthouse.html")
    job = job_file(tmp_path / "job.yaml", "daily", [widget, lighthouse], ["port", "steps"])
    assert silent(quiet_run(job, db, out, host=llm.url))
    if refusal == "robots":
        site.add(0, "/robots.txt", "User-agent: *\nDisallow: /widget.html\n", content_type="text/plain")
        (tmp_path / "w.duckdb.robots.json").unlink(missing_ok=True)  # the cached allow-all of run 1
        why = "disallowed by robots.txt"
    elif refusal == "crawl_delay":  # the site's wish and the job's limit (crawl.max_crawl_delay, 30 s)
        site.add(0, "/robots.txt", "User-agent: *\nCrawl-delay: 120\n", content_type="text/plain")
        (tmp_path / "w.duckdb.robots.json").unlink(missing_ok=True)
        why = "robots.txt Crawl-delay 120 s exceeds the maximum 30 s; host skipped"
    else:
        site.add(0, "/widget.html", "PK\x03\x04 not a page", content_type="application/zip")  # PDFs are read now
        why = "not HTML (application/zip)"
    second = quiet_run(job, db, out, host=llm.url)
    assert silent(second), (second.returncode, second.stdout, second.stderr)
    record = the_run(db, 2)
    assert (record["status"], record["exit_code"]) == ("done", 0)
    answers = {a["question_id"]: a for a in read_jsonl(out / "run-2" / "answers.jsonl")}
    assert all(s["url"] != widget for a in answers.values() for s in a["sources"])  # not answered from
    assert not any(s.get("stale") for a in answers.values() for s in a["sources"])
    assert [r["url"] for r in rows(db, "SELECT url FROM run_pages WHERE run_id = 2")] == [lighthouse]
    report = (out / "run-2" / "report.md").read_text(encoding="utf-8")
    assert f"- <{widget}> — {why}" in report and "stale" not in report

    # A refusal of a page never stored is not a failure either: nothing to drop, nothing to report.
    (tmp_path / "w.duckdb.robots.json").unlink(missing_ok=True)
    db2, out2 = tmp_path / "fresh.duckdb", tmp_path / "out2"
    third = quiet_run(job, db2, out2, host=llm.url)
    assert silent(third), (third.returncode, third.stdout, third.stderr)
    (skip,) = rows(db2, "SELECT url, outcome, reason FROM fetch_log")
    assert (skip["url"], skip["outcome"]) == (widget, "skipped") and skip["reason"].startswith(why.split(" (")[0])


def test_a_robots_txt_the_host_cannot_serve_is_a_failure_and_its_page_stale(tmp_path: Path, llm: FakeOllama,
                                                                           site: SiteServer) -> None:
    """Not a skip on purpose: robots.txt answering 503 means the host is in trouble (RFC 9309: treat it as
    disallowed), so its stored page is answered from, marked stale, and the run is partial."""
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    site.add(1, "/lighthouse.html", LIGHTHOUSE)
    widget, lighthouse = site.url(0, "/widget.html"), site.url(1, "/lighthouse.html")
    job = job_file(tmp_path / "job.yaml", "daily", [widget, lighthouse], ["port", "steps"])
    assert silent(quiet_run(job, db, out, host=llm.url))
    site.add(0, "/robots.txt", "busy", status=503, content_type="text/plain")
    (tmp_path / "w.duckdb.robots.json").unlink(missing_ok=True)
    second = quiet_run(job, db, out, host=llm.url)
    assert second.returncode == 1, (second.returncode, second.stdout, second.stderr)
    (line,) = second.stderr.splitlines()
    assert f"1 URLs could not be fetched: {widget} (robots.txt unreachable (HTTP 503)" in line
    assert "1 pages answered from stale copies" in line
    port = {a["question_id"]: a for a in read_jsonl(out / "run-2" / "answers.jsonl")}["port"]
    assert any(s.get("stale") for s in port["sources"] if s["url"] == widget)


# --------------------------------------------------------------------------------------------
# Gone means gone: --no-crawl, ask --job and resume do not bring a removed page back (row 2)


def test_a_removed_page_stays_gone_without_a_crawl(tmp_path: Path, llm: FakeOllama, site: SiteServer) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    widget, lighthouse = site.url(0, "/widget.html"), site.url(0, "/lighthouse.html")
    job = job_file(tmp_path / "job.yaml", "daily", [widget, lighthouse], ["port", "steps"])
    assert silent(quiet_run(job, db, out, host=llm.url))
    site.add(0, "/widget.html", "<html><body>Not found</body></html>", status=404)
    second = quiet_run(job, db, out, host=llm.url)
    assert silent(second), (second.returncode, second.stdout, second.stderr)  # a page change, not an outage
    gone = quiet_run(job, db, out, "--fail-on-change", host=llm.url)  # the crawl sees the 404 again
    assert silent(gone), (gone.returncode, gone.stdout, gone.stderr)

    no_crawl = quiet_run(job, db, out, "--no-crawl", "--fail-on-change", host=llm.url)
    assert silent(no_crawl), (no_crawl.returncode, no_crawl.stdout, no_crawl.stderr)
    record = the_run(db)
    assert (record["status"], record["exit_code"]) == ("done", 0)
    assert [r["url"] for r in rows(db, "SELECT url FROM run_pages WHERE run_id = ?", [record["run_id"]])] == [lighthouse]
    answers = {a["question_id"]: a for a in read_jsonl(out / f"run-{record['run_id']}" / "answers.jsonl")}
    assert all(s["url"] != widget for a in answers.values() for s in a["sources"])
    assert {a["change"] for a in answers.values()} == {"unchanged"}

    for question in ("port", "steps"):
        asked = webqa("ask", QUESTIONS[question][0], "--db", db, "--job", "daily", "--json", "--dry-run",
                      "--method", "bm25")
        assert asked.returncode == 0, asked.stderr
        assert {c["url"] for c in json.loads(asked.stdout)["chunks"]} == ({lighthouse} if question == "steps" else set())


# --------------------------------------------------------------------------------------------
# An answer changes when what it says changes (row 3, item 1)


def test_an_edit_elsewhere_in_the_cited_section_is_the_same_answer(tmp_path: Path, llm: FakeOllama,
                                                                   site: SiteServer) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    widget = site.url(0, "/widget.html")
    job = job_file(tmp_path / "job.yaml", "daily", [widget], ["port", "python"])
    assert silent(quiet_run(job, db, out, host=llm.url))
    # Another sentence of the Configuration section: the port's chunk is rewritten, its quote is not.
    site.add(0, "/widget.html", WIDGET.replace("defaults to 250 milliseconds", "defaults to 300 milliseconds"))
    second = quiet_run(job, db, out, "--fail-on-change", host=llm.url)
    assert silent(second), (second.returncode, second.stdout, second.stderr)
    changes = {r["question_id"]: r["change"] for r in rows(db, "SELECT question_id, change FROM answers "
                                                               "WHERE run_id = 2 AND final")}
    assert changes == {"port": "evidence_moved", "python": "unchanged"}
    report = (out / "run-2" / "report.md").read_text(encoding="utf-8")
    assert "**Same (evidence moved: the quoted sections were edited elsewhere)** (1): port" in report
    assert "Change since the previous run: **same (evidence moved)**" in report
    diff = webqa("diff", "--db", db)
    assert diff.returncode == 0 and "1 same (evidence moved)" in diff.stdout and "- **port**:" not in diff.stdout

    # The fact itself changes: exit 5, and the one line under -q names the question.
    site.add(0, "/widget.html", WIDGET.replace("port 8731 unless another port is configured",
                                               "port 8731 only while no other port is configured"))
    third = quiet_run(job, db, out, "--fail-on-change", host=llm.url)
    assert third.returncode == 5 and third.stdout == "", (third.returncode, third.stdout, third.stderr)
    (line,) = third.stderr.splitlines()
    assert line.startswith("Run 3 done: 2/2 answered") and "1 changed (port)" in line
    diff = webqa("diff", "--db", db)
    assert "**Changed** (1):" in diff.stdout and "- **port**:" in diff.stdout
    assert f"    behind it: <{widget}> changed" in diff.stdout
    assert "“The dashboard server listens on port 8731 only while no other port is configured.”" in diff.stdout


def test_a_reworded_answer_counts_only_when_asked(tmp_path: Path, fake_ollama: FakeOllama, site: SiteServer) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    wording = {"prefix": ""}

    def responder(body: Any) -> dict[str, Any]:
        reply = quoting_responder(body)
        if reply["citations"]:
            reply["answer"] = wording["prefix"] + reply["answer"]
        return reply

    fake_ollama.chat_responder = responder
    job = job_file(tmp_path / "job.yaml", "daily", [site.url(0, "/widget.html")], ["port"])
    assert silent(quiet_run(job, db, out, host=fake_ollama.url))
    wording["prefix"] = "According to the manual: "
    second = quiet_run(job, db, out, "--fail-on-change", host=fake_ollama.url)
    assert silent(second), (second.returncode, second.stdout, second.stderr)
    assert rows(db, "SELECT change FROM answers WHERE run_id = 2 AND final") == [{"change": "reworded"}]
    wording["prefix"] = "In short: "
    third = quiet_run(job, db, out, "--fail-on-reworded", host=fake_ollama.url)
    assert third.returncode == 5, (third.returncode, third.stdout, third.stderr)
    assert "1 reworded (port)" in third.stderr
    assert the_run(db)["reason"] == "answers changed (--fail-on-change): port"


def test_runs_stored_before_the_change_kinds_still_diff(tmp_path: Path, llm: FakeOllama, site: SiteServer) -> None:
    """Evidence stored as (chunk id, quote) pairs by an earlier webqa is computed again from the answer rows."""
    import duckdb

    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    job = job_file(tmp_path / "job.yaml", "daily", [site.url(0, "/widget.html")], ["port"])
    assert silent(quiet_run(job, db, out, host=llm.url))
    assert silent(quiet_run(job, db, out, host=llm.url))
    conn = duckdb.connect(str(db))
    try:
        conn.execute("UPDATE answers SET evidence = '{\"answered\": true, \"citations\": [[\"c1\", \"x\"]], "
                     "\"fallback\": \"\"}', change = 'unchanged'")
    finally:
        conn.close()
    diff = webqa("diff", "1", "2", "--db", db, "--json")
    assert diff.returncode == 0, diff.stderr
    assert json.loads(diff.stdout)["answers"][0]["change"] == "unchanged"


# --------------------------------------------------------------------------------------------
# Quiet means quiet (row 4, item 4)


def test_quiet_prints_one_line_naming_the_failed_url(tmp_path: Path, llm: FakeOllama, site: SiteServer) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    widget, garden = site.url(0, "/widget.html"), site.url(0, "/garden.html")
    job = job_file(tmp_path / "job.yaml", "daily", [widget, garden], ["port", "tomatoes"])
    assert silent(quiet_run(job, db, out, host=llm.url))
    site.add(0, "/garden.html", "<html><body>oops</body></html>", status=500)
    second = quiet_run(job, db, out, host=llm.url)
    assert second.returncode == 1 and second.stdout == "", (second.returncode, second.stdout, second.stderr)
    (line,) = second.stderr.splitlines()
    assert line.startswith("Run 2 partial: 2/2 answered") and f"1 URLs could not be fetched: {garden} (HTTP 500)" in line
    crawl = webqa("-q", "crawl", widget, garden, "--db", db, "--delay", "0")
    assert crawl.returncode == 1 and crawl.stdout == ""
    (line,) = crawl.stderr.splitlines()
    assert line.startswith("Crawled in") and line.endswith(f"1 URLs could not be fetched: {garden} (HTTP 500)")


# --------------------------------------------------------------------------------------------
# Extractive answers earn their confidence; "Not enough information" is never called grounded (row 7)


def test_not_enough_information_is_never_printed_as_grounded(tmp_path: Path, site: SiteServer) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    job = job_file(tmp_path / "job.yaml", "daily", [site.url(0, "/widget.html")], ["port"])
    job.write_text(job.read_text(encoding="utf-8").replace(
        "selection:", "  - id: roof\n    question: How much did the repairs of the museum roof cost?\nselection:"),
        encoding="utf-8")
    done = webqa("run", job, "--db", db, "--out", out, "--answerer", "extractive", timeout=180)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^\[2/2\] roof: not enough information, attempt \d$", done.stderr, re.M), done.stderr
    assert "[1/2] port: medium confidence, grounded, attempt 1" in done.stderr
    report = (out / "run-1" / "report.md").read_text(encoding="utf-8")
    roof = report.split("## roof:", 1)[1]
    assert "**Not enough information** · answerer: " in roof and "grounded" not in roof
    assert "answered (1 grounded, 1 not enough information)" in done.stdout
    asked = webqa("ask", "How much did the repairs of the museum roof cost?", "--db", db, "--method", "bm25",
                  "--answerer", "extractive")
    assert asked.returncode == 0, asked.stderr
    assert "grounded" not in asked.stdout and "Not enough information; answer id" in asked.stdout


def test_a_usage_error_under_quiet_is_one_line(tmp_path: Path) -> None:
    done = webqa("-q", "run", tmp_path / "job.yaml", "--no-such-option")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == ["Error: webqa: unrecognized arguments: --no-such-option"]
    missing = webqa("run", "-q")
    assert missing.returncode == 2 and missing.stderr.splitlines() == [
        "Error: webqa run: the following arguments are required: JOB.yaml"]


def test_resume_and_eval_do_not_bring_a_removed_page_back(tmp_path: Path, llm: FakeOllama, site: SiteServer) -> None:
    import os
    import signal
    import subprocess
    import time

    from tests.support.fake_ollama import Trickle
    from tests.support.run import WEBQA

    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    widget, lighthouse = site.url(0, "/widget.html"), site.url(0, "/lighthouse.html")
    job = job_file(tmp_path / "job.yaml", "daily", [widget, lighthouse], ["port", "steps"])
    job.write_text(job.read_text(encoding="utf-8").replace(
        'question: "Which port does the dashboard server listen on?"\n',
        'question: "Which port does the dashboard server listen on?"\n    expect: ["port 8731"]\n'), encoding="utf-8")
    assert silent(quiet_run(job, db, out, host=llm.url))
    site.add(0, "/widget.html", "<html><body>Not found</body></html>", status=404)
    # Run 2 crawls (and sees the 404), then dies while the model is answering.
    llm.script_chat(Trickle(0.5))
    env = {k: v for k, v in os.environ.items() if k not in ("WEBQA_DB", "OLLAMA_HOST")}
    proc = subprocess.Popen([*WEBQA, "-q", "run", str(job), "--db", str(db), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**env, "OLLAMA_HOST": llm.url})
    deadline = time.monotonic() + 60
    while len(llm.requests_to("/api/chat")) < 3:  # two in run 1, then run 2's first question
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    llm.script_chat()  # the model is well again
    resumed = quiet_run(job, db, out, "--resume", "--fail-on-change", host=llm.url)
    assert resumed.returncode in (0, 5), (resumed.returncode, resumed.stderr)
    record = the_run(db)
    assert record["run_id"] == 2 and record["resumed"] == 1 and record["status"] == "done"
    answers = {a["question_id"]: a for a in read_jsonl(out / "run-2" / "answers.jsonl")}
    assert all(s["url"] != widget for a in answers.values() for s in a["sources"])
    assert answers["port"]["not_enough_information"] is True

    evaluated = webqa("eval", job, "--db", db, "--method", "bm25", "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    (port,) = [q for q in json.loads(evaluated.stdout)["questions"] if q["id"] == "port"]
    assert port["answer_chunks"] and port["ranks"]["bm25"] is None  # the gone page is not ranked


def test_a_job_whose_only_url_is_skipped_says_why_in_its_one_line(tmp_path: Path, llm: FakeOllama,
                                                                   site: SiteServer) -> None:
    site.add(0, "/manual.zip", "PK\x03\x04 not a page", content_type="application/zip")  # PDFs are read now
    pdf = site.url(0, "/manual.zip")
    job = job_file(tmp_path / "job.yaml", "daily", [pdf], ["port"])
    done = quiet_run(job, tmp_path / "w.duckdb", tmp_path / "out", host=llm.url)
    assert done.returncode == 3 and done.stdout == ""  # nothing to answer from
    (line,) = done.stderr.splitlines()
    assert line == f"Error: no page of job daily can be answered from (1 URLs were skipped: {pdf} (not HTML " \
                   "(application/zip)))", line
