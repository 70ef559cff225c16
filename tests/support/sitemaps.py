"""Sitemap documents for the tests: a <urlset> and a <sitemapindex>."""

from __future__ import annotations


def urlset(*entries: str | tuple[str, str]) -> str:
    """A <urlset> of URLs, each optionally with its <lastmod>."""
    items = []
    for entry in entries:
        url, lastmod = (entry, None) if isinstance(entry, str) else entry
        items.append(f"<url><loc>{url}</loc>" + (f"<lastmod>{lastmod}</lastmod>" if lastmod else "") + "</url>")
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            + "".join(items) + "</urlset>")


def index(*urls: str) -> str:
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            + "".join(f"<sitemap><loc>{u}</loc></sitemap>" for u in urls) + "</sitemapindex>")
