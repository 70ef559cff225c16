"""split_by_headings / split_sentences / estimate_tokens."""

from __future__ import annotations

import hashlib
import re
import time
from xml.sax.saxutils import escape

import pytest

from pipelines.chunk import HEADING_SEPARATOR, Chunk, estimate_tokens, split_by_headings, split_sentences
from pipelines.clean import clean_html
from tests.support.corpus import CORPUS_DIR, MISSING, has_manual

URL = "https://docs.example.org/page.html"
CORPUS = CORPUS_DIR
corpus = pytest.mark.skipif(not has_manual(CORPUS), reason=MISSING)


def doc(*parts: str) -> str:
    return "<doc><main>" + "".join(parts) + "</main></doc>"


def h(level: int, text: str) -> str:
    return f'<head rend="h{level}">{escape(text)}</head>'


def p(text: str) -> str:
    return f"<p>{escape(text)}</p>"


def code(text: str) -> str:
    return f"<code>{escape(text)}</code>"


def prose(topic: str, n: int = 3) -> str:
    """n distinct sentences, ~14 tokens each."""
    return " ".join(f"The {topic} paragraph has sentence number {i} with a few extra words." for i in range(n))


# --------------------------------------------------------------------------- tokens


def test_estimate_tokens_formula() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("   \n ") == 0
    assert estimate_tokens("one two three four five six seven eight nine ten") == 13  # words * 1.3
    assert estimate_tokens("x" * 400) == 100  # chars / 4 wins for dense text
    assert estimate_tokens("a b") == 3  # ceil(2 * 1.3)


# --------------------------------------------------------------------------- sentences


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("One sentence. Another one! A third? Yes.", ["One sentence.", "Another one!", "A third?", "Yes."]),
        ("Use a tool, e.g. Black, to format. Then commit.", ["Use a tool, e.g. Black, to format.", "Then commit."]),
        ("Some formats, i.e. JSON and YAML, work. Others fail.", ["Some formats, i.e. JSON and YAML, work.", "Others fail."]),
        ("Ask Dr. Smith about it. She knows.", ["Ask Dr. Smith about it.", "She knows."]),
        ("Apples, pears etc. are fruit. Carrots are not.", ["Apples, pears etc. are fruit.", "Carrots are not."]),
        ("Released v1.0 in May. Version 3.11.2 followed.", ["Released v1.0 in May.", "Version 3.11.2 followed."]),
        ("Pi is about 3.14 in most uses. Tau is 6.28.", ["Pi is about 3.14 in most uses.", "Tau is 6.28."]),
        ("See https://example.com/a.b for details. Then run it.", ["See https://example.com/a.b for details.", "Then run it."]),
        ("Edit setup.py first. Then build.", ["Edit setup.py first.", "Then build."]),
        ("Call os.path.join(a, b). It returns a str.", ["Call os.path.join(a, b).", "It returns a str."]),
        ("Made in the U.S. by J. R. Smith. Shipped worldwide.", ["Made in the U.S. by J. R. Smith.", "Shipped worldwide."]),
        ('He said "stop." Then he left.', ['He said "stop."', "Then he left."]),
        ("1. Install the package first.", ["1. Install the package first."]),
        ("First paragraph.\n\nsecond paragraph starts lower-case.", ["First paragraph.", "second paragraph starts lower-case."]),
        ("No terminal punctuation here", ["No terminal punctuation here"]),
        ("", []),
    ],
)
def test_split_sentences(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


# --------------------------------------------------------------------------- heading paths


def test_heading_paths_push_and_pop() -> None:
    xml = doc(
        h(1, "Guide"), p(prose("guide")),
        h(2, "Install"), p(prose("install")),
        h(3, "Linux"), p(prose("linux")),
        h(3, "macOS"), p(prose("mac")),
        h(2, "Usage"), p(prose("usage")), h(4, "Details"), p(prose("details")),
        h(1, "Appendix"), p(prose("appendix")),
        h(3, "Skipped level"), p(prose("skipped")),
    )  # fmt: skip
    chunks = split_by_headings(xml, URL, min_tokens=0)
    assert [c.heading_path for c in chunks] == [
        ("Guide",),
        ("Guide", "Install"),
        ("Guide", "Install", "Linux"),
        ("Guide", "Install", "macOS"),
        ("Guide", "Usage"),
        ("Appendix",),
        ("Appendix", "Skipped level"),
    ]
    usage = chunks[4]
    assert usage.heading == "Guide › Usage" == HEADING_SEPARATOR.join(usage.heading_path)
    # h4 stays inside its section as a line of text; the section's own heading is not repeated.
    assert usage.text == prose("usage") + "\n\nDetails\n\n" + prose("details")
    assert not usage.text.startswith("Usage")
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))


