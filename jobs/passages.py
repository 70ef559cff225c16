"""Passages: the part of a chunk worth sending, found by scoring its sentence windows.

Pure: no I/O; the same text and scores always give the same passage.

A chunk (about 350 tokens) is split into *units*: sentences, with paragraph breaks respected and overlong
runs (code, lists without full stops) cut into pieces. A *window* starts at each unit and takes the
following units until it holds ``WINDOW_WORDS`` words (at most ``WINDOW_UNITS`` units): a sentence together
with what it needs around it ("How do I ignore changes to a tracked file? Git doesn't provide a way to do
this."). Windows are what the second stage scores (jobs/second_stage.py). A *passage* is the best window,
grown one unit at a time towards the better-scoring neighbour while it stays within ``words``: the exact
text of the chunk between two unit boundaries, so quotes from it are quotes from the page.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# A window of about two sentences: enough to carry a question and its answer, short enough that the
# question's best match is not diluted by the rest of the chunk.
WINDOW_WORDS = 40
WINDOW_UNITS = 3
# A unit longer than this (a code block, a list with no full stop) is cut into pieces of this many words.
UNIT_MAX_WORDS = 60

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_PARAGRAPH = re.compile(r"\n\s*\n")
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Span:
    """Characters ``start``..``end`` of a chunk's text, and how many words they hold."""

    start: int
    end: int
    words: int


def units(text: str) -> list[Span]:
    """The chunk's sentences (paragraph breaks are boundaries too), overlong ones cut by words; in order,
    covering every word of the text."""
    out: list[Span] = []
    for paragraph in _spans(text, _PARAGRAPH):
        for sentence in _spans(text, _SENTENCE_END, paragraph):
            words = list(_WORD.finditer(text, sentence.start, sentence.end))
            for at in range(0, len(words), UNIT_MAX_WORDS):
                piece = words[at : at + UNIT_MAX_WORDS]
                out.append(Span(piece[0].start(), piece[-1].end(), len(piece)))
    return out


def _spans(text: str, separator: re.Pattern[str], within: Span | None = None) -> list[Span]:
    start, end = (within.start, within.end) if within else (0, len(text))
    pieces, at = [], start
    for match in separator.finditer(text, start, end):
        pieces.append(Span(at, match.start(), 0))
        at = match.end()
    pieces.append(Span(at, end, 0))
    return [p for p in pieces if text[p.start : p.end].strip()]


def windows(spans: Sequence[Span]) -> list[tuple[int, int]]:
    """(first unit, last unit) of the window starting at each unit; a window already ended by its
    predecessor's is left out (same text)."""
    out: list[tuple[int, int]] = []
    for first in range(len(spans)):
        last, words = first, spans[first].words
        while words < WINDOW_WORDS and last + 1 < len(spans) and last - first + 1 < WINDOW_UNITS:
            last += 1
            words += spans[last].words
        if not out or out[-1][1] != last:
            out.append((first, last))
    return out


def window_text(text: str, spans: Sequence[Span], window: tuple[int, int]) -> str:
    return text[spans[window[0]].start : spans[window[1]].end]


@dataclass(frozen=True)
class Passage:
    start: int  # character offsets in the chunk's text
    end: int
    words: int
    score: float  # its best window's score
    window: tuple[int, int]  # the best window (units)
    units: tuple[int, int]  # the passage (units)

    def whole(self, text: str) -> bool:
        return self.start == 0 and self.end >= len(text.rstrip())


def best_passage(text: str, spans: Sequence[Span], wins: Sequence[tuple[int, int]], scores: Sequence[float],
                 words: int) -> Passage:
    """The best-scoring window (the first of equals; cut to its first units when it is longer than ``words``),
    grown unit by unit within ``words``: towards the neighbour whose own window scores higher (after it on a
    tie), until neither fits."""
    assert spans and len(wins) == len(scores) and wins
    best = max(range(len(wins)), key=lambda i: (scores[i], -i))
    first, last = wins[best]
    start_score = {w[0]: s for w, s in zip(wins, scores, strict=True)}
    total = sum(s.words for s in spans[first : last + 1])
    while last > first and total > words:  # a window longer than the passage keeps its start
        total -= spans[last].words
        last -= 1
    while True:
        options = []
        if last + 1 < len(spans) and total + spans[last + 1].words <= words:
            options.append((start_score.get(last + 1, float("-inf")), 1, "after"))
        if first > 0 and total + spans[first - 1].words <= words:
            options.append((start_score.get(first - 1, float("-inf")), 0, "before"))
        if not options:
            break
        _score, _tie, side = max(options)
        if side == "after":
            last += 1
            total += spans[last].words
        else:
            first -= 1
            total += spans[first].words
    return Passage(spans[first].start, spans[last].end, total, scores[best], wins[best], (first, last))


def lexical_scores(question_stems: Sequence[str], heading: str, texts: Sequence[str],
                   weights: Sequence[float] | None = None) -> list[float]:
    """Share of the question's stems each text holds, each stem weighted (its idf; equal when not given),
    the heading counting for every text: the window score when no embedding is at hand (bm25 selection,
    or the embedding call failed), and the lexical part of the score when there is one."""
    if not question_stems:
        return [0.0] * len(texts)
    weights = list(weights) if weights is not None else [1.0] * len(question_stems)
    total = sum(weights) or 1.0
    head = heading.lower()
    return [sum(w for s, w in zip(question_stems, weights, strict=True) if s in head or s in t.lower()) / total
            for t in texts]
