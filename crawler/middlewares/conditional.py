"""Conditional GET: send the stored ETag and Last-Modified so unchanged pages cost a 304, not a body."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured

log = logging.getLogger(__name__)


class ConditionalGetMiddleware:
    """Adds If-None-Match / If-Modified-Since from ``WEBQA_VALIDATORS`` ({url: (etag, last_modified)}).

    The validators come from the store, read by whoever starts the crawl; the middleware itself
    knows nothing of DuckDB.
    """

    def __init__(self, validators: Mapping[str, tuple[str | None, str | None]], crawler: Crawler) -> None:
        self.validators = validators
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ConditionalGetMiddleware:
        validators = crawler.settings.get("WEBQA_VALIDATORS") or {}
        if not validators:
            raise NotConfigured("no stored ETag/Last-Modified: nothing to make conditional")
        return cls(validators, crawler)

    def process_request(self, request: Request, spider: Spider | None = None) -> Any:
        if request.meta.get("redirect_times"):
            # Only the first hop is conditional, and RedirectMiddleware copies every header to the
            # next hop, ours included. The listed URL's validators say nothing about wherever it
            # redirects today: a target with only a Last-Modified older than ours would answer 304,
            # and the page would keep the old target's text. An unchanged body costs a download
            # and is then recognised by its hash.
            for name in (b"If-None-Match", b"If-Modified-Since"):
                request.headers.pop(name, None)
            return None
        key = request.cb_kwargs.get("listed_url", request.url)
        etag, last_modified = self.validators.get(key, (None, None))
        if etag:
            request.headers.setdefault(b"If-None-Match", etag.encode("latin-1"))
        if last_modified:
            request.headers.setdefault(b"If-Modified-Since", last_modified.encode("latin-1"))
        if (etag or last_modified) and self.stats is not None:
            self.stats.inc_value("webqa/conditional_requests")
        return None
