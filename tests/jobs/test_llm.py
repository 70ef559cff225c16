"""jobs.llm through the real ollama client over HTTP, against the scripted fake server."""

from __future__ import annotations

import logging
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from jobs.errors import ConfigError, LLMError, LLMUnavailableError, ModelNotFoundError
from jobs.llm import (DEFAULT_HOST, ChatResult, LLMReplyError, LLMServerError, OllamaClient, OllamaSettings,
                      normalize_host)
from tests.support.fake_ollama import Disconnect, Fail, FakeOllama, Garbage, Huge, Slow, StreamError, Trickle, user_prompt

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "found": {"type": "boolean"}},
    "required": ["answer", "found"],
}


def make_client(server: FakeOllama | None = None, *, host: str | None = None, **overrides: Any) -> OllamaClient:
    """A client with test-speed backoff; everything else at production defaults unless overridden."""
    settings: dict[str, Any] = {"backoff_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 5.0, "connect_timeout_s": 2.0}
    settings.update(overrides)
    return OllamaClient(OllamaSettings(host=host or (server.url if server else DEFAULT_HOST), **settings))


def free_port() -> int:
    """A port nobody listens on: bind, read the number, close."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------------------- chat_json


def test_streamed_json_reply_is_parsed_with_token_counts(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_chat({"answer": "Use list.sort()", "found": True})
    with make_client(fake_ollama) as client:
        result = client.chat_json("How do I sort a list in place?", SCHEMA, system="Answer from the pages.")
    assert isinstance(result, ChatResult)
    assert result.valid_json and result.data == {"answer": "Use list.sort()", "found": True}
    assert result.content == '{"answer": "Use list.sort()", "found": true}'
    assert result.prompt_tokens == 12  # words of system (4) + user (8) messages, as the fake counts them
    assert result.eval_tokens == 5  # streamed pieces, one per whitespace-separated word
    assert result.attempts == 1 and result.model == "llama3.2:3b" and result.latency_s > 0

    (request,) = fake_ollama.requests_to("/api/chat")
    body = request.body
    assert body["stream"] is True and body["format"] == SCHEMA
    # num_predict is sent by default so a looping model stops; the settings' options are merged over it.
    assert body["options"] == {"num_predict": 1024, "temperature": 0, "num_ctx": 8192} and body["keep_alive"] == "10m"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert user_prompt(body) == "How do I sort a list in place?"


def test_invalid_json_is_asked_twice_then_returned_raw(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_chat(Garbage("not json at all"), "still {not json")
    with make_client(fake_ollama) as client:
        result = client.chat_json("q", SCHEMA)
    assert len(fake_ollama.requests_to("/api/chat")) == 2
    assert not result.valid_json and result.data is None
    assert result.content == "still {not json" and result.attempts == 2


def test_invalid_json_then_valid_json_is_accepted(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_chat("[1, 2]", {"answer": "a", "found": False})  # a list is not the object we asked for
    with make_client(fake_ollama) as client:
        result = client.chat_json("q", SCHEMA)
    assert result.valid_json and result.data == {"answer": "a", "found": False} and result.attempts == 2


def test_503_twice_then_success(fake_ollama: FakeOllama, caplog: pytest.LogCaptureFixture) -> None:
    fake_ollama.script_chat(Fail(503), Fail(503), {"answer": "ok", "found": True})
    with caplog.at_level(logging.WARNING, logger="jobs.llm"), make_client(fake_ollama) as client:
        result = client.chat_json("q", SCHEMA)
    assert result.valid_json and result.attempts == 3
    assert len(fake_ollama.requests_to("/api/chat")) == 3
    retries = [r for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 2 and "server busy" in retries[0].getMessage()


def test_backoff_grows_between_attempts(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_chat(Fail(500), Fail(500), Fail(500), "{}")
    with make_client(fake_ollama, backoff_s=0.05, backoff_max_s=1.0) as client:
        client.chat_json("q", SCHEMA)
    times = [r.time for r in fake_ollama.requests_to("/api/chat")]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert gaps[0] >= 0.05 and gaps[1] >= 0.1 and gaps[2] >= 0.2  # 0.05 * 2**n


def test_500_forever_gives_llm_error_after_max_attempts(fake_ollama: FakeOllama) -> None:
    fake_ollama.chat_responder = lambda body: Fail(500, {"error": "llama runner exploded"})
    with make_client(fake_ollama, max_attempts=3) as client, pytest.raises(LLMError) as err:
        client.chat_json("q", SCHEMA)
    assert type(err.value) is LLMServerError  # a server failure: another host of a pool may answer
    assert len(fake_ollama.requests_to("/api/chat")) == 3
    message = str(err.value)
    assert fake_ollama.url in message and "failed after 3 attempts" in message and "llama runner exploded" in message


def test_429_is_retried(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_chat(Fail(429, {"error": "too many requests"}), "{}")
    with make_client(fake_ollama) as client:
        assert client.chat_json("q", SCHEMA).attempts == 2


def test_404_is_model_not_found_without_retry(fake_ollama: FakeOllama) -> None:
    fake_ollama.models = {"nomic-embed-text"}
    with make_client(fake_ollama) as client, pytest.raises(ModelNotFoundError) as err:
        client.chat_json("q", SCHEMA)
    assert "`ollama pull llama3.2:3b`" in str(err.value) and fake_ollama.url in str(err.value)
    assert len(fake_ollama.requests) == 1


def test_other_4xx_is_llm_error_with_server_message_without_retry(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_chat(Fail(400, {"error": "invalid format: schema is not an object"}))
    with make_client(fake_ollama) as client, pytest.raises(LLMError, match="invalid format: schema is not an object"):
        client.chat_json("q", SCHEMA)
    assert len(fake_ollama.requests) == 1


def test_error_inside_stream_is_retried(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_chat(StreamError("llama runner process has terminated", partial='{"ans'), {"answer": "x", "found": True})
    with make_client(fake_ollama) as client:
        result = client.chat_json("q", SCHEMA)
    assert result.valid_json and result.data == {"answer": "x", "found": True}  # no leftover partial content
    assert result.attempts == 2


def test_error_inside_stream_forever_names_it(fake_ollama: FakeOllama) -> None:
    fake_ollama.chat_responder = lambda body: StreamError("out of memory")
    with make_client(fake_ollama, max_attempts=2) as client, pytest.raises(LLMError, match="out of memory"):
        client.chat_json("q", SCHEMA)
    assert len(fake_ollama.requests) == 2


def test_dropped_connection_is_retried(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_chat(Disconnect(), "{}")
    with make_client(fake_ollama) as client:
        assert client.chat_json("q", SCHEMA).attempts == 2


def test_slow_reply_times_out_is_retried_then_fails(fake_ollama: FakeOllama) -> None:
    fake_ollama.chat_responder = lambda body: Slow(1.0, "{}")
    started = time.monotonic()
    with make_client(fake_ollama, timeout_s=0.3, max_attempts=2) as client, pytest.raises(LLMError) as err:
        client.chat_json("q", SCHEMA)
    elapsed = time.monotonic() - started
    assert type(err.value) is LLMServerError and "ReadTimeout" in str(err.value)
    assert len(fake_ollama.requests) == 2
    assert 0.6 <= elapsed < 1.8  # two 0.3 s timeouts; waiting out a 1 s reply would take >= 1.3 s


def test_slow_once_then_fast_succeeds(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_chat(Slow(1.0, "{}"), '{"answer": "fast", "found": true}')
    with make_client(fake_ollama, timeout_s=0.3) as client:
        result = client.chat_json("q", SCHEMA)
    assert result.data == {"answer": "fast", "found": True} and result.attempts == 2


def test_unreachable_port_is_unavailable_quickly() -> None:
    port = free_port()
    started = time.monotonic()
    with make_client(host=f"127.0.0.1:{port}") as client:
        with pytest.raises(LLMUnavailableError) as chat_err:
            client.chat_json("q", SCHEMA)
        with pytest.raises(LLMUnavailableError) as embed_err:
            client.embed(["x"])
        with pytest.raises(LLMUnavailableError) as ping_err:
            client.ping()
    assert time.monotonic() - started < 2.0
    for err in (chat_err, embed_err, ping_err):
        message = str(err.value)
        assert f"http://127.0.0.1:{port}" in message and "ollama serve" in message and "OLLAMA_HOST" in message
    assert "Connect" in str(chat_err.value)  # the reason survives ollama's generic ConnectionError


def test_concurrent_chat_calls_share_one_client(fake_ollama: FakeOllama) -> None:
    fake_ollama.chat_responder = lambda body: {"answer": user_prompt(body), "found": True}
    with make_client(fake_ollama) as client, ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda i: client.chat_json(f"question {i}", SCHEMA), range(12)))
    assert [r.data["answer"] for r in results if r.data] == [f"question {i}" for i in range(12)]


# ---------------------------------------------------------------------------- bounded replies


def test_num_predict_set_in_the_options_wins(fake_ollama: FakeOllama) -> None:
    with make_client(fake_ollama, options={"temperature": 0, "num_predict": 64}) as client:
        client.chat_json("q", SCHEMA)
    (request,) = fake_ollama.requests_to("/api/chat")
    assert request.body["options"] == {"temperature": 0, "num_predict": 64}


def test_trickling_reply_fails_at_the_reply_deadline_without_retry(fake_ollama: FakeOllama) -> None:
    # A token every 0.1 s never trips the 5 s per-read timeout; only the whole-reply deadline ends it.
    fake_ollama.chat_responder = lambda body: Trickle(0.1)
    with make_client(fake_ollama, reply_timeout_s=1.0, max_attempts=3) as client, ThreadPoolExecutor(1) as pool:
        call = pool.submit(client.chat_json, "q", SCHEMA)
        with pytest.raises(LLMReplyError) as err:
            call.result(timeout=30)  # bounded: without the deadline this would never return
    assert str(err.value) == "no complete reply within 1 s (model llama3.2:3b; ollama.reply_timeout)"
    assert err.value.raw_reply.startswith("again again ")
    assert len(fake_ollama.requests_to("/api/chat")) == 1  # a trickling model trickles again: no retry


def test_huge_reply_is_cut_off_at_max_reply_bytes(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_chat(Huge(10 * 1024 * 1024))
    with make_client(fake_ollama) as client, pytest.raises(LLMReplyError) as err:
        client.chat_json("q", SCHEMA)
    assert str(err.value) == "reply longer than 65536 bytes (model llama3.2:3b)"
    raw = err.value.raw_reply
    assert len(raw.encode("utf-8")) == 65536 and raw.startswith('{ "answer": "You can delete')
    assert len(fake_ollama.requests_to("/api/chat")) == 1


def test_reply_cap_keeps_whole_characters(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_chat("é" * 100)  # 200 bytes of two-byte characters
    with make_client(fake_ollama, max_reply_bytes=51) as client, pytest.raises(LLMReplyError) as err:
        client.chat_json("q", SCHEMA)
    assert err.value.raw_reply == "é" * 25


def test_reply_within_the_bounds_is_kept_whole(fake_ollama: FakeOllama) -> None:
    reply = {"answer": "x" * 400, "found": True}
    fake_ollama.script_chat(reply)
    with make_client(fake_ollama, max_reply_bytes=500, reply_timeout_s=5) as client:
        assert client.chat_json("q", SCHEMA).data == reply


@pytest.mark.parametrize("bad", [{"reply_timeout_s": 0}, {"reply_timeout_s": -1}, {"max_reply_bytes": 0}])
def test_reply_bounds_must_be_positive(bad: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        OllamaSettings(host="x", **bad)


# ---------------------------------------------------------------------------- embed


def test_embed_batches_and_keeps_order(fake_ollama: FakeOllama) -> None:
    texts = [f"text number {i}" for i in range(150)]
    fake_ollama.embed_fn = lambda text: [float(text.rsplit(" ", 1)[1])]
    with make_client(fake_ollama, embed_batch=64) as client:
        vectors = client.embed(texts)
    assert vectors == [[float(i)] for i in range(150)]
    requests = fake_ollama.requests_to("/api/embed")
    assert [len(r.body["input"]) for r in requests] == [64, 64, 22]
    assert {r.body["model"] for r in requests} == {"nomic-embed-text"}


def test_embed_empty_makes_no_request(fake_ollama: FakeOllama) -> None:
    with make_client(fake_ollama) as client:
        assert client.embed([]) == []
    assert fake_ollama.requests == []


def test_embed_retries_and_validates_count(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_embed(Fail(503), [[0.1], [0.2]])
    with make_client(fake_ollama) as client:
        with pytest.raises(LLMError, match="returned 2 embeddings for 3 texts"):
            client.embed(["a", "b", "c"])
    assert len(fake_ollama.requests_to("/api/embed")) == 2


def test_embed_unknown_model_is_model_not_found(fake_ollama: FakeOllama) -> None:
    with make_client(fake_ollama) as client, pytest.raises(ModelNotFoundError, match="ollama pull mxbai-embed-large"):
        client.embed(["a"], model="mxbai-embed-large")
    assert len(fake_ollama.requests) == 1


def test_embed_rejects_a_bare_string(fake_ollama: FakeOllama) -> None:
    with make_client(fake_ollama) as client, pytest.raises(TypeError):
        client.embed("oops")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- models and ping


def test_has_model_and_ensure_model(fake_ollama: FakeOllama) -> None:
    fake_ollama.models = {"llama3.2:3b", "nomic-embed-text"}
    with make_client(fake_ollama) as client:
        assert client.has_model("llama3.2:3b")
        assert client.has_model("nomic-embed-text") and client.has_model("nomic-embed-text:latest")
        assert not client.has_model("llama3.2:1b")
        client.ensure_model("llama3.2:3b")
        with pytest.raises(ModelNotFoundError) as err:
            client.ensure_model("qwen2.5:7b")
    assert str(err.value) == f"model qwen2.5:7b is not available on {fake_ollama.url}; run `ollama pull qwen2.5:7b`"
    assert {r.path for r in fake_ollama.requests} == {"/api/tags"}


def test_ping_ok_and_failing_server(fake_ollama: FakeOllama) -> None:
    with make_client(fake_ollama) as client:
        client.ping()
        fake_ollama.script("/api/tags", Fail(500))
        with pytest.raises(LLMUnavailableError, match="HTTP 500"):
            client.ping()
    assert len(fake_ollama.requests_to("/api/tags")) == 2  # ping never retries


# ---------------------------------------------------------------------------- settings


def test_settings_default_host_from_env(monkeypatch: pytest.MonkeyPatch, fake_ollama: FakeOllama) -> None:
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    assert OllamaSettings().host == "http://localhost:11434"
    monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{fake_ollama.port}")
    settings = OllamaSettings(backoff_s=0.01)
    assert settings.host == fake_ollama.url
    with OllamaClient(settings) as client:
        client.ping()
    assert len(fake_ollama.requests) == 1


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("localhost", "http://localhost:11434"),
        ("0.0.0.0:1234", "http://0.0.0.0:1234"),
        (":5678", "http://127.0.0.1:5678"),
        ("http://example.com", "http://example.com:80"),
        ("https://example.com/ollama/", "https://example.com:443/ollama"),
        ("[::1]:9000", "http://[::1]:9000"),
    ],
)
def test_normalize_host(given: str, expected: str) -> None:
    assert normalize_host(given) == expected


def test_settings_defaults_are_independent() -> None:
    a, b = OllamaSettings(host="x"), OllamaSettings(host="x")
    assert a.options == {"temperature": 0, "num_ctx": 8192} and a.options is not b.options
    assert (a.model, a.embedding_model, a.timeout_s, a.max_attempts, a.embed_batch) == (
        "llama3.2:3b", "nomic-embed-text", 120.0, 4, 64,
    )
    assert (a.reply_timeout_s, a.max_reply_bytes) == (300.0, 65536)


def test_connect_reports_what_a_command_can_use(fake_ollama: FakeOllama) -> None:
    from jobs.llm import connect

    settings = OllamaSettings(host=fake_ollama.url, model="llama3.2:3b", embedding_model="nomic-embed-text")
    both = connect(settings, chat=True, embeddings=True)
    assert both.llm is not None and both.embedder is not None and both.unreachable is None

    fake_ollama.models = {"llama3.2:3b"}
    no_embed = connect(settings, chat=True, embeddings=True)
    assert no_embed.llm is not None and no_embed.embedder is None
    assert no_embed.embedding_unavailable is not None and "ollama pull nomic-embed-text" in no_embed.embedding_unavailable

    fake_ollama.models = set()
    with pytest.raises(ModelNotFoundError):
        connect(settings, chat=True, embeddings=False)
    assert connect(settings, chat=False, embeddings=False).llm is None


def test_connect_returns_an_unreachable_server_instead_of_raising() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    from jobs.llm import connect

    access = connect(OllamaSettings(host=f"http://127.0.0.1:{port}"), chat=True, embeddings=True)
    assert isinstance(access.unreachable, LLMUnavailableError)
    assert access.llm is None and access.embedder is None
    assert access.embedding_unavailable == str(access.unreachable)


def test_a_user_and_password_in_the_host_are_sent_as_basic_auth_and_shown_nowhere(fake_ollama: FakeOllama) -> None:
    # Ollama has no login of its own; a proxy in front of it asks for one (HTTP 401 without it).
    fake_ollama.basic_auth = ("olla user", "p@ss:word")
    url = fake_ollama.url.replace("http://", "http://olla%20user:p%40ss%3Aword@")
    fake_ollama.script_chat({"answer": "yes", "found": True})
    with make_client(host=url) as client:
        client.ping()
        assert client.chat_json("Is it on?", SCHEMA).data == {"answer": "yes", "found": True}
        assert client.host == fake_ollama.url  # what messages, reports and the database show
        settings = client.settings
    assert "p@ss" not in repr(settings) and "p%40ss" not in repr(settings)
    assert replace(settings, max_attempts=1).credentials == settings.credentials  # a copy for the same server
    assert replace(settings, host="http://127.0.0.2:11434").credentials is None  # never sent to another server
    with make_client(fake_ollama) as bare:
        with pytest.raises(LLMUnavailableError, match=r"HTTP 401: it wants a user and password in the host URL"):
            bare.ping()
    with make_client(host=url.replace("p%40ss", "wrong")) as wrong:
        with pytest.raises(LLMUnavailableError, match=r"HTTP 401: it refused the user and password of the host URL"):
            wrong.ping()
