"""Did an answer change since the last run? Decided on what the answer says, not on where it was found.

What an answer of a typed question says is first its value (``jobs/typed.py``): ``42`` → ``43`` is
``changed`` whatever the words, and the same value in other words or quotes is at most ``reworded``.
Otherwise, what an answer says is its verdict (answered, not enough information, failed), the text of the
quotes it rests on (its valid citations, normalised) and its own words (normalised, the ``[n]`` source
markers left out). The chunk ids its quotes come from are kept only to tell why a same answer looks
different: a chunk id hashes the page URL, heading path and *whole* text of its section, so editing
another sentence of the section gives the same quote a new chunk id. That is ``evidence_moved``, not
a change.

Kinds, from most to least telling:

- ``new``: the question was not asked before;
- ``no_longer_answered``: answered before, not enough information or failed now;
- ``changed``: another verdict, or other quotes (or, without valid quotes on either side, other words);
- ``reworded``: the same verdict and quotes in other words (whether that counts is the user's choice:
  ``webqa run --fail-on-reworded``);
- ``evidence_moved``: the same verdict, quotes and words, from rewritten chunks ("same (evidence moved)");
- ``unchanged``: the same verdict, quotes and words from the same chunks.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jobs.validate import normalise

UNCHANGED = "unchanged"
EVIDENCE_MOVED = "evidence_moved"
REWORDED = "reworded"
CHANGED = "changed"
NEW = "new"
NO_LONGER_ANSWERED = "no_longer_answered"
CHANGE_KINDS = (CHANGED, NEW, NO_LONGER_ANSWERED, REWORDED, EVIDENCE_MOVED, UNCHANGED)
# What `--fail-on-change` counts, and what `--fail-on-reworded` adds to it.
REPORTABLE = (CHANGED, NEW, NO_LONGER_ANSWERED)
REPORTABLE_REWORDED = (*REPORTABLE, REWORDED)
# How each kind reads in reports and summary lines.
LABELS = {UNCHANGED: "same", EVIDENCE_MOVED: "same (evidence moved)", REWORDED: "reworded", CHANGED: "changed",
          NEW: "new", NO_LONGER_ANSWERED: "no longer answered"}
# An answer of blanks, as every report and `webqa history` shows it (rather than nothing after its label).
EMPTY_ANSWER = "(empty answer)"

ANSWERED, NOT_ENOUGH_INFORMATION, FAILED = "answered", "not_enough_information", "failed"
# "[1]", "[2, 3]", "[1][2]": the prompt's source numbers, which follow the selection's order, not the answer.
_MARKERS = re.compile(r"\s*\[\s*\d+(?:\s*[,;]\s*\d+)*\s*\]")


@dataclass(frozen=True)
class Evidence:
    """What an answer says, and where its quotes came from."""

    verdict: str  # answered | not_enough_information | failed
    quotes: frozenset[str]  # normalised text of the valid citations' quotes
    text: str  # the normalised answer without source markers; "" unless answered
    chunks: frozenset[str] = frozenset()  # chunk ids of the valid citations
    value: str | None = None  # a typed question's value as compared (jobs.typed.value_key); None: text or none


    @property
    def answered(self) -> bool:
        return self.verdict == ANSWERED

    def to_json(self) -> str:
        data: dict[str, Any] = {"verdict": self.verdict, "quotes": sorted(self.quotes), "text": self.text,
                                "chunks": sorted(self.chunks)}
        if self.value is not None:
            data["value"] = self.value  # absent otherwise: the evidence of an untyped answer reads as before
        return json.dumps(data, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | None) -> Evidence | None:
        """The stored evidence; None when absent or written by a webqa that kept (chunk, quote) pairs
        instead (its rows are computed again from their answer columns: ``history.evidence_from_row``)."""
        if not text:
            return None
        data = json.loads(text)
        if not isinstance(data, dict) or "verdict" not in data:
            return None
        value = data.get("value")
        return cls(str(data["verdict"]), frozenset(data["quotes"]), str(data["text"]), frozenset(data["chunks"]),
                   str(value) if value is not None else None)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()[:16]


def answer_words(answer: str | None) -> str:
    """An answer's own words for comparison: normalised, without the ``[n]`` source markers."""
    return normalise(_MARKERS.sub("", answer or ""))


def evidence_of(answer: str | None, not_enough_information: bool | None, citations: Iterable[Mapping[str, Any]],
                error: str | None = None, value: str | None = None) -> Evidence:
    if error is not None or not answer:
        return Evidence(FAILED, frozenset(), "")
    if not_enough_information:
        return Evidence(NOT_ENOUGH_INFORMATION, frozenset(), "")
    valid = [c for c in citations if c.get("valid")]
    quotes = frozenset(normalise(str(c.get("quote") or "")) for c in valid) - {""}
    chunks = frozenset(str(c["chunk_id"]) for c in valid if c.get("chunk_id"))
    return Evidence(ANSWERED, quotes, answer_words(answer), chunks, value)


def classify(previous: Evidence | None, current: Evidence) -> str:
    """The change of one question's answer from the previous run to this one (see the module's kinds)."""
    if previous is None:
        return NEW
    if previous.answered and not current.answered:
        return NO_LONGER_ANSWERED
    if previous.verdict != current.verdict:
        return CHANGED
    if not current.answered:
        return UNCHANGED  # not enough information both times, or failed both times
    if previous.value is not None and current.value is not None:
        # Typed values say what the answer says: another value is a change, the same one never is.
        if previous.value != current.value:
            return CHANGED
        if previous.quotes != current.quotes or previous.text != current.text:
            return REWORDED
    if previous.quotes != current.quotes:
        return CHANGED
    if previous.text != current.text:
        # Without a valid quote on either side, the words are all the answer says.
        return REWORDED if current.quotes else CHANGED
    return UNCHANGED if previous.chunks == current.chunks else EVIDENCE_MOVED
