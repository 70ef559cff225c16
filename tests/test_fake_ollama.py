"""The fake Ollama server itself: protocol shape, scripting order, defaults and the request log."""

from __future__ import annotations

import json
import math
import time

import httpx
import ollama
import pytest

from tests.support.fake_ollama import (
    Disconnect,
    Fail,
    FakeOllama,
    Garbage,
    Slow,
    StreamError,
    hashed_embedding,
    sample_for_schema,
    user_prompt,
)

MODEL = "llama3.2:3b"


def chat_body(prompt: str = "hi", *, stream: bool = True, model: str = MODEL, **extra: object) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": stream, **extra}


def stream_lines(server: FakeOllama, body: dict[str, object]) -> list[dict[str, object]]:
    with httpx.Client(base_url=server.url, timeout=5) as http:
        with http.stream("POST", "/api/chat", json=body) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("application/x-ndjson")
            return [json.loads(line) for line in response.iter_lines() if line]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


def test_streamed_chat_has_ollama_shape(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_chat("The answer is forty two")
    lines = stream_lines(fake_ollama, chat_body("what is it"))
    *pieces, final = lines
    assert "".join(p["message"]["content"] for p in pieces) == "The answer is forty two"  # type: ignore[index]
    assert all(p["done"] is False for p in pieces)
    assert final["done"] is True and final["done_reason"] == "stop"
    assert final["eval_count"] == len(pieces) == 5
    assert final["prompt_eval_count"] == 3  # words in the prompt
    assert isinstance(final["total_duration"], int)


def test_non_streamed_chat_and_real_client(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_chat({"a": 1}, "plain")
    client = ollama.Client(host=fake_ollama.url)
    first = client.chat(model=MODEL, messages=[{"role": "user", "content": "x"}], stream=False)
    assert json.loads(first.message.content or "") == {"a": 1}
    assert first.done and first.eval_count
    pieces = list(client.chat(model=MODEL, messages=[{"role": "user", "content": "x"}], stream=True))
    assert "".join(p.message.content or "" for p in pieces) == "plain"
    client.close()


def test_script_is_consumed_in_order_then_default_responder(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_chat("one", Fail(503), "three")
    seen: list[dict[str, object]] = []

    def responder(body: dict[str, object]) -> str:
        seen.append(body)
        return f"default for {user_prompt(body)}"

    fake_ollama.chat_responder = responder
    with httpx.Client(base_url=fake_ollama.url, timeout=5) as http:
        replies = [http.post("/api/chat", json=chat_body(f"q{i}", stream=False)) for i in range(4)]
    assert [r.status_code for r in replies] == [200, 503, 200, 200]
    assert replies[0].json()["message"]["content"] == "one"
    assert "server busy" in replies[1].json()["error"]
    assert replies[2].json()["message"]["content"] == "three"
    assert replies[3].json()["message"]["content"] == "default for q3"
    assert len(seen) == 1 and seen[0]["messages"] == [{"role": "user", "content": "q3"}]
    assert fake_ollama.pending() == 0


def test_default_responder_fills_the_schema(fake_ollama: FakeOllama) -> None:
    schema = {
        "type": "object",
        "properties": {
            "answer": {"type": "string"},
            "confidence": {"type": "number"},
            "status": {"enum": ["answered", "not_found"]},
            "sources": {"type": "array", "items": {"$ref": "#/$defs/Src"}, "minItems": 1},
        },
        "$defs": {"Src": {"type": "object", "properties": {"id": {"type": "integer"}}}},
    }
    with httpx.Client(base_url=fake_ollama.url, timeout=5) as http:
        reply = http.post("/api/chat", json=chat_body(stream=False, format=schema)).json()
        plain = http.post("/api/chat", json=chat_body(stream=False)).json()
    assert json.loads(reply["message"]["content"]) == {
        "answer": "", "confidence": 0.0, "status": "answered", "sources": [{"id": 0}],
    }
    assert plain["message"]["content"] == "ok"
    assert sample_for_schema({"anyOf": [{"type": "null"}, {"type": "integer"}]}) == 0


def test_request_log_records_path_body_and_time(fake_ollama: FakeOllama) -> None:
    before = time.monotonic()
    with httpx.Client(base_url=fake_ollama.url, timeout=5) as http:
        http.get("/api/tags")
        http.post("/api/chat", json=chat_body("logged", stream=False))
        http.post("/api/embed", json={"model": "nomic-embed-text", "input": "x"})
    assert [(r.method, r.path) for r in fake_ollama.requests] == [
        ("GET", "/api/tags"), ("POST", "/api/chat"), ("POST", "/api/embed"),
    ]
    assert fake_ollama.requests[0].body is None
    assert user_prompt(fake_ollama.requests[1].body) == "logged"
    times = [r.time for r in fake_ollama.requests]
    assert before <= times[0] <= times[1] <= times[2]
    assert len(fake_ollama.requests_to("/api/chat")) == 1


def test_unknown_model_is_404_and_does_not_consume_script(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_chat("kept")
    with httpx.Client(base_url=fake_ollama.url, timeout=5) as http:
        missing = http.post("/api/chat", json=chat_body(model="nope:1b"))
        show = http.post("/api/show", json={"model": "nope:1b"})
        embed = http.post("/api/embed", json={"model": "nope:1b", "input": "x"})
    assert missing.status_code == 404
    assert missing.json() == {"error": 'model "nope:1b" not found, try pulling it first'}
    assert show.status_code == 404 and show.json() == {"error": "model 'nope:1b' not found"}
    assert embed.status_code == 404
    assert fake_ollama.pending() == 1


def test_tags_and_show_through_the_real_client(fake_ollama: FakeOllama) -> None:
    fake_ollama.models = {"llama3.2:3b", "nomic-embed-text"}
    client = ollama.Client(host=fake_ollama.url)
    names = sorted(m.model or "" for m in client.list().models)
    assert names == ["llama3.2:3b", "nomic-embed-text:latest"]  # untagged names list as :latest
    assert client.show("nomic-embed-text:latest").capabilities == ["embedding"]
    with pytest.raises(ollama.ResponseError) as err:
        client.show("missing")
    assert err.value.status_code == 404
    client.close()


def test_stream_error_surfaces_as_response_error(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_chat(StreamError("runner died", partial="half an"))
    lines = stream_lines(fake_ollama, chat_body())
    assert lines[-1] == {"error": "runner died"}
    assert "".join(line["message"]["content"] for line in lines[:-1]) == "half an"  # type: ignore[index]
    fake_ollama.script_chat(StreamError("again"))
    client = ollama.Client(host=fake_ollama.url)
    with pytest.raises(ollama.ResponseError, match="again"):
        list(client.chat(model=MODEL, messages=[{"role": "user", "content": "x"}], stream=True))
    client.close()


def test_garbage_slow_and_disconnect(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_chat(Garbage(), Slow(0.3, "late"), Disconnect())
    with httpx.Client(base_url=fake_ollama.url, timeout=5) as http:
        garbage = http.post("/api/chat", json=chat_body(stream=False)).json()["message"]["content"]
        with pytest.raises(ValueError):
            json.loads(garbage)
        started = time.monotonic()
        late = http.post("/api/chat", json=chat_body(stream=False)).json()
        assert time.monotonic() - started >= 0.3
        assert late["message"]["content"] == "late"
        with pytest.raises(httpx.RemoteProtocolError):
            http.post("/api/chat", json=chat_body(stream=False))


def test_embed_default_vectors_and_script(fake_ollama: FakeOllama) -> None:
    fake_ollama.script_embed(Fail(500), [[1.0, 0.0]])
    with httpx.Client(base_url=fake_ollama.url, timeout=5) as http:
        assert http.post("/api/embed", json={"model": "nomic-embed-text", "input": ["a"]}).status_code == 500
        scripted = http.post("/api/embed", json={"model": "nomic-embed-text", "input": ["a"]}).json()
        single = http.post("/api/embed", json={"model": "nomic-embed-text", "input": "solo"}).json()
    assert scripted["embeddings"] == [[1.0, 0.0]]
    assert len(single["embeddings"]) == 1 and len(single["embeddings"][0]) == 64

    client = ollama.Client(host=fake_ollama.url)
    texts = ["python list sort method", "sort a python list", "weather in paris today"]
    vectors = client.embed(model="nomic-embed-text", input=texts).embeddings
    client.close()
    assert [list(v) for v in vectors] == [hashed_embedding(t) for t in texts]  # deterministic
    assert all(math.isclose(math.sqrt(sum(x * x for x in v)), 1.0) for v in vectors)
    assert cosine(list(vectors[0]), list(vectors[1])) > cosine(list(vectors[0]), list(vectors[2]))


def test_custom_embed_fn(fake_ollama: FakeOllama) -> None:
    fake_ollama.embed_fn = lambda text: [float(len(text))]
    with httpx.Client(base_url=fake_ollama.url, timeout=5) as http:
        reply = http.post("/api/embed", json={"model": "nomic-embed-text", "input": ["ab", "abc"]}).json()
    assert reply["embeddings"] == [[2.0], [3.0]]


def test_stop_is_prompt_even_with_a_sleeping_handler() -> None:
    server = FakeOllama().start()
    server.script_chat(Slow(30.0, "never"))
    with httpx.Client(base_url=server.url, timeout=0.2) as http:
        with pytest.raises(httpx.ReadTimeout):
            http.post("/api/chat", json=chat_body(stream=False))
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 2.0
    server.stop()  # idempotent


def test_each_test_gets_a_fresh_server(fake_ollama: FakeOllama) -> None:
    assert fake_ollama.requests == [] and fake_ollama.pending() == 0
    assert fake_ollama.url.startswith("http://127.0.0.1:")
