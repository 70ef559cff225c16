"""Typed answers: a question's ``type``, the reply schema Ollama is given for it, and the check of the value.

A job question may say what kind of value its answer is (``type: number``); the default is ``text``.
The reply schema then asks for ``value`` of that type and ``answered: true|false`` beside the answer text,
citations and confidence, so "Not enough information" is a field, not a phrase to recognise. A small model
does not always obey the grammar, so :func:`check_value` checks the value again: a value of the wrong type
is recorded with its problem and never trusted (its ``value`` is null).

Pure: no I/O. The kinds and their JSON values:

========== ======================================= ===========================================
type       value                                   schema sent
========== ======================================= ===========================================
yes_no     true | false                            boolean
number     a number (42, 1.5)                      number
date       "YYYY-MM-DD"                            string, format date
list       ["…", …] (non-empty strings)            array of strings
enum(a, b) "a" or "b" (one of the choices)         string, enum
text       the answer's words (no source markers)  (none: the answer text is the value)
========== ======================================= ===========================================
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

__all__ = ["KINDS", "TEXT", "AnswerType", "TypedValue", "answer_schema", "check_type_text", "check_value",
           "judged_schema", "parse_type", "prompt_question", "reply_answered", "value_key", "value_schema", "value_text"]

KINDS = ("yes_no", "number", "date", "list", "enum", "text")
MAX_LIST_ITEMS = 100  # a list answer longer than this is a page dump, not an answer
MAX_CHOICES = 50
_ENUM = re.compile(r"\s*enum\s*\((?P<choices>.*)\)\s*", re.DOTALL)
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
# "[1]", "[2, 3]": the prompt's source numbers, not words of the answer.
_MARKERS = re.compile(r"\s*\[\s*\d+(?:\s*[,;]\s*\d+)*\s*\]")


@dataclass(frozen=True)
class AnswerType:
    kind: str = "text"
    choices: tuple[str, ...] = ()  # enum only

    def __str__(self) -> str:
        return f"enum({', '.join(self.choices)})" if self.kind == "enum" else self.kind

    @property
    def typed(self) -> bool:
        """Whether the model is asked for a value of its own (every kind but text)."""
        return self.kind != "text"


TEXT = AnswerType()


def parse_type(text: str) -> AnswerType:
    """``yes_no``, ``number``, ``date``, ``list``, ``text`` or ``enum(a, b, …)``; ValueError says what is allowed."""
    if not isinstance(text, str):
        raise ValueError(f"expected one of {', '.join(KINDS[:-2])}, enum(a, b, ...) or text, got {text!r}")
    word = text.strip()
    if word in KINDS and word != "enum":
        return AnswerType(word)
    match = _ENUM.fullmatch(word)
    if match is None:
        raise ValueError(f"unknown type {text!r}; expected one of yes_no, number, date, list, enum(a, b, ...) or text")
    choices = tuple(c.strip() for c in match.group("choices").split(","))
    if len(choices) < 2 or any(not c for c in choices):
        raise ValueError(f"{text!r}: enum needs at least two non-empty choices separated by commas, e.g. enum(low, high)")
    if len({c.casefold() for c in choices}) != len(choices):
        raise ValueError(f"{text!r}: the choices of an enum must differ (case is ignored)")
    if len(choices) > MAX_CHOICES:
        raise ValueError(f"{text!r}: at most {MAX_CHOICES} choices")
    return AnswerType("enum", choices)


def check_type_text(text: Any) -> str:
    """The job file's ``type:`` in its canonical spelling ("enum(a, b)"); ValueError otherwise."""
    return str(parse_type(text))


_VALUE_SCHEMAS: dict[str, dict[str, Any]] = {
    "yes_no": {"type": ["boolean", "null"]},
    "number": {"type": ["number", "null"]},
    "date": {"type": ["string", "null"], "format": "date"},
    "list": {"type": ["array", "null"], "items": {"type": "string"}},
}


def value_schema(atype: AnswerType) -> dict[str, Any]:
    if atype.kind == "enum":
        return {"type": ["string", "null"], "enum": [*atype.choices, None]}
    return dict(_VALUE_SCHEMAS.get(atype.kind, {"type": ["string", "null"]}))


def answer_schema(base: Mapping[str, Any], atype: AnswerType) -> dict[str, Any]:
    """The reply schema for a question of ``atype``: ``base`` (answer, citations, confidence) plus
    ``answered``, and for a typed question ``value``, all required, so that Ollama's grammar makes every reply
    say whether it answers in a field, whatever the language of its words."""
    properties = {**base["properties"], "answered": {"type": "boolean"}}
    required = [*base["required"], "answered"]
    if atype.typed:
        properties["value"] = value_schema(atype)
        required.append("value")
    return {**base, "properties": properties, "required": required}


