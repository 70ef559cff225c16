"""Issue 28's "done when", end to end: a job with typed questions runs twice with one page edited between.

Real parts: the loopback test site, `webqa run` as a subprocess, the real `ollama` client against the fake
Ollama (which answers from the prompt's sources and the schema it is sent), the DuckDB file, headless
Chromium for report.html, a webhook receiver on loopback.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from jobs.llm import schema_problem
from jobs.typed import check_value, parse_type, value_schema
from tests.support.fake_ollama import FakeOllama, user_prompt
from tests.support.site_server import SiteServer
from tests.support.receiver import Receiver
from tests.support.run import prompt_question, prompt_sources, read_jsonl, rows, webqa

pytestmark = pytest.mark.e2e

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

PAGE = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<title>Lumen notes &lt;script&gt;alert("title")&lt;/script&gt;</title></head>
<body><main><article>
<h1>Lumen server notes</h1>
<p>The Lumen dashboard listens on port {port} unless another port is configured. Telemetry is disabled by default
in every release of the server. The latest release shipped on 2026-11-30 after two weeks of testing by volunteers.
The supported databases are PostgreSQL, SQLite and DuckDB in this release of the server.</p>
<h2>Plans &amp; banners &lt;b onmouseover=alert(2)&gt;</h2>
<p>The hosted plan is free for teams of up to five people, and larger teams pay per seat. The old login banner
reads &lt;img src=x onerror=alert(1)&gt; &amp; friends, which the new release no longer shows to anyone.</p>
</article></main></body></html>
"""

# question id -> (question, type, the phrase of the sentence that answers it, the value that sentence gives)
QUESTIONS: dict[str, tuple[str, str, str]] = {
    "port": ("Which port does the Lumen dashboard listen on?", "number", "listens on port"),
    "telemetry": ("Is telemetry enabled by default in Lumen?", "yes_no", "Telemetry is"),
    "release": ("When did the latest Lumen release ship?", "date", "shipped on"),
    "databases": ("Which databases does Lumen support?", "list", "supported databases"),
    "plan": ("Is the hosted Lumen plan free or paid for small teams?", "enum(free, paid)", "hosted plan"),
    "banner": ("What did the old Lumen login banner read?", "text", "banner"),
}


def value_of(qid: str, sentence: str) -> Any:
    if qid == "port":
        return int(re.search(r"port (\d+)", sentence).group(1))  # type: ignore[union-attr]
    if qid == "telemetry":
        return "enabled by default" in sentence
    if qid == "release":
        return re.search(r"\d{4}-\d{2}-\d{2}", sentence).group(0)  # type: ignore[union-attr]
    if qid == "databases":
        return ["PostgreSQL", "SQLite", "DuckDB"]
    if qid == "plan":
        return "free"
    return None


def typed_responder(body: dict[str, Any]) -> dict[str, Any]:
    """A careful model: the sentence holding the question's phrase, quoted, with the value it states."""
    prompt = user_prompt(body)
    qid = next(k for k, (q, _t, _n) in QUESTIONS.items() if prompt_question(prompt).startswith(q))
    typed = "value" in body["format"]["properties"]
    for number, text in sorted(prompt_sources(prompt).items()):
        for sentence in re.split(r"(?<=\.)\s+", " ".join(text.split())):
            if QUESTIONS[qid][2] in sentence:
                reply = {"answer": f"{sentence} [{number}]", "citations": [{"source": number, "quote": sentence}],
                         "confidence": "high", "answered": True}
                return {**reply, "value": value_of(qid, sentence)} if typed else reply
    return {"answer": "Not enough information", "citations": [], "confidence": "low", "answered": False,
            **({"value": None} if typed else {})}


def job_text(url: str, extra: str = "") -> str:
    items = "".join(f"  - id: {qid}\n    question: {json.dumps(q)}\n    type: {t}\n"
                    for qid, (q, t, _n) in QUESTIONS.items())
    return (f"name: lumen\nurls:\n  - {url}\ncrawl:\n  delay: 0\n  timeout: 5\n  allow_private_networks: true\n"
            f"questions:\n{items}selection:\n  method: bm25\n  top_k: 3\n  token_budget: 1500\n"
            "output:\n  formats: [jsonl, markdown, html, csv]\nollama:\n  max_attempts: 2\n  timeout: 20\n" + extra)


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.hrefs += [v for k, v in attrs if k == "href" and v]


def fragment_terms(href: str) -> list[str]:
    """The decoded terms of a link's text directive (start, or start and end)."""
    fragment = urlsplit(href).fragment
    assert fragment.startswith(":~:text="), href
    encoded = fragment.removeprefix(":~:text=")
    assert not set("-&") & set(encoded), encoded  # the spec's syntax characters are percent-encoded
    return [unquote(term) for term in encoded.split(",")]


