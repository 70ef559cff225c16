"""Text helpers every cleaning step shares: whitespace, heading text, code blocks, XML-safe characters.

Pure module: no lxml, no trafilatura, so the PDF reader and the chunker use it without either.
"""

from __future__ import annotations

import html as html_lib
import re

# Characters XML 1.0 cannot carry (lxml refuses them outright) plus lone surrogates,
# which cannot be UTF-8 encoded. Removing them up front is what makes NUL-laden or
# binary input safe for every later step.
XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
# Permalink glyphs that Sphinx, MkDocs, GitHub and friends append to headings.
GLYPHS = "¶§🔗⚓\ufe0f\ufe0e\u200b\u200c\u200d\u2060"
_TRAILING_GLYPHS = re.compile(rf"(?:\s*[{GLYPHS}]|\s+#)+\s*$")
_LEADING_GLYPHS = re.compile(r"^\s*(?:[¶🔗⚓\ufe0f\ufe0e\u200b\u200c\u200d\u2060]+|#+(?=\s))\s*")
# Markdown-style escapes some generators leak into heading text ("Step 1\.").
_BACKSLASH_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|>~])")


def collapse_ws(text: str) -> str:
    return " ".join(text.split())


def clean_heading(text: str) -> str:
    """Heading text as a reader sees it, without permalink glyphs or escapes.

    A trailing ``#`` is only removed when separated by whitespace so "C#" survives.
    """
    if "&" in text:
        # Double-escaped sources ("&amp;amp;") leave entities in the parsed text.
        text = html_lib.unescape(text)
    text = XML_INVALID.sub("", text)
    text = _BACKSLASH_ESCAPE.sub(r"\1", text)
    text = collapse_ws(text)
    text = _TRAILING_GLYPHS.sub("", text)
    text = _LEADING_GLYPHS.sub("", text)
    return text.strip()


def normalise_code(text: str) -> str:
    """Keep indentation (it is meaning in Python), drop only invisible noise."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    out: list[str] = []
    for line in lines:
        if not line and (not out or not out[-1]):
            continue  # leading blank lines and runs of blank lines
        out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)


def sanitise(text: str) -> str:
    return XML_INVALID.sub("", text)
