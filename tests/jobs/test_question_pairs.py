"""A question's answer is compared with the same question's answer of the previous run, not with its slot's.

Questions written as plain strings get q1, q2, … by position: one question added at the top must not make every
answer "changed" (nor exit 5, nor fire the webhook), and a question edited in place is compared and shown as edited.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.question_pairs import edited, pair_previous
from tests.support.fake_ollama import FakeOllama
from tests.support.run import GARDEN, QUESTIONS, WIDGET, quoting_responder, rows, webqa
from tests.support.site_server import SiteServer


def _rows(**questions: str) -> dict[str, dict[str, str]]:
    return {qid: {"question_id": qid, "question": text} for qid, text in questions.items()}


def test_pairs_by_id_and_text_then_text_then_id() -> None:
    before = _rows(q1="Which port?", q2="Which Python?")
    # One question inserted at the top: the others are found by their text.
    assert pair_previous(before, [("q1", "When?"), ("q2", "Which port?"), ("q3", "which  python?")]) == {
        "q1": None, "q2": "q1", "q3": "q2"}
    # Edited in place: compared by id; a text seen elsewhere wins over the id.
    assert pair_previous(before, [("q1", "Which port, please?"), ("q2", "Which Python?")]) == {"q1": "q1", "q2": "q2"}
    assert pair_previous(before, [("q2", "Which port?"), ("q1", "Something else?")]) == {"q2": "q1", "q1": None}
    assert edited(before["q1"], {"question_id": "q2", "question": "Which port?"}) == "was q1"
    assert edited(before["q1"], {"question_id": "q1", "question": "Which port, please?"}) == \
        "question edited; it was “Which port?”"
    assert edited(before["q1"], {"question_id": "q1", "question": " which PORT? "}) is None


def test_an_id_alone_pairs_only_a_question_that_shares_a_word() -> None:
    # One question inserted at the top and the next one edited: the inserted one is not the old q1 edited.
    before = _rows(q1="Which port does the server use?", q2="Which Python version is required?")
    assert pair_previous(before, [("q1", "Is there a dark mode?"), ("q2", "Which port, please?")]) == {
        "q1": None, "q2": None}
    assert pair_previous(before, [("q1", "What port does the server listen on?")]) == {"q1": "q1"}


def test_an_id_alone_pairs_an_edit_that_changes_a_word_s_form() -> None:
    # "ports" is "port" edited: a plural, a verb's form or a word the keyword list finds too common ("used",
    # "down") still shows an edit; a cron user editing a question must not get it reported as a new one.
    before = _rows(q1="Which port is used?", q2="How many workers?", q3="Is it down?")
    assert pair_previous(before, [("q1", "Which ports are open?"), ("q2", "How many worker threads?"),
                                  ("q3", "Is the site down?")]) == {"q1": "q1", "q2": "q2", "q3": "q3"}


def test_contractions_are_no_shared_word() -> None:
    # "What's" splits into "what" and "s": the tail of a contraction shows nothing about the topic.
    before = _rows(q1="What's the port?")
    assert pair_previous(before, [("q1", "What's the dark mode?")]) == {"q1": None}
    assert pair_previous(_rows(q1="Don't retries stop?"), [("q1", "Don't pages load?")]) == {"q1": None}


def test_pairs_do_not_depend_on_the_order_the_answers_finished_in() -> None:
    # The run pairs as it stores, `webqa diff` and `webqa history` from rows in answer_id (finishing) order:
    # all three must decide alike.
    before = {"q10": {"question_id": "q10", "question": "Which port?"},
              "q9": {"question_id": "q9", "question": "Which port?"}}
    for current in ([("q2", "Which port?"), ("q3", "Which port?")], [("q3", "Which port?"), ("q2", "Which port?")]):
        assert pair_previous(before, current) == {"q2": "q9", "q3": "q10"}, current


@pytest.mark.e2e
def test_a_question_added_at_the_top_leaves_the_others_unchanged(tmp_path: Path, fake_ollama: FakeOllama) -> None:
    fake_ollama.chat_responder = quoting_responder
    db, out, job = tmp_path / "w.duckdb", tmp_path / "out", tmp_path / "job.yaml"
    with SiteServer() as site:
        site.add(0, "/widget.html", WIDGET)

        def run(*texts: str, flags: tuple[str, ...] = ("--fail-on-change",)) -> object:
            job.write_text(f"name: daily\nurls: [{site.url(0, '/widget.html')}]\n"
                           "crawl: {delay: 0, allow_private_networks: true}\nquestions:\n"
                           + "".join(f"  - {json.dumps(t)}\n" for t in texts)
                           + "selection: {method: bm25, top_k: 2}\noutput: {formats: [jsonl, markdown]}\n",
                           encoding="utf-8")
            return webqa("-q", "run", job, "--db", db, "--out", out, *flags, host=fake_ollama.url, timeout=180)

        port, python = QUESTIONS["port"][0], QUESTIONS["python"][0]
        first = run(port, python, flags=())
        assert first.returncode == 0, first.stderr
        second = run("Is there a dark mode?", port, python)
        (line,) = second.stderr.splitlines()
        assert second.returncode == 5 and "0 changed, 1 new (q1)" in line and "2 unchanged" in line, line
        third = run("Is there a dark mode?", port, python.replace("Which", "What"))
        assert third.returncode == 5 and "1 no longer answered (q3)" in third.stderr, third.stderr
    changes = {(r["run_id"], r["question_id"]): r["change"] for r in rows(db, "SELECT run_id, question_id, change "
                                                                              "FROM answers WHERE final")}
    assert [changes[2, q] for q in ("q1", "q2", "q3")] == ["new", "unchanged", "unchanged"]
    report = (out / "run-2" / "report.md").read_text(encoding="utf-8")
    assert "**Same** (2): q2 (was q1), q3 (was q2)" in report
    diff = json.loads(webqa("diff", "--json", "--db", db).stdout)
    q3 = next(a for a in diff["answers"] if a["question_id"] == "q3")
    assert (q3["change"], q3["before_question"]) == ("no_longer_answered", python)
    assert f"- **q3**: {python.replace('Which', 'What')} (question edited; it was “{python}”)" in \
        (out / "run-3" / "report.md").read_text(encoding="utf-8")
    # `webqa history` follows the question as its changes were decided: through the renumbering and the edit.
    history = json.loads(webqa("history", "q2", "--db", db, "--json").stdout)
    assert [(h["run_id"], h["question_id"], h["change"]) for h in history] == [
        (1, "q1", "new"), (2, "q2", "unchanged"), (3, "q2", "unchanged")]
    text = webqa("history", "q3", "--db", db).stdout
    assert text.rstrip().endswith(f"Asked otherwise: run 1 as q2: “{python}”; run 2 as q3: “{python}”"), text


@pytest.mark.e2e
def test_one_text_asked_of_two_pages_is_two_questions(tmp_path: Path, fake_ollama: FakeOllama) -> None:
    # q1 and q2 share their text but not their page: inserting a question must not compare q1's page with q2's.
    fake_ollama.chat_responder = quoting_responder
    db, out, job = tmp_path / "w.duckdb", tmp_path / "out", tmp_path / "job.yaml"
    text = QUESTIONS["port"][0]  # answered on the widget page, not on the garden page
    with SiteServer() as site:
        site.add(0, "/widget.html", WIDGET)
        site.add(0, "/garden.html", GARDEN)
        pages = [site.url(0, "/widget.html"), site.url(0, "/garden.html")]

        def run(*questions: dict[str, object], flags: tuple[str, ...] = ("--fail-on-change",)) -> object:
            job.write_text(f"name: daily\nurls: {json.dumps(pages)}\n"
                           "crawl: {delay: 0, allow_private_networks: true}\n"
                           f"questions: {json.dumps(list(questions))}\n"
                           "selection: {method: bm25, top_k: 2}\noutput: {formats: [jsonl, markdown]}\n",
                           encoding="utf-8")
            return webqa("-q", "run", job, "--db", db, "--out", out, *flags, host=fake_ollama.url, timeout=180)

        on_pages = [{"question": text, "urls": [url]} for url in pages]
        first = run(*on_pages, flags=())
        assert first.returncode == 0, first.stderr
        second = run({"question": "Is there a dark mode?"}, *on_pages)
        (line,) = second.stderr.splitlines()
        assert "0 changed, 1 new (q1)" in line and "2 unchanged" in line, line
    changes = {(r["run_id"], r["question_id"]): r["change"] for r in rows(db, "SELECT run_id, question_id, change "
                                                                              "FROM answers WHERE final")}
    assert [changes[2, q] for q in ("q1", "q2", "q3")] == ["new", "unchanged", "unchanged"]
    found = rows(db, "SELECT run_id, question_id FROM answers WHERE final AND NOT not_enough_info")
    assert {(r["run_id"], r["question_id"]) for r in found} == {(1, "q1"), (2, "q2")}  # the widget page answers, the garden page does not
    history = json.loads(webqa("history", "q3", "--db", db, "--json").stdout)
    assert [(h["run_id"], h["question_id"]) for h in history] == [(1, "q2"), (2, "q3")]
