"""PDF → text per page and the blocks the chunker reads, with pdfminer.six.

Pure module (no Scrapy, no DuckDB, no network), run in the extraction pool under the same CPU deadline
mechanism as HTML (pipelines/page_processing.py). pdfminer.six over pypdf: on four Debian manuals shipped
as PDF and HTML, pypdf ran the words of justified text together, pdfminer's layout analysis did not
(BENCHMARKS.md, "PDF documents").

Sections follow the PDF's outline (bookmarks): each entry becomes a heading (level = its depth) placed
where its title starts on the page it points to, or at the top of that page when the title is not found
there. A PDF without an outline gets a heading per page ("Page N"), so that every chunk stays within a page.
Every block keeps its page number; a chunk links to ``URL#page=N`` of the page it starts on.

Cleanup, each deterministic: a table of contents' lines (dot leaders) and lines without a letter go; running headers and footers (a page's first or last text box repeating, digits
aside, on many pages) are dropped; a word broken at a line end by a hyphen is joined, unless the document
writes it with a hyphen elsewhere; ligatures become letters.
"""

from __future__ import annotations

import io
import logging
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from pipelines.blocks import Block, blocks_to_text
from pipelines.clean import CleanResult
from pipelines.text import clean_heading
from pipelines.formats import Unreadable

log = logging.getLogger(__name__)

# Fewer letters than this per page on average: the PDF has no usable text layer (a scan, images of text).
MIN_LETTERS_PER_PAGE = 10
# A first or last text box of a page repeating (digits aside) on this share of pages, at least
# REPEATS_MIN times, is a running header or footer.
REPEATS_SHARE = 0.3
REPEATS_MIN = 3
_LIGATURES = str.maketrans({"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl",
                            "\ufb05": "st", "\ufb06": "st", "\u00ad": ""})
_NOT_ALNUM = re.compile(r"[\W_]+", re.UNICODE)
_DIGITS = re.compile(r"\d+")
_BROKEN = re.compile(r"(\w+)-$")
_WORD = re.compile(r"[\w-]+", re.UNICODE)
# A table of contents' dot leaders ("Install . . . . . 12"), and lines of nothing else but page numbers.
_LEADER = re.compile(r"(?:\.\s*){5,}|…{3,}")
_NO_TEXT = re.compile(r"^[\W\d_]*$", re.UNICODE)
# What may stand before a heading's title on its line: "2.1", "Chapter 3", "Appendix A", "IV".
_NUMBERING = re.compile(r"^(chapter|section|appendix|part)?(\d+|[ivxlc]+|[a-z])?\d*$")


@dataclass(frozen=True)
class _Box:
    lines: tuple[str, ...]


@dataclass(frozen=True)
class _Heading:
    level: int
    title: str
    page: int  # 1-based


def _letters(text: str) -> str:
    return _NOT_ALNUM.sub("", text.lower())


