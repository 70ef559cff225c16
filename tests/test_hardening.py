"""Hardening: SSRF guard, Retry-After, size and time limits, junk input, YAML bombs.

Every behaviour is shown against a hostile server on loopback: the test site's ``handler=`` routes
answer whatever a hostile server would (503 then 200, decompression bombs, binary as text/html,
trickled bytes). Crawls run as subprocesses (Twisted's reactor cannot restart); the server's
request log is the witness of what reached it. The pure parts (address classifier, Retry-After
parsing, failure descriptions) and the middleware/resolver wiring are unit-tested with Scrapy
Request objects, since on a loopback-only test site every host is private.

robots.txt per RFC 9309 is covered by tests/test_robots.py.
"""

from __future__ import annotations

import codecs
import email.utils
import ipaddress
import os
import random
import signal
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from scrapy import Request
from scrapy.exceptions import CannotResolveHostError, IgnoreRequest, NotConfigured
from scrapy.http import HtmlResponse, Response
from twisted.internet import defer
from twisted.internet.error import DNSLookupError
from twisted.python.failure import Failure

from crawler.middlewares import ssrf
from crawler.middlewares.retry_after import RetryAfterMiddleware, RetryAfterTooLong, parse_retry_after
from crawler.middlewares.ssrf import (
    BlockedAddressError,
    BlockedRequest,
    GuardedResolver,
    SsrfGuardMiddleware,
    address_problem,
    parse_ip_host,
)
from crawler.run import CrawlOptions, crawl_settings
from crawler.spiders.urls import describe_failure
from jobs.errors import ConfigError
from pipelines import extraction
from tests.site_server import RequestInfo, SiteServer
from tests.support.crawling import REPO, fetch_log, maxrss_mb, ok, page, pages, rows, summary
from tests.support.crawling import crawl_api as run_crawl_api

HINT = "(SSRF guard); set allow_private_networks to crawl private networks"
MB = 1024 * 1024


def blocked(shown: str, what: str) -> str:
    return f"blocked: {shown} is {what} {HINT}"


# -- running crawls ---------------------------------------------------------------------------------


def environment(*, guard: bool) -> dict[str, str]:
    """The test environment, with the SSRF guard on (variable removed) or off (as conftest sets it)."""
    env = dict(os.environ)
    env.pop("WEBQA_ALLOW_PRIVATE_NETWORKS", None)
    if not guard:
        env["WEBQA_ALLOW_PRIVATE_NETWORKS"] = "1"
    return env


def cli(*args: str, guard: bool = False, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", *args], cwd=REPO, capture_output=True, text=True,
        timeout=timeout, env=environment(guard=guard),
    )


def crawl_cli(urls: list[str], db: Path, *, guard: bool = False, delay: float = 0) -> subprocess.CompletedProcess[str]:
    return cli("crawl", *urls, "--db", str(db), "--delay", str(delay), guard=guard)


def crawl_api(db: Path, *, guard: bool = False, **options: Any) -> subprocess.CompletedProcess[str]:
    return run_crawl_api(db, env=environment(guard=guard), **options)


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("Error:")]


# == 3. SSRF guard ==================================================================================

# -- the address classifier ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        # loopback, both families, anywhere in 127/8
        ("127.0.0.1", "a loopback address"),
        ("127.0.0.2", "a loopback address"),
        ("127.255.255.254", "a loopback address"),
        ("::1", "a loopback address"),
        # RFC 1918
        ("10.0.0.1", "a private address"),
        ("10.255.255.255", "a private address"),
        ("172.16.0.1", "a private address"),
        ("172.31.255.254", "a private address"),
        ("192.168.1.1", "a private address"),
        # link-local, the metadata service by name
        ("169.254.0.1", "a link-local address"),
        ("169.254.169.254", "a link-local address (cloud metadata service)"),
        ("fe80::1", "a link-local address"),
        ("fd00:ec2::254", "a link-local address (cloud metadata service)"),
        # shared (carrier-grade NAT)
        ("100.64.0.1", "a shared address (carrier-grade NAT, 100.64.0.0/10)"),
        ("100.127.255.254", "a shared address (carrier-grade NAT, 100.64.0.0/10)"),
        # multicast, unspecified, broadcast, reserved, "this network"
        ("224.0.0.1", "a multicast address"),
        ("239.255.255.250", "a multicast address"),
        ("ff02::1", "a multicast address"),
        ("0.0.0.0", "an unspecified address"),
        ("::", "an unspecified address"),
        ("0.1.2.3", "a 'this network' address (0.0.0.0/8)"),
        ("255.255.255.255", "a broadcast address"),
        ("240.0.0.1", "a reserved address"),
        # IPv6 unique-local and site-local
        ("fc00::1", "a unique-local address"),
        ("fd12:3456:789a::1", "a unique-local address"),
        ("fec0::1", "a site-local address"),
        # IPv4 inside IPv6
        ("::ffff:10.0.0.1", "an IPv4-mapped private address"),
        ("::ffff:127.0.0.1", "an IPv4-mapped loopback address"),
        ("::ffff:169.254.169.254", "an IPv4-mapped link-local address (cloud metadata service)"),
        ("64:ff9b::7f00:1", "a NAT64 loopback address"),
        ("64:ff9b::a00:1", "a NAT64 private address"),
        ("2002:7f00:1::", "a 6to4 loopback address"),
        ("2002:c0a8:101::1", "a 6to4 private address"),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "a Teredo tunnel address"),
        ("::7f00:1", "a reserved address"),  # IPv4-compatible (deprecated)
        # other special-purpose ranges
        ("192.0.2.1", "a special-purpose (non-public) address"),  # TEST-NET-1
        ("198.18.0.1", "a special-purpose (non-public) address"),  # benchmarking
        ("2001:db8::1", "a special-purpose (non-public) address"),  # documentation
    ],
)
def test_non_public_addresses_are_blocked(address: str, problem: str) -> None:
    assert address_problem(ipaddress.ip_address(address)) == problem


