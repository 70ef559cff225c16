"""`embed: on_crawl` end to end: `webqa run` crawls a loopback site, embeds the windows of the job's pages right
after the crawl through the fake Ollama hosts (tests/support/fake_ollama.py, the real `ollama` client), and its
questions then embed only themselves. A failure to embed is one notice and the questions select with bm25; a
terminal gets a progress line, a pipe and -q get none.

nomic-embed-text's task prefixes tell the two kinds of text apart in the fakes' logs: windows are sent as
"search_document: …", questions as "search_query: …".
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_ollama import Fail, FakeOllama
from tests.support.run import (ALL, PAGES, QUESTIONS, WEBQA, job_yaml, lines, quoting_responder, read_jsonl, rows,
                               webqa)
from tests.support.site_server import SiteServer

pytestmark = pytest.mark.e2e  # every test here starts `webqa run` as a child process

DOCUMENT, QUERY = "search_document: ", "search_query: "


@pytest.fixture(scope="module")
def site() -> Iterator[SiteServer]:
    with SiteServer() as server:
        for (host, path), body in PAGES.items():
            server.add(host, path, body=body)
        yield server


def embed_job(tmp_path: Path, site: SiteServer, *, method: str = "hybrid", hosts: list[str] | None = None) -> Path:
    urls = "".join(f"  - {site.url(host, path)}\n" for host, path in PAGES)
    text = job_yaml(ALL, method=method, extra="embed: on_crawl\ncrawl:\n  delay: 0\n  allow_private_networks: true\n"
                                              f"urls:\n{urls}")
    if hosts is not None:
        text = text.replace("ollama:\n", f"ollama:\n  hosts: [{', '.join(hosts)}]\n")
    job = tmp_path / "job.yaml"
    job.write_text(text, encoding="utf-8")
    return job


def run(tmp_path: Path, job: Path, *args: str, host: str | None = None) -> subprocess.CompletedProcess[str]:
    return webqa(*args, "run", job, "--db", tmp_path / "w.duckdb", "--out", tmp_path / "out", host=host,
                 cwd=tmp_path, timeout=180)


def embedded_texts(fake: FakeOllama) -> list[list[str]]:
    """The texts of each /api/embed request the fake received, in order."""
    out = []
    for request in fake.requests_to("/api/embed"):
        texts = request.body["input"]
        out.append([texts] if isinstance(texts, str) else list(texts))
    return out


def windows_and_vectors(db: Path) -> tuple[int, int]:
    (counts,) = rows(db, "SELECT (SELECT count(DISTINCT window_key) FROM chunk_windows) AS windows, "
                         "(SELECT count(*) FROM embeddings) AS vectors")
    return counts["windows"], counts["vectors"]


def down_url(address: str = "127.0.0.3") -> str:
    import socket

    with socket.socket() as sock:
        sock.bind((address, 0))
        return f"http://{address}:{sock.getsockname()[1]}"  # closed when the block ends: nothing listens


def test_windows_are_embedded_after_the_crawl_and_questions_embed_only_themselves(
        tmp_path: Path, site: SiteServer) -> None:
    with FakeOllama() as embeds, FakeOllama(host="127.0.0.2") as chats_only:
        chats_only.models = {"llama3.2:3b"}  # no embedding model: it answers, it does not embed
        for fake in (embeds, chats_only):
            fake.chat_responder = quoting_responder
        down = down_url()
        done = run(tmp_path, embed_job(tmp_path, site, hosts=[embeds.url, chats_only.url, down]))

    assert done.returncode == 0, done.stderr
    windows, vectors = windows_and_vectors(tmp_path / "w.duckdb")
    assert windows == vectors > 0  # every window of the crawled pages has its vector
    requests = embedded_texts(embeds)
    documents = [i for i, texts in enumerate(requests) if all(t.startswith(DOCUMENT) for t in texts)]
    queries = [i for i, texts in enumerate(requests) if all(t.startswith(QUERY) for t in texts)]
    assert len(documents) + len(queries) == len(requests)
    # Every window was embedded before the first question; the questions embedded only themselves.
    assert sum(len(requests[i]) for i in documents) == windows and max(documents) < min(queries)
    assert sorted(requests[i][0].removeprefix(QUERY) for i in queries) == sorted(q for q, _ in QUESTIONS.values())
    assert chats_only.requests_to("/api/embed") == []
    err = lines(done.stderr)
    assert f"Notice: Ollama host {down} left out of this run" in "\n".join(err)
    (told,) = [line for line in err if line.startswith("Embedded ")]
    assert re.fullmatch(rf"Embedded {windows} windows with nomic-embed-text on 1 host\(s\) in [\d.]+ s \([\d.]+ windows/s\)",
                        told), told
    assert err.index(told) < min(i for i, line in enumerate(err) if line.startswith("[1/5]"))  # before any question
    assert "\r" not in done.stderr  # stderr is a pipe: no progress line
    answers = read_jsonl(next((tmp_path / "out").glob("run-*")) / "answers.jsonl")
    assert len(answers) == len(QUESTIONS) and {a["method_used"] for a in answers} == {"hybrid"}


def test_no_host_with_the_embedding_model_is_a_notice_and_the_crawl_stands(tmp_path: Path, site: SiteServer) -> None:
    with FakeOllama() as fake:
        fake.models = {"llama3.2:3b"}
        fake.chat_responder = quoting_responder
        url = fake.url
        done = run(tmp_path, embed_job(tmp_path, site, method="bm25"), "-q", host=url)
        embed_requests = fake.requests_to("/api/embed")

    # A bm25 job loses nothing without vectors: the run is clean (exit 0, silent under -q), the notice is in
    # its notes.
    assert done.returncode == 0 and done.stdout == done.stderr == "", done.stderr
    assert embed_requests == []
    (record,) = rows(tmp_path / "w.duckdb", "SELECT status, notes FROM runs")
    assert record["status"] == "done"
    assert record["notes"] == ("embed: on_crawl: the windows were not embedded (embedding model nomic-embed-text is "
                               f"not available on {url}; run `ollama pull nomic-embed-text`)")
    assert rows(tmp_path / "w.duckdb", "SELECT count(*) AS n FROM pages")[0]["n"] == len(PAGES)


def test_embedding_that_fails_after_the_crawl_is_one_notice_and_questions_select_with_bm25(
        tmp_path: Path, site: SiteServer) -> None:
    with FakeOllama() as fake:
        fake.chat_responder = quoting_responder
        fake.script_embed(*[Fail(500)] * 20)  # the host answers, its embedding fails: every attempt
        done = run(tmp_path, embed_job(tmp_path, site), host=fake.url)
        requests = embedded_texts(fake)

    # The crawl stands and every question is answered, from bm25; the run says it degraded (exit 1), as when
    # the first question's own embedding fails.
    assert done.returncode == 1, done.stderr
    notices = [line for line in lines(done.stderr) if line.startswith("Notice: ")]
    assert notices[0].startswith("Notice: embed: on_crawl: embedding stopped after 0 of ")
    assert notices[0].endswith("; the questions select with bm25 instead of hybrid")
    assert any(n.startswith("Notice: embedding selection failed for 5 of 5 questions") for n in notices)
    assert requests and all(t.startswith(DOCUMENT) for texts in requests for t in texts)  # no question asked again
    answers = read_jsonl(next((tmp_path / "out").glob("run-*")) / "answers.jsonl")
    assert len(answers) == len(QUESTIONS) and {a["method_used"] for a in answers} == {"bm25"}
    assert windows_and_vectors(tmp_path / "w.duckdb")[1] == 0


def run_on_a_terminal(tmp_path: Path, job: Path, host: str, *options: str, db: str = "w.duckdb") -> tuple[int, str]:
    """`webqa run` with stdout and stderr on a pseudo-terminal, as a person at a terminal runs it."""
    env = {k: v for k, v in os.environ.items() if k not in ("WEBQA_DB", "OLLAMA_HOST")}
    env.update(OLLAMA_HOST=host, COLUMNS="100")
    leader, follower = pty.openpty()
    process = subprocess.Popen([*WEBQA, *options, "run", str(job), "--db", str(tmp_path / db), "--out",
                                str(tmp_path / "out")], stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
                               cwd=tmp_path, env=env)
    os.close(follower)
    seen = bytearray()
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            elif process.poll() is not None:
                break
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
        os.close(leader)
    return code, seen.decode("utf-8", "replace")


def test_a_terminal_gets_a_progress_line_while_windows_are_embedded(tmp_path: Path, site: SiteServer) -> None:
    with FakeOllama() as fake:
        fake.chat_responder = quoting_responder
        code, shown = run_on_a_terminal(tmp_path, embed_job(tmp_path, site), fake.url)
        quiet_code, quiet_shown = run_on_a_terminal(tmp_path, tmp_path / "job.yaml", fake.url, "-q", db="q.duckdb")
    windows, vectors = windows_and_vectors(tmp_path / "w.duckdb")
    assert code == 0, shown
    assert windows == vectors > 0
    # The line is redrawn in place: first nothing done, at the end every window with the rate.
    frames = [frame.strip() for frame in re.split(r"[\r\n]+", shown)]
    assert f"0/{windows} windows" in frames
    assert any(re.fullmatch(rf"{windows}/{windows} windows  [\d.]+ windows/s", f) for f in frames), shown
    # Under -q nothing at all, on a terminal too (it embedded the same windows into its own database).
    assert quiet_code == 0 and quiet_shown == "", quiet_shown
    assert windows_and_vectors(tmp_path / "q.duckdb") == (windows, vectors)


def test_a_signal_while_embedding_stops_the_run_before_its_questions_and_resume_answers(
        tmp_path: Path, site: SiteServer) -> None:
    from tests.support.fake_ollama import hashed_embedding

    with FakeOllama() as fake:
        fake.chat_responder = quoting_responder
        fake.embed_fn = lambda text: (time.sleep(0.5), hashed_embedding(text))[1]  # the windows take seconds
        job = embed_job(tmp_path, site)
        env = {k: v for k, v in os.environ.items() if k not in ("WEBQA_DB", "OLLAMA_HOST")}
        env["OLLAMA_HOST"] = fake.url
        process = subprocess.Popen([*WEBQA, "run", str(job), "--db", str(tmp_path / "w.duckdb"), "--out",
                                    str(tmp_path / "out")], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
        try:
            deadline = time.monotonic() + 120
            while not fake.requests_to("/api/embed") and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            process.send_signal(signal.SIGINT)  # once: the run stops at its next checkpoint
            _out, err = process.communicate(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
        stopped = process.returncode
        chats_before_resume = len(fake.requests_to("/api/chat"))
        resumed = webqa("run", job, "--resume", "--db", tmp_path / "w.duckdb", "--out", tmp_path / "out",
                        host=fake.url, cwd=tmp_path, timeout=180)

    assert stopped == 130, err
    assert chats_before_resume == 0  # no question was asked
    assert "the run stopped while embedding the windows of the crawled pages" in err
    assert resumed.returncode == 0, resumed.stderr
    windows, vectors = windows_and_vectors(tmp_path / "w.duckdb")
    assert windows == vectors > 0
    (record,) = rows(tmp_path / "w.duckdb", "SELECT status, exit_code FROM runs")
    assert (record["status"], record["exit_code"]) == ("done", 0)
