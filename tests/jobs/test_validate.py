"""Citation checks: quotes must be the very words of the source they cite, allowing only the
differences listed in ``jobs.validate.TOLERATED`` (issue 13: flipped words, stitched fragments,
contentless quotes and malformed source numbers must not ground an answer)."""

from __future__ import annotations

import html
import random
import re
from pathlib import Path

import pytest

from jobs.prompt import NOT_ENOUGH_INFORMATION, Source
from jobs.validate import (
    MAX_GAP_WORDS,
    TOLERATED,
    CitationCheck,
    coerce_answer,
    find_quote,
    is_not_enough_information,
    normalise,
    validate_answer,
)

INSTALL = (
    "Installation\n\nTo install webqa, run “pip install webqa” inside a virtual environment. "
    "It needs Python 3.11 or newer — older versions are not supported.\n"
    "The crawler   respects robots.txt by default, and waits one second between requests."
)
SCHEDULE = "Jobs are scheduled with cron. Each run writes one row per question into the answers table."
SOURCES = [
    Source(1, "c1", "https://example.org/install", "Install", INSTALL),
    Source(2, "c2", "https://example.org/cron", "Schedule", SCHEDULE),
]


def reply(*citations: tuple[int, str], answer: str = "An answer [1].") -> dict[str, object]:
    return {
        "answer": answer,
        "citations": [{"source": n, "quote": q} for n, q in citations],
        "confidence": "high",
    }


# ---------------------------------------------------------------------------------- normalise


def test_normalise_unifies_typography_case_and_space() -> None:
    assert normalise("  Ｈéllo\u00a0\u00a0“World” — it’s…\n done  ") == 'héllo "world" - it\'s... done'
    assert normalise("e\u0301") == normalise("é")  # combining accent equals the precomposed letter
    assert normalise("soft\u00adhyphen\u200b") == "softhyphen"


# --------------------------------------------------------------------------------- find_quote


def test_exact_quote() -> None:
    matched, similarity = find_quote("run “pip install webqa” inside a virtual environment", INSTALL)
    assert matched == "run “pip install webqa” inside a virtual environment"
    assert similarity == 1.0


def test_case_whitespace_and_quote_style_differences_are_exact() -> None:
    matched, similarity = find_quote('THE CRAWLER respects\nrobots.txt   BY default', INSTALL)
    assert matched == "The crawler   respects robots.txt by default"
    assert similarity == 1.0
    matched, similarity = find_quote('run "pip install webqa" inside', INSTALL)
    assert matched == "run “pip install webqa” inside" and similarity == 1.0


def test_wrapping_quotes_and_dropped_punctuation_pass() -> None:
    matched, similarity = find_quote('"It needs Python 3.11 or newer older versions are not supported"', INSTALL)
    assert matched == "It needs Python 3.11 or newer — older versions are not supported"
    assert similarity == 1.0


def test_a_typo_is_a_different_word_and_fails() -> None:
    # Issue 13: character similarity let "disabled" pass for "enabled"; a misspelt word is no safer.
    matched, similarity = find_quote("It needs Pyhton 3.11 or newer", INSTALL)
    assert matched is None and 0 < similarity < 1.0
    v = validate_answer(reply((1, "It needs Pyhton 3.11 or newer")), SOURCES)
    assert v.failed[0].reason == "quote not found in source 1: it differs at 'pyhton' where the source has 'Python'"


def test_ellipsis_joining_two_exact_pieces_passes() -> None:
    for sep in (" … ", "...", " [...] "):
        matched, similarity = find_quote(f"To install webqa{sep}waits one second between requests", INSTALL)
        assert matched == "To install webqa … waits one second between requests", sep
        assert similarity == 1.0


def test_ellipsis_pieces_out_of_order_fail() -> None:
    matched, _ = find_quote("waits one second between requests … To install webqa", INSTALL)
    assert matched is None


def test_changed_numbers_or_negations_never_pass() -> None:
    # Character-wise these are ~95% similar; the claims are different.
    assert find_quote("It needs Python 3.12 or newer", INSTALL)[0] is None
    assert find_quote("older versions are supported", INSTALL)[0] is None
    # Nor does an exact substring that stops inside a number.
    assert find_quote("It needs Python 3.1", INSTALL)[0] is None