def flat(text: str) -> str:
    return " ".join(text.split()).casefold()


def found_in(terms: list[str], page_text: str) -> bool:
    """Where a text fragment would land: its start, then its end after it, in the page's text."""
    text = flat(page_text)
    start = text.find(flat(terms[0]))
    return start >= 0 and (len(terms) == 1 or text.find(flat(terms[-1]), start + len(terms[0])) >= 0)


def chromium_dom(report: Path, profile: Path) -> str:
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--dump-dom", report.as_uri()],
        capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture
def site() -> Any:
    server = SiteServer().start()
    server.add(0, "/lumen.html", PAGE.format(port=8731))
    yield server
    server.stop()


def run_twice(tmp_path: Path, fake: FakeOllama, site: SiteServer, extra: str = "") -> tuple[Path, list[Path]]:
    fake.chat_responder = typed_responder
    job = tmp_path / "lumen.yaml"
    job.write_text(job_text(site.url(0, "/lumen.html"), extra), encoding="utf-8")
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    first = webqa("run", job, "--db", db, "--out", out, host=fake.url, cwd=tmp_path, timeout=180)
    assert first.returncode == 0, first.stderr
    site.add(0, "/lumen.html", PAGE.format(port=8732))  # the one edit between the runs
    second = webqa("run", job, "--db", db, "--out", out, host=fake.url, cwd=tmp_path, timeout=180)
    assert second.returncode == 0, second.stderr
    return db, sorted(out.glob("run-*"))


