"""Check an LLM answer's citations against the sources that were actually sent.

Pure and deterministic. The model is never trusted to have quoted correctly: every citation must
name a source that was in the prompt and carry a quote made of *that* source's words. "The
source's words" is decided on word tokens, never on character similarity, because a quote that is
97% similar to its source can still say the opposite ("enabled" → "disabled"):

* Both texts are normalised so that only the differences in ``TOLERATED`` disappear, then split
  into word tokens; the quote's tokens must occur contiguously, in order, in the source's tokens.
  A changed, added or dropped word is never tolerated.
* An ellipsis may join at most ``MAX_FRAGMENTS`` verbatim fragments of at least
  ``MIN_FRAGMENT_WORDS`` words each, found in order in the same source, each starting at most
  ``MAX_GAP_WORDS`` words after the previous one ends.
* A quote must carry content: at least ``MIN_QUOTE_WORDS`` words, or a whole sentence of the source.
* A source number is one positive whole number: ``2``, ``"2"``, ``"SOURCE 2"``; never ``"1; 7"``.

Matching is linear in the source and quote lengths (KMP over tokens), and a quote much longer than
its source is rejected before it is even normalised, so a huge reply cannot exhaust memory.
SECURITY.md ("Quotes") states the same rules for users.
"""

from __future__ import annotations

import html
import re
import unicodedata
from array import array
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from jobs.agreement import disagreements
from jobs.coerce import coerce_answer
from jobs.prompt import NOT_ENOUGH_INFORMATION, Source

__all__ = [
    "MAX_FRAGMENTS",
    "MAX_GAP_WORDS",
    "MIN_FRAGMENT_WORDS",
    "MIN_QUOTE_WORDS",
    "TOLERATED",
    "CitationCheck",
    "Validation",
    "coerce_answer",
    "find_quote",
    "is_not_enough_information",
    "normalise",
    "validate_answer",
]

#: The only differences between a quote and its source that validation ignores. Everything else
#: (a substituted, added, dropped or reordered word, a changed number or sign) makes the quote invalid.
TOLERATED: tuple[str, ...] = (
    "letter case (Unicode case folding: 'Telemetry' = 'telemetry', 'STRASSE' = 'straße')",
    "Unicode compatibility forms (NFKC: full-width letters, ligatures, composed vs combining accents)",
    "typographic quotes, apostrophes, primes and dashes vs their ASCII forms (“ ” ‘ ’ – — − vs \" ' -)",
    "whitespace: spaces, tabs, newlines, non-breaking spaces, in any amount",
    "invisible characters (soft hyphens, zero-width spaces and joiners, bidi controls, control characters)",
    "punctuation between words, including a trailing period or comma missing or added, and wrapping quotes",
    "HTML entities in the quote (&amp; &nbsp; &#8217; &lt;) read as the characters they stand for",
    "a hyphen between two letters ('e-mail' = 'email', 'built-in' = 'builtin'); not between digits",
    "a leading or trailing ellipsis ('… listens on port 8731 …')",
)

MAX_FRAGMENTS = 3  # an ellipsis may join at most this many verbatim fragments
MIN_FRAGMENT_WORDS = 3  # each fragment of an ellipsis quote has at least this many words
MAX_GAP_WORDS = 30  # a fragment starts at most this many words after the previous one ends
MIN_QUOTE_WORDS = 4  # a shorter quote must be a whole sentence of its source

# A quote this much longer than its source cannot be in it (entities can shrink 8 characters to 1).
_MAX_QUOTE_GROWTH = 8
_MAX_QUOTE_SLACK = 200


@dataclass(frozen=True)
class CitationCheck:
    source: int | None
    quote: str
    valid: bool
    reason: str | None  # None if valid; e.g. "source 7 was not sent", "empty quote"
    matched: str | None  # the source text the quote matched (fragments joined by " … ")
    similarity: float  # 1.0 if valid; else the share of the quote's words that matched before it differed


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


def _dropped(ch: str) -> bool:
    """Invisible characters HTML extraction leaves behind (soft hyphens, zero-width, bidi) and controls."""
    return unicodedata.category(ch) in ("Cf", "Cc")