def test_unrelated_quote_fails() -> None:
    matched, similarity = find_quote("The moon is made of green cheese and nothing else", INSTALL)
    assert matched is None and similarity < 0.9


# A quadratic scan takes minutes here; the timeout catches that without timing the machine.
@pytest.mark.timeout(30)
def test_matching_is_bounded_on_large_repetitive_text() -> None:
    rng = random.Random(7)
    vocab = "the crawler fetches pages and stores sections with heading paths while ranking chunks".split()
    text = " ".join(rng.choice(vocab) + ("." if rng.random() < 0.1 else "") for _ in range(4000))
    words = text.split()
    present = " ".join(words[2000:2030])
    changed = " ".join([*words[2000:2015], "disabled", *words[2016:2030]])
    absent = " ".join(rng.choice(vocab) for _ in range(30))
    matched, similarity = find_quote(present, text)
    assert matched is not None and similarity == 1.0
    assert find_quote(changed, text)[0] is None
    assert find_quote(absent, text)[0] is None


@pytest.mark.timeout(30)
def test_worst_case_periodic_text_and_quote_stay_linear() -> None:
    # "a a a … a" against "a a … a b": naive matching is quadratic; 50 000 x 20 000 words would not finish.
    source = "a " * 50_000
    quote = "a " * 20_000 + "b"
    assert find_quote(quote, source)[0] is None
    assert find_quote("a a a a", source)[0] == "a a a a"


@pytest.mark.timeout(30)
def test_a_huge_quote_is_rejected_without_normalising_it() -> None:
    # A 100 MB reply once made the validator raise MemoryError; far longer than its source, it cannot be in it.
    huge = "é " * 50_000_000
    v = validate_answer(reply((1, huge)), SOURCES)
    assert not v.grounded
    assert v.failed[0].reason == "quote not found in source 1: the quote is longer than the source"


# ----------------------------------------------------------------------------- validate_answer


def test_valid_citations_are_grounded() -> None:
    v = validate_answer(reply((1, "run “pip install webqa” inside"), (2, "Jobs are scheduled with cron.")), SOURCES)
    assert v.grounded and not v.failed and not v.not_enough_information
    assert [c.valid for c in v.checks] == [True, True]
    assert v.checks[0].matched == "run “pip install webqa” inside"
    assert v.checks[1] == CitationCheck(2, "Jobs are scheduled with cron.", True, None, "Jobs are scheduled with cron.", 1.0)


def test_quote_from_another_source_fails_for_the_cited_source() -> None:
    v = validate_answer(reply((1, "Jobs are scheduled with cron")), SOURCES)
    assert not v.grounded
    (check,) = v.failed
    assert check.source == 1 and not check.valid and check.matched is None
    assert check.reason == "quote not found in source 1 (found in source 2)"


def test_source_not_sent_fails() -> None:
    v = validate_answer(reply((7, "run pip install webqa inside")), SOURCES)
    assert not v.grounded
    assert v.failed[0].reason == "source 7 was not sent"


def test_empty_quote_fails() -> None:
    for quote in ("", "   ", "…", '""'):
        v = validate_answer(reply((1, quote)), SOURCES)
        assert not v.grounded, quote
        assert v.failed[0].reason == "empty quote", quote


def test_one_bad_citation_spoils_grounding() -> None:
    v = validate_answer(reply((1, "run pip install webqa inside"), (2, "invented sentence about nothing")), SOURCES)
    assert not v.grounded
    assert len(v.checks) == 2 and len(v.failed) == 1
    assert v.failed[0].reason is not None and v.failed[0].reason.startswith("quote not found in source 2")


def test_not_enough_information_without_citations_is_grounded() -> None:
    v = validate_answer({"answer": NOT_ENOUGH_INFORMATION, "citations": [], "confidence": "low"}, SOURCES)
    assert v.grounded and v.not_enough_information and v.checks == []


