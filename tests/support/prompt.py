"""Reading a prompt back the way a careful model would, to check its fences and sources from outside."""

from __future__ import annotations

import re
from dataclasses import dataclass

_OPEN = re.compile(r'^<source n="(\d+)" url="([^"\n]*)" section="([^"\n]*)">$')


@dataclass
class Parsed:
    preamble: str
    rules: str
    sources: list[tuple[int, str, str, str]]  # (n, url, section, text)
    question: str
    rules_count: int
    sources_open_count: int


def parse_prompt(prompt: str) -> Parsed:
    """Read a prompt back the way a careful model would: fences are whole lines."""
    lines = prompt.split("\n")
    rules_start = lines.index("<rules>")
    rules_end = lines.index("</rules>")
    sources_start = lines.index("<sources>")
    sources_end = len(lines) - 1 - lines[::-1].index("</sources>")
    assert rules_end < sources_start < sources_end
    sources: list[tuple[int, str, str, str]] = []
    i = sources_start + 1
    while i < sources_end:
        if lines[i] == "":
            i += 1
            continue
        m = _OPEN.match(lines[i])
        assert m, f"unexpected line between sources: {lines[i]!r}"
        n = int(m.group(1))
        close = f'</source n="{n}">'
        end = lines.index(close, i + 1)
        sources.append((n, m.group(2), m.group(3), "\n".join(lines[i + 1 : end])))
        i = end + 1
    tail = [line for line in lines[sources_end + 1 :] if line]
    assert len(tail) == 1 and tail[0].startswith("Question: "), tail
    return Parsed(
        preamble="\n".join(lines[:rules_start]).strip(),
        rules="\n".join(lines[rules_start + 1 : rules_end]),
        sources=sources,
        question=tail[0].removeprefix("Question: "),
        rules_count=sum(line == "<rules>" for line in lines),
        sources_open_count=sum(bool(_OPEN.match(line)) for line in lines),
    )
