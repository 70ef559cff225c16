"""process_page: the process-pool worker (time bound, error capture, picklability)."""

from __future__ import annotations

import pickle
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import FrameType

import pytest
import trafilatura

import pipelines.page_processing as extract_mod
from pipelines.page_processing import PageResult, process_page

PAGE = (Path(__file__).parent / "pages" / "sphinx_like.html").read_text(encoding="utf-8")
URL = "https://docs.example.org/guide.html"


def _burn_cpu(seconds: float) -> None:
    """Busy-loop for ``seconds`` of this process's CPU time: the deadline counts CPU, so a
    page that is slow by computing must compute (time.sleep uses none). The SIGPROF handler
    runs between the loop's bytecodes, as it would in a slow pure-Python extraction."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def _slow_clean(html: str, url: str | None = None, **kwargs: object) -> object:
    _burn_cpu(30)
    raise AssertionError("the deadline should have stopped this")


def test_normal_page_returns_chunks() -> None:
    result = process_page(PAGE, URL)
    assert result.error is None
    assert result.clean is not None and result.clean.method == "main"
    assert result.chunks
    assert ("widget — Build widgets", "Installing", "On Linux") in {c.heading_path for c in result.chunks}
    assert result.seconds > 0


def test_token_options_are_passed_through() -> None:
    small = process_page(PAGE, URL, max_tokens=40, overlap_tokens=0)
    default = process_page(PAGE, URL)
    assert len(small.chunks) > len(default.chunks)
    assert all(c.token_estimate <= 40 for c in small.chunks)


def test_slow_extraction_is_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extract_mod, "clean_page", _slow_clean)
    cpu = time.process_time()
    result = process_page(PAGE, URL, max_seconds=0.2)
    assert result.error == "extraction used more than 0.2 s of CPU"
    assert result.chunks == []
    assert result.clean is None
    assert time.process_time() - cpu < 10  # cut off, not run to the end (30 s of CPU)


def test_waiting_page_is_not_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    # Wall time passing without this process computing (as on a machine busy with other
    # processes) does not count against the page: only its own CPU time does.
    def sleepy(html: str, url: str | None = None, **kwargs: object) -> object:
        time.sleep(0.5)
        return real(html, url)

    real = extract_mod.clean_page
    monkeypatch.setattr(extract_mod, "clean_page", sleepy)
    result = process_page(PAGE, URL, max_seconds=0.2)
    assert result.error is None and result.chunks
    assert result.seconds >= 0.5  # past the deadline in wall time


def test_deadline_is_not_swallowed_by_clean_html_error_handling(monkeypatch: pytest.MonkeyPatch) -> None:
    # clean_html catches Exception around every trafilatura call so that one odd page
    # cannot crash it; the deadline must still get through those guards.
    import pipelines.clean as clean_mod

    calls: list[bool] = []

    def slow_trafilatura(tree: object, **kwargs: object) -> object:
        calls.append(bool(kwargs.get("favor_recall")))
        _burn_cpu(30)
        return None

    monkeypatch.setattr(trafilatura, "extract", slow_trafilatura)
    result = process_page(PAGE, URL, max_seconds=0.2)
    assert result.error == "extraction used more than 0.2 s of CPU"
    assert calls == [False]  # neither the recall attempt nor the body fallback ran after the deadline


def test_deadline_restores_previous_handler_and_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    fired: list[int] = []

    def outer(signum: int, frame: FrameType | None) -> None:
        fired.append(signum)

    # A sampling profiler's handler and CPU timer, say; pytest-timeout's SIGALRM is not touched.
    alarm_handler, alarm_timer = signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)
    previous = signal.signal(signal.SIGPROF, outer)
    previous_timer = signal.setitimer(signal.ITIMER_PROF, 30.0)
    try:
        monkeypatch.setattr(extract_mod, "clean_page", _slow_clean)
        assert process_page(PAGE, URL, max_seconds=0.1).error is not None
        assert signal.getsignal(signal.SIGPROF) is outer
        remaining, _ = signal.getitimer(signal.ITIMER_PROF)
        assert 20.0 < remaining <= 30.0  # the outer timer is running again, minus CPU spent
        assert fired == []
        assert signal.getsignal(signal.SIGALRM) is alarm_handler
        assert (signal.getitimer(signal.ITIMER_REAL)[0] > 0) == (alarm_timer[0] > 0)
    finally:
        signal.setitimer(signal.ITIMER_PROF, *previous_timer)
        signal.signal(signal.SIGPROF, previous)


def test_no_timer_left_behind_after_success() -> None:
    before = signal.getsignal(signal.SIGPROF)
    outer_remaining, _ = signal.getitimer(signal.ITIMER_PROF)
    process_page(PAGE, URL, max_seconds=5)
    remaining, _ = signal.getitimer(signal.ITIMER_PROF)
    if outer_remaining == 0:
        assert remaining == 0  # our 5 s timer is gone
    else:
        assert 0 < remaining <= outer_remaining  # an outer one (a profiler) keeps running
    assert signal.getsignal(signal.SIGPROF) is before


def test_exceptions_become_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(html: str, url: str | None = None, **kwargs: object) -> object:
        raise ValueError("bad page\nsecond line")

    monkeypatch.setattr(extract_mod, "clean_page", broken)
    result = process_page(PAGE, URL)
    assert result.error == "extraction failed: ValueError: bad page"
    assert result.clean is None and result.chunks == []


def test_error_in_chunking_keeps_clean_result(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> object:
        raise RecursionError()

    monkeypatch.setattr(extract_mod, "split_blocks", broken)
    result = process_page(PAGE, URL)
    assert result.error == "extraction failed: RecursionError"
    assert result.clean is not None and result.clean.method == "main"


def test_outside_main_thread_runs_without_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    def slowish(html: str, url: str | None = None, **kwargs: object) -> object:
        _burn_cpu(0.3)
        return real(html, url)

    real = extract_mod.clean_page
    monkeypatch.setattr(extract_mod, "clean_page", slowish)
    results: list[PageResult] = []
    thread = threading.Thread(target=lambda: results.append(process_page(PAGE, URL, max_seconds=0.05)))
    thread.start()
    thread.join(timeout=30)
    assert results and results[0].error is None and results[0].chunks


@pytest.mark.parametrize("html", ["", "\x00" * 100, "<html>" * 50_000, "<" * 10_000])
def test_hostile_input_never_raises(html: str) -> None:
    result = process_page(html, URL)
    assert result.error is None
    assert result.chunks == [] or all(c.text for c in result.chunks)


def test_works_in_a_process_pool() -> None:
    local = process_page(PAGE, URL)
    pickle.loads(pickle.dumps(local))
    with ProcessPoolExecutor(max_workers=1) as pool:
        remote = pool.submit(process_page, PAGE, URL, max_seconds=30).result(timeout=120)
    assert remote.error is None
    assert remote.chunks == local.chunks
    assert remote.clean == local.clean
