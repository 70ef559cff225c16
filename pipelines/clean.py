"""HTML → main-content XML and plain text.

Pure module: no Scrapy, no DuckDB, no network. Everything here is deterministic for a
given input, so re-cleaning a stored page yields byte-identical XML and therefore
identical chunk ids downstream.

The XML vocabulary is trafilatura's (``<doc><main>`` with ``<head rend="hN">``, ``<p>``,
``<list><item>``, ``<table><row><cell>``, ``<code>``, ``<quote>``). The lxml body fallback
emits the same vocabulary so :func:`xml_blocks` (used by the chunker) reads both alike.
"""

from __future__ import annotations

import codecs
import functools
import html as html_lib
import logging
import re
from collections.abc import Iterator
from copy import copy
from dataclasses import dataclass
from typing import Any

from lxml import etree
from lxml import html as lxml_html

LOGGER = logging.getLogger(__name__)

@dataclass(frozen=True)
class CleanResult:
    xml: str  # "" when method == "empty"
    text: str
    method: str  # "main" | "recall" | "body" | "empty"
    title: str | None
    lang: str | None
    html_bytes: int
    text_bytes: int


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


# --------------------------------------------------------------------------- text helpers

# Characters XML 1.0 cannot carry (lxml refuses them outright) plus lone surrogates,
# which cannot be UTF-8 encoded. Removing them up front is what makes NUL-laden or
# binary input safe for every later step.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
_WS = re.compile(r"\s+")
# Permalink glyphs that Sphinx, MkDocs, GitHub and friends append to headings.
_GLYPHS = "¶§🔗⚓\ufe0f\ufe0e\u200b\u200c\u200d\u2060"
_TRAILING_GLYPHS = re.compile(rf"(?:\s*[{_GLYPHS}]|\s+#)+\s*$")
_LEADING_GLYPHS = re.compile(r"^\s*(?:[¶🔗⚓\ufe0f\ufe0e\u200b\u200c\u200d\u2060]+|#+(?=\s))\s*")
# Markdown-style escapes some generators leak into heading text ("Step 1\.").
_BACKSLASH_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|>~])")
_META_CHARSET = re.compile(rb"""<meta[^>]{0,400}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]{1,40})""", re.I)
_LANG_TAG = re.compile(r"^[A-Za-z]{2,3}(?:-[A-Za-z0-9]{1,8})*$")


def collapse_ws(text: str) -> str:
    return " ".join(text.split())


def clean_heading(text: str) -> str:
    """Heading text as a reader sees it, without permalink glyphs or escapes.

    A trailing ``#`` is only removed when separated by whitespace so "C#" survives.
    """
    if "&" in text:
        # Double-escaped sources ("&amp;amp;") leave entities in the parsed text.
        text = html_lib.unescape(text)
    text = _XML_INVALID.sub("", text)
    text = _BACKSLASH_ESCAPE.sub(r"\1", text)
    text = collapse_ws(text)
    text = _TRAILING_GLYPHS.sub("", text)
    text = _LEADING_GLYPHS.sub("", text)
    return text.strip()


