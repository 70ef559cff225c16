"""`webqa ask` and `webqa explain` through the real CLI, against a crawled test site and the fake Ollama."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_ollama import FakeOllama
from tests.support.run import (  # noqa: F401 - fixtures are used by name
    QUESTIONS,
    Crawled,
    crawled,
    db,
    free_port,
    job_yaml,
    lines,
    llm,
    prompt_question,
    prompt_sources,
    prompt_source_urls,
    read_jsonl,
    rows,
    run_dir,
    run_job,
    webqa,
    write_job,
    chat_prompts,
)

pytestmark = pytest.mark.e2e  # every test here starts a child process (tests/support/e2e.py)

PORT_Q, PORT_FACT = QUESTIONS["port"]
PY_Q, PY_FACT = QUESTIONS["python"]


def ask(db: Path, question: str, *args: str, host: str | None = None) -> Any:
    return webqa("ask", question, "--db", db, *args, host=host)


def ask_json(db: Path, question: str, *args: str, host: str | None = None) -> dict[str, Any]:
    done = ask(db, question, "--json", *args, host=host)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # exactly one JSON object, nothing else on stdout


# --------------------------------------------------------------------------------------------
# Answers


def test_ask_json_answers_with_validated_citations(db: Path, llm: FakeOllama) -> None:
    obj = ask_json(db, PORT_Q, "--method", "bm25", host=llm.url)

    assert PORT_FACT in obj["answer"] and obj["confidence"] == "high" and obj["grounded"] is True
    (citation,) = obj["citations"]
    assert citation["valid"] is True and PORT_FACT in citation["quote"]
    assert citation["url"].endswith("/widget.html") and "Configuration" in citation["heading_path"]
    assert obj["attempt"] == 1 and obj["error"] is None and obj["method_used"] == "bm25"
    (answer,) = rows(db, "SELECT * FROM answers")
    assert answer["answer_id"] == obj["answer_id"] and answer["run_id"] is None and answer["final"] is True
    assert answer["grounded"] is True and answer["question"] == PORT_Q
    (prompt,) = rows(db, "SELECT * FROM prompts")
    assert [prompt["prompt"]] == chat_prompts(llm)


def test_ask_prints_a_readable_answer(db: Path, llm: FakeOllama) -> None:
    done = ask(db, PORT_Q, "--method", "bm25", host=llm.url)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert PORT_FACT in out.splitlines()[0]
    match = re.search(r"Confidence: high; grounded: yes; answer id (\d+) \(webqa explain \1\)", out)
    assert match, out
    assert re.search(r"\[1\] .*Configuration <http://127\.0\.0\.1:\d+/widget\.html> “.*port 8731.*” \(ok\)", out)


def test_url_restricts_the_chunks_to_that_page(db: Path, llm: FakeOllama, crawled: Crawled) -> None:
    question = "When do the lighthouse tours run and when are the garden tomatoes watered?"
    everywhere = ask_json(db, question, "--method", "bm25", "--dry-run")
    assert len({c["url"] for c in everywhere["chunks"]}) > 1
    garden = crawled.urls["garden"]
    scoped = ask_json(db, question, "--method", "bm25", "--dry-run", "--url", garden)
    assert scoped["chunks"] and {c["url"] for c in scoped["chunks"]} == {garden}
    assert set(prompt_source_urls(scoped["prompt"]).values()) == {garden}
    # Answered, not only selected: a fact on another page cannot be reached.
    obj = ask_json(db, QUESTIONS["steps"][0], "--method", "bm25", "--url", garden, host=llm.url)
    assert obj["answer"] == "Not enough information" and obj["not_enough_information"] is True
    assert all(c["url"] == garden for c in obj["chunks"])


def test_url_never_crawled_is_an_error(db: Path, crawled: Crawled) -> None:
    never = crawled.site.url(1, "/nowhere.html")
    done = ask(db, PORT_Q, "--method", "bm25", "--dry-run", "--url", never)
    assert done.returncode == 3 and done.stdout == "", done.stdout  # no empty answer block above the error
    assert lines(done.stderr)[-1] == (f"Error: none of the --url pages is in {db} ({never}); crawl them first: "
                                      f"`webqa crawl URL… --db {db}`")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("method,score_key", [("keyword", "keyword_score"), ("bm25", "bm25_score"),
                                              ("embedding", "embedding_score"), ("hybrid", "bm25_score")])
def test_every_method_returns_ranked_candidates(db: Path, llm: FakeOllama, method: str, score_key: str) -> None:
    obj = ask_json(db, PY_Q, "--method", method, "--dry-run", host=llm.url)

    assert obj["method"] == obj["method_used"] == method and obj["notice"] is None
    chunks = obj["chunks"]
    assert len(chunks) >= 3
    assert [c["rank"] for c in chunks] == list(range(1, len(chunks) + 1))
    assert all(c[score_key] is not None for c in chunks[:2])
    scores = [c["score"] for c in chunks]
    assert scores == sorted(scores, reverse=True)
    assert any(PY_FACT in c["text"] for c in chunks)
    assert llm.requests_to("/api/chat") == []
    embeds = llm.requests_to("/api/embed")
    assert bool(embeds) == (method in ("embedding", "hybrid"))
    if method == "hybrid":
        assert any(c["embedding_score"] is not None for c in chunks)


def test_embeddings_are_cached_between_asks(db: Path, llm: FakeOllama) -> None:
    distinct = rows(db, "SELECT count(DISTINCT embed_key) AS n FROM chunks")[0]["n"]
    assert distinct >= 10
    first = ask_json(db, PORT_Q, "--method", "embedding", host=llm.url)
    embeds = llm.requests_to("/api/embed")
    assert len(embeds) == 2  # every chunk once (one batch), then the question
    # With nomic-embed-text's task prefixes (jobs/prefixes.py).
    assert len(embeds[0].body["input"]) == distinct and embeds[1].body["input"] == [f"search_query: {PORT_Q}"]
    assert first["grounded"] is True and first["method_used"] == "embedding"
    assert rows(db, "SELECT count(*) AS n FROM embeddings")[0]["n"] == distinct

    second = ask_json(db, PY_Q, "--method", "embedding", host=llm.url)
    embeds = llm.requests_to("/api/embed")
    assert len(embeds) == 3 and embeds[2].body["input"] == [f"search_query: {PY_Q}"]  # only the new question
    assert second["method_used"] == "embedding"
    assert rows(db, "SELECT count(*) AS n FROM embeddings")[0]["n"] == distinct


def test_hybrid_falls_back_to_bm25_when_the_embedding_model_is_missing(db: Path, llm: FakeOllama) -> None:
    llm.models = {"llama3.2:3b"}
    done = ask(db, PORT_Q, "--json", host=llm.url)  # hybrid is the default

    assert done.returncode == 0, done.stderr
    obj = json.loads(done.stdout)
    assert obj["method"] == "hybrid" and obj["method_used"] == "bm25" and obj["grounded"] is True
    notices = [line for line in lines(done.stderr) if line.startswith("Notice")]
    assert len(notices) == 1, done.stderr
    assert "nomic-embed-text" in notices[0] and "ollama pull nomic-embed-text" in notices[0]
    assert "bm25" in notices[0]
    assert llm.requests_to("/api/embed") == []


def test_min_similarity_answers_not_enough_information_without_the_llm(db: Path, llm: FakeOllama) -> None:
    asked = ask_json(db, PORT_Q, "--method", "hybrid", host=llm.url)
    best = max(c["embedding_score"] for c in asked["chunks"] if c["embedding_score"] is not None)
    assert asked["answerer"] == "llm" and len(llm.requests_to("/api/chat")) == 1

    # Just above the best similarity: the sources are deemed too far from the question.
    floor = f"{min(1.0, best + 0.001):.4f}"
    done = ask(db, PORT_Q, "--method", "hybrid", "--min-similarity", floor, "--json", host=llm.url)
    assert done.returncode == 0, done.stderr
    gated = json.loads(done.stdout)
    assert gated["answer"] == "Not enough information" and gated["answerer"] == "threshold"
    assert gated["citations"] == [] and gated["attempt"] == 1  # no wider retry either
    assert f"below min_similarity {float(floor):g}" in gated["notice"] and f"{best:.3f}" in gated["notice"]
    assert len(llm.requests_to("/api/chat")) == 1  # the LLM was not asked again
    stored = rows(db, "SELECT answerer, not_enough_info FROM answers WHERE answer_id = ?", [gated["answer_id"]])
    assert stored == [{"answerer": "threshold", "not_enough_info": True}]

    # Just below it, the LLM answers as before; with bm25 there is no similarity to hold it to.
    below = ask_json(db, PORT_Q, "--method", "hybrid", "--min-similarity", f"{best - 0.001:.4f}", host=llm.url)
    assert below["answerer"] == "llm" and below["grounded"] is True
    plain = ask_json(db, PORT_Q, "--method", "bm25", "--min-similarity", "1", host=llm.url)
    assert plain["answerer"] == "llm" and plain["grounded"] is True and plain["notice"] is None
    assert len(llm.requests_to("/api/chat")) == 3


@pytest.mark.parametrize(("args", "said"), [
    (["   "], "argument question: expected a question, not blanks, got '   '"),
    ([PORT_Q, "--top-k", "0"], "argument --top-k: expected a whole number ≥ 1, got '0'"),
    ([PORT_Q, "--budget", "0"], "argument --budget: expected a whole number ≥ 1, got '0'"),
])
def test_ask_refuses_what_a_job_file_refuses(db: Path, args: list[str], said: str) -> None:
    # A blank question or nothing to send: refused as the job file refuses them, before any model is asked.
    done = ask(db, *args)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_failed_ask_prints_its_error_and_no_empty_answer(db: Path, llm: FakeOllama) -> None:
    blank = {"answer": " ", "answered": True, "citations": [], "confidence": "high"}
    llm.script_chat(blank, blank)
    done = ask(db, PORT_Q, "--method", "bm25", host=llm.url)
    assert done.returncode == 3, done.stderr
    assert lines(done.stderr)[-1] == "Error: the model's reply had an empty answer", done.stderr
    assert "None" not in done.stdout and "Confidence" not in done.stdout, done.stdout


def test_min_similarity_must_be_a_fraction(db: Path) -> None:
    done = ask(db, PORT_Q, "--min-similarity", "1.5")
    assert done.returncode == 2 and "expected a number between 0 and 1" in done.stderr
    assert "Traceback" not in done.stderr


def test_ask_with_ollama_down_answers_extractively_with_one_notice(db: Path) -> None:
    host = f"http://127.0.0.1:{free_port()}"
    done = ask(db, PORT_Q, "--method", "bm25", host=host)
    assert done.returncode == 1
    (line,) = lines(done.stderr)
    assert line.startswith(f"Notice: Ollama is not reachable at {host}")
    assert "port 8731" in done.stdout


def test_ask_extractive_needs_no_llm(db: Path) -> None:
    host = f"http://127.0.0.1:{free_port()}"
    done = ask(db, PORT_Q, "--method", "bm25", "--answerer", "extractive", "--json", host=host)
    assert done.returncode == 0, done.stderr
    obj = json.loads(done.stdout)
    assert obj["answerer"] == "extractive" and "8731" in obj["answer"] and obj["grounded"] is True


def test_ask_on_an_empty_or_missing_database(tmp_path: Path) -> None:
    missing = tmp_path / "missing.duckdb"
    done = ask(missing, PORT_Q, "--method", "bm25", "--dry-run")
    assert done.returncode == 3
    assert lines(done.stderr) == [f"Error: {missing}: no such database; run `webqa crawl URL… --db {missing}` "
                                  "(or `webqa run` without --no-crawl) first, or pass the --db that holds the pages"]
    assert not missing.exists()
    empty = tmp_path / "empty.duckdb"
    import duckdb

    duckdb.connect(str(empty)).close()
    done = ask(empty, PORT_Q, "--method", "bm25", "--dry-run")
    assert done.returncode == 3
    (line,) = lines(done.stderr)
    assert line.startswith(f"Error: {empty} holds no chunks")


# --------------------------------------------------------------------------------------------
# Dry run


def test_ask_dry_run_json_has_the_keys_of_the_run_jsonl(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    obj = ask_json(db, PORT_Q, "--method", "bm25", "--top-k", "2", "--budget", "1000", "--dry-run")
    assert llm.requests == []  # nothing asked of Ollama at all
    chunks = obj["chunks"]
    assert [c["rank"] for c in chunks] == list(range(1, len(chunks) + 1))
    for c in chunks:
        assert {"chunk_id", "url", "heading_path", "text", "score", "bm25_score", "sent", "reason"} <= set(c)
    assert [c["sent"] for c in chunks] == [True, True] + [False] * (len(chunks) - 2)
    assert all(c["reason"] == "below top_k=2" for c in chunks[2:])
    assert prompt_question(obj["prompt"]) == PORT_Q
    assert sorted(prompt_sources(obj["prompt"]).values()) == sorted(c["text"] for c in chunks if c["sent"])
    assert rows(db, "SELECT * FROM answers") == []

    # The same keys as each line of `webqa run --dry-run`, and the very same prompt and chunks.
    job = write_job(tmp_path, job_yaml(["port"]))
    done = run_job(tmp_path, job, db, "--dry-run", host=llm.url)
    assert done.returncode == 0, done.stderr
    (line,) = read_jsonl(run_dir(tmp_path) / "answers.jsonl")
    assert set(obj) == set(line)
    assert obj["prompt"] == line["prompt"] and obj["chunks"] == line["chunks"]

    # …and the prompt a real ask sends is exactly the one shown.
    ask_json(db, PORT_Q, "--method", "bm25", "--top-k", "2", "--budget", "1000", host=llm.url)
    assert chat_prompts(llm) == [obj["prompt"]]


def test_ask_dry_run_text_shows_selection_and_prompt(db: Path) -> None:
    done = ask(db, PORT_Q, "--method", "keyword", "--top-k", "1", "--dry-run")
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[0] == "Selection (keyword):"
    assert re.match(r"  #1 +\d+\.\d{4}  SOURCE 1 +Widget Toolkit Manual › Configuration", out[1])
    assert "dropped" in out[2]
    assert out[-1] == f"Question: {PORT_Q}"


# --------------------------------------------------------------------------------------------
# Retries in ask, and explain


def _bad_then_good(llm: FakeOllama) -> None:
    llm.script_chat({
        "answer": "Python 3.9 [7]",
        "citations": [{"source": 7, "quote": "requires Python 3.9 or newer"},
                      {"source": 1, "quote": "Widget Toolkit requires Python 2.7"}],
        "confidence": "medium",
    })


def test_ask_retry_links_its_attempts_and_leaves_other_asks_alone(db: Path, llm: FakeOllama) -> None:
    earlier = ask_json(db, PORT_Q, "--method", "bm25", "--top-k", "2", host=llm.url)
    _bad_then_good(llm)
    obj = ask_json(db, PY_Q, "--method", "bm25", "--top-k", "2", host=llm.url)

    assert obj["attempt"] == 2 and obj["attempts"] == 2 and obj["grounded"] is True
    assert obj["retry_reason"] == "2 citation(s) failed validation"
    answers = {a["answer_id"]: a for a in rows(db, "SELECT * FROM answers")}
    assert len(answers) == 3
    assert answers[earlier["answer_id"]]["final"] is True  # an earlier ask keeps its final answer
    assert answers[obj["answer_id"]]["final"] is True
    assert answers[obj["answer_id"] - 1]["final"] is False and answers[obj["answer_id"] - 1]["attempt"] == 1

    done = webqa("explain", obj["answer_id"], "--db", db)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Answer {obj['answer_id']} — webqa ask, question ask, attempt 2 of 2 (final)")
    assert f"other attempt: {obj['answer_id'] - 1} (attempt 1)" in done.stdout
    done = webqa("explain", earlier["answer_id"], "--db", db)
    assert "attempt 1 of 1 (final)" in done.stdout and "other attempt" not in done.stdout


def test_explain_shows_the_debugging_checklist(tmp_path: Path, db: Path, llm: FakeOllama) -> None:
    _bad_then_good(llm)
    job = write_job(tmp_path, job_yaml(["python"]))
    done = run_job(tmp_path, job, db, host=llm.url)
    assert done.returncode == 0, done.stderr
    first, second = rows(db, "SELECT * FROM answers ORDER BY attempt")

    done = webqa("explain", first["answer_id"], "--db", db)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith(f"Answer {first['answer_id']} — run {first['run_id']}, question python, attempt 1 of 2")
    assert f"other attempt: {second['answer_id']} (attempt 2, final)" in out
    # Citation checks, with reasons.
    assert "[7] “requires Python 3.9 or newer” — FAILED: source 7 was not sent" in out
    assert "[1] “Widget Toolkit requires Python 2.7” — FAILED: quote not found in source 1" in out
    # Every candidate with its scores; what was sent as which source, and why the rest was dropped.
    selections = rows(db, "SELECT * FROM selections WHERE answer_id = ? ORDER BY rank", [first["answer_id"]])
    assert f"3. Selection: {len(selections)} candidates ranked, 2 sent" in out
    for s in selections:
        assert s["chunk_id"] in out
        assert f"{s['bm25_score']:.3f}" in out
    # Each source twice: its line under "Sent units" (why it was sent) and its mark in the table.
    assert out.count("SOURCE 1") == 2 and out.count("SOURCE 2") == 2
    lead = selections[0]
    assert re.search(rf"^   SOURCE \d: {lead['chunk_id']} rank 1 by bm25 \(score {lead['score']:.4f}, bm25 "
                     rf"{lead['bm25_score']:.3f}\); ", out, re.M)
    assert out.count("below top_k=2") == len(selections) - 2
    assert "rank 1 within top_k and budget" in out
    # The exact prompt and the raw reply.
    (prompt,) = rows(db, "SELECT * FROM prompts WHERE answer_id = ?", [first["answer_id"]])
    shown = "\n".join(line[len("   | "):] for line in out.splitlines() if line.startswith("   | "))
    assert prompt["prompt"] in shown
    assert "Widget Toolkit requires Python 2.7" in prompt["raw_reply"] and prompt["raw_reply"] in shown

    done = webqa("explain", second["answer_id"], "--db", db, "--no-prompt")
    assert done.returncode == 0, done.stderr
    assert "(final)" in done.stdout.splitlines()[0]
    assert "Retried with a wider selection because: 2 citation(s) failed validation" in done.stdout
    assert "4. Prompt sent" not in done.stdout and "5. Raw reply" in done.stdout
    assert "— ok, matched 1.00" in done.stdout


def test_explain_unknown_answer(db: Path) -> None:
    done = webqa("explain", "999", "--db", db)
    assert done.returncode != 0
    (line,) = lines(done.stderr)
    assert line.startswith(f"Error: no answer 999 in {db}")
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_explain_missing_database(tmp_path: Path) -> None:
    done = webqa("explain", "1", "--db", tmp_path / "nope.duckdb")
    assert done.returncode != 0
    (line,) = lines(done.stderr)
    assert line.startswith("Error: ") and "no such database" in line


def test_no_retry_flag_asks_once(db: Path, llm: FakeOllama) -> None:
    llm.script_chat({"answer": "Not enough information", "citations": [], "confidence": "low"})
    obj = ask_json(db, PORT_Q, "--method", "bm25", "--top-k", "1", "--no-retry", host=llm.url)
    assert obj["not_enough_information"] is True and obj["attempts"] == 1
    assert len(llm.requests_to("/api/chat")) == 1


def test_no_wider_retry_when_it_would_send_the_same_sources(tmp_path: Path, llm: FakeOllama) -> None:
    """Only a duplicate was left out: a "wider" retry would repeat the same prompt, so none is made."""
    from jobs.runstore import RunStore
    from tests.support.store import make_chunks, page_record

    path = tmp_path / "dupes.duckdb"
    pages = {
        "http://x.test/": [(("Doc", "Alpha"), "Zebra stripes are black and white on every animal.")],
        # Not the same page as x.test (the store keeps identical pages once: tests/pipelines/test_duplicates.py), but the
        # same section: the packing's duplicate.
        "http://y.test/": [(("Doc", "Alpha"), "Zebra stripes are black and white on every animal."),
                           (("Doc", "Gamma"), "Lions sleep through the hottest hours of the day.")],
        "http://z.test/": [(("Doc", "Beta"), "Zebra herds migrate across the plains every year.")],
    }
    with RunStore.open(path) as store:
        for url, sections in pages.items():
            chunks = make_chunks(url, sections)
            store.save_page(page_record(url, chunks), chunks, crawl_run_id=None)
        store.rebuild_fts()
    obj = ask_json(path, "Why do zebra stripes exist?", "--method", "keyword", "--top-k", "2", host=llm.url)
    assert obj["not_enough_information"] is True and obj["attempts"] == 1
    assert [c["reason"] for c in obj["chunks"]] == ["rank 1 within top_k and budget",
                                                    f"duplicate of {obj['chunks'][0]['chunk_id']}",
                                                    "rank 3 within top_k and budget"]
    assert len(llm.requests_to("/api/chat")) == 1
