"""Issue 13 end to end: quotes that are not the source's words never make an answer grounded.

A privacy page is crawled into a real DuckDB file, `webqa run` answers through the real ``ollama``
client talking to the fake Ollama, and the fake model quotes the page the way real models do:
honestly but with small copying differences (all must stay valid), or with a flipped word, stitched
fragments, a one-word quote or a source number like "1; 7" (all must end ``grounded: false`` with
the citation's reason stored, printed by `webqa explain`, and counted in the run's summary line).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from jobs.validate import MAX_GAP_WORDS, normalise
from tests.support.fake_ollama import FakeOllama, user_prompt
from tests.support.site_server import SiteServer
from tests.support.run import job_yaml, prompt_question, prompt_sources, read_jsonl, rows, run_dir, run_job, webqa, write_job

pytestmark = pytest.mark.e2e  # every test here starts a child process (tests/support/e2e.py)

PRIVACY = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Lumen privacy policy</title></head>
<body><main><article>
<h1>Lumen privacy policy</h1>
<p>This policy covers the Lumen desktop application and its documentation website. Lumen is maintained by
volunteers, and &ldquo;we&rdquo; below means the Lumen maintainers, who wrote this page in plain words.</p>
<h2>Telemetry and your data</h2>
<p>Telemetry is enabled by default in every release of the Lumen desktop application. Administrators can change
the setting in the policy file, and every change to it is written to the audit log together with the name of the
account that made it, the time of the change, the previous value, the new value and the host on which the policy
file was edited by that account. Crash reports are deleted after thirty days.</p>
<p>We never sell your personal data to advertisers or to anyone else. Lumen &amp; its plugins never phone home
on their own. Questions about this policy reach the maintainers by e-mail within two weeks.</p>
<p>&ldquo;Privacy by default&rdquo; is the project&rsquo;s motto &mdash; it appears on every page of the website.</p>
</article></main></body></html>"""

TELEMETRY = "Telemetry is enabled by default in every release of the Lumen desktop application."
DATA = "We never sell your personal data to advertisers or to anyone else."

# A reply builder: (number of the source holding the needle, that source's text) -> the model's reply.
Builder = Callable[[int, str], dict[str, Any]]


def answer(number: int, *citations: tuple[Any, str]) -> dict[str, Any]:
    return {"answer": f"Telemetry and personal data, as the policy says [{number}].",
            "citations": [{"source": n, "quote": q} for n, q in citations], "confidence": "high"}


def honest(n: int, _text: str) -> dict[str, Any]:
    """Real sentences with the differences real models make: every one is in TOLERATED."""
    return answer(
        n,
        (n, '"Privacy by default" is the project\'s motto - it appears on every page'),  # straight quotes, dash
        (n, "We never sell your\n   personal data  to advertisers"),  # whitespace and newlines
        (n, "Crash reports are deleted after thirty days"),  # trailing period dropped
        (n, "Telemetry is enabled by default."),  # a substring, with a period added
        (n, "ADMINISTRATORS CAN CHANGE THE SETTING in the policy file"),  # case
        (n, "enabled by default in every release"),  # an exact substring of several words
        (n, "Lumen &amp; its plugins never&nbsp;phone home"),  # HTML entities, nbsp
        (n, "reach the maintainers by email within two weeks"),  # e-mail / email
        (n, "“… Telemetry is enabled by default … in the policy file …”"),  # ellipses, curly wrapping quotes
    )


def flipped(n: int, _text: str) -> dict[str, Any]:
    return answer(n, (n, TELEMETRY.replace("enabled", "disabled")))


def stitched(n: int, _text: str) -> dict[str, Any]:
    return answer(n, (n, "Telemetry is … never … sell … personal data"))


def far_apart(n: int, text: str) -> dict[str, Any]:
    first, second = "Telemetry is enabled by default", "Crash reports are deleted after thirty days"
    between = normalise(text).split(normalise(first), 1)[1].split(normalise(second), 1)[0]
    assert len(between.split()) > MAX_GAP_WORDS  # else this row would test nothing
    return answer(n, (n, f"{first} … {second}"))


def one_word(n: int, _text: str) -> dict[str, Any]:
    return answer(n, (n, "the"))


def bad_source(n: int, _text: str) -> dict[str, Any]:
    return answer(n, ("1; 7", DATA))


