"""Split cleaned page XML into retrieval chunks along its heading structure.

Pure module: no Scrapy, no DuckDB. Same ``xml`` + ``url`` → identical chunks and ids.

Rules (the "why" lives next to the code that implements each one):

* **Sections** start at h1–h3. The heading path is a stack: a heading of level L pops
  every open heading of level ≥ L, then pushes itself, so h1 › h2 › h3 is followed by a
  new h2 as h1 › h2'. Skipped levels are fine (h1 then h3 gives (h1, h3)). h4–h6 stay
  inside the current section as lines of text. A heading whose section has no body text
  produces no chunk of its own; it still appears in the paths of its subsections.
* **Content before the first heading** gets the empty path ``()``: the page title belongs
  to the page record, not to each chunk.
* **Long sections** are packed greedily up to ``max_tokens``: prose sentence by sentence,
  code blocks, tables and list items as whole blocks. A block larger than the whole budget
  is split by lines (code, tables) or sentences (prose), words and finally characters as a
  last resort. Consecutive pieces of one section overlap by whole trailing sentences of
  the previous piece totalling at most ``overlap_tokens`` (code/table lines and list items
  are never repeated). A definition term or h4–h6 line is never left dangling at the end
  of a piece: it moves to the next piece with the content it introduces. When the last
  piece of a section would be a crumb under ``min_tokens`` ("New in version 3.11."),
  trailing blocks of the previous piece move into it so it has context.
* **Tiny sections** (a whole section under ``min_tokens``) are merged with a neighbour:
  the following chunk if it lies under the same parent heading, else the preceding chunk
  under the same parent, and only when the result still fits ``max_tokens`` (so merging
  never forces a re-split); otherwise the tiny chunk stays as it is. The merged chunk's
  path is the longest common prefix of the two paths, and each merged part whose own path
  is longer gets its remaining heading(s) as a first line, so no heading text is lost.
  Exception: page-level content (path ``()``) adopts the neighbour's path, because the
  page's lede belongs with its first section rather than demoting that section to ``()``.
* **Token budget**: every chunk satisfies ``estimate_tokens(text) <= max_tokens``; the
  heading path is not counted (callers that embed "path + text" should leave room).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field

from pipelines import defaults
from pipelines.blocks import Block, xml_blocks

HEADING_SEPARATOR = " › "
SECTION_MAX_LEVEL = 3


@dataclass(frozen=True)
class Chunk:
    chunk_id: str
    ordinal: int
    heading_path: tuple[str, ...]
    text: str
    token_estimate: int
    content_hash: str
    page: int | None = None  # the page it starts on, in a paged document (a PDF): cited as URL#page=N

    @property
    def heading(self) -> str:
        return HEADING_SEPARATOR.join(self.heading_path)


# --------------------------------------------------------------------------- tokens


def _estimate(words: int, chars: int) -> int:
    # Integer form of max(ceil(words * 1.3), ceil(chars / 4)): exact, no float rounding.
    if words == 0:
        return 0
    return max((13 * words + 9) // 10, (chars + 3) // 4)


def estimate_tokens(text: str) -> int:
    """Tokenizer-free estimate: ``max(ceil(words * 1.3), ceil(chars / 4))``.

    English prose runs about 1.3 BPE tokens per whitespace word; code, URLs and numbers
    have few spaces but many tokens, which the 4-characters-per-token bound catches.
    Taking the larger keeps the estimate on the safe side for embedding context limits.
    Whitespace-only text is 0 tokens.
    """
    return _estimate(len(text.split()), len(text))


# --------------------------------------------------------------------------- sentences

# Words after which a period does not end a sentence (compared lower-cased, with the dot).
# "etc." is deliberately absent: it ends sentences often, and the next-word test below
# already keeps "etc. and so on" together.
_ABBREVIATIONS = frozenset(
    """e.g. i.e. cf. vs. viz. approx. ca. incl. resp. esp. dr. mr. mrs. ms. prof. st. jr. sr.
    fig. figs. no. nos. vol. vols. pp. p. ed. eds. eq. eqs. sec. ch. al. inc. ltd. co. corp.
    dept. est. min. max. mt. ref. refs. jan. feb. mar. apr. jun. jul. aug. sep. sept. oct.
    nov. dec.""".split()
)
_BOUNDARY = re.compile(r"([.!?…]+)([\"'”’)\]]*)(\s+)")
_INITIALISM = re.compile(r"(?:[A-Za-z]\.){2,}")
_ENUMERATOR = re.compile(r"[(\[]?(?:\d{1,3}|[A-Za-z]|[ivxlcdm]{1,5})[.)]", re.I)
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


def _is_sentence_end(text: str, start: int, match: re.Match[str]) -> bool:
    nxt = text[match.end()] if match.end() < len(text) else ""
    if not nxt or nxt.islower() or nxt in ",;:":
        return False
    if match.group(1)[-1] != ".":
        return True
    head = text[start : match.end(1)]
    # Only the tail matters; bounding it keeps long abbreviation-laden runs linear.
    word_match = re.search(r"\S+$", head[-64:])
    word = word_match.group(0).lstrip("([{\"'“‘") if word_match else ""
    lowered = word.lower()
    if lowered in _ABBREVIATIONS or _INITIALISM.fullmatch(word):
        return False
    if len(word) == 2 and word[0].isupper():  # an initial: "J. Smith"
        return False
    # "1. Install" / "(a) ..." at the very start of a sentence is an enumerator, not one.
    return len(head) > 16 or not _ENUMERATOR.fullmatch(head.strip())


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences without breaking abbreviations, numbers or URLs.

    A boundary is sentence punctuation (plus closing quotes/brackets) followed by
    whitespace and a character that is not lower-case. Periods inside tokens ("v1.0",
    "3.11.2", "setup.py", "https://example.com/a.b") are never followed by whitespace and
    so never split; known abbreviations ("e.g.", "Dr."), initialisms ("U.S."), single
    initials and leading enumerators ("1.") do not end a sentence. Blank lines always do.
    """
    sentences: list[str] = []
    for paragraph in _PARAGRAPH_BREAK.split(text):
        start = 0
        for match in _BOUNDARY.finditer(paragraph):
            if match.end() >= len(paragraph):
                break
            if _is_sentence_end(paragraph, start, match):
                sentence = paragraph[start : match.end(2)].strip()
                if sentence:
                    sentences.append(sentence)
                start = match.end()
        rest = paragraph[start:].strip()
        if rest:
            sentences.append(rest)
    return sentences


