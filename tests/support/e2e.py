"""The `e2e` marker: a test that starts a program as a child process (a crawl, the `webqa` CLI, redis-server,
a shell script) is marked, so that `make test-fast` (`pytest -m "not e2e"`) can leave it out.

Tests using a fixture that starts one are marked here at collection; others carry ``pytestmark`` or
``@pytest.mark.e2e``. A test left unmarked that starts a child process fails at once, naming the marker,
so the fast set never grows slow unseen. A process pool inside the test's own process (pipelines/extract.py's
workers) is not a child program and is not marked.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

#: Fixtures that start a child process for the test that uses them, by the module defining them (a test
#: file's own fixture of the same name, e.g. a `db` written in-process, does not count).
STARTS_A_PROCESS = frozenset({("tests.support.run", "crawled"), ("tests.support.run", "db"),
                              ("tests.support.redis", "redis_server"), ("tests.support.redis", "redis_url"),
                              ("tests.support.redis", "procs")})


def _uses_a_process_fixture(item: pytest.Item) -> bool:
    definitions = getattr(item, "_fixtureinfo", None)
    for name, defs in (definitions.name2fixturedefs.items() if definitions else ()):
        if defs and (getattr(defs[-1].func, "__module__", None), name) in STARTS_A_PROCESS:
            return True
    return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _uses_a_process_fixture(item):
            item.add_marker(pytest.mark.e2e)


class UnmarkedProcess(RuntimeError):
    pass


def _refuse(nodeid: str) -> Any:
    def execute_child(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        raise UnmarkedProcess(f"{nodeid} starts a child process ({args!r:.120}) but is not marked e2e: "
                              "add `@pytest.mark.e2e` (or `pytestmark = pytest.mark.e2e` for the module)")
    return execute_child


def _guarded(item: pytest.Item) -> Iterator[None]:
    if item.get_closest_marker("e2e"):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "_execute_child", _refuse(item.nodeid))
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    yield from _guarded(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _guarded(item)
