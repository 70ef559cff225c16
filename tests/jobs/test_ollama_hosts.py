"""Several Ollama hosts (`ollama.hosts`): questions spread within each host's limit, a failing host taken
out and its question answered elsewhere, hosts checked at start-up, and the job file's errors.

Two fake Ollama servers listen on 127.0.0.1 and 127.0.0.2; `webqa run` is a subprocess using the real
`ollama` client, as cron runs it. The pool's failure rules are also checked in-process against the fakes.
"""

from __future__ import annotations

import itertools
import re
import socket
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from jobs.errors import LLMUnavailableError
from jobs.hosts import HostPool
from jobs.llm import LLMReplyError, OllamaClient, OllamaSettings
from jobs.prompt import ANSWER_SCHEMA
from tests.support.fake_ollama import Fail, FakeOllama, Garbage, Huge, Slow, StreamError, Trickle
from tests.support.run import (  # noqa: F401 - crawled and db are fixtures, used by name
    ALL, QUESTIONS, crawled, db, job_yaml, lines, quoting_responder, read_jsonl, rows, run_dir, run_job, webqa,
    write_job)


@pytest.fixture
def two_hosts() -> Iterator[tuple[FakeOllama, FakeOllama]]:
    """Two fakes answering like a careful model, on two loopback addresses."""
    with FakeOllama() as first, FakeOllama(host="127.0.0.2") as second:
        for fake in (first, second):
            fake.chat_responder = quoting_responder
        yield first, second


def hosts_job(tmp_path: Path, hosts: str, *, parallel: int = 1, extra: str = "", questions: list[Any] = ALL) -> Path:
    text = job_yaml(questions, parallel=parallel, extra=extra).replace("ollama:\n", f"ollama:\n  hosts: {hosts}\n")
    return write_job(tmp_path, text)


def free_port_on(address: str) -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def notices(stderr: str) -> list[str]:
    return [line for line in lines(stderr) if line.startswith("Notice:")]


def quiet_run(tmp_path: Path, job: Path, db: Path) -> tuple[Any, str]:
    """`webqa -q run` as cron runs it, and what its --log-file got (without the stamps): under -q a run
    that exits 0 prints nothing, so its summary and notices are read from the log."""
    log = tmp_path / "webqa.log"
    done = run_job(tmp_path, job, db, "-q", "--log-file", log, host=None)
    logged = "\n".join(line.split("] ", 1)[1] for line in log.read_text(encoding="utf-8").splitlines())
    return done, logged


def summary_of(logged: str) -> str:
    (line,) = [line for line in lines(logged) if line.startswith("Run ")]
    return line


# --------------------------------------------------------------------------------------------
# Spread over the hosts, within each host's limit


def test_questions_are_spread_within_each_hosts_parallel_limit(
        tmp_path: Path, db: Path, two_hosts: tuple[FakeOllama, FakeOllama]) -> None:
    first, second = two_hosts
    for fake in two_hosts:
        fake.chunk_delay_s = 0.03  # replies take a while, so requests overlap
    # The first host takes ollama.parallel (2); the second its own limit (1).
    job = hosts_job(tmp_path, f"[{first.url}, {{url: '{second.url}', parallel: 1}}]", parallel=2)
    done, logged = quiet_run(tmp_path, job, db)

    assert done.returncode == 0, done.stderr
    assert done.stdout == done.stderr == ""  # -q: nothing when all is well
    assert re.fullmatch(r"Run \d+ done: 5/5 answered \(5 grounded, 0 not enough information\), 0 failed; "
                        r"first run of the job", summary_of(logged)), logged
    assert not [line for line in lines(logged) if line.startswith(("Notice", "WARNING", "Error"))], logged
    assert first.peak_active("/api/chat") == 2 and second.peak_active("/api/chat") == 1
    chats = {fake.url: len(fake.requests_to("/api/chat")) for fake in two_hosts}
    assert all(n >= 1 for n in chats.values()) and sum(chats.values()) == 5  # each question sent once

    results = read_jsonl(run_dir(tmp_path) / "answers.jsonl")
    by_host = {url: sum(1 for r in results if r["host"] == url) for url in chats}
    assert by_host == chats  # each answer names the server that gave it
    stored = rows(db, "SELECT question_id, host FROM answers WHERE final ORDER BY question_id")
    assert {r["question_id"]: r["host"] for r in stored} == {r["question_id"]: r["host"] for r in results}
    report = (run_dir(tmp_path) / "report.md").read_text(encoding="utf-8")
    assert f"Ollama hosts: {first.url} answered {chats[first.url]}, {second.url} answered {chats[second.url]}" in report
    assert f"answerer: llm on {second.url}" in report
    answer_id = next(r["answer_id"] for r in results if r["host"] == second.url)
    explained = webqa("explain", answer_id, "--db", db)
    assert explained.returncode == 0 and f"host: {second.url}" in explained.stdout


