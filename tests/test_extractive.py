"""The LLM-free answerer: best-overlapping sentences, cited verbatim, so validation passes."""

from __future__ import annotations

import pytest

from jobs.extractive import STOP_WORDS, answer_extractively, content_words, stem
from jobs.prompt import NOT_ENOUGH_INFORMATION, Source, number_sources
from jobs.validate import validate_answer

SOURCES = number_sources(
    [
        (
            "c-port",
            "https://example.org/server",
            "Server › Options",
            "The server has many options. By default the server listens on port 8080; "
            "change it with --port. Logs go to stderr.",
        ),
        (
            "c-install",
            "https://example.org/install",
            "Install",
            "Installation\n\nInstall the package with pip. It requires Python 3.11 or newer.",
        ),
        (
            "c-cron",
            "https://example.org/cron",
            "Schedule",
            "Jobs are scheduled with cron. Each run stores its answers.",
        ),
    ]
)


def test_content_words_rule() -> None:
    assert content_words("What is the DEFAULT port, for “webqa”? Use python3.11 (required).") == [
        "default",
        "port",
        "webqa",
        "python3.11",
        "required",
    ]
    assert "what" in STOP_WORDS and "which" in STOP_WORDS
    assert all(len(w) > 3 for w in content_words("a an the dog cats ox extraordinary"))


def test_stem_meets_word_forms() -> None:
    assert stem("installs") == stem("installed") == stem("installing") == stem("install")
    assert stem("libraries") == stem("library")
    assert stem("files") == stem("file")
    assert stem("classes") == stem("class")
    assert stem("status") == "status"
    assert stem("configure") == stem("configured") == stem("configuring")
    assert stem("stopped") == stem("stop")


def test_picks_the_sentence_with_the_answer() -> None:
    result = answer_extractively("Which port does the server listen on by default?", SOURCES)
    port_source = next(s for s in SOURCES if s.chunk_id == "c-port")
    assert result["citations"][0] == {
        "source": port_source.number,
        "quote": "By default the server listens on port 8080; change it with --port.",
    }
    assert result["answer"].startswith(
        f"By default the server listens on port 8080; change it with --port. [{port_source.number}]"
    )
    assert result["confidence"] == "high"
    # "The server has many options." shares only already-covered words: adding it says nothing new.
    assert len(result["citations"]) == 1


def test_citations_pass_validation() -> None:
    for question in ("Which port does the server listen on?", "How do I install the package with pip?", "How are jobs scheduled?"):
        result = answer_extractively(question, SOURCES)
        assert result["citations"], question
        validation = validate_answer(result, SOURCES)
        assert validation.grounded, (question, validation.failed)
        assert all(c.similarity == 1.0 for c in validation.checks)


def test_uses_several_sentences_for_several_keywords() -> None:
    result = answer_extractively("Install requirements: which Python version, and how are jobs scheduled?", SOURCES)
    quotes = [c["quote"] for c in result["citations"]]
    assert "It requires Python 3.11 or newer." in quotes
    assert "Jobs are scheduled with cron." in quotes
    assert len(quotes) <= 3


def test_max_sentences_is_respected() -> None:
    result = answer_extractively("Install requirements: which Python version, and how are jobs scheduled?", SOURCES, max_sentences=1)
    assert len(result["citations"]) == 1
    with pytest.raises(ValueError):
        answer_extractively("port?", SOURCES, max_sentences=0)


def test_partial_overlap_lowers_confidence() -> None:
    result = answer_extractively("Which port does the database replica use for replication?", SOURCES)
    assert result["citations"]
    assert result["confidence"] == "low"  # 1 of 4 keywords (port, database, replica, replication)


def test_not_enough_information_when_nothing_overlaps() -> None:
    expected = {"answer": NOT_ENOUGH_INFORMATION, "citations": [], "confidence": "low"}
    assert answer_extractively("Who painted the Mona Lisa?", SOURCES) == expected
    assert answer_extractively("Which port?", []) == expected
    assert answer_extractively("What is it?", SOURCES) == expected  # no keyword at all
    assert validate_answer(expected, SOURCES).grounded


def test_long_run_on_text_is_cut_into_verbatim_pieces() -> None:
    text = " ".join(f"item{i}" for i in range(100)) + " finally the answer keyword zebra appears here"
    src = [Source(1, "c", "u", "", text)]
    result = answer_extractively("Where does the zebra appear?", src)
    (citation,) = result["citations"]
    assert "zebra" in citation["quote"] and len(citation["quote"].split()) <= 40
    assert validate_answer(result, src).grounded


def test_deterministic() -> None:
    question = "Install requirements: which Python version, and how are jobs scheduled?"
    assert answer_extractively(question, SOURCES) == answer_extractively(question, list(SOURCES))
