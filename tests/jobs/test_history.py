"""Ready for cron: run history, answer and page changes, --fail-on-change, --resume, overlap, logs.

Everything runs through the real CLI in subprocesses, against the loopback test site and the fake
Ollama, as in tests/jobs/test_run.py. The scenario test crawls a site whose pages change between runs;
the others answer from a database crawled once per module.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from jobs.markdown_text import md_text
from tests.support.fake_ollama import FakeOllama, user_prompt
from tests.support.site_server import SiteServer
from tests.support.run import (  # noqa: F401 - crawled and db are fixtures, used by name
    ALL, GARDEN, LIGHTHOUSE, QUESTIONS, WEBQA, WIDGET, Crawled, crawled, db, lines, prompt_question,
    prompt_sources, quoting_responder, read_jsonl, rows, webqa,
)

pytestmark = pytest.mark.e2e  # every test here starts a child process (tests/support/e2e.py)

_SENTENCE_END = re.compile(r"(?<=[.;])\s+")

OLD = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Museum Opening Hours</title></head>
<body><main><article><h1>Museum Opening Hours</h1>
<p>The harbour museum opens from Wednesday to Sunday between ten in the morning and five in the afternoon. Entry is
free for members of the heritage society, and school classes are welcome on weekday mornings after booking.</p>
</article></main></body></html>"""