@pytest.mark.parametrize(
    "address",
    ["93.184.215.14", "8.8.8.8", "1.1.1.1", "172.15.255.255", "172.32.0.1", "100.63.255.255", "100.128.0.1",
     "192.169.0.1", "11.0.0.1", "2606:4700:4700::1111", "2a00:1450:4001:80b::200e", "::ffff:8.8.8.8",
     "64:ff9b::808:808", "2002:808:808::1"],
)
def test_public_addresses_are_allowed(address: str) -> None:
    assert address_problem(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]", "::1"),
        ("::1", "::1"),
        ("fe80::1%eth0", "fe80::1%eth0"),  # with its zone
        ("127.0.0.1.", "127.0.0.1"),  # fully qualified
        # The forms the C library's inet_aton reads (and gethostbyname resolves without DNS):
        ("2130706433", "127.0.0.1"),  # one decimal number
        ("0x7f000001", "127.0.0.1"),  # one hex number
        ("017700000001", "127.0.0.1"),  # one octal number
        ("0177.0.0.1", "127.0.0.1"),  # octal part
        ("0x7f.0.0.1", "127.0.0.1"),  # hex part
        ("127.1", "127.0.0.1"),  # shortened
        ("10.1", "10.0.0.1"),
        ("0", "0.0.0.0"),
        ("3232235777", "192.168.1.1"),
    ],
)
def test_ip_literal_forms_are_read_as_the_c_library_reads_them(host: str, address: str) -> None:
    parsed = parse_ip_host(host)
    assert parsed == ipaddress.ip_address(address)
    assert address_problem(parsed) is not None  # and every one of them is blocked


@pytest.mark.parametrize("host", ["example.org", "localhost", "1e100.net", "0x", "256.256.256.256.256", "deadbeef", ""])
def test_names_are_not_ip_literals(host: str) -> None:
    assert parse_ip_host(host) is None


def test_flag_values() -> None:
    assert [ssrf.parse_flag(v) for v in ("1", "true", "YES", " on ")] == [True] * 4
    assert [ssrf.parse_flag(v) for v in (None, "", "0", "false", "No", "off")] == [False] * 6
    with pytest.raises(ValueError, match="WEBQA_ALLOW_PRIVATE_NETWORKS='maybe': use 1"):
        ssrf.parse_flag("maybe")


