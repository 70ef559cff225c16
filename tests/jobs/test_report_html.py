"""report.html's pure parts: the text directive's encoding, which links are made, and escaping."""

from __future__ import annotations

import io
from urllib.parse import unquote

from jobs.history import AnswerChange
from jobs.report_html import _before, fragment_link, text_fragment, write_html_report


def test_the_spec_syntax_characters_are_percent_encoded() -> None:
    directive = text_fragment("Ports 80-443, TLS & HTTP/2")
    assert directive == ":~:text=Ports%2080%2D443%2C%20TLS%20%26%20HTTP%2F2"
    assert unquote(directive.removeprefix(":~:text=")) == "Ports 80-443, TLS & HTTP/2"


def test_a_long_quote_is_a_range_of_its_first_and_last_words_and_ellipses_join_fragments() -> None:
    words = " ".join(f"w{i}" for i in range(1, 16))
    assert text_fragment(words) == ":~:text=w1%20w2%20w3%20w4,w12%20w13%20w14%20w15"
    # An ellipsis: a range from the first fragment's start to the last one's end, no term across a gap.
    assert text_fragment("one two three … four five six") == ":~:text=one%20two%20three,four%20five%20six"
    assert text_fragment("the fee is 20 … payable by 1 March") == ":~:text=the%20fee%20is%2020,payable%20by%201%20March"
    assert text_fragment("a b c d e f … g") == ":~:text=a%20b%20c%20d,g"
    assert text_fragment("   ") is None


def test_links_only_to_http_pages_and_only_verified_quotes_get_a_fragment() -> None:
    cite = {"url": "https://x.test/a", "valid": True, "matched": "listens on port 8731"}
    assert fragment_link(cite) == "https://x.test/a#:~:text=listens%20on%20port%208731"
    assert fragment_link({**cite, "valid": False}) == "https://x.test/a"
    assert fragment_link({**cite, "link": "https://x.test/a.pdf#page=3"}) == "https://x.test/a.pdf#page=3"
    assert fragment_link({**cite, "url": "javascript:alert(1)"}) is None


def test_everything_from_pages_is_escaped() -> None:
    out = io.StringIO()
    hostile = '<script>alert("x")</script>'
    write_html_report(out, f"job {hostile}", [f"notice: {hostile}"], [{
        "question_id": "q1", "question": hostile, "answer": f"It says {hostile} \x1b[31m", "grounded": True,
        "confidence": "high", "type": "text", "answered": True, "value": None,
        "citations": [{"source": 1, "quote": hostile, "valid": True, "url": "javascript:alert(1)",
                       "heading_path": hostile, "matched": hostile}]}])
    page = out.getvalue()
    assert "<script>" not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "href=\"javascript" not in page and "\\x1b[31m" in page and "\x1b" not in page


def test_a_quote_from_a_heading_into_its_paragraph_is_linked_within_blocks() -> None:
    # Chunk text keeps a section's heading on a line of its own; a browser matches a term within one block.
    matched = "Configuration\nThe dashboard server listens on port 8731 unless another port is configured."
    terms = [unquote(t) for t in text_fragment(matched).removeprefix(":~:text=").split(",")]  # type: ignore[union-attr]
    assert terms == ["The dashboard server listens", "another port is configured."]
    # Lines of a quote are never joined into one term; a short line is kept when there is nothing longer.
    assert text_fragment("Install it with pip.\nThen run widgetctl to check it.") == \
        ":~:text=Install%20it%20with%20pip.,widgetctl%20to%20check%20it."
    assert text_fragment("Setup\nRun it") == ":~:text=Setup,Run%20it"


def test_an_empty_answer_is_said_now_and_before() -> None:
    # A reply of blanks reads "(empty answer)", as in report.md and `webqa history`, not an empty paragraph.
    out = io.StringIO()
    write_html_report(out, "job", [], [{"question_id": "q1", "question": "Which port?", "answer": " \n ",
                                        "grounded": False, "confidence": "low", "citations": []}])
    assert '<p class="meta">(empty answer)</p>' in out.getvalue() and "<p> \n </p>" not in out.getvalue()
    change = AnswerChange("q1", "Which port?", "changed", {"run_id": 3, "answer": "  "}, None)
    assert _before(change) == '<p class="meta">Before (run 3): (empty answer)</p>'


def test_the_answer_before_shows_a_value_only_for_a_typed_question() -> None:
    text = {"run_id": 2, "answer": "Port 8731 [1].", "value": '"Port 8731 [1]."', "value_type": "text"}
    assert _before(AnswerChange("q1", "Which port?", "changed", text, None)) == (
        '<p class="meta">Before (run 2): Port 8731 [1].</p>')
    number = {**text, "value": "8731", "value_type": "number"}
    assert _before(AnswerChange("q1", "Which port?", "changed", number, None)) == (
        '<p class="meta">Before (run 2): value 8731 · Port 8731 [1].</p>')