# --------------------------------------------------------------------------------------------
# The acceptance test: a host dies mid-run, every question is answered


def test_a_host_that_dies_mid_run_is_taken_out_and_every_question_answered(
        tmp_path: Path, db: Path, two_hosts: tuple[FakeOllama, FakeOllama]) -> None:
    first, second = two_hosts
    dead = second.url  # known only while it runs
    first.chunk_delay_s = 0.02  # the first host is slower, so the second is asked again before the end
    calls = itertools.count(1)

    def dies_on_its_second_question(body: Mapping[str, Any]) -> Any:
        if next(calls) == 1:
            return quoting_responder(body)
        threading.Thread(target=second.stop).start()  # the server goes away with this request in hand
        return Slow(30)

    second.chat_responder = dies_on_its_second_question
    job = hosts_job(tmp_path, f"[{first.url}, {dead}]")
    done, logged = quiet_run(tmp_path, job, db)

    assert done.returncode == 0 and done.stdout == done.stderr == "", done.stderr  # capacity lost, not work
    summary = summary_of(logged)
    assert re.fullmatch(rf"Run \d+ done: 5/5 answered \(5 grounded, 0 not enough information\), 0 failed; "
                        rf"first run of the job; Ollama host lost: {re.escape(dead)} \(taken out\)", summary), summary
    (notice,) = notices(logged)  # the notice alone, no retry warnings
    assert notice.startswith(f"Notice: Ollama host {dead} taken out for the rest of the run: ")
    assert "its questions went to the other hosts" in notice
    assert "Traceback" not in done.stderr

    results = read_jsonl(run_dir(tmp_path) / "answers.jsonl")
    assert sorted(r["question_id"] for r in results) == sorted(ALL)  # in the order they were answered
    assert all(r["error"] is None and r["answerer"] == "llm" and r["grounded"] for r in results)
    assert all(QUESTIONS[r["question_id"]][1] in r["answer"] for r in results)
    assert sorted(r["host"] for r in results) == sorted([dead] + [first.url] * 4)
    # The question in hand when the second host died was asked again on the first, once.
    assert len(first.requests_to("/api/chat")) == 4
    (run,) = rows(db, "SELECT status, exit_code, notes FROM runs")
    assert (run["status"], run["exit_code"]) == ("done", 0) and dead in run["notes"]
    assert rows(db, "SELECT count(*) AS n FROM answers WHERE error IS NOT NULL")[0]["n"] == 0
    report = (run_dir(tmp_path) / "report.md").read_text(encoding="utf-8")
    assert f"{dead} answered 1 (taken out during the run)" in report
    assert f"notice: Ollama host {dead} taken out" in report


def test_when_every_host_dies_mid_run_the_rest_is_answered_without_the_llm(
        tmp_path: Path, db: Path, two_hosts: tuple[FakeOllama, FakeOllama]) -> None:
    urls = [fake.url for fake in two_hosts]

    def answers_once_then_dies(fake: FakeOllama) -> Any:
        calls = itertools.count(1)

        def responder(body: Mapping[str, Any]) -> Any:
            if next(calls) == 1:
                return quoting_responder(body)
            threading.Thread(target=fake.stop).start()
            return Slow(30)
        return responder

    for fake in two_hosts:
        fake.chat_responder = answers_once_then_dies(fake)
    done, logged = quiet_run(tmp_path, hosts_job(tmp_path, f"[{', '.join(urls)}]"), db)

    # Two questions were in hand when the last host went: both are answered extractively, none fails.
    assert done.returncode == 1, done.stderr
    (line,) = lines(done.stderr)  # -q: the one line naming what happened
    assert re.match(r"Run \d+ partial: 5/5 answered .*, 0 failed", line) and "every Ollama host was taken out" in line
    said = notices(logged)
    assert len(said) == 3 and all(any(url in line for line in said[:2]) for url in urls), done.stderr
    assert said[2].startswith("Notice: every Ollama host was taken out (") and "answered the remaining" in said[2]
    answers = rows(db, "SELECT answerer, host, error FROM answers WHERE final")
    assert sorted((a["answerer"], a["host"]) for a in answers) == sorted(
        [("llm", urls[0]), ("llm", urls[1])] + [("extractive", None)] * 3)
    assert all(a["error"] is None for a in answers)
    (run,) = rows(db, "SELECT status, exit_code, reason FROM runs")
    assert (run["status"], run["exit_code"]) == ("partial", 1) and "every Ollama host was taken out" in run["reason"]


