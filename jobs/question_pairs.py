"""Which answer of the previous run a question's answer is compared with: the same question's, not the same slot's.

Questions written without an id get q1, q2, … by position, so one question added at the top of the list used to
compare every answer with its neighbour's: every answer "changed", `--fail-on-change` exited 5 and the webhook
announced changes no page made. A question is paired, in this order, with the previous run's question of the
same id and the same text; else of the same text (its id renamed, or moved by an insertion); else of the same id
(the question edited in place, sharing a content word with it: still compared, and the reports say it was
edited). Else it is new. "The same text"
includes the same scope (its own urls, type and kind: :func:`scope_key`), so one question asked of two pages is
two questions; an answer stored before the scope was (schema 12) fits any. Questions are taken in the natural
order of their ids (q2 before q10) on both sides: the run, `webqa diff` and `webqa history` then decide alike
whatever order the answers were stored in.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jobs.extractive import stem

__all__ = ["edited", "pair_previous", "same_question", "scope_key"]

# (question id, question, scope key or None); a pair (id, question) has no scope.
Asked = tuple[str, str] | tuple[str, str, str | None]


def scope_key(urls: Iterable[str] | None, kind: str, answer_type: str) -> str:
    """The question's own ``urls:`` (in any order), kind and type as a short key stored with its answer."""
    text = json.dumps([sorted(urls) if urls is not None else None, kind, answer_type])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def same_question(a: str | None, b: str | None) -> bool:
    """The same question text, whatever its spacing or case."""
    return " ".join(str(a or "").split()).casefold() == " ".join(str(b or "").split()).casefold()


def pair_previous(previous: Mapping[str, Mapping[str, Any]], current: Sequence[Asked]) -> dict[str, str | None]:
    """For each current (question id, question[, scope]), the id of the previous run's answer it is compared with,
    or None.

    ``previous`` maps the previous run's question ids to their answer rows (with their ``question`` and ``scope``).
    Each previous answer is paired at most once.
    """
    asked = sorted(((q[0], q[1], q[2] if len(q) > 2 else None) for q in current), key=lambda q: _in_order(q[0]))
    candidates = sorted(previous.items(), key=lambda item: _in_order(item[0]))
    pairs: dict[str, str | None] = {}
    taken: set[str] = set()
    for qid, text, scope in asked:
        row = previous.get(qid)
        if row is not None and _fits(row, text, scope):
            pairs[qid] = qid
            taken.add(qid)
    for qid, text, scope in asked:
        if qid not in pairs:
            match = next((p for p, row in candidates if p not in taken and _fits(row, text, scope)), None)
            if match is not None:
                pairs[qid] = match
                taken.add(match)
    for qid, text, _scope in asked:
        if qid not in pairs:
            same_id = qid in previous and qid not in taken and _shares_a_word(previous[qid].get("question"), text)
            pairs[qid] = qid if same_id else None
            if pairs[qid] is not None:
                taken.add(qid)
    return pairs


# Words too common in questions to show two are one question edited. Not jobs/extractive.py's STOP_WORDS: that list
# is for picking an answer's keywords and drops words an edit keeps ("used", "down", "please"), and a question
# wrongly seen as new reports a change and fires the job's webhook. The last line: the parts of contractions.
_COMMON = frozenset("""a an and any are can could did do does for from has have how in into is it its of on or
per should that the there this to was were what when where which who whom whose why will with would
s t d m ll re ve don doesn didn isn aren wasn weren won hasn haven couldn shouldn wouldn""".split())


def _shares_a_word(before: str | None, now: str) -> bool:
    """An edit, not another question in the slot: the two share a content word, stemmed (so 'Is there a dark mode?'
    inserted above is not 'Which port?' edited, and 'Which ports?' is)."""
    def words(text: str | None) -> set[str]:
        return {stem(w) for w in re.findall(r"\w+", str(text or "").casefold()) if w not in _COMMON}
    return bool(words(before) & words(now))


def _in_order(question_id: str) -> list[tuple[int, str]]:
    """q2 before q10: the digits of an id compared as numbers."""
    return [(int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"(\d+)", question_id) if part]


def _fits(row: Mapping[str, Any], text: str, scope: str | None) -> bool:
    """The same question: its text, and its scope when both are known."""
    known = row.get("scope")
    return same_question(row.get("question"), text) and (known is None or scope is None or known == scope)


def edited(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> str | None:
    """What the reports add to a compared question: "was q1", "question edited", both, or None."""
    if before is None or after is None:
        return None
    notes = []
    if before.get("question_id") != after.get("question_id"):
        notes.append(f"was {before.get('question_id')}")
    if not same_question(before.get("question"), after.get("question")):
        notes.append(f"question edited; it was “{' '.join(str(before.get('question') or '').split())}”")
    return ", ".join(notes) or None
