"""The `e2e` marker stays honest: a test that starts a child process without it fails, naming the marker,
and the fixtures that start one mark their users (tests/support/e2e.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
INNER = '''
import subprocess
import sys

import pytest


def test_unmarked_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60)


@pytest.mark.e2e
def test_marked_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60)


def test_starts_nothing():
    assert True
'''


@pytest.mark.e2e  # its inner tests start a child process, which the guard refuses to an unmarked test
def test_an_unmarked_test_starting_a_process_fails_and_names_the_marker(pytester: pytest.Pytester,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the inner pytest runs in pytester's folder
    pytester.makeconftest('pytest_plugins = ["tests.support.e2e"]\n')
    pytester.makeini("[pytest]\nmarkers =\n    e2e: starts a child process\n")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_unmarked_starts_a_process starts a child process*not marked e2e*"])
    fast = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers", "-m", "not e2e")
    fast.assert_outcomes(passed=1, failed=1, deselected=1)


def test_the_fixtures_that_start_processes_mark_their_users(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('pytest_plugins = ["tests.support.e2e"]\n')
    pytester.makeini("[pytest]\nmarkers =\n    e2e: starts a child process\n")
    pytester.makepyfile(test_inner='''
from tests.support.run import crawled, db  # noqa: F401 - fixtures, used by name


def test_uses_the_crawled_site(db):
    pass


def test_plain(tmp_path):
    pass
''')
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--collect-only", "-q", "-m", "e2e")
    result.stdout.fnmatch_lines(["*test_uses_the_crawled_site*", "*1/2 tests collected (1 deselected)*"])