# --------------------------------------------------------------------------------------------
# Start-up: each host is checked


def test_a_host_without_the_model_is_left_out_at_start(
        tmp_path: Path, db: Path, two_hosts: tuple[FakeOllama, FakeOllama]) -> None:
    first, second = two_hosts
    second.models = {"nomic-embed-text"}
    done, logged = quiet_run(tmp_path, hosts_job(tmp_path, f"[{first.url}, {second.url}]"), db)

    assert done.returncode == 0 and done.stdout == done.stderr == "", done.stderr
    (notice,) = notices(logged)
    assert notice == (f"Notice: Ollama host {second.url} left out of this run: model llama3.2:3b is not available "
                      f"on {second.url}; run `ollama pull llama3.2:3b`")
    summary = summary_of(logged)
    assert summary.endswith(f"0 failed; first run of the job; Ollama host lost: {second.url} (left out at start)")
    assert second.requests_to("/api/chat") == [] and len(first.requests_to("/api/chat")) == 5
    assert {r["host"] for r in read_jsonl(run_dir(tmp_path) / "answers.jsonl")} == {first.url}


def test_every_host_down_behaves_as_one_ollama_down(tmp_path: Path, db: Path) -> None:
    down = [f"http://127.0.0.1:{free_port_on('127.0.0.1')}", f"http://127.0.0.2:{free_port_on('127.0.0.2')}"]
    done, logged = quiet_run(tmp_path, hosts_job(tmp_path, f"[{', '.join(down)}]"), db)

    # As with one server down: answered extractively, degraded, exit 1; one notice naming every host.
    assert done.returncode == 1, done.stderr
    (line,) = lines(done.stderr)
    assert line.startswith("Run ") and "degraded: " in line and all(url in line for url in down)
    (notice,) = notices(logged)
    assert all(url in notice for url in down) and "answered extractively" in notice
    answers = rows(db, "SELECT answerer, host FROM answers WHERE final")
    assert len(answers) == 5 and {(a["answerer"], a["host"]) for a in answers} == {("extractive", None)}
    (run,) = rows(db, "SELECT status, exit_code, reason FROM runs")
    assert (run["status"], run["exit_code"]) == ("partial", 1) and run["reason"].startswith("degraded: ")


def test_every_host_down_without_fallback_is_one_error_line(tmp_path: Path, db: Path) -> None:
    down = [f"http://127.0.0.1:{free_port_on('127.0.0.1')}", f"http://127.0.0.2:{free_port_on('127.0.0.2')}"]
    done = run_job(tmp_path, hosts_job(tmp_path, f"[{', '.join(down)}]", extra="fallback_extractive: false\n"), db,
                   "-q", host=None)

    assert done.returncode == 3
    (line,) = lines(done.stderr)
    assert line.startswith("Error: no Ollama host is reachable: ") and all(url in line for url in down)
    assert rows(db, "SELECT * FROM answers") == []


# --------------------------------------------------------------------------------------------
# The job file