NEWS = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Harbour News</title></head>
<body><main><article><h1>Harbour News</h1>
<h2>Island ferry</h2>
<p>From June the island ferry leaves the harbour at nine every morning and returns at six in the evening. Tickets are
sold at the kiosk by the breakwater, and bicycles travel free of charge on every crossing of the summer season.</p>
</article></main></body></html>"""

# Run 2's versions: the port sentence now says 8740; the tomato sentence is gone.
WIDGET_2 = WIDGET.replace("listens on port 8731", "listens on port 8740")
GARDEN_2 = GARDEN.replace(
    "The tomatoes are watered every Tuesday at seven in the morning by the volunteer on duty.",
    "The volunteer on duty decides each morning which of the beds need water.")

# Question id → (question, a phrase of the sentence that answers it).
SCENARIO: dict[str, tuple[str, str]] = {
    "port": (QUESTIONS["port"][0], "listens on port"),
    "python": (QUESTIONS["python"][0], "Python 3.9"),
    "tomatoes": (QUESTIONS["tomatoes"][0], "every Tuesday"),
    "steps": (QUESTIONS["steps"][0], "212 steps"),
    "ferry": ("When does the island ferry leave the harbour?", "ferry leaves"),
}
NOT_ENOUGH = {"answer": "Not enough information", "citations": [], "confidence": "low"}


class Wording:
    """A fake model that quotes the sentence holding the fact; ``style`` changes only its wording."""

    def __init__(self) -> None:
        self.style = "plain"
        self.needles = {question: needle for question, needle in SCENARIO.values()}

    def __call__(self, body: Mapping[str, Any]) -> dict[str, Any]:
        prompt = user_prompt(body)
        needle = self.needles.get(prompt_question(prompt))
        for number, text in sorted(prompt_sources(prompt).items()):
            for sentence in _SENTENCE_END.split(text):
                if needle and needle in sentence:
                    answer = (f"{sentence} [{number}]" if self.style == "plain"
                              else f"Going by source {number}, the page says so in as many words.")
                    return {"answer": answer, "citations": [{"source": number, "quote": sentence}],
                            "confidence": "high"}
        return NOT_ENOUGH


def scenario_job(path: Path, urls: list[str], questions: list[str], extra: str = "") -> Path:
    text = (
        "name: harbour\n"
        "urls:\n" + "".join(f"  - {u}\n" for u in urls)
        + "crawl:\n  delay: 0\n  allow_private_networks: true\n" + extra
        + "questions:\n" + "".join(f"  - id: {q}\n    question: {json.dumps(SCENARIO[q][0])}\n" for q in questions)
        + "selection:\n  method: bm25\n  top_k: 2\n  token_budget: 1000\n"
        + "output:\n  formats: [jsonl, markdown]\n"
        + "ollama:\n  max_attempts: 2\n  timeout: 20\n"
    )
    path.write_text(text, encoding="utf-8")
    return path


def sections(markdown: str) -> dict[str, dict[str, list[str]]]:
    """Level-1 section title → {bold label → its lines} (the label line itself included)."""
    result: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    label = None
    for line in markdown.splitlines():
        if line.startswith("# "):
            current = result.setdefault(line[2:].strip(), {})
            label = None
        elif current is not None and line.startswith("**"):
            label = line[2:].split("**", 1)[0]
            current[label] = [line]
        elif current is not None and label is not None and line.strip():
            current[label].append(line)
    return result


def entries(block: list[str]) -> dict[str, str]:
    """'- **qid**: …' or '- <url> — …' items of a section, each with its indented lines."""
    items: dict[str, str] = {}
    key = None
    for line in block[1:]:
        match = re.match(r"- \*\*(.+?)\*\*|- <(.+?)>", line)
        if match:
            key = match.group(1) or match.group(2)
            items[key] = line
        elif key is not None:
            items[key] += "\n" + line
    return items


def finals(db: Path, run_id: int) -> dict[str, dict[str, Any]]:
    answers = rows(db, "SELECT * FROM answers WHERE run_id = ? AND final", [run_id])
    return {a["question_id"]: a for a in answers}


# --------------------------------------------------------------------------------------------
# Two runs over a changing site: the change report, diff, --fail-on-change, freshness, logs


def test_answer_and_page_changes_between_runs(tmp_path: Path, fake_ollama: FakeOllama) -> None:
    model = Wording()
    fake_ollama.chat_responder = model
    db, out = tmp_path / "webqa.duckdb", tmp_path / "out"
    with SiteServer() as site:
        site.add(0, "/widget.html", body=WIDGET)
        site.add(0, "/garden.html", body=GARDEN)
        site.add(1, "/lighthouse.html", body=LIGHTHOUSE)
        site.add(1, "/old.html", body=OLD)
        site.add(1, "/news.html", body="<html><body>Not found</body></html>", status=404)
        url = {name: site.url(host, f"/{name}.html") for name, host in
               (("widget", 0), ("garden", 0), ("lighthouse", 1), ("old", 1), ("news", 1))}
        job = scenario_job(tmp_path / "job.yaml", list(url.values()), ["port", "python", "tomatoes", "steps"])

        def run(*args: str | Path, options: tuple[str | Path, ...] = ()) -> subprocess.CompletedProcess[str]:
            return webqa(*options, "run", job, "--db", db, "--out", out, *args, host=fake_ollama.url, cwd=tmp_path)

        # Run 1: the first run of the job; every answer is new.
        first = run()
        # A listed URL that does not exist (yet) is a failed URL: a partial run, named on stderr.
        assert first.returncode == 1, first.stderr
        assert f"  {url['news']}: failed: HTTP 404" in lines(first.stderr)
        assert "Run 1 partial: 4/4 answered" in first.stdout and "first run of the job" in first.stdout
        assert "1 URLs could not be fetched" in first.stdout
        assert {r["change"] for r in read_jsonl(out / "run-1" / "answers.jsonl")} == {"new"}
        before = finals(db, 1)
        assert "8731" in before["port"]["answer"] and "every Tuesday" in before["tomatoes"]["answer"]

        # The site changes; the job gains a question; the model words its answers differently.
        site.set_body(0, "/widget.html", WIDGET_2)
        site.set_body(0, "/garden.html", GARDEN_2)
        site.add(1, "/old.html", body="<html><body>Gone</body></html>", status=404)
        site.add(1, "/news.html", body=NEWS)
        scenario_job(job, list(url.values()), ["port", "python", "tomatoes", "steps", "ferry"])
        model.style = "reworded"

        second = run("--fail-on-change")
        assert second.returncode == 5, second.stdout + second.stderr  # answers changed
        assert re.search(r"Run 2 done: 5/5 answered .*; since run 1: 1 changed \(port\), 1 new \(ferry\), "
                         r"1 no longer answered \(tomatoes\), 2 reworded \(python, steps\), 0 unchanged",
                         second.stdout), second.stdout

        # The answers: stored evidence and change, the same in the JSONL.
        after = finals(db, 2)
        expected = {"port": "changed", "python": "reworded", "tomatoes": "no_longer_answered", "steps": "reworded",
                    "ferry": "new"}
        assert {q: a["change"] for q, a in after.items()} == expected
        assert {r["question_id"]: r["change"] for r in read_jsonl(out / "run-2" / "answers.jsonl")} == expected
        # Reworded, same quote and verdict: reworded, which --fail-on-change alone does not count.
        assert after["python"]["answer"] != before["python"]["answer"]
        evidence = {run: json.loads(a["python"]["evidence"]) for run, a in ((1, before), (2, after))}
        assert evidence[2]["quotes"] == evidence[1]["quotes"] != []
        assert evidence[2]["verdict"] == evidence[1]["verdict"] == "answered"
        # A changed quote: changed.
        assert "8740" in json.loads(after["port"]["citations"])[0]["quote"]
        assert json.loads(after["tomatoes"]["evidence"]) == {"verdict": "not_enough_information", "quotes": [],
                                                              "text": "", "chunks": []}
        (run_2,) = rows(db, "SELECT * FROM runs WHERE run_id = 2")
        assert run_2["previous_run_id"] == 1 and run_2["status"] == "done"

        # The report opens with what changed, then the pages, then the answers.
        report = (out / "run-2" / "report.md").read_text(encoding="utf-8")
        titles = [line for line in report.splitlines() if line.startswith("# ")]
        assert titles == ["# harbour — run 2", "# What changed since run 1", "# Page changes since run 1", "# Answers"]
        assert report.count("\n## ") == 5  # one heading per question, under Answers
        parts = sections(report)
        changes = parts["What changed since run 1"]
        reworded = "Reworded (same quotes and verdict, other words)"
        assert set(changes) == {"Changed", "New", "No longer answered", reworded}
        changed = entries(changes["Changed"])
        assert list(changed) == ["port"]
        assert "before (run 1): The dashboard server listens on port 8731" in changed["port"]
        assert "now (run 2): Going by source" in changed["port"] and "“The dashboard server listens on port 8740" in \
            changed["port"]
        assert list(entries(changes["New"])) == ["ferry"]
        gone = entries(changes["No longer answered"])
        assert list(gone) == ["tomatoes"] and "every Tuesday" in gone["tomatoes"]
        assert "now (run 2): Not enough information" in gone["tomatoes"]
        assert list(entries(changes[reworded])) == ["python", "steps"]
        assert "    behind it: no page it cites changed" in entries(changes[reworded])["steps"]

        pages = parts["Page changes since run 1"]
        page_changed = entries(pages["Changed"])
        assert page_changed == {url["widget"]: f"- <{url['widget']}> — cited by port, python",
                                url["garden"]: f"- <{url['garden']}> — cited by tomatoes"}
        assert entries(pages["New"]) == {url["news"]: f"- <{url['news']}> — cited by ferry"}
        assert entries(pages["Gone"]) == {url["old"]: f"- <{url['old']}> — HTTP 404; not cited"}
        assert pages["Unchanged"] == [f"**Unchanged** (1): <{url['lighthouse']}>"]

        # `webqa diff`: by default the last two successful runs; the same verdicts as the run's.
        diff = webqa("diff", "--db", db, cwd=tmp_path)
        assert diff.returncode == 0, diff.stderr
        assert diff.stdout.startswith("# What changed from run 1 to run 2")
        assert sections(diff.stdout)["What changed from run 1 to run 2"].keys() == changes.keys()
        assert entries(sections(diff.stdout)["What changed from run 1 to run 2"]["Changed"]) == changed
        as_json = json.loads(webqa("diff", "1", "2", "--json", "--db", db, cwd=tmp_path).stdout)
        assert (as_json["run_a"], as_json["run_b"], as_json["changed"]) == (1, 2, True)
        assert {a["question_id"]: a["change"] for a in as_json["answers"]} == expected
        assert as_json["counts"] == {"changed": 1, "new": 1, "no_longer_answered": 1, "reworded": 2,
                                     "evidence_moved": 0, "unchanged": 0, "not_asked": 0}
        assert {p["url"]: p["change"] for p in as_json["pages"]} == {
            url["widget"]: "changed", url["garden"]: "changed", url["news"]: "new", url["old"]: "gone",
            url["lighthouse"]: "unchanged"}
        assert {p["url"]: p["cited_by"] for p in as_json["pages"]}[url["lighthouse"]] == ["steps"]
        # The other way round: run 2's new question was not asked in run 1.
        backwards = json.loads(webqa("diff", "2", "1", "--json", "--db", db, cwd=tmp_path).stdout)
        assert {a["question_id"]: a["change"] for a in backwards["answers"]}["ferry"] == "not_asked"

        # Run 3: nothing changed. Fresh pages are not fetched again; --quiet keeps stderr empty while
        # the log file gets everything, timestamped; --fail-on-change exits 0.
        scenario_job(job, list(url.values()), ["port", "python", "tomatoes", "steps", "ferry"],
                     extra="  recrawl_after: 1h\n")
        site.reset_log()
        log_file = tmp_path / "logs" / "webqa.log"
        log_file.parent.mkdir()
        third = run("--fail-on-change", options=("--quiet", "--log-file", log_file))
        assert third.returncode == 0, third.stdout + third.stderr
        assert third.stderr == third.stdout == ""  # cron's convention: silence when all is well
        assert [r.path for r in site.log if r.path.endswith(".html")] == []  # all fresh: nothing fetched
        logged = log_file.read_text(encoding="utf-8").splitlines()
        stamp = r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d webqa\[\d+\] "
        assert logged and all(re.match(stamp, line) for line in logged), logged
        text = "\n".join(logged)
        assert re.search(r"fetched 0 .*, fresh 5,", text)  # the crawl summary, hidden from stderr by --quiet
        assert "[5/5] ferry:" in text and "Run 3 done: 5/5 answered" in text and "exit 0" in text
        assert "since run 2: 0 changed, 0 new, 0 no longer answered, 0 reworded, 5 unchanged" in text
        assert {a["change"] for a in finals(db, 3).values()} == {"unchanged"}

        # --refresh fetches them all the same (conditionally: nothing changed, so 304s).
        site.reset_log()
        fourth = run("--refresh", "--fail-on-change", options=("--log-file", log_file))
        assert fourth.returncode == 0, fourth.stderr
        assert re.search(r"fetched 0 .*not modified 4, fresh 0, skipped 0, failed 1;", fourth.stderr), fourth.stderr
        assert sorted(r.path for r in site.log if r.path.endswith(".html")) == sorted(
            f"/{name}.html" for name in url)
        assert len(log_file.read_text(encoding="utf-8").splitlines()) > len(logged)  # appended, not rewritten

    # `webqa runs`: newest first, with change counts; --job, --limit, --json.
    listing = webqa("runs", "--db", db, cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    table = lines(listing.stdout)
    assert table[0].split()[:3] == ["run", "job", "status"]
    assert [line.split()[0] for line in table[1:]] == ["4", "3", "2", "1"]
    assert "1 changed, 1 new, 1 no longer answered" in table[3] and "4 new" in table[4] and "none" in table[1]
    listed = json.loads(webqa("runs", "--db", db, "--json", "--limit", "2", cwd=tmp_path).stdout)
    assert [r["run_id"] for r in listed] == [4, 3] and all(r["state"] == "done" for r in listed)
    assert json.loads(webqa("runs", "--db", db, "--json", "--job", "other", cwd=tmp_path).stdout) == []
    # One run id: that run against the one before it.
    assert json.loads(webqa("diff", "2", "--json", "--db", db, cwd=tmp_path).stdout)["run_a"] == 1


# --------------------------------------------------------------------------------------------
# Killed, interrupted and overlapping runs, on a database crawled once


def simple_job(tmp_path: Path, questions: list[str]) -> Path:
    items = "".join(f"  - id: {q}\n    question: {json.dumps(QUESTIONS[q][0])}\n" for q in questions)
    path = tmp_path / "job.yaml"
    path.write_text("name: qa-test\nquestions:\n" + items + "selection:\n  method: bm25\n  top_k: 2\n"
                    "output:\n  formats: [jsonl, markdown]\nollama:\n  timeout: 30\n", encoding="utf-8")
    return path


class HoldAfter:
    """Answers the first ``n`` questions at once, then holds every later one until released."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.count = 0
        self.held = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, body: Mapping[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.count += 1
            hold = self.count > self.n
        if hold:
            self.held.set()
            self.release.wait(timeout=60)
        return quoting_responder(body)


def start(tmp_path: Path, job: Path, db: Path, host: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*WEBQA, "run", str(job), "--no-crawl", "--db", str(db), "--out", str(tmp_path / "out"),
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**os.environ, "OLLAMA_HOST": host})