def _normalise_code(text: str) -> str:
    """Keep indentation (it is meaning in Python), drop only invisible noise."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    out: list[str] = []
    for line in lines:
        if not line and (not out or not out[-1]):
            continue  # leading blank lines and runs of blank lines
        out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)


def _sanitise(text: str) -> str:
    return _XML_INVALID.sub("", text)


_JUNK = re.compile("[\x00-\x08\x0e-\x1f\x7f\ufffd]")


def _looks_binary(text: str) -> bool:
    """Images, archives and PDFs served as text/html decode to control characters and
    U+FFFD; text with that much of them is not worth extracting (a mis-declared encoding
    on a real page stays far below 10%)."""
    sample = text[:65536]
    return bool(sample) and len(_JUNK.findall(sample)) > len(sample) // 10


# --------------------------------------------------------------------------- decoding & parsing


def _decode(data: bytes) -> str:
    if data.startswith(codecs.BOM_UTF8):
        return data[3:].decode("utf-8", errors="replace")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace")
    sample = data[:4096]
    odd_zeros, even_zeros = sample[1::2].count(0), sample[0::2].count(0)
    if len(sample) >= 16 and max(odd_zeros, even_zeros) > len(sample) // 3 and min(odd_zeros, even_zeros) * 10 < len(sample):
        # ASCII-heavy UTF-16 without a BOM: every other byte is a zero high byte.
        return data.decode("utf-16-le" if odd_zeros > even_zeros else "utf-16-be", errors="replace")
    match = _META_CHARSET.search(data[:8192])
    encoding = "utf-8"
    if match:
        declared = match.group(1).decode("ascii", errors="ignore").lower()
        try:
            encoding = codecs.lookup(declared).name
        except LookupError:
            encoding = "utf-8"
        # Browsers read these labels as windows-1252 (WHATWG encoding spec); pages rely on it.
        if encoding in {"latin-1", "iso8859-1", "ascii"}:
            encoding = "cp1252"
        # A page cannot truthfully declare UTF-16 in an ASCII-compatible <meta>.
        if encoding.startswith("utf-16") or encoding.startswith("utf-32"):
            encoding = "utf-8"
    return data.decode(encoding, errors="replace")


def _parse(text: str) -> lxml_html.HtmlElement | None:
    """Parse like trafilatura does, but still return a tree for bare fragments."""
    from trafilatura.utils import load_html

    tree = None
    try:
        tree = load_html(text)
    except Exception as err:  # trafilatura/lxml internals: never let them escape
        LOGGER.debug("load_html failed: %s", err)
    if tree is None:
        try:
            tree = lxml_html.document_fromstring(text)
        except Exception as err:
            LOGGER.debug("lxml fallback parse failed: %s", err)
            return None
    return tree


_PERMALINK_CLASS = re.compile(r"headerlink|anchor|permalink|hash-link|header-link", re.I)


# Links that say where they lead in the document's sequence: Texinfo's "Next: … Previous: … Up: …" panel
# (rel and accesskey), DocBook's "Prev Up Home Next" tables (accesskey), <link>-style rel values on <a>.
_NAV_REL = frozenset("next prev previous up contents index start first last home".split())
_NAV_BLOCKS = frozenset("p div table tr td ul ol li nav header footer center".split())


def _drop_nav_panels(tree: lxml_html.HtmlElement) -> None:
    """Remove navigation panels that carry no class trafilatura recognises.

    A panel is the nearest block around a sequence link (``rel="next"``/``"prev"``/``"up"``…, or an
    ``accesskey``) whose text is mostly link text: Texinfo's ``<div class="header"><p>Next: <a rel="next">…``
    started every page's text. A sequence link inside prose ("see the <a rel="next">next section</a>")
    sits in a block of mostly plain text and stays.
    """
    def mostly_links(block: lxml_html.HtmlElement) -> str | None:
        text = collapse_ws(block.text_content() or "")
        links = sum(len(collapse_ws(a.text_content() or "")) for a in block.iter("a"))
        return text if text and len(text) < 500 and links * 2 >= len(text.replace(" ", "")) else None

    def nearest_block(anchor: lxml_html.HtmlElement) -> lxml_html.HtmlElement | None:
        block = anchor.getparent()
        while block is not None and not (isinstance(block.tag, str) and block.tag.lower() in _NAV_BLOCKS):
            block = block.getparent()
        if block is None or block.getparent() is None or block.tag.lower() == "body":
            return None
        return block

    dropped: set[str] = set()
    link_texts: set[str] = set()
    for anchor in tree.xpath("//a[@rel or @accesskey]"):
        rels = set((anchor.get("rel") or "").lower().split())
        if not (rels & _NAV_REL or anchor.get("accesskey")):
            continue
        if (block := nearest_block(anchor)) is not None and (text := mostly_links(block)) is not None:
            dropped.add(text)
            link_texts.update(collapse_ws(a.text_content() or "") for a in block.iter("a"))
            block.drop_tree()
    link_texts.discard("")
    if dropped:
        # The same panel repeated at the foot of the page, with plain links this time: only the blocks
        # around links that read like the panel's are looked at, each once.
        seen: set[lxml_html.HtmlElement] = set()
        for anchor in list(tree.iter("a")):
            if collapse_ws(anchor.text_content() or "") not in link_texts:
                continue
            block, depth = nearest_block(anchor), 0
            while block is not None and block not in seen and depth < 4:
                seen.add(block)
                if mostly_links(block) in dropped:
                    block.drop_tree()
                    break
                # The panel may be the block around the one holding the link (a <div> around a <p>, a table).
                parent, depth = block.getparent(), depth + 1
                block = parent if parent is not None and parent.getparent() is not None and isinstance(parent.tag, str) \
                    and parent.tag.lower() in _NAV_BLOCKS else None


def _h1_outside(container: lxml_html.HtmlElement, body: lxml_html.HtmlElement) -> lxml_html.HtmlElement | None:
    """The block holding the page's first real ``<h1>`` when it precedes ``container`` outside it, else None.

    A real h1 is not inside ``<header>``/``<nav>``/``<aside>``/``<footer>`` and is not just a link (a site
    name linking home). The block returned is the h1's ancestor that is a sibling of one of the container's
    ancestors; it is only returned when its text is short next to the container's (a title block, not a
    layout column).
    """
    for h1 in body.iter("h1"):
        if any(isinstance(a.tag, str) and a.tag.lower() in {"header", "nav", "aside", "footer"} for a in h1.iterancestors()):
            continue
        text = collapse_ws(h1.text_content() or "")
        link_text = collapse_ws(" ".join(a.text_content() or "" for a in h1.iter("a")))
        if not text or link_text == text:
            continue
        break
    else:
        return None
    if any(a is container for a in h1.iterancestors()):
        return None
    # The set holds the elements themselves: an id() of a freed lxml proxy can be reused by another one.
    container_line = {container, *container.iterancestors()}
    block = h1
    while block.getparent() is not None and block.getparent() not in container_line:
        block = block.getparent()
    parent = block.getparent()
    if parent is None:
        return None
    # The container's ancestor that is a sibling of the block, and the block must come first.
    sibling = container
    while sibling.getparent() is not parent:
        sibling = sibling.getparent()
    if parent.index(block) > parent.index(sibling):
        return None
    if len(collapse_ws(block.text_content() or "")) * 4 > len(collapse_ws(container.text_content() or "")):
        return None
    return block


def _append_tail(element: lxml_html.HtmlElement, tail: str | None) -> None:
    """Keep the text that followed ``element`` where it was (its previous sibling or parent) before a move."""
    if not tail:
        return
    previous = element.getprevious()
    if previous is not None:
        previous.tail = (previous.tail or "") + tail
    elif element.getparent() is not None:
        parent = element.getparent()
        parent.text = (parent.text or "") + tail


# What an expression may consist of to be answerable on a skeleton (below): string literals (replaced by
# '' first), `.//*` under a tag test, `.//tag`, `self::tag`, own attributes, a few string functions, [1].
_XPATH_LITERAL = re.compile(r"'[^']*'|\"[^\"]*\"")
_XPATH_TOKEN = re.compile(
    r"\s+|''|\.//\*\[self::[\w-]+(?:\s+or\s+self::[\w-]+)*\]|\.//[\w-]+|self::[\w-]+|@[\w-]+"
    r"|(?:re:test|contains|translate|starts-with)(?=\()|(?<![\w-])(?:or|and)(?![\w-])|\[1\]|[()\[\],=|]"
)


def _own_attribute_query(path: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """(tags, attributes) when ``path`` selects elements of those tags by those attributes of their own
    and at most by first position, else None."""
    path = _XPATH_LITERAL.sub("''", path)
    tags: set[str] = set()
    attributes: set[str] = set()
    position = depth = 0  # depth: how many predicate brackets are open
    while position < len(path):
        token = _XPATH_TOKEN.match(path, position)
        if token is None:
            return None
        text = token.group(0)
        if text.startswith(".//"):
            if depth:
                return None  # a path inside a predicate looks beyond the element itself
            tags.update(re.findall(r"self::([\w-]+)", text) if text.startswith(".//*") else [text[3:]])
        elif not depth and not (text.isspace() or text in {"(", ")", "|", "[", "[1]"}):
            return None  # outside predicates only paths from the context, grouped, united, or first of
        elif text.startswith("@"):
            attributes.add(text[1:])
        depth += (text == "[") - (text == "]")
        position = token.end()
    return (frozenset(tags), frozenset(attributes)) if tags and depth == 0 else None


@functools.cache
def container_queries() -> list[tuple[Any, tuple[frozenset[str], frozenset[str]] | None]]:
    """trafilatura's own content container expressions, in the order it tries them, each with its
    ``_own_attribute_query`` shape.

    trafilatura is imported on first use, here and in ``_parse`` and ``_trafilatura``: the crawling process
    and the answering commands import this module for its text helpers and never clean a page, and
    trafilatura's import (its regular expressions) was a large share of their start-up (BENCHMARKS.md).
    """
    try:
        from trafilatura.xpaths import BODY_XPATH as xpaths
    except ImportError:  # pragma: no cover - a trafilatura that moved it: <main>/<article> are the common case
        xpaths = [etree.XPath("(.//main)[1]|(.//article)[1]")]
    return [(expr, _own_attribute_query(expr.path)) for expr in xpaths]


def _containers(tree: lxml_html.HtmlElement) -> Iterator[lxml_html.HtmlElement | None]:
    """For each of trafilatura's container expressions in turn, the first element it finds in ``tree``.

    The expressions test an element's tag and own attributes only, yet evaluating them visits every element
    of the page (and calls back into Python for each regular expression); they are answered on a skeleton
    instead: one flat element per distinct tag and tested attributes among the elements of a tested tag, in
    the order of their first occurrence. The first element found is the same: the first occurrence of the
    first matching kind, as a "[1]" only picks the first in document order among what it would otherwise
    find. An expression of another shape is evaluated on the page.
    """
    skeleton: etree._Element | None = None
    firsts: list[lxml_html.HtmlElement] = []
    queries = container_queries()
    for expr, query in queries:
        if query is None:
            yield next(iter(expr(tree)), None)
            continue
        if skeleton is None:
            tags = frozenset().union(*(q[0] for _, q in queries if q is not None))
            names = sorted(frozenset().union(*(q[1] for _, q in queries if q is not None)))
            skeleton = etree.Element("skeleton")
            kinds: set[tuple[str, tuple[str | None, ...]]] = set()
            for element in tree.iterdescendants(*tags):
                kind = (element.tag, tuple(element.get(n) for n in names))
                if kind not in kinds:
                    kinds.add(kind)
                    firsts.append(element)
                    etree.SubElement(skeleton, element.tag, {n: v for n, v in zip(names, kind[1]) if v is not None})
        found = next(iter(expr(skeleton)), None)
        yield None if found is None else firsts[skeleton.index(found)]


def _give_container(tree: lxml_html.HtmlElement) -> None:
    """Wrap the body's content in a ``<main>`` when trafilatura would find no content container.

    trafilatura keeps headings (and definition terms, list structure) only inside a container it
    recognises (its BODY_XPATH: ``<main>``, ``<article>``, class and id hints such as "post-content").
    Pages without one (DocBook's ``<div class="sect1">``, Texinfo's ``<div class="chapter-level-extent">``)
    go to its wild-text recovery instead, which takes paragraphs, code and tables from the whole
    document and drops every ``<h1>``–``<h6>`` and ``<dt>``: on the PostgreSQL manual 2,124 of 2,125
    chunks had no heading path. The wrapper gives the extraction the same scope the recovery searched
    (the whole body), so nothing is widened; trafilatura's own pruning (navigation classes, link
    density) still applies inside it. Pages where a container exists are left exactly as they were.
    """
    body = tree.find(".//body")
    if body is None or len(body) == 0:
        return
    for container in _containers(tree):
        if container is not None:
            # asciidoc puts the page's <h1> (and its NAME section) in <div id="header">, before the
            # <div id="content"> trafilatura picks: the title block moves to the container's start.
            if (block := _h1_outside(container, body)) is not None:
                tail, block.tail = block.tail, None
                _append_tail(block, tail)
                container.insert(0, block)
            return
    main = lxml_html.Element("main")
    main.text, body.text = body.text, None
    main.extend(list(body))  # moves the children, tails included
    body.append(main)


def _prepare(tree: lxml_html.HtmlElement) -> None:
    """Fix the two things trafilatura gets wrong on documentation sites.

    1. Permalink anchors (``<a class="headerlink">¶</a>``) would end up in headings and
       definition terms.
    2. Highlighted ``<pre>`` blocks nested in list items / ``dd`` are turned into
       ``<quote>`` with their newlines collapsed; a ``<pre>`` holding a single ``<span>``
       is recognised as code everywhere, so flatten each ``<pre>`` into exactly that.
    3. Section ids are heading slugs (Sphinx: ``<section id="how-do-i-share-global-variables…">``), but
       trafilatura reads ids as boilerplate hints and drops a whole section whose id contains e.g.
       "share" or "comment" (10 of 2,262 sections of the Python manual's devset pages). The id of a
       sectioning element says nothing about boilerplate, so it is removed before extraction.
    """
    for element in tree.xpath("//section[@id] | //div[@id][contains(concat(' ', normalize-space(@class), ' '), ' section ')]"):
        del element.attrib["id"]
    for anchor in list(tree.iter("a")):
        href = anchor.get("href") or ""
        looks_permalink = href.startswith("#") or bool(_PERMALINK_CLASS.search(anchor.get("class") or ""))
        if not looks_permalink or anchor.getparent() is None:
            continue  # the attributes decide most anchors: no need for their text
        text = (anchor.text_content() or "").strip()
        if all(ch in _GLYPHS + "#" for ch in text):
            anchor.drop_tree()
    for cell in tree.iter("td", "th"):
        # trafilatura flattens a table nested in a list item into its cells' inline content; without a
        # separator the cells run together ("REINDEXTRUNCATE").
        # trafilatura drops the cell's tail, so the separator goes at the end of its content.
        if len(cell):
            cell[-1].tail = (cell[-1].tail or "") + "\n"
        else:
            cell.text = (cell.text or "") + "\n"
    for pre in list(tree.iter("pre")):
        for br in pre.iter("br"):
            br.tail = "\n" + (br.tail or "")
        code = pre.text_content()  # the same string as joining itertext(), built in C in one piece
        # Slice deletion removes the children (tails included, as remove() does) without a Python proxy
        # for each highlighted span.
        del pre[:]
        pre.text = None
        span = lxml_html.Element("span")
        span.text = code
        pre.append(span)


# --------------------------------------------------------------------------- metadata


def _norm_lang(value: str | None) -> str | None:
    if not value:
        return None
    first = re.split(r"[,;\s]+", value.strip())[0].replace("_", "-")
    if not _LANG_TAG.match(first):
        return None
    primary, _, rest = first.partition("-")
    return primary.lower() + ("-" + rest if rest else "")


def _html_lang(tree: lxml_html.HtmlElement) -> str | None:
    root = tree.getroottree().getroot()
    for attr in ("lang", "{http://www.w3.org/XML/1998/namespace}lang", "xml:lang"):
        if lang := _norm_lang(root.get(attr)):
            return lang
    for meta in tree.iter("meta"):
        key = (meta.get("http-equiv") or meta.get("name") or meta.get("property") or "").lower()
        if key in {"content-language", "language", "dc.language", "og:locale"}:
            if lang := _norm_lang(meta.get("content")):
                return lang
    return None


def _html_title(tree: lxml_html.HtmlElement) -> str | None:
    """The page's ``<title>``, or its first ``<h1>`` when the title is that heading plus the site's name
    ("json — JSON encoder and decoder — Python 3.11 documentation"), or the ``<h1>`` alone."""
    texts = []
    for path in (".//title", ".//h1"):
        el = tree.find(path)
        texts.append(clean_heading(el.text_content() or "") if el is not None else "")
    title, h1 = texts
    if title and h1 and len(h1) < len(title) and title.startswith(h1):
        return h1
    return title or h1 or None


# --------------------------------------------------------------------------- trafilatura

_XML_PARSER = etree.XMLParser(
    recover=True, huge_tree=True, resolve_entities=False, no_network=True, remove_comments=True, remove_pis=True
)
# Date extraction is irrelevant here; a fixed upper bound keeps output independent of "today".
_DATE_PARAMS = {"original_date": True, "extensive_search": False, "max_date": "2099-12-31"}
_HEAD_REND = re.compile(r"^h([1-6])$")


#: trafilatura's metadata extraction (title, author, date, categories…): 14–43 ms of CPU a page, and not one
#: devset page's cleaned text changes without it (BENCHMARKS.md, "What process_page costs beyond the bare
#: extraction"). It gave only the title, which ``_html_title`` reads from ``<title>``/``<h1>``.
TRAFILATURA_METADATA = False
#: trafilatura's comparison of its extraction with its fallback extractors (readability, jusText): ~40 ms a
#: page on the Python manual; without it 1 of 440 devset pages' text changes and no expect phrase is lost
#: (same section). ``fast=True`` when off. Both switches are module attributes for benchmarks/bench_clean.py.
TRAFILATURA_FALLBACK = False


def _trafilatura(tree: lxml_html.HtmlElement, url: str | None, recall: bool) -> tuple[etree._Element | None, str | None]:
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
        root = etree.fromstring(xml_text.encode("utf-8"), _XML_PARSER)
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
        if _HEAD_REND.match(attrs["rend"]):
            head.set("rend", attrs["rend"])
    if title:
        root.set("title", title)
    return root, title


def _title_heading_on_top(root: etree._Element, page_title: str | None) -> None:
    """Put the heading that repeats the page's ``<title>`` above the page's other headings.

    DocBook reference pages give the page's name the level of its sections (``<h2>NOTIFY</h2>`` then
    ``<h2>Synopsis</h2>``, ``<h2>Description</h2>``), so chunks were filed under "Description" alone, which
    says nothing about the page. When the first heading is the page's title and no later heading is above it,
    it moves one level above the highest of them (never past h1), as on pages that use h1 for their title.
    """
    if not page_title:
        return
    heads = [h for h in root.iter("head") if _HEAD_REND.match(h.get("rend") or "")]
    if len(heads) < 2 or (heads[0].text or "").casefold() != page_title.casefold():
        return
    top = min(int(h.get("rend")[1]) for h in heads[1:])
    if int(heads[0].get("rend")[1]) >= top > 1:
        heads[0].set("rend", f"h{top - 1}")


# --------------------------------------------------------------------------- lxml body fallback

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


def _body_xml(tree: lxml_html.HtmlElement, url: str | None, title: str | None) -> etree._Element:
    """Whole-body text in trafilatura's vocabulary, headings kept as ``<head rend="hN">``.

    Walks with ``etree.iterwalk`` (iterative, C-driven) so deeply nested input cannot hit
    Python's recursion limit.
    """
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
        doc.set("url", _sanitise(url))
    main = etree.SubElement(doc, "main")
    containers: list[etree._Element] = [main]
    # Keyed by the element itself: holding the proxy keeps its identity stable (an id() of a
    # freed lxml proxy can be reused by another element).
    opened: dict[lxml_html.HtmlElement, int] = {}  # html element -> depth of the container it opened
    buf: list[str] = []
    capture: tuple[lxml_html.HtmlElement, str, list[str]] | None = None

    def flush() -> None:
        text = collapse_ws("".join(buf))
        buf.clear()
        if not text:
            return
        container = containers[-1]
        if container.tag in {"item", "cell"} and len(container) == 0 and not container.text:
            container.text = text
        elif container.tag in {"list", "table", "row"}:
            _slot(container).text = text
        else:
            etree.SubElement(container, "p").text = text

    def finish_capture(tag: str, pieces: list[str]) -> None:
        raw = "".join(pieces)
        container = containers[-1]
        if tag == "pre":
            code = _normalise_code(raw)
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

    for event, el in etree.iterwalk(body, events=("start", "end")):
        tag = el.tag.lower() if isinstance(el.tag, str) else ""
        if capture is not None:
            cap_el, cap_tag, pieces = capture
            if event == "start":
                if el is not cap_el:
                    if tag == "br":
                        pieces.append("\n")
                    elif tag in _BLOCK_TAGS and cap_tag != "pre":
                        pieces.append(" ")
                pieces.append(el.text or "")
            elif el is cap_el:
                capture = None
                finish_capture(cap_tag, pieces)
                buf.append(el.tail or "")
            else:
                if tag in _BLOCK_TAGS and cap_tag != "pre":
                    pieces.append(" ")
                pieces.append(el.tail or "")
            continue

        if event == "start":
            if tag in _CAPTURE_TAGS:
                flush()
                capture = (el, tag, [el.text or ""])
                continue
            if tag in {"ul", "ol", "dl", "menu"}:
                flush()
                parent = containers[-1]
                if parent.tag == "list":
                    parent = etree.SubElement(parent, "item")
                elif parent.tag in {"table", "row"}:
                    parent = _slot(parent)
                new = etree.SubElement(parent, "list", rend="ol" if tag == "ol" else "dl" if tag == "dl" else "ul")
            elif tag in {"li", "dt", "dd"}:
                flush()
                parent = containers[-1]
                if parent.tag in {"table", "row"}:
                    parent = _slot(parent)
                new = etree.SubElement(parent, "item")
                if tag != "li":
                    new.set("rend", tag)
            elif tag == "table":
                flush()
                new = etree.SubElement(_slot(containers[-1]) if containers[-1].tag == "list" else containers[-1], "table")
            elif tag == "tr" and containers[-1].tag == "table":
                flush()
                new = etree.SubElement(containers[-1], "row")
            elif tag == "blockquote":
                flush()
                new = etree.SubElement(_slot(containers[-1]), "quote")
            else:
                if tag == "br":
                    buf.append("\n")
                elif tag in _BLOCK_TAGS:
                    flush()
                buf.append(el.text or "")
                continue
            opened[el] = len(containers)
            containers.append(new)
            buf.append(el.text or "")
        else:
            depth = opened.pop(el, None)
            if depth is not None:
                flush()
                del containers[depth:]
            elif tag in _BLOCK_TAGS:
                flush()
            buf.append(el.tail or "")
    flush()

    # Drop structure that ended up without any text (empty lists, rows of empty cells).
    for el in reversed(list(main.iter())):
        if el is not main and not (el.text or "").strip() and len(el) == 0:
            el.getparent().remove(el)
    return doc


# --------------------------------------------------------------------------- XML → blocks


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


def _walk_blocks(root: etree._Element) -> list[Block]:
    blocks: list[Block] = []
    groups = iter(range(1 << 62))

    def emit_text(frame: _Frame, text: str, kind: str = "paragraph") -> None:
        if not text:
            return
        if frame.item_kind:
            blocks.append(Block(frame.item_kind, frame.marker + text, group=frame.list_group))
            frame.item_kind = ""
            return
        blocks.append(Block(kind, text))

    def flush(frame: _Frame) -> None:
        text = collapse_ws("".join(frame.buf))
        frame.buf.clear()
        emit_text(frame, text)

    main = root.find(".//main")
    if main is None:
        main = root
    stack = [_Frame(main)]
    while stack:
        frame = stack[-1]
        child = next(frame.children, None)
        if child is None:
            flush(frame)
            stack.pop()
            if stack:
                stack[-1].buf.append(frame.element.tail or "")
            continue
        tag = child.tag if isinstance(child.tag, str) else ""
        if not tag or tag in {"comments", "graphic", "fw", "note"}:
            frame.buf.append(child.tail or "")
            continue
        if tag == "head":
            flush(frame)
            match = _HEAD_REND.match(child.get("rend") or "")
            text = clean_heading(_inline_text(child))
            if text:
                # An unlabelled <head> (e.g. from <summary>) is minor: never start a section.
                blocks.append(Block("heading", text, level=int(match.group(1)) if match else 4))
        elif tag == "p":
            flush(frame)
            emit_text(frame, collapse_ws(_inline_text(child)))
        elif tag == "code" and _is_block_code(child, frame.buf):
            flush(frame)
            code = _normalise_code(_inline_text(child))
            if code:
                blocks.append(Block("code", code))
        elif tag == "table":
            flush(frame)
            if text := _table_text(child):
                blocks.append(Block("table", text))
        elif tag == "list":
            flush(frame)
            stack.append(_Frame(child, list_group=next(groups), rend=child.get("rend") or "ul"))
            continue
        elif tag == "item":
            flush(frame)
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
            group = frame.list_group if frame.element.tag == "list" else next(groups)
            stack.append(_Frame(child, marker=marker, list_group=group, item_kind=kind))
            continue
        elif tag in {"quote", "div", "main", "body", "section", "doc", "cell", "row"}:
            flush(frame)
            stack.append(_Frame(child))
            continue
        else:  # inline: hi, ref, span, inline code, del, ...
            frame.buf.append(_inline_text(child))
            frame.buf.append(child.tail or "")
            continue
        frame.buf = [child.tail or ""]
    return blocks


def xml_blocks(xml: str | etree._Element) -> list[Block]:
    """Content blocks of a trafilatura-style XML document, in reading order."""
    if isinstance(xml, str):
        if not xml.strip():
            return []
        try:
            root = etree.fromstring(_sanitise(xml).encode("utf-8"), _XML_PARSER)
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


# --------------------------------------------------------------------------- entry point


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
    if isinstance(html, (bytes, bytearray, memoryview)):
        raw = bytes(html)
        html_bytes = len(raw)
        text_in = _decode(raw)
    else:
        text_in = html if isinstance(html, str) else str(html)
        html_bytes = len(text_in.encode("utf-8", errors="replace"))

    def empty(title: str | None = None, lang: str | None = None) -> tuple[CleanResult, list[Block]]:
        return CleanResult("", "", "empty", title, lang, html_bytes, 0), []

    if not text_in.strip() or _looks_binary(text_in):
        return empty()
    text_in = _sanitise(text_in)
    tree = _parse(text_in)
    if tree is None:
        return empty()

    try:
        _prepare(tree)
        _drop_nav_panels(tree)
        _give_container(tree)
        lang = _html_lang(tree)
        page_title = _html_title(tree)
    except Exception as err:
        LOGGER.debug("page preparation failed on %s: %s", url, err)
        lang, page_title = None, None

    candidates: list[tuple[str, etree._Element, str, list[Block]]] = []
    title: str | None = None
    for method in ("main", "recall", "body"):
        try:
            if method == "body":
                root = _body_xml(tree, url, title or page_title)
            else:
                # trafilatura copies a tree it is given before changing it, so attempts stay independent
                # of each other without a copy of our own (test_trafilatura_leaves_the_tree_alone).
                root, found_title = _trafilatura(tree, url, recall=method == "recall")
                title = title or found_title
            if root is None:
                continue
            # Done before the walk so the blocks are those of the final XML; it moves a heading's level,
            # never text, so the text that picks the winner is the same.
            _title_heading_on_top(root, page_title)
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

    title = title or page_title
    if not candidates:
        return empty(title, lang)
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


# --------------------------------------------------------------------------- decoding sanity


def whatwg_decode(body: bytes, encoding: str) -> str | None:
    """The body decoded as browsers do where Python's codecs differ, or None to use the usual decoding.

    WHATWG: the label ``utf-16`` means UTF-16LE unless a byte-order mark says otherwise; Python's
    ``utf-16`` codec reads BOM-less bytes big-endian, which turned every page into CJK-looking junk.
    """
    if encoding.lower().replace("_", "-") in ("utf-16", "utf16") and not body.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return body.decode("utf-16-le", errors="replace")
    return None


def garbled_share(text: str, sample: int = 65536) -> float:
    """Share of characters that only a wrong decoding produces: U+FFFD, NUL, and U+xx00 above U+00FF.

    Byte-swapped UTF-16 turns ASCII into U+xx00 characters (``<`` → U+3C00); real text in any script
    has them at about 1 in 256. Whitespace is not counted.
    """
    text = text[:sample]
    # Only characters above U+00FF can be garbled: the regex finds them in C, so the Python loop runs over
    # the few a real page has (the loop over all 65,536 characters was 3% of the crawling process's CPU).
    # And NUL: UTF-16 without a BOM or charset read as a single-byte encoding is every other character.
    bad = text.count("\x00") + sum(1 for c in _ABOVE_LATIN1.findall(text) if c == "\ufffd" or ord(c) & 0xFF == 0)
    if not bad:  # most pages: no need to count the visible characters
        return 0.0
    visible = len("".join(text.split()))  # non-whitespace characters, as str.isspace counts them
    return bad / visible if visible else 0.0


_ABOVE_LATIN1 = re.compile("[^\x00-\xff]")


#: Above this share of garbled characters a decoded page is recorded as failed, not stored.
GARBLED_SHARE = 0.2
