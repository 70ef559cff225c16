"""The browser side of ``crawl.render``: scrapy-playwright's download handler with webqa's guards.

Loaded by Scrapy only when a crawl renders (``crawler.render.render_settings`` names it), so a crawl that
renders nothing never imports playwright. The page's own request reaches this handler through Scrapy's
downloader like any other (SSRF guard, robots.txt, the host's delay). What the page then asks for (scripts,
XHR and fetch, frames, and every redirect hop of each) is routed here: the same SSRF decision
(``ssrf.check_address`` through the guarded resolver) and the same robots.txt decision
(``RobotsPolicyMiddleware.decision``) before any byte leaves, then fetched by webqa at the very address the
check resolved (``crawler/render_fetch.py``: no second lookup a rebinding DNS could answer differently,
redirects off, each hop decided here, the body capped at ``crawl.max_bytes``) and handed to the page, which
itself never connects anywhere. The page's own document carries the stored validators (If-None-Match,
If-Modified-Since), so an unchanged page is a 304 as a static one is. Images, fonts, media and stylesheets are not fetched:
the text does not need them. WebSockets are answered by nobody.

The overrides of scrapy-playwright's private methods are pinned to its version in pyproject.toml and
covered by tests/crawler/test_render.py (a refused fetch fails the test if the routing stops applying).
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urljoin, urlsplit

from playwright.async_api import Error as PlaywrightError, Page, Request as PlaywrightRequest, Route, WebSocketRoute
from playwright.async_api import TimeoutError as PlaywrightTimeoutError
from scrapy.exceptions import NotConfigured
from scrapy.http import Response as HttpResponse, TextResponse
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy_playwright.handler import ScrapyPlaywrightDownloadHandler
from twisted.internet.error import DNSLookupError

from crawler.middlewares.robots import RobotsPolicyMiddleware
from crawler.middlewares.ssrf import (
    HINT, BlockedAddressError, check_address, installed_resolver, parse_ip_host, private_networks_allowed,
)
from crawler.render_fetch import PinnedFetcher, TooLarge, Unreadable, hop_headers, origin, without_cookies_set
from crawler.render import RENDER_TIMEOUT, SETTLE_SECONDS, RenderFailed, chromium_problem, rendered_text_problem

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

log = logging.getLogger(__name__)

# What a page's text does not need; not fetched at all (counted, not refused).
UNNEEDED = frozenset({"image", "media", "font", "stylesheet", "texttrack", "manifest", "eventsource", "other"})
# Redirect hops one browser request may take, each checked like the first (RFC 9110 suggests five).
MAX_REDIRECTS = 5
PAGE_KEY = "webqa_render_page"
REFUSED_STAT = "webqa/count/render_refused"
TOO_LARGE_STAT = "webqa/count/render_too_large"


class BrowserGuard:
    """The SSRF and robots.txt decisions for one request the browser wants to make."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.guard = not private_networks_allowed(crawler.settings)

    async def check(self, url: str) -> tuple[str | None, str | None]:
        """(why ``url`` must not be fetched for a page, or None; the address checked, which the fetch connects
        to: None when the guard is off, and then the name is resolved when connecting)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            return f"blocked: {parts.scheme}: URLs are never fetched, only http and https", None
        host = parts.hostname
        if not host:
            return "blocked: a URL without a host", None
        address = None
        if self.guard:
            problem, address = await self._address(host)
            if problem is not None:
                return problem, None
        robots = self._robots()
        if robots is not None:
            decision = await robots.decision(url)
            if not decision.allowed:
                return decision.message, None
        return None, address

    async def _address(self, host: str) -> tuple[str | None, str | None]:
        literal = parse_ip_host(host)
        if literal is not None:
            return check_address(literal, shown=host), str(literal)
        resolver = installed_resolver()
        if resolver is None or not resolver.guard:  # fail closed, as the middleware does
            return f"blocked: the SSRF guard cannot check {host} (no guarded resolver); {HINT}", None
        try:
            address = await maybe_deferred_to_future(resolver.resolve_checked(host))
        except BlockedAddressError as exc:
            return exc.message, None
        except DNSLookupError:
            return f"DNS lookup failed for {host}", None
        return None, address

    def _robots(self) -> RobotsPolicyMiddleware | None:
        engine = self.crawler.engine
        manager = getattr(getattr(engine, "downloader", None), "middleware", None)
        for middleware in getattr(manager, "middlewares", ()):
            if isinstance(middleware, RobotsPolicyMiddleware):
                return middleware
        return None


class RenderHandler(ScrapyPlaywrightDownloadHandler):
    """scrapy-playwright's handler, with every browser request guarded and each render bounded in time."""

    def __init__(self, crawler: Crawler) -> None:
        problem = chromium_problem()
        if problem is not None:
            raise NotConfigured(problem)
        super().__init__(crawler)
        self.crawler = crawler
        self.guard = BrowserGuard(crawler)
        self.timeout = crawler.settings.getfloat("WEBQA_RENDER_TIMEOUT", RENDER_TIMEOUT)
        self.settle = crawler.settings.getfloat("WEBQA_RENDER_SETTLE", SETTLE_SECONDS)
        # The whole render: load, settle, reading the document; a script that holds the page past it is cut.
        self.bound = self.timeout * 1.5 + self.settle
        self.max_bytes = crawler.settings.getint("DOWNLOAD_MAXSIZE")
        # Every request of a page, fetched at the address its check resolved (no second lookup to rebind).
        self.fetcher = PinnedFetcher(self.timeout, self.max_bytes)
        # What became of a page's own document when the browser got no page from it: (what, detail), by URL.
        self.outcomes: dict[str, tuple[str, Any]] = {}

    async def download_request(self, request: Request) -> Response:  # type: ignore[override]
        if not request.meta.get("playwright"):
            return await super().download_request(request)
        try:
            response = await self._render(request)
        except RenderFailed:
            outcome = self.outcomes.pop(request.url, None)
            if outcome is None:
                raise
            what, detail = outcome
            if what == "not modified":  # a 304 as a static page's: the spider records it and keeps the stored copy
                return HttpResponse(request.url, status=304, headers=detail, request=request, flags=["playwright"])
            raise RenderFailed(detail) from None
        self.outcomes.pop(request.url, None)
        return response

    async def _render(self, request: Request) -> Response:
        task = asyncio.ensure_future(super().download_request(request))
        try:
            response = await asyncio.wait_for(asyncio.shield(task), self.bound)
        except asyncio.TimeoutError:
            await self._abandon(request, task)
            raise RenderFailed(f"render timed out: the page was not rendered within {self.bound:g} s "
                               "(a script that never finishes?)") from None
        except PlaywrightTimeoutError:
            raise RenderFailed(f"render timed out: the page did not load within {self.timeout:g} s") from None
        except PlaywrightError as exc:
            first = (exc.message or type(exc).__name__).strip().splitlines()[0]
            raise RenderFailed(f"render failed: {first}") from None
        finally:
            request.meta.pop(PAGE_KEY, None)
            self._delay_from_now(request)
        if self.max_bytes and len(response.body) > self.max_bytes:
            raise RenderFailed(f"response too large: the rendered page has {len(response.body)} bytes, more than "
                               f"{self.max_bytes} (DOWNLOAD_MAXSIZE)")
        # An error page keeps its status for the spider to record; a page that rendered to nothing is failed here.
        rendered = isinstance(response, TextResponse) and 200 <= response.status < 300
        empty = rendered_text_problem(response.text) if rendered else None
        if empty is not None:
            raise RenderFailed(empty)
        return response

    def _delay_from_now(self, request: Request) -> None:
        """Count the host's delay from the render's end: the browser's request left well after Scrapy's slot
        timed it (the browser starting, the page opening), and the server must still see the whole delay."""
        engine = self.crawler.engine
        if engine is None:
            return
        slot = engine.downloader.slots.get(engine.downloader.get_slot_key(request))
        if slot is not None and slot.delay:
            slot.lastseen = max(slot.lastseen, time.monotonic())

    async def _abandon(self, request: Request, task: asyncio.Future[Any]) -> None:
        """Stop a render past its bound: its task first (so it cannot retry on the closed page), then its page."""
        task.cancel()
        with suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, 5)
        page = request.meta.get(PAGE_KEY)
        if isinstance(page, Page) and not page.is_closed():
            with suppress(Exception):
                await asyncio.wait_for(page.close(), 10)

    async def _create_page(self, request: Request, spider: Spider) -> Page:
        page = await super()._create_page(request, spider)
        request.meta[PAGE_KEY] = page  # for _abandon
        await page.route_web_socket("**", _no_websocket)
        return page

    async def _apply_page_methods(self, page: Page, request: Request, spider: Spider) -> None:
        await super()._apply_page_methods(page, request, spider)
        # Text a script fetches after `load` is there once the network is quiet; a page that never quiets
        # is read as it is then.
        with suppress(PlaywrightTimeoutError):
            await page.wait_for_load_state("networkidle", timeout=self.settle * 1000)

    def _make_request_handler(self, context_name: str, method: str, url: str, headers: Any, body: Any,
                              encoding: str, spider: Spider, initial_request_done: asyncio.Event) -> Callable[..., Any]:
        async def handler(route: Route, browser_request: PlaywrightRequest) -> None:
            # The page's own document, first time: conditional on what the store holds, as a static page is.
            page = (not initial_request_done.is_set() and browser_request.is_navigation_request()
                    and browser_request.url.rstrip("/") == url.rstrip("/"))
            if page:
                initial_request_done.set()
            try:
                await self._route(route, browser_request, url, conditional_headers(headers) if page else None)
            except Exception as exc:  # a refused connection, the fetch's own timeout, the page closed under it
                log.debug("Rendering %s: request %s not completed: %s", url, browser_request.url, exc)
                # An unanswered route would hold the page's load event until the render's bound.
                with suppress(PlaywrightError):
                    await route.abort("failed")

        return handler

    async def _route(self, route: Route, browser_request: PlaywrightRequest, page_url: str,
                     conditional: dict[str, str] | None) -> None:
        """Fetch what the page asks for, each hop of its redirects decided first; refuse the rest.

        ``conditional``: the page's own document (its validators, possibly none); None for what the page asks for.
        """
        if browser_request.resource_type in UNNEEDED:
            self.stats.inc_value("webqa/render/unneeded")
            await route.abort("blockedbyclient")
            return
        target, method, body = browser_request.url, browser_request.method, browser_request.post_data_buffer
        headers = {**await browser_request.all_headers(), **(conditional or {})}
        for _hop in range(MAX_REDIRECTS + 1):
            problem, address = await self.guard.check(target)
            if problem is not None:
                self.stats.inc_value(REFUSED_STAT)
                log.info("Rendering %s: refused the page's request for %s: %s", page_url, target, problem)
                await route.abort("blockedbyclient")
                return
            try:
                fetched = await self.fetcher.fetch(method, target, headers, body, address)
            except TooLarge as exc:
                self._too_large(page_url, str(exc), conditional is not None)
                await route.abort("failed")
                return
            except Unreadable as exc:  # the page's own document fails with the reason, not a debug line
                if conditional is not None:
                    self.outcomes[page_url] = ("unreadable", str(exc))
                log.info("Rendering %s: %s", page_url, exc)
                await route.abort("failed")
                return
            location = fetched.headers.get("location")
            if conditional is not None and fetched.status == 304:
                self.outcomes[page_url] = ("not modified", fetched.headers)
                await route.abort("aborted")
                return
            if not (300 <= fetched.status < 400 and location):
                same = origin(target) == origin(browser_request.url)
                await route.fulfill(status=fetched.status, body=fetched.body,
                                    headers=fetched.headers if same else without_cookies_set(fetched.headers))
                return
            # Like a browser: 303 (and 301/302 after a POST) turn into a GET without a body.
            if fetched.status == 303 or (fetched.status in (301, 302) and method == "POST"):
                method, body = "GET", None
            previous, target = target, urljoin(target, location)
            headers = {k: v for k, v in headers.items() if k.lower() not in _VALIDATORS}  # only the first hop
            if origin(target) != origin(previous):  # credentials stay behind, for this hop and the next
                headers = hop_headers(headers, previous, target, await _page_cookie(browser_request, target, page_url))
        log.info("Rendering %s: %s redirected more than %d times; not followed", page_url, browser_request.url,
                 MAX_REDIRECTS)
        await route.abort("blockedbyclient")

    def _too_large(self, page_url: str, reason: str, page: bool) -> None:
        """Count a body over the cap; the page's own document fails the render with the reason."""
        self.stats.inc_value(TOO_LARGE_STAT)
        if page:
            self.outcomes[page_url] = ("too large", reason)
        log.info("Rendering %s: %s; not fetched", page_url, reason)

    async def _close(self) -> None:
        with suppress(Exception):
            await self.fetcher.close()
        await super()._close()


_VALIDATORS = frozenset({"if-none-match", "if-modified-since"})


def conditional_headers(headers: Any) -> dict[str, str]:
    """The If-None-Match / If-Modified-Since the downloader put on Scrapy's request (crawler/middlewares/conditional.py)."""
    found: dict[str, str] = {}
    for name in ("If-None-Match", "If-Modified-Since"):
        value = headers.get(name) if headers is not None else None
        if value:
            found[name] = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return found


async def _page_cookie(browser_request: PlaywrightRequest, target: str, page_url: str) -> str | None:
    """The browser's cookies for ``target`` when a redirect leads to the page's own origin (first-party there);
    None elsewhere: what a third party's jar would send cross-site is not worked out here, so nothing is sent."""
    if origin(target) != origin(page_url):
        return None
    try:
        cookies = await browser_request.frame.page.context.cookies(target)
    except Exception:  # a request without a frame, the page closed: no cookie is the safe answer
        return None
    return "; ".join(f"{c['name']}={c['value']}" for c in cookies) or None


async def _no_websocket(websocket: WebSocketRoute) -> None:
    """A page's WebSocket reaches no server (it would pass no guard); the page sees it closed."""
    log.debug("Not opening a WebSocket to %s", websocket.url)
    await websocket.close()
