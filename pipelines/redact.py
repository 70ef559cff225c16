"""Credentials out of everything webqa shows or stores, and text from outside made inert for a terminal.

Pure helpers every layer uses at its edges (messages, log lines, reports, database columns):

* :func:`redact_url` / :func:`redact_text`: the userinfo of a URL (``redis://:PASSWORD@host``,
  ``http://user:token@proxy``) becomes ``***``; the rest of the URL stays, so the message still says
  which server. Cron mails stderr and log files travel: a password must never be in them.
  :func:`url_credentials` reads that userinfo where it is meant to be sent (Basic auth to a webhook or an
  Ollama proxy), decoded the one way for both.
* :func:`inert`: control characters (ANSI/OSC escape sequences, carriage returns, bidi overrides) of
  text that came from pages, LLM replies or URLs, escaped as ``\\x1b`` so a terminal shows them instead
  of obeying them (clearing the screen, retitling the window, hiding a hyperlink).
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

__all__ = ["REDACTED", "inert", "redact_text", "redact_unparsed", "redact_url", "split_login", "url_credentials", "url_error"]

REDACTED = "***"

# scheme://userinfo@ anywhere in a text; userinfo runs to the last "@" before the first "/", "?", "#" or space, as
# urlsplit reads an authority (so an unencoded "@" in a password is hidden whole). Or, without
# a scheme, user:password@ where a URL's authority was quoted alone ("invalid hostname: user:pw@host").
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,30}://)([^\s/?#\"'<>]*)@"
                       r"|(?<![\w.:/@-])()([^\s/?#@:\"'<>]+:[^\s/?#@\"'<>]+)@(?=[\w\[])")


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
# split_login's readings: a bare host (no login, no port); what urlsplit's host and port may hold ("[::1" too);
# a host and port where a login may end, then the end, a path, a query or a fragment (it stops at the next "@",
# so trying every "@" of a value stays linear).
_BARE_HOST = re.compile(r"[\w.%-]+")
_HOST_CHARS = re.compile(r"[\w.%:\[\]-]+")
_HOST_THEN_END = re.compile(r"(?:\[[0-9A-Za-z:.%]+\]|[\w.%-]+)(?::\d*)?(?=$|[/?#])")


def redact_url(url: str) -> str:
    """``url`` with its userinfo (user and password) replaced by ``***``; other URLs unchanged."""
    return _USERINFO.sub(_hide, url)


def redact_unparsed(value: str) -> str:
    """A value that failed to parse as a URL, for its error message: its login hidden as split_login reads it, since
    a password with an unencoded "#", "/" or "?" is where the parse failed and redact_url's reading would show it."""
    split = split_login(value)
    if split is None:
        return redact_url(value)
    return f"{split[0]}{REDACTED}@{split[1]}"


def split_login(value: str) -> tuple[str, str] | None:
    """(``scheme://`` or "", what follows the login) of a URL-like value with a login, read without parsing it
    (the login may hold what breaks a parser); None without one. For messages: where it cannot tell, it hides.

    An authority (to the first "/", "?" or "#") that is a bare host has no login: a later "@" is a path's or a
    query's (``medium.com/@alice``, ``?to=a@b&token=…``). A ``user:password@host`` authority with no "@" after it
    is read as urlsplit reads it. Otherwise a password's unencoded "#", "/", "?" or "@" may have ended the
    authority early: the login ends at the last "@" that a host follows, and without one everything is hidden."""
    scheme, sep, body = value.partition("://")
    if not sep or not _SCHEME.fullmatch(scheme):  # "u:p#w@host/x://y" has no scheme: its "://" is later
        scheme, sep, body = "", "", value
    prefix = f"{scheme}{sep}"
    if "@" not in body:
        return None
    authority = re.split(r"[/?#]", body, maxsplit=1)[0]
    if _BARE_HOST.fullmatch(authority):
        return None
    login, at, host = authority.rpartition("@")
    if at and _HOST_CHARS.fullmatch(host) and "@" not in body[len(authority):]:
        return prefix, body[len(login) + 1:]
    position = len(body)
    while (position := body.rfind("@", 0, position)) >= 0:
        if _HOST_THEN_END.match(body, position + 1):
            return prefix, body[position + 1:]
    return prefix, ""


def url_error(value: str, exc: ValueError) -> str:
    """urlsplit's complaint, unless the value has a login: then it may quote the password (a '#' in it ends the
    authority early, and the rest is read as the port), so the value is parsed again without its login: its error
    if it still fails (a bad port), else the likely cause."""
    split = split_login(value)
    if split is None:
        return str(exc)
    try:
        urlsplit(f"{split[0] or 'http://'}{split[1]}").port
    except ValueError as without_login:
        return str(without_login)
    return "a '#', '/', '?' or '@' in its user:password must be percent-encoded (%23, %2F, %3F, %40)"


def url_credentials(url: str) -> tuple[str, str] | None:
    """(user, password) of ``url``'s ``user:password@``, percent-decoded (RFC 3986 userinfo is percent-encoded, so
    a password holding "@" is written ``%40``), to send as Basic auth as curl does; None without one. Raises
    ValueError as ``urlsplit`` does."""
    parts = urlsplit(url)
    if parts.username is None:
        return None
    return unquote(parts.username), unquote(parts.password or "")


def redact_text(text: str) -> str:
    """Every ``scheme://user:password@`` in ``text`` with its userinfo replaced by ``***``."""
    if "@" not in text:  # the common case: nothing to look for
        return text
    return _USERINFO.sub(_hide, text)


def _hide(match: re.Match[str]) -> str:
    if match.group(1) is not None:
        return f"{match.group(1)}{REDACTED}@" if match.group(2) else match.group(0)
    return f"{REDACTED}@"


# C0 and C1 controls and DEL, except tab and newline; plus the invisible format characters that reorder
# or hide text (bidi overrides and isolates, zero-width joiners are harmless but these are not).
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROLS = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
_CONTROLS_ONE_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")


def inert(text: str, *, one_line: bool = False) -> str:
    """``text`` with control characters escaped (``\\x1b``, ``\\u202e``): shown, never obeyed.

    Tabs and newlines are kept unless ``one_line`` (then they are escaped too, so a value cannot
    start a line of its own in a log or a summary). Printable text, every script included, is untouched.
    """
    pattern = _CONTROLS_ONE_LINE if one_line else _CONTROLS
    if not pattern.search(text):
        return text
    return pattern.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"