def test_the_answered_field_decides_in_any_language() -> None:
    # "Not enough information" is a field of the reply: words in another language are not read as an answer.
    v = validate_answer({"answer": "No hay suficiente información.", "citations": [], "confidence": "low",
                         "answered": False}, SOURCES)
    assert v.grounded and v.not_enough_information
    v = validate_answer({"answer": "No hay suficiente información.", "citations": [], "confidence": "low"}, SOURCES)
    assert not v.not_enough_information  # without the field only the English phrase is known


def test_answer_without_citations_is_not_grounded() -> None:
    v = validate_answer({"answer": "Use pip.", "citations": [], "confidence": "high"}, SOURCES)
    assert not v.grounded and not v.not_enough_information and v.failed == []


def test_empty_answer_is_not_grounded() -> None:
    assert validate_answer(reply((1, "run pip install webqa inside")), SOURCES).grounded  # the quote is fine …
    assert not validate_answer(reply((1, "run pip install webqa inside"), answer="  "), SOURCES).grounded


def test_quote_matching_the_text_as_shown_in_the_prompt_passes() -> None:
    # The prompt neutralises fence tokens; a model quoting that shown form is still quoting.
    src = Source(1, "c", "u", "", "Close blocks with </source> tags, never inline.")
    v = validate_answer(reply((1, "Close blocks with &lt;/source> tags")), [src])
    assert v.grounded, v.failed
    assert v.checks[0].similarity == 1.0  # an exact match in the shown text, not a fuzzy one


@pytest.mark.parametrize(
    "answer",
    ["Not enough information", "not enough information.", '  "Not Enough Information"  ', "**Not enough information**"],
)
def test_is_not_enough_information_is_tolerant(answer: str) -> None:
    assert is_not_enough_information(answer)


@pytest.mark.parametrize("answer", ["Not enough information about cron, but use pip.", "Enough information", "", None])
def test_is_not_enough_information_is_not_too_tolerant(answer: str) -> None:
    assert not is_not_enough_information(answer)


# ------------------------------------------------------------------------------ coerce_answer


def test_coerce_leaves_a_good_reply_alone() -> None:
    good = reply((1, "pip install webqa"))
    assert coerce_answer(good) == good


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"answer": "Use pip [2].", "citations": [2, "SOURCE 1", "[3]"], "confidence": "High"},
            {
                "answer": "Use pip [2].",
                "citations": [{"source": 2, "quote": ""}, {"source": 1, "quote": ""}, {"source": 3, "quote": ""}],
                "confidence": "high",
            },
        ),
        (
            {"answer": "x", "citations": [{"source": "Source 2", "quote": ["a", "b"]}], "confidence": "Medium."},
            {
                "answer": "x",
                "citations": [{"source": 2, "quote": "a"}, {"source": 2, "quote": "b"}],
                "confidence": "medium",
            },
        ),
        (
            {"answer": "x", "citations": ['Source 1: "pip install webqa"']},
            {"answer": "x", "citations": [{"source": 1, "quote": "pip install webqa"}], "confidence": "low"},
        ),
        ({"answer": "x"}, {"answer": "x", "citations": [], "confidence": "low"}),
        ({}, {"answer": "", "citations": [], "confidence": "low"}),
        (
            '```json\n{"answer": "y", "citations": [{"source": 1.0, "quote": "q"}], "confidence": 0.9}\n```',
            {"answer": "y", "citations": [{"source": 1, "quote": "q"}], "confidence": "high"},
        ),
        ("plain text, not JSON", {"answer": "plain text, not JSON", "citations": [], "confidence": "low"}),
        (None, {"answer": "", "citations": [], "confidence": "low"}),
        ([1, 2], {"answer": "", "citations": [], "confidence": "low"}),
        (
            {"answer": None, "citations": {"source": True, "quote": "q"}, "confidence": "unsure"},
            {
                "answer": "",
                "citations": [{"source": None, "quote": "q", "source_error": "source True is not a whole number"}],
                "confidence": "low",
            },
        ),
    ],
)
def test_coerce_odd_shapes(data: object, expected: dict[str, object]) -> None:
    assert coerce_answer(data) == expected


