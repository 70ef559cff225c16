"""Did an answer change since the last run? Decided on the evidence, not on the wording.

A model rewords its answer from one day to the next; what matters to someone watching a page is
whether the *evidence* changed: the quotes it rests on, or the content of the chunks they come from.
The evidence of an answer is the set of its valid citations as (chunk id, normalised quote); chunk ids
are hashes of the page URL, heading path and text, so an edited section gets a new id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jobs.validate import normalise

UNCHANGED = "unchanged"
CHANGED = "changed"
NEW = "new"
NO_LONGER_ANSWERED = "no_longer_answered"
CHANGE_KINDS = (CHANGED, NEW, NO_LONGER_ANSWERED, UNCHANGED)


@dataclass(frozen=True)
class Evidence:
    """What an answer rests on, in a form that survives rewording."""

    answered: bool  # False for "Not enough information" and failed questions
    citations: frozenset[tuple[str, str]]  # (chunk_id, normalised quote) of valid citations
    fallback: str  # normalised answer text, used only when neither side has a valid citation

    def to_json(self) -> str:
        return json.dumps({"answered": self.answered, "citations": sorted(map(list, self.citations)),
                           "fallback": self.fallback}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | None) -> Evidence | None:
        if not text:
            return None
        data = json.loads(text)
        return cls(bool(data["answered"]), frozenset((c, q) for c, q in data["citations"]), data["fallback"])

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()[:16]


def evidence_of(answer: str | None, not_enough_information: bool | None, citations: Iterable[Mapping[str, Any]],
                error: str | None = None) -> Evidence:
    answered = bool(answer) and not not_enough_information and error is None
    cited = frozenset(
        (str(c["chunk_id"]), normalise(str(c.get("quote") or "")))
        for c in citations
        if c.get("valid") and c.get("chunk_id")
    )
    return Evidence(answered, cited if answered else frozenset(), normalise(answer or "") if answered else "")


def classify(previous: Evidence | None, current: Evidence) -> str:
    """The change of one question's answer from the previous run to this one."""
    if previous is None:
        return NEW
    if previous.answered and not current.answered:
        return NO_LONGER_ANSWERED
    if not previous.answered and not current.answered:
        return UNCHANGED
    if previous.answered != current.answered:
        return CHANGED
    if previous.citations or current.citations:
        return UNCHANGED if previous.citations == current.citations else CHANGED
    # Neither answer cites anything valid: the wording is all there is to compare.
    return UNCHANGED if previous.fallback == current.fallback else CHANGED
