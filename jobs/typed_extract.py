"""Values found verbatim in text: what the extractive answerer fills in, and what a model's number is checked against.

The extractive answerer has no model to ask for a value, so it fills only what its chosen sentences
write out: one number (not one of the question's), a leading "Yes"/"No", one ISO date, one enum choice.
Anything else (several candidates, none, a list) is ``answered: false``: a wrong value is worse than none.
Pure and deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any

from jobs.prompt import NOT_ENOUGH_INFORMATION
from jobs.typed import AnswerType

__all__ = ["extractive_value", "fill_extractive", "number_problem", "numbers_in"]

# A number as written: 8731, 1,000, 3.5, -2; not part of a word, a version (3.11.2) or an ISO date.
_NUMBER = re.compile(r"(?<![\w.,-])(-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?)(?![\w]|[.,-]\d)")
_ISO_DATE = re.compile(r"(?<![\w-])(\d{4}-\d{2}-\d{2})(?![\w-])")
_CITATION_MARK = re.compile(r"\[\s*\d+(?:\s*[,;]\s*\d+)*\s*\]")
_YES_NO = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)


def _decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None


def numbers_in(text: str) -> list[Decimal]:
    """The numbers written in digits in ``text``, in order (ISO dates and citation marks left out)."""
    text = _ISO_DATE.sub(" ", _CITATION_MARK.sub(" ", text))
    return [d for d in (_decimal(m.group(1)) for m in _NUMBER.finditer(text)) if d is not None]


def _as_json_number(value: Decimal) -> int | float:
    return int(value) if value == value.to_integral_value() else float(value)


def _one(found: Sequence[Any]) -> Any:
    distinct = list(dict.fromkeys(found))
    return distinct[0] if len(distinct) == 1 else None


def extractive_value(atype: AnswerType, question: str, quotes: Sequence[str]) -> Any:
    """The one value of ``atype`` the quotes write out (the first quote that has any decides), or None."""
    asked = set(numbers_in(question))
    for quote in quotes:
        if atype.kind == "number":
            value = _one([n for n in numbers_in(quote) if n not in asked])
            if value is not None:
                return _as_json_number(value)
        elif atype.kind == "yes_no":
            match = _YES_NO.match(quote)
            if match:
                return match.group(1).lower() == "yes"
        elif atype.kind == "date":
            value = _one(_ISO_DATE.findall(quote))
            if value is not None:
                try:
                    return date.fromisoformat(value).isoformat()
                except ValueError:
                    continue
        elif atype.kind == "enum":
            value = _one([c for c in atype.choices
                          if re.search(rf"(?<!\w){re.escape(c)}(?!\w)", quote, re.IGNORECASE)])
            if value is not None:
                return value
    return None


def fill_extractive(atype: AnswerType, question: str, reply: Mapping[str, Any]) -> dict[str, Any]:
    """The extractive reply with ``answered`` and, for a typed question, ``value``; a typed question whose
    value is not written out in the chosen sentences is "Not enough information"."""
    quotes = [str(c.get("quote") or "") for c in reply.get("citations") or []]
    answered = bool(quotes) and reply.get("answer") != NOT_ENOUGH_INFORMATION
    if not atype.typed:
        return {**reply, "answered": answered}
    value = extractive_value(atype, question, quotes) if answered else None
    if value is None:
        return {"answer": NOT_ENOUGH_INFORMATION, "citations": [], "confidence": "low", "answered": False,
                "value": None}
    return {**reply, "answered": True, "value": value}


def number_problem(value: Any, quotes: Sequence[str]) -> str | None:
    """Why a model's number is not trusted though it has the right type: none of its valid quotes writes it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    wanted = _decimal(repr(value) if isinstance(value, float) else str(value))
    if wanted is not None and any(n == wanted for q in quotes for n in numbers_in(q)):
        return None
    return f"value {value} is not written in the quoted evidence"
