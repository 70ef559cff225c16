"""Embeddings spread over several Ollama hosts (jobs/embed_pool.py): both hosts embed, a failing host is
retired with one notice and its batches embedded elsewhere, no host left means bm25 as with one host.

Two fake Ollama servers listen on 127.0.0.1 and 127.0.0.2, reached through the real `ollama` client; the
windows are stored in a real DuckDB file and selected by the real Selector; the last test runs `webqa run`
as a subprocess, as cron runs it.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.embed_pool import EmbedPool, retirement_notices
from jobs.errors import LLMError
from jobs.hosts import HostSpec, connect_hosts
from jobs.llm import OllamaClient, OllamaSettings
from jobs.runstore import RunStore
from jobs.select import Selector
from pipelines import vectors
from tests.support.fake_ollama import Fail, FakeOllama
from tests.support.run import (  # noqa: F401 - crawled and db are fixtures, used by name
    ALL, crawled, db, job_yaml, quoting_responder, read_jsonl, rows, run_dir, run_job, write_job)
from tests.support.store import make_chunks, page_record

MODEL = "nomic-embed-text"
TOPICS = ("ports", "gardens", "themes", "journals", "widgets", "cables", "lamps", "rivers", "clocks")


def settings(url: str) -> OllamaSettings:
    # Two texts a request, so a handful of chunks makes several batches to spread.
    return OllamaSettings(host=url, embedding_model=MODEL, embed_batch=2, max_attempts=2, backoff_s=0.01,
                          backoff_max_s=0.02, timeout_s=5, connect_timeout_s=1)


@pytest.fixture
def two_hosts() -> Iterator[tuple[FakeOllama, FakeOllama]]:
    with FakeOllama() as first, FakeOllama(host="127.0.0.2") as second:
        yield first, second


def open_store(path: Path) -> RunStore:
    store = RunStore.open(path)
    for i, topic in enumerate(TOPICS):
        url = f"http://site.test/{topic}"
        sections = [((topic.title(), "Part"), f"All about {topic} number {i}: {topic} are described here {j}.")
                    for j in range(3)]
        chunks = make_chunks(url, sections)
        store.save_page(page_record(url, chunks), chunks, crawl_run_id=None)
    store.rebuild_fts()
    return store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RunStore]:
    with open_store(tmp_path / "pool.duckdb") as opened:
        yield opened


def selector(store: RunStore, embedder: object) -> Selector:
    return Selector(store.conn, embedder=embedder, embedding_model=MODEL,  # type: ignore[arg-type]
                    ensure_fts=store.load_fts)


def pool_of(*urls: str) -> EmbedPool:
    return EmbedPool([OllamaClient(settings(url)) for url in urls])


def cached(store: RunStore) -> list[tuple[str, list[float]]]:
    rows = store.conn.execute("SELECT embed_key, vector FROM embeddings ORDER BY embed_key").fetchall()
    return [(key, list(vector)) for key, vector in rows]


def window_count(store: RunStore) -> int:
    return int(store.conn.execute("SELECT count(DISTINCT window_key) FROM chunk_windows").fetchone()[0])


def embed_requests(fake: FakeOllama) -> int:
    return len(fake.requests_to("/api/embed"))


def retired_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "retired from embedding" in r.getMessage()]


def dead_url() -> str:
    """A loopback address where nothing listens: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.3", 0))
        return f"http://127.0.0.3:{sock.getsockname()[1]}"


def test_both_hosts_embed_and_the_vectors_match_one_host(two_hosts: tuple[FakeOllama, FakeOllama], store: RunStore,
                                                         tmp_path: Path) -> None:
    first, second = two_hosts
    pool = pool_of(first.url, second.url)
    chosen = selector(store, pool).select("gardens", "embedding")
    assert chosen.method_used == "embedding" and chosen.candidates[0].url.endswith("/gardens")
    assert embed_requests(first) >= 2 and embed_requests(second) >= 2
    assert sum(pool.embedded.values()) == window_count(store) + 1  # every window once, and the question
    assert pool.retired() == {}
    # The same windows through one host: the same vectors, bit for bit.
    with open_store(tmp_path / "one.duckdb") as alone, OllamaClient(settings(first.url)) as client:
        selector(alone, client).select("gardens", "embedding")
        assert cached(alone) == cached(store)
    pool.close()


@pytest.mark.parametrize("failure", ["500", "refused"])
def test_a_failing_host_is_retired_once_and_the_other_embeds_everything(
        two_hosts: tuple[FakeOllama, FakeOllama], store: RunStore, caplog: pytest.LogCaptureFixture,
        failure: str) -> None:
    first, second = two_hosts
    if failure == "500":
        first.script_embed(*[Fail(500)] * 20)
        bad = first.url
    else:
        bad = dead_url()
    pool = pool_of(bad, second.url)
    with caplog.at_level(logging.INFO):
        chosen = selector(store, pool).select("rivers", "embedding")
    assert chosen.method_used == "embedding" and chosen.candidates[0].url.endswith("/rivers")
    assert vectors.windows_without_vectors(store.conn, None, selector(store, pool).vector_space) == []
    assert pool.embedded[second.url.rstrip("/")] == window_count(store) + 1
    assert list(pool.retired()) == [bad]
    said = retired_lines(caplog)
    assert len(said) == 1 and said[0].startswith(f"Ollama host {bad} retired") and second.url in said[0]
    (notice,) = retirement_notices(pool)
    assert notice.startswith(f"Ollama host {bad} retired from embedding") and second.url in notice
    if failure == "500":
        assert embed_requests(first) == 2  # its own bounded retries, then never asked again
    pool.close()


