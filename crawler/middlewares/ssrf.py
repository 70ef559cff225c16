"""SSRF guard: never connect to loopback, private, link-local or otherwise non-public addresses.

A URL list (or a page's redirect, or a link followed at depth > 0) can point the crawler at
``http://169.254.169.254/`` (a cloud metadata service), ``http://127.0.0.1:6379/`` or an intranet
host whose public DNS name resolves to ``10.x``; the page text then lands in the database and in
LLM answers. The guard is on by default and has two parts:

* ``GuardedResolver`` (installed with ``TWISTED_DNS_RESOLVER``) checks every address a hostname
  resolves to, at the moment Twisted asks for it to connect. Twisted connects to exactly the
  address the resolver returned, so the check and the connection cannot be told apart by a DNS
  answer that changes in between (DNS rebinding). IP literals, decimal/octal/hex forms such as
  ``2130706433`` or ``0177.0.0.1`` included, pass through the resolver too and are checked there.
* ``SsrfGuardMiddleware`` (a downloader middleware ahead of robots.txt) checks every request,
  each redirect hop included, before any work is spent on it: IP literals directly, hostnames by
  resolving them through the same guarded resolver (the answer is then cached for the connection,
  which the resolver checks again). A blocked request is dropped with ``IgnoreRequest`` and
  recorded in ``fetch_log`` as *skipped* (a policy refusal, like robots.txt) with the reason,
  e.g. ``blocked: 127.0.0.1 is a loopback address (SSRF guard); set allow_private_networks to
  crawl private networks``. As a last line, a response whose peer address is not public is
  dropped too.

``WEBQA_ALLOW_PRIVATE_NETWORKS`` (the job's ``crawl.allow_private_networks``, the CLI's
``--allow-private-networks`` or the environment variable of the same name) switches the guard off
for intranet crawls and test suites.

The classification is a pure function (``address_problem``), tested exhaustively on its own.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import socket
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

from scrapy.exceptions import CannotResolveHostError, IgnoreRequest, NotConfigured
from scrapy.resolver import CachingThreadedResolver
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import defer
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IResolverSimple
from zope.interface import implementer

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings
    from twisted.internet.base import ReactorBase

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

SETTING = "WEBQA_ALLOW_PRIVATE_NETWORKS"
ENV_VAR = "WEBQA_ALLOW_PRIVATE_NETWORKS"
HINT = "set allow_private_networks to crawl private networks"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}

_SHARED = ipaddress.ip_network("100.64.0.0/10")  # RFC 6598, carrier-grade NAT
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # RFC 1122: "this host on this network"
_RFC1918 = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
_BROADCAST = ipaddress.ip_address("255.255.255.255")
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052 well-known prefix: embeds an IPv4 address
_METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
# What inet_aton (and so gethostbyname) reads as IPv4: 1 to 4 parts, each decimal, octal (0…) or hex (0x…).
_LEGACY_IPV4 = re.compile(r"^(?:0x[0-9a-f]*|\d+)(?:\.(?:0x[0-9a-f]*|\d+)){0,3}$", re.IGNORECASE)


# -- pure helpers -----------------------------------------------------------------------------------


def parse_flag(value: str | None) -> bool:
    """``1``/``true``/``yes``/``on`` → True, ``0``/``false``/``no``/``off``/empty/unset → False.

    Raises ValueError for anything else: a typo must not silently open (or keep closed) the guard.
    """
    text = (value or "").strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{ENV_VAR}={value!r}: use 1 to allow private networks or 0 to keep the SSRF guard on")


def env_allows_private_networks(environ: Mapping[str, str] | None = None) -> bool:
    """The operator's switch: ``WEBQA_ALLOW_PRIVATE_NETWORKS=1`` in the environment."""
    return parse_flag((os.environ if environ is None else environ).get(ENV_VAR))