def test_typed_answers_run_twice_with_one_page_edited(tmp_path: Path, fake_ollama: FakeOllama,
                                                     site: SiteServer) -> None:
    receiver = Receiver().__enter__()
    try:
        db, (run1, run2) = run_twice(tmp_path, fake_ollama, site,
                                     f"notify:\n  webhook: {receiver.url}\n  timeout: 5\n  attempts: 2\n")
    finally:
        receiver.stop()
    # The webhook: nothing for the first run (nothing to compare with), one POST for the run with a change.
    (posted,) = receiver.posts
    assert (posted["job"], posted["run_id"], posted["previous_run_id"]) == ("lumen", 2, 1)
    (change,) = posted["changes"]
    assert (change["question_id"], change["change"]) == ("port", "changed")
    assert (change["before"]["value"], change["now"]["value"]) == (8731, 8732)
    assert change["report"] == (run2 / "report.html").resolve().as_uri() + "#q-port"
    assert len(change["evidence"]) == 1 and "#:~:text=" in change["evidence"][0]
    # Each question was asked with the schema of its type.
    asked = {prompt_question(user_prompt(r.body)): r.body["format"] for r in fake_ollama.requests_to("/api/chat")}
    schemas = {q: next(f for text, f in asked.items() if text.startswith(q)) for q, _t, _n in QUESTIONS.values()}
    assert schemas[QUESTIONS["port"][0]]["properties"]["value"]["type"] == ["number", "null"]
    assert "value" not in schemas[QUESTIONS["banner"][0]]["properties"]
    # The prompt says what the value holds; a text question is asked as written.
    assert any(t.endswith('set "value" to the number alone (digits, no unit); if the sources do not answer, set '
                          '"answered" to false and "value" to null.)') for t in asked)
    assert QUESTIONS["banner"][0] in asked

    # answers.jsonl: a value of its type for every question, answered as a field.
    answers = {a["question_id"]: a for a in read_jsonl(run2 / "answers.jsonl")}
    for qid, (_q, kind, _n) in QUESTIONS.items():
        a = answers[qid]
        assert a["type"] == kind and a["answered"] is True and a["value_problem"] is None, a
        assert check_value(parse_type(kind), a, False).problem is None
        assert schema_problem(a["value"], value_schema(parse_type(kind))) is None
    assert answers["port"]["value"] == 8732 and answers["telemetry"]["value"] is False
    assert answers["release"]["value"] == "2026-11-30" and answers["plan"]["value"] == "free"
    assert answers["databases"]["value"] == ["PostgreSQL", "SQLite", "DuckDB"]
    stored = rows(db, "SELECT question_id, value, value_type, answered FROM answers WHERE final AND run_id = 2")
    assert {r["question_id"]: json.loads(r["value"]) for r in stored}["port"] == 8732
    assert (run2 / "answers.csv").read_text(encoding="utf-8").splitlines()[0].startswith(
        "question_id,question,answer,value,answered,type")

    # The value changed for the port, and for nothing else (the other answers quote the same words).
    diff = webqa("diff", "--json", "--db", db, cwd=tmp_path)
    assert diff.returncode == 0, diff.stderr
    changes = {a["question_id"]: a for a in json.loads(diff.stdout)["answers"]}
    assert changes["port"]["change"] == "changed"
    assert (changes["port"]["before"]["value"], changes["port"]["after"]["value"]) == (8731, 8732)
    # The others quote the same words, some from the edited section: the same answers (evidence moved).
    assert {q for q, a in changes.items() if a["change"] not in ("unchanged", "evidence_moved")} == {"port"}

    port_id = next(r["answer_id"] for r in rows(db, "SELECT answer_id, question_id FROM answers WHERE final AND run_id = 2")
                   if r["question_id"] == "port")
    explained = webqa("explain", str(port_id), "--db", db, "--no-prompt", cwd=tmp_path)
    assert "type number; answered yes; value 8732" in explained.stdout, explained.stdout
    text = webqa("diff", "--db", db, cwd=tmp_path)
    assert "(value: 8731)" in text.stdout and "(value: 8732)" in text.stdout

    # report.html: renders in Chromium, escapes the page's markup, and each quote's link lands on its words.
    report = run2 / "report.html"
    html_text = report.read_text(encoding="utf-8")
    dom = chromium_dom(report, tmp_path / "chromium-profile")
    assert "8732" in dom and "Which port does the Lumen dashboard listen on?" in dom
    parsed = Links()
    parsed.feed(dom)
    assert not {"script", "img", "b"} & set(parsed.tags)  # the page's markup stayed text
    assert "&lt;img src=x onerror=alert(1)&gt;" in html_text  # a quote
    assert "banners &lt;b onmouseover=alert(2)&gt;" in html_text  # a heading, shown as its citation's link text
    page_text = rows(db, "SELECT text FROM pages")[0]["text"]
    quoted = [h for h in parsed.hrefs if "#:~:text=" in h]
    assert len(quoted) == len(QUESTIONS)  # one verified citation per question
    for href in quoted:
        assert found_in(fragment_terms(href), page_text), href

    # webqa history: both runs, the value each gave, the change, and the page with the fetch time answered from.
    done = webqa("history", "port", "--json", "--db", db, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    history = json.loads(done.stdout)
    assert [(h["run_id"], h["value"], h["change"], h["verdict"]) for h in history] == [
        (1, 8731, "new", "answered"), (2, 8732, "changed", "answered")]
    fetched = {r["run_id"]: str(r["fetched_at"]) for r in rows(db, "SELECT run_id, fetched_at FROM run_pages")}
    assert [(h["evidence_url"], h["evidence_fetched_at"]) for h in history] == [
        (site.url(0, "/lumen.html"), fetched[1]), (site.url(0, "/lumen.html"), fetched[2])]
    table = webqa("history", "port", "--db", db, cwd=tmp_path)
    assert table.returncode == 0 and "8731" in table.stdout and "8732" in table.stdout and "changed" in table.stdout
    unknown = webqa("history", "nope", "--db", db, cwd=tmp_path)
    assert unknown.returncode == 2 and "no finished run that asked question 'nope'" in unknown.stderr


def test_an_unchanged_run_posts_nothing_and_a_receiver_down_is_one_notice(tmp_path: Path, fake_ollama: FakeOllama,
                                                                         site: SiteServer) -> None:
    with Receiver() as receiver:
        db, _ = run_twice(tmp_path, fake_ollama, site, f"notify:\n  webhook: {receiver.url}\n  attempts: 2\n")
        job, out = tmp_path / "lumen.yaml", tmp_path / "out"
        third = webqa("run", job, "--db", db, "--out", out, host=fake_ollama.url, cwd=tmp_path, timeout=180)
        assert third.returncode == 0, third.stderr
        assert len(receiver.posts) == 1  # run 2's; run 3 changed nothing
    site.add(0, "/lumen.html", PAGE.format(port=8733))
    fourth = webqa("run", job, "--db", db, "--out", out, host=fake_ollama.url, cwd=tmp_path, timeout=180)
    assert fourth.returncode == 0, fourth.stderr  # the answers are stored and reported: the run did its job
    notices = [line for line in fourth.stderr.splitlines() if "notification" in line]
    assert len(notices) == 1 and notices[0].startswith("Notice: notification not sent: webhook http://127.0.0.1:")
    assert "failed after 2 POSTs" in notices[0]
    # Recorded where a cron user looks later: the run's row and its report.
    (fourth_run,) = rows(db, "SELECT notes FROM runs WHERE run_id = 4")
    assert "notification not sent" in fourth_run["notes"]
    assert "notification not sent" in (out / "run-4" / "report.md").read_text(encoding="utf-8")
    assert "port" in rows(db, "SELECT question_id FROM answers WHERE run_id = 4 AND change = 'changed'")[0]["question_id"]
