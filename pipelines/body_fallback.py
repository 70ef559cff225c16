"""The lxml fallback: a page's whole ``<body>`` in trafilatura's XML vocabulary, headings kept.

Used when trafilatura's extractions find too little text. Walks with ``etree.iterwalk`` (iterative,
C-driven) so deeply nested input cannot hit Python's recursion limit.
"""

from __future__ import annotations

from copy import copy

from lxml import etree
from lxml import html as lxml_html

from pipelines.text import clean_heading, collapse_ws, normalise_code, sanitise

_DROP = ("script", "style", "noscript", "template", "nav", "footer", "head", "svg", "iframe", "object", "embed", "canvas")
_BLOCK_TAGS = frozenset(
    "address article aside blockquote body caption center dd details dialog div dl dt fieldset figcaption figure "
    "footer form h1 h2 h3 h4 h5 h6 header hgroup hr li main menu ol p pre section summary table tbody td tfoot th "
    "thead tr ul html".split()
)
_CAPTURE_TAGS = frozenset("h1 h2 h3 h4 h5 h6 p pre td th caption".split())


def _slot(container: etree._Element) -> etree._Element:
    """Where a block may be appended inside ``container`` without breaking the vocabulary."""
    if container.tag == "list":
        return etree.SubElement(container, "item")
    if container.tag == "table":
        container = etree.SubElement(container, "row")
    if container.tag == "row":
        return etree.SubElement(container, "cell")
    return container



class _BodyWriter:
    """Builds ``<main>`` from the events of an ``iterwalk`` over the body.

    Headings, paragraphs, code and cells are captured whole (their text joined when they end); lists,
    items, tables, rows and quotes open containers; any other text is buffered for the next paragraph.
    """

    def __init__(self, main: etree._Element) -> None:
        self.containers: list[etree._Element] = [main]
        # Keyed by the element itself: holding the proxy keeps its identity stable (an id() of a
        # freed lxml proxy can be reused by another element).
        self.opened: dict[lxml_html.HtmlElement, int] = {}  # html element -> depth of the container it opened
        self.buf: list[str] = []
        self.capture: tuple[lxml_html.HtmlElement, str, list[str]] | None = None

    def feed(self, event: str, el: lxml_html.HtmlElement) -> None:
        tag = el.tag.lower() if isinstance(el.tag, str) else ""
        if self.capture is not None:
            self.captured(event, el, tag)
        elif event == "start":
            self.start(el, tag)
        else:
            depth = self.opened.pop(el, None)
            if depth is not None:
                self.flush()
                del self.containers[depth:]
            elif tag in _BLOCK_TAGS:
                self.flush()
            self.buf.append(el.tail or "")

    def flush(self) -> None:
        text = collapse_ws("".join(self.buf))
        self.buf.clear()
        if not text:
            return
        container = self.containers[-1]
        if container.tag in {"item", "cell"} and len(container) == 0 and not container.text:
            container.text = text
        elif container.tag in {"list", "table", "row"}:
            _slot(container).text = text
        else:
            etree.SubElement(container, "p").text = text

    def captured(self, event: str, el: lxml_html.HtmlElement, tag: str) -> None:
        """An event inside a captured element: its text and its descendants' text, until it ends."""
        cap_el, cap_tag, pieces = self.capture  # type: ignore[misc]
        if event == "start":
            if el is not cap_el:
                if tag == "br":
                    pieces.append("\n")
                elif tag in _BLOCK_TAGS and cap_tag != "pre":
                    pieces.append(" ")
            pieces.append(el.text or "")
        elif el is cap_el:
            self.capture = None
            self.finish_capture(cap_tag, pieces)
            self.buf.append(el.tail or "")
        else:
            if tag in _BLOCK_TAGS and cap_tag != "pre":
                pieces.append(" ")
            pieces.append(el.tail or "")

    def finish_capture(self, tag: str, pieces: list[str]) -> None:
        raw = "".join(pieces)
        container = self.containers[-1]
        if tag == "pre":
            code = normalise_code(raw)
            if code:
                etree.SubElement(_slot(container), "code").text = code
            return
        if tag.startswith("h") and len(tag) == 2:
            text = clean_heading(raw)
            if text:
                etree.SubElement(_slot(container), "head", rend=tag).text = text
            return
        text = collapse_ws(raw)
        if not text:
            return
        if tag in {"td", "th"} and container.tag in {"row", "table"}:
            cell = _slot(container)
            if tag == "th":
                cell.set("role", "head")
            cell.text = text
        elif tag == "caption" and container.tag in {"row", "table"}:
            _slot(container).text = text
        else:
            etree.SubElement(_slot(container), "p").text = text

    def start(self, el: lxml_html.HtmlElement, tag: str) -> None:
        if tag in _CAPTURE_TAGS:
            self.flush()
            self.capture = (el, tag, [el.text or ""])
            return
        new = self.open_container(tag)
        if new is None:
            if tag == "br":
                self.buf.append("\n")
            elif tag in _BLOCK_TAGS:
                self.flush()
            self.buf.append(el.text or "")
            return
        self.opened[el] = len(self.containers)
        self.containers.append(new)
        self.buf.append(el.text or "")

    def open_container(self, tag: str) -> etree._Element | None:
        """The container a list, item, table, row or quote opens (text before it flushed), else None."""
        if tag in {"ul", "ol", "dl", "menu"}:
            self.flush()
            parent = self.containers[-1]
            if parent.tag == "list":
                parent = etree.SubElement(parent, "item")
            elif parent.tag in {"table", "row"}:
                parent = _slot(parent)
            return etree.SubElement(parent, "list", rend="ol" if tag == "ol" else "dl" if tag == "dl" else "ul")
        if tag in {"li", "dt", "dd"}:
            self.flush()
            parent = self.containers[-1]
            if parent.tag in {"table", "row"}:
                parent = _slot(parent)
            item = etree.SubElement(parent, "item")
            if tag != "li":
                item.set("rend", tag)
            return item
        top = self.containers[-1]
        if tag == "table":
            self.flush()
            return etree.SubElement(_slot(top) if top.tag == "list" else top, "table")
        if tag == "tr" and top.tag == "table":
            self.flush()
            return etree.SubElement(top, "row")
        if tag == "blockquote":
            self.flush()
            return etree.SubElement(_slot(top), "quote")
        return None


def body_xml(tree: lxml_html.HtmlElement, url: str | None, title: str | None) -> etree._Element:
    """Whole-body text in trafilatura's vocabulary, headings kept as ``<head rend="hN">``."""
    body = tree.find(".//body")
    if body is None:
        body = tree.getroottree().getroot()
    body = copy(body)
    etree.strip_elements(body, *_DROP, with_tail=False)
    etree.strip_elements(body, etree.Comment, etree.ProcessingInstruction, with_tail=False)

    doc = etree.Element("doc")
    if title:
        doc.set("title", title)
    if url:
        doc.set("url", sanitise(url))
    main = etree.SubElement(doc, "main")
    writer = _BodyWriter(main)
    for event, el in etree.iterwalk(body, events=("start", "end")):
        writer.feed(event, el)
    writer.flush()

    # Drop structure that ended up without any text (empty lists, rows of empty cells).
    for el in reversed(list(main.iter())):
        if el is not main and not (el.text or "").strip() and len(el) == 0:
            el.getparent().remove(el)
    return doc