def private_networks_allowed(settings: BaseSettings) -> bool:
    """Whether the guard is off for this crawl: the setting when given, else the environment, read now.

    `webqa` always gives the setting (``crawler.run`` has already rejected an unreadable environment
    value); under `scrapy crawl` only the environment can say so, and an unreadable value keeps the guard on.
    """
    if settings.getpriority(SETTING) is not None:
        return settings.getbool(SETTING)
    try:
        return env_allows_private_networks()
    except ValueError:
        return False


def parse_ip_host(host: str) -> IPAddress | None:
    """The address a URL host denotes by itself, or None for a name that needs DNS.

    Besides dotted quads and IPv6 (with or without brackets or a zone) this reads the forms the C
    library accepts, which URL parsers pass through as "hostnames": ``2130706433``, ``0x7f000001``,
    ``0177.0.0.1``, ``127.1`` are all 127.0.0.1.
    """
    text = host.strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.removesuffix(".")  # a fully qualified "127.0.0.1." is still 127.0.0.1
    if not text:
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if "%" in text:  # IPv6 zone ("fe80::1%eth0") in a form ipaddress does not take
        try:
            return ipaddress.ip_address(text.split("%", 1)[0])
        except ValueError:
            return None
    if _LEGACY_IPV4.match(text):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:  # a part out of range: not an address, and no resolver will make it one
            return None
    return None


def address_problem(ip: IPAddress) -> str | None:
    """Why ``ip`` must not be connected to ("a loopback address", …), or None when it is public."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:  # ::ffff:a.b.c.d reaches a.b.c.d on dual-stack sockets
            inner = address_problem(ip.ipv4_mapped)
            return f"an IPv4-mapped {_strip_article(inner)}" if inner else None
        if ip in _NAT64:  # a NAT64 gateway forwards to the embedded IPv4 address
            inner = address_problem(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
            return f"a NAT64 {_strip_article(inner)}" if inner else None
        if ip.sixtofour is not None:  # 2002:a.b.c.d::/48 is routed to a.b.c.d
            inner = address_problem(ip.sixtofour)
            if inner:
                return f"a 6to4 {_strip_article(inner)}"
        if ip.teredo is not None:
            return "a Teredo tunnel address"
    if ip.is_unspecified:
        return "an unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if ip in _METADATA:
        return "a link-local address (cloud metadata service)"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if isinstance(ip, ipaddress.IPv4Address):
        if ip in _SHARED:
            return "a shared address (carrier-grade NAT, 100.64.0.0/10)"
        if any(ip in net for net in _RFC1918):
            return "a private address"
        if ip in _THIS_NETWORK:
            return "a 'this network' address (0.0.0.0/8)"
        if ip == _BROADCAST:
            return "a broadcast address"
    else:
        if ip in _UNIQUE_LOCAL:
            return "a unique-local address"
        if ip.is_site_local:
            return "a site-local address"
    if ip.is_reserved:
        return "a reserved address"
    if ip.is_private or not ip.is_global:
        return "a special-purpose (non-public) address"
    return None


def _strip_article(phrase: str | None) -> str:
    text = phrase or ""
    for article in ("an ", "a "):
        if text.startswith(article):
            return text[len(article):]
    return text


def blocked_message(shown: str, problem: str) -> str:
    """The reason recorded for a blocked request; names the address and how to allow it."""
    return f"blocked: {shown} is {problem} (SSRF guard); {HINT}"


def check_address(address: str | IPAddress, *, shown: str | None = None) -> str | None:
    """The blocked message for a resolved address, or None when it may be connected to."""
    ip = address if isinstance(address, (ipaddress.IPv4Address, ipaddress.IPv6Address)) else ipaddress.ip_address(address)
    problem = address_problem(ip)
    if problem is None:
        return None
    return blocked_message(_label(shown, ip), problem)


def _label(shown: str | None, ip: IPAddress) -> str:
    """``127.0.0.1``, ``::ffff:127.0.0.1`` as written; ``localhost (127.0.0.1)``, ``0177.0.0.1 (127.0.0.1)``."""
    if not shown:
        return str(ip)
    try:
        ipaddress.ip_address(shown.strip("[]"))
    except ValueError:
        return f"{shown} ({ip})"
    return shown.strip("[]")


def proxy_hosts(proxies: Mapping[str, str] | None = None) -> frozenset[str]:
    """Hosts of the HTTP(S) proxies configured in the environment.

    The operator chose them, and they may well sit on a private network; the resolver must not cut
    the crawl off from its own proxy. This trust covers connecting *to the proxy* only: every
    request's target is still checked by ``SsrfGuardMiddleware`` (see SECURITY.md).
    """
    found = set()
    for scheme, url in (urllib.request.getproxies() if proxies is None else proxies).items():
        if scheme not in ("http", "https"):
            continue
        host = urlsplit(url if "://" in url else f"http://{url}").hostname
        if host:
            found.add(host.lower().rstrip("."))
    return frozenset(found)


class BlockedAddressError(DNSLookupError):
    """A hostname resolved to an address the guard refuses.

    A DNSLookupError so that Twisted's resolver adapter reports it quietly as "no address"
    (it logs any other exception as a bug) and the connection attempt fails before any packet.
    """

    def __init__(self, host: str, message: str) -> None:
        super().__init__(message)
        self.host = host
        self.message = message

    def __str__(self) -> str:
        return self.message


class BlockedRequest(IgnoreRequest):
    """A request the SSRF guard refused; recorded as ``skipped`` with ``message`` as the reason."""

    outcome = "skipped"


def installed_resolver() -> GuardedResolver | None:
    """The crawl's resolver: Twisted keeps one per reactor, and Scrapy installs ours there."""
    from twisted.internet import reactor

    resolver: Any = getattr(reactor, "resolver", None)
    return resolver if isinstance(resolver, GuardedResolver) else None