def test_heading_without_body_only_appears_in_paths() -> None:
    chunks = split_by_headings(doc(h(1, "Top"), h(2, "Child"), p(prose("child"))), URL, min_tokens=0)
    assert [c.heading_path for c in chunks] == [("Top", "Child")]


def test_content_before_first_heading_has_empty_path() -> None:
    chunks = split_by_headings(doc(p(prose("lede", 4)), h(2, "Body"), p(prose("body", 4))), URL, min_tokens=0)
    assert [c.heading_path for c in chunks] == [(), ("Body",)]
    assert chunks[0].heading == ""


def test_page_without_headings_still_chunks() -> None:
    paragraphs = [p(prose(f"topic{i}", 4)) for i in range(10)]
    chunks = split_by_headings(doc(*paragraphs), URL, max_tokens=120)
    assert len(chunks) > 1
    assert all(c.heading_path == () for c in chunks)
    assert "topic9 paragraph has sentence number 3" in chunks[-1].text


@pytest.mark.parametrize("xml", ["", "   ", "<doc><main></main></doc>", "<doc><main><p>   </p></main></doc>", "not xml at all <"])
def test_empty_xml_gives_no_chunks(xml: str) -> None:
    assert split_by_headings(xml, URL) == []


# --------------------------------------------------------------------------- long sections


TRICKY = [
    "Install the tool with pip, e.g. in a virtual environment.",
    "Version v1.0 was the first stable release of the project.",
    "It needs Python 3.14 or newer to run all of the examples.",
    "Read the guide at https://example.com/a.b before you start.",
    "The file setup.py is only used for legacy source builds.",
    "Dr. Jones wrote most of the original parser in one week.",
    "Values such as 2.5 and 0.75 are accepted for the ratio option.",
    "Other settings, i.e. the cache size, are read at startup.",
    "Logs go to the standard error stream unless configured.",
    "Errors are reported with the line number and the column.",
    "Plugins are discovered through entry points at import time.",
    "The cache directory can be moved with an environment variable.",
]


def test_long_section_splits_at_sentences_with_overlap() -> None:
    text = " ".join(TRICKY * 2)
    chunks = split_by_headings(doc(h(2, "Setup"), p(text)), URL, max_tokens=60, overlap_tokens=20)
    assert len(chunks) >= 4
    sentences = TRICKY * 2
    overlaps = 0
    for chunk in chunks:
        assert chunk.heading_path == ("Setup",)
        assert chunk.token_estimate <= 60
        # Each chunk is a run of whole sentences of the original text: none broken at
        # "e.g.", "v1.0", "3.14", "https://example.com/a.b", "setup.py" or "Dr.".
        parts = split_sentences(chunk.text)
        assert all(s in sentences for s in parts), parts
        assert chunk.text == " ".join(parts)
    for before, after in zip(chunks, chunks[1:]):
        first_after = split_sentences(after.text)[0]
        if before.text.endswith(first_after):
            overlaps += 1
            assert estimate_tokens(first_after) <= 20
    assert overlaps == len(chunks) - 1  # sentences here are short enough to always overlap
    # Nothing lost: every sentence shows up somewhere.
    assert set(sentences) <= {s for c in chunks for s in split_sentences(c.text)}


def test_no_overlap_when_disabled() -> None:
    text = " ".join(TRICKY * 2)
    chunks = split_by_headings(doc(h(2, "Setup"), p(text)), URL, max_tokens=60, overlap_tokens=0)
    joined = " ".join(c.text for c in chunks)
    assert joined == text


