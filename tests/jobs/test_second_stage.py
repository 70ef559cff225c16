"""The second stage end to end, as cron meets it: `webqa run` with passages and with a second embedding model
(the fake Ollama), what is stored and what `webqa explain` shows, a missing second model (one notice, the
first stage's order, exit 1), and `webqa eval`'s account of where each answer was lost."""

from __future__ import annotations

import json
import re
from pathlib import Path

from jobs.runstore import RunStore
from jobs.second_stage import SecondStage, StageSettings
from jobs.select import Selector
from tests.support.fake_ollama import FakeOllama
from tests.support.run import (  # noqa: F401 - crawled, db and llm are fixtures, used by name
    QUESTIONS, chat_prompts, crawled, db, job_yaml, llm, prompt_sources, rows, run_job, webqa, write_job)

SECOND = "e5-test"


def _job(tmp_path: Path, selection: str, questions: list[str], method: str = "hybrid", top_k: int = 3) -> Path:
    text = job_yaml(questions, method=method, top_k=top_k)
    return write_job(tmp_path, text.replace("  token_budget: 1000\n", f"  token_budget: 1000\n{selection}"))


def _chunk_texts(db: Path) -> list[str]:
    return [r["text"] for r in rows(db, "SELECT text FROM chunks")]


def test_passages_are_what_is_sent_quoted_and_explained(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    job = _job(tmp_path, "  passages: {words: 45}\n", ["tomatoes", "steps"], method="bm25")
    done = run_job(tmp_path, job, db, host=llm.url)
    assert done.returncode == 0, done.stderr
    chunks = _chunk_texts(db)
    prompts = chat_prompts(llm)
    cut = 0
    for prompt in prompts:
        for text in prompt_sources(prompt).values():
            body = text.removeprefix("[…] ").removesuffix(" […]")
            # every source is a piece of one chunk's text, exactly: quotes from it are quotes from the page
            assert any(body in chunk for chunk in chunks), body
            cut += body not in chunks
    assert cut > 0  # some sources are passages, not whole chunks
    answers = rows(db, "SELECT answer, citations, grounded FROM answers WHERE final ORDER BY question_id")
    assert [QUESTIONS["steps"][1] in answers[0]["answer"], QUESTIONS["tomatoes"][1] in answers[1]["answer"]] == [True, True]
    assert all(a["grounded"] for a in answers)  # the validator checked the quotes against the passages sent
    reasons = [r["reason"] for r in rows(db, "SELECT reason FROM selections WHERE sent")]
    assert any(re.search(r"second stage \d\.\d{4}; sent as a passage: characters \d+-\d+ of \d+", r) for r in reasons)
    answer_id = rows(db, "SELECT answer_id FROM selections WHERE sent AND reason LIKE '%as a passage%'")[0]["answer_id"]
    explained = webqa("explain", str(answer_id), "--db", db)
    assert explained.returncode == 0, explained.stderr
    assert "sent as a passage: characters" in explained.stdout
    # bm25 selection: windows scored by the question's words, no embedding asked for
    assert "skipped: no embedding for this selection" in explained.stdout
    assert not [r for r in llm.requests_to("/api/embed")]


def test_a_second_embedding_model_orders_the_top_candidates_and_is_cached(tmp_path: Path, db: Path,
                                                                         llm: FakeOllama) -> None:
    llm.models.add(SECOND)
    job = _job(tmp_path, f"  second_stage: {{embedding_model: {SECOND}, weight: 1}}\n", ["port"])
    done = run_job(tmp_path, job, db, host=llm.url)
    assert done.returncode == 0, done.stderr
    second = [r for r in llm.requests_to("/api/embed") if r.body.get("model") == SECOND]
    windows = sum(len(r.body["input"]) for r in second)
    assert windows > 1
    stored = rows(db, "SELECT * FROM reranks ORDER BY answer_id")[0]
    assert stored["model"] == SECOND and stored["status"] in ("reranked", "unchanged") and stored["error"] is None
    selections = rows(db, "SELECT chunk_id, rank, reason FROM selections WHERE answer_id = ? ORDER BY rank",
                      [stored["answer_id"]])
    assert [s["chunk_id"] for s in selections[:len(stored["after"])]] == stored["after"]
    scores = [float(m.group(1)) for s in selections for m in [re.search(r"second stage (-?\d\.\d{4})", s["reason"])] if m]
    assert len(scores) == len(stored["after"]) and scores == sorted(scores, reverse=True)  # weight 1: by its score
    explained = webqa("explain", str(stored["answer_id"]), "--db", db).stdout
    assert f"ordered by {SECOND}" in explained and "second stage" in explained

    again = run_job(tmp_path, job, db, host=llm.url)
    assert again.returncode == 0, again.stderr
    second_again = [r for r in llm.requests_to("/api/embed") if r.body.get("model") == SECOND][len(second):]
    # the windows' vectors were cached: the second run embeds only the question
    assert sum(len(r.body["input"]) for r in second_again) == 1


def test_keyword_gate_keeps_the_first_order_for_a_question_its_keywords_match(tmp_path: Path, db: Path,
                                                                              llm: FakeOllama) -> None:
    # "Which port does the dashboard server listen on?" has a page that holds its words: with the gate at or below
    # the share its best bm25 match holds, the stage is skipped (no window embedded), said in the store and explain.
    llm.models.add(SECOND)

    def run(gate: float, extra: str = "") -> dict:
        job = _job(tmp_path, f"  second_stage: {{embedding_model: {SECOND}, weight: 1, keyword_gate: {gate}}}\n{extra}",
                   ["port"])
        done = run_job(tmp_path, job, db, host=llm.url)
        assert done.returncode == 0, done.stderr
        return rows(db, "SELECT * FROM reranks ORDER BY answer_id DESC")[0]

    def embedded() -> int:
        return sum(len(r.body["input"]) for r in llm.requests_to("/api/embed") if r.body.get("model") == SECOND)

    stored = run(0.01)
    assert embedded() == 0
    assert stored["status"] == "skipped" and stored["after"] == stored["before"], stored
    share = float(re.search(r"holds (\d\.\d{3}) of the question \(keyword_gate 0.01\)", stored["error"]).group(1))
    assert 0.01 < share < 1
    explained = webqa("explain", str(stored["answer_id"]), "--db", db).stdout
    assert "skipped: the best keyword match holds" in explained and "first-stage order kept" in explained
    # The threshold itself: a gate just below the share skips, just above it lets the question through.
    assert run(round(share - 0.001, 3))["status"] == "skipped" and embedded() == 0
    assert run(round(share + 0.001, 3))["status"] in ("reranked", "unchanged") and embedded() > 1
    # Skipped with passages asked: the passages are still cut (by the question's words), the order kept.
    stored = run(0.01, "  passages: {words: 45}\n")
    assert stored["status"] == "skipped"
    reasons = [r["reason"] for r in rows(db, "SELECT reason FROM selections WHERE answer_id = ? AND sent",
                                         [stored["answer_id"]])]
    assert any("sent as a passage" in r for r in reasons), reasons


def test_keyword_gate_under_embedding_selection_lets_the_question_through(tmp_path: Path, db: Path,
                                                                         llm: FakeOllama) -> None:
    # Embedding selection ranks no candidate by its keywords: no keyword match holds any of the question, so the
    # gate cannot skip the stage (the question its words match best, "port", included).
    llm.models.add(SECOND)
    job = _job(tmp_path, f"  second_stage: {{embedding_model: {SECOND}, weight: 1, keyword_gate: 0.01}}\n",
               ["port"], method="embedding")
    done = run_job(tmp_path, job, db, host=llm.url)
    assert done.returncode == 0, done.stderr
    stored = rows(db, "SELECT * FROM reranks ORDER BY answer_id DESC")[0]
    assert stored["status"] in ("reranked", "unchanged") and stored["error"] is None, stored
    assert sum(len(r.body["input"]) for r in llm.requests_to("/api/embed") if r.body.get("model") == SECOND) > 1


def test_the_stage_reads_the_keyword_index_under_any_method(db: Path) -> None:
    # Under embedding selection nothing loaded the keyword index's stemmer before the stage read the index (its
    # idf weights, keyword_gate's ceiling): each read failed and the stage went on with equal weights, no share.
    store = RunStore.open(db)
    try:
        selector = Selector(store.conn, ensure_fts=store.load_fts)
        stage = SecondStage(selector, StageSettings(keyword_gate=0.5))
        question = QUESTIONS["port"][0]
        stems, idf = stage._stem_weights(question)
        assert idf is not None and len(idf) == len(stems) and max(idf) > 0, (stems, idf)
        assert stage._keyword_share(question, []) == 0.0  # no candidate scored by keywords: the stage runs
    finally:
        store.close()


def test_a_missing_second_model_is_one_notice_keeps_the_first_order_and_exits_1(tmp_path: Path, db: Path,
                                                                               llm: FakeOllama) -> None:
    job = _job(tmp_path, f"  second_stage: {{embedding_model: {SECOND}}}\n", ["port", "steps"])
    plain = run_job(tmp_path, job, db, host=llm.url)
    assert plain.returncode == 1, plain.stderr  # degraded: the run says so to cron
    notices = [line for line in plain.stderr.splitlines() if "second stage unavailable" in line]
    assert len(notices) == 1 and notices[0].startswith("Notice:") and SECOND in notices[0]
    assert len(rows(db, "SELECT * FROM answers WHERE final AND grounded")) == 2  # answered all the same
    stored = rows(db, "SELECT r.status, r.error, r.before, r.after FROM reranks r JOIN answers a USING (answer_id) "
                      "WHERE a.final ORDER BY a.question_id")
    assert [s["status"] for s in stored] == ["failed", "failed"]  # recorded per answer
    assert all(s["after"] == s["before"] and "first-stage order kept" in s["error"] for s in stored)
    # only the first question asked for the missing model; the second knew it was gone
    asked = [r for r in llm.requests_to("/api/embed") if r.body.get("model") == SECOND]
    assert 1 <= len(asked) <= 2  # the client's bounded attempts for one call, no more


def test_eval_says_where_each_answer_was_lost(tmp_path: Path, db: Path, crawled: object) -> None:
    questions = tmp_path / "questions.yaml"
    urls = crawled.urls  # type: ignore[attr-defined]
    questions.write_text(
        "name: evaltest\nquestions:\n"
        f"  - id: tomatoes\n    question: {json.dumps(QUESTIONS['tomatoes'][0])}\n    url: {urls['garden']}\n"
        f"    expect: [{json.dumps(QUESTIONS['tomatoes'][1])}]\n"
        f"  - id: steps\n    question: {json.dumps(QUESTIONS['steps'][0])}\n    url: {urls['lighthouse']}\n"
        f"    expect: [{json.dumps(QUESTIONS['steps'][1])}]\n", encoding="utf-8")
    tiny = webqa("eval", questions, "--db", db, "--method", "bm25", "--budget", "5", "--json")
    assert tiny.returncode == 0, tiny.stderr
    report = json.loads(tiny.stdout)
    assert [q["prompt_loss"]["bm25"] for q in report["questions"]] == ["below cut", "below cut"]
    assert report["summary"]["bm25"]["prompt_losses"]["below cut"] == 2
    table = webqa("eval", questions, "--db", db, "--method", "bm25", "--budget", "5").stdout
    assert "Lost before the first prompt" in table and re.search(r"tomatoes\s+bm25\s+1\s+1\s+-\s+below cut", table)
    assert "bm25: answer in the top 40 1.000, in the prompt 0.000; lost:" in table