def judged_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema a reply is judged by before it is used: ``schema`` with ``answered`` optional, since a server
    that does not apply the grammar may leave it out of a text answer, and the phrase is read then."""
    required = [key for key in schema.get("required") or () if key != "answered"]
    return {**schema, "required": required}


_HINTS = {
    "yes_no": 'set "value" to true for yes or false for no',
    "number": 'set "value" to the number alone (digits, no unit)',
    "date": 'set "value" to the date written YYYY-MM-DD',
    "list": 'set "value" to the list of items, one string each',
}


def prompt_question(question: str, atype: AnswerType) -> str:
    """The question as the prompt asks it: a typed question says what ``value`` must hold (the schema only
    constrains its shape), and that an unanswerable one is ``answered: false``."""
    if not atype.typed:
        return question
    hint = _HINTS.get(atype.kind) or f'set "value" to exactly one of: {", ".join(atype.choices)}'
    return f'{question} (In the JSON, {hint}; if the sources do not answer, set "answered" to false and "value" to null.)'


def reply_answered(data: Any) -> bool | None:
    """The reply's ``answered`` field when it is a boolean; None when absent or of another type."""
    value = data.get("answered") if isinstance(data, Mapping) else None
    return value if isinstance(value, bool) else None


@dataclass(frozen=True)
class TypedValue:
    """A question's value as recorded: trusted (problem None), or null with the problem that voided it."""

    value: Any
    answered: bool
    problem: str | None = None


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:59] + "…"


def _kind_problem(atype: AnswerType, value: Any) -> tuple[Any, str | None]:
    """(the value in its canonical form, None) or (None, why it is not of ``atype``)."""
    kind = atype.kind
    if kind == "yes_no":
        return (value, None) if isinstance(value, bool) else (None, f"value {_shown(value)} is not true or false")
    if kind == "number":
        # An int is finite however long (math.isfinite would overflow converting it to a float).
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (
            isinstance(value, int) or math.isfinite(value))
        if not ok:
            return None, f"value {_shown(value)} is not a number"
        return (int(value) if isinstance(value, float) and value.is_integer() else value), None
    if kind == "date":
        if isinstance(value, str) and _ISO_DATE.fullmatch(value.strip()):
            try:
                return date.fromisoformat(value.strip()).isoformat(), None
            except ValueError:
                pass
        return None, f"value {_shown(value)} is not a date written YYYY-MM-DD"
    if kind == "list":
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value) or not value:
            return None, f"value {_shown(value)} is not a list of texts"
        if len(value) > MAX_LIST_ITEMS:
            return None, f"value is a list of {len(value)} items, more than {MAX_LIST_ITEMS}"
        return [" ".join(v.split()) for v in value], None
    if kind == "enum":
        wanted = {c.casefold(): c for c in atype.choices}
        if isinstance(value, str) and value.strip().casefold() in wanted:
            return wanted[value.strip().casefold()], None
        return None, f"value {_shown(value)} is not one of {', '.join(atype.choices)}"
    return (value, None) if isinstance(value, str) else (None, f"value {_shown(value)} is not a text")


def check_value(atype: AnswerType, data: Mapping[str, Any], not_enough_information: bool) -> TypedValue:
    """The value of a reply (``data``: the coerced reply plus its ``answered`` and ``value``), checked.

    Not answered: no value. A text question's value is its answer's words. A typed question answered
    without a value of its type keeps its answer but not the value: ``problem`` says why.
    """
    if not_enough_information:
        return TypedValue(None, False)
    if not atype.typed:
        return TypedValue(_MARKERS.sub("", str(data.get("answer") or "")).strip() or None, True)
    if "value" not in data or data.get("value") is None:
        return TypedValue(None, True, f"answered without a value of type {atype}")
    value, problem = _kind_problem(atype, data["value"])
    return TypedValue(value, True, problem)


def value_key(value: Any) -> str | None:
    """A value as compared between runs (canonical JSON; a list's order counts, its case does not)."""
    if value is None:
        return None
    if isinstance(value, list):
        value = [" ".join(str(v).split()).casefold() for v in value]
    elif isinstance(value, str):
        value = " ".join(value.split()).casefold()
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def value_text(value: Any) -> str:
    """A value for people: yes/no, 42, 2026-12-02, "a; b"; "-" for none."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return "; ".join(map(str, value))
    return str(value)