def extract_pdf(data: bytes, url: str, *, max_pages: int = 500) -> tuple[CleanResult, list[Block]]:
    """The document's text and blocks; raises ``Unreadable`` (skipped or failed, with the reason) for an
    encrypted PDF, one over ``max_pages`` pages, one without a text layer, or bytes that are no PDF."""
    from pdfminer.pdfdocument import PDFDocument, PDFEncryptionError, PDFPasswordIncorrect
    from pdfminer.pdfpage import PDFPage
    from pdfminer.pdfparser import PDFParser, PDFSyntaxError
    from pdfminer.psparser import PSException

    try:
        document = PDFDocument(PDFParser(io.BytesIO(data)), password="")
        pages = list(PDFPage.create_pages(document))
    except (PDFPasswordIncorrect, PDFEncryptionError):
        raise Unreadable("skipped", "PDF is encrypted (it needs a password); not read") from None
    except (PDFSyntaxError, PSException, ValueError, KeyError, TypeError) as exc:
        raise Unreadable("failed", f"not a readable PDF ({type(exc).__name__}: {str(exc)[:200]})") from None
    if len(pages) > max_pages:
        raise Unreadable("failed", f"PDF has {len(pages)} pages, more than crawl.pdf_max_pages ({max_pages}); "
                                   "not read")
    page_boxes = [list(_page_boxes(page)) for page in pages]
    if sum(len(_letters(line)) for boxes in page_boxes for box in boxes for line in box.lines) < (
            MIN_LETTERS_PER_PAGE * max(len(pages), 1)):
        raise Unreadable("skipped", f"PDF has no text layer ({len(pages)} pages of images: a scan?); "
                                    "OCR it to make it searchable")
    page_boxes = _without_running_lines(page_boxes)
    headings = _outline(document, {page.pageid: number for number, page in enumerate(pages, start=1)})
    title = _info_title(document) or (headings[0].title if headings else None)
    blocks = _blocks(page_boxes, headings)
    text = blocks_to_text(blocks)
    lang = _lang(document)
    return CleanResult(xml="", text=text, method="pdf", title=title, lang=lang, html_bytes=len(data),
                       text_bytes=len(text.encode("utf-8"))), blocks


def _page_boxes(page: object) -> Iterator[_Box]:
    """The page's text boxes in pdfminer's reading order, each as its lines."""
    from pdfminer.converter import PDFPageAggregator
    from pdfminer.layout import LAParams, LTTextBox
    from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager

    device = PDFPageAggregator(PDFResourceManager(), laparams=LAParams())
    PDFPageInterpreter(device.rsrcmgr, device).process_page(page)
    for element in device.get_result():
        if isinstance(element, LTTextBox):
            lines = tuple(line for line in (" ".join(part.translate(_LIGATURES).split())
                                            for part in element.get_text().splitlines())
                          if line and not _LEADER.search(line) and not _NO_TEXT.match(line))
            if lines:
                yield _Box(lines)


def _without_running_lines(page_boxes: list[list[_Box]]) -> list[list[_Box]]:
    """The pages without their running headers and footers (see the module docstring)."""
    def key(box: _Box) -> str:
        return _DIGITS.sub("#", " ".join(box.lines).lower())

    edges: Counter[str] = Counter()
    for boxes in page_boxes:
        edges.update({key(box) for box in (boxes[:2] + boxes[-2:])})
    threshold = max(REPEATS_MIN, REPEATS_SHARE * len(page_boxes))
    running = {k for k, n in edges.items() if n >= threshold}
    if not running:
        return page_boxes
    kept = []
    for boxes in page_boxes:
        edge_ids = {id(b) for b in boxes[:2] + boxes[-2:]}
        kept.append([b for b in boxes if id(b) not in edge_ids or key(b) not in running])
    return kept


def _outline(document: object, page_numbers: dict[int, int]) -> list[_Heading]:
    """The outline's entries that point at a page, in order, with their depth (1 = top level)."""
    from pdfminer.pdfdocument import PDFNoOutlines
    from pdfminer.pdftypes import PDFObjRef, resolve1
    from pdfminer.psparser import PSLiteral

    def page_of(dest: object, action: object) -> int | None:
        if dest is None and isinstance(action, dict) and _name(action.get("S")) == "GoTo":
            dest = action.get("D")
        dest = resolve1(dest)
        if isinstance(dest, (bytes, str, PSLiteral)):
            dest = resolve1(document.get_dest(dest.name if isinstance(dest, PSLiteral) else dest))  # type: ignore[attr-defined]
        if isinstance(dest, dict):
            dest = resolve1(dest.get("D"))
        if isinstance(dest, list) and dest and isinstance(dest[0], PDFObjRef):
            return page_numbers.get(dest[0].objid)
        return None

    headings: list[_Heading] = []
    try:
        for level, title, dest, action, _ in document.get_outlines():  # type: ignore[attr-defined]
            try:
                page = page_of(dest, action)
            except Exception:  # noqa: BLE001 - a broken destination costs its heading, not the document
                page = None
            text = clean_heading(_decode(title))
            if page is not None and text:
                headings.append(_Heading(max(1, int(level)), text, page))
    except PDFNoOutlines:
        return []
    except Exception as exc:  # noqa: BLE001 - a broken outline: by page instead
        log.debug("unreadable outline: %s", exc)
        return []
    return headings