def test_allow_private_networks_option_and_environment_reach_the_settings(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    def setting(**options: Any) -> bool:
        return crawl_settings(CrawlOptions(**options), tmp_path / "w.duckdb", {})["WEBQA_ALLOW_PRIVATE_NETWORKS"]

    monkeypatch.delenv("WEBQA_ALLOW_PRIVATE_NETWORKS", raising=False)
    assert CrawlOptions().allow_private_networks is False
    assert setting() is False  # on by default
    assert setting(allow_private_networks=True) is True
    monkeypatch.setenv("WEBQA_ALLOW_PRIVATE_NETWORKS", "1")
    assert setting() is True
    monkeypatch.setenv("WEBQA_ALLOW_PRIVATE_NETWORKS", "0")
    assert setting() is False
    monkeypatch.setenv("WEBQA_ALLOW_PRIVATE_NETWORKS", "sometimes")
    with pytest.raises(ConfigError, match="WEBQA_ALLOW_PRIVATE_NETWORKS='sometimes'"):
        setting()


# -- the resolver: check and connect are one step ------------------------------------------------


class ScriptedDns:
    """Stands in for the system resolver under GuardedResolver: answers in turn, like a rebinding DNS."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    def __call__(self, name: str, timeout: Any = ()) -> defer.Deferred[str]:  # patched onto the class, unbound
        self.asked.append(name)
        return defer.succeed(self.answers.pop(0))


def resolve(resolver: GuardedResolver, name: str) -> str | BlockedAddressError:
    outcome: list[Any] = []
    resolver.getHostByName(name).addCallbacks(outcome.append, lambda f: outcome.append(f.value))
    assert len(outcome) == 1  # scripted answers fire at once
    return outcome[0]


def test_resolver_checks_every_answer_so_a_changed_dns_answer_cannot_get_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dns = ScriptedDns("93.184.215.14", "127.0.0.1", "10.1.2.3", "93.184.215.14")
    monkeypatch.setattr(ssrf.CachingThreadedResolver, "getHostByName", dns)
    resolver = GuardedResolver(None, cache_size=0, timeout=5)  # type: ignore[arg-type]

    assert resolve(resolver, "rebind.example") == "93.184.215.14"  # the first answer is public…
    second = resolve(resolver, "rebind.example")  # …the next, at connect time, is not: refused
    assert isinstance(second, BlockedAddressError) and isinstance(second, DNSLookupError)
    assert str(second) == blocked("rebind.example (127.0.0.1)", "a loopback address")
    assert str(resolve(resolver, "rebind.example")) == blocked("rebind.example (10.1.2.3)", "a private address")
    assert resolve(resolver, "rebind.example") == "93.184.215.14"
    # A refusal later seen as a plain DNS failure is still explained.
    assert ssrf.blocked_reason_for_host("REBIND.example.", resolver) == str(second).replace("127.0.0.1", "10.1.2.3").replace(
        "loopback", "private")
    # IP literals (any form) are refused without asking anyone.
    assert str(resolve(resolver, "2130706433")) == blocked("2130706433 (127.0.0.1)", "a loopback address")
    assert str(resolve(resolver, "169.254.169.254")) == blocked(
        "169.254.169.254", "a link-local address (cloud metadata service)")
    assert dns.asked == ["rebind.example"] * 4


def test_resolver_checks_cached_answers_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from scrapy.resolver import dnscache

    monkeypatch.setattr(dnscache, "limit", dnscache.limit)  # restored afterwards
    resolver = GuardedResolver(None, cache_size=100, timeout=5)  # type: ignore[arg-type]
    monkeypatch.setitem(dnscache, "cached.example", "192.168.0.10")  # e.g. cached by an earlier lookup
    assert str(resolve(resolver, "cached.example")) == blocked("cached.example (192.168.0.10)", "a private address")


def test_resolver_guard_off_and_trusted_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ssrf.CachingThreadedResolver, "getHostByName", ScriptedDns("127.0.0.1", "10.0.0.8"))
    assert resolve(GuardedResolver(None, 0, 5, guard=False), "intranet.example") == "127.0.0.1"  # type: ignore[arg-type]
    proxied = GuardedResolver(None, 0, 5, trusted_hosts=ssrf.proxy_hosts(  # type: ignore[arg-type]
        {"http": "http://proxy.corp:3128", "https": "proxy.corp:3128", "no": "x"}))
    assert proxied.trusted_hosts == {"proxy.corp"}
    assert resolve(proxied, "proxy.corp") == "10.0.0.8"


def test_resolver_is_the_installed_default() -> None:
    from crawler import settings

    assert settings.TWISTED_DNS_RESOLVER == "crawler.middlewares.ssrf.GuardedResolver"
    assert settings.DOWNLOADER_MIDDLEWARES["crawler.middlewares.ssrf.SsrfGuardMiddleware"] < (
        settings.DOWNLOADER_MIDDLEWARES["crawler.middlewares.robots.RobotsPolicyMiddleware"])


# -- the middleware: every request and every redirect hop ----------------------------------------


def guard_middleware(monkeypatch: pytest.MonkeyPatch, *answers: str) -> SsrfGuardMiddleware:
    from scrapy.utils.test import get_crawler

    monkeypatch.setattr(ssrf.CachingThreadedResolver, "getHostByName", ScriptedDns(*answers))
    resolver = GuardedResolver(None, 0, 5)  # type: ignore[arg-type]
    monkeypatch.setattr(SsrfGuardMiddleware, "_resolver", staticmethod(lambda: resolver))
    # No reactor runs in this process; a fired Deferred can be awaited as it is.
    monkeypatch.setattr(ssrf, "maybe_deferred_to_future", lambda d: d)
    return SsrfGuardMiddleware.from_crawler(get_crawler(settings_dict={"WEBQA_ALLOW_PRIVATE_NETWORKS": False}))


def run(coro: Any) -> Any:
    """Drive a middleware coroutine whose awaits are already-fired Deferreds."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("the coroutine waited for something")


def test_middleware_blocks_a_redirect_hop_to_a_private_address(monkeypatch: pytest.MonkeyPatch) -> None:
    from scrapy.downloadermiddlewares.redirect import RedirectMiddleware
    from scrapy.utils.test import get_crawler

    guard = guard_middleware(monkeypatch, "93.184.215.14", "93.184.215.14")
    redirects = RedirectMiddleware.from_crawler(get_crawler())
    first = Request("https://docs.example/page")
    assert run(guard.process_request(first)) is None  # a public host: on its way

    hops = {
        "http://169.254.169.254/latest/meta-data/": blocked("169.254.169.254", "a link-local address (cloud metadata service)"),
        "http://[::ffff:10.0.0.1]/admin": blocked("::ffff:10.0.0.1", "an IPv4-mapped private address"),
        "http://0177.0.0.1:6379/": blocked("0177.0.0.1 (127.0.0.1)", "a loopback address"),
        "http://0.0.0.0:8080/": blocked("0.0.0.0", "an unspecified address"),
    }
    for location, reason in hops.items():
        response = HtmlResponse(first.url, status=302, headers={"Location": location}, request=first)
        hop = redirects.process_response(first, response)
        assert isinstance(hop, Request) and hop.meta["redirect_times"] == 1
        with pytest.raises(BlockedRequest) as info:
            run(guard.process_request(hop))
        assert str(info.value) == reason

    # A hostname hop whose DNS answer is private is refused the same way.
    response = HtmlResponse(first.url, status=301, headers={"Location": "http://intranet.docs.example/"}, request=first)
    hop = redirects.process_response(first, response)
    monkeypatch.setattr(ssrf.CachingThreadedResolver, "getHostByName", ScriptedDns("10.20.30.40"))
    with pytest.raises(BlockedRequest, match=r"^blocked: intranet\.docs\.example \(10\.20\.30\.40\) is a private"):
        run(guard.process_request(hop))


def test_redirect_to_a_file_url_is_not_followed_and_never_fetched(monkeypatch: pytest.MonkeyPatch) -> None:
    from scrapy.downloadermiddlewares.redirect import RedirectMiddleware
    from scrapy.utils.test import get_crawler

    redirects = RedirectMiddleware.from_crawler(get_crawler())
    request = Request("https://docs.example/page")
    response = HtmlResponse(request.url, status=302, headers={"Location": "file:///etc/passwd"}, request=request)
    assert redirects.process_response(request, response) is response  # not followed
    guard = guard_middleware(monkeypatch)
    for url in ("file:///etc/passwd", "ftp://docs.example/x", "data:text/html,hi"):
        with pytest.raises(BlockedRequest, match=r"URLs are never fetched, only http and https"):
            run(guard.process_request(Request(url)))


def test_middleware_drops_a_response_from_a_private_peer_and_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    guard = guard_middleware(monkeypatch)
    request = Request("https://docs.example/page")
    public = Response(request.url, ip_address=ipaddress.ip_address("93.184.215.14"), request=request)
    assert guard.process_response(request, public) is public
    private = Response(request.url, ip_address=ipaddress.ip_address("192.168.7.7"), request=request)
    with pytest.raises(BlockedRequest, match=r"docs\.example \(192\.168\.7\.7\) is a private address"):
        guard.process_response(request, private)
    # Without the guarded resolver installed, hostnames cannot be checked at connect time: refuse.
    monkeypatch.setattr(SsrfGuardMiddleware, "_resolver", staticmethod(lambda: None))
    with pytest.raises(BlockedRequest, match="TWISTED_DNS_RESOLVER"):
        run(guard.process_request(Request("https://docs.example/other")))


def test_middleware_reports_dns_failures_as_the_downloader_does(monkeypatch: pytest.MonkeyPatch) -> None:
    guard = guard_middleware(monkeypatch)
    monkeypatch.setattr(ssrf.CachingThreadedResolver, "getHostByName",
                        lambda self, name, timeout=(): defer.fail(DNSLookupError(f"address {name!r} not found")))
    with pytest.raises(CannotResolveHostError):  # retried, then recorded as "DNS lookup failed"
        run(guard.process_request(Request("https://nonexistent.invalid/")))


def test_middleware_is_off_when_private_networks_are_allowed() -> None:
    from scrapy.utils.test import get_crawler

    with pytest.raises(NotConfigured):
        SsrfGuardMiddleware.from_crawler(get_crawler(settings_dict={"WEBQA_ALLOW_PRIVATE_NETWORKS": True}))


def test_failures_are_described_with_their_outcome() -> None:
    resolver = GuardedResolver(None, cache_size=0, timeout=5)  # type: ignore[arg-type]

    def described(exc: BaseException, url: str = "http://x.example/") -> tuple[str, str]:
        failure = Failure(exc)
        failure.request = Request(url)  # type: ignore[attr-defined]
        return describe_failure(failure, 5, resolver)

    assert described(BlockedRequest(blocked("127.0.0.1", "a loopback address"))) == (
        "skipped", blocked("127.0.0.1", "a loopback address"))
    assert described(RetryAfterTooLong("Retry-After too long: …")) == ("failed", "Retry-After too long: …")
    from scrapy.utils._compression import _DecompressionMaxSizeExceeded

    try:
        try:
            raise _DecompressionMaxSizeExceeded(10_551_296, 10_485_760)
        except _DecompressionMaxSizeExceeded as cause:
            raise IgnoreRequest("Ignored response <200 http://x.example/> because …") from cause
    except IgnoreRequest as exc:
        assert described(exc) == ("failed", "response too large: more than 10485760 bytes after decompression "
                                            "(DOWNLOAD_MAXSIZE; 10551296 bytes when stopped)")
    # A host the resolver refused at connect time shows up as a DNS failure: explained, not "DNS lookup failed".
    resolver._blocked("late-rebind.example", blocked("late-rebind.example (10.0.0.1)", "a private address"))
    assert described(CannotResolveHostError("no"), "http://late-rebind.example/x") == (
        "skipped", blocked("late-rebind.example (10.0.0.1)", "a private address"))
    assert described(CannotResolveHostError("no"), "http://other.example/x") == ("failed", "DNS lookup failed")


# -- crawls with the guard on --------------------------------------------------------------------


def test_guard_blocks_loopback_before_any_request_and_the_option_opens_it(site: SiteServer, tmp_path: Path) -> None:
    site.add(0, "/a.html", page("Alpha"))
    site.add(1, "/b.html", page("Beta"))
    port = site.port
    urls = {
        site.url(0, "/a.html"): blocked("127.0.0.1", "a loopback address"),
        site.url(1, "/b.html"): blocked("127.0.0.2", "a loopback address"),
        f"http://2130706433:{port}/a.html": blocked("2130706433 (127.0.0.1)", "a loopback address"),
        f"http://0177.0.0.1:{port}/a.html": blocked("0177.0.0.1 (127.0.0.1)", "a loopback address"),
        f"http://localhost:{port}/a.html": blocked("localhost (127.0.0.1)", "a loopback address"),
        f"http://[::1]:{port}/a.html": blocked("::1", "a loopback address"),
        f"http://[::ffff:127.0.0.1]:{port}/a.html": blocked("::ffff:127.0.0.1", "an IPv4-mapped loopback address"),
        f"http://0.0.0.0:{port}/a.html": blocked("0.0.0.0", "an unspecified address"),
    }
    db = tmp_path / "guarded.duckdb"

    started = time.monotonic()
    result = ok(crawl_cli([*urls, "file:///etc/passwd"], db, guard=True), 3)  # nothing could be fetched

    assert time.monotonic() - started < 30
    assert site.log == []  # not a single request reached the server, robots.txt included
    log = fetch_log(db)
    assert {url: (outcome, reason) for url, (outcome, reason, _) in log.items() if url in urls} == {
        url: ("skipped", reason) for url, reason in urls.items()
    }
    # A rejected argument is recorded as where it was and why, never its content (it may carry a password).
    assert log["argument 9"][:2] == ("skipped", "unsupported scheme 'file'; only http and https are fetched")
    assert pages(db) == {}
    # One line naming the refused URLs and the switch that allows them (under -q it is all cron mails).
    (error,) = error_lines(result)
    assert error.startswith(f"Error: no URL could be fetched (0 failed, {len(urls) + 1} skipped): "
                            f"{len(urls)} URLs could not be fetched: ")
    assert f" and {len(urls) - 5} more; every failed URL is on a private or loopback address" in error
    assert error.endswith("set crawl.allow_private_networks: true in the job (or pass --allow-private-networks)")

    # The job key / CLI flag (CrawlOptions.allow_private_networks) opens the guard on purpose, without
    # the environment variable.
    ok(crawl_api(db, guard=True, urls=[site.url(0, "/a.html"), site.url(1, "/b.html")],
                    allow_private_networks=True), 0)
    assert set(pages(db)) == {site.url(0, "/a.html"), site.url(1, "/b.html")}

    # A value of the environment variable that means neither on nor off is one line, exit 2.
    bad = subprocess.run([sys.executable, "-m", "jobs.cli", "crawl", site.url(0, "/a.html"), "--db", str(db)],
                         cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={**environment(guard=True), "WEBQA_ALLOW_PRIVATE_NETWORKS": "perhaps"})
    ok(bad, 2)
    assert error_lines(bad) == ["Error: WEBQA_ALLOW_PRIVATE_NETWORKS='perhaps': use 1 to allow private networks "
                                "or 0 to keep the SSRF guard on"]


def test_redirect_to_file_url_is_recorded_and_not_followed(site: SiteServer, tmp_path: Path) -> None:
    site.redirect(0, "/to-passwd.html", "file:///etc/passwd", status=302)
    site.add(0, "/good.html", page("Good"))
    db = tmp_path / "w.duckdb"
    urls = [site.url(0, "/to-passwd.html"), site.url(0, "/good.html")]

    ok(crawl_cli(urls, db), 1)

    assert fetch_log(db)[urls[0]][:2] == (
        "failed", "redirect to file:///etc/passwd not followed: only http and https are fetched")
    assert set(pages(db)) == {urls[1]}
    assert not rows(db, "SELECT url FROM pages WHERE text LIKE '%root:%'")


# == 2. Retry-After ===================================================================================


def test_parse_retry_after() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after(b"1", now) == 1.0
    assert parse_retry_after(" 120 ", now) == 120.0
    assert parse_retry_after(b"0", now) == 0.0
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), now) == 30.0
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now) == 0.0  # in the past: now
    for unreadable in (None, b"", b"-5", b"1.5", b"soon", b"Mon, 99 Foo 2024 99:99:99 GMT"):
        assert parse_retry_after(unreadable, now) is None


