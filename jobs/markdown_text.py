"""Text from outside (pages, model replies, URLs) written into Markdown as text, never as markup.

report.md and `webqa diff` are read rendered (a forge, an editor's preview), so a page whose text or
heading holds ``[renew here](https://evil.example)``, ``![](https://evil.example/pixel)`` or ``<img …>``
would otherwise turn a verified quote into a link elsewhere, or redirect the link of its own source.
The source markers ``[1]`` and ``[2, 3]`` stay as they are: alone they are no markup.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["md_text", "md_url"]

# A source marker not followed by what would make it a link ("(", "[") or a link definition (":"); else any
# character CommonMark or GFM reads as markup inline: escapes, links, HTML, code spans, emphasis, strikethrough,
# entities (&amp;), table cells. Each is ASCII punctuation, so its backslash escape shows it as written.
_MARKER_OR_SPECIAL = re.compile(r"(\[\d+(?:\s*[,;]\s*\d+)*\](?![(\[:]))|([\\\[\]<>`*_~&|])")
# What starts a block at the start of a line: a heading (# or a setext === / --- underline), a list item
# (- + or 1. 1)), a thematic break (---). Its first character is escaped, and the line's indent dropped (four
# spaces start a code block, where escapes show literally; a rendered paragraph drops the indent anyway).
_LINE_START_BLOCK = re.compile(r"(?m)^[ \t]*(?:([#=+-])|(\d{1,9})([.)]))?")
# What ends or breaks a link destination or an autolink <URL>.
_URL_BREAKERS = {"(": "%28", ")": "%29", "<": "%3C", ">": "%3E", " ": "%20", "\\": "%5C", '"': "%22", "\n": "%0A"}


def md_text(text: Any) -> str:
    """``text`` as it reads, rendered: its markup characters escaped, and no line starting a block."""
    escaped = _MARKER_OR_SPECIAL.sub(lambda m: m.group(1) or "\\" + m.group(2), str(text if text is not None else ""))
    return _LINE_START_BLOCK.sub(_escape_block, escaped)


def _escape_block(match: re.Match[str]) -> str:
    if match.group(1) is not None:
        return f"\\{match.group(1)}"
    return f"{match.group(2)}\\{match.group(3)}" if match.group(2) is not None else ""


def md_url(url: Any) -> str:
    """``url`` safe as a link destination ``(…)`` or an autolink ``<…>``: the characters that would end
    either percent-encoded, as a browser sends them anyway."""
    return "".join(_URL_BREAKERS.get(ch, ch) for ch in str(url or ""))