def test_coerce_never_raises_on_hostile_objects() -> None:
    class Weird:
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert coerce_answer({"answer": Weird(), "citations": [Weird()]}) == {"answer": "", "citations": [], "confidence": "low"}


def test_citation_with_unreadable_source_is_reported_not_dropped() -> None:
    v = validate_answer({"answer": "x", "citations": [{"quote": "pip install webqa"}], "confidence": "low"}, SOURCES)
    assert not v.grounded
    assert v.failed[0].reason == "citation has no source number"


def test_validate_accepts_model_shapes_via_coerce() -> None:
    v = validate_answer({"answer": "Use pip [1].", "citations": ['SOURCE 1: "pip install webqa inside a virtual environment"'],
                         "confidence": "HIGH"}, SOURCES)
    assert v.grounded and v.checks[0].matched == "pip install webqa” inside a virtual environment"


# ------------------------------------------------------------------- issue 13: adversarial quotes

TELEMETRY = (
    "Telemetry is enabled by default in every release of the Lumen desktop application. "
    "Administrators can change the setting in the policy file. Crash reports are deleted after thirty days. "
    "We never sell your personal data to advertisers or to anyone else. "
    "The update check sends only the version number and the operating system. "
    "Logs stay on your own machine unless you copy them somewhere yourself. "
    "The mobile companion app has its own policy, published separately on the website. "
    "Is the update check optional? Yes. It can be turned off in the settings."
)
TELEMETRY_SOURCES = [Source(1, "t1", "https://lumen.example/privacy", "Privacy", TELEMETRY)]


def check(quote: str, source: object = 1) -> CitationCheck:
    (result,) = validate_answer({"answer": "An answer [1].", "citations": [{"source": source, "quote": quote}]},
                                TELEMETRY_SOURCES).checks
    return result


@pytest.mark.parametrize(
    ("quote", "word"),
    [
        ("Telemetry is disabled by default in every release of the Lumen desktop application.", "disabled"),
        ("Crash reports are restored after thirty days.", "restored"),
        ("Telemetry is enabled by default in every release of the Lumen mobile application.", "mobile"),
        ("Administrators can hide the setting in the policy file.", "hide"),
        ("Users can change the setting in the policy file.", "users"),
        ("Crash reports are deleted after thirty-one days.", "thirtyone"),
        ("We always sell your personal data to advertisers", "always"),
        ("We never sell your personal data to advertisers and to anyone else.", "and"),
    ],
)
def test_row1_a_quote_differing_by_one_word_is_not_grounded(quote: str, word: str) -> None:
    result = check(quote)
    assert not result.valid and result.matched is None
    assert result.reason is not None and result.reason.startswith("quote not found in source 1: it differs at ")
    assert f"at {word!r}" in result.reason


def test_row1_the_reason_names_the_source_word_too() -> None:
    result = check("Telemetry is disabled by default in every release of the Lumen desktop application.")
    assert result.reason == "quote not found in source 1: it differs at 'disabled' where the source has 'enabled'"
    assert 0.5 < result.similarity < 1.0  # most words matched: a diagnostic, never a pass


def test_row1_added_or_dropped_words_are_differences_too() -> None:
    assert not check("Telemetry is enabled by default in every single release of the Lumen desktop").valid
    assert not check("Telemetry is enabled in every release of the Lumen desktop application").valid
    assert not check("Telemetry is not enabled by default in every release").valid


def test_row2_stitched_fragments_are_not_grounded() -> None:
    result = check("Telemetry is … never … sell … personal data")
    assert not result.valid and result.reason == "quote joins 4 fragments with ellipses; at most 3 are allowed"
    result = check("Telemetry is … never sell … personal data")
    assert not result.valid
    assert result.reason == "fragment 'telemetry is' between ellipses has fewer than 3 words"