def test_code_block_kept_whole() -> None:
    snippet = "\n".join(f"    result_{i} = compute(value_{i}, option={i})" for i in range(8))
    snippet = "def run():\n" + snippet + "\n    return result_7"
    assert 60 < estimate_tokens(snippet) < 120
    xml = doc(h(2, "Example"), p(prose("before", 5)), code(snippet), p(prose("after", 5)))
    chunks = split_by_headings(xml, URL, max_tokens=120, overlap_tokens=20)
    holders = [c for c in chunks if "def run():" in c.text]
    assert len(holders) == 1
    assert snippet in holders[0].text  # indentation and line breaks intact
    assert sum(c.text.count("result_3 = compute") for c in chunks) == 1  # code never repeated as overlap


def test_section_does_not_end_in_a_crumb() -> None:
    snippet = "\n".join(f"value_{i} = transform(value_{i - 1})" for i in range(1, 9))
    body = prose("intro", 5)
    budget = estimate_tokens(body + "\n\n" + snippet) + 2  # prose + code fill a piece; the note does not fit
    xml = doc(h(2, "Changes"), p(body), code(snippet), p("New in version 3.11."))
    chunks = split_by_headings(xml, URL, max_tokens=budget, overlap_tokens=20, min_tokens=40)
    last_sentence = split_sentences(body)[-1]  # the overlap is recomputed after rebalancing
    assert [c.text for c in chunks] == [body, last_sentence + "\n\n" + snippet + "\n\nNew in version 3.11."]


def test_oversized_code_block_split_by_lines() -> None:
    lines = [f"print('line number {i:03d} of a very long generated script')" for i in range(60)]
    chunks = split_by_headings(doc(h(2, "Script"), code("\n".join(lines))), URL, max_tokens=100, overlap_tokens=20)
    assert len(chunks) > 1
    emitted = [line for c in chunks for line in c.text.split("\n")]
    assert emitted == lines  # every line whole, in order, none duplicated
    assert all(c.token_estimate <= 100 for c in chunks)


def test_list_items_are_atomic() -> None:
    items = "".join(f"<item>{escape(prose(f'item{i}', 2))}</item>" for i in range(8))
    chunks = split_by_headings(doc(h(2, "Options"), f'<list rend="ul">{items}</list>'), URL, max_tokens=80)
    assert len(chunks) > 1
    for i in range(8):
        holders = [c for c in chunks if f"item{i} paragraph" in c.text]
        assert len(holders) == 1
        assert f"- {prose(f'item{i}', 2)}" in holders[0].text
    # Items of one list are separated by single newlines.
    assert "\n- The item1" in chunks[0].text and "\n\n- The item1" not in chunks[0].text


def test_term_is_not_left_dangling_at_end_of_a_piece() -> None:
    entries = "".join(
        f'<item rend="dt-{i}">module.function_{i}(arg)</item><item rend="dd-{i}"><p>{escape(prose(f"fn{i}", 3))}</p></item>'
        for i in range(6)
    )
    chunks = split_by_headings(doc(h(2, "API"), f'<list rend="dl">{entries}</list>'), URL, max_tokens=70, overlap_tokens=0)
    for chunk in chunks:
        assert not chunk.text.rstrip().endswith("(arg)"), chunk.text
    for i in range(6):
        holder = next(c for c in chunks if f"module.function_{i}(arg)" in c.text)
        assert f"module.function_{i}(arg)\nThe fn{i} paragraph" in holder.text