def test_retry_after_middleware_waits_gives_up_and_stays_bounded() -> None:
    from scrapy.settings import Settings

    settings = Settings({"RETRY_TIMES": 2, "RETRY_HTTP_CODES": [500, 503, 429], "RETRY_ENABLED": True,
                         "RETRY_PRIORITY_ADJUST": -1, "RETRY_EXCEPTIONS": [], "RETRY_GIVE_UP_LOG_LEVEL": "DEBUG",
                         "WEBQA_MAX_RETRY_AFTER": 60})
    mw = RetryAfterMiddleware(settings)
    spider = SimpleNamespace(crawler=SimpleNamespace(settings=settings, stats=SimpleNamespace(inc_value=lambda *a, **k: None)))
    mw.crawler = SimpleNamespace(spider=spider, stats=None, engine=None)  # type: ignore[assignment]
    request = Request("https://busy.example/page")

    def answer(status: int, retry_after: str | None, req: Request = request) -> Any:
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        return mw.process_response(req, Response(req.url, status=status, headers=headers, request=req))

    retry = answer(503, "2")
    assert isinstance(retry, Request) and retry.meta["retry_times"] == 1
    assert 1.9 < mw._paused_until["busy.example"] - time.monotonic() <= 2.0  # the host waits too
    with pytest.raises(RetryAfterTooLong) as info:
        answer(429, "3600")
    assert str(info.value) == ("Retry-After too long: HTTP 429 asked to wait 3600 s, more than the 60 s webqa "
                               "waits (WEBQA_MAX_RETRY_AFTER); not retried")
    # Bounded by RETRY_TIMES whatever the server says: the last answer is passed on (and recorded).
    last = Request(request.url, meta={"retry_times": 2})
    response = answer(503, "1", last)
    assert isinstance(response, Response) and response.status == 503
    assert isinstance(answer(500, None), Request)  # other statuses: Scrapy's behaviour
    assert answer(404, "5").status == 404