def test_no_host_left_selects_with_bm25(two_hosts: tuple[FakeOllama, FakeOllama], store: RunStore,
                                        caplog: pytest.LogCaptureFixture) -> None:
    first, _second = two_hosts
    first.script_embed(*[Fail(500)] * 20)
    pool = pool_of(first.url, dead_url())
    with caplog.at_level(logging.INFO):
        chosen = selector(store, pool).select("rivers", "hybrid")
    assert chosen.method_used == "bm25" and chosen.candidates[0].url.endswith("/rivers")
    assert "every Ollama host that embeds was retired" in (chosen.notice or "")
    assert len(retired_lines(caplog)) == 2 and len(retirement_notices(pool)) == 2  # one per host
    assert cached(store) == []
    pool.close()


def test_connect_hosts_pools_every_host_with_the_embedding_model(two_hosts: tuple[FakeOllama, FakeOllama]) -> None:
    first, second = two_hosts
    lacking = FakeOllama(host="127.0.0.4", models={"llama3.2:3b"}).start()
    try:
        specs = [HostSpec(f.url, 1) for f in (first, lacking, second)]
        access = connect_hosts(settings(first.url), specs, chat=False, embeddings=True)
        assert isinstance(access.embedder, EmbedPool)
        assert access.embedder.hosts == [first.url.rstrip("/"), second.url.rstrip("/")]
        alone = connect_hosts(settings(first.url), specs[:2], chat=False, embeddings=True)
        assert isinstance(alone.embedder, OllamaClient)  # one host embeds as before
    finally:
        lacking.stop()


def test_a_rejected_batch_is_raised_not_sent_elsewhere(two_hosts: tuple[FakeOllama, FakeOllama]) -> None:
    first, second = two_hosts
    first.script_embed(Fail(400))
    second.script_embed(Fail(400))
    pool = pool_of(first.url, second.url)
    with pytest.raises(LLMError, match="rejected"):
        pool.embed(["one text", "another"])  # one batch: whichever host takes it rejects it
    assert pool.retired() == {} and embed_requests(first) + embed_requests(second) == 1
    pool.close()


def test_an_unexpected_error_in_a_worker_reaches_the_caller(two_hosts: tuple[FakeOllama, FakeOllama],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = two_hosts
    pool = pool_of(first.url, second.url)

    def broken(self: OllamaClient, texts: object, *, model: str | None = None) -> list[list[float]]:
        raise ValueError("a bug")

    monkeypatch.setattr(OllamaClient, "embed", broken)
    with pytest.raises(ValueError, match="a bug"):
        pool.embed([f"text {i}" for i in range(8)])
    pool.close()


# --------------------------------------------------------------------------------------------
# `webqa run` as cron runs it: a host failing its embedding batches is one line, the run unharmed


@pytest.mark.e2e
def test_a_run_embeds_on_the_host_left_and_says_so_once(tmp_path: Path, db: Path,
                                                          two_hosts: tuple[FakeOllama, FakeOllama]) -> None:
    first, second = two_hosts
    for fake in two_hosts:
        fake.chat_responder = quoting_responder
    first.script_embed(*[Fail(500)] * 50)
    text = job_yaml(ALL, method="hybrid").replace("ollama:\n", f"ollama:\n  hosts: [{first.url}, {second.url}]\n")
    log = tmp_path / "webqa.log"
    done = run_job(tmp_path, write_job(tmp_path, text), db, "-q", "--log-file", log, host=None)

    assert done.returncode == 0 and done.stdout == done.stderr == "", done.stderr
    logged = [line.split("] ", 1)[1] for line in log.read_text(encoding="utf-8").splitlines()]
    # One notice at the end of the run, in the log file and the run's notes; not a degraded run.
    said = [line for line in logged if "retired from embedding" in line]
    assert len(said) == 1 and said[0].startswith(f"Notice: Ollama host {first.url} retired from embedding")
    (run,) = rows(db, "SELECT status, notes FROM runs")
    assert run["status"] == "done" and "retired from embedding" in run["notes"]
    assert "retired from embedding" in (run_dir(tmp_path) / "report.md").read_text(encoding="utf-8")
    assert len(first.requests_to("/api/embed")) == 2  # its bounded retries (max_attempts 2), then never again
    assert len(second.requests_to("/api/embed")) >= 2
    answers = read_jsonl(run_dir(tmp_path) / "answers.jsonl")
    assert len(answers) == len(ALL) and all(a["error"] is None for a in answers)
    assert not [line for line in logged if "using bm25" in line]  # every question selected with hybrid