# --------------------------------------------------------------------------- units & packing


@dataclass
class _Unit:
    """The smallest thing the packer places: a sentence, a line, or a whole block."""

    text: str
    block: int  # index of the source block within its section
    group: int  # Block.group: items of one list join with a newline
    inner_sep: str  # separator from the previous unit of the same block
    overlap_ok: bool  # may be repeated at the start of the next piece
    keep_with_next: bool  # a term/sub-heading introduces what follows
    words: int = 0

    def __post_init__(self) -> None:
        self.words = len(self.text.split())


def _separator(prev: _Unit, unit: _Unit) -> str:
    if prev.block == unit.block:
        return unit.inner_sep
    if unit.group >= 0 and unit.group == prev.group:
        return "\n"
    return "\n\n"


def _join(units: list[_Unit]) -> str:
    parts: list[str] = []
    for i, unit in enumerate(units):
        if i:
            parts.append(_separator(units[i - 1], unit))
        parts.append(unit.text)
    return "".join(parts).strip()


def _tokens(units: list[_Unit]) -> int:
    """Same value as estimate_tokens(_join(units)) before the final strip, in O(n)."""
    words = sum(u.words for u in units)
    chars = sum(len(u.text) for u in units) + sum(len(_separator(a, b)) for a, b in zip(units, units[1:]))
    return _estimate(words, chars)


