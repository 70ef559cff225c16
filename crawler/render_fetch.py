"""A browser request of a rendered page, fetched by webqa at the address the SSRF guard checked.

Playwright's own fetcher (``route.fetch``) resolves the host again when it connects, so a name whose DNS answer
changes between the check and the connection (rebinding) reached whatever the second answer named. Here the
request goes to the checked address itself (the URL's host kept in ``Host`` and, for https, in the TLS server
name the certificate is verified against), with a time bound on the whole exchange and a size cap on the body;
``crawler/render_browser.py`` hands the result to the page (``route.fulfill``).

Through the operator's proxy (``http_proxy``, not bypassed by ``no_proxy``) the proxy connects, as for every
crawler request (SECURITY.md, "Proxies"): the request names the host and the proxy resolves it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import urllib.request
from http.cookiejar import CookieJar, DefaultCookiePolicy
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx

from crawler.render_decode import ACCEPT_ENCODING, BoundedDecoder, Over, Undecodable, Unsupported

# Request headers the client sets itself (from the URL and the body) or that concern one connection only.
_REQUEST_DROPPED = frozenset({
    "host", "content-length", "connection", "keep-alive", "proxy-connection", "proxy-authorization",
    "transfer-encoding", "te", "upgrade", "accept-encoding",
})
# Response headers that describe the bytes on the wire, not the (decoded) body handed to the page.
_RESPONSE_DROPPED = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive"})


class TooLarge(Exception):
    """A body over the cap, or one whose decoded size cannot be bounded (brotli, zstd, an unknown
    Content-Encoding): not read; the words say which URL, how much or which encoding, and which setting."""


class Unreadable(Exception):
    """A body that says it is gzip or deflate and is not: the words say which URL."""


@dataclass(frozen=True)
class Fetched:
    status: int
    headers: dict[str, str]
    body: bytes


def pinned_url(url: str, address: str | None) -> str:
    """``url`` with its host replaced by ``address`` (None: unchanged); the port stays what the URL says."""
    if address is None:
        return url
    parts = urlsplit(url)
    host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit((parts.scheme, host + port, parts.path or "/", parts.query, ""))


def host_header(url: str) -> str:
    """The ``Host`` a request for ``url`` carries: its host and an explicit port, no user info."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{parts.port}" if parts.port else host


def request_headers(headers: dict[str, str], url: str) -> dict[str, str]:
    """The browser's headers for ``url``, less those the client sets itself, with the URL's ``Host``."""
    kept = {k: v for k, v in headers.items() if k.lower() not in _REQUEST_DROPPED and not k.startswith(":")}
    kept["Host"] = host_header(url)
    # Only what crawler/render_decode.py decodes with a bound (httpx would otherwise offer br and zstd).
    kept["Accept-Encoding"] = ACCEPT_ENCODING
    return kept


