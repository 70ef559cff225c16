"""The spider's side of sitemaps: fetch a listed sitemap (or robots.txt's), and schedule its pages.

A sitemap is fetched like a page, so the SSRF guard, robots.txt and the host's delay apply to it, and
each of its entries becomes an ordinary request at depth 0 through ``UrlsSpider._schedule``: the same
guard, robots.txt, allow/deny, ``max_pages`` and "each URL once". The parsing and every bound live in
crawler/sitemaps.py. What a sitemap cannot give is recorded against the sitemap's URL (one record each):
a failure to read it, or the entries past ``crawl.sitemap_max_urls``. Entries on another host than the
site the sitemap belongs to are recorded each as skipped (sitemaps.org: a sitemap lists its own host).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import scrapy
from scrapy.http import Response
from twisted.python.failure import Failure

from crawler import sitemaps
from crawler.middlewares.internal_error import guarded
from crawler.urllist import normalise_url
from pipelines.items import FetchOutcome

log = logging.getLogger(__name__)

_ERROR_STATUSES = list(range(300, 600))


@dataclass
class _Tree:
    """What one listed sitemap (with the sitemaps it leads to) may still cost."""

    urls_left: int
    files_left: int = sitemaps.MAX_FILES
    fetched: set[str] = field(default_factory=set)


class SitemapReader:
    """Mixed into ``UrlsSpider``: uses its ``_schedule``, ``link_filter``, ``seen`` and ``_count``."""

    # Set by UrlsSpider.__init__.
    sitemap_max_urls: int
    stored_at: Mapping[str, datetime]

    def _sitemap_trees(self) -> dict[str, _Tree]:
        trees = getattr(self, "_trees", None)
        if trees is None:
            trees = self._trees = {}
        return trees

    def sitemap_request(self, url: str) -> Iterator[Any]:
        """The request for a listed ``sitemap: URL`` (a sitemap, an index, or robots.txt's sitemaps)."""
        tree = self._sitemap_trees().setdefault(url, _Tree(self.sitemap_max_urls))
        site = _host(url)
        if sitemaps.is_robots_txt(url):
            tree.fetched.add(url)
            yield self._request_sitemap(url, url, site, nesting=0, robots=True)
        else:
            yield from self._child_sitemap(url, url, site, nesting=0, named_by=None)

    def _request_sitemap(self, url: str, root: str, site: str, *, nesting: int, robots: bool = False) -> scrapy.Request:
        meta: dict[str, Any] = {"handle_httpstatus_list": _ERROR_STATUSES, "download_maxsize": sitemaps.MAX_BYTES,
                                "download_warnsize": sitemaps.MAX_BYTES}
        if robots:
            meta["dont_obey_robotstxt"] = True  # RFC 9309 §2.2.2: /robots.txt itself is always allowed
        self._count("count/sitemaps_requested")
        return scrapy.Request(
            url, callback=self.parse_robots_sitemaps if robots else self.parse_sitemap, errback=self.on_sitemap_error,
            cb_kwargs={"listed_url": url, "root": root, "site": site, "nesting": nesting},
            meta=meta, dont_filter=True,
        )

    def _child_sitemap(self, url: str, root: str, site: str, *, nesting: int, named_by: str | None) -> Iterator[Any]:
        tree = self._sitemap_trees()[root]
        if url in tree.fetched:
            return
        tree.fetched.add(url)
        if nesting > sitemaps.MAX_NESTING:
            self._count("failed/sitemap_nesting")
            yield FetchOutcome(url, "failed", f"sitemap nested more than {sitemaps.MAX_NESTING} sitemap indexes "
                                              f"deep (listed by {named_by}); not read")
            return
        if tree.files_left <= 0:
            self._count("failed/sitemap_files")
            yield FetchOutcome(url, "failed", f"sitemap not read: {sitemaps.MAX_FILES} sitemap files were read "
                                              f"for {root} already")
            return
        tree.files_left -= 1
        yield self._request_sitemap(url, root, site, nesting=nesting)

    def parse_robots_sitemaps(self, response: Response, listed_url: str, root: str, site: str, nesting: int) -> Iterator[Any]:
        if response.status >= 300:
            yield self._sitemap_failed(listed_url, f"robots.txt answered HTTP {response.status}", response.status)
            return
        named = sitemaps.robots_sitemaps(response.body, response.url)
        if not named:
            yield self._sitemap_failed(listed_url, "robots.txt names no sitemap (no Sitemap: lines)", response.status)
            return
        for url in named:
            normalised, reason = normalise_url(url)
            if normalised is None:
                yield self._sitemap_failed(url, f"named by {listed_url}: {reason}")
                continue
            # robots.txt may name sitemaps on other hosts (sitemaps.org "cross submits"); their entries
            # must still be pages of robots.txt's own host.
            yield from self._child_sitemap(normalised, root, site, nesting=nesting, named_by=listed_url)

    def parse_sitemap(self, response: Response, listed_url: str, root: str, site: str, nesting: int) -> Iterator[Any]:
        if response.status >= 300:
            yield self._sitemap_failed(listed_url, f"HTTP {response.status}", response.status)
            return
        tree = self._sitemap_trees()[root]
        try:
            body = sitemaps.sitemap_body(response.body)
            parsed = sitemaps.parse_sitemap(body, max_entries=tree.urls_left)
        except sitemaps.SitemapError as exc:
            hint = ""
            if nesting == 0 and not sitemaps.is_robots_txt(listed_url) and urlsplit(listed_url).path in ("", "/"):
                hint = f"; for the sitemaps robots.txt names, list sitemap: {listed_url.rstrip('/')}/robots.txt"
            yield self._sitemap_failed(listed_url, f"{exc}{hint}", response.status)
            return
        self._count("count/sitemaps")
        if parsed.kind == "sitemapindex":
            for entry in parsed.entries:
                url, reason = normalise_url(entry.url)
                if url is None:
                    yield self._sitemap_failed(entry.url, f"listed by sitemap {listed_url}: {reason}")
                elif _host(url) != site:
                    self._count("skipped/sitemap_other_host")
                    yield FetchOutcome(url, "skipped", f"sitemap on another host than {site}, listed by {listed_url}; "
                                                       "not read (a sitemap lists its own host's pages)")
                else:
                    yield from self._child_sitemap(url, root, site, nesting=nesting + 1, named_by=listed_url)
            return
        taken = 0
        for entry in parsed.entries:
            url, reason = normalise_url(entry.url)
            if url is None:
                self._count("skipped/invalid_url")
                yield FetchOutcome(entry.url, "skipped", f"listed by sitemap {listed_url}: {reason}")
                continue
            taken += 1
            if _host(url) != site:
                self._count("skipped/sitemap_other_host")
                yield FetchOutcome(url, "skipped", f"listed by sitemap {listed_url} on another host than {site}; "
                                                   "not fetched (a sitemap lists its own host's pages)")
                continue
            if not self.link_filter.matches(url):  # type: ignore[attr-defined]
                self._count("skipped/sitemap_filtered")
                continue
            fresh = url not in self.seen and sitemaps.unchanged_since(entry.lastmod, self.stored_at.get(url))  # type: ignore[attr-defined]
            if fresh:
                self._count("count/sitemap_lastmod")
            yield from self._schedule(url, depth=0, fresh=fresh)  # type: ignore[attr-defined]
        tree.urls_left -= taken
        self._count("count/sitemap_urls", taken)
        if parsed.truncated:
            yield FetchOutcome(listed_url, "skipped", f"sitemap lists more URLs than crawl.sitemap_max_urls "
                                                      f"({self.sitemap_max_urls} for {root}); the rest were not read",
                               response.status)

    def on_sitemap_error(self, failure: Failure) -> Iterator[Any]:
        request = failure.request  # type: ignore[attr-defined]
        url = request.cb_kwargs.get("listed_url", request.url)
        crawler = getattr(self, "crawler", None)
        return guarded(url, self._on_sitemap_error(failure, url), crawler.stats if crawler is not None else None)

    def _on_sitemap_error(self, failure: Failure, url: str) -> Iterator[Any]:
        from crawler.spiders.urls import describe_failure

        outcome, reason = describe_failure(failure, self.settings.getint("REDIRECT_MAX_TIMES"))  # type: ignore[attr-defined]
        self._count(f"{outcome}/sitemap")
        log.info("%s sitemap %s: %s", outcome.capitalize(), url, reason)
        yield FetchOutcome(url, outcome, f"sitemap: {reason}")

    def _sitemap_failed(self, url: str, reason: str, status: int | None = None) -> FetchOutcome:
        self._count("failed/sitemap")
        log.info("Failed sitemap %s: %s", url, reason)
        return FetchOutcome(url, "failed", f"sitemap: {reason}", status)


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()
