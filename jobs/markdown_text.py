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

# A source marker not followed by what would make it a link ("(", "[") or a link definition (":"); else what
# CommonMark or GFM reads as markup inline: escapes, links, HTML, code spans, emphasis, strikethrough, table
# cells; "_" only at a word's edge (inside a word it never emphasises: snake_case_name stays as written); "&" only
# where it starts an entity (&amp;, &#65;). Each is ASCII punctuation, so its backslash escape shows it as written.
_MARKER_OR_SPECIAL = re.compile(r"(\[\d+(?:\s*[,;]\s*\d+)*\](?![(\[:]))|([\\\[\]<>`*~|])"
                                r"|((?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))|(&(?=#?[A-Za-z0-9]+;))")
# A bare URL, which GitHub and other renderers make a link of: a backslash inside it would end up in the link and
# its text (download\_page, a dead href), so what could still open markup there is percent-encoded instead, as a
# browser reads it the same; the rest of it is left as written.
_BARE_URL = re.compile(r"(?i)(?:https?://|www\.)[^\s<>\[\]]+")
_IN_URL = {"`": "%60", "*": "%2A", "~": "%7E", "\\": "%5C", "|": "%7C"}
_URL_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")
# What starts a block at the start of a line: an ATX heading (# to ###### then a space), a setext underline
# (=== or ---), a thematic break (---), a list item (- + 1. 1) then a space), a one-column table's delimiter
# row (:--). Its first character is escaped and the line's indent dropped (four spaces start a code block, where
# escapes show literally; a rendered paragraph drops the indent anyway). "> " and "* " are escaped inline.
_BLOCK_START = re.compile(r"#{1,6}(?:[ \t]|$)|=+[ \t]*$|[-+](?:[ \t]|$)|-[- \t]*$|:-")
_ORDERED_ITEM = re.compile(r"(\d{1,9})([.)])(?:[ \t]|$)")
# What ends or breaks a link destination or an autolink <URL>.
_URL_BREAKERS = {"(": "%28", ")": "%29", "<": "%3C", ">": "%3E", " ": "%20", "\\": "%5C", '"': "%22", "\n": "%0A"}


def md_text(text: Any, *, one_line: bool = False) -> str:
    """``text`` as it reads, rendered: its markup characters escaped, and no line starting a block. With
    ``one_line``, its line breaks (and runs of blanks) become one space, as a rendered paragraph shows them: a
    value written within a line of the report's own cannot end that line and start one that passes for another."""
    raw, parts, at = str(text if text is not None else ""), [], 0
    if one_line:
        raw = " ".join(raw.split())
    for url in _BARE_URL.finditer(raw):
        parts += [_inline(raw[at:url.start()]), _in_url(url.group())]
        at = url.end()
    parts.append(_inline(raw[at:]))
    return "\n".join(_unblock(line) for line in "".join(parts).split("\n"))


def _inline(text: str) -> str:
    return _MARKER_OR_SPECIAL.sub(lambda m: m.group(1) or "\\" + m.group(0), text)


def _in_url(url: str) -> str:
    return "".join(_IN_URL.get(ch, ch) for ch in _URL_ENTITY.sub("%26", url))


def _unblock(line: str) -> str:
    line = line.lstrip(" \t")
    if _BLOCK_START.match(line):
        return "\\" + line
    item = _ORDERED_ITEM.match(line)
    return f"{item.group(1)}\\{line[len(item.group(1)):]}" if item else line


def md_url(url: Any) -> str:
    """``url`` safe as a link destination ``(…)`` or an autolink ``<…>``: the characters that would end
    either percent-encoded, as a browser sends them anyway."""
    return "".join(_URL_BREAKERS.get(ch, ch) for ch in str(url or ""))