@pytest.mark.parametrize(("ollama", "expected"), [
    ("  host: http://127.0.0.1:1\n  hosts: [http://127.0.0.2:1]\n",
     r"job\.yaml:\d+: ollama\.hosts: give either ollama\.host \(one server\) or ollama\.hosts \(several\), not both"),
    ("  hosts: [http://127.0.0.1:1, 'ftp://127.0.0.2']\n",
     r"job\.yaml:\d+: ollama\.hosts\[1\]: expected a URL like 'http://localhost:11434', got 'ftp://127\.0\.0\.2'"),
    ("  hosts:\n    - http://127.0.0.1:1\n    - {url: 'http://127.0.0.2:1', parallel: 0}\n",
     r"job\.yaml:\d+: ollama\.hosts\[1\]\.parallel: expected a whole number ≥ 1, got 0"),
])
def test_a_bad_hosts_key_is_one_error_line(tmp_path: Path, db: Path, ollama: str, expected: str) -> None:
    job = write_job(tmp_path, job_yaml(["port"]).replace("ollama:\n", f"ollama:\n{ollama}"))
    done = run_job(tmp_path, job, db, "-q", host=None)

    assert done.returncode == 2
    (line,) = lines(done.stderr)
    assert re.match(rf"Error: .*{expected}", line), line
    assert done.stdout == ""


# --------------------------------------------------------------------------------------------
# The pool's rules, in-process against the fakes


def pool_of(*fakes: FakeOllama, reply_timeout: float = 30.0) -> HostPool:
    return HostPool([(OllamaClient(OllamaSettings(host=f.url, max_attempts=2, backoff_s=0.01, timeout_s=5,
                                                  reply_timeout_s=reply_timeout)), 1) for f in fakes])


@pytest.mark.parametrize(("failure", "why"), [
    ((StreamError("llama runner process has terminated"),) * 2, "error in response stream"),
    ((Fail(500),) * 2, "HTTP 500"),
    ((Trickle(0.05),), "no complete reply within 0.5 s"),
])
def test_a_failing_host_is_taken_out_and_the_request_answered_by_another(
        two_hosts: tuple[FakeOllama, FakeOllama], failure: tuple[Any, ...], why: str) -> None:
    first, second = two_hosts
    first.script_chat(*failure)
    with pool_of(first, second, reply_timeout=0.5) as pool:
        result = pool.chat_json("Sources: none\nQuestion: When are the tomatoes watered?", ANSWER_SCHEMA)
        again = pool.chat_json("Sources: none\nQuestion: When are the tomatoes watered?", ANSWER_SCHEMA)

    assert result.host == second.url and result.valid_json
    ((url, reason),) = pool.lost()
    assert url == first.url and why in reason
    assert again.host == second.url  # out for the rest of the run
    assert len(first.requests_to("/api/chat")) == len(failure) and pool.capacity == 1


def test_a_bad_reply_is_asked_again_elsewhere_and_strikes_its_host(two_hosts: tuple[FakeOllama, FakeOllama]) -> None:
    first, second = two_hosts
    first.script_chat(Huge(200_000), Huge(200_000))
    question = "Sources: none\nQuestion: When are the tomatoes watered?"
    with pool_of(first, second) as pool:
        once = pool.chat_json(question, ANSWER_SCHEMA)
        assert once.host == second.url and pool.lost() == [] and pool.capacity == 2  # one strike: still in
        twice = pool.chat_json(question, ANSWER_SCHEMA)
    assert twice.host == second.url
    ((url, reason),) = pool.lost()
    assert url == first.url and reason.startswith("2 replies in a row could not be used") and "reply longer than" in reason
    assert len(first.requests_to("/api/chat")) == 2 and pool.answered() == {first.url: 0, second.url: 2}


def test_a_good_reply_clears_a_hosts_strikes(two_hosts: tuple[FakeOllama, FakeOllama]) -> None:
    first, second = two_hosts
    first.script_chat(Huge(200_000), {"answer": "Not enough information", "citations": [], "confidence": "low"},
                      Huge(200_000))
    question = "Sources: none\nQuestion: When are the tomatoes watered?"
    with pool_of(first, second) as pool:
        hosts = [pool.chat_json(question, ANSWER_SCHEMA).host for _ in range(3)]
    assert hosts == [second.url, first.url, second.url] and pool.lost() == []


