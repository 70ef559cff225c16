"""Job-file problems as one line each: where (file:line, key path), what was expected, what to do.

webqa runs from cron, so this line is often the only thing a user sees in a mail. Kept apart from the
models (jobs/config.py) and the YAML reader (jobs/config_yaml.py), which both raise through it, so
that the wording rules live in one place: how a value is shown (short, never a secret), the closest
known word, and the translation of pydantic's validation errors back to the line they came from.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Iterable
from datetime import date, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from crawler.urllist import excerpt
from jobs.errors import ConfigError

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DURATION_EXAMPLES = "'24h', '30m', '7d', '90s' or '1h30m'"


class JobFileError(ConfigError):
    """A ConfigError that also keeps where it happened, for callers that want more than the line.

    ``str(err)`` is the complete one-line message; the attributes repeat its parts.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        column: int | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(message)
        self.file = file
        self.line = line
        self.column = column
        self.key = key


def job_error(
    source: str,
    message: str,
    *,
    line: int | None = None,
    column: int | None = None,
    key: str | None = None,
) -> JobFileError:
    """Build the one line: ``source[:line[:column]]: [key: ]message``."""
    where = source
    if line is not None:
        where += f":{line}"
        if column is not None:
            where += f":{column}"
    text = f"{where}: {key}: {message}" if key else f"{where}: {message}"
    return JobFileError(text, file=source, line=line, column=column, key=key)


def fail(message: str, *, at: tuple[str | int, ...] = (), also: tuple[str | int, ...] | None = None) -> NoReturn:
    """Raise a validation error whose text is ours, not pydantic's.

    ``at`` extends the error's location below the validated field (a dict key, a list index), so
    that the reported line is the offending entry rather than its parent; ``also`` names a second
    location whose line is mentioned too (duplicates). Both are relative to the field's location.
    """
    raise PydanticCustomError("webqa", "{message}", {"message": message, "at": at, "also": also})


def got(value: Any) -> str:
    """Show a value the way it was (probably) written in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping" if value else "an empty mapping"
    if isinstance(value, list):
        return "a list" if value else "an empty list"
    if isinstance(value, str):
        # Errors go to cron mail and logs: a short printable prefix, never a password hash or a token
        # (a job file or urls_file pointed at /etc/shadow must not be echoed).
        return excerpt(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, bytes):
        return "binary data"
    return str(value)


def did_you_mean(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The closest choice, compared without case ("LLM" → "llm"), or None."""
    by_lower = {choice.lower(): choice for choice in choices}
    match = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=cutoff)
    return by_lower[match[0]] if match else None