def blocked_reason_for_host(host: str | None, resolver: GuardedResolver | None = None) -> str | None:
    """Why the resolver (default: the installed one) refused ``host`` in this crawl, or None."""
    resolver = resolver or installed_resolver()
    return resolver.blocked_reason(host) if resolver is not None else None


# -- the resolver -----------------------------------------------------------------------------------


@implementer(IResolverSimple)
class GuardedResolver(CachingThreadedResolver):
    """Scrapy's default resolver (IPv4, cached, DNS_TIMEOUT) that refuses non-public addresses.

    Every answer is checked on its way out, cache hits included, so what Twisted connects to is
    always an address that passed the check.
    """

    def __init__(
        self,
        reactor: ReactorBase,
        cache_size: int,
        timeout: float,
        *,
        guard: bool = True,
        trusted_hosts: Iterable[str] = (),
    ) -> None:
        super().__init__(reactor, cache_size, timeout)
        self.guard = guard
        self.trusted_hosts = frozenset(h.lower().rstrip(".") for h in trusted_hosts)
        # Hostnames refused, with why: a failure that surfaces later as a plain DNS error (a
        # connection-time block after a changed DNS answer) can still be explained by the spider.
        self.blocked: dict[str, str] = {}

    def blocked_reason(self, host: str | None) -> str | None:
        return self.blocked.get(host.lower().rstrip(".")) if host else None

    @classmethod
    def from_crawler(cls, crawler: Crawler, reactor: ReactorBase) -> GuardedResolver:  # type: ignore[override]
        # `crawler` is the CrawlerProcess here (Scrapy builds the resolver before any Crawler);
        # only its settings are used.
        settings = crawler.settings
        cache_size = settings.getint("DNSCACHE_SIZE") if settings.getbool("DNSCACHE_ENABLED") else 0
        return cls(
            reactor,
            cache_size,
            settings.getfloat("DNS_TIMEOUT"),
            guard=not private_networks_allowed(settings),
            trusted_hosts=proxy_hosts(),
        )

    def is_trusted(self, name: str) -> bool:
        return name.lower().rstrip(".") in self.trusted_hosts

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> defer.Deferred[str]:
        if not self.guard or self.is_trusted(name):
            return super().getHostByName(name, timeout)
        return self.resolve_checked(name, timeout)

    def resolve_checked(self, name: str, timeout: Sequence[int] = ()) -> defer.Deferred[str]:
        """Resolve ``name`` and refuse a non-public answer, even for a trusted proxy's name.

        The middleware checks request *targets* with this: trust is for connecting to the proxy,
        never for fetching a URL whose host happens to be the proxy's (``no_proxy`` sends it direct).
        """
        literal = parse_ip_host(name)
        if literal is not None:
            message = check_address(literal, shown=name)
            if message is not None:
                return defer.fail(self._blocked(name, message))
        d = super().getHostByName(name, timeout)
        d.addCallback(self._check, name)
        return d

    def _check(self, address: str, name: str) -> str:
        try:
            message = check_address(address, shown=name)
        except ValueError:  # not an address at all: nothing we could safely connect to
            message = blocked_message(name, f"resolved to {address!r}, which is not an IP address")
        if message is not None:
            raise self._blocked(name, message)
        return address

    def _blocked(self, name: str, message: str) -> BlockedAddressError:
        self.blocked[name.lower().rstrip(".")] = message
        log.debug("SSRF guard: %s", message)
        return BlockedAddressError(name, message)