# Question id -> (question, builder, the reason its one failing citation must carry; None: all valid).
CASES: dict[str, tuple[str, Builder, str | None]] = {
    "honest": ("Does Lumen collect telemetry or sell personal data?", honest, None),
    "flipped": ("Is telemetry enabled by default in the Lumen desktop application?", flipped,
                "quote not found in source {n}: it differs at 'disabled' where the source has 'enabled'"),
    "stitched": ("Does Lumen sell telemetry or personal data?", stitched,
                 "quote joins 4 fragments with ellipses; at most 3 are allowed"),
    "far": ("When are telemetry crash reports deleted?", far_apart,
            f"quote not found in source {{n}}: its fragments are not in this order within {MAX_GAP_WORDS} words "
            "of each other"),
    "oneword": ("Who can change the telemetry setting in the policy file?", one_word,
                "quote is too short: 1 word, fewer than 4, and not a whole sentence of source {n}"),
    "badsource": ("Is personal data sold to advertisers?", bad_source, "source '1; 7' is not a whole number"),
}
BY_QUESTION = {question: builder for question, builder, _ in CASES.values()}
NEEDLE = "Telemetry is enabled by default"


def responder(body: Mapping[str, Any]) -> dict[str, Any]:
    """The fake model: finds the privacy text among the sources sent and replies as its case says."""
    prompt = user_prompt(body)
    builder = BY_QUESTION[prompt_question(prompt)]
    for number, text in sorted(prompt_sources(prompt).items()):
        if NEEDLE in text and DATA in text:
            return builder(number, text)
    return {"answer": "Not enough information", "citations": [], "confidence": "low"}


@pytest.fixture(scope="module")
def crawled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp = tmp_path_factory.mktemp("quotes")
    with SiteServer() as site:
        site.add(0, "/privacy.html", body=PRIVACY)
        db = tmp / "crawled.duckdb"
        done = webqa("crawl", site.url(0, "/privacy.html"), "--db", db, "--delay", "0", cwd=tmp)
        assert done.returncode == 0, done.stderr
        yield db


@pytest.fixture(scope="module")
def run(crawled: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Any]]:
    """One `webqa run` of every case; yields (tmp dir, database, the finished process)."""
    tmp = tmp_path_factory.mktemp("run")
    db = tmp / "webqa.duckdb"
    db.write_bytes(crawled.read_bytes())
    questions = [{"id": qid, "question": question} for qid, (question, _, _) in CASES.items()]
    job = write_job(tmp, job_yaml(questions, top_k=4))
    with FakeOllama() as fake:
        fake.chat_responder = responder
        done = run_job(tmp, job, db, host=fake.url)
    yield tmp, db, done


def results(run: tuple[Path, Path, Any]) -> dict[str, dict[str, Any]]:
    tmp, _, done = run
    assert done.returncode == 0, done.stderr
    return {r["question_id"]: r for r in read_jsonl(run_dir(tmp) / "answers.jsonl")}


def test_honest_quotes_with_tolerated_differences_stay_grounded(run: tuple[Path, Path, Any]) -> None:
    result = results(run)["honest"]
    assert len(result["citations"]) == 9
    assert [(c["quote"], c["reason"]) for c in result["citations"] if not c["valid"]] == []
    assert result["grounded"] is True and result["attempt"] == 1  # no retry was needed


@pytest.mark.parametrize("qid", [q for q, (_, _, reason) in CASES.items() if reason])
def test_attack_quotes_end_ungrounded_with_the_reason_stored(run: tuple[Path, Path, Any], qid: str) -> None:
    result = results(run)[qid]
    assert result["grounded"] is False
    (citation,) = result["citations"]
    expected = CASES[qid][2]
    assert expected is not None and citation["valid"] is False
    assert citation["reason"] == expected.format(n=citation["source"])
    # Stored in the answers table, for every attempt (the wider retry is fooled no more than the first).
    _, db, _ = run
    stored = rows(db, "SELECT citations, grounded FROM answers WHERE question_id = ?", [qid])
    assert stored and all(not r["grounded"] for r in stored)
    assert all(json.loads(r["citations"])[0]["reason"] == citation["reason"] for r in stored)


def test_explain_prints_each_failed_check(run: tuple[Path, Path, Any]) -> None:
    _, db, _ = run
    for qid, (_, _, reason) in CASES.items():
        if reason is None:
            continue
        (answer_id,) = [r["answer_id"] for r in rows(db, "SELECT answer_id FROM answers WHERE question_id = ? AND final",
                                                     [qid])]
        done = webqa("explain", answer_id, "--db", db)
        assert done.returncode == 0, done.stderr
        assert "grounded NO" in done.stdout, qid
        failed = re.findall(r"— FAILED: (.*)", done.stdout)
        assert len(failed) == 1, (qid, done.stdout)
        assert failed[0].startswith(reason.split("{n}")[0].rstrip()), (qid, failed[0])


def test_the_run_summary_counts_only_the_honest_answer_as_grounded(run: tuple[Path, Path, Any]) -> None:
    _, _, done = run
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert re.search(r"6/6 answered \(1 grounded, 0 not enough information\), 0 failed", done.stdout), done.stdout
