"""What a crawl reads before Scrapy starts: the listed URLs, and from the store its validators and fetch times.

The Scrapy components never see DuckDB: ``plan_crawl`` hands them plain values (``CrawlPlan``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from crawler.options import CrawlOptions
from crawler.urllist import ListedUrl, UrlProblem, collect_urls, require_url_file
from pipelines.store import Store, utcnow


def gather_urls(options: CrawlOptions) -> tuple[list[ListedUrl], list[UrlProblem]]:
    entries: list[tuple[str, str]] = list(options.url_entries)
    entries += [(f"argument {i}", raw) for i, raw in enumerate(options.urls, start=1)]
    for path in options.urls_files:
        entries += require_url_file(path)
    return collect_urls(entries)


@dataclass
class CrawlPlan:
    """What a crawl reads from the store before Scrapy starts, so the Scrapy components never see DuckDB."""

    listed: list[ListedUrl]
    problems: list[UrlProblem]
    following: bool  # links are followed (depth > 0)
    links: dict[str, list[str]]  # stored out-links, url → targets (only when following)
    fresh: set[str]  # URLs fetched or confirmed recently enough not to be requested (recrawl_after, resume)
    validators: dict[str, tuple[str | None, str | None]]  # url → (ETag, Last-Modified) for conditional GETs
    # url → when its stored copy was downloaded or last confirmed, for sitemaps' <lastmod> (only when one is listed).
    stored_at: dict[str, datetime] = field(default_factory=dict)

    def fresh_listed(self) -> list[ListedUrl]:
        return [u for u in self.listed if u.url in self.fresh and not u.sitemap]

    def nothing_to_request(self) -> bool:
        """Every listed URL is fresh, and none leads on to stored links (fresh pages do, within the depth)."""
        fresh = self.fresh_listed()
        return len(fresh) == len(self.listed) and not (self.following and any(self.links.get(u.url) for u in fresh))


def plan_crawl(options: CrawlOptions, store: Store,
               gathered: tuple[list[ListedUrl], list[UrlProblem]] | None = None) -> CrawlPlan:
    listed, problems = gathered if gathered is not None else gather_urls(options)
    following = options.depth > 0 and options.follow != "none"
    stored = store.validators()
    links = store.page_links() if following else {}
    if following:
        # A page stored before webqa kept links is downloaded in full once, so that it can lead on.
        stored = {url: v for url, v in stored.items() if url in links}
    fresh: set[str] = set()
    cutoff = fresh_cutoff(options)
    if cutoff is not None:
        fresh = {url for url, v in stored.items() if v.fetched_at and v.fetched_at >= cutoff}
    validators = {url: (v.etag, v.last_modified) for url, v in stored.items() if v.etag or v.last_modified}
    stored_at: dict[str, datetime] = {}
    if any(u.sitemap for u in listed) and not options.refresh:
        stored_at = {url: v.fetched_at for url, v in stored.items() if v.fetched_at is not None}
    return CrawlPlan(listed, problems, following, links, fresh, validators, stored_at)


def fresh_cutoff(options: CrawlOptions) -> datetime | None:
    """Pages fetched or confirmed at or after this time are not fetched again in this crawl."""
    cutoffs = [options.fresh_since] if options.fresh_since is not None else []
    if options.recrawl_after is not None and not options.refresh:
        cutoffs.append(utcnow() - options.recrawl_after)
    return min(cutoffs) if cutoffs else None
