"""Embedding windows ahead of the questions (``embed: on_crawl``): the pure parts and the selector's side.

The progress line's text and redraw rule (jobs/embed_progress.py), the next slice embedded while the previous
one is inserted (jobs/embed_ahead.py), and Selector.embed_ahead on a real DuckDB store: every window embedded
once, the questions then embedding only themselves, and a failure kept so they select with bm25 at once.
End to end through `webqa run`: tests/e2e/test_embed_on_crawl_e2e.py.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from jobs.embed_ahead import embedded_ahead
from jobs.embed_progress import EmbedProgress, eta_text, progress_text
from jobs.errors import LLMError
from jobs.runstore import RunStore
from jobs.select import Selector
from tests.support.store import make_chunks, page_record

# --------------------------------------------------------------------------------------------
# The progress line


def test_progress_text_gives_done_total_rate_and_eta() -> None:
    assert progress_text(1200, 9791, 30.0, 80) == "  1,200/9,791 windows  40.0 windows/s  ETA 3 min 35 s"
    # Nothing done yet: no rate to tell, nor an ETA; all done: no ETA.
    assert progress_text(0, 9791, 2.0, 80) == "  0/9,791 windows"
    assert progress_text(50, 50, 2.0, 80) == "  50/50 windows  25.0 windows/s"


def test_progress_text_fits_a_narrow_terminal() -> None:
    line = progress_text(1200, 9791, 30.0, 20)
    assert line == "  1,200/9,791 wind…" and len(line) == 19
    assert progress_text(1, 2, 1.0, 1) == ""


@pytest.mark.parametrize(("seconds", "text"), [(0.4, "0 s"), (59.4, "59 s"), (60, "1 min 0 s"),
                                               (3599, "59 min 59 s"), (7500, "2 h 05 min")])
def test_eta_text(seconds: float, text: str) -> None:
    assert eta_text(seconds) == text


def test_progress_redraws_at_most_every_interval_and_always_at_the_end() -> None:
    now = [100.0]
    out = io.StringIO()
    meter = EmbedProgress(out, interval=0.5, width=lambda: 50, clock=lambda: now[0])
    meter(0, 300)
    now[0] += 0.1
    meter(100, 300)  # too soon after the last draw: skipped
    now[0] += 0.5
    meter(200, 300)
    now[0] += 0.1
    meter(300, 300)  # the end is always drawn
    meter.close()
    drawn = out.getvalue()
    assert drawn.endswith("\n") and drawn.count("\r") == 3
    frames = [frame.rstrip() for frame in drawn.strip("\n").split("\r")[1:]]
    assert frames == ["  0/300 windows", "  200/300 windows  333.3 windows/s  ETA 0 s",
                      "  300/300 windows  428.6 windows/s"]
    assert all(len(frame) == 49 for frame in drawn.strip("\n").split("\r")[1:])  # padded over the last line


def test_progress_that_drew_nothing_closes_without_a_newline() -> None:
    out = io.StringIO()
    meter = EmbedProgress(out, width=lambda: 40)
    meter(0, 0)  # nothing to embed
    meter.close()
    assert out.getvalue() == ""


# --------------------------------------------------------------------------------------------
# The next slice embedded while this one is inserted


def test_embedded_ahead_yields_every_part_in_order() -> None:
    parts = [[1, 2], [3], [4, 5, 6]]
    assert list(embedded_ahead(lambda part: [x * 10 for x in part], parts)) == [
        ([1, 2], [10, 20]), ([3], [30]), ([4, 5, 6], [40, 50, 60])]
    assert list(embedded_ahead(lambda part: part, [])) == []


def test_the_next_part_is_embedded_while_the_caller_handles_this_one() -> None:
    second_started = threading.Event()

    def embed(part: str) -> str:
        if part == "second":
            second_started.set()
        return part.upper()

    seen = []
    for part, result in embedded_ahead(embed, ["first", "second"]):
        if part == "first":
            # Serially, "second" would be embedded only after this body returns: the wait would time out.
            seen.append(second_started.wait(timeout=10))
        seen.append(result)
    assert seen == [True, "FIRST", "SECOND"]


def test_an_embedding_error_is_raised_at_its_parts_turn_and_nothing_after_it_is_embedded() -> None:
    calls = []

    def embed(part: int) -> int:
        calls.append(part)
        if part == 2:
            raise LLMError("host gone")
        return part

    handled = []
    with pytest.raises(LLMError, match="host gone"):
        for part, _result in embedded_ahead(embed, [1, 2, 3]):
            handled.append(part)
    assert handled == [1] and calls == [1, 2]


# --------------------------------------------------------------------------------------------
# Selector.embed_ahead on a real store

PAGES: dict[str, list[tuple[tuple[str, ...], str]]] = {
    "http://a.test/guide": [
        (("Guide", "Server"), "The server port is 8080. Configure it in widget.toml before the first start."),
        (("Guide", "Intro"), "A widget library for dashboards and small control panels."),
        (("Guide", "Gardens"), "Tomatoes grow well in sunny corners of the allotment."),
    ],
    "http://b.test/notes": [
        (("Notes", "Widget Server Port"), "Use the configure command."),
        (("Notes", "Journal"), "The widget server writes its log to the journal."),
    ],
}


class WordEmbedder:
    """Bag of words over a fixed vocabulary; records every call."""

    VOCAB = ("widget", "server", "port", "tomatoes", "journal", "configure")

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str], *, model: str | None = None) -> list[list[float]]:
        self.calls.append(list(texts))
        return [[float(word in t.lower()) + 0.01 * i for i, word in enumerate(self.VOCAB)] for t in texts]


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    opened = RunStore.open(tmp_path / "ahead.duckdb")
    for url, sections in PAGES.items():
        chunks = make_chunks(url, sections)
        opened.save_page(page_record(url, chunks), chunks, crawl_run_id=None)
    opened.rebuild_fts()
    yield opened  # type: ignore[misc]
    opened.close()


def windows(store: RunStore) -> int:
    return store.conn.execute("SELECT count(DISTINCT window_key) FROM chunk_windows").fetchone()[0]  # type: ignore[index]


def test_embed_ahead_embeds_every_window_once_and_questions_embed_only_themselves(store: RunStore) -> None:
    embedder = WordEmbedder()
    selector = Selector(store.conn, embedder=embedder, embedding_model="m", ensure_fts=store.load_fts)
    steps: list[tuple[int, int]] = []
    done = selector.embed_ahead(None, progress=lambda d, t: steps.append((d, t)))
    total = windows(store)
    assert done == total > 0 and steps[0] == (0, total) and steps[-1] == (total, total)
    assert store.conn.execute("SELECT count(*) FROM embeddings").fetchone() == (total,)
    before = len(embedder.calls)
    selection = selector.select("Which port does the widget server use?", "hybrid")
    assert selection.method_used == "hybrid"
    assert embedder.calls[before:] == [["Which port does the widget server use?"]]  # the question alone
    assert Selector(store.conn, embedder=embedder, embedding_model="m").embed_ahead(None) == 0  # cached


def test_embed_ahead_in_slices_reports_progress_after_each(store: RunStore) -> None:
    selector = Selector(store.conn, embedder=WordEmbedder(), embedding_model="m", ensure_fts=store.load_fts)
    steps: list[tuple[int, int]] = []
    done = selector.embed_missing(None, batch=2, progress=lambda d, t: steps.append((d, t)))
    assert done == windows(store) > 2
    assert [d for d, _ in steps] == list(range(0, done, 2)) + [done] and {t for _, t in steps} == {done}


class Failing(WordEmbedder):
    def embed(self, texts: Sequence[str], *, model: str | None = None) -> list[list[float]]:
        self.calls.append(list(texts))
        raise LLMError("every Ollama host that embeds was retired (http://x: HTTP 500)")


def test_a_failure_ahead_is_kept_so_questions_select_with_bm25_without_asking_again(store: RunStore) -> None:
    embedder = Failing()
    selector = Selector(store.conn, embedder=embedder, embedding_model="m", ensure_fts=store.load_fts)
    with pytest.raises(LLMError):
        selector.embed_ahead(None)
    calls = len(embedder.calls)
    selection = selector.select("Which port does the widget server use?", "hybrid")
    assert selection.method_used == "bm25" and "HTTP 500" in (selection.notice or "")
    assert len(embedder.calls) == calls  # the hosts were not asked again