def test_a_bad_reply_from_every_host_is_the_callers_and_strikes_nobody(two_hosts: tuple[FakeOllama, FakeOllama]) -> None:
    first, second = two_hosts
    for fake in two_hosts:
        fake.script_chat(Huge(200_000), Huge(200_000))
    question = "Sources: none\nQuestion: When are the tomatoes watered?"
    with pool_of(first, second) as pool:
        for _ in range(2):
            with pytest.raises(LLMReplyError, match="reply longer than") as caught:
                pool.chat_json(question, ANSWER_SCHEMA)
            assert caught.value.host in (first.url, second.url)
    assert pool.lost() == [] and pool.capacity == 2


def test_every_host_out_raises_the_no_llm_error(two_hosts: tuple[FakeOllama, FakeOllama]) -> None:
    first, second = two_hosts
    for fake in two_hosts:
        fake.script_chat(Fail(503), Fail(503))
    with pool_of(first, second) as pool, pytest.raises(LLMUnavailableError, match="every Ollama host was taken out"):
        pool.chat_json("Sources: none\nQuestion: When are the tomatoes watered?", ANSWER_SCHEMA)
    assert [url for url, _ in pool.lost()] == [first.url, second.url]


# --------------------------------------------------------------------------------------------
# A host is judged by its answers: one that answers fast but uselessly is taken out like a dead one


BROKEN_REPLIES: dict[str, Any] = {
    "too long": lambda _body: Huge(200_000),
    "not JSON": lambda _body: Garbage("Sure! The answer is below, in prose rather than JSON."),
    "wrong schema": lambda _body: {"result": "port 8731", "sources": "the manual"},
}


@pytest.mark.parametrize("broken_first", [True, False], ids=["broken-first", "broken-last"])
@pytest.mark.parametrize("kind", [*BROKEN_REPLIES, "wrong model"])
def test_a_host_whose_replies_cannot_be_used_is_taken_out_and_every_question_answered(
        tmp_path: Path, db: Path, two_hosts: tuple[FakeOllama, FakeOllama], kind: str, broken_first: bool) -> None:
    healthy, broken = two_hosts
    healthy.chunk_delay_s = 0.02  # the broken host is the fast one: free first, it would take every question
    if kind == "wrong model":
        broken.reply_model = "tinyllama:1b"
    else:
        broken.chat_responder = BROKEN_REPLIES[kind]
    order = [broken.url, healthy.url] if broken_first else [healthy.url, broken.url]
    done, logged = quiet_run(tmp_path, hosts_job(tmp_path, f"[{', '.join(order)}]"), db)
    assert done.returncode == 0 and done.stdout == done.stderr == "", done.stderr
    summary = summary_of(logged)
    assert re.fullmatch(rf"Run \d+ done: 5/5 answered \(5 grounded, 0 not enough information\), 0 failed; "
                        rf"first run of the job; Ollama host lost: {re.escape(broken.url)} \(taken out\)", summary), \
        summary
    (notice,) = notices(logged)
    assert notice.startswith(f"Notice: Ollama host {broken.url} taken out for the rest of the run: 2 replies in a row "
                             "could not be used"), notice
    # Each bad reply was asked again of the healthy host; the broken one got its two strikes and at most the one
    # question it took while the second was being asked again (a non-JSON reply is asked twice on one host).
    assert len(broken.requests_to("/api/chat")) <= 3 * (2 if kind == "not JSON" else 1)
    assert len(healthy.requests_to("/api/chat")) == 5
    results = read_jsonl(run_dir(tmp_path) / "answers.jsonl")
    assert {r["host"] for r in results} == {healthy.url} and all(r["grounded"] for r in results)
    report = (run_dir(tmp_path) / "report.md").read_text(encoding="utf-8")
    assert report.count(f"answerer: llm on {healthy.url}") == 5
    assert f"{broken.url} answered 0 (taken out during the run)" in report


