"""Sitemaps as a URL source: reading one (XML or gzip, bounded), its entries, and what they say.

A URL list names a sitemap as ``sitemap: URL`` (crawler/urllist.py); ``sitemap: https://host/robots.txt``
means the sitemaps that host's robots.txt names in its ``Sitemap:`` lines. The spider fetches them like
pages (the SSRF guard, robots.txt and the host's delay apply: crawler/spiders/sitemap_reader.py) and hands
the bodies to the pure functions here, which parse with Scrapy's own ``scrapy.utils.sitemap`` and bound
everything a hostile sitemap could inflate: bytes (compressed and after gunzip), entries, nesting.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

from scrapy.utils.gz import gunzip
from scrapy.utils.sitemap import Sitemap, sitemap_urls_from_robots

# sitemaps.org's own limits for one sitemap file: 50 MB uncompressed and 50,000 URLs. The bytes bound the
# download and the gunzipped body alike (a gzip bomb stops there).
MAX_BYTES = 50 * 1024 * 1024
# A sitemap index may list sitemap indexes (the protocol says it should not); two levels of indexes are
# read, a third is refused: real sites need no more, and a loop of indexes stops here.
MAX_NESTING = 2
# Sitemap files read from one listed sitemap (an index may name 50,000): each costs a request.
MAX_FILES = 500

_GZIP_MAGIC = b"\x1f\x8b"
_YEAR = re.compile(r"^\d{4}$")
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


class SitemapError(ValueError):
    """A sitemap that cannot be read: the message says why, in words for the fetch log."""


@dataclass(frozen=True)
class Entry:
    url: str  # as written in <loc>, stripped
    lastmod: str | None = None


@dataclass(frozen=True)
class ParsedSitemap:
    kind: str  # "urlset" | "sitemapindex"
    entries: list[Entry]
    truncated: bool  # more entries than asked for: the rest were not read


def is_robots_txt(url: str) -> bool:
    """``sitemap: https://host/robots.txt`` names the sitemaps of robots.txt's ``Sitemap:`` lines."""
    return urlsplit(url).path == "/robots.txt"


def sitemap_body(body: bytes, *, max_bytes: int = MAX_BYTES) -> bytes:
    """The XML of a sitemap response: gunzipped when it is gzip (``.xml.gz``), within ``max_bytes`` either way.

    Content-Encoding is already undone by Scrapy's HttpCompressionMiddleware; this is the file's own gzip.
    """
    if len(body) > max_bytes:
        raise SitemapError(f"larger than {max_bytes} bytes")
    if not body.startswith(_GZIP_MAGIC):
        return body
    try:
        return gunzip(body, max_size=max_bytes)
    except ValueError:  # scrapy's decompression limit (a ValueError subclass, private name)
        raise SitemapError(f"larger than {max_bytes} bytes after decompression (a gzip bomb?); not read") from None
    except (OSError, EOFError, struct.error) as exc:
        raise SitemapError(f"not valid gzip ({exc})") from None


def parse_sitemap(xml: bytes, *, max_entries: int) -> ParsedSitemap:
    """The ``<loc>`` entries of a ``<urlset>`` or ``<sitemapindex>``, in order, at most ``max_entries``.

    Scrapy's parser reads the XML incrementally, never resolves entities (no XXE, no billion laughs) and
    recovers from small errors; a document whose root is anything else is refused with its root's name.
    """
    try:
        sitemap = Sitemap(xml)
    except Exception as exc:  # noqa: BLE001 - lxml's errors on bytes that are not XML at all
        raise SitemapError(f"not a sitemap: not XML ({type(exc).__name__})") from None
    if sitemap.type not in ("urlset", "sitemapindex"):
        root = sitemap.type or "no root element"
        raise SitemapError(f"not a sitemap: the document is <{root}>, expected <urlset> or <sitemapindex>")
    entries: list[Entry] = []
    truncated = False
    try:
        for item in sitemap:
            loc = (item.get("loc") or "").strip()
            if not loc:
                continue
            if len(entries) >= max_entries:
                truncated = True
                break
            lastmod = (item.get("lastmod") or "").strip() or None
            entries.append(Entry(loc, lastmod))
    except Exception as exc:  # noqa: BLE001 - lxml gave up halfway: keep what was read before
        if not entries:
            raise SitemapError(f"not a sitemap: unreadable XML ({type(exc).__name__})") from None
        truncated = True
    return ParsedSitemap(sitemap.type, entries, truncated)


def robots_sitemaps(robots_txt: bytes, base_url: str) -> list[str]:
    """The URLs of robots.txt's ``Sitemap:`` lines, each once, in order (Scrapy's reader of those lines)."""
    return list(dict.fromkeys(sitemap_urls_from_robots(robots_txt, base_url=base_url)))


def lastmod_end(value: str | None) -> datetime | None:
    """The latest moment a ``<lastmod>`` may mean, as naive UTC; None when it is not a W3C date.

    A date alone ("2024-05-01") says the page changed at some time that day, so it counts as the end of
    that day: a page stored the same morning is not taken as current. A time without a zone is UTC.
    """
    if not value:
        return None
    text = value.strip()
    try:
        if _YEAR.match(text):
            return datetime(int(text) + 1, 1, 1)
        month = _MONTH.match(text)
        if month:
            year, number = int(month.group(1)), int(month.group(2))
            return datetime(year + number // 12, number % 12 + 1, 1)
        if "T" not in text and len(text) == 10:
            return datetime.fromisoformat(text) + timedelta(days=1)
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return moment


def unchanged_since(lastmod: str | None, stored_at: datetime | None) -> bool:
    """Whether a sitemap's ``<lastmod>`` says the page has not changed since its copy was stored or confirmed."""
    end = lastmod_end(lastmod)
    return end is not None and stored_at is not None and end <= stored_at
