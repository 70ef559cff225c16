"""One URL-file behaviour for `webqa run` (a job's urls_file) and `webqa crawl -i` (docs/job-reference.md).

A bad line is skipped with one `Skipped file:line: …` report and the other URLs are crawled; a file
with no valid URL is a usage error (exit 2) before anything is fetched. Real CLI subprocesses against
the loopback site; the job answers with the extractive answerer, so no LLM is involved.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.site_server import SiteServer
from tests.support.run import WIDGET, lines, webqa

pytestmark = pytest.mark.e2e  # every test here starts a child process (tests/support/e2e.py)

GOOD_AND_BAD = "{url}\nftp://example.org/file.txt\n"
ALL_BAD = "# nothing fetchable\nftp://example.org/file.txt\nnot a url\n"


@pytest.fixture(scope="module")
def site() -> Iterator[SiteServer]:
    with SiteServer(hosts=("127.0.0.1",)) as server:
        server.add(0, "/widget.html", body=WIDGET)
        yield server


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def job_with(tmp_path: Path, urls_file: Path) -> Path:
    return write(tmp_path / "job.yaml", f"name: urls\nurls_file: {urls_file.name}\ncrawl:\n  delay: 0\n"
                                        "answerer: extractive\nselection:\n  method: bm25\n"
                                        "questions:\n  - Which port does the dashboard server listen on?\n")


def run(tmp_path: Path, job: Path) -> list[str]:
    return ["run", str(job), "--db", str(tmp_path / "webqa.duckdb"), "--out", str(tmp_path / "out")]


def crawl(tmp_path: Path, urls: Path) -> list[str]:
    return ["crawl", "-i", str(urls), "--db", str(tmp_path / "webqa.duckdb"), "--delay", "0"]


def skipped_line(urls: Path) -> str:
    return f"Skipped {urls}:2: 'ftp://example.org/file.txt': unsupported scheme 'ftp'; only http and https are fetched"


@pytest.mark.parametrize("command", ["run", "crawl"])
def test_a_bad_line_is_skipped_with_its_file_and_line_and_the_rest_is_crawled(
        command: str, site: SiteServer, tmp_path: Path) -> None:
    urls = write(tmp_path / "urls.txt", GOOD_AND_BAD.format(url=site.url(0, "/widget.html")))
    args = run(tmp_path, job_with(tmp_path, urls)) if command == "run" else crawl(tmp_path, urls)

    done = webqa(*args, cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert skipped_line(urls) in lines(done.stderr), done.stderr
    assert "fetched 1 (new 1" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["run", "crawl"])
def test_a_file_without_a_valid_url_is_a_usage_error(command: str, tmp_path: Path) -> None:
    urls = write(tmp_path / "urls.txt", ALL_BAD)
    job = job_with(tmp_path, urls)
    args = run(tmp_path, job) if command == "run" else crawl(tmp_path, urls)
    where = f" (urls_file on line 2 of {job})" if command == "run" else ""

    done = webqa(*args, cwd=tmp_path)

    assert done.returncode == 2, done.stderr
    assert lines(done.stderr) == [
        f"Error: {urls}:2: 'ftp://example.org/file.txt': unsupported scheme 'ftp'; only http and https are fetched "
        f"(and 1 more); the file lists no valid URL{where}"
    ]
    assert not (tmp_path / "webqa.duckdb").exists()  # refused before anything was opened or fetched
