"""The run's output folder (jobs/output_folder.py): checked before the crawl without being created, told in one
message whether found before the crawl or when the reports are written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.run import (  # noqa: F401 - crawled and db are fixtures, used by name
    crawled, db, free_port, job_yaml, lines, run_job, write_job)

pytestmark = pytest.mark.e2e


def test_a_run_that_fails_leaves_no_empty_output_folder(tmp_path: Path, db: Path) -> None:
    job = write_job(tmp_path, job_yaml(["port"], extra="fallback_extractive: false\n"))
    done = run_job(tmp_path, job, db, "-q", host=f"http://127.0.0.1:{free_port()}")
    assert done.returncode == 3, done.stderr
    assert "Ollama" in done.stderr
    assert not (tmp_path / "out").exists()  # checked before the crawl, created only for the reports


def test_an_output_folder_under_a_file_is_one_error_line_before_anything(tmp_path: Path, db: Path) -> None:
    (tmp_path / "file").write_text("x", encoding="utf-8")
    out = tmp_path / "file" / "out"
    job = write_job(tmp_path, job_yaml(["port"]))
    done = run_job(tmp_path, job, db, "--out", str(out), "-q", host=f"http://127.0.0.1:{free_port()}")
    assert done.returncode == 3, done.stderr
    assert lines(done.stderr) == [f"Error: {out}: cannot create the output folder: Not a directory; fix it or pass --out DIR"]


def test_an_output_folder_that_is_a_dangling_link_is_refused_before_anything(tmp_path: Path, db: Path) -> None:
    # A reports mount that is not mounted: the link stays, pointing nowhere.
    out = tmp_path / "reports"
    out.symlink_to(tmp_path / "not-mounted" / "reports")
    job = write_job(tmp_path, job_yaml(["port"]))
    done = run_job(tmp_path, job, db, "--out", str(out), "-q", host=f"http://127.0.0.1:{free_port()}")
    assert done.returncode == 3, done.stderr
    assert lines(done.stderr) == [f"Error: {out}: cannot create the output folder: a link to a folder that does not "
                                  "exist; fix it or pass --out DIR"]
