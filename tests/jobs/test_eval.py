"""`webqa eval`: the funnel must name the stage where an answer is lost."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobs.answer import AskSettings, QuestionAnswerer, QuestionSpec
from jobs.evaluate import (EvalQuestion, Packing, contains_any, evaluate, html_text, normalise, render_table,
                           summarise)
from jobs.select import Selector
from pipelines.chunk import Chunk, estimate_tokens
from jobs.runstore import RunStore
from pipelines.store import PageRecord, utcnow

REPO = Path(__file__).resolve().parents[2]
URL = "http://docs.test/guide"
# The HTML holds a sentence the cleaner "dropped" (it is not in the text), and the text holds a
# sentence that no chunk kept: each loss must be attributed to its own stage.
HTML = ("<html><body><nav>Share this page: the secret footer word</nav><main><h2>Server</h2>"
        "<p>The server port is 8080.</p><p>Lost between text and chunks.</p>"
        "<h2>Garden</h2><p>Tomatoes grow well in sunny corners of the allotment.</p></main></body></html>")
TEXT = "The server port is 8080.\n\nLost between text and chunks.\n\nTomatoes grow well in sunny corners of the allotment."
CHUNKS = [
    Chunk("c-server", 0, ("Guide", "Server"), "The server port is 8080. Configure it in widget.toml.", 12, "h1"),
    Chunk("c-garden", 1, ("Guide", "Garden"), "Tomatoes grow well in sunny corners of the allotment.", 12, "h2"),
]


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "eval.duckdb"
    with RunStore.open(path) as store:
        record = PageRecord(url=URL, final_url=URL, status=200, fetched_at=utcnow(), content_type="text/html",
                            etag=None, last_modified=None, content_hash="x", title="Guide", lang="en",
                            extractor="main", html_bytes=len(HTML), text_bytes=len(TEXT), text=TEXT, html=HTML)
        chunks = [Chunk(c.chunk_id, c.ordinal, c.heading_path, c.text, estimate_tokens(c.text), c.content_hash)
                  for c in CHUNKS]
        store.save_page(record, chunks, crawl_run_id=None)
        store.rebuild_fts()
    yield path


QUESTIONS = [
    EvalQuestion("port", "Which port does the server use?", ("server port is 8080",), URL),
    EvalQuestion("cleaning", "What is the secret footer word?", ("secret footer word",), URL),
    EvalQuestion("chunking", "What was lost?", ("lost between text and chunks",), URL),
    EvalQuestion("fetch", "What is not on the page at all?", ("never written anywhere",), URL),
    EvalQuestion("none-x", "What is the capital of France?", ()),
]


def test_funnel_attributes_each_loss_to_its_stage(db: Path) -> None:
    with RunStore.open(db) as store:
        funnels = evaluate(Selector(store.conn, ensure_fts=store.load_fts), store, QUESTIONS, ["keyword", "bm25"])
    by_id = {f.question.id: f for f in funnels}
    assert by_id["port"].answer_chunks == ["c-server"]
    assert by_id["port"].ranks == {"keyword": 1, "bm25": 1}
    assert by_id["port"].lost_at("bm25") is None
    assert (by_id["cleaning"].in_html, by_id["cleaning"].in_text) == (True, False)
    assert by_id["cleaning"].lost_at("bm25") == "cleaning"
    assert (by_id["chunking"].in_text, by_id["chunking"].answer_chunks) == (True, [])
    assert by_id["chunking"].lost_at("bm25") == "chunking"
    assert by_id["fetch"].lost_at("bm25") == "fetch"
    assert by_id["none-x"].lost_at("bm25") is None and not by_id["none-x"].answerable

    summary = summarise(funnels, ["keyword", "bm25"])
    assert summary["bm25"]["questions"] == 4
    assert summary["bm25"]["recall@1"] == 0.25
    assert summary["bm25"]["mrr"] == 0.25
    assert (summary["bm25"]["lost_at_fetch"], summary["bm25"]["lost_at_cleaning"],
            summary["bm25"]["lost_at_chunking"], summary["bm25"]["lost_at_selection"]) == (1, 1, 1, 0)


def test_answer_ranked_below_k_is_lost_at_selection(db: Path) -> None:
    question = EvalQuestion("tomato", "Which port does the server use?", ("tomatoes grow well",), URL)
    with RunStore.open(db) as store:
        [funnel] = evaluate(Selector(store.conn, ensure_fts=store.load_fts), store, [question], ["keyword"])
    assert funnel.answer_chunks == ["c-garden"]
    assert funnel.ranks["keyword"] is None  # no keyword of the question is in the garden chunk
    assert funnel.lost_at("keyword") == "selection"


def test_html_text_drops_scripts_and_tags() -> None:
    assert "alert" not in html_text("<p>a &amp; b</p><script>alert(1)</script>")
    assert "a & b" in html_text("<p>a &amp; b</p><script>alert(1)</script>")


@pytest.mark.e2e
def test_eval_command_prints_json(db: Path, tmp_path: Path) -> None:
    job = tmp_path / "questions.yaml"
    job.write_text(
        "name: evaltest\nquestions:\n"
        f"  - id: port\n    question: Which port does the server use?\n    url: {URL}\n    expect: [server port is 8080]\n"
        "  - id: none-x\n    question: What is the capital of France?\n",
        encoding="utf-8",
    )
    done = subprocess.run([sys.executable, "-m", "jobs.cli", "eval", str(job), "--db", str(db), "--method", "bm25",
                           "--method", "keyword", "--json"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["methods"] == ["bm25", "keyword"]
    assert report["summary"]["bm25"]["recall@1"] == 1.0
    assert [q["id"] for q in report["questions"]] == ["port", "none-x"]
    assert report["questions"][0]["lost_at"] == {"bm25": None, "keyword": None}


@pytest.mark.e2e
def test_eval_without_expect_phrases_is_a_usage_error(db: Path, tmp_path: Path) -> None:
    job = tmp_path / "questions.yaml"
    job.write_text("name: evaltest\nquestions:\n  - What is the capital of France?\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "jobs.cli", "eval", str(job), "--db", str(db)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("Error: ") and "expect" in done.stderr and "Traceback" not in done.stderr


def test_html_text_joins_inline_markup_and_separates_blocks() -> None:
    # "(default: <code>True</code>)" must read "(default: True)", not "(default: True )".
    assert contains_any(html_text("<dd>the flag (default: <code>True</code>) is on</dd>"), ["(default: True)"])
    assert contains_any(html_text("<p>use <a href='#x'><em>json</em></a>.dumps()</p>"), ["use json.dumps()"])
    assert normalise(html_text("<p>one</p><p>two</p><li>three</li>")) == "one two three"
    assert "ignored" not in html_text("<p>a</p><!-- ignored --><style>p{}</style>")


def test_normalise_folds_curly_quotes() -> None:
    assert normalise("\u2018spam\u2019 and \u201ceggs\u201d") == "'spam' and \"eggs\""


def test_question_whose_page_is_not_stored_is_lost_at_fetch(db: Path) -> None:
    question = EvalQuestion("missing", "Which port does the server use?", ("server port is 8080",), "http://docs.test/nowhere")
    with RunStore.open(db) as store:
        [funnel] = evaluate(Selector(store.conn, ensure_fts=store.load_fts), store, [question], ["bm25"])
    assert (funnel.in_html, funnel.in_text, funnel.answer_chunks) == (False, False, [])
    assert funnel.lost_at("bm25") == "fetch"
    assert summarise([funnel], ["bm25"])["bm25"]["lost_at_fetch"] == 1


def test_render_table_names_the_loss_per_method_and_fits_long_ids(db: Path) -> None:
    questions = [
        EvalQuestion("a-rather-long-question-identifier", "Which port does the server use?", ("server port is 8080",), URL),
        EvalQuestion("tomato", "Which port does the server use?", ("tomatoes grow well",), URL),
        QUESTIONS[1],
    ]
    methods = ["bm25", "keyword"]
    with RunStore.open(db) as store:
        funnels = evaluate(Selector(store.conn, ensure_fts=store.load_fts), store, questions, methods)
    lines = render_table(funnels, summarise(funnels, methods), methods).splitlines()
    rows = {line.split()[0]: line for line in lines[3:6]}
    header = lines[2]
    assert header.index("html") == rows["a-rather-long-question-identifier"].index("yes")  # columns line up
    assert rows["a-rather-long-question-identifier"].split()[-1] == "1"  # nothing lost: no stage named
    assert rows["tomato"].endswith(" bm25=selection keyword=selection")  # every method is named, not the first
    assert rows["cleaning"].endswith(" cleaning")


class _FixedEmbedder:
    """Vectors chosen so that every cosine in the test is known: the chunks are two axes."""

    VECTORS = {
        "server port": [1.0, 0.0, 0.0],
        "Tomatoes grow": [0.0, 1.0, 0.0],
        "Which port": [1.0, 0.0, 0.0],  # best similarity 1.0 (the server chunk)
        "Where do tomatoes": [0.56, 0.83, 0.0],  # best ≈ .829 (the garden chunk)
        "capital of France": [0.5, 0.5, 0.7071],  # best .5: the pages cannot answer it
    }

    def embed(self, texts: Any, *, model: str | None = None) -> list[list[float]]:
        return [next(v for key, v in self.VECTORS.items() if key in text) for text in texts]


def test_eval_suggests_the_highest_min_similarity_that_keeps_every_answerable_question(db: Path) -> None:
    questions = [
        EvalQuestion("port", "Which port does the server use?", ("server port is 8080",), URL),
        EvalQuestion("tomato", "Where do tomatoes grow well?", ("tomatoes grow well",), URL),
        EvalQuestion("none-x", "What is the capital of France?", ()),
    ]
    with RunStore.open(db) as store:
        selector = Selector(store.conn, embedder=_FixedEmbedder(), embedding_model="fixed", ensure_fts=store.load_fts)
        funnels = evaluate(selector, store, questions, ["bm25", "embedding"])
    tomato_best = 0.83 / math.hypot(0.56, 0.83)
    assert [round(f.best_similarity["embedding"], 3) for f in funnels] == [1.0, round(tomato_best, 3), 0.5]
    assert all("bm25" not in f.best_similarity for f in funnels)  # bm25 has no similarity to offer

    summary = summarise(funnels, ["bm25", "embedding"])
    assert "min_similarity" not in summary["bm25"]
    floor = summary["embedding"]["min_similarity"]
    assert floor["value"] == 0.82  # rounded down: a floor of .83 would silence the tomato question
    assert (floor["unanswerable_skipped"], floor["unanswerable"]) == (1, 1)
    assert floor["unanswerable_highest"] == 0.5
    table = render_table(funnels, summary, ["bm25", "embedding"])
    assert "embedding: selection.min_similarity 0.82 keeps every answerable question" in table
    assert "answers 1 of 1 unanswerable questions without the LLM" in table


def test_chunks_of_also_urls_pages_count_as_right_chunks(db: Path) -> None:
    faq, other = "http://docs.test/faq", "http://docs.test/other"
    with RunStore.open(db) as store:
        for url, chunk_id, text in ((faq, "c-faq", "Yes: port 8080 is the default for the server."),
                                    (other, "c-other", "A copy: port 8080 is the default, says this page.")):
            record = PageRecord(url=url, final_url=url, status=200, fetched_at=utcnow(), content_type="text/html",
                                etag=None, last_modified=None, content_hash=chunk_id, title="FAQ", lang="en",
                                extractor="main", html_bytes=len(text), text_bytes=len(text), text=text, html=text)
            store.save_page(record, [Chunk(chunk_id, 0, ("FAQ",), text, estimate_tokens(text), chunk_id)],
                            crawl_run_id=None)
        store.rebuild_fts()
        question = EvalQuestion("port", "Which port does the server use?",
                                ("server port is 8080", "port 8080 is the default"), URL, also_urls=(faq,))
        [funnel] = evaluate(Selector(store.conn, ensure_fts=store.load_fts), store, [question], ["bm25"])
    # The other page holds the phrase too, but only the pages named in the question answer it.
    assert funnel.answer_chunks == ["c-faq", "c-server"]
    assert (funnel.in_html, funnel.in_text) == (True, True)  # the funnel stages still read `url`
    assert funnel.ranks["bm25"] is not None


# -- answer in the prompt: what the answerer really sends ----------------------------------------------

# bm25 ranks the server chunk first (port, server, and "Server" in its heading) and the garden chunk
# second (tomatoes): with one source only the first is sent.
BOTH = "Which port does the server use? And tomatoes?"


def test_answer_ranked_but_not_packed_is_lost_at_packing_and_found_by_the_wider_retry(db: Path) -> None:
    question = EvalQuestion("tomato", BOTH, ("tomatoes grow well",), URL)
    with RunStore.open(db) as store:
        [funnel] = evaluate(Selector(store.conn, ensure_fts=store.load_fts), store, [question], ["bm25"],
                            Packing(top_k=1, token_budget=3000, retry_factor=2))
    assert funnel.ranks["bm25"] == 2 and funnel.lost_at("bm25") is None  # R@5 counts it as found ...
    assert funnel.in_prompt["bm25"] is False  # ... but the model would not see it
    assert funnel.lost_before_prompt("bm25") == "packing"
    assert funnel.in_prompt_wider["bm25"] is True  # the retry sends two sources
    assert funnel.sources_sent["bm25"] == 1 and funnel.prompt_tokens["bm25"] > 0
    summary = summarise([funnel], ["bm25"])["bm25"]
    assert (summary["answer_in_prompt"], summary["answer_in_prompt_wider"], summary["recall@5"]) == (0.0, 1.0, 1.0)
    assert summary["lost_at_packing"] == 1


@pytest.mark.parametrize("top_k", [1, 2])
def test_answer_in_prompt_agrees_with_the_prompt_the_answerer_builds(db: Path, top_k: int) -> None:
    question = EvalQuestion("tomato", BOTH, ("tomatoes grow well",), URL)
    with RunStore.open(db) as store:
        selector = Selector(store.conn, ensure_fts=store.load_fts)
        [funnel] = evaluate(selector, store, [question], ["bm25"], Packing(top_k=top_k, token_budget=3000))
        settings = AskSettings(method="bm25", top_k=top_k, token_budget=3000, dry_run=True)
        outcome = QuestionAnswerer(store, selector, None, settings).answer(QuestionSpec("tomato", BOTH))
    prompt = outcome.attempts[0].prompt
    sources_part = prompt[prompt.index("<sources>"):prompt.index("</sources>")]
    assert funnel.in_prompt["bm25"] is contains_any(sources_part, question.expect) is (top_k == 2)
    assert len(outcome.attempts[0].sources) == funnel.sources_sent["bm25"]


@pytest.mark.e2e
def test_eval_command_reports_answer_in_prompt_at_the_given_budget(db: Path, tmp_path: Path) -> None:
    job = tmp_path / "questions.yaml"
    job.write_text(
        "name: evaltest\nquestions:\n"
        f"  - id: port\n    question: Which port does the server use?\n    url: {URL}\n    expect: [server port is 8080]\n",
        encoding="utf-8",
    )
    reports = []
    for budget in ("3000", "5"):  # 5 tokens: no source block fits
        done = subprocess.run([sys.executable, "-m", "jobs.cli", "eval", str(job), "--db", str(db), "--method", "bm25",
                               "--budget", budget, "--json"], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        reports.append(json.loads(done.stdout))
    wide, tiny = reports
    assert wide["packing"]["token_budget"] == 3000 and tiny["packing"]["token_budget"] == 5
    assert wide["summary"]["bm25"]["answer_in_prompt"] == 1.0 and wide["questions"][0]["in_prompt"] == {"bm25": True}
    assert tiny["summary"]["bm25"]["answer_in_prompt"] == 0.0 and tiny["summary"]["bm25"]["recall@1"] == 1.0
    table = subprocess.run([sys.executable, "-m", "jobs.cli", "eval", str(job), "--db", str(db), "--method", "bm25"],
                           cwd=REPO, capture_output=True, text=True, timeout=120).stdout
    assert "in prompt" in table and "packing" in table
