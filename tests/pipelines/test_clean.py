"""clean_html: main-content extraction, fallbacks, hostile input, real Sphinx pages."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trafilatura
from lxml import etree

import pipelines.html_prepare as prepare_mod
from pipelines.body_fallback import body_xml
from pipelines.clean import CleanResult, clean_heading, clean_html, clean_page, xml_blocks
from pipelines.trafilatura_adapter import extract_xml
from tests.support.corpus import CORPUS_DIR, MISSING, has_manual

PAGES = Path(__file__).resolve().parents[1] / "support" / "pages"
CORPUS = CORPUS_DIR
corpus = pytest.mark.skipif(not has_manual(CORPUS), reason=MISSING)


def headings(result: CleanResult) -> list[tuple[int, str]]:
    return [(b.level, b.text) for b in xml_blocks(result.xml) if b.kind == "heading"]


def head_elements(result: CleanResult) -> list[tuple[str, str]]:
    root = etree.fromstring(result.xml.encode())
    return [(h.get("rend"), h.text) for h in root.iter("head")]


# --------------------------------------------------------------------------- hand-made pages


def test_sphinx_page_keeps_headings_without_pilcrow() -> None:
    result = clean_html((PAGES / "sphinx_like.html").read_text(encoding="utf-8"), "https://docs.example.org/guide.html")
    assert result.method == "main"
    assert headings(result) == [
        (1, "widget — Build widgets"),
        (2, "Installing"),
        (3, "On Linux"),
        (2, "Configuration & Tuning"),
    ]
    assert "¶" not in result.text
    assert "¶" not in result.xml
    assert result.title == "widget — Build widgets"
    assert result.lang == "en"
    # The definition term must not carry the permalink either.
    assert "widget.build(spec, *, strict=False)\n" in result.text


def test_sphinx_code_block_inside_definition_keeps_its_lines() -> None:
    result = clean_html((PAGES / "sphinx_like.html").read_text(encoding="utf-8"))
    # trafilatura alone would collapse this highlighted <pre> inside <dd> into one line.
    assert ">>> w = widget.build({'size': 3})\n>>> w.size\n3" in result.text
    root = etree.fromstring(result.xml.encode())
    assert any("w.size\n3" in (code.text or "") for code in root.iter("code"))


def test_result_sizes_and_text_layout() -> None:
    html = (PAGES / "sphinx_like.html").read_text(encoding="utf-8")
    result = clean_html(html)
    assert result.html_bytes == len(html.encode("utf-8"))
    assert result.text_bytes == len(result.text.encode("utf-8"))
    assert "\n\nInstalling\n\n" in result.text  # blocks separated by blank lines
    assert "   " not in result.text.replace("\n", "").split(">>>")[0]  # whitespace collapsed in prose


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Title¶", "Title"),
        ("  Install \n   on   Linux ¶ ", "Install on Linux"),
        ("Section §", "Section"),
        ("Anchored 🔗", "Anchored"),
        ("Permalink #", "Permalink"),
        ("C#", "C#"),
        ("Fish &amp; Chips", "Fish & Chips"),
        ("Step 1\\. Install", "Step 1. Install"),
        ("¶ Leading", "Leading"),
    ],
)
def test_clean_heading(raw: str, expected: str) -> None:
    assert clean_heading(raw) == expected


def test_unicode_str_input_round_trips() -> None:
    html = (
        '<html lang="fr"><head><title>Crème brûlée</title></head><body><article>'
        "<h1>Crème brûlée à la maison</h1>"
        + "".join(f"<p>Étape {i}: préparez la crème, ajoutez le sucre et laissez reposer — c’est prêt.</p>" for i in range(12))
        + "<h2>Variantes 日本語</h2><p>Avec du thé matcha: 抹茶のクレームブリュレ。</p>"
        + "</article></body></html>"
    )
    result = clean_html(html)
    assert result.method == "main"
    assert "Étape 11: préparez la crème" in result.text
    assert (2, "Variantes 日本語") in headings(result)
    assert result.lang == "fr"
    assert result.text_bytes == len(result.text.encode("utf-8")) > len(result.text)


def test_bytes_decoded_with_declared_meta_charset() -> None:
    html = (
        "<html><head><meta charset='iso-8859-1'><title>Café</title></head><body>"
        "<h1>Café crème</h1><p>Naïve résumé of the façade.</p></body></html>"
    ).encode("latin-1")
    result = clean_html(html)
    assert "Café crème" in result.text
    assert "Naïve résumé of the façade." in result.text
    assert "\ufffd" not in result.text
    assert result.html_bytes == len(html)


def test_bytes_without_charset_are_utf8_with_replacement() -> None:
    html = "<html><body><h1>Grüße</h1><p>Schöne Grüße aus Köln.</p>".encode() + b"<p>bad \xff byte</p></body></html>"
    result = clean_html(html)
    assert "Schöne Grüße aus Köln." in result.text
    assert "bad \ufffd byte" in result.text


def test_content_language_meta_is_used_when_html_has_no_lang() -> None:
    html = (
        '<html><head><meta http-equiv="Content-Language" content="de_DE"></head>'
        "<body><h1>Hallo</h1><p>Guten Tag.</p></body></html>"
    )
    assert clean_html(html).lang == "de-DE"
    assert clean_html("<html><body><p>no language anywhere</p></body></html>").lang is None


def test_short_page_falls_back_to_body_and_keeps_headings() -> None:
    # trafilatura treats <aside> as boilerplate; on a short page the body fallback
    # recovers it, and keeps its heading as a heading.
    html = (
        "<html><body><h1>Atlas</h1><p>Short intro.</p>"
        "<aside><h2>Install</h2><p>Download the archive and unpack it into /opt/atlas before the first run.</p>"
        "<h3>On Windows</h3><p>Use the installer instead.</p></aside>"
        "<nav><a href='/'>Home</a> <a href='/about'>About us and the team</a></nav>"
        "<script>var tracking = 'do not keep me';</script>"
        "<footer>Copyright notice of the site</footer></body></html>"
    )
    result = clean_html(html)
    assert result.method == "body"
    assert "Download the archive" in result.text
    assert head_elements(result) == [("h1", "Atlas"), ("h2", "Install"), ("h3", "On Windows")]
    for junk in ("tracking", "About us", "Copyright"):
        assert junk not in result.text


def test_recall_is_tried_before_body(monkeypatch: pytest.MonkeyPatch) -> None:
    real = trafilatura.extract
    calls: list[bool] = []

    def fake(tree, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(kwargs["favor_recall"])
        return real(tree, **kwargs) if kwargs["favor_recall"] else None

    monkeypatch.setattr(trafilatura, "extract", fake)
    html = "<html><body><article><h1>Recall</h1>" + "<p>Plenty of text in this paragraph here.</p>" * 20
    result = clean_html(html + "</article></body></html>")
    assert calls == [False, True]
    assert result.method == "recall"
    assert (1, "Recall") in headings(result)


def test_longest_attempt_wins_when_all_are_short(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trafilatura, "extract", lambda tree, **kw: None)
    result = clean_html("<html><body><h2>Only</h2><p>a few words</p></body></html>")
    assert result.method == "body"
    assert result.text == "Only\n\na few words"


def test_trafilatura_exception_is_contained(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(tree, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("trafilatura bug")

    monkeypatch.setattr(trafilatura, "extract", boom)
    result = clean_html("<html><body><h1>Still</h1><p>here after a crash.</p></body></html>")
    assert result.method == "body"
    assert "here after a crash." in result.text


def test_body_fallback_structures() -> None:
    html = """<html><body>
      <div><h2>Steps</h2><ol><li>Download</li><li>Unpack <b>it</b></li></ol></div>
      <table><tr><th>Name</th><th>Value</th></tr><tr><td>port</td><td>8080</td></tr></table>
      <pre>def main():
    return 1</pre>
      <blockquote>Quoted wisdom.</blockquote>
    </body></html>"""
    root = body_xml(prepare_mod.parse_html(html), None, None)
    blocks = xml_blocks(root)
    assert [(b.kind, b.text) for b in blocks] == [
        ("heading", "Steps"),
        ("item", "1. Download"),
        ("item", "2. Unpack it"),
        ("table", "Name | Value\nport | 8080"),
        ("code", "def main():\n    return 1"),
        ("paragraph", "Quoted wisdom."),
    ]


@pytest.mark.parametrize("page", sorted(p.name for p in PAGES.glob("*.html")))
def test_clean_page_blocks_are_those_of_the_xml(page: str) -> None:
    # The chunker takes clean_page's blocks instead of re-reading the XML: they must be the same.
    result, blocks = clean_page((PAGES / page).read_bytes(), f"https://docs.example.org/{page}")
    assert result == clean_html((PAGES / page).read_bytes(), f"https://docs.example.org/{page}")
    assert blocks and blocks == xml_blocks(result.xml)


@pytest.mark.parametrize("recall", [False, True])
@pytest.mark.parametrize("page", sorted(p.name for p in PAGES.glob("*.html")))
def test_trafilatura_leaves_the_tree_alone(page: str, recall: bool) -> None:
    # clean_html hands every attempt the same prepared tree, relying on trafilatura to work on a copy.
    tree = prepare_mod.parse_html((PAGES / page).read_text(encoding="utf-8"))
    prepare_mod.prepare(tree)
    prepare_mod.drop_nav_panels(tree)
    prepare_mod.give_container(tree)
    before = etree.tostring(tree)
    root, _ = extract_xml(tree, None, recall=recall)
    assert root is not None
    assert etree.tostring(tree) == before


_CONTAINER_HTML = [
    *(p.name for p in PAGES.glob("*.html")),
    "<html><body><div class='x'><div class='post-text'>a</div></div><div class='post-text' id='p2'>b</div></body></html>",
    "<html><body><section class='content'><div id='content'>a</div></section><main>m</main></body></html>",
    "<html><body><div role='main-area'><article class='Fulltext'>a</article></div><div class='main'>b</div></body></html>",
    "<html><body><div><p>no container</p></div><span class='post-text'>x</span></body></html>",
]


@pytest.mark.parametrize("page", _CONTAINER_HTML)
def test_containers_found_on_the_skeleton_are_those_of_the_page(page: str) -> None:
    html = (PAGES / page).read_text(encoding="utf-8") if page.endswith(".html") else page
    tree = prepare_mod.parse_html(html)
    expected = [next(iter(expr(tree)), None) for expr, _ in prepare_mod.container_queries()]
    assert all(q is not None for _, q in prepare_mod.container_queries())  # else the test would prove nothing
    assert [c is e for c, e in zip(prepare_mod._containers(tree), expected, strict=True)] == [True] * len(expected)


@pytest.mark.parametrize(
    "path", [".//*", ".//div[p]", ".//div[.//p]", "(.//div)[2]", ".//*[self::div][text()]", ".//div/p",
             ".//div[contains(., 'x')]", "self::div", "count(.//div)", ".//div[@*]", ".//div | @id", ".//div[@a"],
)
def test_expressions_that_look_beyond_the_element_are_not_answered_on_a_skeleton(path: str) -> None:
    assert prepare_mod._own_attribute_query(path) is None


def test_walking_xml_leaves_it_unchanged() -> None:
    root = etree.fromstring(b"<doc><main><p>one<lb/>two<lb/></p><code>a<lb/>b</code></main></doc>")
    before = etree.tostring(root)
    assert [b.text for b in xml_blocks(root)] == ["one two", "a\nb"]
    assert etree.tostring(root) == before


# --------------------------------------------------------------------------- hostile input


@pytest.mark.parametrize("empty", ["", "   \n\t ", b"", "<html></html>", "<html><body></body></html>"])
def test_empty_input(empty: str | bytes) -> None:
    result = clean_html(empty)
    assert result.method == "empty"
    assert (result.xml, result.text, result.text_bytes) == ("", "", 0)


def test_nul_bytes_are_removed_not_fatal() -> None:
    html = "<html><body><h1>Nu\x00ll</h1><p>Text with a NUL\x00 inside and more words around it.</p></body></html>"
    result = clean_html(html)
    assert "\x00" not in result.text + result.xml
    assert "Text with a NUL inside" in result.text
    assert (1, "Null") in headings(result)
    assert clean_html(html.encode()).text == result.text


def test_binary_junk_is_empty() -> None:
    junk = bytes(range(256)) * 200
    assert clean_html(junk).method == "empty"
    assert clean_html(junk.decode("latin-1")).method == "empty"


def test_ten_thousand_nested_divs_do_not_raise() -> None:
    html = "<html><body><p>Top level text survives.</p>" + "<div>" * 10_000 + "deep" + "</div>" * 10_000 + "</body></html>"
    result = clean_html(html)
    assert result.method in {"main", "recall", "body", "empty"}
    assert "Top level text survives." in result.text


def test_deeply_nested_lists_do_not_raise() -> None:
    html = "<html><body>" + "<ul><li>level" * 3_000 + "</body></html>"
    result = clean_html(html)
    assert isinstance(result, CleanResult)


def test_huge_single_line() -> None:
    html = "<html><body><h1>Big</h1><p>" + "word " * 200_000 + "</p></body></html>"
    result = clean_html(html)
    assert result.method == "main"
    assert result.text.count("word") == 200_000


def test_lone_surrogates_and_control_chars() -> None:
    html = "<html><body><h1>Odd \ud800 chars\x07</h1><p>Bell\x07 and surrogate \udfff here, plus text.</p></body></html>"
    result = clean_html(html)
    assert "Bell and surrogate  here" in result.text or "Bell and surrogate here" in result.text
    result.xml.encode("utf-8")  # must be encodable


def test_deterministic() -> None:
    html = (PAGES / "sphinx_like.html").read_text(encoding="utf-8")
    assert clean_html(html, "https://x.test/a") == clean_html(html, "https://x.test/a")


# --------------------------------------------------------------------------- real pages


@pytest.mark.corpus
@corpus
@pytest.mark.parametrize(
    ("page", "title", "expected_headings", "phrases"),
    [
        (
            "library/json.html",
            "json — JSON encoder and decoder",
            [(1, "json — JSON encoder and decoder"), (2, "Basic Usage"), (2, "Encoders and Decoders"), (3, "Character Encodings")],
            ["JSON (JavaScript Object Notation), specified by RFC 7159", "json.dumps(obj, *, skipkeys=False"],
        ),
        (
            "tutorial/introduction.html",
            "3. An Informal Introduction to Python",
            [(1, "3. An Informal Introduction to Python"), (2, "3.1. Using Python as a Calculator"), (3, "3.1.1. Numbers")],
            ["The interpreter acts as a simple calculator", ">>> 17 // 3  # floor division discards the fractional part\n5"],
        ),
        (
            "library/argparse.html",
            "argparse — Parser for command-line options, arguments and sub-commands",
            [(2, "Example"), (3, "Creating a parser"), (2, "ArgumentParser objects"), (3, "prog")],
            ["The argparse module makes it easy to write user-friendly command-line interfaces."],
        ),
    ],
)
def test_python_docs(page: str, title: str, expected_headings: list[tuple[int, str]], phrases: list[str]) -> None:
    path = CORPUS / page
    started = time.perf_counter()
    result = clean_html(path.read_bytes(), path.as_uri())
    print(f"{page}: {time.perf_counter() - started:.3f}s, {result.html_bytes} → {result.text_bytes} bytes")
    assert result.method == "main"
    assert result.title == title
    assert result.lang == "en"
    found = headings(result)
    for heading in expected_headings:
        assert heading in found
    assert all("¶" not in text for _, text in found)
    for phrase in phrases:
        assert phrase in result.text
    # Navigation sidebars are not content.
    assert "Previous topic" not in result.text


def test_section_whose_id_looks_like_boilerplate_is_kept() -> None:
    # Sphinx section ids are heading slugs; trafilatura used to drop a section whose id contains "share"
    # (the Python FAQ's "How do I share global variables across modules?" vanished from the text).
    filler = " ".join(f"Sentence {i} explains how the module system works in some detail." for i in range(12))
    html = (
        "<html lang='en'><head><title>FAQ</title></head><body><div class='body' role='main'>"
        "<section id='programming-faq'><h1>Programming FAQ</h1><p>" + filler + "</p>"
        "<section id='how-do-i-share-global-variables-across-modules'><h2>How do I share global variables?</h2>"
        "<p>The canonical way to share information across modules is to create a special config module.</p>"
        "<p>" + filler + "</p></section>"
        "<section id='comments-and-docstrings'><h2>Comments and docstrings</h2>"
        "<p>A docstring is the first statement of a function body and documents it.</p></section>"
        "</section></div></body></html>"
    )
    result = clean_html(html, "https://docs.example.org/faq.html")
    assert "create a special config module" in result.text
    assert "first statement of a function body" in result.text
    assert (2, "How do I share global variables?") in headings(result)


# --------------------------------------------------------------------------- pages without a content container


def blocks(result: CleanResult) -> list[tuple[str, str]]:
    return [(b.kind, b.text) for b in xml_blocks(result.xml)]


def test_docbook_page_keeps_its_headings_and_whole_terms() -> None:
    # No <main>, no class trafilatura knows: titles sit in <div class="titlepage">…<h2 class="title">.
    result = clean_html((PAGES / "docbook_like.html").read_bytes(), "https://docs.example.org/runtime-config-wal.html")
    assert headings(result) == [(2, "20.5. Write Ahead Log"), (3, "20.5.1. Settings"), (3, "20.5.2. Checkpoints")]
    kinds = blocks(result)
    # The definition term stays one line, its type with it (was "wal_level\n\n(\n\nenum\n\n)").
    assert ("term", "wal_level (enum)") in kinds
    assert ("term", "checkpoint_timeout (integer)") in kinds
    # Cells of a table nested in a definition do not run together.
    assert "REINDEXTRUNCATE" not in result.text and "REINDEX" in result.text
    # Navigation tables (class navheader/navfooter) are gone.
    assert "Prev" not in result.text and "Home" not in result.text


def test_docbook_chunks_carry_a_heading_path() -> None:
    from pipelines.chunk import split_by_headings

    result = clean_html((PAGES / "docbook_like.html").read_bytes(), "https://docs.example.org/runtime-config-wal.html")
    chunks = split_by_headings(result.xml, "https://docs.example.org/runtime-config-wal.html", max_tokens=60)
    assert chunks and all(c.heading_path for c in chunks)
    assert any(c.heading_path == ("20.5. Write Ahead Log", "20.5.2. Checkpoints") for c in chunks)


def test_texinfo_page_keeps_definition_lines_and_drops_the_nav_panel() -> None:
    html = (PAGES / "texinfo_like.html").read_text(encoding="utf-8")
    for variant in (html, html.replace('<div class="nav-panel">', '<div class="header">')):  # Texinfo 7, Texinfo 6
        result = clean_html(variant, "https://www.gnu.org/software/libc/manual/html_node/String-Length.html")
        assert headings(result) == [(3, "5.3 String Length")]
        kinds = blocks(result)
        assert ("term", "Function: size_t strlen (const char *s)") in kinds
        assert ("term", "Function: size_t strnlen (const char *s, size_t maxlen)") in kinds
        assert "Next:" not in result.text and "Previous:" not in result.text
        assert result.text.startswith("5.3 String Length\n\nYou can get the length")


def test_sequence_link_inside_prose_stays() -> None:
    prose = "This paragraph explains the topic at length and points on to the " * 3
    html = (f"<html><body><main><h1>Topic</h1><p>{prose}<a rel='next' href='b.html'>next section</a> "
            "for the rest of the story.</p></main></body></html>")
    result = clean_html(html)
    assert "next section for the rest of the story" in result.text


def test_asciidoc_title_block_before_the_content_container_is_kept() -> None:
    # asciidoc: <div id="header"><h1>…</h1><h2>NAME</h2>…</div><div id="content">…: trafilatura picks #content.
    result = clean_html((PAGES / "asciidoc_like.html").read_bytes(), "https://git-scm.example/docs/git-add.html")
    assert headings(result)[:4] == [(1, "git-add(1) Manual Page"), (2, "NAME"), (2, "SYNOPSIS"), (2, "DESCRIPTION")]
    assert "git-add - Add file contents to the index" in result.text
    assert "Last updated" not in result.text  # the footer stays out


def test_site_name_h1_outside_the_article_does_not_widen_it() -> None:
    body = "<p>" + "The article's own text, long enough to be the page's main content. " * 8 + "</p>"
    html = ("<html><body><div id='header'><h1><a href='/'>My Site</a></h1></div>"
            f"<div class='post-content'><h2>The post</h2>{body}</div></body></html>")
    result = clean_html(html)
    assert "My Site" not in result.text
    assert headings(result) == [(2, "The post")]


def test_heading_repeating_the_title_goes_above_its_sibling_sections() -> None:
    # DocBook reference page: the page's name is an <h2> like its sections.
    text = "<p>" + "The NOTIFY command sends a notification event to each client application. " * 4 + "</p>"
    html = ("<html><head><title>NOTIFY</title></head><body><div class='refentry'>"
            "<div class='refnamediv'><h2><span class='refentrytitle'>NOTIFY</span></h2><p>NOTIFY — generate a "
            f"notification</p></div><div class='refsect1'><h2>Description</h2>{text}</div>"
            f"<div class='refsect1'><h2>Parameters</h2>{text}</div></div></body></html>")
    result = clean_html(html)
    assert headings(result) == [(1, "NOTIFY"), (2, "Description"), (2, "Parameters")]
    # A first heading that is not the page's title keeps its level.
    other = clean_html(html.replace("<title>NOTIFY</title>", "<title>Something else</title>"))
    assert headings(other) == [(2, "NOTIFY"), (2, "Description"), (2, "Parameters")]


def test_docbook_xhtml_headings_with_empty_link_targets_are_kept() -> None:
    # The Debian Reference (DocBook XSL, XHTML): <a id="…"/> opens every heading. trafilatura counted such a
    # heading as all links (one link, no link text) and deleted it, so no chunk had a heading path.
    text = "<p>" + "El sistema de gestión de paquetes de Debian instala paquetes binarios consistentes. " * 12 + "</p>"
    section = ("<div class='section'><div class='titlepage'><div><div><h2 class='title'><a id='_{0}'/>2.{0}. "
               "Sección {0}</h2></div></div></div>{1}</div>")
    html = ('<?xml version="1.0" encoding="UTF-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml"><head>'
            "<title>Capítulo 2. Gestión de paquetes</title></head><body><div class='chapter'><div class='titlepage'>"
            "<div><div><h1 class='title'><a id='_cap'/>Capítulo 2. Gestión de paquetes</h1></div></div></div>"
            + section.format(1, text) + section.format(2, text) + "</div></body></html>")
    result = clean_html(html)
    assert result.method == "main"
    assert headings(result) == [(1, "Capítulo 2. Gestión de paquetes"), (2, "2.1. Sección 1"), (2, "2.2. Sección 2")]


def test_docbook_admonition_titles_open_no_section() -> None:
    # DocBook XSL titles a note with a heading (<div class="note"><h3 class="title">Note</h3>): as a section it took
    # in everything after the note up to the next heading (git's user-manual, PostgreSQL's pages).
    from pipelines.chunk import split_by_headings

    prose = "A submodule records the commit of another project inside the superproject's tree. " * 6
    html = ('<html><head><title>Git User Manual</title></head><body><div class="book"><div class="chapter">'
            '<div class="titlepage"><div><div><h1 class="title"><a name="submodules"></a>Chapter 8. Submodules</h1>'
            f'</div></div></div><p>{prose}</p><div class="note" style="margin-left: 0.5in"><h3 class="title">Note</h3>'
            '<p>Do not use local URLs here if you plan to publish your superproject!</p></div>'
            f'<p>See what files git submodule created. {prose}</p><div class="section"><div class="titlepage"><div><div>'
            '<h2 class="title"><a name="pitfalls"></a>Pitfalls with submodules</h2></div></div></div>'
            f'<p>{prose}</p></div></div></div></body></html>')
    result = clean_html(html)
    assert headings(result) == [(1, "Chapter 8. Submodules"), (2, "Pitfalls with submodules")]
    chunks = split_by_headings(result.xml, "https://git.example.org/user-manual.html", max_tokens=120)
    after_note = [c for c in chunks if "See what files git submodule created" in c.text]
    assert after_note and all(c.heading_path == ("Chapter 8. Submodules",) for c in after_note)
    note = [c for c in chunks if "Do not use local URLs" in c.text]
    assert note and "Note" in note[0].text.split("\n")  # the label stays, as a line of its section


def test_a_heading_opening_another_generators_warning_box_stays_a_section() -> None:
    # Only DocBook's titled admonitions are demoted: a box of another generator may open a real section.
    prose = "Deploy the service behind a reverse proxy and keep its port closed to the outside world. " * 6
    html = ('<html><head><title>Deploying</title></head><body><h1>Deploying</h1>'
            f'<p>{prose}</p><div class="warning"><h2>Security considerations</h2><p>{prose}</p></div>'
            f'<h2>Scaling</h2><p>{prose}</p></body></html>')
    result = clean_html(html)
    assert headings(result) == [(1, "Deploying"), (2, "Security considerations"), (2, "Scaling")]
