"""Nothing is dropped without a record: each of Scrapy's silent drops is off or recorded, and a page that
cannot be decoded is failed, not stored empty. Real crawls (subprocesses) of a loopback site, real DuckDB."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.site_server import SiteServer
from tests.support.crawling import fetch_log, page, pages, run_cli, summary

pytestmark = pytest.mark.e2e  # every test here starts a child process (tests/support/e2e.py)

MAX = 8192  # pipelines.defaults.MAX_URL_LENGTH


def test_over_long_urls_are_failed_with_the_reason_and_long_ones_fetched(site: SiteServer, tmp_path: Path) -> None:
    long_path = "/long-" + "a" * 3000 + ".html"  # over Scrapy's 2,083, which dropped it with a log line only
    too_long_link = "/link-" + "b" * 9000 + ".html"
    site.add(0, long_path, page("Long but fine"))
    site.add(0, "/index.html", page("Index", links=[too_long_link, long_path]))
    listed_too_long = site.url(0, "/listed-" + "c" * 10_000 + ".html")
    db = tmp_path / "w.duckdb"

    done = run_cli(site.url(0, "/index.html"), listed_too_long, "--depth", "1", db=db)

    assert done.returncode == 1, done.stderr
    counts = summary(done)
    assert (counts["fetched"], counts["failed"]) == (2, 2), done.stdout
    assert set(pages(db)) == {site.url(0, "/index.html"), site.url(0, long_path)}
    log = fetch_log(db)
    for url in (listed_too_long, site.url(0, too_long_link)):
        outcome, reason, _status = log[url]
        assert outcome == "failed" and reason.startswith(f"URL longer than {MAX} characters ({len(url)})"), reason
    assert not [path for path in site.paths(0) if path.startswith(("/listed-", "/link-"))]


def test_an_over_long_url_alone_is_one_failed_record_and_exit_3(site: SiteServer, tmp_path: Path) -> None:
    url = site.url(0, "/x" * 5000)
    db = tmp_path / "w.duckdb"
    done = run_cli(url, db=db)
    assert done.returncode == 3, done.stderr
    assert "no URL could be fetched (1 failed, 0 skipped)" in done.stderr
    assert fetch_log(db)[url][0] == "failed"


def test_utf16le_without_bom_or_charset_is_failed_as_garbled_not_stored_empty(site: SiteServer, tmp_path: Path) -> None:
    # ASCII text: Scrapy finds no charset and reads it as windows-1252, every other character a NUL.
    body = page("Sechzehn", extra="<p>Gruesse aus Koeln, ohne BOM und ohne charset.</p>", head="").encode("utf-16-le")
    site.add(0, "/le.html", body, content_type="text/html")
    site.add(0, "/fine.html", page("Fine"))
    db = tmp_path / "w.duckdb"
    le = site.url(0, "/le.html")

    done = run_cli(le, site.url(0, "/fine.html"), db=db)

    assert done.returncode == 1, done.stderr
    assert (summary(done)["new"], summary(done)["failed"]) == (1, 1)
    assert le not in pages(db)
    outcome, reason, _status = fetch_log(db)[le]
    assert outcome == "failed" and reason.startswith("garbled text after decoding as "), reason
