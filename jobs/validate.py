"""Check an LLM answer's citations against the sources that were actually sent.

Pure and deterministic. The model is never trusted to have quoted correctly: every citation must
name a source that was in the prompt and carry a quote that occurs in *that* source, allowing
only for small copying slips (case, whitespace, punctuation, typographic quotes, a few changed
characters, an ellipsis joining two verbatim pieces).
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache
from typing import Any

from jobs.prompt import NOT_ENOUGH_INFORMATION, Source, sanitise_text

__all__ = [
    "CitationCheck",
    "Validation",
    "coerce_answer",
    "find_quote",
    "is_not_enough_information",
    "normalise",
    "validate_answer",
]


@dataclass(frozen=True)
class CitationCheck:
    source: int | None
    quote: str
    valid: bool
    reason: str | None  # None if valid; e.g. "source 7 was not sent", "empty quote"
    matched: str | None  # the source text span that matched (exact or fuzzy)
    similarity: float  # 1.0 exact (after normalisation), lower for fuzzy


@dataclass(frozen=True)
class Validation:
    grounded: bool  # every citation valid, and the answer is NEI or has >= 1 citation
    checks: list[CitationCheck]
    failed: list[CitationCheck]
    not_enough_information: bool


# --------------------------------------------------------------------------- normalisation

# Models "fix" typography when copying: curly quotes, dashes, primes. Map them to ASCII.
_UNIFY = str.maketrans(
    {
        **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\u2035\u00b4", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\u2036\u00ab\u00bb", '"'),
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d", "-"),
    }
)
# Invisible characters that HTML extraction leaves behind (soft hyphens, zero-width joiners).
_INVISIBLE = frozenset("\u00ad\u200b\u200c\u200d\u2060\ufeff")


@dataclass(frozen=True)
class _Mapped:
    """Normalised text plus, per normalised character, the original [start, end) it came from."""

    text: str
    starts: array[int]  # arrays, not tuples of ints: a cached 3000-token source stays ~100 kB
    ends: array[int]

    def original_span(self, source: str, lo: int, hi: int) -> str:
        return source[self.starts[lo] : self.ends[hi - 1]]


def _clusters(text: str) -> list[tuple[int, int]]:
    """Base character plus following combining marks, so "e\\u0301" normalises like "é"."""
    spans: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(text) + 1):
        if i == len(text) or not unicodedata.combining(text[i]):
            spans.append((start, i))
            start = i
    return spans


@lru_cache(maxsize=64)
def _normalise_mapped(text: str) -> _Mapped:
    """``normalise`` that remembers where each output character came from.

    Cached: validate_answer checks several citations against the same few sources.
    """
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    pending_space = False
    for start, end in _clusters(text):
        piece = text[start:end]
        if piece.isascii():  # fast path: ASCII is already NFKC and casefold == lower
            norm = piece.lower()
        else:
            norm = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", piece).casefold())
        for ch in norm.translate(_UNIFY):
            if ch.isspace():
                pending_space = bool(out)  # drops leading whitespace
                continue
            if ch in _INVISIBLE or unicodedata.category(ch) == "Cc":
                continue
            if pending_space:
                out.append(" ")
                starts.append(start)
                ends.append(start)
                pending_space = False
            out.append(ch)
            starts.append(start)
            ends.append(end)
    return _Mapped("".join(out), array("q", starts), array("q", ends))


def normalise(text: str) -> str:
    """NFKC, casefold, ASCII quotes/dashes, "…" → "...", invisible characters dropped,
    whitespace collapsed to single spaces and trimmed."""
    return _normalise_mapped(text).text


@dataclass(frozen=True)
class _Loose:
    """Normalised text with punctuation turned into spaces: what fuzzy matching compares.

    Punctuation is the most common copying slip and carries no grounding, so it is ignored;
    positions still map back to the original text.
    """

    text: str
    starts: array[int]
    ends: array[int]
    word_starts: array[int]
    word_ends: array[int]
    words: tuple[str, ...]

    def original_span(self, source: str, lo: int, hi: int) -> str:
        return source[self.starts[lo] : self.ends[hi - 1]]


def _loose_from(mapped: _Mapped) -> _Loose:
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    pending_space = False
    for ch, s, e in zip(mapped.text, mapped.starts, mapped.ends):
        if not ch.isalnum():
            pending_space = bool(out)
            continue
        if pending_space:
            out.append(" ")
            starts.append(s)
            ends.append(s)
            pending_space = False
        out.append(ch)
        starts.append(s)
        ends.append(e)
    text = "".join(out)
    word_starts: list[int] = []
    word_ends: list[int] = []
    words: list[str] = []
    for m in re.finditer(r"\S+", text):
        word_starts.append(m.start())
        word_ends.append(m.end())
        words.append(m.group())
    return _Loose(
        text, array("q", starts), array("q", ends), array("q", word_starts), array("q", word_ends), tuple(words)
    )


@lru_cache(maxsize=64)
def _loose(text: str) -> _Loose:
    return _loose_from(_normalise_mapped(text))


# ------------------------------------------------------------------------------ matching

# "...", "[...]", "(...)" after normalisation ("…" is NFKC-normalised to "...").
_ELLIPSIS = re.compile(r"\s*(?:\[\s*\.{3,}\s*\]|\(\s*\.{3,}\s*\)|\.{3,})\s*")
# Wrapping a model puts around a quote that is not part of it: quote marks, leading/trailing "...".
_WRAPPING = re.compile(r"""^(?:[\s"']|\.{3,}|\[\s*\.{3,}\s*\])+|(?:[\s"']|\.{3,}|\[\s*\.{3,}\s*\])+$""")

# Bounds that keep fuzzy matching roughly linear in the source length.
_MAX_CANDIDATES = 8  # token windows examined closely per quote (or per ellipsis piece)
_SHORT_QUOTE_WORDS = 3  # below this, token overlap says little: score every window directly
_MAX_SHORT_WINDOWS = 5000  # …but only this many
_NEIGHBOUR_MARGIN = 0.15  # try shifting a candidate's edges only if it scores within this of the bar


def _clean_quote(quote: str) -> str:
    return _WRAPPING.sub("", normalise(quote))


def _has_alnum(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


def _find_whole(needle: str, haystack: str, start: int = 0) -> int:
    """First occurrence of needle that does not begin or end inside a word, or -1.

    Plain substring search would accept "Python 3.1" inside "Python 3.11", or "stall" inside
    "install"; cut-off words are still found, with a lower similarity, by fuzzy matching.
    """
    at = haystack.find(needle, start)
    while at >= 0:
        end = at + len(needle)
        starts_clean = at == 0 or not (haystack[at - 1].isalnum() and needle[0].isalnum())
        ends_clean = end == len(haystack) or not (haystack[end].isalnum() and needle[-1].isalnum())
        if starts_clean and ends_clean:
            return at
        at = haystack.find(needle, at + 1)
    return -1


def _ratio(matcher: SequenceMatcher[str], candidate: str, floor: float) -> float:
    """Character similarity of candidate to the matcher's quote; cheap bounds first."""
    matcher.set_seq1(candidate)
    if matcher.real_quick_ratio() <= floor or matcher.quick_ratio() <= floor:
        return 0.0
    return matcher.ratio()


# Words whose change flips a claim; "t" is what "isn't"/"don't" leave once punctuation is spaced.
_NEGATIONS = frozenset({"not", "no", "never", "cannot", "nor", "without", "t"})


def _facts(words: Sequence[str]) -> tuple[tuple[str, ...], int]:
    """Numbers and negation count: a fuzzy match may fix a typo, never change "3.11" to "3.12"
    or drop a "not", however similar the characters are."""
    numbers = tuple(d for w in words for d in re.findall(r"\d+", w))
    return numbers, sum(w in _NEGATIONS for w in words)


def _fuzzy_words(lq: str, src: _Loose, first_word: int, min_similarity: float) -> tuple[int, int, float]:
    """Best word span src.words[i:j] (i >= first_word) for the loose quote; returns (i, j, ratio).

    Token overlap picks a few candidate windows in one linear pass; only those are aligned
    word-by-word and scored character-by-character, so work is bounded whatever the text size.
    Windows whose numbers or negations differ from the quote's are never accepted.
    """
    qwords = lq.split(" ")
    k = len(qwords)
    n = len(src.words)
    if first_word >= n:
        return 0, 0, 0.0
    matcher: SequenceMatcher[str] = SequenceMatcher(None, autojunk=False)
    matcher.set_seq2(lq)
    best = (0, 0, 0.0)

    facts = _facts(qwords)

    def consider(i: int, j: int) -> None:
        nonlocal best
        i, j = max(first_word, i), min(n, j)
        if i >= j or _facts(src.words[i:j]) != facts:
            return
        r = _ratio(matcher, src.text[src.word_starts[i] : src.word_ends[j - 1]], best[2])
        if r > best[2]:
            best = (i, j, r)

    width = min(k, n - first_word)
    if k <= _SHORT_QUOTE_WORDS:
        # One changed character in a one-word quote leaves no overlapping token: score all.
        for i in range(first_word, min(n - width + 1, first_word + _MAX_SHORT_WINDOWS)):
            for j in (i + width - 1, i + width, i + width + 1):
                consider(i, j)
        return best

    # Sliding multiset overlap between each k-word window and the quote.
    want = Counter(qwords)
    have: Counter[str] = Counter()
    overlap = 0

    def add(word: str, delta: int) -> int:
        before = min(have[word], want[word])
        have[word] += delta
        return min(have[word], want[word]) - before

    scored: list[tuple[int, int]] = []  # (-overlap, start): sorted gives best, then earliest
    for j in range(first_word, n):
        overlap += add(src.words[j], 1)
        if j - first_word >= width:
            overlap += add(src.words[j - width], -1)
        if j - first_word >= width - 1:
            scored.append((-overlap, j - width + 1))
    need = math.ceil(k / 2)  # a handful of typos still leaves most words intact
    # Best windows first, but spread out: neighbouring windows of one passage would otherwise
    # take every slot, and the alignment below already explores a few words either side.
    candidates: list[int] = []
    for neg, start in sorted(scored):
        if -neg < need or len(candidates) == _MAX_CANDIDATES:
            break
        if all(abs(start - c) > width // 2 for c in candidates):
            candidates.append(start)

    for start in candidates:
        lo, hi = max(first_word, start - 3), min(n, start + width + 3)
        region = src.words[lo:hi]
        blocks = [b for b in SequenceMatcher(None, region, qwords, autojunk=False).get_matching_blocks() if b.size]
        if not blocks:
            continue
        # Extend the aligned words by the quote words left unmatched at either edge (typos there).
        i = lo + blocks[0].a - blocks[0].b
        j = lo + blocks[-1].a + blocks[-1].size + (k - blocks[-1].b - blocks[-1].size)
        consider(i, j)
        if best[2] < min_similarity - _NEIGHBOUR_MARGIN:
            continue  # nowhere near: nudging the edges by a word will not rescue it
        for di in (0, -1, 1):
            for dj in (0, 1, -1):
                if di or dj:
                    consider(i + di, j + dj)
    return best


def _match_loose(lq: str, src: _Loose, from_char: int, min_similarity: float) -> tuple[int, int, float]:
    """Find a loose quote at or after loose position from_char: (start, end, similarity), end 0 if none."""
    at = _find_whole(lq, src.text, from_char)
    if at >= 0:
        return at, at + len(lq), 1.0  # same words in the same order; only punctuation differed
    i, j, r = _fuzzy_words(lq, src, bisect_left(src.word_starts, from_char), min_similarity)
    if j == 0 or r < min_similarity:
        return 0, 0, r
    return src.word_starts[i], src.word_ends[j - 1], r


def find_quote(quote: str, source_text: str, *, min_similarity: float = 0.9) -> tuple[str | None, float]:
    """Locate a quote in a source: (matched original span or None, similarity).

    In order: exact substring after ``normalise`` (similarity 1.0); the same ignoring
    punctuation (1.0: the same words in order); pieces joined by an ellipsis, each found in order
    (length-weighted mean similarity, every piece must reach min_similarity, the matched span is
    the pieces joined by " … "); a fuzzy word window scored with difflib (similarity = character
    ratio ignoring punctuation). When nothing reaches min_similarity the best similarity seen is
    returned with None, for diagnostics.
    """
    q = _clean_quote(quote)
    if not _has_alnum(q):
        return None, 0.0
    mapped = _normalise_mapped(source_text)
    at = _find_whole(q, mapped.text)
    if at >= 0:
        return mapped.original_span(source_text, at, at + len(q)), 1.0

    src = _loose(source_text)
    pieces = [p for p in _ELLIPSIS.split(q) if _has_alnum(p)]
    if len(pieces) > 1:
        spans: list[str] = []
        total = weighted = 0.0
        pos = 0
        for piece in pieces:
            lp = _loose_from(_normalise_mapped(piece)).text
            lo, hi, r = _match_loose(lp, src, pos, min_similarity)
            if hi == 0:
                return None, r
            spans.append(src.original_span(source_text, lo, hi))
            weighted += r * len(lp)
            total += len(lp)
            pos = hi
        return " … ".join(spans), weighted / total

    lq = _loose_from(_normalise_mapped(q)).text
    lo, hi, r = _match_loose(lq, src, 0, min_similarity)
    if hi == 0:
        return None, r
    return src.original_span(source_text, lo, hi), r


def _find_in_source(quote: str, source: Source, min_similarity: float) -> tuple[str | None, float]:
    """find_quote against the source as stored and, unless that was exact, as shown in the
    prompt (fences neutralised, controls dropped); the better match wins."""
    matched, similarity = find_quote(quote, source.text, min_similarity=min_similarity)
    if similarity < 1.0:
        shown = sanitise_text(source.text)
        if shown != source.text:
            shown_matched, shown_similarity = find_quote(quote, shown, min_similarity=min_similarity)
            if shown_similarity > similarity or (matched is None and shown_matched is not None):
                return shown_matched, shown_similarity
    return matched, similarity


# ---------------------------------------------------------------------------- validation

_NEI_KEY = normalise(NOT_ENOUGH_INFORMATION)


def is_not_enough_information(answer: str) -> bool:
    """True for "Not enough information" give or take case, whitespace, wrapping quotes,
    markdown emphasis and a trailing full stop. Anything longer is a real answer."""
    if not isinstance(answer, str):
        return False
    core = normalise(answer).strip(" \"'`*_").rstrip(".!").strip(" \"'`*_")
    return core == _NEI_KEY


def validate_answer(data: Mapping[str, Any], sources: Sequence[Source], *, min_similarity: float = 0.9) -> Validation:
    """Check every citation in an (already parsed) reply against the sources that were sent.

    ``data`` goes through ``coerce_answer`` first, so odd shapes are tolerated. A citation is
    valid only if its source number was sent and its quote occurs in that very source. An empty
    answer is never grounded, whatever it cites.
    """
    reply = coerce_answer(data)
    by_number = {s.number: s for s in sources}
    checks: list[CitationCheck] = []
    for citation in reply["citations"]:
        number, quote = citation["source"], citation["quote"]
        checks.append(_check(number, quote, by_number, min_similarity))
    failed = [c for c in checks if not c.valid]
    nei = is_not_enough_information(reply["answer"])
    grounded = not failed and bool(reply["answer"].strip()) and (nei or bool(checks))
    return Validation(grounded=grounded, checks=checks, failed=failed, not_enough_information=nei)


def _check(number: int | None, quote: str, by_number: Mapping[int, Source], min_similarity: float) -> CitationCheck:
    def fail(reason: str, similarity: float = 0.0) -> CitationCheck:
        return CitationCheck(number, quote, False, reason, None, similarity)

    if number is None:
        return fail("citation has no source number")
    if number not in by_number:
        return fail(f"source {number} was not sent")
    if not _has_alnum(_clean_quote(quote)):
        return fail("empty quote")
    matched, similarity = _find_in_source(quote, by_number[number], min_similarity)
    if matched is not None:
        return CitationCheck(number, quote, True, None, matched, similarity)
    reason = f"quote not found in source {number}"
    elsewhere = [
        n
        for n, s in sorted(by_number.items())
        if n != number and _find_in_source(quote, s, min_similarity)[0] is not None
    ]
    if elsewhere:
        reason += " (found in source " + ", ".join(map(str, elsewhere)) + ")"
    elif similarity > 0:
        reason += f" (closest match {similarity:.2f})"
    return fail(reason, similarity)


# ------------------------------------------------------------------------------ coercion

_CONFIDENCES = ("high", "medium", "low")
_SOURCE_KEYS = ("source", "source_id", "source_number", "number", "n", "id")
_QUOTE_KEYS = ("quote", "quotes", "text", "excerpt")
_CITATION_KEYS = ("citations", "citation", "sources", "references")
# "SOURCE 2", "[2]", "Source #2: some quote", "2 - some quote"
_SOURCE_STRING = re.compile(r"^\W*(?:source|src)?\s*#?\s*(\d+)\s*\]?\s*[:\-–—]?\s*(.*)$", re.IGNORECASE | re.DOTALL)
_FENCED_JSON = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL | re.IGNORECASE)


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (list, tuple)):
        return " ".join(t for t in (_as_text(v) for v in value) if t)
    return str(value).strip()


def _source_number(value: Any) -> tuple[int | None, str]:
    """(source number, any quote text that came with it in a string like "Source 2: …")."""
    if isinstance(value, bool):
        return None, ""
    if isinstance(value, int):
        return value, ""
    if isinstance(value, float) and value.is_integer():
        return int(value), ""
    if isinstance(value, str):
        m = _SOURCE_STRING.match(value.strip())
        if m:
            return int(m.group(1)), m.group(2).strip()
    return None, ""


def _citations(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        value = [value]
    out: list[dict[str, Any]] = []
    for item in value:
        if isinstance(item, Mapping):
            number: int | None = None
            for key in _SOURCE_KEYS:
                if key in item:
                    number, _ = _source_number(item[key])
                    break
            raw_quote = next((item[k] for k in _QUOTE_KEYS if k in item), "")
            # One citation per quote: a list of quotes for one source is common.
            quotes = [_as_text(q) for q in raw_quote] if isinstance(raw_quote, (list, tuple)) else [_as_text(raw_quote)]
            for quote in quotes or [""]:
                out.append({"source": number, "quote": quote})
        else:
            number, quote = _source_number(item)
            # An unreadable citation is kept (source None) so validation reports it instead of
            # the answer silently looking better cited than it is.
            out.append({"source": number, "quote": quote.strip().strip("\"'“”")})
    return out


def _confidence(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        score = float(value) / 100 if value > 1 else float(value)
        return "high" if score >= 0.75 else "medium" if score >= 0.4 else "low"
    text = _as_text(value).lower()
    if text.startswith("med"):
        return "medium"
    for level in _CONFIDENCES:
        if level in text:
            return level
    return "low"  # unknown confidence is no confidence


def coerce_answer(data: Any) -> dict[str, Any]:
    """Bring a reply into the shape {"answer": str, "citations": [{"source": int|None, "quote": str}],
    "confidence": "high"|"medium"|"low"}. Never raises.

    Small models slip: citations as [1, 2] or ["SOURCE 2"], "High", a missing field, a JSON
    string (even fenced in ```json). Missing fields default to "", [], "low"; text that is not
    JSON at all becomes the answer, uncited.
    """
    try:
        if isinstance(data, (bytes, bytearray)):
            data = data.decode("utf-8", errors="replace")
        if isinstance(data, str):
            fenced = _FENCED_JSON.match(data)
            raw = fenced.group(1) if fenced else data
            try:
                data = json.loads(raw)
            except ValueError:
                return {"answer": data.strip(), "citations": [], "confidence": "low"}
        if not isinstance(data, Mapping):
            return {"answer": _as_text(data) if isinstance(data, str) else "", "citations": [], "confidence": "low"}
        citations_value = next((data[k] for k in _CITATION_KEYS if k in data), None)
        return {
            "answer": _as_text(data.get("answer")),
            "citations": _citations(citations_value),
            "confidence": _confidence(data.get("confidence")),
        }
    except Exception:  # noqa: BLE001 - a malformed reply must become "ungrounded", not a crash
        return {"answer": "", "citations": [], "confidence": "low"}
