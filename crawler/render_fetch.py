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
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx

# Request headers the client sets itself (from the URL and the body) or that concern one connection only.
_REQUEST_DROPPED = frozenset({
    "host", "content-length", "connection", "keep-alive", "proxy-connection", "proxy-authorization",
    "transfer-encoding", "te", "upgrade", "accept-encoding",
})
# Response headers that describe the bytes on the wire, not the (decoded) body handed to the page.
_RESPONSE_DROPPED = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive"})


class TooLarge(Exception):
    """A body over the cap: the words say which URL, how much and which setting."""


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
    return kept


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
    server = proxies.get(scheme) or proxies.get("http")
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
            self.clients[proxy] = httpx.AsyncClient(
                proxy=proxy, trust_env=False, follow_redirects=False, timeout=httpx.Timeout(self.timeout),
                limits=httpx.Limits(max_keepalive_connections=0))
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
            parts, size = [], 0
            async for part in response.aiter_bytes():
                size += len(part)
                if self.max_bytes and size > self.max_bytes:
                    raise TooLarge(self._too_large(url, f"passed {self.max_bytes} bytes"))
                parts.append(part)
        finally:
            await response.aclose()
        return Fetched(response.status_code, response_headers(response.headers), b"".join(parts))

    def _too_large(self, url: str, how: str) -> str:
        return f"response too large: {url} {how}, more than {self.max_bytes} (DOWNLOAD_MAXSIZE, crawl.max_bytes)"

    async def close(self) -> None:
        for client in self.clients.values():
            await client.aclose()
        self.clients.clear()