def wait_for_lines(path: Path, n: int, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    """Poll the run's JSONL (DuckDB admits one process per file, so not the database)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(lines(path.read_text(encoding="utf-8"))) >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"{path} never reached {n} lines")


def test_a_killed_run_is_resumed_without_losing_or_repeating_answers(tmp_path: Path, db: Path,
                                                                      fake_ollama: FakeOllama) -> None:
    gate = HoldAfter(2)
    fake_ollama.chat_responder = gate
    job = simple_job(tmp_path, ALL)
    jsonl = tmp_path / "out" / "run-1" / "answers.jsonl"
    proc = start(tmp_path, job, db, fake_ollama.url)
    try:
        wait_for_lines(jsonl, 2, proc)
        assert gate.held.wait(timeout=30)  # the third question waits on the model
        proc.kill()  # SIGKILL: no handler runs, the run row stays 'running'
        proc.wait(timeout=30)
    finally:
        gate.release.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    answered_before = [r["question_id"] for r in read_jsonl(jsonl)]
    assert answered_before == ALL[:2]
    (killed,) = rows(db, "SELECT * FROM runs")
    assert killed["status"] == "answering" and killed["pid"] == proc.pid
    assert sorted(finals(db, 1)) == sorted(ALL[:2])
    listing = json.loads(webqa("runs", "--json", "--db", db, cwd=tmp_path).stdout)
    assert [(r["run_id"], r["state"], r["status"]) for r in listing] == [(1, "killed (answering)", "answering")]

    asked_before = len(fake_ollama.requests_to("/api/chat"))
    fake_ollama.chat_responder = quoting_responder
    resumed = webqa("run", job, "--no-crawl", "--resume", "--db", db, "--out", tmp_path / "out",
                    host=fake_ollama.url, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "Resuming run 1 (was killed; 2/5 questions answered)" in resumed.stderr
    assert re.search(r"^Run 1 done: 5/5 answered \(5 grounded", resumed.stdout, re.M)

    # The same run, finished; one final answer per question, none lost, none asked twice.
    (run,) = rows(db, "SELECT * FROM runs")
    assert (run["run_id"], run["status"], run["resumed"], run["answered"]) == (1, "done", 1, 5)
    counts = rows(db, "SELECT question_id, count(*) FILTER (WHERE final) AS finals, count(*) AS attempts "
                      "FROM answers WHERE run_id = 1 GROUP BY ALL")
    assert sorted(c["question_id"] for c in counts) == sorted(ALL)
    assert all(c["finals"] == 1 and c["attempts"] == 1 for c in counts), counts
    asked_after = [prompt_question(user_prompt(r.body)) for r in fake_ollama.requests_to("/api/chat")[asked_before:]]
    assert sorted(asked_after) == sorted(QUESTIONS[q][0] for q in ALL[2:])
    assert all(a["evidence"] is not None and a["change"] == "new" for a in finals(db, 1).values())
    # The outputs cover every question of the run, each once, in job order.
    assert [r["question_id"] for r in read_jsonl(jsonl)] == ALL
    assert all(r["grounded"] for r in read_jsonl(jsonl))
    report = (tmp_path / "out" / "run-1" / "report.md").read_text(encoding="utf-8")
    assert report.count("\n## ") == 5 and report.count("grounded: **yes**") == 5

    # Nothing left to resume: --resume starts a new run, compared with the resumed one.
    again = webqa("run", job, "--no-crawl", "--resume", "--fail-on-change", "--db", db, "--out", tmp_path / "out",
                  host=fake_ollama.url, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "Nothing to resume: the last run of job qa-test (run 1) is done" in again.stderr
    assert "Run 2 done: 5/5 answered" in again.stdout and "5 unchanged" in again.stdout


def test_sigint_interrupts_after_the_current_question_and_resume_finishes(tmp_path: Path, db: Path,
                                                                          fake_ollama: FakeOllama) -> None:
    gate = HoldAfter(0)
    fake_ollama.chat_responder = gate
    job = simple_job(tmp_path, ["port", "tomatoes", "steps"])
    proc = start(tmp_path, job, db, fake_ollama.url)
    try:
        assert gate.held.wait(timeout=30)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)  # let the handler note the signal before the answer arrives
    finally:
        gate.release.set()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert re.search(r"Run 1 interrupted: 1/3 answered", out)
    (run,) = rows(db, "SELECT * FROM runs")
    assert run["status"] == "interrupted" and sorted(finals(db, 1)) == ["port"]

    fake_ollama.chat_responder = quoting_responder
    resumed = webqa("run", job, "--no-crawl", "--resume", "--db", db, "--out", tmp_path / "out",
                    host=fake_ollama.url, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "Resuming run 1 (was interrupted; 1/3 questions answered)" in resumed.stderr
    assert "Run 1 done: 3/3 answered" in resumed.stdout
    assert sorted(finals(db, 1)) == ["port", "steps", "tomatoes"]
    assert len(rows(db, "SELECT * FROM answers")) == 3
    assert len(fake_ollama.requests_to("/api/chat")) == 3  # port was not asked again


def test_a_second_run_on_the_same_database_exits_4_and_harms_nothing(tmp_path: Path, db: Path,
                                                                     fake_ollama: FakeOllama) -> None:
    gate = HoldAfter(1)
    fake_ollama.chat_responder = gate
    job = simple_job(tmp_path, ["port", "steps"])
    first = start(tmp_path, job, db, fake_ollama.url)
    try:
        assert gate.held.wait(timeout=30)  # the first run is answering its second question
        second = webqa("run", job, "--no-crawl", "--resume", "--db", db, "--out", tmp_path / "out2",
                       host=fake_ollama.url, cwd=tmp_path)
        assert second.returncode == 4, second.stdout + second.stderr
        (line,) = lines(second.stderr)
        assert line.startswith(f"Error: {db} is busy") and f"PID {first.pid}" in line
        assert second.stdout == "" and not (tmp_path / "out2").exists()
    finally:
        gate.release.set()
        out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert "Run 1 done: 2/2 answered" in out

    (run,) = rows(db, "SELECT * FROM runs")  # the refused run left no row
    assert run["status"] == "done" and run["answered"] == 2
    assert rows(db, "SELECT count(*) AS n FROM answers")[0]["n"] == 2
    # The database is intact: the next run works and finds nothing changed.
    fake_ollama.chat_responder = quoting_responder
    third = webqa("run", job, "--no-crawl", "--fail-on-change", "--db", db, "--out", tmp_path / "out",
                  host=fake_ollama.url, cwd=tmp_path)
    assert third.returncode == 0, third.stderr
    assert "Run 2 done: 2/2 answered" in third.stdout and "since run 1: 0 changed" in third.stdout


def test_fail_on_change_is_outranked_by_a_partial_run(tmp_path: Path, db: Path, fake_ollama: FakeOllama,
                                                      crawled: Crawled) -> None:
    fake_ollama.chat_responder = quoting_responder
    job = simple_job(tmp_path, ["port"])
    first = webqa("run", job, "--no-crawl", "--fail-on-change", "--db", db, "--out", tmp_path / "out",
                  host=fake_ollama.url, cwd=tmp_path)
    assert first.returncode == 5, first.stderr  # the first run: every answer is new
    never = crawled.site.url(1, "/never-crawled.html")
    job.write_text(job.read_text(encoding="utf-8").replace(
        "selection:", f"  - id: ghost\n    question: What is on it?\n    urls: [{never}]\nselection:"), encoding="utf-8")
    second = webqa("run", job, "--no-crawl", "--fail-on-change", "--db", db, "--out", tmp_path / "out",
                   host=fake_ollama.url, cwd=tmp_path)
    assert second.returncode == 1, second.stderr  # partial outranks changed (ghost is new, and failed)
    ghost = finals(db, 2)["ghost"]
    assert ghost["error"].startswith("question ghost: none of its urls were crawled")
    assert ghost["change"] == "new" and json.loads(ghost["evidence"])["verdict"] == "failed"


def test_diff_refuses_two_runs_of_different_jobs(tmp_path: Path, db: Path, fake_ollama: FakeOllama) -> None:
    # Two jobs sharing a database ask other questions: their runs compared would read as all new and not asked.
    fake_ollama.chat_responder = quoting_responder
    job = simple_job(tmp_path, ["port", "steps"])
    other = tmp_path / "other.yaml"
    other.write_text(job.read_text(encoding="utf-8").replace("name: qa-test", "name: other"), encoding="utf-8")
    for path in (job, other, job):
        done = webqa("run", path, "--no-crawl", "--db", db, "--out", tmp_path / "out", host=fake_ollama.url,
                     cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    refused = webqa("diff", "1", "2", "--db", db, cwd=tmp_path)
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout
    assert lines(refused.stderr) == ["Error: run 1 is of job qa-test and run 2 of job other; compare two runs of one "
                                     "job (`webqa runs --job NAME` lists them)"]
    same_job = webqa("diff", "1", "3", "--db", db, cwd=tmp_path)
    assert same_job.returncode == 0 and "2 same" in same_job.stdout, same_job.stdout + same_job.stderr


def test_two_job_files_with_one_name_are_told_apart(tmp_path: Path, db: Path, fake_ollama: FakeOllama) -> None:
    # A job file copied for a second job and not renamed would compare each file's run with the other's.
    fake_ollama.chat_responder = quoting_responder
    job = simple_job(tmp_path, ["port", "steps"])
    copy = tmp_path / "copy.yaml"
    copy.write_text(job.read_text(encoding="utf-8"), encoding="utf-8")
    said = []
    for path in (job, copy, copy):
        done = webqa("run", path, "--no-crawl", "--db", db, "--out", tmp_path / "out", host=fake_ollama.url,
                     cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        said.append([line for line in lines(done.stderr) if line.startswith("Notice: job qa-test was last run")])
    assert said[0] == [] and said[2] == [], said
    assert said[1] == [f"Notice: job qa-test was last run (run 1) from {job}, not {copy}, and its answers are compared "
                       "with that run's; if two job files share this name, give each its own name:"]
    notice = md_text(said[1][0].removeprefix("Notice: "))  # report.md writes a notice as text, not markup
    assert notice in (tmp_path / "out" / "run-2" / "report.md").read_text(encoding="utf-8")


def test_one_job_file_by_another_path_is_not_another_job_file(tmp_path: Path, db: Path,
                                                              fake_ollama: FakeOllama) -> None:
    # A deploy folder reached through a symlink, or the file named as ../x/job.yaml, is still the one file.
    fake_ollama.chat_responder = quoting_responder
    (tmp_path / "deploy").mkdir()
    job = simple_job(tmp_path / "deploy", ["port"])
    (tmp_path / "current").symlink_to(tmp_path / "deploy")
    for path, cwd in ((job, tmp_path), (Path("current") / job.name, tmp_path),
                      (Path("..") / "deploy" / job.name, tmp_path / "deploy")):
        done = webqa("run", path, "--no-crawl", "--db", db, "--out", tmp_path / "out", host=fake_ollama.url, cwd=cwd)
        assert done.returncode == 0, done.stderr
        assert "was last run" not in done.stderr, done.stderr


def test_history_reads_a_database_written_before_answers_had_a_scope(tmp_path: Path, db: Path,
                                                                     fake_ollama: FakeOllama) -> None:
    # `webqa history` opens the file read-only, so a schema-11 database is not upgraded before it is read.
    import duckdb

    fake_ollama.chat_responder = quoting_responder
    job = simple_job(tmp_path, ["port", "steps"])
    for _ in range(2):
        done = webqa("run", job, "--no-crawl", "--db", db, "--out", tmp_path / "out", host=fake_ollama.url,
                     cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    with duckdb.connect(str(db)) as conn:  # the answers table as schema 11 left it (its indexes come back at upgrade)
        for (index,) in conn.execute("SELECT index_name FROM duckdb_indexes() WHERE table_name = 'answers'").fetchall():
            conn.execute(f'DROP INDEX "{index}"')
        conn.execute("ALTER TABLE answers DROP COLUMN scope")
        conn.execute("UPDATE meta SET value = '11' WHERE key = 'schema_version'")
    shown = webqa("history", "port", "--db", db, "--json", cwd=tmp_path)
    assert shown.returncode == 0 and shown.stderr == "", shown.stderr
    assert [(h["run_id"], h["question_id"]) for h in json.loads(shown.stdout)] == [(1, "port"), (2, "port")]
