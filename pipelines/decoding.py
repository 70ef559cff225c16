"""Bytes → text, as browsers decode pages, and the checks that a decoding went wrong.

Pure module (no lxml, no trafilatura): the spider imports ``whatwg_decode`` and ``garbled_share`` for
every response, and cleaning uses ``decode_html`` for pages handed over as bytes.
"""

from __future__ import annotations

import codecs
import re

_META_CHARSET = re.compile(rb"""<meta[^>]{0,400}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]{1,40})""", re.I)
_JUNK = re.compile("[\x00-\x08\x0e-\x1f\x7f\ufffd]")
_ABOVE_LATIN1 = re.compile("[^\x00-\xff]")

#: Above this share of garbled characters a decoded page is recorded as failed, not stored.
GARBLED_SHARE = 0.2


def looks_binary(text: str) -> bool:
    """Images, archives and PDFs served as text/html decode to control characters and
    U+FFFD; text with a tenth of them is not worth extracting (a mis-declared encoding
    on a real page stays far below that)."""
    sample = text[:65536]
    return bool(sample) and len(_JUNK.findall(sample)) > len(sample) // 10


def decode_html(data: bytes) -> str:
    """A page's bytes as text: byte-order mark, BOM-less UTF-16, then the ``<meta>`` charset, else UTF-8."""
    if data.startswith(codecs.BOM_UTF8):
        return data[3:].decode("utf-8", errors="replace")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace")
    sample = data[:4096]
    odd_zeros, even_zeros = sample[1::2].count(0), sample[0::2].count(0)
    if len(sample) >= 16 and max(odd_zeros, even_zeros) > len(sample) // 3 and min(odd_zeros, even_zeros) * 10 < len(sample):
        # ASCII-heavy UTF-16 without a BOM: every other byte is a zero high byte.
        return data.decode("utf-16-le" if odd_zeros > even_zeros else "utf-16-be", errors="replace")
    return data.decode(_meta_encoding(data), errors="replace")


def _meta_encoding(data: bytes) -> str:
    """The codec the page's ``<meta charset>`` names, read as browsers read it; UTF-8 without one."""
    match = _META_CHARSET.search(data[:8192])
    encoding = "utf-8"
    if match:
        declared = match.group(1).decode("ascii", errors="ignore").lower()
        try:
            encoding = codecs.lookup(declared).name
        except LookupError:
            encoding = "utf-8"
        # Browsers read these labels as windows-1252 (WHATWG encoding spec); pages rely on it.
        if encoding in {"latin-1", "iso8859-1", "ascii"}:
            encoding = "cp1252"
        # A page cannot truthfully declare UTF-16 in an ASCII-compatible <meta>.
        if encoding.startswith("utf-16") or encoding.startswith("utf-32"):
            encoding = "utf-8"
    return encoding


def whatwg_decode(body: bytes, encoding: str) -> str | None:
    """The body decoded as browsers do where Python's codecs differ, or None to use the usual decoding.

    WHATWG: the label ``utf-16`` means UTF-16LE unless a byte-order mark says otherwise; Python's
    ``utf-16`` codec reads BOM-less bytes big-endian, which turned every page into CJK-looking junk.
    """
    if encoding.lower().replace("_", "-") in ("utf-16", "utf16") and not body.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return body.decode("utf-16-le", errors="replace")
    return None


def garbled_share(text: str, sample: int = 65536) -> float:
    """Share of characters that only a wrong decoding produces: U+FFFD, NUL, and U+xx00 above U+00FF.

    Byte-swapped UTF-16 turns ASCII into U+xx00 characters (``<`` → U+3C00); real text in any script
    has them at about 1 in 256. Whitespace is not counted.
    """
    text = text[:sample]
    # Only characters above U+00FF can be garbled: the regex finds them in C, so the Python loop runs over
    # the few a real page has, not over every character (BENCHMARKS.md, "Figures behind code comments").
    # And NUL: UTF-16 without a BOM or charset read as a single-byte encoding is every other character.
    bad = text.count("\x00") + sum(1 for c in _ABOVE_LATIN1.findall(text) if c == "\ufffd" or ord(c) & 0xFF == 0)
    if not bad:  # most pages: no need to count the visible characters
        return 0.0
    visible = len("".join(text.split()))  # non-whitespace characters, as str.isspace counts them
    return bad / visible if visible else 0.0