def _hard_split(text: str, max_tokens: int) -> list[str]:
    """Last resort for one sentence/line over budget: whole words, then characters."""
    out: list[str] = []
    words: list[str] = []
    n_words = n_chars = 0
    limit_chars = max(1, max_tokens * 4)
    for word in text.split():
        while word and len(word) > limit_chars:
            if words:
                out.append(" ".join(words))
                words, n_words, n_chars = [], 0, 0
            out.append(word[:limit_chars])
            word = word[limit_chars:]
        if not word:
            continue
        add_chars = len(word) + (1 if words else 0)
        if words and max((13 * (n_words + 1) + 9) // 10, (n_chars + add_chars + 3) // 4) > max_tokens:
            out.append(" ".join(words))
            words, n_words, n_chars, add_chars = [], 0, 0, len(word)
        words.append(word)
        n_words += 1
        n_chars += add_chars
    if words:
        out.append(" ".join(words))
    return out


def _group_lines(lines: list[str], max_tokens: int) -> list[str]:
    """Pack code/table lines into line groups that each fit the budget."""
    out: list[str] = []
    current: list[str] = []
    words = chars = 0
    for line in lines:
        if _estimate(len(line.split()), len(line)) > max_tokens:
            if current:
                out.append("\n".join(current))
                current, words, chars = [], 0, 0
            out.extend(_hard_split(line, max_tokens))
            continue
        add_words, add_chars = len(line.split()), len(line) + (1 if current else 0)
        if current and _estimate(words + add_words, chars + add_chars) > max_tokens:
            out.append("\n".join(current))
            current, words, chars, add_chars = [], 0, 0, len(line)
        current.append(line)
        words += add_words
        chars += add_chars
    if current:
        out.append("\n".join(current))
    return [part for part in out if part.strip()]


def _block_units(block: Block, index: int, max_tokens: int) -> list[_Unit]:
    text = block.text
    keep = block.kind in {"term", "heading"}  # h4–h6 arrive here as kind "heading"
    if block.kind in {"code", "table"}:
        if estimate_tokens(text) <= max_tokens:
            return [_Unit(text, index, block.group, "\n", False, False)]
        return [_Unit(part, index, block.group, "\n", False, False) for part in _group_lines(text.split("\n"), max_tokens)]
    prose = block.kind == "paragraph"
    if not prose and estimate_tokens(text) <= max_tokens:
        # List items, terms and sub-headings are atomic when they fit.
        return [_Unit(text, index, block.group, " ", False, keep)]
    units: list[_Unit] = []
    for sentence in split_sentences(text):
        pieces = [sentence] if estimate_tokens(sentence) <= max_tokens else _hard_split(sentence, max_tokens)
        units.extend(_Unit(p, index, block.group, " ", prose, keep) for p in pieces)
    return units


def _overlap(units: list[_Unit], overlap_tokens: int) -> list[_Unit]:
    """Trailing whole sentences of a piece, at most ``overlap_tokens`` together."""
    overlap: list[_Unit] = []
    for unit in reversed(units):
        if not unit.overlap_ok or _tokens([unit, *overlap]) > overlap_tokens:
            break
        overlap.insert(0, unit)
    return [] if len(overlap) == len(units) else overlap  # never repeat a whole piece


def _pack(units: list[_Unit], max_tokens: int, overlap_tokens: int, min_tokens: int) -> list[list[_Unit]]:
    """Greedy packing; returns pieces as unit lists (overlap copies included)."""
    pieces: list[tuple[list[_Unit], int]] = []  # (units, how many leading units are overlap copies)
    current: list[_Unit] = []
    n_overlap = 0
    # Running totals for `current`, so that testing one more unit is O(1), not O(piece).
    words = chars = 0

    def reset(new: list[_Unit], new_overlap: int) -> None:
        nonlocal current, n_overlap, words, chars
        current, n_overlap = new, new_overlap
        words = sum(u.words for u in new)
        chars = sum(len(u.text) for u in new) + sum(len(_separator(a, b)) for a, b in zip(new, new[1:]))

    def close() -> None:
        carried: list[_Unit] = []
        while len(current) - n_overlap > 1 and current[-1].keep_with_next:
            carried.insert(0, current.pop())
        pieces.append((current, n_overlap))
        overlap = [] if carried else _overlap(current, overlap_tokens)
        reset(overlap + carried, len(overlap))

    i = 0
    while i < len(units):
        unit = units[i]
        added_chars = len(unit.text) + (len(_separator(current[-1], unit)) if current else 0)
        if _estimate(words + unit.words, chars + added_chars) <= max_tokens:
            current.append(unit)
            words += unit.words
            chars += added_chars
            i += 1
        elif n_overlap and len(current) == n_overlap:
            # Only overlap copies in front of a unit that does not fit with them: shed them.
            reset(current[1:], n_overlap - 1)
        elif not current:
            # Cannot fit even alone (a budget below one word's estimate): emit it anyway.
            reset([unit], 0)
            i += 1
            close()
        else:
            close()
    if len(current) > n_overlap:
        pieces.append((current, n_overlap))
    _rebalance_tail(pieces, max_tokens, overlap_tokens, min_tokens)
    return [units for units, _ in pieces]


def _rebalance_tail(
    pieces: list[tuple[list[_Unit], int]], max_tokens: int, overlap_tokens: int, min_tokens: int
) -> None:
    """Give a crumb at the end of a section ("New in version 3.11.") some company.

    Greedy packing leaves the last piece with whatever is left over. When that is under
    ``min_tokens``, move trailing units of the previous piece into it (as long as both
    keep at least one unit and the budget holds), then recompute the overlap.
    """
    if len(pieces) < 2:
        return
    prev, prev_overlap = pieces[-2]
    last, last_overlap = pieces[-1]
    if _tokens(last) >= min_tokens:
        return
    prev = list(prev)
    tail = last[last_overlap:]
    moved: list[_Unit] = []
    while len(prev) - prev_overlap > 1 and _tokens([*moved, *tail]) < min_tokens:
        if _tokens([prev[-1], *moved, *tail]) > max_tokens:
            break
        moved.insert(0, prev.pop())
    while len(prev) - prev_overlap > 1 and prev[-1].keep_with_next:
        if _tokens([prev[-1], *moved, *tail]) > max_tokens:
            break
        moved.insert(0, prev.pop())
    if not moved:
        return
    new_last = [*moved, *tail]
    overlap = _overlap(prev, overlap_tokens)
    while overlap and _tokens([*overlap, *new_last]) > max_tokens:
        overlap.pop(0)
    pieces[-2] = (prev, prev_overlap)
    pieces[-1] = ([*overlap, *new_last], len(overlap))


# --------------------------------------------------------------------------- sections


@dataclass
class _Section:
    path: tuple[str, ...]
    blocks: list[Block] = field(default_factory=list)


@dataclass
class _Piece:
    path: tuple[str, ...]
    parts: list[tuple[tuple[str, ...], str]]  # (path the text was written under, text)
    whole: bool  # the entire section fits in this one piece
    text: str = ""
    tokens: int = 0
    page: int = 0  # the page its first unit is on (0: not a paged document)

    def render(self) -> None:
        rendered: list[str] = []
        for part_path, text in self.parts:
            label = part_path[len(self.path) :] if part_path[: len(self.path)] == self.path else part_path
            rendered.append(HEADING_SEPARATOR.join(label) + "\n" + text if label else text)
        self.text = "\n\n".join(rendered)
        self.tokens = estimate_tokens(self.text)


def _sections(blocks: list[Block]) -> list[_Section]:
    sections = [_Section(())]
    stack: list[tuple[int, str]] = []
    for block in blocks:
        if block.kind == "heading" and block.level <= SECTION_MAX_LEVEL:
            while stack and stack[-1][0] >= block.level:
                stack.pop()
            stack.append((block.level, block.text))
            sections.append(_Section(tuple(text for _, text in stack)))
        else:
            sections[-1].blocks.append(block)
    return [s for s in sections if s.blocks]


def _related(tiny: tuple[str, ...], other: tuple[str, ...]) -> bool:
    """``other`` lies under the same parent heading as ``tiny``."""
    parent = tiny[:-1]
    return other[: len(parent)] == parent


def _merged(first: _Piece, second: _Piece) -> _Piece:
    if not first.path:
        path = second.path
    elif not second.path:
        path = first.path
    else:
        prefix: list[str] = []
        for a, b in zip(first.path, second.path):
            if a != b:
                break
            prefix.append(a)
        path = tuple(prefix)
    merged = _Piece(path, first.parts + second.parts, first.whole and second.whole, page=first.page or second.page)
    merged.render()
    return merged


def _merge_tiny(pieces: list[_Piece], min_tokens: int, max_tokens: int) -> list[_Piece]:
    i = 0
    while i < len(pieces):
        piece = pieces[i]
        if piece.whole and piece.tokens < min_tokens:
            if i + 1 < len(pieces) and _related(piece.path, pieces[i + 1].path):
                candidate = _merged(piece, pieces[i + 1])
                if candidate.tokens <= max_tokens:
                    pieces[i : i + 2] = [candidate]
                    continue  # the result may still be tiny
            if i > 0 and _related(piece.path, pieces[i - 1].path):
                candidate = _merged(pieces[i - 1], piece)
                if candidate.tokens <= max_tokens:
                    pieces[i - 1 : i + 1] = [candidate]
                    i -= 1
                    continue
        i += 1
    return pieces


def _normalise(block: Block) -> Block:
    """Collapse runs of spaces; code keeps its indentation and line structure."""
    if block.kind == "code":
        return block
    if block.kind == "table":
        text = "\n".join(" ".join(line.split()) for line in block.text.split("\n") if line.strip())
    else:
        text = " ".join(block.text.split())
    return Block(block.kind, text, block.level, block.group, block.page)


def split_by_headings(
    xml: str, url: str, *, max_tokens: int = defaults.CHUNK_TOKENS, overlap_tokens: int = defaults.CHUNK_OVERLAP,
    min_tokens: int = 40
) -> list[Chunk]:
    """Chunks of a cleaned page (see the module docstring for the rules)."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be positive")
    if not xml or not xml.strip():
        return []
    return split_blocks(xml_blocks(xml), url, max_tokens=max_tokens, overlap_tokens=overlap_tokens, min_tokens=min_tokens)


def split_blocks(
    page_blocks: list[Block], url: str, *, max_tokens: int = defaults.CHUNK_TOKENS,
    overlap_tokens: int = defaults.CHUNK_OVERLAP, min_tokens: int = 40
) -> list[Chunk]:
    """:func:`split_by_headings` on the page's blocks (``xml_blocks(xml)``), for a caller that has them."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be positive")
    blocks = [b for b in (_normalise(b) for b in page_blocks) if b.text.strip()]

    pieces: list[_Piece] = []
    for section in _sections(blocks):
        units: list[_Unit] = []
        for index, block in enumerate(section.blocks):
            units.extend(_block_units(block, index, max_tokens))
        packed = _pack(units, max_tokens, overlap_tokens, min_tokens)
        for unit_list in packed:
            text = _join(unit_list)
            if text:
                piece = _Piece(section.path, [(section.path, text)], whole=len(packed) == 1,
                               page=section.blocks[unit_list[0].block].page)
                piece.render()
                pieces.append(piece)
    pieces = _merge_tiny(pieces, min_tokens, max_tokens)

    chunks: list[Chunk] = []
    seen: Counter[tuple[tuple[str, ...], str]] = Counter()
    for piece in pieces:
        occurrence = seen[(piece.path, piece.text)]
        seen[(piece.path, piece.text)] += 1
        # \x1f / \x1e cannot occur in cleaned text, so the fields cannot run into each other.
        key = "\x1f".join([url, "\x1e".join(piece.path), piece.text])
        if occurrence:
            key += f"\x1f{occurrence}"
        chunks.append(
            Chunk(
                chunk_id=hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16],
                ordinal=len(chunks),
                heading_path=piece.path,
                text=piece.text,
                token_estimate=piece.tokens,
                content_hash=hashlib.sha256(piece.text.encode("utf-8", "surrogatepass")).hexdigest(),
                page=piece.page or None,
            )
        )
    return chunks