def test_retry_after_pauses_the_hosts_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    from scrapy.core.downloader import Slot
    from scrapy.settings import Settings

    slot = Slot(concurrency=1, delay=0.0, jitter=0)
    downloader = SimpleNamespace(slots={"busy.example": slot}, get_slot_key=lambda r: "busy.example")
    mw = RetryAfterMiddleware(Settings({"RETRY_HTTP_CODES": [503, 429]}))
    mw.crawler = SimpleNamespace(engine=SimpleNamespace(downloader=downloader), stats=None)  # type: ignore[assignment]
    request = Request("https://busy.example/a")
    mw._response_downloaded(Response(request.url, status=503, headers={"Retry-After": "5"}), request)
    # Requests already waiting in the host's queue wait too: the slot's delay logic holds them.
    assert slot.delay > 0 and 4.9 < slot.delay - time.monotonic() + slot.lastseen <= 5.0


def test_retry_after_is_honoured_on_the_wire(site: SiteServer, tmp_path: Path) -> None:
    answered: dict[str, int] = {}
    lock = threading.Lock()

    def busy_then_ok(path: str, status: int, retry_after: str) -> Any:
        def handler(info: RequestInfo) -> tuple[int, dict[str, str], bytes]:
            with lock:
                answered[path] = answered.get(path, 0) + 1
                first = answered[path] == 1
            if first:
                return status, {"Retry-After": retry_after, "Content-Type": "text/html"}, b"<h1>busy</h1>"
            return 200, {"Content-Type": "text/html; charset=utf-8"}, page(path.strip("/")).encode()
        return handler

    site.add(0, "/busy.html", handler=busy_then_ok("/busy.html", 503, "1"))
    site.add(0, "/next.html", page("Next"))  # same host: waits for the pause as well
    site.add(1, "/throttled.html", handler=busy_then_ok("/throttled.html", 429, "1"))
    site.add(1, "/gone-for-an-hour.html", status=503, headers={"Retry-After": "3600"}, body="<h1>later</h1>")
    db = tmp_path / "w.duckdb"
    urls = [site.url(0, "/busy.html"), site.url(0, "/next.html"), site.url(1, "/throttled.html"),
            site.url(1, "/gone-for-an-hour.html")]

    started = time.monotonic()
    # A small delay: with none at all Scrapy 2.19 may start two requests to one host at the same
    # instant, and a pause can only hold back what has not left yet.
    result = ok(crawl_cli(urls, db, delay=0.2), 1)

    assert time.monotonic() - started < 30  # nobody waited an hour
    for host, path in ((0, "/busy.html"), (1, "/throttled.html")):
        first, retry = site.requests_for(host, path)
        assert first.status in (503, 429) and retry.status == 200
        assert retry.time - first.time >= 1.0, (path, retry.time - first.time)
    # The host's other page did not go out during the pause either.
    busy = site.requests_for(0, "/busy.html")[0]
    (following,) = site.requests_for(0, "/next.html")
    assert following.time - busy.time >= 1.0
    assert len(site.requests_for(1, "/gone-for-an-hour.html")) == 1  # given up at once
    assert set(pages(db)) == {urls[0], urls[1], urls[2]}
    assert fetch_log(db)[urls[3]] == (
        "failed", "Retry-After too long: HTTP 503 asked to wait 3600 s, more than the 60 s webqa waits "
                  "(WEBQA_MAX_RETRY_AFTER); not retried", None)
    counts = summary(result)
    assert (counts["fetched"], counts["failed"]) == (3, 1)


