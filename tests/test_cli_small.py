"""The small things a cron user trips over: --version, options after the command, --db as a folder,
what `ask` says without Ollama, notices a job does not need, and what a timed-out --wait says."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
from pathlib import Path

import pytest

from jobs.cli import build_parser
from jobs.config import parse_job
from jobs.errors import ConfigError
from jobs.lock import RunLock
from tests.fake_ollama import FakeOllama
from tests.site_server import SiteServer
from tests.support.run import (  # noqa: F401 - fixtures are used by name
    ALL,
    QUESTIONS,
    crawled,
    db,
    free_port,
    job_yaml,
    lines,
    run_job,
    webqa,
    write_job,
)

PORT_Q = QUESTIONS["port"][0]


def down_host() -> str:
    """An Ollama address where nothing listens: every connection is refused."""
    return f"http://127.0.0.1:{free_port()}"


# --------------------------------------------------------------------------------------------
# 1. --version


def test_version_prints_the_installed_version() -> None:
    done = webqa("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"webqa {importlib.metadata.version('webqa')}\n"
    assert re.fullmatch(r"webqa \d+\.\d+\.\d+\n", done.stdout)


# --------------------------------------------------------------------------------------------
# 2. Global options after the subcommand


@pytest.mark.parametrize("argv", [["runs", "-q"], ["-q", "runs"], ["runs", "--quiet"]])
def test_quiet_is_accepted_before_and_after_the_command(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).quiet is True


def test_options_after_the_command_do_not_reset_those_before_it() -> None:
    args = build_parser().parse_args(["-v", "--log-file", "a.log", "crawl", "http://example.org/"])
    assert args.verbose is True and args.log_file == Path("a.log") and args.quiet is False
    args = build_parser().parse_args(["crawl", "http://example.org/", "-v", "--log-file", "b.log"])
    assert args.verbose is True and args.log_file == Path("b.log")
    args = build_parser().parse_args(["runs"])
    assert args.verbose is False and args.quiet is False and args.log_file is None


def test_log_file_and_quiet_after_the_command_work(tmp_path: Path) -> None:
    # A bad line in the URL file is an info line ("Skipped …"): -q hides it, the log file keeps it.
    with SiteServer(hosts=("127.0.0.1",)) as site:
        site.add(0, "/a.html", body="<html><body><main><h1>A</h1><p>" + "Plain words here. " * 40 + "</p></main></body></html>")
        urls = tmp_path / "urls.txt"
        urls.write_text(f"{site.url(0, '/a.html')}\nnot a url at all\n", encoding="utf-8")
        log = tmp_path / "crawl.log"
        loud = webqa("crawl", "-i", urls, "--db", tmp_path / "loud.duckdb", "--delay", "0", cwd=tmp_path)
        quiet = webqa("crawl", "-i", urls, "--db", tmp_path / "quiet.duckdb", "--delay", "0", "-q",
                      "--log-file", log, cwd=tmp_path)
    assert loud.returncode == quiet.returncode == 0, loud.stderr + quiet.stderr
    assert "Skipped" in loud.stderr
    assert "Skipped" not in quiet.stderr
    logged = log.read_text(encoding="utf-8")
    assert "Skipped" in logged and "fetched 1" in logged and "exit 0" in logged


# --------------------------------------------------------------------------------------------
# 4. `ask` without Ollama points at the extractive answerer


def test_ask_without_ollama_answers_extractively_like_run(db: Path) -> None:
    for method in ("bm25", "hybrid"):
        done = webqa("ask", PORT_Q, "--db", db, "--method", method, host=down_host())
        assert done.returncode == 1, done.stderr  # degraded, as `webqa run` exits
        (line,) = lines(done.stderr)  # one Notice line, bm25's included
        also = "" if method == "bm25" else " and selected with bm25 instead of hybrid"
        assert line.startswith("Notice: Ollama is not reachable") and line.endswith(
            f"answered extractively (quoting the best sentences) instead{also}"), line
        assert "8731" in done.stdout and "Confidence: medium; grounded: yes" in done.stdout
    quiet = webqa("-q", "ask", PORT_Q, "--db", db, "--method", "bm25", "--json", host=down_host())
    assert quiet.returncode == 1 and json.loads(quiet.stdout)["answerer"] == "extractive"
    assert lines(quiet.stderr)[0].startswith("Notice: Ollama is not reachable")


# --------------------------------------------------------------------------------------------
# 5. --db pointing at a folder


DB_COMMANDS = {
    "crawl": ["crawl", "http://127.0.0.1:9/"],
    "run": ["run", "job.yaml"],
    "ask": ["ask", "a question"],
    "eval": ["eval", "job.yaml"],
    "runs": ["runs"],
    "diff": ["diff"],
    "explain": ["explain", "1"],
    "reindex": ["reindex"],
}


def test_every_command_with_db_is_listed() -> None:
    parser = build_parser()
    (action,) = [a for a in parser._actions if a.dest == "command"]
    with_db = {name for name, sub in action.choices.items() if any(a.dest == "db" for a in sub._actions)}
    assert with_db == set(DB_COMMANDS)


@pytest.mark.parametrize("command", sorted(DB_COMMANDS))
def test_db_that_is_a_folder_is_a_usage_error(command: str, tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    write_job(tmp_path, job_yaml(["port"]))
    done = webqa(*DB_COMMANDS[command], "--db", folder, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = lines(done.stderr)
    assert line == f"Error: --db {folder}: is a folder; pass a file path such as {folder / 'webqa.duckdb'}"
    assert list(folder.iterdir()) == []  # nothing (lock file, database) was created inside it


# The commands that only read the database say the same line for a missing one, and create nothing.
MISSING_DB_COMMANDS = {
    "run": ["run", "job.yaml", "--no-crawl"],
    "ask": ["ask", "a question", "--method", "bm25", "--dry-run"],
    "eval": ["eval", "job.yaml", "--method", "bm25"],
    "runs": ["runs"],
    "diff": ["diff"],
    "explain": ["explain", "1"],
    "reindex": ["reindex"],
}


def test_every_command_that_reads_the_database_is_listed() -> None:
    assert set(MISSING_DB_COMMANDS) == set(DB_COMMANDS) - {"crawl"}


@pytest.mark.parametrize("command", sorted(MISSING_DB_COMMANDS))
def test_missing_database_is_one_line_worded_once(command: str, tmp_path: Path) -> None:
    from jobs.errors import NoSuchDatabase

    missing = tmp_path / "missing.duckdb"
    write_job(tmp_path, job_yaml([{"id": "port", "question": PORT_Q, "expect": ["8731"]}]))
    done = webqa(*MISSING_DB_COMMANDS[command], "--db", missing, cwd=tmp_path, host=down_host())
    assert done.returncode == 3, done.stderr
    assert lines(done.stderr) == [f"Error: {NoSuchDatabase(missing)}"]
    assert "no such database; run `webqa crawl URL… --db" in done.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "job.yaml"]  # no database, no lock file


# --------------------------------------------------------------------------------------------
# 6. A misspelt required key


def config_error(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_job(text, "job.yaml")
    return str(info.value)


def test_misspelt_required_key_gets_did_you_mean_first() -> None:
    text = "name: j\nurls: [https://example.org/]\nquestons:\n  - What?\n"
    assert config_error(text) == "job.yaml:3: questons: unknown key; did you mean 'questions'?"


def test_misspelt_required_key_inside_a_question() -> None:
    text = "name: j\nquestions:\n  - id: a\n    questoin: What?\n"
    assert config_error(text) == "job.yaml:4: questions[0].questoin: unknown key; did you mean 'question'?"


def test_unrelated_unknown_key_leaves_the_missing_key_first() -> None:
    text = "name: j\nurls: [https://example.org/]\nqueries: [what]\n"
    assert config_error(text) == ("job.yaml:1: questions: required key is missing; add a 'questions:' list with at "
                                  "least one question (and 1 more problem)")


def test_misspelt_required_key_through_the_cli(tmp_path: Path) -> None:
    job = write_job(tmp_path, "name: j\nurls: [https://example.org/]\nquestons:\n  - What?\n")
    done = webqa("run", job, "--db", tmp_path / "x.duckdb", cwd=tmp_path)
    assert done.returncode == 2
    assert lines(done.stderr) == [f"Error: {job}:3: questons: unknown key; did you mean 'questions'?"]


# --------------------------------------------------------------------------------------------
# 7. No Ollama notice (and no Ollama request) for jobs that never use Ollama


@pytest.mark.parametrize("method", ["bm25", "keyword"])
def test_extractive_job_says_nothing_about_ollama(tmp_path: Path, db: Path, method: str) -> None:
    job = write_job(tmp_path, job_yaml(ALL, method=method, extra="answerer: extractive\n"))
    done = run_job(tmp_path, job, db, host=down_host())
    assert done.returncode == 0, done.stderr
    assert "Ollama" not in done.stderr and "Notice" not in done.stderr


@pytest.mark.parametrize("method", ["bm25", "keyword"])
def test_answerer_extractive_option_never_contacts_ollama(tmp_path: Path, db: Path, method: str,
                                                         fake_ollama: FakeOllama) -> None:
    job = write_job(tmp_path, job_yaml(ALL, method=method))
    done = run_job(tmp_path, job, db, "--answerer", "extractive", host=fake_ollama.url)
    assert done.returncode == 0, done.stderr
    assert "Notice" not in done.stderr and fake_ollama.requests == []
    down = run_job(tmp_path, job, db, "--answerer", "extractive", host=down_host())
    assert down.returncode == 0 and "Ollama" not in down.stderr, down.stderr


def test_ask_extractive_never_contacts_ollama(db: Path, fake_ollama: FakeOllama) -> None:
    done = webqa("ask", PORT_Q, "--db", db, "--method", "bm25", "--answerer", "extractive", host=fake_ollama.url)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and fake_ollama.requests == []


def test_an_llm_job_still_notices_that_ollama_is_down(tmp_path: Path, db: Path) -> None:
    job = write_job(tmp_path, job_yaml(ALL, method="bm25"))
    done = run_job(tmp_path, job, db, host=down_host())
    assert "Notice: Ollama is not reachable" in done.stderr


# --------------------------------------------------------------------------------------------
# 8. A timed-out --wait


def test_wait_that_times_out_names_the_holder_and_does_not_suggest_wait(tmp_path: Path, db: Path) -> None:
    job = write_job(tmp_path, job_yaml(["port"], extra="answerer: extractive\n"))
    with RunLock(db):
        done = run_job(tmp_path, job, db, "--wait", "0.3", host=down_host())
    assert done.returncode == 4
    (line,) = lines(done.stderr)
    pid = os.getpid()
    assert f"still locked by PID {pid} after waiting 0.3s" in line
    assert "--wait" not in line and f"check that process (ps -p {pid})" in line


def test_lock_without_wait_still_suggests_wait(tmp_path: Path, db: Path) -> None:
    job = write_job(tmp_path, job_yaml(["port"], extra="answerer: extractive\n"))
    with RunLock(db):
        done = run_job(tmp_path, job, db, host=down_host())
    assert done.returncode == 4
    (line,) = lines(done.stderr)
    assert "--wait SECONDS" in line
