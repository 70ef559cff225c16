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

# A source marker not followed by what would make it a link ("(", "[") or a link definition (":").
_MARKER_OR_SPECIAL = re.compile(r"(\[\d+(?:\s*[,;]\s*\d+)*\](?![(\[:]))|([\\\[\]<>])")
_LINE_START_HEADING = re.compile(r"(?m)^([ \t]*)#")
# What ends or breaks a link destination or an autolink <URL>.
_URL_BREAKERS = {"(": "%28", ")": "%29", "<": "%3C", ">": "%3E", " ": "%20", "\\": "%5C", '"': "%22", "\n": "%0A"}


def md_text(text: Any) -> str:
    """``text`` with backslashes, brackets and angle brackets escaped, and no line starting a heading."""
    escaped = _MARKER_OR_SPECIAL.sub(lambda m: m.group(1) or "\\" + m.group(2), str(text if text is not None else ""))
    return _LINE_START_HEADING.sub(r"\1\\#", escaped)


def md_url(url: Any) -> str:
    """``url`` safe as a link destination ``(…)`` or an autolink ``<…>``: the characters that would end
    either percent-encoded, as a browser sends them anyway."""
    return "".join(_URL_BREAKERS.get(ch, ch) for ch in str(url or ""))