def test_a_reply_no_host_can_give_fails_the_question_naming_its_host(
        tmp_path: Path, db: Path, two_hosts: tuple[FakeOllama, FakeOllama]) -> None:
    # Every host loops on every prompt: the prompt's fault, not a host's. Nobody is taken out, each question
    # is asked of both hosts once and fails with the last reply's reason and host, in every output.
    for fake in two_hosts:
        fake.chat_responder = BROKEN_REPLIES["too long"]
    urls = [fake.url for fake in two_hosts]
    done = run_job(tmp_path, hosts_job(tmp_path, f"[{', '.join(urls)}]", questions=["port", "steps"]), db, "-q",
                   host=None)

    assert done.returncode == 3, done.stderr
    assert "Ollama host lost" not in done.stdout + done.stderr and notices(done.stderr) == []
    assert [len(fake.requests_to("/api/chat")) for fake in two_hosts] == [2, 2]
    stored = rows(db, "SELECT question_id, host, error FROM answers WHERE final ORDER BY question_id")
    assert [r["question_id"] for r in stored] == ["port", "steps"]
    assert all(r["host"] in urls and r["error"].startswith("reply longer than") for r in stored)
    results = {r["question_id"]: r for r in read_jsonl(run_dir(tmp_path) / "answers.jsonl")}
    assert {q: r["host"] for q, r in results.items()} == {r["question_id"]: r["host"] for r in stored}
    report = (run_dir(tmp_path) / "report.md").read_text(encoding="utf-8")
    for r in stored:
        assert f"(Ollama host {r['host']})" in report


# --------------------------------------------------------------------------------------------
# OLLAMA_HOST with a password: refused in one line, and neither said nor stored with it


@pytest.mark.e2e
def test_an_ftp_ollama_host_is_stored_and_listed_without_its_password(tmp_path: Path, db: Path) -> None:
    job = write_job(tmp_path, job_yaml(["port"]))
    done = run_job(tmp_path, job, db, host="ftp://u:PASSWORD1@gpu1")
    assert done.returncode == 2, done.stderr
    (line,) = lines(done.stderr)
    assert line.startswith("Error: ") and "ftp://***@gpu1" in line, line
    listed = webqa("runs", "--json", "--db", db, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "must be an http:// or https:// URL" in listed.stdout  # the reason is there, without the password
    stored = rows(db, "SELECT * FROM runs")
    for text in (done.stdout, done.stderr, listed.stdout, str(stored)):
        assert "PASSWORD1" not in text, text


@pytest.mark.e2e
@pytest.mark.parametrize("host", ["u:PASSWORD1@gpu1:99999", "u:PASSWORD1@[::1", "http://u:PASSWORD1@gpu1:99999",
                                  # unencoded "#" and "@" in a password: where the parse fails, and what it shows
                                  "http://u:PASSWORD1#x@gpu1:11434", "http://u:p@PASSWORD1@gpu1:99999"])
@pytest.mark.parametrize("command", ["run", "ask"])
def test_an_ollama_host_the_client_cannot_parse_is_one_error_line(tmp_path: Path, db: Path, host: str,
                                                                  command: str) -> None:
    # ollama's module-level client parses OLLAMA_HOST at import: the variable is checked before.
    if command == "run":
        done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port"])), db, host=host)
    else:
        done = webqa("ask", "Which port does the dashboard server listen on?", "--db", db, host=host, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = lines(done.stderr)
    assert line.startswith("Error: OLLAMA_HOST ") and "not a valid URL" in line, line
    assert "PASSWORD1" not in done.stderr + done.stdout


@pytest.mark.parametrize(("host", "reason"), [("u:PASSWORD1@gpu1:99999", "Port out of range"),
                                            ("http://u:PASSWORD1@[::1", "Invalid IPv6 URL"),
                                            ("http://u:PASSWORD1#x@gpu1:11434", "must be percent-encoded")])
def test_an_unparsable_host_with_a_login_names_its_real_fault(monkeypatch: pytest.MonkeyPatch, host: str,
                                                              reason: str) -> None:
    # The login is hidden, and the reason is the host's own fault (a port, a bracket) unless the login is the fault.
    from jobs.errors import ConfigError
    from jobs.llm_defaults import check_env_host

    monkeypatch.setenv("OLLAMA_HOST", host)
    with pytest.raises(ConfigError) as raised:
        check_env_host()
    assert reason in str(raised.value) and "PASSWORD1" not in str(raised.value), raised.value


@pytest.mark.e2e
def test_an_ollama_host_with_blanks_around_it_is_read_without_them(tmp_path: Path, db: Path,
                                                                   fake_ollama: FakeOllama) -> None:
    # A cron line or an env file often leaves a trailing blank: webqa and the ollama client both read it stripped.
    host = " " + fake_ollama.url.removeprefix("http://") + " "
    done = run_job(tmp_path, write_job(tmp_path, job_yaml(["port"])), db, "-q", host=host)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
