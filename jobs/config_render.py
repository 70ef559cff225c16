"""The job key ``crawl.render``: ``js`` (every page through a browser) or ``{js: [regex, ...]}`` (matching pages)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BeforeValidator

from jobs.config_messages import fail, got

_EXPECTED = "expected 'js' (render every page) or a mapping {js: [regex, ...]} (render the pages matching one)"


def _parse_render(value: Any) -> Any:
    """The normalised setting: None, ``"js"``, or a list of compiled-checked regexes (crawler/render.py reads it)."""
    if value is None or value == "js":
        return value
    if not isinstance(value, dict):
        fail(f"{_EXPECTED}, got {got(value)}")
    if list(value) != ["js"]:
        fail(f"{_EXPECTED}, got a mapping with {', '.join(map(str, value)) or 'no keys'}")
    patterns = value["js"]
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, list) or not patterns:
        fail(f"render.js: expected a list of one or more regexes, got {got(patterns)}", at=("js",))
    for index, pattern in enumerate(patterns):
        if not isinstance(pattern, str):
            fail(f"expected a regex (a string), got {got(pattern)}", at=("js", index))
        try:
            re.compile(pattern)
        except re.error as exc:
            fail(f"{pattern!r} is not a valid regex: {exc}", at=("js", index))
    return list(patterns)


# What the job file holds (the JSON schema editors read); the model keeps the normalised form.
_WRITTEN = Optional[Union[Literal["js"], dict[Literal["js"], Union[str, list[str]]]]]
RenderSetting = Annotated[str | list[str] | None, BeforeValidator(_parse_render, json_schema_input_type=_WRITTEN)]
