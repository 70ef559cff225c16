"""Two signals give 130 every time: a second SIGTERM that arrives after the command has recorded its first
(while it prints its last lines and exits) used to meet the default action and end the process as killed,
143, which cron reads as a crash. A real crawl of a slow loopback site, signalled as cron's timeout would."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.site_server import SiteServer
from tests.support.crawling import REPO, page

pytestmark = pytest.mark.e2e  # every test here starts a child process (tests/support/e2e.py)


@pytest.mark.parametrize("command", ["crawl", "run"])
def test_a_second_sigterm_while_the_command_ends_still_exits_130(site: SiteServer, tmp_path: Path,
                                                                 command: str) -> None:
    urls = []
    for i in range(6):
        site.slow(0, f"/p{i}.html", 1.0, page(f"Page {i}"))
        urls.append(site.url(0, f"/p{i}.html"))
    db = tmp_path / "w.duckdb"
    if command == "crawl":
        args = ["crawl", *urls, "--db", str(db), "--delay", "0"]
    else:
        job = tmp_path / "job.yaml"
        job.write_text(f"name: late\nurls: [{', '.join(urls)}]\nquestions: ['What is on page 1?']\n"
                       "crawl: {delay: 0, allow_private_networks: true}\nanswerer: extractive\n", encoding="utf-8")
        args = ["run", str(job), "--db", str(db), "--out", str(tmp_path / "out")]
    proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", "-q", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not [r for r in site.requests_for(0) if r.path.startswith("/p")] and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # the command has recorded the signal when it says so
            seen.append(line)
            if line.startswith("Interrupted"):
                proc.send_signal(signal.SIGTERM)
                break
        rest = proc.stderr.read()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 130, "".join(seen) + rest
    assert "Traceback" not in "".join(seen) + rest