# -- the middleware ---------------------------------------------------------------------------------


class SsrfGuardMiddleware:
    """Refuse every request (redirect hops included) whose host is or resolves to a non-public address.

    Sits before robots.txt so that a blocked host costs no robots.txt request either.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SsrfGuardMiddleware:
        if private_networks_allowed(crawler.settings):
            raise NotConfigured("allow_private_networks is on: SSRF guard off")
        return cls(crawler)

    async def process_request(self, request: Request) -> None:
        parts = urlsplit(request.url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            # The download handlers for file:, data:, ftp: and s3: are off anyway; say so in words.
            self._refuse(request, f"blocked: {scheme}: URLs are never fetched, only http and https")
        host = parts.hostname
        if not host:
            return None
        # The target is checked whatever the proxy variables say: with a proxy the connection goes to
        # the proxy, which would fetch a private target for us; with no_proxy it goes straight there.
        resolver = self._resolver()
        literal = parse_ip_host(host)
        if literal is not None:
            message = check_address(literal, shown=host)
            if message is not None:
                self._refuse(request, message)
            return None
        if resolver is None:
            # Without the guarded resolver a hostname's address cannot be checked where it counts
            # (at connect time): fail closed rather than crawl unguarded.
            self._refuse(
                request,
                "blocked: the SSRF guard cannot check addresses because TWISTED_DNS_RESOLVER is not "
                f"crawler.middlewares.ssrf.GuardedResolver; {HINT}",
            )
        try:
            await maybe_deferred_to_future(resolver.resolve_checked(host))
        except BlockedAddressError as exc:
            self._refuse(request, exc.message)
        except DNSLookupError as exc:
            # The download would fail the same way; report it as the downloader does (and retry).
            raise CannotResolveHostError(str(exc)) from None
        return None

    def process_response(self, request: Request, response: Response) -> Response:
        """Last line: drop a response that came from a non-public peer (no proxy in between)."""
        peer = getattr(response, "ip_address", None)
        if peer is None or request.meta.get("proxy"):
            return response
        message = check_address(peer, shown=urlsplit(request.url).hostname or None)
        if message is not None:
            self._refuse(request, message)
        return response

    def _refuse(self, request: Request, message: str) -> NoReturn:
        if self.stats is not None:
            self.stats.inc_value("webqa/ssrf/blocked")
        log.info("SSRF guard: not fetching %s: %s", request.url, message)
        raise BlockedRequest(message)

    @staticmethod
    def _resolver() -> GuardedResolver | None:
        resolver = installed_resolver()
        return resolver if resolver is not None and resolver.guard else None
