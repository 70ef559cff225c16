"""The `urls` spider: fetch a list of URLs, optionally following links within limits.

Every URL ends as exactly one item: a ``FetchedPage`` for HTML to clean, or a ``FetchOutcome`` saying
why there is none (invalid, robots.txt, HTTP error, not HTML, 304 …), so nothing is dropped silently.
Not even by a bug: what the spider raises unexpectedly is the URL's failure (crawler/middlewares/internal_error.py).

A page within the depth leads on to its links whether or not it is downloaded this run: a 304 or a
page skipped as fresh leads on to the links stored with it (``stored_links``, read from the store by
crawler/run.py), so pages below an unchanged page are still re-checked.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urljoin, urlparse, urlsplit

import scrapy
from scrapy import signals
from scrapy.crawler import Crawler
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadCancelledError,
    DownloadConnectionRefusedError,
    DownloadTimeoutError,
    IgnoreRequest,
    ResponseDataLossError,
)
from scrapy.http import Response, TextResponse
from scrapy.linkextractors import IGNORED_EXTENSIONS, LinkExtractor
from scrapy.utils.response import get_base_url
from scrapy.utils.url import url_has_any_extension
from w3lib.html import strip_html5_whitespace
from w3lib.url import canonicalize_url, safe_url_string
from scrapy.spidermiddlewares.httperror import HttpError
from twisted.internet import error as twisted_errors
from twisted.python.failure import Failure

from crawler.canonical import declared_canonical
from crawler.middlewares.internal_error import guarded
from crawler.middlewares.robots import product_token
from crawler.middlewares.ssrf import GuardedResolver, blocked_reason_for_host
from crawler.render import RenderPolicy, request_meta
from crawler.spiders.sitemap_reader import SitemapReader
from crawler.urllist import ListedUrl, UrlProblem, collect_urls, normalise_url, read_url_file
from pipelines.decoding import GARBLED_SHARE, garbled_share, whatwg_decode
from pipelines import defaults
from pipelines.defaults import MAX_URL_LENGTH
from pipelines.formats import HTML_TYPES, document_kind
from pipelines.items import FetchedPage, FetchOutcome
from pipelines.redact import inert, redact_text, redact_url
from pipelines.robots_meta import Directives, page_directives

log = logging.getLogger(__name__)

# What scrapy's LinkExtractor lets through (scrapy.linkextractors._is_valid_url; its deny_extensions default).
_LINK_SCHEMES = frozenset({"http", "https", "file", "ftp"})
_IGNORED_EXTENSIONS = {"." + e for e in IGNORED_EXTENSIONS}
# Link targets the spider remembers between pages (each a few hundred bytes).
_RESOLVED_LINKS_KEPT = 50_000
# Every status reaches `parse` so it is recorded; redirects (3xx but 304) stay with RedirectMiddleware,
# which `handle_httpstatus_all` would switch off.
HANDLED_STATUSES = [304, *range(400, 600)]


def _split_arg(value: str | Iterable[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [part for part in re.split(r"[\s,]+", value) if part]
    return list(value)


class UrlsSpider(SitemapReader, scrapy.Spider):
    name = "urls"

    def __init__(
        self,
        urls: str | Iterable[str] | None = None,
        urls_file: str | None = None,
        listed: Iterable[ListedUrl] | None = None,
        problems: Iterable[UrlProblem] | None = None,
        depth: int | str = 0,
        max_pages: int | str = 0,
        allow: str | Iterable[str] | None = None,
        deny: str | Iterable[str] | None = None,
        follow: str = "same_host",
        stored_links: Mapping[str, Sequence[str]] | None = None,
        fresh: Iterable[str] = (),
        stored_at: Mapping[str, datetime] | None = None,
        sitemap_max_urls: int | str = defaults.SITEMAP_MAX_URLS,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if listed is not None:
            # The webqa CLI has already read and validated the list (and reported its problems).
            self.listed = list(listed)
            self.problems = list(problems or [])
        else:
            entries = [(f"argument {i}", raw) for i, raw in enumerate(_split_arg(urls), start=1)]
            if urls_file:
                entries += read_url_file(urls_file)
            self.listed, self.problems = collect_urls(entries)
        self.max_depth = int(depth)
        self.max_pages = int(max_pages)
        self.follow = follow
        # Every link is extracted and stored; the job's allow/deny decide only what is followed, so a job
        # sharing the database with other allow/deny rules (or changing its own) follows stored links right.
        self.link_extractor = LinkExtractor(unique=True)
        self.link_filter = LinkExtractor(allow=_split_arg(allow), deny=_split_arg(deny))
        # url → same-host out-links stored by earlier crawls, for pages not downloaded this run.
        self.stored_links: Mapping[str, Sequence[str]] = stored_links or {}
        # URLs fetched or confirmed within crawl.recrawl_after: not requested, but reached all the same.
        self.fresh = frozenset(fresh)
        # url → when its stored copy was last downloaded or confirmed: a sitemap's <lastmod> before it
        # means the page is unchanged (counted fresh, not requested). Empty with --refresh.
        self.stored_at: Mapping[str, datetime] = stored_at or {}
        self.sitemap_max_urls = int(sitemap_max_urls)
        self.scheduled = 0
        self.max_url_length = MAX_URL_LENGTH
        self.seen: set[str] = set()
        # url → link depth of every URL this crawl reached (requested or fresh): the job's pages.
        self.reached: dict[str, int] = {}
        # Which pages a browser renders (crawl.render; crawler/render.py), and the User-Agent it sends.
        self.render = RenderPolicy()
        self.user_agent = defaults.user_agent()
        # Link targets resolved so far (see _resolve_link).
        self._resolved: dict[tuple[str, ...], tuple[str, str | None, str] | None] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> UrlsSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        spider.max_url_length = crawler.settings.getint("WEBQA_MAX_URL_LENGTH", spider.max_url_length)
        spider.render = RenderPolicy.from_setting(crawler.settings.get("WEBQA_RENDER"))
        spider.user_agent = crawler.settings.get("USER_AGENT") or spider.user_agent
        crawler.signals.connect(spider._response_started, signal=signals.headers_received)
        return spider

    def _response_started(self, request: scrapy.Request, **_: Any) -> None:
        """Count the delay to a host's next request from its answer to this one, not from our send.

        Scrapy times DOWNLOAD_DELAY from when a request leaves its queue; connecting and a busy
        reactor can hold it back tens of ms before it is on the wire, and the next request, timed
        from the earlier moment, then reaches the server less than the delay after it. The server
        has seen a request before it answers, so a delay counted from the response headers is a
        delay the server observes (robots.txt requests included).
        """
        engine = self.crawler.engine if self.crawler is not None else None
        if engine is None:
            return
        downloader = engine.downloader
        slot = downloader.slots.get(downloader.get_slot_key(request))
        if slot is not None and slot.delay:
            # The downloader's clock: Slot.lastseen is time.monotonic() in Scrapy 2.13+.
            slot.lastseen = max(slot.lastseen, time.monotonic())

    async def start(self) -> AsyncIterator[Any]:
        for problem in self.problems:
            log.info("Skipping %s", problem)
            if problem.duplicate:
                continue  # the first listing is the URL: fetched, counted and recorded once
            self._count("skipped/invalid_url")
            yield problem_outcome(problem)
        # Fresh listed URLs last: the links they lead to must not take max_pages from listed URLs.
        for listed in sorted(self.listed, key=lambda entry: entry.url in self.fresh and not entry.sitemap):
            for request in self.sitemap_request(listed.url) if listed.sitemap else self._schedule(listed.url, depth=0):
                yield request

    def _schedule(self, url: str, depth: int, *, fresh: bool = False) -> Iterator[scrapy.Request | FetchOutcome]:
        """The request for ``url``; for a fresh URL (or ``fresh``: a sitemap's lastmod says so), none, but the
        requests its stored links lead to."""
        if self._too_long(url):
            yield from self._record_too_long(url, depth)
            return
        if (fresh or url in self.fresh) and url not in self.seen:
            self.seen.add(url)
            self.reached[url] = depth
            if self.crawler is not None and self.crawler.stats is not None:
                self.crawler.stats.inc_value("webqa/count/fresh")
            yield from self._follow_stored(url, depth)
            return
        request = self._request(url, depth)
        if request is not None:
            yield request

    def _too_long(self, url: str) -> bool:
        return bool(self.max_url_length) and len(url) > self.max_url_length

    def _record_too_long(self, url: str, depth: int) -> Iterator[FetchOutcome]:
        """A URL too long to request is failed, once, with the reason (Scrapy would drop it with a log line)."""
        if url in self.seen:
            return
        self.seen.add(url)
        self.reached[url] = depth
        self._count("failed/url_too_long")
        yield FetchOutcome(url, "failed", f"URL longer than {self.max_url_length} characters ({len(url)}); "
                                          "not requested (WEBQA_MAX_URL_LENGTH)")

    def _request(self, url: str, depth: int) -> scrapy.Request | None:
        if url in self.seen:
            return None
        if self.max_pages and self.scheduled >= self.max_pages:
            self._count("skipped/max_pages")
            log.debug("Not scheduling %s: max_pages=%d reached", url, self.max_pages)
            return None
        self.seen.add(url)
        self.reached[url] = depth
        self.scheduled += 1
        return scrapy.Request(
            url,
            callback=self.parse,
            errback=self.on_error,
            cb_kwargs={"listed_url": url},
            meta={"handle_httpstatus_list": HANDLED_STATUSES, "webqa_depth": depth,
                  **request_meta(self.render, url, self.user_agent)},
            # `seen` already fetches each listed or discovered URL once. Scrapy's own duplicate filter
            # would also drop a *redirect* to a URL fetched under its own name, and the listed URL
            # would vanish without a page or a fetch_log row.
            dont_filter=True,
        )

    def parse(self, response: Response, listed_url: str) -> Iterable[Any]:
        depth = response.meta.get("webqa_depth", 0)
        if response.status == 304:
            self._count("not_modified")
            yield FetchOutcome(
                listed_url, "not_modified", "not modified since the last crawl", 304,
                _header(response, "ETag"), _header(response, "Last-Modified"),
            )
            yield from self._follow_stored(listed_url, depth)
            return
        if response.status >= 400:
            self._count(f"failed/http_{response.status}")
            yield FetchOutcome(listed_url, "failed", f"HTTP {response.status}", response.status)
            if response.status >= 500:  # a server error says nothing about the pages below: still check them
                yield from self._follow_stored(listed_url, depth)
            return
        content_type = _header(response, "Content-Type")
        mime = (content_type or "").split(";", 1)[0].strip().lower()
        if not isinstance(response, TextResponse) or (mime and mime not in HTML_TYPES):
            if response.body and document_kind(mime, response.body) == "pdf":
                yield self._document(response, listed_url, depth, content_type, "pdf")
                return
            self._count("skipped/not_html")
            hint = "; a sitemap? list it as 'sitemap: URL'" if looks_like_sitemap(response.body) else ""
            yield FetchOutcome(listed_url, "skipped", f"not HTML ({mime or 'no Content-Type'}){hint}", response.status)
            return
        html = self._decoded(response, listed_url, mime)
        if isinstance(html, FetchOutcome):
            yield html
            return
        yield from self._page(response, listed_url, depth, content_type, html)

    def _decoded(self, response: Response, listed_url: str, mime: str) -> str | FetchOutcome:
        """The body of an HTML response as text, or the outcome saying why it is not stored as a page."""
        if not response.body.strip():
            self._count("failed/empty_body")
            return FetchOutcome(listed_url, "failed", "empty body", response.status)
        if looks_binary(response.body):
            self._count("skipped/binary")
            return FetchOutcome(listed_url, "skipped", f"binary content served as {mime or 'text'}", response.status)
        try:
            # WHATWG decoding where Python's differs (a BOM-less `utf-16` label is little-endian).
            html = whatwg_decode(response.body, response.encoding)
            if html is None:
                html = response.text
        except (UnicodeError, LookupError) as exc:  # a charset Python does not know
            self._count("failed/undecodable")
            return FetchOutcome(listed_url, "failed", f"cannot decode body: {exc}", response.status)
        if garbled_share(html) > GARBLED_SHARE:  # a wrong charset must not be stored as text silently
            self._count("failed/garbled")
            return FetchOutcome(listed_url, "failed", f"garbled text after decoding as {response.encoding}", response.status)
        return html

    def _page(self, response: Response, listed_url: str, depth: int, content_type: str | None,
              html: str) -> Iterator[Any]:
        """The fetched page, with the links it leads to (unless its robots directives say nofollow), then those links."""
        robots = self._robots_directives(response)
        if robots.nofollow:
            self._count("count/nofollow")
            log.debug("Not following the links of %s: nofollow (%s)", listed_url, robots.nofollow)
        # A nofollow page keeps no links either: a later 304 must not lead on to them.
        links = [] if robots.nofollow else self._page_links(response)
        # The page it names as canonical is followed like a link (the store then keeps one copy of the text).
        canonical = declared_canonical(response, listed_url)
        if canonical is not None and not robots.nofollow and canonical not in links:
            links.append(canonical)
        yield FetchedPage(
            url=listed_url,
            final_url=redact_url(response.url),  # a redirect may have added credentials
            status=response.status,
            content_type=content_type,
            etag=_header(response, "ETag"),
            last_modified=_header(response, "Last-Modified"),
            html=html,
            html_bytes=len(response.body),
            content_hash=hashlib.sha256(response.body).hexdigest(),
            depth=depth,
            fetched_at=datetime.now(timezone.utc).replace(tzinfo=None),
            links=links,
            noindex=robots.noindex,
            canonical=canonical,
        )
        yield from self._follow(links, depth)

    def _document(self, response: Response, listed_url: str, depth: int, content_type: str | None,
                  kind: str) -> FetchedPage:
        """A document that is not a web page (a PDF): its bytes, for the extraction pool to read. No links are
        followed from it; its X-Robots-Tag counts like a page's."""
        return FetchedPage(
            url=listed_url, final_url=response.url, status=response.status, content_type=content_type,
            etag=_header(response, "ETag"), last_modified=_header(response, "Last-Modified"), html="",
            html_bytes=len(response.body), content_hash=hashlib.sha256(response.body).hexdigest(), depth=depth,
            fetched_at=datetime.now(timezone.utc).replace(tzinfo=None), noindex=self._robots_directives(response).noindex,
            kind=kind, body=response.body, canonical=declared_canonical(response, listed_url),
        )

    def _robots_directives(self, response: Response) -> Directives:
        """The page's robots directives (meta tags and X-Robots-Tag); none when the crawl ignores robots rules."""
        crawler = getattr(self, "crawler", None)
        settings = crawler.settings if crawler is not None else None
        if settings is not None and not settings.getbool("ROBOTSTXT_OBEY"):
            return Directives()
        agent = (settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT")) if settings is not None else None
        token = product_token(agent or defaults.user_agent())
        headers = [v.decode("latin-1") for v in response.headers.getlist("X-Robots-Tag")]
        meta: list[tuple[str, str]] = []
        if isinstance(response, TextResponse):
            meta = [(m.attrib.get("name", ""), m.attrib.get("content", ""))
                    for m in response.xpath("//meta[@name and @content]")]
        return page_directives(meta, headers, token)

    def _page_links(self, response: TextResponse) -> list[str]:
        """The page's links to its own (final) host, normalised, in page order, each once.

        What ``LinkExtractor(unique=True).extract_links`` gives, each distinct target resolved once: a
        manual page links to the same targets hundreds of times, and resolving, canonicalising and labelling
        every occurrence (link text included, which nothing here reads) was a fifth of the crawling process's
        CPU under py-spy, on the reactor thread. Same steps per href: strip, join with the base URL, make
        safe in the page's encoding, join with the response URL, the extractor's scheme and extension checks,
        the first of equal canonical URLs.
        """
        host = _hostname(response.url)
        base_url = get_base_url(response)
        links: dict[str, None] = {}
        hrefs: set[str] = set()
        canonical: set[str] = set()
        for element in response.selector.root.iter("a", "area"):
            href = element.get("href")
            if href is None:
                continue
            href = strip_html5_whitespace(href)
            # Hrefs equal up to their fragment give one normalised URL (the fragment is dropped), with the
            # same scheme and path checks: "#section" links to the page itself are resolved once.
            target = href.split("#", 1)[0]
            if target in hrefs:
                continue
            hrefs.add(target)
            resolved = self._resolve_link(response.url, base_url, href, response.encoding)
            if resolved is None:
                continue
            key, normalised, link_host = resolved
            if key in canonical:
                continue
            canonical.add(key)
            if normalised is not None and link_host == host:
                links[normalised] = None
        return list(links)

    def _resolve_link(self, page_url: str, base_url: str, href: str, encoding: str) -> tuple[str, str | None, str] | None:
        """(canonical key, normalised URL or None when not followable, its host) of a link on a page; None
        when it is no URL at all.

        Remembered for the crawl: the pages of a site link to the same targets (navigation, index,
        neighbours), and making one safe, canonical and normalised costs more than the rest of a link.
        """
        try:
            joined = urljoin(base_url, href)
            parts = urlsplit(joined)
        except ValueError:
            return None
        # The page's own URL only matters to a link that the base URL left without a scheme or a host.
        cache_key = (joined, encoding) if parts.scheme and parts.netloc else (page_url, joined, encoding)
        if cache_key in self._resolved:
            return self._resolved[cache_key]
        try:
            url = urljoin(page_url, safe_url_string(joined, encoding=encoding))
        except ValueError:
            resolved = None
        else:
            normalised: str | None = None
            if url.split("://", 1)[0] in _LINK_SCHEMES and not url_has_any_extension(urlparse(url), _IGNORED_EXTENSIONS):
                normalised, _reason = normalise_url(url)
            resolved = (canonicalize_url(url, keep_fragments=True), normalised,
                        _hostname(normalised) if normalised is not None else "")
        if len(self._resolved) >= _RESOLVED_LINKS_KEPT:
            self._resolved.clear()  # a crawl of many sites: start over rather than grow without bound
        self._resolved[cache_key] = resolved
        return resolved

    def _follow_stored(self, url: str, depth: int) -> Iterator[scrapy.Request]:
        # Stored links are same-host already (to the page's final host, which a 304 or a fresh page
        # cannot tell us again); the job's allow/deny and limits are applied by _follow.
        yield from self._follow(self.stored_links.get(url, ()), depth)

    def _follow(self, links: Iterable[str], depth: int) -> Iterator[scrapy.Request]:
        """Requests for a page's links at ``depth + 1``: within the depth, the job's allow/deny, seen and max_pages."""
        if depth >= self.max_depth or self.follow == "none":
            return
        for url in links:
            if self.link_filter.matches(url):
                yield from self._schedule(url, depth + 1)

    def on_error(self, failure: Failure) -> Iterable[Any]:
        request = failure.request  # type: ignore[attr-defined]
        url = request.cb_kwargs.get("listed_url", request.url)
        # A bug here is the URL's failure too: Scrapy hands an errback's output and exceptions to no spider middleware.
        crawler = getattr(self, "crawler", None)
        return guarded(url, self._on_error(failure, request, url), crawler.stats if crawler is not None else None)

    def _on_error(self, failure: Failure, request: scrapy.Request, url: str) -> Iterator[Any]:
        outcome, reason = describe_failure(failure, self.settings.getint("REDIRECT_MAX_TIMES"))
        self._count(f"{outcome}/{reason.split(':')[0].split(' (')[0].replace(' ', '_')}")
        log.info("%s %s: %s", outcome.capitalize(), url, reason)
        yield FetchOutcome(url, outcome, reason)
        # Not downloaded (timeout, refused, robots.txt …): the pages below are still checked, each on its own.
        yield from self._follow_stored(url, request.meta.get("webqa_depth", 0))

    def _count(self, key: str, by: int = 1) -> None:
        if self.crawler is not None and self.crawler.stats is not None:
            self.crawler.stats.inc_value(f"webqa/{key}", by)


def looks_like_sitemap(body: bytes) -> bool:
    """An XML body whose first element is a sitemap's (or a gzip file, as ``.xml.gz`` sitemaps are)."""
    head = body[:1024]
    return head.startswith(b"\x1f\x8b") or b"<urlset" in head or b"<sitemapindex" in head


def problem_outcome(problem: UrlProblem) -> FetchOutcome:
    """The record of a rejected list entry: where it is and why, never its content (a URL file's line may be
    ``root:$6$…`` or ``password=…``, and fetch_log is read by more people than the file)."""
    return FetchOutcome(url=problem.origin, outcome="skipped", reason=problem.reason.split(" (", 1)[0])


_TEXT_CONTROLS = {9, 10, 12, 13, 27}  # tab, newline, form feed, carriage return, escape (ANSI in <pre>)


def looks_binary(body: bytes, sample: int = 4096) -> bool:
    """True for images, archives and other bytes mislabelled as HTML.

    Markup starts with "<" once a byte-order mark and white space are skipped; bytes that do not, and
    that carry NULs or many other control bytes, are not a page. (A page with stray NULs inside its
    markup is still a page: the cleaner drops them.)
    """
    head = body[:sample]
    if head.startswith((b"\xff\xfe", b"\xfe\xff", b"\xef\xbb\xbf")):
        return False
    if head.lstrip().startswith(b"<"):
        return False
    controls = sum(1 for byte in head if byte < 32 and byte not in _TEXT_CONTROLS)
    return controls > len(head) * 0.02


def describe_failure(failure: Failure, max_redirects: int | None = None,
                     resolver: GuardedResolver | None = None) -> tuple[str, str]:
    """Map a download failure to ``(outcome, reason)`` in words a user can act on.

    ``resolver`` is the SSRF guard's (default: the one installed in the reactor), asked why a host it
    refused at connect time failed as a DNS lookup. The reason quotes what servers sent (a redirect's
    Location): shown without URL credentials and control characters, on one line.
    """
    outcome, reason = _describe_failure(failure, max_redirects, resolver)
    return outcome, inert(redact_text(reason), one_line=True)


def _describe_failure(failure: Failure, max_redirects: int | None,
                      resolver: GuardedResolver | None) -> tuple[str, str]:
    exc = failure.value
    # Our own middlewares say which outcome their refusals are: the SSRF guard's "blocked: …" is a
    # policy skip like robots.txt, a Retry-After beyond the limit a failure.
    declared = getattr(exc, "outcome", None)
    if declared in ("failed", "skipped"):
        return declared, str(exc) or type(exc).__name__
    if isinstance(exc, HttpError) and 300 <= exc.response.status < 400:
        # A redirect RedirectMiddleware would not follow reaches the spider as an HTTP error: most
        # often a Location that is not http(s) (file:, ftp:, javascript:) — refused on purpose.
        location = _header(exc.response, "Location")
        if location:
            scheme = location.split(":", 1)[0].lower() if ":" in location else ""
            if scheme.isascii() and scheme.isalpha() and scheme not in ("http", "https"):
                return "failed", f"redirect to {location[:200]} not followed: only http and https are fetched"
            return "failed", f"HTTP {exc.response.status} redirect to {location[:200]} not followed"
        return "failed", f"HTTP {exc.response.status} without a Location to follow"
    if isinstance(exc, IgnoreRequest):
        text = str(exc) or "ignored"
        cause = exc.__cause__
        if getattr(cause, "max_size", None) is not None and hasattr(cause, "decompressed_size"):
            # HttpCompressionMiddleware stopped inflating a body past DOWNLOAD_MAXSIZE (a decompression
            # bomb, or just a huge page): too large, like an oversized download, not a choice of ours.
            return "failed", (
                f"response too large: more than {cause.max_size} bytes after decompression "
                f"(DOWNLOAD_MAXSIZE; {cause.decompressed_size} bytes when stopped)"
            )
        if text == "max redirections reached":  # RedirectMiddleware: a loop or a trap, not a choice of ours
            limit = f" (more than {max_redirects})" if max_redirects else ""
            return "failed", f"too many redirects{limit}"
        if text == "Forbidden by robots.txt":  # Scrapy's stock RobotsTxtMiddleware
            return "skipped", "disallowed by robots.txt"
        # Anything else ignored on purpose (robots.txt rules, an unreachable robots.txt, a Crawl-delay
        # over the limit) says why in its own words; keep them.
        return "skipped", text
    if isinstance(exc, (CannotResolveHostError, twisted_errors.DNSLookupError)):
        # A hostname the SSRF guard's resolver refused at connect time (its DNS answer changed after
        # the first check) surfaces as a DNS failure; say what really happened.
        request = getattr(failure, "request", None)
        blocked = blocked_reason_for_host(_hostname(request.url), resolver) if request is not None else None
        if blocked:
            return "skipped", blocked
        return "failed", "DNS lookup failed"
    if isinstance(exc, (DownloadConnectionRefusedError, twisted_errors.ConnectionRefusedError)):
        return "failed", "connection refused"
    if isinstance(exc, (DownloadTimeoutError, twisted_errors.TimeoutError, TimeoutError)):
        return "failed", f"timed out ({exc})"
    if isinstance(exc, DownloadCancelledError):
        return "failed", f"response too large: {exc}"
    if isinstance(exc, ResponseDataLossError):
        return "failed", "connection closed before the whole body arrived"
    return "failed", f"{type(exc).__name__}: {exc}"


def _header(response: Response, name: str) -> str | None:
    value = response.headers.get(name)
    return value.decode("latin-1") if value else None


def _hostname(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()
