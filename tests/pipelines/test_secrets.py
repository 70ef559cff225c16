"""Secrets never leave: a password in a Redis URL, an Ollama host, a proxy or a URL file reaches no message,
log file, report or database column. Real processes, a real redis-server with a password, real DuckDB files.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from pipelines.redact import inert, redact_text, redact_unparsed, redact_url, split_login, url_credentials
from tests.support.site_server import SiteServer
from tests.support.crawling import REPO
from tests.support.redis import REDIS_SERVER, free_port, stop_server, wait_for

PASSWORD = "Sup3rS3cretPassw0rd"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(WEBQA_ALLOW_PRIVATE_NETWORKS="1", PYTHONUNBUFFERED="1", **extra)
    return env


def _webqa(*args: str | Path, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jobs.cli", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=env or _env())


def _everything_stored(db: Path) -> str:
    """Every value of every table, as text."""
    with duckdb.connect(str(db), read_only=True) as conn:
        tables = [t for (t,) in conn.execute("SELECT table_name FROM information_schema.tables").fetchall()]
        return "\n".join(str(row) for table in tables for row in conn.execute(f'SELECT * FROM "{table}"').fetchall())


def _leaks(secret: str, *texts: str) -> list[str]:
    return [text[max(0, text.find(secret) - 80): text.find(secret) + 40] for text in texts if secret in text]


def test_redact_helpers() -> None:
    assert redact_url(f"redis://:{PASSWORD}@10.0.0.5:6379/0") == "redis://***@10.0.0.5:6379/0"
    assert redact_text(f"cannot reach http://user:{PASSWORD}@proxy:3128 and rediss://u:p@h/1 or https://example.org/a@b") \
        == "cannot reach http://***@proxy:3128 and rediss://***@h/1 or https://example.org/a@b"
    assert redact_text(f"invalid hostname: user:{PASSWORD}@127.0.0.1; mail me@example.org at 10:30") \
        == "invalid hostname: ***@127.0.0.1; mail me@example.org at 10:30"
    # An unencoded "@" in a password: the authority ends at the last "@", as urlsplit reads it.
    assert redact_url(f"http://user:p@{PASSWORD}@[::1]:11434/x@y") == "http://***@[::1]:11434/x@y"
    # A value that did not parse (an unencoded "#" in the password): all before its last "@" hidden.
    assert redact_unparsed(f"http://user:{PASSWORD}#x@gpu1:11434") == "http://***@gpu1:11434"
    assert redact_unparsed(f"user:{PASSWORD}/x@gpu1") == "***@gpu1"
    assert redact_unparsed("http://gpu1:port") == "http://gpu1:port"
    # The one reading of a login both the message and the Ollama host's parse error use.
    assert split_login(f"http://u:{PASSWORD}#x@y@gpu1:99999") == ("http://", "gpu1:99999")
    assert split_login(f"u:{PASSWORD}@gpu1") == ("", "gpu1")
    assert split_login("http://gpu1:11434") is None
    assert split_login(f"u:{PASSWORD}#x@gpu1/a://b") == ("", "gpu1/a://b")  # no scheme: the "://" is the path's
    assert redact_unparsed(f"u:{PASSWORD}#x@gpu1/a://b") == "***@gpu1/a://b"
    assert split_login("") is None and split_login("http://gpu1/a@b") is None  # an "@" in a path ends no login
    # An "@" in a query ends no login (what follows it is no host); the login before it still does.
    assert split_login("https://hooks.example.org/x?user=a@b&token=TOK1") is None
    # Where it cannot tell (a port, then an "@" no host follows), everything after the scheme is hidden.
    assert split_login("http://gpu1:99999/?k=a@b&token=TOK1") == ("http://", "")
    # A password of digits after its user reads like a port; with an "@" in it, like a host: neither is shown.
    assert redact_unparsed("http://u:99999#TOK1@gpu1:11434") == "http://***@gpu1:11434"
    assert redact_unparsed("http://u:p@TOK1#x@gpu1/") == "http://***@gpu1/"
    assert split_login(f"http://u:{PASSWORD}#x@gpu1:1/x?mail=a@b&t=TOK1") == ("http://", "gpu1:1/x?mail=a@b&t=TOK1")
    assert inert("ok\x1b]0;pwned\x07\x1b[2J\u202etxt\nnext") == "ok\\x1b]0;pwned\\x07\\x1b[2J\\u202etxt\nnext"


def test_url_credentials_are_the_percent_decoded_userinfo() -> None:
    # RFC 3986 userinfo is percent-encoded: a password with "@" or ":" in it is written %40, %3A; "+" is a "+".
    assert url_credentials("http://hook%40user:p%40ss%3Aw+d@127.0.0.1:8080/x") == ("hook@user", "p@ss:w+d")
    assert url_credentials("https://token@hooks.example.org/x") == ("token", "")
    assert url_credentials("http://hooks.example.org/a@b") is None
    assert url_credentials("http://127.0.0.1:11434") is None


@pytest.mark.e2e
def test_a_redis_password_reaches_no_message_nor_log_file(tmp_path: Path) -> None:
    log = tmp_path / "cron.log"
    url = f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"  # nothing listens there
    done = _webqa("--log-file", log, "crawl", "--redis", url, "--db", tmp_path / "w.duckdb", "http://127.0.0.1:9/")
    assert done.returncode == 3, done.stderr  # the environment failed, not the command (README: exit codes)
    (line,) = done.stderr.splitlines()
    assert line.startswith("Error: cannot reach Redis at redis://***@127.0.0.1:"), line
    assert _leaks(PASSWORD, done.stdout, done.stderr, log.read_text()) == []
    assert "$ webqa --log-file" in log.read_text()  # the command line is logged, without the password


@pytest.mark.e2e
@pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")
def test_a_crawl_through_a_redis_with_a_password_leaks_it_nowhere(tmp_path: Path) -> None:
    port = free_port()
    server = subprocess.Popen([REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                               "no", "--dir", str(tmp_path), "--requirepass", PASSWORD],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    site = SiteServer(("127.0.0.1",)).start()
    logs = {name: tmp_path / f"{name}.log" for name in ("first", "coordinator", "worker")}
    try:
        url = f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
        wait_for(lambda: subprocess.run(["redis-cli", "-p", str(port), "-a", PASSWORD, "ping"], capture_output=True,
                                        text=True).stdout.strip() == "PONG", 10, "redis-server")
        site.add(0, "/a.html", "<html><body><h1>A page</h1><p>Some text that is long enough to keep.</p></body></html>")
        db = tmp_path / "webqa.duckdb"
        env = _env(WEBQA_REDIS_GRACE="1", WEBQA_REDIS_LEASE="4", WEBQA_REDIS_WORKER_WAIT="2")
        # No worker comes: the hint names the worker command, without the password.
        alone = _webqa("--log-file", logs["first"], "crawl", "--redis", url, "--db", db, site.url(0, "/a.html"), env=env)
        assert alone.returncode == 3, alone.stderr
        assert "`webqa worker --redis redis://***@127.0.0.1:" in alone.stderr, alone.stderr
        # Then a worker, verbose: Scrapy logs its settings (REDIS_URL among them) at start.
        env["WEBQA_REDIS_WORKER_WAIT"] = "60"
        coordinator = subprocess.Popen([sys.executable, "-m", "jobs.cli", "-v", "--log-file", str(logs["coordinator"]),
                                        "crawl", "--redis", url, "--db", str(db), site.url(0, "/a.html")],
                                       cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        worker = _webqa("-v", "--log-file", logs["worker"], "worker", "--redis", url, "--wait", "60", "--workers", "1",
                        env=env)
        out, err = coordinator.communicate(timeout=120)
        assert coordinator.returncode == 0 and worker.returncode == 0, err[-3000:] + worker.stderr[-3000:]
        texts = [alone.stdout, alone.stderr, out, err, worker.stdout, worker.stderr,
                 *(path.read_text() for path in logs.values()), _everything_stored(db)]
        assert _leaks(PASSWORD, *texts) == []
    finally:
        site.stop()
        stop_server(server)


@pytest.mark.e2e
def test_url_file_secrets_and_credentials_are_stored_as_line_numbers(tmp_path: Path) -> None:
    site = SiteServer(("127.0.0.1",)).start()
    try:
        site.add(0, "/a.html", "<html><body><h1>A page</h1><p>Some text that is long enough to keep.</p></body></html>")
        urls = tmp_path / "urls.txt"
        urls.write_text(f"{site.url(0, '/a.html')}\n"
                        f"root:$6$saltsalt${PASSWORD}:19000:0:99999:7:::\n"
                        f"password={PASSWORD}\n"
                        f"https://admin:{PASSWORD}@example.org/private\n"
                        f"http://[::1:{PASSWORD}/\n", encoding="utf-8")
        db = tmp_path / "webqa.duckdb"
        done = _webqa("crawl", "-i", urls, "--db", db, "--delay", "0")
        assert done.returncode == 0, done.stderr
        with duckdb.connect(str(db), read_only=True) as conn:
            logged = conn.execute("SELECT url, outcome, reason FROM fetch_log ORDER BY url").fetchall()
        assert [(u, o) for u, o, _r in logged] == [(f"{urls}:{n}", "skipped") for n in (2, 3, 4, 5)]
        assert dict((u, r) for u, _o, r in logged)[f"{urls}:4"].startswith("credentials in URLs are not supported")
        assert _leaks(PASSWORD, done.stdout, done.stderr, _everything_stored(db)) == []
        assert _leaks("saltsalt", done.stdout, done.stderr, _everything_stored(db)) == []
    finally:
        site.stop()


@pytest.mark.e2e
def test_a_redirect_to_a_url_with_credentials_is_stored_without_them(tmp_path: Path) -> None:
    site = SiteServer(("127.0.0.1",)).start()
    try:
        target = site.url(0, "/b.html").replace("http://", f"http://user:{PASSWORD}@")
        site.add(0, "/a.html", status=302, headers={"Location": target}, body="")
        site.add(0, "/b.html", "<html><body><h1>B page</h1><p>Some text that is long enough to keep.</p></body></html>")
        site.add(0, "/c.html", status=302, headers={"Location": f"ftp://user:{PASSWORD}@127.0.0.1/x"}, body="")
        db = tmp_path / "webqa.duckdb"
        done = _webqa("crawl", site.url(0, "/a.html"), site.url(0, "/c.html"), "--db", db, "--delay", "0")
        assert done.returncode == 3, done.stderr
        stored = _everything_stored(db)
        assert "***@127.0.0.1" in stored and "ftp://***@127.0.0.1/x not followed" in stored
        assert _leaks(PASSWORD, done.stdout, done.stderr, stored) == []
    finally:
        site.stop()


@pytest.mark.e2e
def test_a_proxy_password_reaches_no_message_nor_log_file(tmp_path: Path) -> None:
    log = tmp_path / "cron.log"
    proxy = f"http://user:{PASSWORD}@127.0.0.1:{free_port()}"  # nothing listens there
    db = tmp_path / "webqa.duckdb"
    started = time.monotonic()
    done = _webqa("-v", "--log-file", log, "crawl", "http://127.0.0.1:9/x.html", "--db", db, "--delay", "0",
                  env=_env(http_proxy=proxy, https_proxy=proxy, no_proxy=""))
    assert done.returncode == 3 and time.monotonic() - started < 120, done.stderr
    assert _leaks(PASSWORD, done.stdout, done.stderr, log.read_text(), _everything_stored(db)) == []
