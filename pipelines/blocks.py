"""trafilatura-style XML → content blocks in reading order, and blocks → plain text.

The XML vocabulary is trafilatura's (``<doc><main>`` with ``<head rend="hN">``, ``<p>``,
``<list><item>``, ``<table><row><cell>``, ``<code>``, ``<quote>``); the lxml body fallback
(``pipelines/body_fallback.py``) emits the same, so :func:`xml_blocks` (used by the chunker) reads both alike.
The walk keeps an explicit stack, so deeply nested input cannot hit Python's recursion limit.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass

from lxml import etree

from pipelines.text import clean_heading, collapse_ws, normalise_code, sanitise

LOGGER = logging.getLogger(__name__)

XML_PARSER = etree.XMLParser(
    recover=True, huge_tree=True, resolve_entities=False, no_network=True, remove_comments=True, remove_pis=True
)
HEAD_REND = re.compile(r"^h([1-6])$")
# Elements whose content is not the page's text.
_SKIPPED = frozenset({"comments", "graphic", "fw", "note"})
# Elements that open a frame of their own (lists and items are numbered and grouped as they open).
_CONTAINERS = frozenset({"quote", "div", "main", "body", "section", "doc", "cell", "row"})


@dataclass(frozen=True)
class Block:
    """One unit of page content in reading order, as the chunker sees it.

    ``group`` ties together blocks that render one per line rather than as separate
    paragraphs (the items of one list); -1 means "a paragraph of its own".
    """

    kind: str  # "heading" | "paragraph" | "item" | "term" | "code" | "table"
    text: str
    level: int = 0  # 1..6 for headings, else 0
    group: int = -1
    page: int = 0  # the page it is on, in a paged document (a PDF); 0 for a web page


def _is_block_code(code: etree._Element, pending: list[str]) -> bool:
    """trafilatura uses <code> both for code blocks and for inline code inside items."""
    parent = code.getparent()
    if parent is None or parent.tag in {"main", "doc", "quote", "div", "body", "comments"}:
        return True
    if parent.tag in {"item", "cell"}:
        if "\n" in "".join(code.itertext()).strip():
            return True
        # A one-line code block stands alone: nothing before it, nothing after it.
        return not "".join(pending).strip() and not (code.tail or "").strip()
    return False


def _inline_text(el: etree._Element) -> str:
    return "".join(el.itertext())


def _table_text(table: etree._Element) -> str:
    rows: list[str] = []
    for row in table:
        if row.tag != "row":
            text = collapse_ws(_inline_text(row))
            if text:
                rows.append(text)
            continue
        cells = [collapse_ws(_inline_text(cell)) for cell in row if isinstance(cell.tag, str)]
        cells = [c for c in cells if c]
        if cells:
            rows.append(" | ".join(cells))
    return "\n".join(rows)


class _Frame:
    """One open container while walking the XML (explicit stack: no recursion)."""

    __slots__ = ("children", "element", "buf", "marker", "list_group", "item_kind", "counter", "rend")

    def __init__(
        self, element: etree._Element, marker: str = "", list_group: int = -1, item_kind: str = "", rend: str = ""
    ) -> None:
        self.element = element
        self.rend = rend  # list frames: "ul" | "ol" | "dl"
        self.children: Iterator[etree._Element] = iter(element)
        self.buf: list[str] = [element.text or ""]
        self.marker = marker  # prefix for the item's first line ("- ", "3. ")
        self.list_group = list_group
        self.item_kind = item_kind  # "" for non-items, else the block kind of the item's first line
        self.counter = 0  # ordered-list numbering for list frames


def _walk(root: etree._Element) -> list[Block]:
    # <lb> tails get the line break for the walk and their own value back afterwards, so walking leaves
    # the tree as it was and needs no copy of it.
    breaks = [(lb, lb.tail) for lb in root.iter("lb")]
    for lb, tail in breaks:
        lb.tail = "\n" + (tail or "")
    try:
        return _walk_blocks(root)
    finally:
        for lb, tail in breaks:
            lb.tail = tail


class _BlockWalker:
    """Blocks from the frames of an explicit stack, one child element at a time."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.groups = iter(range(1 << 62))

    def emit_text(self, frame: _Frame, text: str, kind: str = "paragraph") -> None:
        if not text:
            return
        if frame.item_kind:
            self.blocks.append(Block(frame.item_kind, frame.marker + text, group=frame.list_group))
            frame.item_kind = ""
            return
        self.blocks.append(Block(kind, text))

    def flush(self, frame: _Frame) -> None:
        text = collapse_ws("".join(frame.buf))
        frame.buf.clear()
        self.emit_text(frame, text)

    def walk(self, main: etree._Element) -> list[Block]:
        stack = [_Frame(main)]
        while stack:
            frame = stack[-1]
            child = next(frame.children, None)
            if child is None:
                self.flush(frame)
                stack.pop()
                if stack:
                    stack[-1].buf.append(frame.element.tail or "")
                continue
            tag = child.tag if isinstance(child.tag, str) else ""
            if not tag or tag in _SKIPPED:
                frame.buf.append(child.tail or "")
            elif tag in {"head", "p", "table"} or (tag == "code" and _is_block_code(child, frame.buf)):
                self.flush(frame)
                self.leaf(frame, child, tag)
                frame.buf = [child.tail or ""]
            elif tag in {"list", "item"} or tag in _CONTAINERS:
                self.flush(frame)
                stack.append(self.open(frame, child, tag))
            else:  # inline: hi, ref, span, inline code, del, ...
                frame.buf.append(_inline_text(child))
                frame.buf.append(child.tail or "")
        return self.blocks

    def leaf(self, frame: _Frame, child: etree._Element, tag: str) -> None:
        """The block of a heading, paragraph, code block or table."""
        if tag == "head":
            match = HEAD_REND.match(child.get("rend") or "")
            text = clean_heading(_inline_text(child))
            if text:
                # An unlabelled <head> (e.g. from <summary>) is minor: never start a section.
                self.blocks.append(Block("heading", text, level=int(match.group(1)) if match else 4))
        elif tag == "p":
            self.emit_text(frame, collapse_ws(_inline_text(child)))
        elif tag == "code":
            code = normalise_code(_inline_text(child))
            if code:
                self.blocks.append(Block("code", code))
        elif text := _table_text(child):
            self.blocks.append(Block("table", text))

    def open(self, frame: _Frame, child: etree._Element, tag: str) -> _Frame:
        """The frame of a list, a list item (with its marker and group) or another container."""
        if tag == "list":
            return _Frame(child, list_group=next(self.groups), rend=child.get("rend") or "ul")
        if tag != "item":
            return _Frame(child)
        rend = child.get("rend") or ""
        list_rend = frame.rend if frame.element.tag == "list" else "ul"
        if rend.startswith("dt"):
            marker, kind = "", "term"
        elif rend.startswith("dd") or list_rend == "dl":
            marker, kind = "", "paragraph"
        elif list_rend == "ol":
            frame.counter += 1
            marker, kind = f"{frame.counter}. ", "item"
        else:
            marker, kind = "- ", "item"
        group = frame.list_group if frame.element.tag == "list" else next(self.groups)
        return _Frame(child, marker=marker, list_group=group, item_kind=kind)


def _walk_blocks(root: etree._Element) -> list[Block]:
    main = root.find(".//main")
    return _BlockWalker().walk(root if main is None else main)


def xml_blocks(xml: str | etree._Element) -> list[Block]:
    """Content blocks of a trafilatura-style XML document, in reading order."""
    if isinstance(xml, str):
        if not xml.strip():
            return []
        try:
            root = etree.fromstring(sanitise(xml).encode("utf-8"), XML_PARSER)
        except Exception as err:
            LOGGER.debug("unparsable XML: %s", err)
            return []
        if root is None:
            return []
    else:
        root = xml
    return _walk(root)


def blocks_to_text(blocks: list[Block]) -> str:
    """Plain text: blocks separated by blank lines, items of one list by single newlines."""
    parts: list[str] = []
    prev: Block | None = None
    for block in blocks:
        if prev is not None:
            parts.append("\n" if block.group >= 0 and block.group == prev.group else "\n\n")
        parts.append(block.text)
        prev = block
    return "".join(parts)