# == 4. Size and time =================================================================================

ZEROS_20MB = bytes(20 * MB)


def gzip_bytes(data: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    return compressor.compress(data) + compressor.flush()


def bomb_handler(body: bytes, encoding: str) -> Any:
    def handler(info: RequestInfo) -> tuple[int, dict[str, str], bytes]:
        return 200, {"Content-Type": "text/html; charset=utf-8", "Content-Encoding": encoding}, body
    return handler


def test_decompression_bombs_are_stopped_at_the_size_limit(site: SiteServer, tmp_path: Path) -> None:
    brotli = pytest.importorskip("brotli")
    from backports import zstd  # Scrapy 2.19 depends on it for zstd responses

    member = gzip_bytes(ZEROS_20MB)
    deflater = zlib.compressobj(9, zlib.DEFLATED, 15)
    bombs = {
        "/gzip.html": (member, "gzip"),
        "/deflate.html": (deflater.compress(ZEROS_20MB) + deflater.flush(), "deflate"),
        "/brotli.html": (brotli.compress(ZEROS_20MB), "br"),
        "/zstd.html": (zstd.compress(ZEROS_20MB), "zstd"),
        # 50 gzip members: 1000 MB of zeros in about 1 MB on the wire.
        "/gigabyte.html": (member * 50, "gzip"),
        # gzip inside gzip: each layer is held to the limit.
        "/nested.html": (gzip_bytes(member * 5), "gzip, gzip"),
    }
    assert len(member) < 25_000 and len(bombs["/gigabyte.html"][0]) < 1.1 * MB
    for path, (body, encoding) in bombs.items():
        site.add(0, path, handler=bomb_handler(body, encoding))
    site.add(1, "/good.html", page("Good"), gzip=True)
    db = tmp_path / "w.duckdb"
    urls = [site.url(0, path) for path in bombs] + [site.url(1, "/good.html")]

    result = ok(crawl_api(db, urls=urls), 1)

    limit = 10 * MB
    log = fetch_log(db)
    for path in bombs:
        outcome, reason, _ = log[site.url(0, path)]
        assert outcome == "failed" and reason.startswith(
            f"response too large: more than {limit} bytes after decompression (DOWNLOAD_MAXSIZE; "), (path, reason)
        assert len(site.requests_for(0, path)) == 1  # not retried: the next answer would be the same
    assert set(pages(db)) == {site.url(1, "/good.html")}
    from pipelines.store import decompress_html
    assert all(len(decompress_html(z)) < 1000000 for (z,) in rows(db, "SELECT html_z FROM page_html"))
    # Memory stays bounded: inflating stops at the limit instead of materialising a gigabyte.
    assert maxrss_mb(result) < 400, maxrss_mb(result)


def test_trickling_and_silent_servers_end_at_the_timeout(site: SiteServer, tmp_path: Path) -> None:
    site.trickle(0, "/trickle.html", total_bytes=100_000, bytes_per_chunk=10, interval=0.2)  # ~30 min in all
    site.slow(1, "/silent.html", 3600)  # headers never come
    site.add(1, "/good.html", page("Good"))
    db = tmp_path / "w.duckdb"
    urls = [site.url(0, "/trickle.html"), site.url(1, "/silent.html"), site.url(1, "/good.html")]

    started = time.monotonic()
    ok(crawl_api(db, urls=urls, timeout=2), 1)

    elapsed = time.monotonic() - started
    log = fetch_log(db)
    for url in urls[:2]:
        assert log[url][0] == "failed" and log[url][1].startswith("timed out"), log[url]
    assert set(pages(db)) == {urls[2]}
    # Three attempts of 2 s each per URL (RETRY_TIMES = 2), hosts in parallel; nothing near 30 min.
    assert len(site.requests_for(0, "/trickle.html")) == 3
    assert elapsed < 40, elapsed


def test_pathological_page_extraction_is_bounded(site: SiteServer, tmp_path: Path) -> None:
    # 60,000 paragraphs: ~15 s of trafilatura's CPU; the limit is 1 s of CPU here.
    heavy = "<html><body>" + "".join(f"<p>Paragraph number {i} says a little.</p>" for i in range(60_000)) + "</body></html>"
    site.add(0, "/heavy.html", heavy)
    site.add(1, "/good.html", page("Good"))
    db = tmp_path / "w.duckdb"
    urls = [site.url(0, "/heavy.html"), site.url(1, "/good.html")]

    started = time.monotonic()
    ok(crawl_api(db, urls=urls, extra_settings={"WEBQA_EXTRACT_TIMEOUT": 1}), 1)

    assert time.monotonic() - started < 30
    assert fetch_log(db)[urls[0]] == ("failed", "extraction used more than 1 s of CPU", 200)
    assert set(pages(db)) == {urls[1]}


def _worker_state() -> tuple[Any, list[int]]:
    import logging

    return signal.getsignal(signal.SIGINT), [logging.getLogger(n).level for n in extraction.QUIET_LOGGERS]


def test_extraction_workers_ignore_sigint_and_keep_quiet() -> None:
    pipeline = extraction.ExtractionPipeline(
        SimpleNamespace(stats=None), workers=1, max_seconds=5, max_tokens=350, overlap_tokens=40  # type: ignore[arg-type]
    )
    pool = pipeline._new_pool()
    try:
        handler, levels = pool.submit(_worker_state).result(timeout=60)
    finally:
        pool.shutdown(wait=True)
    assert handler == signal.SIG_IGN
    assert levels == [50] * len(extraction.QUIET_LOGGERS) and "pdfminer" in extraction.QUIET_LOGGERS  # CRITICAL


# == 5. Junk ==========================================================================================


def test_junk_is_recorded_never_a_crash_or_a_stall(site: SiteServer, tmp_path: Path) -> None:
    rng = random.Random(9309)
    sentence = "Die Größe des Café ist wichtig, sagt der Bäcker."
    normal = page("Normal", extra=f"<p>{sentence}</p>")
    utf8_text = page("Bom eight", extra=f"<p>{sentence}</p>", head="")
    utf16_text = page("Bom sixteen", extra=f"<p>{sentence}</p>", head="")
    junk: dict[str, tuple[bytes, str | None]] = {
        # declared UTF-8, really Latin-1
        "/wrong-charset.html": (page("Wrong charset", extra=f"<p>{sentence}</p>", head="").encode("latin-1"),
                                "text/html; charset=utf-8"),
        # no charset anywhere
        "/no-charset.html": (page("No charset", extra=f"<p>{sentence}</p>", head="").encode("utf-8"), "text/html"),
        # a charset nobody knows
        "/unknown-charset.html": (page("Klingon", head="").encode("utf-8"), "text/html; charset=x-klingon-1"),
        "/bom-utf8.html": (codecs.BOM_UTF8 + utf8_text.encode("utf-8"), "text/html"),
        "/bom-utf16le.html": (codecs.BOM_UTF16_LE + utf16_text.encode("utf-16-le"), "text/html"),
        "/bom-utf16be.html": (codecs.BOM_UTF16_BE + utf16_text.encode("utf-16-be"), "text/html; charset=utf-8"),
        "/random.html": (rng.randbytes(200_000), "text/html"),
        "/png.html": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + rng.randbytes(50_000), "text/html; charset=utf-8"),
        "/nul.html": (page("Nul bytes", extra="<p>" + "zero\x00byte " * 500 + "</p>").encode(), "text/html"),
        "/deep.html": (("<html><body>" + "<div>" * 10_000 + "<p>deep down</p>" + "</div>" * 10_000 +
                        "</body></html>").encode(), "text/html"),
        "/one-line.html": (("<html><body><p>" + "word " * (5 * MB // 5) + "</p></body></html>").encode(), "text/html"),
        "/only-tags.html": (b"<html>" + b"<b>" * 100_000 + b"</html>", "text/html"),
    }
    for path, (body, content_type) in junk.items():
        site.add(0, path, body, content_type=content_type)
    site.add(1, "/normal.html", normal)
    db = tmp_path / "w.duckdb"
    urls = [site.url(0, path) for path in junk] + [site.url(1, "/normal.html")]

    started = time.monotonic()
    # Cleaning is bounded at 3 s a page here (10 s by default) to keep the test short; the 5 MB line
    # may take longer than that on a busy machine and is then recorded as failed, which is fine too.
    result = crawl_api(db, urls=urls, extra_settings={"WEBQA_EXTRACT_TIMEOUT": 3})

    elapsed = time.monotonic() - started
    assert result.returncode in (0, 1), result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-5000:]
    assert elapsed < 60, elapsed
    stored, log = pages(db), fetch_log(db)
    # Every URL is accounted for exactly once: a page or a fetch_log line saying why not.
    for url in urls:
        assert (url in stored) != (url in log), url
    assert sentence in stored[site.url(1, "/normal.html")]["text"]
    for path in ("/bom-utf8.html", "/bom-utf16le.html", "/bom-utf16be.html"):
        text = stored[site.url(0, path)]["text"]
        assert sentence in text and "\ufeff" not in text and "\x00" not in text, (path, text[:200])
    for path in ("/wrong-charset.html", "/no-charset.html"):
        assert "Die Gr" in stored[site.url(0, path)]["text"]
    assert "\x00" not in stored[site.url(0, "/nul.html")]["text"]
    for path in ("/random.html", "/png.html"):
        url = site.url(0, path)
        assert url in log or stored[url]["text"] == "", (path, log.get(url))
    counts = summary(result)
    assert counts["fetched"] + counts["skipped"] + counts["failed"] == len(urls)


# == 7. YAML ===========================================================================================


def test_yaml_alias_bomb_job_exits_2_quickly(tmp_path: Path) -> None:
    lines = ["name: bomb", "urls: [https://example.org/]", 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    previous = "a"
    for name in "bcdefghi":  # 9**9 ≈ 387 million strings if expanded
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        previous = name
    lines += ["questions:", "  - *i"]
    job = tmp_path / "bomb.yaml"
    job.write_text("\n".join(lines) + "\n", encoding="utf-8")

    # The same command on a job with an ordinary mistake: what starting webqa costs on this machine.
    plain = tmp_path / "typo.yaml"
    plain.write_text("name: typo\nurls: [https://example.org/]\nquestions: [What?]\ncrawl: {dealy: 1}\n")
    started = time.monotonic()
    baseline = cli("run", str(plain), "--db", str(tmp_path / "w.duckdb"), timeout=30)
    startup = time.monotonic() - started
    assert baseline.returncode == 2, baseline.stderr

    started = time.monotonic()
    result = cli("run", str(job), "--db", str(tmp_path / "w.duckdb"), timeout=30)
    elapsed = time.monotonic() - started

    assert result.returncode == 2, result.stderr
    # Under 2 s; on a machine so busy that starting webqa alone takes longer, no more than starting
    # webqa plus a second (expanding the bomb would take minutes and gigabytes).
    assert elapsed < max(2.0, startup + 1.0), (elapsed, startup)
    assert result.stdout == ""
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith(f"Error: {job}:") and "YAML aliases expand to more than" in line, line
    assert not (tmp_path / "w.duckdb").exists()


# == issue 13 row 5: URL files are bounded and never block ==========================================


def test_crawl_input_that_is_a_device_or_fifo_is_one_error_line(tmp_path: Path) -> None:
    # `-i /dev/zero` read 1.28 GB in a second, then died with a MemoryError traceback; a FIFO hung.
    fifo = tmp_path / "urls.fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.txt"
    with big.open("wb") as handle:
        handle.truncate(16 * MB + 1)
    expected = {
        "/dev/zero": "Error: /dev/zero: is a character device, expected a file with one URL per line",
        str(fifo): f"Error: {fifo}: is a named pipe (FIFO), expected a file with one URL per line",
        str(big): f"Error: {big}: URL file is larger than 16 MiB; split the URLs over several runs",
    }
    for path, line in expected.items():
        result = ok(cli("crawl", "-i", path, "--db", str(tmp_path / "w.duckdb"), timeout=60), 2)
        assert error_lines(result) == [line]


# == issue 13 row 10: the utf-16 label without a BOM is little-endian; garbled text is not stored ===


def test_utf16_label_without_bom_is_little_endian_and_garbled_text_is_recorded(site: SiteServer,
                                                                                tmp_path: Path) -> None:
    sentence = "Grüße aus Köln: die Seite ist in UTF-16LE ohne BOM."
    body = page("Sechzehn", extra=f"<p>{sentence}</p>", head="").encode("utf-16-le")
    site.add(0, "/le.html", body, content_type="text/html; charset=utf-16")
    site.add(0, "/mislabelled.html", body, content_type="text/html; charset=utf-16be")  # a wrong label
    db = tmp_path / "w.duckdb"
    le, wrong = site.url(0, "/le.html"), site.url(0, "/mislabelled.html")

    ok(crawl_cli([le, wrong], db), 1)

    assert sentence in pages(db)[le]["text"]  # was decoded big-endian: CJK-looking junk stored
    assert wrong not in pages(db)
    outcome, reason, _ = fetch_log(db)[wrong]
    assert outcome == "failed" and reason.startswith("garbled text after decoding as utf-16"), reason


def test_garbled_share_tells_swapped_utf16_from_real_text() -> None:
    from pipelines.decoding import GARBLED_SHARE, garbled_share, whatwg_decode

    html = "<p>Grüße – 東京都の天気は晴れです。Привет, мир!</p>"
    assert garbled_share(html) < 0.05
    assert garbled_share(html.encode("utf-16-le").decode("utf-16-be", errors="replace")) > GARBLED_SHARE
    assert garbled_share("\ufffd" * 30 + "abc") > GARBLED_SHARE
    assert whatwg_decode(html.encode("utf-16-le"), "utf-16") == html
    assert whatwg_decode(codecs.BOM_UTF16_BE + html.encode("utf-16-be"), "utf-16") is None  # the BOM decides
    assert whatwg_decode(html.encode("utf-8"), "utf-8") is None


def test_the_guard_reads_the_environment_when_the_crawl_starts_unless_webqa_set_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from scrapy.settings import Settings

    from crawler import settings as crawl_settings

    assert not hasattr(crawl_settings, "WEBQA_ALLOW_PRIVATE_NETWORKS")  # nothing is read at import
    monkeypatch.setenv("WEBQA_ALLOW_PRIVATE_NETWORKS", "1")
    assert ssrf.private_networks_allowed(Settings()) is True  # `scrapy crawl`: the operator's switch
    assert ssrf.private_networks_allowed(Settings({"WEBQA_ALLOW_PRIVATE_NETWORKS": False})) is False  # webqa's say
    monkeypatch.setenv("WEBQA_ALLOW_PRIVATE_NETWORKS", "perhaps")
    assert ssrf.private_networks_allowed(Settings()) is False  # unreadable: the guard stays on
    monkeypatch.delenv("WEBQA_ALLOW_PRIVATE_NETWORKS")
    assert ssrf.private_networks_allowed(Settings()) is False