# What names a user to a host: never sent on to another origin by a redirect (as a browser: the jar's cookies
# are per host, and Fetch drops Authorization on a cross-origin redirect).
_CREDENTIALS = frozenset({"cookie", "authorization", "proxy-authorization"})


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of ``url``, the port made explicit."""
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(parts.scheme)


def hop_headers(headers: dict[str, str], previous: str, target: str, cookie: str | None = None) -> dict[str, str]:
    """The headers sent to ``previous`` as sent on to ``target``, its redirect: unchanged on the same origin;
    on another, without cookies and credentials (``cookie``: the browser's own for ``target``, if any)."""
    if origin(target) == origin(previous):
        return headers
    kept = {k: v for k, v in headers.items() if k.lower() not in _CREDENTIALS}
    if cookie:
        kept["cookie"] = cookie
    return kept


def without_cookies_set(headers: dict[str, str]) -> dict[str, str]:
    """A response's headers less ``Set-Cookie``: handed to the page as the answer to another origin's URL, its
    cookies would be stored for that origin."""
    return {k: v for k, v in headers.items() if k.lower() != "set-cookie"}


def response_headers(headers: httpx.Headers) -> dict[str, str]:
    """The headers handed to the page: repeated ones joined (``Set-Cookie`` by newlines, as Playwright reads
    them: a cookie's date has commas), those of the wire's encoding dropped (the body is decoded)."""
    joined: dict[str, list[str]] = {}
    for name, value in headers.multi_items():
        if name.lower() not in _RESPONSE_DROPPED:
            joined.setdefault(name.lower(), []).append(value)
    return {name: ("\n" if name == "set-cookie" else ", ").join(values) for name, values in joined.items()}


def operator_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (none when ``no_proxy`` bypasses its host)."""
    proxies = urllib.request.getproxies_environment()
    scheme = urlsplit(url).scheme
    # Only the proxy named for the URL's scheme, as Scrapy's HttpProxyMiddleware: https never goes to http_proxy.
    server = proxies.get(scheme)
    host = urlsplit(url).hostname or ""
    if not server or urllib.request.proxy_bypass_environment(host, proxies):
        return None
    return server if "://" in server else f"http://{server}"


class PinnedFetcher:
    """One client per proxy (None: direct), made in the browser's event loop on first use."""

    def __init__(self, timeout: float, max_bytes: int) -> None:
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.clients: dict[str | None, httpx.AsyncClient] = {}

    def _client(self, proxy: str | None) -> httpx.AsyncClient:
        if proxy not in self.clients:
            # trust_env off: the proxy is chosen here per URL (a pinned URL's host is an address no_proxy
            # would not name); redirects are the caller's, each hop checked. No connection is kept: the pool
            # is keyed by address, and a TLS connection verified for one name must not carry another's request.
            # A jar that keeps nothing: the browser's cookies come with its headers; httpx's own jar would send
            # one page's cookies to every later request to that address, whatever the name or page.
            self.clients[proxy] = httpx.AsyncClient(
                proxy=proxy, trust_env=False, follow_redirects=False, timeout=httpx.Timeout(self.timeout),
                limits=httpx.Limits(max_keepalive_connections=0),
                cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])))
        return self.clients[proxy]

    async def fetch(self, method: str, url: str, headers: dict[str, str], body: bytes | None,
                    address: str | None) -> Fetched:
        """``method url`` at ``address`` (None: by name, when the guard is off or a proxy connects)."""
        proxy = operator_proxy(url)
        target = url if proxy is not None else pinned_url(url, address)
        extensions = {"sni_hostname": urlsplit(url).hostname} if target != url and url.startswith("https:") else {}
        request = self._client(proxy).build_request(method, target, headers=request_headers(headers, url),
                                                    content=body, extensions=extensions)
        return await asyncio.wait_for(self._send(request, url, proxy), self.timeout)

    async def _send(self, request: httpx.Request, url: str, proxy: str | None) -> Fetched:
        response = await self._client(proxy).send(request, stream=True)
        try:
            declared = response.headers.get("content-length", "")
            if self.max_bytes and declared.isdigit() and int(declared) > self.max_bytes:
                raise TooLarge(self._too_large(url, f"says it has {declared} bytes"))
            body = await self._read(response, url)
        finally:
            await response.aclose()
        return Fetched(response.status_code, response_headers(response.headers), body)

    async def _read(self, response: httpx.Response, url: str) -> bytes:
        """The body, decoded here from the raw bytes: no step holds more than the cap (on the wire or decoded)."""
        decoder = BoundedDecoder(response.headers.get("content-encoding", ""), self.max_bytes)
        parts, raw = [], 0
        try:
            async for part in response.aiter_raw():
                raw += len(part)
                if self.max_bytes and raw > self.max_bytes:
                    raise Over()
                parts.append(decoder.feed(part))
            parts.append(decoder.finish())
        except Over:
            raise TooLarge(self._too_large(url, f"passed {self.max_bytes} bytes")) from None
        except Unsupported as exc:
            raise TooLarge(f"response not read: {url} has {exc}") from None
        except Undecodable as exc:
            raise Unreadable(f"response not read: {url} has a {exc}") from None
        return b"".join(parts)

    def _too_large(self, url: str, how: str) -> str:
        return f"response too large: {url} {how}, more than {self.max_bytes} (DOWNLOAD_MAXSIZE, crawl.max_bytes)"

    async def close(self) -> None:
        for client in self.clients.values():
            await client.aclose()
        self.clients.clear()
