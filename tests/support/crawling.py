"""Helpers the crawl tests share: page material, `webqa crawl` and ``run_crawl`` in a subprocess, the
CLI's exit checks and the crawl tables read back from DuckDB."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb

REPO = Path(__file__).resolve().parent.parent.parent

# run_crawl in a subprocess, for options the CLI lacks; also reports the process's peak memory.
_API_SCRIPT = """
import json, logging, resource, sys
from crawler.run import CrawlOptions, run_crawl
from jobs.errors import WebqaError
logging.basicConfig(level=logging.ERROR)
options = json.loads(sys.argv[1])
if options.get("recrawl_after") is not None:  # JSON has no durations: seconds
    import datetime
    options["recrawl_after"] = datetime.timedelta(seconds=options["recrawl_after"])
try:
    summary = run_crawl(CrawlOptions(**options), sys.argv[2])
except WebqaError as exc:
    print(f"Error: {exc}", file=sys.stderr)
    sys.exit(int(exc.exit_code))
finally:
    print(f"maxrss_kb {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", file=sys.stderr)
print(summary.line())
sys.exit(0 if summary.count("failed") == 0 else 1)
"""


def crawl_api(db: Path, *, env: dict[str, str] | None = None, **options: Any) -> subprocess.CompletedProcess[str]:
    """``run_crawl(CrawlOptions(**options), db)`` in a subprocess (no delay unless given)."""
    options.setdefault("delay", 0)
    return subprocess.run(
        [sys.executable, "-c", _API_SCRIPT, json.dumps(options), str(db)],
        cwd=REPO, capture_output=True, text=True, timeout=120, env=env,
    )


def maxrss_mb(result: subprocess.CompletedProcess[str]) -> float:
    """The peak memory :func:`crawl_api`'s process reported."""
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("maxrss_kb ")]
    return int(line.split()[1]) / 1024


def ok(result: subprocess.CompletedProcess[str], code: int = 0) -> subprocess.CompletedProcess[str]:
    """The process exited with ``code`` and printed no traceback."""
    assert result.returncode == code, (
        f"exit {result.returncode}, expected {code}\nstdout: {result.stdout}\nstderr: {result.stderr[-5000:]}"
    )
    assert "Traceback" not in result.stderr, result.stderr[-5000:]
    return result


# -- page material ---------------------------------------------------------------------------

_WORDS = (
    "archive bucket cache daemon engine folder gateway handler index journal kernel ledger mirror "
    "network object packet queue router socket token update vector widget buffer cluster driver "
    "export filter growth harbor import kettle lantern meadow nickel orchard pebble quartz ribbon"
).split()


def prose(seed: str, sentences: int = 5) -> str:
    """Distinct, deterministic sentences (trafilatura drops repeated paragraphs)."""
    base = sum(map(ord, seed))
    out = []
    for i in range(sentences):
        words = " ".join(_WORDS[(base * 7 + i * 11 + k * 3) % len(_WORDS)] for k in range(12))
        out.append(f"The {seed} note {i} explains how {words} fit together in practice.")
    return " ".join(out)


def page(title: str, sections: Sequence[str] = ("Install", "Usage"), *, extra: str = "", links: Sequence[str] = (),
         head: str = '<meta charset="utf-8">', lang: str = "en") -> str:
    """A documentation-like page: h1 title, h2 sections, > 500 characters of text."""
    nav = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    body = f"<h1>{title}</h1><p>{prose(title + ' intro')}</p>"
    for section in sections:
        body += f"<h2>{section}</h2><p>{prose(title + ' ' + section)}</p><p>{prose(title + ' ' + section + ' more', 3)}</p>"
    return (
        f'<!DOCTYPE html><html lang="{lang}"><head>{head}<title>{title}</title></head><body>'
        f"<nav><ul>{nav}</ul></nav><article>{body}{extra}</article></body></html>"
    )


# -- running crawls --------------------------------------------------------------------------


def run_cli(*args: str, db: Path, delay: float | None = 0, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m jobs.cli crawl ARGS --db DB --delay DELAY` as a subprocess."""
    command = [sys.executable, "-m", "jobs.cli", "crawl", *args, "--db", str(db)]
    if delay is not None:
        command += ["--delay", str(delay)]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)


_SUMMARY = re.compile(
    r"fetched (?P<fetched>\d+) \(new (?P<new>\d+), changed (?P<changed>\d+), unchanged (?P<unchanged>\d+)\), "
    r"not modified (?P<not_modified>\d+), fresh (?P<fresh>\d+), skipped (?P<skipped>\d+), failed (?P<failed>\d+);"
    r".*chunks written (?P<chunks>\d+)"
)


def summary(result: subprocess.CompletedProcess[str], stream: str = "stdout") -> dict[str, int]:
    """The counts of the one summary line (stdout; stderr when the crawl gave up)."""
    lines = [line for line in getattr(result, stream).splitlines() if line.startswith("Crawled in ")]
    assert len(lines) == 1, f"no summary line\nstdout: {result.stdout}\nstderr: {result.stderr}"
    match = _SUMMARY.search(lines[0])
    assert match, lines[0]
    return {key: int(value) for key, value in match.groupdict().items()}


def rows(db: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    conn = duckdb.connect(str(db), read_only=True)
    try:
        return conn.execute(sql, list(params)).fetchall()
    finally:
        conn.close()


def fetch_log(db: Path) -> dict[str, tuple[str, str, int | None]]:
    """url → (outcome, reason, status) of the latest crawl run."""
    found = rows(
        db,
        "SELECT url, outcome, reason, status FROM fetch_log "
        "WHERE crawl_run_id = (SELECT max(crawl_run_id) FROM crawl_runs) ORDER BY fetch_log_id",
    )
    log: dict[str, tuple[str, str, int | None]] = {}
    for url, outcome, reason, status in found:
        assert url not in log, f"{url} recorded twice: {log[url]} and {(outcome, reason, status)}"
        log[url] = (outcome, reason, status)
    return log


def pages(db: Path) -> dict[str, dict[str, Any]]:
    conn = duckdb.connect(str(db), read_only=True)
    try:
        cursor = conn.execute("SELECT * FROM pages")
        names = [d[0] for d in cursor.description]
        return {row[0]: dict(zip(names, row)) for row in cursor.fetchall()}
    finally:
        conn.close()


def chunk_ids(db: Path, url: str | None = None) -> set[str]:
    if url is None:
        return {r[0] for r in rows(db, "SELECT chunk_id FROM chunks")}
    return {r[0] for r in rows(db, "SELECT chunk_id FROM chunks WHERE url = ?", [url])}


def mount_tmpfs(folder: Path, size: str) -> bool:
    """A small tmpfs at ``folder`` (a real ENOSPC), when this machine lets us mount one (root, no seccomp)."""
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
