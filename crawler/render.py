"""JavaScript rendering, opt-in (``crawl.render``): which URLs a browser renders, and the Scrapy settings for it.

This module imports neither playwright nor scrapy-playwright: a crawl that renders nothing never loads them
(the browser side is ``crawler/render_browser.py``, named only in the settings below, which Scrapy loads
when a rendered request is first downloaded).

``crawl.render`` is ``js`` (every page) or ``{js: [regex, ...]}`` (pages whose URL matches one of them,
``re.search`` like ``allow``/``deny``). Sitemaps, robots.txt and the pages not matched are fetched as usual.
"""

from __future__ import annotations

import os
import re
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lxml import html as lxml_html

# The system's Chromium (Debian `chromium`); playwright never downloads a browser for webqa.
CHROMIUM = "/usr/bin/chromium"
# Headless as root without a sandbox or GPU; no traffic of Chromium's own (updates, sync, QUIC probes).
LAUNCH_ARGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
    # WebRTC would reach hosts on its own, past the request routing that applies the SSRF guard.
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    # A popup's requests would pass outside the page's routing (and so the SSRF guard); pages need none.
    "--block-new-web-contents",
)
# Pages the one browser context renders at a time; more requests wait for a free page.
MAX_PAGES = 4
# The V8 heap of a page's renderer, in MB: a runaway script fails instead of eating the machine's memory.
JS_HEAP_MB = 512
# Seconds a page may take to load (its `load` event); the whole render is bounded a little above it.
RENDER_TIMEOUT = 20.0
# Seconds to wait after `load` for the network to go quiet (text fetched by scripts), never an error.
SETTLE_SECONDS = 3.0

SETTING = "WEBQA_RENDER"


@dataclass(frozen=True)
class RenderPolicy:
    """Which URLs are rendered: ``every`` page, or those matching one of ``patterns``."""

    every: bool = False
    patterns: tuple[str, ...] = ()

    @classmethod
    def from_setting(cls, value: Any) -> RenderPolicy:
        """``None`` (off), ``"js"`` (every page) or a list of regexes, as the job's ``crawl.render`` gives it."""
        if value is None or value is False or value == []:
            return cls()
        if value == "js":
            return cls(every=True)
        if isinstance(value, (list, tuple)) and all(isinstance(p, str) for p in value):
            return cls(patterns=tuple(value))
        raise ValueError(f"render: expected 'js' or a list of regexes, got {value!r}")

    @property
    def enabled(self) -> bool:
        return self.every or bool(self.patterns)

    def wants(self, url: str) -> bool:
        return self.every or any(re.search(p, url) for p in self.patterns)

    def setting(self) -> str | list[str] | None:
        return "js" if self.every else list(self.patterns) or None


def request_meta(policy: RenderPolicy, url: str, user_agent: str) -> dict[str, Any]:
    """The meta keys that send ``url`` through the browser (none when the policy does not render it)."""
    if not policy.wants(url):
        return {}
    return {
        "playwright": True,
        "playwright_page_goto_kwargs": {"wait_until": "load"},
        # Used when the context is first created: our User-Agent, and no service worker (it would fetch past
        # the request routing).
        "playwright_context_kwargs": {"user_agent": user_agent, "service_workers": "block",
                                      **browser_proxy()},
    }


def browser_proxy(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The operator's HTTP proxy (``http_proxy``/``no_proxy``) as playwright's ``proxy`` option, as Scrapy uses it."""
    proxies = urllib.request.getproxies_environment() if environ is None else {
        k.lower().removesuffix("_proxy"): v for k, v in environ.items() if k.lower().endswith("_proxy")}
    server = proxies.get("http") or proxies.get("https")
    if not server:
        return {}
    proxy: dict[str, str] = {"server": server if "://" in server else f"http://{server}"}
    if proxies.get("no"):
        proxy["bypass"] = proxies["no"]
    return {"proxy": proxy}


def render_settings(policy: RenderPolicy, timeout: float = RENDER_TIMEOUT) -> dict[str, Any]:
    """The Scrapy settings a rendering crawl adds: the browser's download handler and its bounds."""
    if not policy.enabled:
        return {}
    handler = "crawler.render_browser.RenderHandler"
    return {
        SETTING: policy.setting(),
        # Rendered or not, every http(s) request goes through this handler; it hands the unrendered ones to
        # Scrapy's own, so robots.txt, sitemaps and other pages are downloaded as usual.
        "DOWNLOAD_HANDLERS": {"file": None, "data": None, "ftp": None, "s3": None, "http": handler, "https": handler},
        "PLAYWRIGHT_BROWSER_TYPE": "chromium",
        "PLAYWRIGHT_LAUNCH_OPTIONS": {
            "executable_path": os.environ.get("WEBQA_CHROMIUM", CHROMIUM),
            "headless": True,
            "args": [*LAUNCH_ARGS, f"--js-flags=--max-old-space-size={JS_HEAP_MB}"],
            "timeout": timeout * 1000,
        },
        "PLAYWRIGHT_MAX_CONTEXTS": 1,
        "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT": MAX_PAGES,
        "PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT": timeout * 1000,
        "WEBQA_RENDER_TIMEOUT": timeout,
        "WEBQA_RENDER_SETTLE": min(SETTLE_SECONDS, timeout / 4),
    }


def render_problem(render: object, redis: bool) -> str | None:
    """Why a crawl asking for ``render`` cannot run here (through Redis, or without Chromium), or None."""
    if render is None:
        return None
    if redis:
        return ("crawl.render: pages are rendered by a crawl on one machine, not through Redis; crawl without "
                "--redis (or redis:), or drop crawl.render")
    return chromium_problem()


def chromium_problem(path: str | None = None) -> str | None:
    """Why the browser cannot be started (one line naming what to install), or None."""
    path = path or os.environ.get("WEBQA_CHROMIUM", CHROMIUM)
    if os.access(path, os.X_OK):
        return None
    return (f"crawl.render needs Chromium at {path}, which is missing: install it (Debian/Ubuntu: "
            "apt-get install chromium), or set WEBQA_CHROMIUM to its path")


_NOT_TEXT = ("script", "style", "noscript", "template", "head")


def rendered_text_problem(html: str) -> str | None:
    """Why a rendered page cannot be stored (it has no visible text), or None when it has some."""
    try:
        root = lxml_html.document_fromstring(html)
    except (ValueError, lxml_html.etree.ParserError):
        return "rendered page has no text (JavaScript rendering: the document is empty)"
    for element in list(root.iter(*_NOT_TEXT)):  # a list: dropping <head> mid-walk would end the walk
        element.drop_tree()
    if root.text_content().strip():
        return None
    return "rendered page has no text (JavaScript rendering: its scripts built nothing to read)"


class RenderFailed(Exception):
    """A page the browser could not render (timed out, crashed, refused); recorded as ``failed`` with its words."""

    outcome = "failed"
