"""Helpers the crawl tests share: the CLI's exit checks and ``run_crawl`` in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

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
