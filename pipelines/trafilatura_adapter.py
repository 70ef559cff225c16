"""The trafilatura adapter: one extraction of a prepared tree into ``<doc>`` XML with clean headings.

trafilatura is imported on first use (see ``html_prepare.container_queries``). The two switches below
are module attributes so that benchmarks/bench_clean.py can compare the product with and without them.
"""

from __future__ import annotations

import logging

from lxml import etree
from lxml import html as lxml_html

from pipelines.blocks import HEAD_REND, XML_PARSER
from pipelines.text import clean_heading

LOGGER = logging.getLogger(__name__)

# Date extraction is irrelevant here; a fixed upper bound keeps output independent of "today".
_DATE_PARAMS = {"original_date": True, "extensive_search": False, "max_date": "2099-12-31"}


#: trafilatura's metadata extraction (title, author, date, categories…): a large share of a page's CPU, and
#: the devset's cleaned text does not change without it (BENCHMARKS.md, "What `process_page` costs beyond
#: the bare extraction"). It gave only the title, which ``html_title`` reads from ``<title>``/``<h1>``.
TRAFILATURA_METADATA = False
#: trafilatura's comparison of its extraction with its fallback extractors (readability, jusText): costly, and
#: without it no expect phrase of the devset is lost (same section). ``fast=True`` when off.
TRAFILATURA_FALLBACK = False


def extract_xml(tree: lxml_html.HtmlElement, url: str | None, recall: bool) -> tuple[etree._Element | None, str | None]:
    """Run one trafilatura extraction; returns (normalised <doc> root, title)."""
    import trafilatura

    options: dict[str, object] = dict(
        url=url,
        output_format="xml",
        favor_recall=recall,
        fast=not TRAFILATURA_FALLBACK,
        include_comments=False,
        include_tables=True,
        include_formatting=False,
        include_links=False,
        include_images=False,
    )
    try:
        if TRAFILATURA_METADATA:
            document = trafilatura.extract_with_metadata(tree, date_extraction_params=dict(_DATE_PARAMS), **options)
            xml_text, raw_title = (document.text, document.title) if document is not None else (None, None)
        else:
            xml_text, raw_title = trafilatura.extract(tree, **options), None
    except Exception as err:  # a bug in trafilatura on one odd page must not kill the page
        LOGGER.debug("trafilatura failed (recall=%s) on %s: %s", recall, url, err)
        return None, None
    if not xml_text:
        return None, None
    title = clean_heading(raw_title) if raw_title else None
    try:
        root = etree.fromstring(xml_text.encode("utf-8"), XML_PARSER)
    except Exception as err:
        LOGGER.debug("unparsable trafilatura XML on %s: %s", url, err)
        return None, title
    if root is None:
        return None, title
    for comments in root.findall("comments"):
        root.remove(comments)
    for head in root.iter("head"):
        text = clean_heading("".join(head.itertext()))
        tail = head.tail
        attrs = {"rend": head.get("rend", "")}
        head.clear()  # also drops inline <code>/<hi> children and the tail
        head.text = text
        head.tail = tail
        if HEAD_REND.match(attrs["rend"]):
            head.set("rend", attrs["rend"])
    if title:
        root.set("title", title)
    return root, title


def title_heading_on_top(root: etree._Element, page_title: str | None) -> None:
    """Put the heading that repeats the page's ``<title>`` above the page's other headings.

    DocBook reference pages give the page's name the level of its sections (``<h2>NOTIFY</h2>`` then
    ``<h2>Synopsis</h2>``, ``<h2>Description</h2>``), so chunks were filed under "Description" alone, which
    says nothing about the page. When the first heading is the page's title and no later heading is above it,
    it moves one level above the highest of them (never past h1), as on pages that use h1 for their title.
    """
    if not page_title:
        return
    heads = [h for h in root.iter("head") if HEAD_REND.match(h.get("rend") or "")]
    if len(heads) < 2 or (heads[0].text or "").casefold() != page_title.casefold():
        return
    top = min(int(h.get("rend")[1]) for h in heads[1:])
    if int(heads[0].get("rend")[1]) >= top > 1:
        heads[0].set("rend", f"h{top - 1}")
