"""HTML → main-content XML, plain text and blocks: the one entry, ``clean_page``.

Pure: no Scrapy, no DuckDB, no network. Everything here is deterministic for a given input, so
re-cleaning a stored page yields byte-identical XML and therefore identical chunk ids downstream.
The steps live in modules of their own, as trafilatura keeps its own:

- ``pipelines/decoding.py``: bytes → text (and the spider's decoding checks);
- ``pipelines/html_prepare.py``: parsing and the repairs trafilatura needs on documentation sites;
- ``pipelines/trafilatura_adapter.py``: one trafilatura extraction into ``<doc>`` XML;
- ``pipelines/body_fallback.py``: the whole ``<body>`` through lxml, when trafilatura finds too little;
- ``pipelines/blocks.py``: the XML walked into blocks (what the chunker reads) and plain text.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from lxml import etree
from lxml import html as lxml_html

from pipelines.blocks import Block, blocks_to_text, xml_blocks
from pipelines.body_fallback import body_xml
from pipelines.decoding import decode_html, looks_binary
from pipelines.html_prepare import drop_nav_panels, give_container, html_lang, html_title, parse_html, prepare
from pipelines.text import clean_heading, sanitise
from pipelines.trafilatura_adapter import extract_xml, title_heading_on_top

__all__ = ["Block", "CleanResult", "blocks_to_text", "clean_heading", "clean_html", "clean_page", "xml_blocks"]

LOGGER = logging.getLogger(__name__)
# The attempts in the order they are tried: trafilatura balanced, trafilatura favor_recall, the lxml body.
METHODS = ("main", "recall", "body")


@dataclass(frozen=True)
class CleanResult:
    xml: str  # "" when method == "empty"
    text: str
    method: str  # "main" | "recall" | "body" | "empty"
    title: str | None
    lang: str | None
    html_bytes: int
    text_bytes: int


def clean_html(html: str | bytes, url: str | None = None, *, min_chars: int = 500) -> CleanResult:
    """Extract the main content of a page; never raises on bad input.

    Order of attempts: trafilatura balanced ("main"), trafilatura ``favor_recall``
    ("recall"), whole ``<body>`` via lxml ("body"). The first whose text reaches
    ``min_chars`` wins; if none does, the longest text wins (ties go to the earlier
    attempt); "empty" when no attempt produced any text.
    """
    return clean_page(html, url, min_chars=min_chars)[0]


def clean_page(html: str | bytes, url: str | None = None, *, min_chars: int = 500) -> tuple[CleanResult, list[Block]]:
    """:func:`clean_html`, plus the result's blocks: the same list as ``xml_blocks(result.xml)``, which the
    chunker needs and which is already at hand here, so the page's XML is not parsed and walked again."""
    text_in, html_bytes = _as_text(html)
    if not text_in.strip() or looks_binary(text_in):
        return _empty(html_bytes)
    tree = parse_html(sanitise(text_in))
    if tree is None:
        return _empty(html_bytes)
    lang, page_title = _prepare(tree, url)
    candidates, title = _attempts(tree, url, page_title, min_chars)
    title = title or page_title
    if not candidates:
        return _empty(html_bytes, title, lang)
    method, root, text, blocks = max(candidates, key=lambda c: len(c[2]))  # max() keeps the first of equals
    if lang and not root.get("language"):
        root.set("language", lang)
    xml = etree.tostring(root, encoding="unicode")
    result = CleanResult(
        xml=xml,
        text=text,
        method=method,
        title=title,
        lang=lang,
        html_bytes=html_bytes,
        text_bytes=len(text.encode("utf-8")),
    )
    return result, blocks


def _as_text(html: str | bytes) -> tuple[str, int]:
    """The page as text, and its size in bytes as received (a ``str`` counts as UTF-8)."""
    if isinstance(html, (bytes, bytearray, memoryview)):
        raw = bytes(html)
        return decode_html(raw), len(raw)
    text = html if isinstance(html, str) else str(html)
    return text, len(text.encode("utf-8", errors="replace"))


def _empty(html_bytes: int, title: str | None = None, lang: str | None = None) -> tuple[CleanResult, list[Block]]:
    return CleanResult("", "", "empty", title, lang, html_bytes, 0), []


def _prepare(tree: lxml_html.HtmlElement, url: str | None) -> tuple[str | None, str | None]:
    """Repair the tree for extraction; (language, title) read from its markup."""
    try:
        prepare(tree)
        drop_nav_panels(tree)
        give_container(tree)
        return html_lang(tree), html_title(tree)
    except Exception as err:
        LOGGER.debug("page preparation failed on %s: %s", url, err)
        return None, None


Candidate = tuple[str, etree._Element, str, list[Block]]  # method, <doc> root, text, blocks


def _attempts(tree: lxml_html.HtmlElement, url: str | None, page_title: str | None,
              min_chars: int) -> tuple[list[Candidate], str | None]:
    """The attempts that gave text, in order, up to the first with ``min_chars``; and trafilatura's title."""
    candidates: list[Candidate] = []
    title: str | None = None
    for method in METHODS:
        try:
            if method == "body":
                root = body_xml(tree, url, title or page_title)
            else:
                # trafilatura copies a tree it is given before changing it, so attempts stay independent
                # of each other without a copy of our own (test_trafilatura_leaves_the_tree_alone).
                root, found_title = extract_xml(tree, url, recall=method == "recall")
                title = title or found_title
            if root is None:
                continue
            # Done before the walk so the blocks are those of the final XML; it moves a heading's level,
            # never text, so the text that picks the winner is the same.
            title_heading_on_top(root, page_title)
            blocks = xml_blocks(root)
            text = blocks_to_text(blocks)
        except Exception as err:
            LOGGER.debug("%s extraction failed on %s: %s", method, url, err)
            continue
        if not text:
            continue
        candidates.append((method, root, text, blocks))
        if len(text) >= min_chars:
            break
    return candidates, title
