"""robots.txt policy (crawler/middlewares/robots.py): pure decision helpers, then real crawls.

Crawls run as subprocesses (Twisted's reactor cannot restart) against the loopback test site, and
assertions come from the server's own request log: what matters is what reached the server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from scrapy.exceptions import IgnoreRequest

from crawler.middlewares.robots import (
    MAX_ROBOTS_BYTES,
    RobotsResult,
    classify_status,
    decide,
    load_cache,
    origin_of,
    product_token,
    result_from_cache,
    result_from_exception,
    result_from_response,
    robots_text,
    robots_url_for,
    write_cache,
)
from tests.support.site_server import SiteServer

REPO = Path(__file__).resolve().parents[2]
THREE_HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
PLAIN = "text/plain; charset=utf-8"


def page(title: str) -> str:
    text = " ".join([f"{title} is a page of the robots.txt test site."] * 8)
    return f"<!DOCTYPE html><html><head><title>{title}</title></head><body><main><h1>{title}</h1><p>{text}</p></main></body></html>"


def rules(text: str, now: float = 1000.0) -> RobotsResult:
    return result_from_response(200, text.encode(), now)


# -- pure helpers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (200, "rules"), (204, "rules"),
        (301, "allow_all"), (400, "allow_all"), (401, "allow_all"), (403, "allow_all"),
        (404, "allow_all"), (410, "allow_all"),
        (429, "unreachable"), (500, "unreachable"), (503, "unreachable"), (599, "unreachable"),
        (100, "unreachable"),
    ],
)
def test_classify_status_follows_rfc_9309(status: int, verdict: str) -> None:
    assert classify_status(status) == verdict


def test_origin_and_robots_url() -> None:
    assert origin_of("https://Example.com/a?b") == "https://example.com:443"
    assert origin_of("http://example.com:8080/a") == "http://example.com:8080"
    assert origin_of("http://[::1]:81/") == "http://[::1]:81"
    # Same host, different scheme or port: a different robots.txt (RFC 9309 §2.2.1).
    assert origin_of("http://example.com/") != origin_of("https://example.com/")
    assert robots_url_for("http://user:pw@example.com:8080/x/y?z#f") == "http://example.com:8080/robots.txt"


def test_product_token() -> None:
    assert product_token("webqa/0.1 (batch question answering; +https://example.org)") == "webqa"
    assert product_token("WebQA") == "webqa"
    assert product_token("") == "*"


def test_decide_matches_own_group_before_star() -> None:
    result = rules("User-agent: *\nDisallow: /\n\nUser-agent: webqa\nDisallow: /private/\nCrawl-delay: 2\n")
    assert decide(result, "http://h/public.html", "webqa", 30).allowed
    assert decide(result, "http://h/public.html", "webqa", 30).crawl_delay == 2.0
    private = decide(result, "http://h/private/x", "webqa", 30)
    assert not private.allowed and private.stat == "disallowed"
    assert "robots.txt" in (private.message or "")
    # Another agent falls into the `*` group.
    assert not decide(result, "http://h/public.html", "otherbot", 30).allowed


def test_decide_star_group_and_no_rules() -> None:
    assert not decide(rules("User-agent: *\nDisallow: /private/\n"), "http://h/private/a", "webqa", 30).allowed
    assert decide(rules(""), "http://h/anything", "webqa", 30).allowed
    assert decide(rules("User-agent: otherbot\nDisallow: /\n"), "http://h/a", "webqa", 30).allowed


def test_decide_allow_all_and_unreachable() -> None:
    assert decide(result_from_response(404, b"Disallow: /", 0), "http://h/a", "webqa", 30).allowed
    unreachable = decide(result_from_response(503, b"", 0), "http://h/a", "webqa", 30)
    assert not unreachable.allowed and unreachable.stat == "unreachable"
    assert unreachable.message == "robots.txt unreachable (HTTP 503): host treated as disallowed (RFC 9309)"


def test_decide_crawl_delay_above_maximum_skips_host() -> None:
    result = rules("User-agent: *\nCrawl-delay: 120\nAllow: /\n")
    decision = decide(result, "http://h/a", "webqa", 30)
    assert not decision.allowed and decision.stat == "crawl_delay_exceeded"
    assert decision.message == "robots.txt Crawl-delay 120 s exceeds the maximum 30 s; host skipped"
    # At the maximum is still fine; a malformed value is ignored.
    assert decide(rules("User-agent: *\nCrawl-delay: 30\n"), "http://h/a", "webqa", 30).crawl_delay == 30
    assert decide(rules("User-agent: *\nCrawl-delay: soon\n"), "http://h/a", "webqa", 30).crawl_delay is None


@pytest.mark.parametrize("value", ["inf", "Infinity", "1e999", "1e9", "31"])
def test_decide_infinite_or_huge_crawl_delay_skips_host(value: str) -> None:
    # `inf` used to be read as "no delay" (requests 0.05 s apart); anything above the cap skips the host.
    decision = decide(rules(f"User-agent: *\nCrawl-delay: {value}\nAllow: /\n"), "http://h/a", "webqa", 30)
    assert not decision.allowed and decision.stat == "crawl_delay_exceeded"
    assert decision.message is not None and decision.message.startswith("robots.txt Crawl-delay ")
    assert decision.message.endswith(" s exceeds the maximum 30 s; host skipped")
    if value in ("inf", "Infinity", "1e999"):
        assert decision.message == "robots.txt Crawl-delay inf s exceeds the maximum 30 s; host skipped"


def test_decide_nan_crawl_delay_is_ignored_like_other_malformed_values() -> None:
    decision = decide(rules("User-agent: *\nCrawl-delay: nan\n"), "http://h/a", "webqa", 30)
    assert decision.allowed and decision.crawl_delay is None


def test_exceptions_are_unreachable_except_redirect_loops() -> None:
    timeout = TimeoutError("took 30 s")
    result = result_from_exception(timeout, 0)
    assert result.verdict == "unreachable" and result.error is timeout
    assert result_from_exception(ConnectionError(), 0).detail == "ConnectionError"
    assert result_from_exception(IgnoreRequest("max redirections reached"), 0).verdict == "allow_all"
    # A network failure is passed on to the pages (recorded as failed with its own reason) ...
    decision = decide(result, "http://h/a", "webqa", 30)
    assert not decision.allowed and decision.error is timeout and decision.stat == "unreachable"
    # ... anything else that stopped the robots.txt download is a robots.txt skip.
    other = decide(result_from_exception(IgnoreRequest("offsite"), 0), "http://h/a", "webqa", 30)
    assert not other.allowed and other.error is None and "robots.txt" in (other.message or "")


def test_robots_text_caps_size_without_widening_rules() -> None:
    head = b"User-agent: *\n" + b"# filler\n" * ((MAX_ROBOTS_BYTES - 100) // 9)
    body = head + b"Disallow: /private/but-this-line-is-cut-in-the-middle\n" * 10
    text = robots_text(body)
    assert len(text.encode()) <= MAX_ROBOTS_BYTES
    assert text.endswith("\n")  # the cut line is dropped, not kept as "Disallow: /priv"
    assert robots_text(b"\xef\xbb\xbfUser-agent: *\n") == "User-agent: *\n"


def test_cache_round_trip_ttl_and_failures(tmp_path: Path) -> None:
    path = tmp_path / "db.duckdb.robots.json"
    now = time.time()
    results = {
        "http://a:80": rules("User-agent: *\nDisallow: /x\n", now),
        "http://b:80": result_from_response(404, b"", now),
        "http://c:80": result_from_response(503, b"", now),
        "http://d:80": result_from_exception(ConnectionError("reset"), now),
    }
    write_cache(path, results)
    assert set(json.loads(path.read_text())["entries"]) == {"http://a:80", "http://b:80"}
    assert list(tmp_path.iterdir()) == [path]  # no temp file left behind
    loaded = load_cache(path, now + 10, ttl=3600)
    assert set(loaded) == {"http://a:80", "http://b:80"}
    assert not decide(loaded["http://a:80"], "http://a/x", "webqa", 30).allowed
    assert loaded["http://b:80"].verdict == "allow_all"
    assert load_cache(path, now + 3601, ttl=3600) == {}
    assert result_from_cache({"verdict": "unreachable", "fetched_at": now}, now, 3600) is None
    assert result_from_cache({"verdict": "rules", "fetched_at": now + 600}, now, 3600) is None  # clock jump
    path.write_text("{not json")
    assert load_cache(path, now, 3600) == {}
    assert load_cache(tmp_path / "missing.json", now, 3600) == {}


# -- crawls ---------------------------------------------------------------------------------------


def crawl(db: Path, *urls: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", "crawl", *urls, "--db", str(db), "--delay", "0"],
        cwd=REPO, timeout=120, capture_output=True, text=True,
    )


def fetch_log(db: Path) -> dict[str, tuple[str, str]]:
    """{url: (outcome, reason)} of the latest crawl run."""
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "SELECT url, outcome, reason FROM fetch_log WHERE crawl_run_id = (SELECT max(crawl_run_id) FROM fetch_log)"
        ).fetchall()
    return {url: (outcome, reason) for url, outcome, reason in rows}


def stored_pages(db: Path) -> set[str]:
    with duckdb.connect(str(db), read_only=True) as con:
        return {row[0] for row in con.execute("SELECT url FROM pages").fetchall()}


@pytest.mark.e2e
def test_queued_requests_all_wait_for_robots_redirects_and_404(
    site_factory: Callable[..., SiteServer], tmp_path: Path
) -> None:
    site = site_factory(hosts=THREE_HOSTS)
    # Host 0: a slow robots.txt so every listed request is queued behind it (the stock race).
    site.slow(0, "/robots.txt", 0.5, "User-agent: *\nDisallow: /private/\n", content_type=PLAIN)
    public = [f"/p{i}.html" for i in range(6)]
    private = [f"/private/s{i}.html" for i in range(4)]
    for path in public + private:
        site.add(0, path, body=page(path))
    # Host 1: no robots.txt at all (404) → everything allowed.
    for path in ("/a.html", "/private/b.html"):
        site.add(1, path, body=page(path))
    # Host 2: robots.txt redirects twice (once to another host) before the rules.
    site.redirect(2, "/robots.txt", site.url(2, "/moved/robots.txt"))
    site.redirect(2, "/moved/robots.txt", site.url(1, "/shared-robots.txt"), status=302)
    site.add(1, "/shared-robots.txt", body="User-agent: webqa\nDisallow: /secret\n", content_type=PLAIN)
    for path in ("/open.html", "/secret.html"):
        site.add(2, path, body=page(path))

    # Interleave so that private URLs sit between public ones in the queue.
    urls = [site.url(0, p) for pair in zip(public, private + [""] * 2) for p in pair if p]
    urls += [site.url(1, "/a.html"), site.url(1, "/private/b.html")]
    urls += [site.url(2, "/open.html"), site.url(2, "/secret.html")]
    db = tmp_path / "t.duckdb"
    proc = crawl(db, *urls)
    assert "Crawled" in proc.stdout, proc.stderr

    paths0 = site.paths(0)
    assert paths0.count("/robots.txt") == 1
    assert not [p for p in paths0 if p.startswith("/private/")], paths0
    assert sorted(p for p in paths0 if p != "/robots.txt") == sorted(public)
    log = fetch_log(db)
    for path in private:
        outcome, reason = log[site.url(0, path)]
        assert outcome == "skipped" and "robots.txt" in reason

    assert sorted(site.paths(1)) == sorted(["/robots.txt", "/a.html", "/private/b.html", "/shared-robots.txt"])
    assert {site.url(1, "/a.html"), site.url(1, "/private/b.html")} <= stored_pages(db)

    assert site.paths(2)[:2] == ["/robots.txt", "/moved/robots.txt"]
    assert "/secret.html" not in site.paths(2) and "/open.html" in site.paths(2)
    assert log[site.url(2, "/secret.html")][0] == "skipped"


@pytest.mark.e2e
def test_unreachable_robots_disallows_host_only(site_factory: Callable[..., SiteServer], tmp_path: Path) -> None:
    site = site_factory(hosts=THREE_HOSTS)
    site.add(0, "/robots.txt", status=503, body="down for maintenance", content_type=PLAIN)
    site.drop(1, "/robots.txt")
    for host in range(3):
        for path in ("/a.html", "/b.html"):
            site.add(host, path, body=page(f"{host}{path}"))
    urls = [site.url(h, p) for h in range(3) for p in ("/a.html", "/b.html")]
    db = tmp_path / "t.duckdb"
    proc = crawl(db, *urls)
    assert "Crawled" in proc.stderr + proc.stdout, proc.stderr

    for host in (0, 1):
        assert set(site.paths(host)) == {"/robots.txt"}, site.paths(host)  # retried, never a page
    assert sorted(site.paths(2)) == ["/a.html", "/b.html", "/robots.txt"]
    log = fetch_log(db)
    for path in ("/a.html", "/b.html"):
        # HTTP 503: the host answers but its robots.txt is unreachable → skipped for robots.txt.
        outcome, reason = log[site.url(0, path)]
        assert outcome == "skipped" and "robots.txt" in reason
        # Dropped connection: the host is down as far as we can tell → failed, with the cause.
        outcome, reason = log[site.url(1, path)]
        assert outcome == "failed" and reason, log
    assert not any(url.startswith(site.url(2, "/")) for url in log)
    # Failures are not cached: the next run must ask again.
    cache = json.loads((tmp_path / "t.duckdb.robots.json").read_text())["entries"]
    assert list(cache) == [origin_of(site.url(2, "/"))]


@pytest.mark.e2e
def test_crawl_delay_is_kept_and_excessive_delay_skips_host(
    site: SiteServer, tmp_path: Path
) -> None:
    site.add(0, "/robots.txt", body="User-agent: *\nCrawl-delay: 1\n", content_type=PLAIN)
    site.add(1, "/robots.txt", body="User-agent: webqa\nCrawl-delay: 120\n", content_type=PLAIN)
    for host in (0, 1):
        for path in ("/a.html", "/b.html", "/c.html"):
            site.add(host, path, body=page(f"{host}{path}"))
    urls = [site.url(h, p) for h in (0, 1) for p in ("/a.html", "/b.html", "/c.html")]
    db = tmp_path / "t.duckdb"
    proc = crawl(db, *urls)
    assert "Crawled" in proc.stdout, proc.stderr

    assert len(site.paths(0)) == 4
    assert site.min_gap(0) >= 1.0
    assert site.paths(1) == ["/robots.txt"]
    log = fetch_log(db)
    for path in ("/a.html", "/b.html", "/c.html"):
        outcome, reason = log[site.url(1, path)]
        assert outcome == "skipped" and "robots.txt" in reason


@pytest.mark.e2e
def test_robots_cache_is_reused_but_failures_are_not(site: SiteServer, tmp_path: Path) -> None:
    site.add(0, "/robots.txt", body="User-agent: *\nDisallow: /private/\nCrawl-delay: 1\n", content_type=PLAIN)
    site.add(1, "/robots.txt", status=500, content_type=PLAIN)
    for path in ("/a.html", "/c.html", "/private/x.html"):
        site.add(0, path, body=page(path))
    site.add(1, "/b.html", body=page("b"))
    urls = [site.url(0, "/a.html"), site.url(0, "/private/x.html"), site.url(0, "/c.html"), site.url(1, "/b.html")]
    db = tmp_path / "t.duckdb"

    crawl(db, *urls)
    assert site.paths(0).count("/robots.txt") == 1
    site.reset_log()
    proc = crawl(db, *urls)
    assert proc.returncode in (0, 1), proc.stderr

    assert "/robots.txt" not in site.paths(0)  # cached within the TTL
    assert "/private/x.html" not in site.paths(0)  # and still obeyed,
    assert site.min_gap(0) >= 1.0  # Crawl-delay too, though no robots.txt fetch created the slot first
    assert fetch_log(db)[site.url(0, "/private/x.html")][0] == "skipped"
    assert "/robots.txt" in site.paths(1) and "/b.html" not in site.paths(1)  # the 500 was not cached


# -- middleware wiring without a crawl ------------------------------------------------------------


def test_middleware_is_off_with_robotstxt_obey_off_and_reads_its_settings(tmp_path: Path) -> None:
    from scrapy.exceptions import NotConfigured
    from scrapy.utils.test import get_crawler

    from crawler.middlewares.robots import RobotsPolicyMiddleware

    with pytest.raises(NotConfigured, match="ROBOTSTXT_OBEY is off"):
        RobotsPolicyMiddleware.from_crawler(get_crawler(settings_dict={"ROBOTSTXT_OBEY": False}))
    mw = RobotsPolicyMiddleware.from_crawler(get_crawler(settings_dict={
        "ROBOTSTXT_OBEY": True, "USER_AGENT": "webqa/0.1 (+https://example.org)",
        "WEBQA_MAX_CRAWL_DELAY": 5, "WEBQA_ROBOTS_CACHE": str(tmp_path / "r.json"), "WEBQA_ROBOTS_CACHE_TTL": 60,
    }))
    assert (mw.token, mw.max_crawl_delay, mw.cache_path, mw.cache_ttl) == ("webqa", 5.0, tmp_path / "r.json", 60.0)


def test_crawl_delay_raises_live_and_future_slots() -> None:
    from types import SimpleNamespace

    from scrapy import Request
    from scrapy.core.downloader import Slot

    from crawler.middlewares.robots import RobotsPolicyMiddleware

    live = Slot(concurrency=1, delay=0.0, jitter=0.5)
    downloader = SimpleNamespace(
        slots={"a.example": live},
        per_slot_settings={"b.example": {"delay": 5.0, "concurrency": 2}},
        get_slot_key=lambda request: request.url.split("/")[2],
    )
    crawler = SimpleNamespace(engine=SimpleNamespace(downloader=downloader), stats=None)
    mw = RobotsPolicyMiddleware.__new__(RobotsPolicyMiddleware)
    mw.crawler, mw.default_delay, mw._paced_slots = crawler, 0.0, set()  # type: ignore[assignment]

    mw._apply_crawl_delay(Request("http://a.example/x"), 2.0)
    assert (live.delay, live.jitter) == (2.0, 0)  # the slot that exists now
    assert downloader.per_slot_settings["a.example"] == {"delay": 2.0, "jitter": 0}  # and after slot GC
    assert live.lastseen > 0  # the delay counts from the robots.txt fetch that just ended
    # A configured per-host delay above the Crawl-delay wins; other slot settings are kept.
    mw._apply_crawl_delay(Request("http://b.example/x"), 2.0)
    assert downloader.per_slot_settings["b.example"] == {"delay": 5.0, "concurrency": 2, "jitter": 0}

    # Paced slots count the delay from the end of the last download.
    live.lastseen = 0.0
    mw._request_done(request=Request("http://a.example/y", meta={"download_slot": "a.example"}))
    assert live.lastseen > 0
