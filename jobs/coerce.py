"""A model's reply, whatever its shape, as the answer mapping validation checks (see :func:`coerce_answer`).

Small models slip (citations as bare numbers, "High", a fenced JSON string); this module forgives
the shape and never the content: jobs/validate.py still checks every citation against its source.
"""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Mapping
from typing import Any

__all__ = ["coerce_answer"]

_CONFIDENCES = ("high", "medium", "low")
_SOURCE_KEYS = ("source", "source_id", "source_number", "number", "n", "id")
_QUOTE_KEYS = ("quote", "quotes", "text", "excerpt")
_CITATION_KEYS = ("citations", "citation", "sources", "references")
# One whole number, perhaps named: "2", " 2 ", "SOURCE 2", "[2]", "#2". Not "1; 7", "1,2", "-1", "1.5".
# At most 9 digits: int() of thousands of digits is slow, and no prompt has that many sources.
_SOURCE_NUMBER = r"[\[(]?\s*(?:(?:source|src)\b\s*)?#?\s*(\d{1,9})\s*[\])]?"
_SOURCE_VALUE = re.compile(rf"\s*{_SOURCE_NUMBER}\s*", re.IGNORECASE)
# A bare string citation: the number, then a separator or whitespace, then any quote:
# "Source #2: some quote", "2 - some quote", "[2] some quote".
_SOURCE_STRING = re.compile(rf"\s*{_SOURCE_NUMBER}(?:\s*[:\-–—]\s*|\s+|$)(.*)", re.IGNORECASE | re.DOTALL)
_FENCED_JSON = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL | re.IGNORECASE)


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (list, tuple)):
        return " ".join(t for t in (_as_text(v) for v in value) if t)
    return str(value).strip()


def _source_number(value: Any, *, with_quote: bool = False) -> tuple[int | None, str, str | None]:
    """(source number or None, quote text that came with it as in "Source 2: …", why it is no number).

    A source is one positive whole number: an int, a float like 2.0, or a string naming one
    number and nothing else (with_quote: a string whose rest is the quote). Bools, 0, negatives,
    1.5 and lists such as "1; 7" are refused rather than read as their first number.
    """
    if value is None:
        return None, "", None  # no number given: reported as "citation has no source number"
    number: int | None = None
    rest = ""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        m = (_SOURCE_STRING.fullmatch if with_quote else _SOURCE_VALUE.fullmatch)(value)
        if m:
            number, rest = int(m.group(1)), (m.group(2).strip() if with_quote else "")
    shown = reprlib.repr(value)  # bounded, whatever the model sent
    if number is None:
        return None, "", f"source {shown} is not a whole number"
    if number < 1:
        return None, "", f"source {shown} is not a positive whole number"
    return number, rest, None


def _citations(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        value = [value]
    out: list[dict[str, Any]] = []
    for item in value:
        if isinstance(item, Mapping):
            number: int | None = None
            problem: str | None = None
            for key in _SOURCE_KEYS:
                if key in item:
                    number, _, problem = _source_number(item[key])
                    break
            if number is None and problem is None and isinstance(item.get("source_error"), str):
                problem = item["source_error"]  # coercing an already coerced reply keeps the reason
            raw_quote = next((item[k] for k in _QUOTE_KEYS if k in item), "")
            # One citation per quote: a list of quotes for one source is common.
            quotes = [_as_text(q) for q in raw_quote] if isinstance(raw_quote, (list, tuple)) else [_as_text(raw_quote)]
            for quote in quotes or [""]:
                out.append(_citation(number, quote, problem))
        else:
            number, quote, problem = _source_number(item, with_quote=True)
            # An unreadable citation is kept (source None) so validation reports it instead of
            # the answer silently looking better cited than it is.
            out.append(_citation(number, quote.strip().strip("\"'“”"), problem))
    return out


def _citation(number: int | None, quote: str, problem: str | None) -> dict[str, Any]:
    """A coerced citation; "source_error" (only when set) says why the source is None."""
    citation: dict[str, Any] = {"source": number, "quote": quote}
    if problem is not None:
        citation["source_error"] = problem
    return citation


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
    "confidence": "high"|"medium"|"low"}. Never raises. A citation whose source was given but is
    not one positive whole number ("1; 7", 1.5, 0, true) has source None and a "source_error" key
    saying so, which validation reports.

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
