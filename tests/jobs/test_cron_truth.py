"""Cron sees only verdicts: each scenario fails the way it would fail at 06:15 with nobody watching.

Each test runs `webqa` as a subprocess against loopback sites that are stopped, broken or slowed,
and the fake Ollama, then checks what cron gets (exit code, what -q prints), what the database
records (the run's status, reason and exit code) and the data (pages stored, answers' sources).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_ollama import Fail, FakeOllama, Slow, Trickle
from tests.support.site_server import SiteServer
from tests.support.crawling import mount_tmpfs
from tests.support.run import (GARDEN, LIGHTHOUSE, QUESTIONS, WEBQA, WIDGET, job_file, lines, quoting_responder, read_jsonl,
                               rows, webqa)

pytestmark = pytest.mark.e2e  # every test here starts a child process (tests/support/e2e.py)


def site_with_pages() -> SiteServer:
    site = SiteServer().start()
    site.add(0, "/widget.html", WIDGET)
    site.add(0, "/garden.html", GARDEN)
    site.add(0, "/lighthouse.html", LIGHTHOUSE)
    return site


def run(job: Path, db: Path, out: Path, *args: str, host: str) -> subprocess.CompletedProcess[str]:
    return webqa("-q", "run", job, "--db", db, "--out", out, *args, host=host, timeout=180)


def the_run(db: Path, run_id: int | None = None) -> dict[str, Any]:
    found = rows(db, "SELECT * FROM runs ORDER BY run_id")
    return found[-1] if run_id is None else next(r for r in found if r["run_id"] == run_id)


def run_folder(out: Path, run_id: int) -> Path:
    return out / f"run-{run_id}"


@pytest.fixture
def llm(fake_ollama: FakeOllama) -> FakeOllama:
    fake_ollama.chat_responder = quoting_responder
    return fake_ollama


# --------------------------------------------------------------------------------------------
# A dead site


def test_site_down_on_the_second_run_fails_with_exit_3_and_says_why_under_quiet(tmp_path: Path, llm: FakeOllama) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    site = site_with_pages()
    try:
        urls = [site.url(0, p) for p in ("/widget.html", "/garden.html", "/lighthouse.html")]
        job = job_file(tmp_path / "job.yaml", "daily", urls, ["port", "steps"])
        first = run(job, db, out, host=llm.url)
        assert first.returncode == 0, first.stderr
    finally:
        site.stop()  # the site is down tomorrow: connection refused

    second = run(job, db, out, host=llm.url)
    assert second.returncode == 3, second.stderr
    # Under -q: one line, naming what happened and each URL that failed.
    (line,) = lines(second.stderr)
    assert second.stdout == ""
    assert line.startswith("Error: no page of job daily could be fetched (3 URLs could not be fetched: ")
    assert line.count("(connection refused)") == 3
    answers_before = rows(db, "SELECT count(*) AS n FROM answers WHERE run_id = 1")[0]["n"]
    assert rows(db, "SELECT count(*) AS n FROM answers WHERE run_id = 2")[0]["n"] == 0  # nothing from old copies
    assert answers_before == 2
    record = the_run(db, 2)
    assert (record["status"], record["exit_code"], record["phase"]) == ("failed", 3, "crawl")
    assert "no page of job daily could be fetched" in record["reason"]
    assert record["finished_at"] is not None


def test_answer_stale_answers_from_stored_copies_marks_them_and_exits_1(tmp_path: Path, llm: FakeOllama) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    site = site_with_pages()
    try:
        urls = [site.url(0, p) for p in ("/widget.html", "/lighthouse.html")]
        job = job_file(tmp_path / "job.yaml", "daily", urls, ["port"], extra="on_crawl_failure: answer_stale\n")
        assert run(job, db, out, host=llm.url).returncode == 0
    finally:
        site.stop()

    second = run(job, db, out, host=llm.url)
    assert second.returncode == 1, second.stderr
    (line,) = lines(second.stderr)
    assert line.startswith("Run 2 partial") and "2 pages answered from stale copies" in line
    (answer,) = read_jsonl(run_folder(out, 2) / "answers.jsonl")
    assert answer["grounded"] is True and "8731" in answer["answer"]
    (cited,) = {s["url"] for s in answer["sources"] if s.get("stale")}
    assert cited == urls[0] and answer["stale_sources"] is True
    assert all(s["last_fetched_at"] for s in answer["sources"] if s.get("stale"))
    report = (run_folder(out, 2) / "report.md").read_text(encoding="utf-8")
    assert f"stale: <{urls[0]}> (last fetched" in report  # an autolink: the URL as written, no markup
    record = the_run(db, 2)
    assert (record["status"], record["exit_code"]) == ("partial", 1) and "stale" in record["reason"]


def test_one_page_failing_is_a_partial_run_named_under_quiet(tmp_path: Path, llm: FakeOllama) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    site = site_with_pages()
    try:
        urls = [site.url(0, p) for p in ("/widget.html", "/garden.html")]
        job = job_file(tmp_path / "job.yaml", "daily", urls, ["port", "tomatoes"])
        assert run(job, db, out, host=llm.url).returncode == 0
        site.add(0, "/garden.html", "<html><body>oops</body></html>", status=500)
        second = run(job, db, out, host=llm.url)
    finally:
        site.stop()
    assert second.returncode == 1, second.stderr
    (summary,) = lines(second.stderr)
    assert second.stdout == ""
    assert summary.startswith("Run 2 partial: 2/2 answered")
    assert f"1 URLs could not be fetched: {urls[1]} (HTTP 500)" in summary
    tomatoes = {r["question_id"]: r for r in read_jsonl(run_folder(out, 2) / "answers.jsonl")}["tomatoes"]
    assert any(s.get("stale") for s in tomatoes["sources"] if s["url"] == urls[1])


def test_blocked_by_the_ssrf_guard_names_the_key_that_allows_it(tmp_path: Path, llm: FakeOllama) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    site = site_with_pages()
    try:
        job = job_file(tmp_path / "job.yaml", "intranet", [site.url(0, "/widget.html")], ["port"])
        job.write_text(job.read_text().replace("  allow_private_networks: true\n", ""), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if k != "WEBQA_ALLOW_PRIVATE_NETWORKS"}
        done = subprocess.run([*WEBQA, "-q", "run", str(job), "--db", str(db), "--out", str(out)],
                              capture_output=True, text=True, timeout=120,
                              env={**env, "OLLAMA_HOST": llm.url})
    finally:
        site.stop()
    assert done.returncode == 3, done.stderr
    assert site.requests_for(0) == []
    assert any("crawl.allow_private_networks: true" in line for line in lines(done.stderr)), done.stderr


# --------------------------------------------------------------------------------------------
# Two jobs, one database


def test_a_job_answers_from_its_own_pages_only(tmp_path: Path, llm: FakeOllama) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    site = site_with_pages()
    try:
        job_a = job_file(tmp_path / "a.yaml", "alpha", [site.url(0, "/widget.html")], ["port"])
        lighthouse = site.url(0, "/lighthouse.html")
        job_b = job_file(tmp_path / "b.yaml", "beta", [lighthouse], ["port", "steps"])
        assert run(job_a, db, out, host=llm.url).returncode == 0
        done = run(job_b, db, out, host=llm.url)
        # Job B's pages all fail: it must not answer from job A's.
        site.add(0, "/lighthouse.html", "gone", status=503)
        failed = run(job_b, db, out, host=llm.url)
    finally:
        site.stop()
    assert done.returncode == 0, done.stderr
    answers = {r["question_id"]: r for r in read_jsonl(run_folder(out, 2) / "answers.jsonl")}
    # "port" is answered on job A's page only; job B does not see it.
    assert {s["url"] for r in answers.values() for s in r["sources"]} == {lighthouse}
    assert "8731" not in json.dumps(answers["port"])
    assert failed.returncode == 3, failed.stderr
    assert rows(db, "SELECT count(*) AS n FROM answers WHERE run_id = 3")[0]["n"] == 0
    # `webqa ask` searches the whole database unless told which job's pages to search.
    question = QUESTIONS["port"][0]
    everywhere = json.loads(webqa("ask", question, "--db", db, "--dry-run", "--json", "--method", "bm25").stdout)
    beta_only = json.loads(webqa("ask", question, "--db", db, "--dry-run", "--json", "--method", "bm25",
                                 "--job", "beta").stdout)
    assert any("widget" in s["url"] for s in everywhere["sources"])
    assert all(s["url"] == lighthouse for s in beta_only["sources"])
    unknown = webqa("ask", question, "--db", db, "--dry-run", "--job", "nosuch")
    assert unknown.returncode == 2 and lines(unknown.stderr) == [
        "Error: --job nosuch: no stored page was reached by a crawl of that job; check the name (webqa runs lists "
        "the jobs)"]


def test_scope_database_searches_every_page(tmp_path: Path, llm: FakeOllama) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    site = site_with_pages()
    try:
        job_a = job_file(tmp_path / "a.yaml", "alpha", [site.url(0, "/widget.html")], ["port"])
        job_b = job_file(tmp_path / "b.yaml", "beta", [site.url(0, "/lighthouse.html")], ["port"],
                         extra="scope: database\n")
        assert run(job_a, db, out, host=llm.url).returncode == 0
        done = run(job_b, db, out, host=llm.url)
    finally:
        site.stop()
    assert done.returncode == 0, done.stderr
    (answer,) = read_jsonl(run_folder(out, 2) / "answers.jsonl")
    assert "8731" in answer["answer"]


# --------------------------------------------------------------------------------------------
# Signals and kills during the crawl


def slow_site(pages: int, seconds: float) -> tuple[SiteServer, list[str]]:
    site = SiteServer().start()
    urls = []
    for i in range(pages):
        body = WIDGET if i == 0 else LIGHTHOUSE.replace("Lighthouse", f"Lighthouse {i}")
        site.slow(0, f"/p{i}.html", seconds, body=body)
        urls.append(site.url(0, f"/p{i}.html"))
    return site, urls


def start_run(job: Path, db: Path, out: Path, host: str, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WEBQA_DB", "OLLAMA_HOST")}
    env["OLLAMA_HOST"] = host
    return subprocess.Popen([*WEBQA, "-q", "run", str(job), "--db", str(db), "--out", str(out), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_until(condition: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def page_requests(site: SiteServer) -> list[str]:
    return [r.path for r in site.requests_for(0) if r.path != "/robots.txt"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_the_crawl_stops_it_soon_and_resume_finishes(tmp_path: Path, llm: FakeOllama,
                                                                      sig: signal.Signals) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    site, urls = slow_site(8, 0.6)
    try:
        job = job_file(tmp_path / "job.yaml", "daily", urls, ["port", "steps"], extra="")
        job.write_text(job.read_text().replace("  delay: 0\n", "  delay: 0.3\n"), encoding="utf-8")
        proc = start_run(job, db, out, llm.url)
        wait_until(lambda: len(page_requests(site)) >= 2)
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "Traceback" not in err
        assert any(line.startswith("Interrupted:") for line in lines(err)), err
        fetched_before = set(page_requests(site))
        assert len(fetched_before) < len(urls)  # it did not run to its end
        record = the_run(db)
        assert (record["status"], record["phase"], record["exit_code"]) == ("interrupted", "crawl", 130)
        assert rows(db, "SELECT count(*) AS n FROM answers")[0]["n"] == 0  # no answers from a half crawl
        stored = {r["url"] for r in rows(db, "SELECT url FROM pages")}

        site.reset_log()
        resumed = webqa("-q", "run", job, "--db", db, "--out", out, "--resume", host=llm.url, timeout=180)
        assert resumed.returncode == 0, resumed.stderr
        # Only what the interrupted run had not fetched is fetched now.
        assert not {site.url(0, p) for p in page_requests(site)} & stored
        assert {r["url"] for r in rows(db, "SELECT url FROM pages")} == set(urls)
        final = the_run(db)
        assert final["run_id"] == record["run_id"] and final["status"] == "done" and final["resumed"] == 1
        assert len(read_jsonl(run_folder(out, final["run_id"]) / "answers.jsonl")) == 2
    finally:
        site.stop()


def test_webqa_crawl_stops_on_the_first_sigterm_and_at_once_on_the_second(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    site, urls = slow_site(10, 1.0)
    try:
        for second_signal in (False, True):
            site.reset_log()
            proc = subprocess.Popen([*WEBQA, "-q", "crawl", *urls, "--db", str(db), "--delay", "0.2"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            wait_until(lambda: len(page_requests(site)) >= 2)
            proc.send_signal(signal.SIGTERM)
            if second_signal:
                time.sleep(0.2)
                proc.send_signal(signal.SIGTERM)
            _out, err = proc.communicate(timeout=60)
            assert proc.returncode == 130, err
            assert "Traceback" not in err
            (line,) = lines(err)  # -q: the one line
            assert line.startswith("Interrupted: SIGTERM: the crawl stopped")
            assert len(page_requests(site)) < len(urls)
        statuses = [r["status"] for r in rows(db, "SELECT status FROM crawl_runs ORDER BY crawl_run_id")]
        assert statuses == ["interrupted", "interrupted"]
        skipped = rows(db, "SELECT reason FROM fetch_log WHERE crawl_run_id = 1 AND outcome = 'skipped'")
        assert skipped and all(r["reason"] == "not fetched: the crawl was interrupted" for r in skipped)
    finally:
        site.stop()


def test_a_run_killed_during_its_crawl_is_recorded_and_resumed(tmp_path: Path, llm: FakeOllama) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    site, urls = slow_site(6, 0.5)
    try:
        job = job_file(tmp_path / "job.yaml", "daily", urls, ["port"])
        proc = start_run(job, db, out, llm.url)
        wait_until(lambda: len(page_requests(site)) >= 3)
        proc.kill()
        proc.communicate(timeout=30)
        listing = webqa("runs", "--db", db, "--json")
        assert listing.returncode == 0, listing.stderr
        (killed,) = json.loads(listing.stdout)
        assert killed["status"] == "crawling" and killed["state"] == "killed (crawling)"

        resumed = webqa("-q", "run", job, "--db", db, "--out", out, "--resume", host=llm.url, timeout=180)
        assert resumed.returncode == 0, resumed.stderr
        final = the_run(db)
        assert final["run_id"] == killed["run_id"] and final["status"] == "done"
        assert {r["url"] for r in rows(db, "SELECT url FROM pages")} == set(urls)
        assert len(read_jsonl(run_folder(out, final["run_id"]) / "answers.jsonl")) == 1
    finally:
        site.stop()


def test_run_duration_covers_the_crawl(tmp_path: Path, llm: FakeOllama) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    site, urls = slow_site(2, 0.5)
    try:
        job = job_file(tmp_path / "job.yaml", "daily", urls, ["port"])
        assert run(job, db, out, host=llm.url).returncode == 0
    finally:
        site.stop()
    record = the_run(db)
    (crawl,) = rows(db, "SELECT * FROM crawl_runs")
    assert record["started_at"] <= crawl["started_at"] and record["finished_at"] >= crawl["finished_at"]


# --------------------------------------------------------------------------------------------
# Every attempt is recorded


def test_a_run_that_fails_early_is_in_webqa_runs(tmp_path: Path, llm: FakeOllama) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    site = SiteServer().start()
    try:
        site.add(0, "/empty.html", "<html><body></body></html>")
        job = job_file(tmp_path / "job.yaml", "empty", [site.url(0, "/empty.html")], ["port"])
        done = run(job, db, out, host=llm.url)
    finally:
        site.stop()
    assert done.returncode == 3
    listing = json.loads(webqa("runs", "--db", db, "--json").stdout)
    assert [(r["job_name"], r["status"]) for r in listing] == [("empty", "failed")]
    assert listing[0]["reason"]


# --------------------------------------------------------------------------------------------
# A model that never finishes


def test_a_second_signal_stops_a_run_waiting_on_the_model_and_the_next_run_is_not_locked(
        tmp_path: Path, llm: FakeOllama) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    site = site_with_pages()
    try:
        job = job_file(tmp_path / "job.yaml", "daily", [site.url(0, "/widget.html")], ["port"])
        assert run(job, db, out, host=llm.url).returncode == 0
        llm.script_chat(Trickle(0.5))  # the model streams forever
        proc = start_run(job, db, out, llm.url, "--no-crawl")
        wait_until(lambda: len(llm.requests_to("/api/chat")) >= 2)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None  # the first signal waits for the question in hand
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    finally:
        site.stop()
    assert proc.returncode == 130, err
    record = the_run(db)
    assert (record["status"], record["exit_code"]) == ("interrupted", 130)
    again = run(job, db, out, "--no-crawl", host=llm.url)
    assert again.returncode == 0, again.stderr


# --------------------------------------------------------------------------------------------
# A full disk while answering


def test_a_full_disk_while_answering_is_one_error_line_and_resume_keeps_the_answers(tmp_path: Path,
                                                                                    llm: FakeOllama) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    out.mkdir()
    if not mount_tmpfs(out, "256k"):
        pytest.skip("cannot mount a small tmpfs here (needs root): no way to fill a disk for real")
    site = site_with_pages()
    try:
        urls = [site.url(0, p) for p in ("/widget.html", "/garden.html", "/lighthouse.html")]
        job = job_file(tmp_path / "job.yaml", "daily", urls, list(QUESTIONS))
        filler = out / "filler"
        stat = os.statvfs(out)
        filler.write_bytes(b"x" * (stat.f_bavail * stat.f_frsize - 16 * 1024))  # 16 KiB left
        full = run(job, db, out, host=llm.url)
        assert full.returncode == 3, full.stderr
        assert "Traceback" not in full.stderr
        (error,) = [line for line in lines(full.stderr) if line.startswith("Error:")]
        assert "No space left on device" in error and "--resume" in error
        record = the_run(db)
        assert (record["status"], record["exit_code"], record["resumable"]) == ("failed", 3, True)
        answered = rows(db, "SELECT question_id FROM answers WHERE final")
        assert 1 <= len(answered) < len(QUESTIONS)
        asked = len(llm.requests_to("/api/chat"))

        filler.unlink()
        resumed = run(job, db, out, "--resume", host=llm.url)
        assert resumed.returncode == 0, resumed.stderr
        assert the_run(db)["run_id"] == record["run_id"]
        # The answers stored before the disk filled are kept, not asked again.
        assert len(llm.requests_to("/api/chat")) - asked == len(QUESTIONS) - len(answered)
        assert len(read_jsonl(run_folder(out, record["run_id"]) / "answers.jsonl")) == len(QUESTIONS)
    finally:
        site.stop()
        subprocess.run(["umount", "-l", str(out)], capture_output=True, timeout=30)


# --------------------------------------------------------------------------------------------
# Found by trying the above as a cron user would (review of this change)


def test_embedding_failures_at_run_time_are_a_degraded_run(tmp_path: Path, fake_ollama: FakeOllama) -> None:
    """/api/embed failing (model listed, runner crashing) silently selects with bm25: exit 0, no notice."""
    fake_ollama.chat_responder = quoting_responder
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    site = site_with_pages()
    try:
        job = job_file(tmp_path / "job.yaml", "daily", [site.url(0, "/widget.html")], ["port"])
        job.write_text(job.read_text().replace("method: bm25", "method: hybrid"), encoding="utf-8")
        fake_ollama.script_embed(*[Fail(500)] * 20)
        done = run(job, db, out, host=fake_ollama.url)
    finally:
        site.stop()
    (answer,) = read_jsonl(out / "run-1" / "answers.jsonl")
    assert answer["method_used"] == "bm25"  # it did fall back ...
    assert done.returncode == 1, (done.stdout, done.stderr)
    (line,) = lines(done.stderr)
    assert line.startswith("Run 1 partial") and "degraded: embedding selection failed for 1 of 1 questions" in line
    assert the_run(db)["status"] == "partial"


def test_sigterm_while_checking_ollama_is_recorded_and_exits_130(tmp_path: Path, fake_ollama: FakeOllama) -> None:
    """Between the crawl and the first question no handler is installed: SIGTERM kills with 143, silently,
    and the row stays 'killed (crawling)' although the crawl had finished."""
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    site = site_with_pages()
    try:
        job = job_file(tmp_path / "job.yaml", "daily", [site.url(0, "/widget.html")], ["port"])
        for path in ("/api/tags", "/api/show", "/api/version"):
            fake_ollama.script(path, Slow(15.0))
        env = {**os.environ, "OLLAMA_HOST": fake_ollama.url}
        proc = subprocess.Popen([*WEBQA, "-q", "run", str(job), "--db", str(db), "--out", str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(r.path in ("/api/tags", "/api/show", "/api/version")
                                                      for r in fake_ollama.requests):
            time.sleep(0.1)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        site.stop()
    assert proc.returncode == 130, (proc.returncode, stderr)
    (line,) = lines(stderr)
    assert line.startswith("Interrupted: SIGTERM") and stdout == "", (stdout, stderr)
    record = the_run(db)
    assert (record["status"], record["exit_code"], record["resumable"]) == ("interrupted", 130, True)


def test_webqa_crawl_names_each_failed_url_and_why_under_quiet(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    site = site_with_pages()
    try:
        site.add(0, "/e500.html", "<html><body>oops</body></html>", status=500)
        good, bad = site.url(0, "/widget.html"), site.url(0, "/e500.html")
        done = webqa("-q", "crawl", good, bad, "--db", db, "--delay", "0")
        blocked = subprocess.run([*WEBQA, "-q", "crawl", good, "--db", str(tmp_path / "b.duckdb")],
                                 capture_output=True, text=True, timeout=120,
                                 env={k: v for k, v in os.environ.items() if k != "WEBQA_ALLOW_PRIVATE_NETWORKS"})
    finally:
        site.stop()
    assert done.returncode == 1, done.stderr
    (line,) = lines(done.stderr)
    assert line.startswith("Crawled in") and "failed 1;" in line
    assert line.endswith(f"; 1 URLs could not be fetched: {bad} (HTTP 500)")
    assert blocked.returncode == 3, blocked.stderr
    assert any("crawl.allow_private_networks: true" in line for line in lines(blocked.stderr)), blocked.stderr


def test_a_listed_page_that_is_gone_is_named_under_quiet(tmp_path: Path, llm: FakeOllama) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    site = site_with_pages()
    try:
        urls = [site.url(0, p) for p in ("/widget.html", "/lighthouse.html")]
        job = job_file(tmp_path / "job.yaml", "daily", urls, ["port", "steps"])
        assert run(job, db, out, host=llm.url).returncode == 0
        site.add(0, "/widget.html", "<html><body>Not found</body></html>", status=404)
        second = run(job, db, out, host=llm.url)
        asked = webqa("ask", QUESTIONS["steps"][0], "--db", db, "--dry-run", "--json", "--method", "bm25",
                      "--job", "daily")
        site.add(0, "/lighthouse.html", "<html><body>Not found</body></html>", status=410)
        third = run(job, db, out, host=llm.url)
    finally:
        site.stop()
    # A removed page is a page change (`webqa diff`), not an outage: silent under -q, named in the report and
    # the run's notes, and no longer answered from.
    assert second.returncode == 0 and second.stdout == second.stderr == "", second.stderr
    notice = f"1 pages of the job are gone from the site or refused now, no longer answered from: {urls[0]} (HTTP 404)"
    assert the_run(db, 2)["notes"] == notice
    assert f"- notice: {notice}" in (run_folder(out, 2) / "report.md").read_text(encoding="utf-8")
    port = {r["question_id"]: r for r in read_jsonl(run_folder(out, 2) / "answers.jsonl")}["port"]
    assert all(s["url"] != urls[0] for s in port["sources"])
    # `webqa ask --job` leaves the gone page out as the run did, and names it as the run did.
    assert asked.returncode == 0, asked.stderr
    assert lines(asked.stderr) == [f"Notice: {notice}"]
    assert {s["url"] for s in json.loads(asked.stdout)["sources"]} == {urls[1]}
    assert third.returncode == 3
    assert lines(third.stderr)[-1] == ("Error: every page of job daily answered 404 or 410: they are gone from "
                                       "the site; update the job's URLs")


def test_runs_on_a_file_that_is_not_a_webqa_database_is_one_line(tmp_path: Path) -> None:
    import duckdb

    db = tmp_path / "other.duckdb"
    duckdb.connect(str(db)).close()
    for command in (["runs"], ["diff"], ["explain", "1"]):
        done = webqa(*command, "--db", db)
        assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr
        assert lines(done.stderr) == [f"Error: {db}: no runs are recorded in this database (no `runs` table: not a "
                                      "webqa database, or its first command was stopped while creating it); run "
                                      "`webqa run` first"]