def format_path(path: Iterable[str | int]) -> str:
    """``("crawl", "hosts", "docs.example.org", "delay")`` → ``crawl.hosts['docs.example.org'].delay``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _IDENT_RE.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{part!r}]"
    return text


# ---------------------------------------------------------------------------------------------
# Validation errors → one line


def _unwrap(tp: Any, meta: list[Any]) -> tuple[Any, list[Any]]:
    """Strip Annotated[...] (collecting constraints) and Optional[...] from a type."""
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            args = get_args(tp)
            tp = args[0]
            for extra in args[1:]:
                meta = meta + (list(extra.metadata) if isinstance(extra, FieldInfo) else [extra])
        elif origin is Union or origin is types.UnionType:
            options = [arg for arg in get_args(tp) if arg is not type(None)]
            if len(options) != 1:
                return tp, meta
            tp = options[0]
        else:
            return tp, meta


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _type_at(root: type[BaseModel], path: tuple[str | int, ...]) -> tuple[Any, list[Any]] | None:
    """The declared type (and constraints) of the value at ``path`` below the ``root`` model, if known."""
    tp: Any = root
    meta: list[Any] = []
    for part in path:
        tp, meta = _unwrap(tp, meta)
        if _is_model(tp):
            field = tp.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return None
            tp, meta = field.annotation, list(field.metadata)
        elif get_origin(tp) is list and isinstance(part, int):
            tp, meta = get_args(tp)[0], []
        elif get_origin(tp) is dict:
            tp, meta = get_args(tp)[1], []
        else:
            return None
    return _unwrap(tp, meta)


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _describe(tp: Any, meta: list[Any]) -> str | None:
    """What a value of this type looks like, in words: 'a number ≥ 0', "one of 'a', 'b'"."""
    bounds = ""
    for item in meta:
        if isinstance(item, annotated_types.Ge):
            bounds += f" ≥ {_number(item.ge)}"
        elif isinstance(item, annotated_types.Gt):
            bounds += f" > {_number(item.gt)}"
        elif isinstance(item, annotated_types.Le):
            bounds += f" ≤ {_number(item.le)}"
        elif isinstance(item, annotated_types.Lt):
            bounds += f" < {_number(item.lt)}"
    if tp is bool:
        return "true or false"
    if tp is int:
        return "a whole number" + bounds
    if tp is float:
        return "a number" + bounds
    if tp is str:
        return "a string"
    if tp is timedelta:
        return f"a duration like {DURATION_EXAMPLES}"
    if tp is Path:
        return "a path"
    if _is_model(tp) and getattr(tp, "described_as", None):
        return str(tp.described_as)  # a model that may also be written otherwise (a question as a string)
    if get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(choice) for choice in get_args(tp))
    if get_origin(tp) is list:
        return "a list"
    if get_origin(tp) is dict or _is_model(tp):
        return "a mapping (key: value lines)"
    return None


_MISSING_HINTS = {
    "name": "add e.g. 'name: my-job' at the top level",
    "questions": "add a 'questions:' list with at least one question",
    "questions[].question": "add 'question: <what to ask>' to this item",
    "questions[].id": "add 'id: <short-id>'",
}
_TOO_SHORT_HINTS = {
    "questions": "add at least one question, e.g. '- What changed in 2.0?'",
    "output.formats": "list at least one of jsonl, markdown, html, csv",
}
_TYPE_FAMILY = ("_type", "_parsing", "int_from_float", "greater_than", "less_than", "finite_number")


def _data_path(raw: Any, loc: tuple[str | int, ...], keep_last: bool) -> tuple[str | int, ...]:
    """Map pydantic's ``loc`` onto the data actually written.

    pydantic adds entries that are not in the file (union member names, '[key]', fields a
    before-validator added); walking the raw data keeps only real keys/indexes. ``keep_last``
    keeps a final key that is absent on purpose (a missing required key).
    """
    node = raw
    path: list[str | int] = []
    for position, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            path.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path.append(part)
            node = node[part]
        elif keep_last and position == len(loc) - 1 and isinstance(part, str):
            path.append(part)
    return tuple(path)


def _value_at(raw: Any, path: tuple[str | int, ...]) -> Any:
    node = raw
    for part in path:
        node = node[part]
    return node


def _line_at(lines: dict[tuple[str | int, ...], int], path: tuple[str | int, ...]) -> int | None:
    """Line of ``path`` or, when it was not written (a missing key), of its nearest parent."""
    for end in range(len(path), -1, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return None


def _pattern(path: tuple[str | int, ...]) -> str:
    """``("questions", 3, "question")`` → ``questions[].question`` for the hint tables."""
    return re.sub(r"\[\d+\]", "[]", format_path(path))


def _unknown_key_message(root: type[BaseModel], path: tuple[str | int, ...]) -> str:
    key = path[-1]
    parent = _type_at(root, path[:-1])
    fields: list[str] = list(parent[0].model_fields) if parent and _is_model(parent[0]) else []
    # A right key in the wrong place ("delay:" at the top level instead of under "crawl:") is
    # checked first: a fuzzy match in the wrong section ("delay" ~ "model") would mislead.
    if len(path) == 1:
        for section, field in root.model_fields.items():
            inner = _unwrap(field.annotation, [])[0]
            if _is_model(inner) and key in inner.model_fields:
                return f"unknown key at the top level; {key!r} belongs under '{section}:'"
    close = did_you_mean(str(key), fields) if fields else None
    if close:
        return f"unknown key; did you mean {close!r}?"
    return "unknown key; allowed keys: " + ", ".join(fields) if fields else "unknown key"


def _explain(root: type[BaseModel], error: dict[str, Any], path: tuple[str | int, ...], value: Any) -> str:
    kind = error["type"]
    pattern = _pattern(path)
    if kind == "missing":
        return "required key is missing; " + _MISSING_HINTS.get(pattern, f"add '{path[-1]}:'")
    if kind == "extra_forbidden":
        return _unknown_key_message(root, path)
    declared = _type_at(root, path)
    expected = _describe(*declared) if declared else None
    if kind in ("too_short", "string_too_short"):
        what = "a non-empty list" if kind == "too_short" else "a non-empty string"
        hint = _TOO_SHORT_HINTS.get(pattern)
        return f"expected {what}, got {got(value)}" + (f"; {hint}" if hint else "")
    if kind == "literal_error" and expected:
        message = f"expected {expected}, got {got(value)}"
        choices = [str(c) for c in get_args(declared[0])] if declared else []
        close = did_you_mean(value, choices) if isinstance(value, str) else None
        return message + (f"; did you mean {close!r}?" if close else "")
    if expected and (kind.endswith(_TYPE_FAMILY) or kind.startswith(_TYPE_FAMILY) or kind in ("model_attributes_type",)):
        return f"expected {expected}, got {got(value)}" + _quoting_hint(declared[0] if declared else None, value)
    message = error["msg"]
    return message[:1].lower() + message[1:]


def _quoting_hint(expected: Any, value: Any) -> str:
    """Most type errors in YAML are quoting mistakes in one direction or the other."""
    if value is None:
        return "; give a value"
    if expected is str and isinstance(value, bool):
        return "; YAML reads yes/no/on/off/true/false as a boolean: put the text in quotes"
    if expected is str and isinstance(value, (int, float, date)):
        return "; put the value in quotes"
    if expected in (int, float) and isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return ""
        return "; remove the quotes"
    if expected is int and isinstance(value, float):
        return "; use a whole number"
    if expected is bool and isinstance(value, str) and value.lower() in ("true", "false", "yes", "no"):
        return "; remove the quotes"
    if expected is bool and isinstance(value, int):
        return "; write true or false"
    if get_origin(expected) is list and isinstance(value, (str, int, float)):
        return "; write it as a list: [item, ...] or '- item' lines"
    return ""


def _without_misspelt_required(root: type[BaseModel], errors: list[Any], raw: Any) -> list[Any]:
    """Drop "required key is missing" when an unknown key beside it is that key misspelt.

    ``questons:`` raises both errors; the missing one sorts first (it has no line of its own) but
    the fix is the unknown key's "did you mean 'questions'?".
    """
    unknown = [_data_path(raw, tuple(e["loc"]), keep_last=False) for e in errors if e["type"] == "extra_forbidden"]

    def misspelt(error: Any) -> bool:
        if error["type"] != "missing":
            return False
        path = _data_path(raw, tuple(error["loc"]), keep_last=True)
        hint = f"did you mean {path[-1]!r}?"
        return any(u[:-1] == path[:-1] and hint in _unknown_key_message(root, u) for u in unknown if u)

    return [e for e in errors if not misspelt(e)]


def validation_error(
    exc: ValidationError, raw: Any, lines: dict[tuple[str | int, ...], int], source: str, root: type[BaseModel]
) -> JobFileError:
    """The earliest problem in the file, as one line (plus how many more there are); ``root`` is the job model."""
    errors = _without_misspelt_required(root, exc.errors(include_url=False), raw)
    found: list[tuple[int, int, str, str]] = []
    for order, error in enumerate(errors):
        loc = tuple(error["loc"])
        context = error.get("ctx") or {}
        if error["type"] == "webqa":
            path = _data_path(raw, loc + tuple(context.get("at") or ()), keep_last=False)
            message = str(context.get("message", error["msg"]))
            also = context.get("also")
            if also is not None:
                other = _line_at(lines, _data_path(raw, loc + tuple(also), keep_last=False))
                if other is not None:
                    message = message.replace(";", f" (also on line {other});", 1)
        else:
            path = _data_path(raw, loc, keep_last=error["type"] == "missing")
            try:
                value = _value_at(raw, path) if error["type"] != "missing" else None
            except (KeyError, IndexError, TypeError):
                value = error.get("input")
            message = _explain(root, error, path, value)
        line = _line_at(lines, path) or 0
        found.append((line, order, format_path(path), message))
    line, _, key, message = min(found)
    if len(found) > 1:
        more = len(found) - 1
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return job_error(source, message, line=line or None, key=key or None)