def test_token_budget_respected_on_mixed_content() -> None:
    parts = []
    for s in range(6):
        parts.append(h(2, f"Section {s}"))
        parts.append(p(" ".join(TRICKY[s:] + TRICKY[:s])))
        parts.append(code("\n".join(f"x_{s}_{i} = {i} * 2  # comment" for i in range(30))))
        parts.append('<list rend="ol">' + "".join(f"<item>{escape(t)}</item>" for t in TRICKY[:4]) + "</list>")
        parts.append("<table>" + "".join(f"<row><cell>k{i}</cell><cell>{escape(TRICKY[i])}</cell></row>" for i in range(10)) + "</table>")
        parts.append(p("x" * 2000))  # one unbreakable "word": last-resort character split
    for budget in (50, 120, 350):
        chunks = split_by_headings(doc(*parts), URL, max_tokens=budget, overlap_tokens=min(40, budget // 4))
        assert chunks
        for chunk in chunks:
            assert chunk.token_estimate == estimate_tokens(chunk.text)
            assert chunk.token_estimate <= budget, (budget, chunk.token_estimate)
            assert chunk.text == chunk.text.strip()
            assert "  " not in chunk.text.replace("\n", "|").split("|")[0] or chunk.text.startswith("x_")


# --------------------------------------------------------------------------- merging tiny sections


def test_tiny_section_merges_into_following_sibling() -> None:
    xml = doc(
        h(1, "Guide"), p(prose("guide", 6)),
        h(2, "Linux"), p("Use apt."),
        h(2, "macOS"), p(prose("mac", 2)),
    )  # fmt: skip
    chunks = split_by_headings(xml, URL, max_tokens=350, min_tokens=40)
    assert [c.heading_path for c in chunks] == [("Guide",)]  # cascades: Linux+macOS (still tiny) → into Guide
    assert chunks[0].text == prose("guide", 6) + "\n\nLinux\nUse apt.\n\nmacOS\n" + prose("mac", 2)


def test_tiny_section_prefers_next_and_keeps_common_parent_path() -> None:
    xml = doc(
        h(1, "Guide"), p(prose("guide", 20)),
        h(2, "Install"), p("Two ways."),
        h(3, "Linux"), p(prose("linux", 4)),
        h(1, "Other"), p(prose("other", 20)),
    )  # fmt: skip
    chunks = split_by_headings(xml, URL, max_tokens=250, min_tokens=40)
    paths = [c.heading_path for c in chunks]
    assert ("Guide", "Install") in paths
    merged = chunks[paths.index(("Guide", "Install"))]
    assert merged.text == "Two ways.\n\nLinux\n" + prose("linux", 4)
    assert ("Guide", "Install", "Linux") not in paths


def test_tiny_last_section_merges_into_previous() -> None:
    xml = doc(h(2, "Alpha"), p(prose("alpha", 6)), h(2, "Beta"), p("Short."))
    chunks = split_by_headings(xml, URL, min_tokens=40)
    assert len(chunks) == 1
    assert chunks[0].heading_path == ()
    assert chunks[0].text == "Alpha\n" + prose("alpha", 6) + "\n\nBeta\nShort."


def test_tiny_section_stays_when_no_neighbour_fits() -> None:
    xml = doc(h(2, "Big one"), p(prose("big", 12)), h(2, "Tiny"), p("Short."), h(2, "Big two"), p(prose("two", 12)))
    budget = estimate_tokens(prose("big", 12)) + 2  # each big section just fits on its own
    chunks = split_by_headings(xml, URL, max_tokens=budget, min_tokens=40)
    assert [c.heading_path for c in chunks] == [("Big one",), ("Tiny",), ("Big two",)]
    assert chunks[1].text == "Short."


def test_tiny_section_does_not_merge_across_parents() -> None:
    xml = doc(
        h(1, "A"), p(prose("a", 4)),
        h(2, "A1"), p("Tiny child of A."),
        h(1, "B"), p(prose("b", 4)),
    )  # fmt: skip
    chunks = split_by_headings(xml, URL, min_tokens=40)
    # A1's following neighbour is under another parent, so it goes back into A.
    assert chunks[0].heading_path == ("A",)
    assert chunks[0].text.endswith("A1\nTiny child of A.")
    assert chunks[1].heading_path == ("B",)
    assert "Tiny child" not in chunks[1].text


def test_tiny_lede_adopts_first_section_path() -> None:
    xml = doc(p("By the docs team."), h(1, "Manual"), p(prose("manual", 6)))
    chunks = split_by_headings(xml, URL, min_tokens=40)
    assert [(c.heading_path, c.text) for c in chunks] == [(("Manual",), "By the docs team.\n\n" + prose("manual", 6))]


# --------------------------------------------------------------------------- ids


def test_deterministic_ids_and_hashes() -> None:
    xml = doc(h(1, "Guide"), p(" ".join(TRICKY * 3)), h(2, "More"), p(prose("more", 5)))
    first = split_by_headings(xml, URL, max_tokens=80)
    second = split_by_headings(xml, URL, max_tokens=80)
    assert first == second
    assert len({c.chunk_id for c in first}) == len(first)
    for chunk in first:
        assert re.fullmatch(r"[0-9a-f]{16}", chunk.chunk_id)
        assert chunk.content_hash == hashlib.sha256(chunk.text.encode()).hexdigest()


def test_ids_change_with_text_url_and_path() -> None:
    base = split_by_headings(doc(h(2, "Sec"), p(prose("x", 4))), URL)[0]
    edited = split_by_headings(doc(h(2, "Sec"), p(prose("x", 4) + " One more.")), URL)[0]
    moved = split_by_headings(doc(h(2, "Sec"), p(prose("x", 4))), URL + "?v=2")[0]
    renamed = split_by_headings(doc(h(2, "Section"), p(prose("x", 4))), URL)[0]
    assert len({base.chunk_id, edited.chunk_id, moved.chunk_id, renamed.chunk_id}) == 4
    assert base.content_hash == moved.content_hash == renamed.content_hash != edited.content_hash


def test_repeated_text_on_one_page_gets_distinct_ids() -> None:
    same = prose("repeat", 5)
    chunks = split_by_headings(doc(h(2, "Twice"), p(same), h(2, "Other"), p(prose("o", 5)), h(2, "Twice"), p(same)), URL)
    assert chunks[0].text == chunks[2].text and chunks[0].heading_path == chunks[2].heading_path
    assert chunks[0].chunk_id != chunks[2].chunk_id
    assert chunks[0].content_hash == chunks[2].content_hash


def test_chunk_is_frozen() -> None:
    chunk = split_by_headings(doc(p(prose("x"))), URL)[0]
    assert isinstance(chunk, Chunk)
    with pytest.raises(AttributeError):
        chunk.text = "changed"  # type: ignore[misc]


# --------------------------------------------------------------------------- real pages


@pytest.mark.corpus
@corpus
@pytest.mark.parametrize(
    ("page", "path", "phrases"),
    [
        (
            "library/json.html",
            ("json — JSON encoder and decoder", "Basic Usage"),
            ["Serialize obj as a JSON formatted stream to fp", "Deserialize s (a str, bytes or bytearray instance"],
        ),
        (
            "library/json.html",
            ("json — JSON encoder and decoder", "Standard Compliance and Interoperability", "Character Encodings"),
            ["The RFC requires that JSON be represented using either UTF-8, UTF-16, or UTF-32"],
        ),
        (
            "tutorial/introduction.html",
            ("3. An Informal Introduction to Python", "3.1. Using Python as a Calculator", "3.1.3. Lists"),
            ["Python knows a number of compound data types", ">>> squares = [1, 4, 9, 16, 25]"],
        ),
        (
            "library/argparse.html",
            ("argparse — Parser for command-line options, arguments and sub-commands", "The add_argument() method", "nargs"),
            ["ArgumentParser objects usually associate a single command-line argument with a single action"],
        ),
    ],
)
def test_python_docs_chunks(page: str, path: tuple[str, ...], phrases: list[str]) -> None:
    file = CORPUS / page
    url = file.as_uri()
    started = time.perf_counter()
    cleaned = clean_html(file.read_text(encoding="utf-8"), url)
    middle = time.perf_counter()
    chunks = split_by_headings(cleaned.xml, url)
    done = time.perf_counter()
    print(f"{page}: clean {middle - started:.3f}s, chunk {done - middle:.3f}s, {len(chunks)} chunks")

    paths = {c.heading_path for c in chunks}
    assert path in paths
    assert all("¶" not in part for c in chunks for part in c.heading_path)
    assert all(c.token_estimate <= 350 for c in chunks)
    text_under_path = "\n".join(c.text for c in chunks if c.heading_path[: len(path)] == path)
    for phrase in phrases:
        assert phrase in text_under_path, phrase
    assert split_by_headings(cleaned.xml, url) == chunks