@dataclass(frozen=True)
class _Mapped:
    """Normalised text plus, per normalised character, the original [start, end) it came from."""

    text: str
    starts: array[int]  # arrays, not tuples of ints: a cached 3000-token source stays ~100 kB
    ends: array[int]


@lru_cache(maxsize=64)
def _normalise_mapped(text: str) -> _Mapped:
    """``normalise`` that remembers where each output character came from.

    A base character and its combining marks are normalised together, so "e\\u0301" becomes "é".
    One pass, no per-character tuples: memory stays a few bytes per character. Cached:
    validate_answer checks several citations against the same few sources.
    """
    out: list[str] = []
    starts: array[int] = array("q")
    ends: array[int] = array("q")
    pending_space = False
    n = len(text)
    start = 0
    while start < n:
        end = start + 1
        while end < n and unicodedata.combining(text[end]):
            end += 1
        piece = text[start:end]
        if piece.isascii():  # fast path: ASCII is already NFKC and casefold == lower
            norm = piece.lower()
        else:
            norm = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", piece).casefold())
        for ch in norm.translate(_UNIFY):
            if ch.isspace():
                pending_space = bool(out)  # drops leading whitespace
                continue
            if _dropped(ch):
                continue
            if pending_space:
                out.append(" ")
                starts.append(start)
                ends.append(start)
                pending_space = False
            out.append(ch)
            starts.append(start)
            ends.append(end)
        start = end
    return _Mapped("".join(out), starts, ends)


def normalise(text: str) -> str:
    """NFKC, casefold, ASCII quotes/dashes, "…" → "...", invisible and control characters dropped,
    whitespace collapsed to single spaces and trimmed."""
    return _normalise_mapped(text).text


# ------------------------------------------------------------------------------ tokens