def _blocks(page_boxes: list[list[_Box]], headings: list[_Heading]) -> list[Block]:
    """Headings and paragraphs in reading order, each with its page number."""
    vocabulary = {w.lower() for boxes in page_boxes for box in boxes for line in box.lines for w in _WORD.findall(line)}
    by_page: dict[int, list[_Heading]] = {}
    for heading in headings:
        by_page.setdefault(heading.page, []).append(heading)
    blocks: list[Block] = []
    for number, boxes in enumerate(page_boxes, start=1):
        if not headings:
            blocks.append(Block("heading", f"Page {number}", level=1, page=number))
        pending = list(by_page.get(number, ()))
        placed: list[Block] = []
        for box in boxes:
            lines = list(box.lines)
            while pending and lines:
                found = next(((k, taken) for k, h in enumerate(pending) if (taken := _title_lines(lines, h.title))), None)
                if found is None:
                    break
                k, taken = found
                if placed and placed[-1].kind == "paragraph" and _NUMBERING.match(_letters(placed[-1].text)):
                    placed.pop()  # "Chapter 2" in a box of its own above the title: part of the heading
                # Entries before it in the outline whose titles were not found come just before it.
                placed += [Block("heading", h.title, level=min(h.level, 6), page=number) for h in pending[: k + 1]]
                pending = pending[k + 1:]
                lines = lines[taken:]
            text = _join_lines(lines, vocabulary)
            if text:
                placed.append(Block("paragraph", text, page=number))
        # Titles not found on their page open their section at its top, in outline order.
        top = [Block("heading", h.title, level=min(h.level, 6), page=number) for h in pending]
        blocks += top + placed
    return blocks


def _title_lines(lines: list[str], title: str) -> int:
    """How many leading lines (1 or 2) spell ``title``, possibly after its numbering; 0 when they do not."""
    wanted = _letters(title)
    if not wanted:
        return 0
    for count in (1, 2):
        if count > len(lines):
            break
        have = _letters(" ".join(lines[:count]))
        if have.endswith(wanted) and _NUMBERING.match(have[: len(have) - len(wanted)]):
            return count
    return 0


def _join_lines(lines: list[str], vocabulary: set[str]) -> str:
    """A box's lines as one paragraph: a word hyphenated at a line end is joined, unless the document writes
    it with its hyphen elsewhere ("Debian-specific")."""
    out = ""
    for line in lines:
        if not out:
            out = line
            continue
        broken = _BROKEN.search(out)
        first = _WORD.match(line)
        if broken and first and line[:1].islower():
            compound = f"{broken.group(1)}-{first.group(0)}".lower()
            out = out + line if compound in vocabulary else out[:-1] + line
        else:
            out = f"{out} {line}"
    return out.strip()


def _name(value: object) -> str | None:
    from pdfminer.psparser import PSLiteral

    return value.name if isinstance(value, PSLiteral) else None  # type: ignore[no-any-return]


def _decode(value: object) -> str:
    from pdfminer.utils import decode_text

    if isinstance(value, bytes):
        return decode_text(value)
    return str(value) if value is not None else ""


def _info_title(document: object) -> str | None:
    from pdfminer.pdftypes import resolve1

    for info in getattr(document, "info", ()):
        title = clean_heading(_decode(resolve1(info.get("Title"))))
        if title:
            return title
    return None


def _lang(document: object) -> str | None:
    from pdfminer.pdftypes import resolve1

    value = _decode(resolve1(getattr(document, "catalog", {}).get("Lang"))).strip()
    return value[:20] or None