def test_row2_fragments_far_apart_out_of_order_or_across_sources_are_not_grounded() -> None:
    far = check("Telemetry is enabled by default … it can be turned off")
    assert not far.valid
    assert far.reason == f"quote not found in source 1: its fragments are not in this order within {MAX_GAP_WORDS} words of each other"
    backwards = check("never sell your personal data … Telemetry is enabled by default")
    assert not backwards.valid and backwards.reason is not None and "not in this order" in backwards.reason
    sources = [*TELEMETRY_SOURCES, Source(2, "c2", "u", "", SCHEDULE)]
    across = validate_answer(reply((1, "Telemetry is enabled by default … Jobs are scheduled with cron")), sources)
    assert not across.grounded
    assert across.failed[0].reason == "quote not found in source 1: fragment 2 'jobs are scheduled with cron' is not in it"


def test_row2_honest_ellipses_are_grounded() -> None:
    two = check("Telemetry is enabled by default … in the policy file")
    assert two.valid and two.matched == "Telemetry is enabled by default … in the policy file"
    three = check("We never sell your personal data … sends only the version number … stay on your own machine")
    assert three.valid
    # A gap of exactly MAX_GAP_WORDS words is still allowed; one more is not.
    words = [f"w{i}" for i in range(40)]
    text = "alpha beta gamma " + " ".join(words) + " delta epsilon zeta"
    assert find_quote(f"alpha beta gamma … {' '.join(words[MAX_GAP_WORDS:])} delta", text)[0] is not None
    assert find_quote("alpha beta gamma … w31 w32 w33", text)[0] is None
    assert find_quote("alpha beta gamma … w30 w31 w32", text)[0] is not None


def test_row3_a_quote_without_content_is_not_grounded() -> None:
    for quote in ("the", "default", "the policy file"):
        result = check(quote)
        assert not result.valid, quote
        words = len(quote.split())
        assert result.reason == (f"quote is too short: {words} word{'s' if words > 1 else ''}, fewer than 4, "
                                 "and not a whole sentence of source 1"), quote


def test_row3_four_words_or_a_whole_short_sentence_are_content() -> None:
    assert check("in the policy file").valid
    yes = check("Yes.")
    assert yes.valid and yes.matched == "Yes."
    assert check("Is the update check optional?").valid
    assert not check("update check optional").valid  # three words, part of a sentence


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("1; 7", "source '1; 7' is not a whole number"),
        ("1,2", "source '1,2' is not a whole number"),
        ("1 or 7", "source '1 or 7' is not a whole number"),
        (1.5, "source 1.5 is not a whole number"),
        (True, "source True is not a whole number"),
        (-1, "source -1 is not a positive whole number"),
        ("-1", "source '-1' is not a whole number"),
        (0, "source 0 is not a positive whole number"),
        ([1, 7], "source [1, 7] is not a whole number"),
        ("9" * 5000, None),  # no int() of thousands of digits
    ],
)
def test_row3_a_source_that_is_not_one_whole_number_is_invalid(source: object, reason: str | None) -> None:
    result = check("We never sell your personal data", source)
    assert not result.valid and result.source is None
    assert result.reason is not None
    assert result.reason == reason if reason else result.reason.endswith("is not a whole number")


@pytest.mark.parametrize("source", [1, "1", " 1 ", 1.0, "Source 1", "[1]", "#1", "SOURCE #1"])
def test_row3_whole_numbers_in_any_spelling_are_accepted(source: object) -> None:
    result = check("We never sell your personal data", source)
    assert result.valid and result.source == 1


def test_row3_bare_string_citations_follow_the_same_rule() -> None:
    bad = coerce_answer({"answer": "x", "citations": ["1; 7", "1,2 some quote"]})["citations"]
    assert [c["source"] for c in bad] == [None, None]
    assert bad[0]["source_error"] == "source '1; 7' is not a whole number"
    good = coerce_answer({"answer": "x", "citations": ["Source 1: we never sell", "2 - a quote"]})["citations"]
    assert good == [{"source": 1, "quote": "we never sell"}, {"source": 2, "quote": "a quote"}]


def test_coercing_twice_keeps_the_source_error() -> None:
    # jobs/answer.py coerces the reply, then validate_answer coerces it again.
    once = coerce_answer({"answer": "x", "citations": [{"source": "1; 7", "quote": "q"}]})
    assert coerce_answer(once) == once
    assert validate_answer(once, TELEMETRY_SOURCES).failed[0].reason == "source '1; 7' is not a whole number"