# Chinese and Japanese are written without spaces: each ideograph or kana is one token.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_LETTER_OR_DIGIT = rf"[^\W_{_CJK}]|_"
# A word: letters/digits joined by single inner ' . , : / - ("isn't", "3.11", "robots.txt", "1,000",
# "e-mail"); a sign directly before a number is part of it ("-5" is not "5").
_TOKEN = re.compile(
    rf"[{_CJK}]|(?:(?<![\w.,])[+-](?=\d))?(?:{_LETTER_OR_DIGIT})+(?:['.,:/-](?:{_LETTER_OR_DIGIT})+)*"
)
_HYPHEN_BETWEEN_LETTERS = re.compile(r"(?<=[^\W\d_])-(?=[^\W\d_])")
# What ends a sentence, between two tokens of the original text.
_SENTENCE_BREAK = re.compile(r"[.!?\n\r\u2028\u2029\u3002\uff01\uff1f]")
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _is_punctuation(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P")


def _key(token: str) -> str:
    """What a token is compared by: "e-mail" and "email" meet; "10-20" keeps its hyphen."""
    return _HYPHEN_BETWEEN_LETTERS.sub("", token)


@dataclass(frozen=True)
class _Tokens:
    """A text as comparable word tokens, each with its original span and sentence boundaries."""

    keys: tuple[str, ...]
    starts: array[int]  # original [start, end) of each token
    ends: array[int]
    breaks: bytes  # breaks[i] == 1: a sentence boundary before token i (breaks[len] ends the text)

    def span(self, text: str, lo: int, hi: int, *, lead: bool = False, trail: bool = False) -> str:
        """Original text of tokens [lo, hi), widened over the punctuation touching it on either
        side when the quote had punctuation there too (so "cron." matches "cron.", not "cron")."""
        start, end = self.starts[lo], self.ends[hi - 1]
        while lead and start > 0 and _is_punctuation(text[start - 1]):
            start -= 1
        while trail and end < len(text) and _is_punctuation(text[end]):
            end += 1
        return text[start:end]

    def whole_sentence(self, lo: int, hi: int) -> bool:
        return bool(self.breaks[lo] and self.breaks[hi])


@lru_cache(maxsize=128)
def _tokens(text: str) -> _Tokens:
    """Tokens of a text. Cached: the same few sources are searched for every citation."""
    if text.isascii() and not _ASCII_CONTROL.search(text):
        norm, mapped = text.lower(), None  # positions map to themselves; whitespace does not matter
    else:
        mapped = _normalise_mapped(text)
        norm = mapped.text
    keys: list[str] = []
    starts: array[int] = array("q")
    ends: array[int] = array("q")
    for m in _TOKEN.finditer(norm):
        keys.append(_key(m.group()))
        lo, hi = m.span()
        starts.append(lo if mapped is None else mapped.starts[lo])
        ends.append(hi if mapped is None else mapped.ends[hi - 1])
    breaks = bytearray(len(keys) + 1)
    breaks[0] = breaks[-1] = 1
    for i in range(1, len(keys)):
        breaks[i] = _SENTENCE_BREAK.search(text, ends[i - 1], max(ends[i - 1], starts[i])) is not None
    return _Tokens(tuple(keys), starts, ends, bytes(breaks))


def _kmp(pattern: Sequence[str], text: Sequence[str]) -> tuple[list[int], int, int]:
    """Knuth-Morris-Pratt over tokens, linear in both lengths.

    Returns every start of pattern in text, the longest prefix of pattern seen anywhere in text,
    and the text index just after the first place that longest prefix was seen.
    """
    m = len(pattern)
    fail = [0] * m
    k = 0
    for i in range(1, m):
        while k and pattern[i] != pattern[k]:
            k = fail[k - 1]
        if pattern[i] == pattern[k]:
            k += 1
        fail[i] = k
    found: list[int] = []
    best = best_at = k = 0
    for j, token in enumerate(text):
        while k and token != pattern[k]:
            k = fail[k - 1]
        if token == pattern[k]:
            k += 1
        if k > best:
            best, best_at = k, j + 1
        if k == m:
            found.append(j - m + 1)
            k = fail[k - 1]
    return found, best, best_at


# ------------------------------------------------------------------------------ matching

# "...", ". . .", "[...]", "(...)" after normalisation ("…" is NFKC-normalised to "...").
_ELLIPSIS = re.compile(r"\[\s*\.(?:\s?\.){2,}\s*\]|\(\s*\.(?:\s?\.){2,}\s*\)|\.(?:\s?\.){2,}")


@dataclass(frozen=True)
class _Found:
    """The outcome of looking for one quote in one source."""

    matched: str | None  # the source's text for the quote; None if not valid
    # absent: the words are not in the source (worth looking for in the others), and problem is a detail
    # appended to "quote not found in source N"; otherwise problem is the whole reason (a rule broken).
    problem: str | None
    absent: bool
    similarity: float


def _shown(word: str, limit: int = 40) -> str:
    return repr(word if len(word) <= limit else word[: limit - 1] + "…")


def _difference(quote: Sequence[str], src: _Tokens, source_text: str) -> tuple[str, float]:
    """Where the quote leaves the source: the first quote word after the longest matching start
    (or before the longest matching end), and the source's word there. Linear (two KMP scans)."""
    m = len(quote)
    _, head, head_at = _kmp(quote, src.keys)
    _, tail, tail_at = _kmp(quote[::-1], src.keys[::-1])
    matched = max(head, tail)
    if matched < 2:  # one shared word says nothing about where the quote came from
        return "", matched / m
    if head >= tail:
        word, at = quote[head], head_at
    else:
        word, at = quote[m - tail - 1], len(src.keys) - tail_at - 1
    there = f" where the source has {_shown(src.span(source_text, at, at + 1))}" if 0 <= at < len(src.keys) else ""
    return f": it differs at {_shown(word)}{there}", matched / m


def _find_contiguous(quote: Sequence[str], src: _Tokens, source_text: str, label: str, edges: tuple[bool, bool]
                     ) -> _Found:
    """The quote's words as one run in the source; edges: the quote began / ended with punctuation."""
    found, _, _ = _kmp(quote, src.keys)
    if not found:
        detail, similarity = _difference(quote, src, source_text)
        return _Found(None, detail, True, similarity)
    m = len(quote)
    if m >= MIN_QUOTE_WORDS:
        return _Found(src.span(source_text, found[0], found[0] + m, lead=edges[0], trail=edges[1]), None, False, 1.0)
    whole = next((s for s in found if src.whole_sentence(s, s + m)), None)
    if whole is None:
        words = "word" if m == 1 else "words"
        return _Found(None, f"quote is too short: {m} {words}, fewer than {MIN_QUOTE_WORDS}, and not a whole "
                            f"sentence of {label}", False, 0.0)
    return _Found(src.span(source_text, whole, whole + m, lead=edges[0], trail=edges[1]), None, False, 1.0)


def _find_fragments(fragments: Sequence[Sequence[str]], src: _Tokens, source_text: str) -> _Found:
    """Ellipsis fragments in order, each within MAX_GAP_WORDS of the previous one's end."""
    if len(fragments) > MAX_FRAGMENTS:
        return _Found(None, f"quote joins {len(fragments)} fragments with ellipses; at most {MAX_FRAGMENTS} "
                            "are allowed", False, 0.0)
    for fragment in fragments:
        if len(fragment) < MIN_FRAGMENT_WORDS:
            return _Found(None, f"fragment {_shown(' '.join(fragment))} between ellipses has fewer than "
                                f"{MIN_FRAGMENT_WORDS} words", False, 0.0)
    # Token index just after each reachable occurrence of the fragment so far -> the chain of spans.
    chains: dict[int, list[tuple[int, int]]] = {}
    reachable: list[int] = []
    for index, fragment in enumerate(fragments):
        starts, _, _ = _kmp(fragment, src.keys)
        if not starts:
            return _Found(None, f": fragment {index + 1} {_shown(' '.join(fragment))} is not in it", True, 0.0)
        m = len(fragment)
        nxt: dict[int, list[tuple[int, int]]] = {}
        for s in starts:
            if index == 0:
                nxt.setdefault(s + m, [(s, s + m)])
                continue
            # The latest reachable end at or before s: the smallest gap, if any is small enough.
            at = bisect_right(reachable, s) - 1
            if at >= 0 and s - reachable[at] <= MAX_GAP_WORDS:
                nxt.setdefault(s + m, [*chains[reachable[at]], (s, s + m)])
        if not nxt:
            return _Found(None, f": its fragments are not in this order within {MAX_GAP_WORDS} words of each other",
                          True, 0.0)
        chains, reachable = nxt, sorted(nxt)
    spans = chains[reachable[0]]
    return _Found(" … ".join(src.span(source_text, lo, hi) for lo, hi in spans), None, False, 1.0)


def _find_variant(quote: str, src: _Tokens, source_text: str, label: str) -> _Found:
    words = _tokens(quote).keys
    if not words:
        return _Found(None, "empty quote", False, 0.0)
    core = _ELLIPSIS.sub(" ", normalise(quote)).strip(" \"'")  # wrapping quotes and ellipses are not the source's
    edges = (bool(core) and _is_punctuation(core[0]), bool(core) and _is_punctuation(core[-1]))
    contiguous = _find_contiguous(words, src, source_text, label, edges)
    if not contiguous.absent:
        return contiguous  # found (or found but too short): ellipses inside it were the source's own
    fragments = [f for f in (_tokens(p).keys for p in _ELLIPSIS.split(normalise(quote))) if f]
    if len(fragments) < 2:
        return contiguous
    return _find_fragments(fragments, src, source_text)


def _find(quote: str, source_text: str, label: str = "the source") -> _Found:
    """Look for a quote in one source (named ``label`` in problems), also reading HTML entities in
    the quote as the characters they stand for."""
    if len(quote) > _MAX_QUOTE_GROWTH * len(source_text) + _MAX_QUOTE_SLACK:
        return _Found(None, ": the quote is longer than the source", True, 0.0)
    src = _tokens(source_text)
    found = _find_variant(quote, src, source_text, label)
    if found.matched is None and "&" in quote and html.unescape(quote) != quote:
        unescaped = _find_variant(html.unescape(quote), src, source_text, label)
        # The unescaped reading wins unless the literal one got further ("&amp;" quoted from a page about HTML).
        if unescaped.matched is not None or not unescaped.absent or unescaped.similarity >= found.similarity:
            return unescaped
    return found


def find_quote(quote: str, source_text: str) -> tuple[str | None, float]:
    """Locate a quote in a source: (the source's text for it, or None; similarity).

    Valid when the quote's words, after erasing only the ``TOLERATED`` differences, occur in the
    source contiguously, or as ellipsis fragments under the rules in the module docstring, and
    the quote carries content (``MIN_QUOTE_WORDS`` words or a whole sentence). Similarity is 1.0
    when valid, else the share of the quote's words matched before the first difference.
    """
    found = _find(quote, source_text)
    return found.matched, found.similarity


# ---------------------------------------------------------------------------- validation

_NEI_KEY = normalise(NOT_ENOUGH_INFORMATION)


def is_not_enough_information(answer: str) -> bool:
    """True for "Not enough information" give or take case, whitespace, wrapping quotes,
    markdown emphasis and a trailing full stop. Anything longer is a real answer."""
    if not isinstance(answer, str):
        return False
    core = normalise(answer).strip(" \"'`*_").rstrip(".!").strip(" \"'`*_")
    return core == _NEI_KEY


def validate_answer(data: Mapping[str, Any], sources: Sequence[Source], question: str = "") -> Validation:
    """Check every citation in an (already parsed) reply against the sources that were sent.

    ``data`` goes through ``coerce_answer`` first, so odd shapes are tolerated. A citation is
    valid only if its source number was sent, its quote is that very source's words, and the answer
    does not contradict it (numbers, dates, polarity, named values: :mod:`jobs.agreement`; the
    ``question``'s own numbers and names count as given). An empty answer is never grounded,
    whatever it cites.
    """
    reply = coerce_answer(data)
    by_number = {s.number: s for s in sources}
    checks = [_check(citation, by_number) for citation in reply["citations"]]
    nei = is_not_enough_information(reply["answer"])
    if not nei:
        checks = _agreement(reply["answer"], question, checks, by_number)
    failed = [c for c in checks if not c.valid]
    grounded = not failed and bool(reply["answer"].strip()) and (nei or bool(checks))
    return Validation(grounded=grounded, checks=checks, failed=failed, not_enough_information=nei)


def _agreement(answer: str, question: str, checks: list[CitationCheck], by_number: Mapping[int, Source]
               ) -> list[CitationCheck]:
    """The checks, with each disagreement of the answer with its valid quotes failing the citation it
    concerns (the one whose quote holds the evidence's value, else the first valid one)."""
    valid = [c for c in checks if c.valid]
    if not valid:
        return checks
    cited = sorted({c.source for c in valid if c.source is not None})
    found = disagreements(answer, question, [c.quote for c in valid], [by_number[n].text for n in cited])
    if not found:
        return checks
    reasons: dict[int, list[str]] = {}
    for problem in found:
        value = normalise(problem.evidence or "")
        target = next((i for i, c in enumerate(checks) if c.valid and value and value in normalise(c.quote)),
                      checks.index(valid[0]))
        reasons.setdefault(target, []).append(problem.reason)
    return [replace(c, valid=False, reason="; ".join(reasons[i])) if i in reasons else c for i, c in enumerate(checks)]


def _check(citation: Mapping[str, Any], by_number: Mapping[int, Source]) -> CitationCheck:
    number, quote = citation["source"], citation["quote"]

    def fail(reason: str, similarity: float = 0.0) -> CitationCheck:
        return CitationCheck(number, quote, False, reason, None, similarity)

    if number is None:
        return fail(citation.get("source_error") or "citation has no source number")
    if number not in by_number:
        return fail(f"source {number} was not sent")
    if not any(ch.isalnum() for ch in quote):  # cheap, before normalising a possibly huge quote
        return fail("empty quote")
    found = _find(quote, by_number[number].text, f"source {number}")
    if found.matched is not None:
        return CitationCheck(number, quote, True, None, found.matched, found.similarity)
    if not found.absent:  # the words are there but break a rule (too short, too many fragments, …)
        return fail(str(found.problem), found.similarity)
    elsewhere = [n for n, s in sorted(by_number.items()) if n != number and _find(quote, s.text).matched is not None]
    reason = f"quote not found in source {number}"
    if elsewhere:
        reason += " (found in source " + ", ".join(map(str, elsewhere)) + ")"
    else:
        reason += found.problem or ""
    return fail(reason, found.similarity)
