"""The canonical URL a response names: ``<link rel="canonical" href>`` or ``Link: <…>; rel="canonical"``.

Only a URL of the response's own host counts (a canonical on another host is ignored, as search engines
treat cross-host canonicals as hints at best), and only one other than the page's own URL. What the store
makes of it is pipelines/duplicates.py's decision.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urljoin, urlsplit

from scrapy.http import Response, TextResponse
from scrapy.utils.response import get_base_url

from crawler.urllist import normalise_url

# One link of a Link header: <target> followed by its parameters.
_LINK = re.compile(r"<([^>]*)>([^<]*)")
_REL = re.compile(r";\s*rel\s*=\s*(?:\"([^\"]*)\"|([^\s;,]+))", re.IGNORECASE)


def link_header_canonical(values: Iterable[str]) -> str | None:
    """The target of the first ``rel="canonical"`` link of ``Link`` header values (RFC 8288), or None."""
    for value in values:
        for match in _LINK.finditer(value):
            for rel in _REL.finditer(match.group(2)):
                if "canonical" in (rel.group(1) or rel.group(2) or "").lower().split():
                    return match.group(1).strip()
    return None


def declared_canonical(response: Response, page_url: str) -> str | None:
    """The normalised same-host canonical URL ``response`` names, when it is not the page's own; else None."""
    headers = [value.decode("latin-1") for value in response.headers.getlist("Link")]
    href, base = link_header_canonical(headers), response.url
    if href is None and isinstance(response, TextResponse):
        for element in response.xpath("//link[@rel and @href]"):
            if "canonical" in element.attrib.get("rel", "").lower().split():
                href, base = element.attrib["href"].strip(), get_base_url(response)
                break
    if not href:
        return None
    try:
        url, _reason = normalise_url(urljoin(base, href))
    except ValueError:
        return None
    own = {page_url, normalise_url(response.url)[0]}
    if url is None or url in own or _host(url) != _host(response.url):
        return None
    return url


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()