# ------------------------------------------------------------------ the tolerated set, on real text

REPO = Path(__file__).resolve().parents[2]
REAL_PAGES = [
    REPO / "demo/site/privacy/index.html",
    REPO / "demo/site/faq/index.html",
    REPO / "demo/site/configuration/index.html",
    REPO / "demo/site/install/index.html",
    REPO / "tests/support/pages/sphinx_like.html",
]


def real_sentences() -> list[tuple[str, str]]:
    """(page text as stored, sentence) for prose sentences of 6+ words on real pages."""
    from pipelines.chunk import split_sentences
    from pipelines.clean import clean_html

    out = []
    for page in REAL_PAGES:
        text = clean_html(page.read_text(encoding="utf-8"), "https://lumen.example/").text
        out += [(text, s) for s in split_sentences(text) if len(words(s)) >= 6 and "\n" not in s]
    return out


def words(sentence: str) -> list[str]:
    """Whitespace-separated words that hold a letter or digit (not "=" or "—")."""
    return [w for w in sentence.split() if any(ch.isalnum() for ch in w)]


def _curly(s: str) -> str:
    s = re.sub(r'"(\S)', "“\\1", s).replace('"', "”")
    return s.replace("'", "’")


def _straight(s: str) -> str:
    return s.translate(str.maketrans("“”‘’—–", "\"\"''--"))


# Each tolerated difference as a transformation of a real sentence (see TOLERATED).
TOLERATED_EDITS = {
    "curly quotes": _curly,
    "straight quotes and dashes": _straight,
    "newlines and double spaces": lambda s: s.replace(" ", "\n  ", 3).replace(" ", "  "),
    "non-breaking spaces": lambda s: s.replace(" ", "\u00a0"),
    "trailing period dropped": lambda s: s.rstrip(".!?:;"),
    "trailing period added": lambda s: s.rstrip(".!?:;") + ".",
    "upper case": str.upper,
    "lower case": str.lower,
    "substring of several words": lambda s: " ".join(words(s)[1:6]),
    "html entities": lambda s: html.escape(s).replace(" ", "&nbsp;", 2),
    "hyphens between letters dropped": lambda s: re.sub(r"(?<=[a-z])-(?=[a-z])", "", s),
    "wrapped in quotes and ellipses": lambda s: f"“… {s} …”",
    # Three words, then three more at most ten words on (an ellipsis gap within MAX_GAP_WORDS).
    "middle elided": lambda s: " ".join(words(s)[:3]) + " … " + " ".join(words(s)[min(13, len(words(s)) - 3):][:3]),
    "soft hyphen and zero-width space": lambda s: s.replace("e", "e\u00ad", 1).replace(" ", " \u200b", 1),
}


def test_the_tolerated_set_is_documented_where_users_read_it() -> None:
    security = (REPO / "SECURITY.md").read_text(encoding="utf-8")
    assert "## Quotes" in security
    assert len(TOLERATED) >= 8 and len(TOLERATED_EDITS) >= len(TOLERATED)


def test_real_sentences_with_tolerated_differences_are_accepted() -> None:
    pairs = real_sentences()
    assert len(pairs) >= 30  # the test would prove little on a handful
    rejected = [(name, edit(sentence)) for text, sentence in pairs for name, edit in TOLERATED_EDITS.items()
                if find_quote(edit(sentence), text)[0] is None]
    assert rejected == []


def test_real_sentences_with_one_word_changed_are_rejected() -> None:
    accepted = []
    for text, sentence in real_sentences():
        ws = words(sentence)
        i = next((i for i, w in enumerate(ws) if len(w) >= 4 and w.isalpha()), 0)
        substituted = " ".join([*ws[:i], "zebra" if ws[i].lower() != "zebra" else "horse", *ws[i + 1:]])
        negated = " ".join([*ws[:2], "not", *ws[2:]])
        swapped = " ".join([*ws[:i], ws[i + 1], ws[i], *ws[i + 2:]]) if i + 1 < len(ws) else negated
        for quote in (substituted, negated, swapped):
            if find_quote(quote, text)[0] is not None:
                accepted.append(quote)
    assert accepted == []
