"""HTML preparation before extraction: parsing, and the repairs trafilatura needs on documentation sites.

Navigation panels out, a content container where trafilatura would find none, permalink anchors and
highlighted ``<pre>`` blocks flattened, and the page's language and title read from its markup.
Pure module: deterministic for a given tree.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterator
from typing import Any

from lxml import etree
from lxml import html as lxml_html

from pipelines.text import GLYPHS, clean_heading, collapse_ws

LOGGER = logging.getLogger(__name__)

_LANG_TAG = re.compile(r"^[A-Za-z]{2,3}(?:-[A-Za-z0-9]{1,8})*$")


def parse_html(text: str) -> lxml_html.HtmlElement | None:
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


def drop_nav_panels(tree: lxml_html.HtmlElement) -> None:
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

    trafilatura is imported on first use, here and in ``parse_html`` and ``pipelines/trafilatura_adapter.py``:
    the crawling process and the answering commands import the cleaning modules for their text helpers and
    never clean a page, and trafilatura's import (its regular expressions) was a large share of their
    start-up (BENCHMARKS.md, "Figures behind code comments").
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


def give_container(tree: lxml_html.HtmlElement) -> None:
    """Wrap the body's content in a ``<main>`` when trafilatura would find no content container.

    trafilatura keeps headings (and definition terms, list structure) only inside a container it
    recognises (its BODY_XPATH: ``<main>``, ``<article>``, class and id hints such as "post-content").
    Pages without one (DocBook's ``<div class="sect1">``, Texinfo's ``<div class="chapter-level-extent">``)
    go to its wild-text recovery instead, which takes paragraphs, code and tables from the whole
    document and drops every ``<h1>``–``<h6>`` and ``<dt>``: on the PostgreSQL manual almost no chunk had
    a heading path (benchmarks/HISTORY.md, "Cleaning on DocBook pages (PostgreSQL)"). The wrapper gives the
    extraction the same scope the recovery searched (the whole body), so nothing is widened; trafilatura's
    own pruning (navigation classes, link density) still applies inside it. Pages where a container exists are left exactly as they were.
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


_HEADINGS = frozenset("h1 h2 h3 h4 h5 h6".split())


def _heading_target(anchor: lxml_html.HtmlElement) -> bool:
    """An ``<a>`` in a heading that only marks a place: no href, no text, nothing inside."""
    return anchor.get("href") is None and not len(anchor) and not (anchor.text or "").strip() \
        and any(isinstance(a.tag, str) and a.tag.lower() in _HEADINGS for a in anchor.iterancestors())


_ADMONITIONS = frozenset("note tip caution warning important".split())


def _demote_admonition_titles(tree: lxml_html.HtmlElement) -> None:
    """A heading that titles a DocBook admonition (``<div class="note"><h3 class="title">Note</h3>``) becomes a
    paragraph: as a heading it opened a section that took in everything after the note up to the next heading."""
    for div in tree.iter("div"):
        if not _ADMONITIONS.intersection((div.get("class") or "").split()):
            continue
        first = next((child for child in div if isinstance(child.tag, str)), None)
        # DocBook's XSL marks the admonition's title so; a heading that opens a box of another generator
        # (<div class="warning"><h2>Security</h2>) may be a real section and stays one.
        if first is not None and first.tag.lower() in _HEADINGS and "title" in (first.get("class") or "").split():
            first.tag = "p"


def prepare(tree: lxml_html.HtmlElement) -> None:
    """Fix the two things trafilatura gets wrong on documentation sites.

    1. Permalink anchors (``<a class="headerlink">¶</a>``) would end up in headings and
       definition terms.
    2. Highlighted ``<pre>`` blocks nested in list items / ``dd`` are turned into
       ``<quote>`` with their newlines collapsed; a ``<pre>`` holding a single ``<span>``
       is recognised as code everywhere, so flatten each ``<pre>`` into exactly that.
    3. Section ids are heading slugs (Sphinx: ``<section id="how-do-i-share-global-variables…">``), but
       trafilatura reads ids as boilerplate hints and drops a whole section whose id contains e.g.
       "share" or "comment" (sections of the Python manual's devset pages were lost so). The id of a
       sectioning element says nothing about boilerplate, so it is removed before extraction.
    4. Empty link targets in headings (DocBook XHTML: ``<h2><a id="_apt"/>2.1. APT</h2>``): trafilatura counts
       the short block around such a heading as all links (one link, no link text) and deletes it, so every
       heading of the Debian Reference was lost. The target says nothing; its tag goes, its tail stays. Only
       in headings: elsewhere (PostgreSQL's index-term targets) it would change what English pages keep.
    5. Admonition titles (DocBook: ``<div class="note"><h3 class="title">Note</h3>``) are not section headings.
    """
    _demote_admonition_titles(tree)
    for element in tree.xpath("//section[@id] | //div[@id][contains(concat(' ', normalize-space(@class), ' '), ' section ')]"):
        del element.attrib["id"]
    for anchor in list(tree.iter("a")):
        if _heading_target(anchor):
            anchor.drop_tag()  # its whitespace and tail stay where they were
            continue
        href = anchor.get("href") or ""
        looks_permalink = href.startswith("#") or bool(_PERMALINK_CLASS.search(anchor.get("class") or ""))
        if not looks_permalink or anchor.getparent() is None:
            continue  # the attributes decide most anchors: no need for their text
        text = (anchor.text_content() or "").strip()
        if all(ch in GLYPHS + "#" for ch in text):
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


def _norm_lang(value: str | None) -> str | None:
    if not value:
        return None
    first = re.split(r"[,;\s]+", value.strip())[0].replace("_", "-")
    if not _LANG_TAG.match(first):
        return None
    primary, _, rest = first.partition("-")
    return primary.lower() + ("-" + rest if rest else "")


def html_lang(tree: lxml_html.HtmlElement) -> str | None:
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


def html_title(tree: lxml_html.HtmlElement) -> str | None:
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
