"""Robots directives of a page: ``<meta name="robots">`` and the ``X-Robots-Tag`` header.

Pure functions, shared by two layers that each make one decision: the spider does not follow the links of
a ``nofollow`` page (crawler/spiders/urls.py), and the extraction pipeline does not store a ``noindex`` page
for answering (pipelines/extraction.py), recording it as skipped. Only ``noindex``, ``nofollow`` and
``none`` (both) matter to webqa; ``index``, ``follow`` and ``all`` never undo a stricter directive, and
the others (``noarchive``, ``nosnippet``, ``unavailable_after`` …) are about search engines' displays.

A directive applies to webqa when it is unscoped (``<meta name="robots">``, ``X-Robots-Tag: noindex``) or
names webqa's product token (``<meta name="webqa">``, ``X-Robots-Tag: webqa: noindex``); one naming another
crawler (``googlebot: noindex``) does not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# Directives a header may carry that contain a colon themselves: not a user agent.
_VALUED = frozenset({"unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"})
_SCOPE = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*:\s*(.*)$", re.DOTALL)
# Where a noindex came from, as the skip reason says it; a reason starting with this drops a stored copy.
NOINDEX = "noindex"


@dataclass(frozen=True)
class Directives:
    """Which directives apply, each with where it was found (None: not given)."""

    noindex: str | None = None
    nofollow: str | None = None


def _words(content: str) -> list[str]:
    return [word.strip().lower() for word in content.split(",") if word.strip()]


def _apply(found: dict[str, str], words: Iterable[str], source: str) -> None:
    for word in words:
        for directive in (("noindex", "nofollow") if word == "none" else (word,)):
            if directive in ("noindex", "nofollow"):
                found.setdefault(directive, source)


def header_directives(values: Iterable[str], token: str) -> list[str]:
    """The directives of ``X-Robots-Tag`` header values that apply to the agent ``token``.

    A value may scope what follows to one crawler (``googlebot: noindex, nofollow``), and a value may switch
    scope again after a comma (``googlebot: noarchive, otherbot: noindex``), as Google documents.
    """
    token = token.lower()
    applies: list[str] = []
    for value in values:
        scope: str | None = None
        for part in value.split(","):
            match = _SCOPE.match(part)
            if match and match.group(1).lower() not in _VALUED:
                scope = match.group(1).lower()
                part = match.group(2)
            if scope is None or scope == token:
                applies.extend(_words(part))
    return applies


def page_directives(meta: Iterable[tuple[str, str]], headers: Iterable[str], token: str) -> Directives:
    """The directives of a page: its ``<meta>`` tags as (name, content) pairs and its X-Robots-Tag values."""
    found: dict[str, str] = {}
    _apply(found, header_directives(headers, token), "X-Robots-Tag")
    names = {"robots", token.lower()}
    for name, content in meta:
        if name.strip().lower() in names:
            _apply(found, _words(content), f'<meta name="{name.strip().lower()}">')
    return Directives(found.get("noindex"), found.get("nofollow"))


def noindex_reason(source: str) -> str:
    """The skip reason of a page not stored because of a ``noindex`` found at ``source``."""
    return (f"{NOINDEX} ({source}): the page asks not to be indexed; not stored for answering "
            "(crawl.obey_noindex: false stores pages you own)")
