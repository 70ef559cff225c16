"""A scriptable fake Ollama server that speaks the real HTTP API, for tests and benchmarks.

No Ollama can run in CI, so tests talk to this server through the real ``ollama`` client over
real HTTP: every byte the product sends and parses is the same as against ``ollama serve``.

Public surface::

    server = FakeOllama()            # or the ``fake_ollama`` pytest fixture (fresh per test)
    server.start(); server.url       # "http://127.0.0.1:PORT"
    server.models = {"llama3.2:3b"}  # what /api/tags lists; anything else answers 404
    server.script_chat("text", {"answer": 1}, Fail(503), Slow(1.0), StreamError("boom"), Garbage())
    server.script_chat(Trickle(1.0), Huge(10 * 1024 * 1024))   # a token a second forever; a 10 MB reply
    server.script_embed(Fail(500), [[0.1, 0.2]])
    server.chat_responder = lambda body: {...}   # answers /api/chat once the script is used up
    server.embed_fn = lambda text: [...]         # vector for one input text
    server.requests                  # every request received, in order (RecordedRequest)
    server.peak_active("/api/chat")  # most requests to a path handled at the same time
    server.reply_model = "other:1b"  # the model name chat replies carry (default: the one asked for)
    FakeOllama(host="127.0.0.2")     # another loopback address, for a second server
    server.stop()

Endpoints: ``POST /api/chat`` (streamed NDJSON or one JSON object), ``POST /api/embed``,
``GET /api/tags``, ``POST /api/show``, ``GET /api/version``. Unknown models answer 404 with
Ollama's own error text, checked *before* the script is consulted, so a scripted reply is never
used up by a request for a missing model.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Union

import pytest

__all__ = [
    "DEFAULT_MODELS",
    "Disconnect",
    "Fail",
    "FakeOllama",
    "Garbage",
    "Huge",
    "RecordedRequest",
    "Slow",
    "StreamError",
    "Trickle",
    "fake_ollama",
    "hashed_embedding",
    "sample_for_schema",
    "user_prompt",
]

DEFAULT_MODELS: frozenset[str] = frozenset({"llama3.2:3b", "nomic-embed-text"})

# Ollama's own texts, so code that matches on them (or shows them to users) is exercised.
_CHAT_NOT_FOUND = 'model "{model}" not found, try pulling it first'
_SHOW_NOT_FOUND = "model '{model}' not found"
_BUSY = "server busy, please try again.  maximum pending requests exceeded"


# --------------------------------------------------------------------------- scripting actions


@dataclass(frozen=True)
class Fail:
    """Answer with an HTTP error status. ``body``: dict → JSON, str → sent verbatim, None → Ollama-like ``{"error": …}``."""

    status: int = 500
    body: dict[str, Any] | str | None = None


@dataclass(frozen=True)
class Slow:
    """Wait ``seconds`` before sending anything (so a client read timeout fires), then answer ``reply``.

    ``reply`` None means "whatever the default responder would say".
    """

    seconds: float
    reply: Reply | None = None


@dataclass(frozen=True)
class StreamError:
    """A 200 stream that streams ``partial`` content and then a line ``{"error": message}``.

    This is how Ollama reports failures that happen after generation started (runner crash, OOM).
    A non-streamed request gets a 500 with the same error instead, as Ollama does.
    """

    message: str = "llama runner process has terminated: signal: killed"
    partial: str = ""


@dataclass(frozen=True)
class Garbage:
    """A well-formed reply whose *content* is not JSON (a model ignoring the format).

    On endpoints other than /api/chat: a 200 whose body is not JSON at all.
    """

    text: str = "Sure! Here is the answer you asked for: it depends."


@dataclass(frozen=True)
class Disconnect:
    """Close the connection without answering (a crashed or restarted server)."""


@dataclass(frozen=True)
class Trickle:
    """A 200 stream that sends ``piece`` every ``interval_s`` seconds and never finishes.

    A model stuck generating slowly: each read returns well within any per-read timeout, so only a
    deadline on the whole reply ends it. The stream stops when the client hangs up or the server stops.
    """

    interval_s: float = 1.0
    piece: str = "again "


@dataclass(frozen=True)
class Huge:
    """A 200 stream of ``size`` bytes of content in ``piece_bytes`` pieces, then the ``done`` line.

    Generated as it is sent, so the fake itself stays small; it stops early when the client hangs up.
    """

    size: int
    piece_bytes: int = 4096
    text: str = '{ "answer": "You can delete the folder with rmdir() '


#: What a script entry or responder may return: chat content as text, a dict sent as JSON
#: content, an action, or (for /api/embed only) an explicit list of vectors.
Reply = Union[str, dict, list, Fail, Slow, StreamError, Garbage, Disconnect, Trickle, Huge]


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it. ``body`` is the parsed JSON, or None if absent/invalid."""

    method: str
    path: str
    body: Any
    time: float  # time.monotonic() at arrival, to check backoff spacing


# --------------------------------------------------------------------------- default behaviours


def user_prompt(body: Mapping[str, Any]) -> str:
    """The content of the last user message of a /api/chat request body ('' if none)."""
    for message in reversed(body.get("messages") or []):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return str(message.get("content") or "")
    return ""


def sample_for_schema(schema: Any, _root: Any = None) -> Any:
    """A minimal value that satisfies a JSON schema: the default chat answer for ``format=schema``.

    Handles what pydantic's ``model_json_schema()`` produces: objects, arrays, scalars, enums,
    const, anyOf/oneOf and local ``$ref`` into ``$defs``. Every property is filled, required or not.
    """
    root = schema if _root is None else _root
    if not isinstance(schema, Mapping):
        return {}
    if "$ref" in schema:
        target: Any = root
        for part in str(schema["$ref"]).lstrip("#/").split("/"):
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        return sample_for_schema(target, root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        options = [o for o in schema.get(key) or [] if not (isinstance(o, Mapping) and o.get("type") == "null")]
        if options:
            return sample_for_schema(options[0], root)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        return {name: sample_for_schema(sub, root) for name, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [sample_for_schema(schema.get("items", {}), root) for _ in range(int(schema.get("minItems", 0)))]
    scalars: dict[str, Any] = {"string": "", "integer": 0, "number": 0.0, "boolean": False, "null": None}
    return scalars.get(str(kind), {})


def default_chat_responder(body: Mapping[str, Any]) -> Reply:
    """Schema-conforming JSON when the request has ``format`` (a schema or "json"), else "ok"."""
    fmt = body.get("format")
    if isinstance(fmt, Mapping):
        return sample_for_schema(fmt)
    if fmt == "json":
        return {}
    return "ok"


_WORD = re.compile(r"\w+", re.UNICODE)


def hashed_embedding(text: str, dims: int = 64) -> list[float]:
    """Deterministic bag-of-words vector: texts sharing words get a high cosine similarity.

    Each lower-cased word adds ±1 to one of ``dims`` buckets chosen by a stable hash (not
    ``hash()``, which is salted per process). The result has unit length, like Ollama's
    embeddings; a text without words gets the zero vector.
    """
    vector = [0.0] * dims
    for word in _WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
        number = int.from_bytes(digest, "big")
        vector[number % dims] += 1.0 if (number >> 32) & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm else vector


def _canonical(model: str) -> str:
    """Ollama's name rule: a name without a tag means ``:latest`` (a ':' inside a host part is not a tag)."""
    return model if ":" in model.rsplit("/", 1)[-1] else f"{model}:latest"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _pieces(content: str) -> list[str]:
    """Split content into token-like stream pieces (word plus trailing space), losslessly."""
    return re.findall(r"\S+\s*|\s+", content) or [""]


# --------------------------------------------------------------------------- the server


class FakeOllama:
    """A real HTTP server on loopback (127.0.0.1, or ``host``), on a free port, in a background thread.

    See the module doc.

    Attributes tests may set at any time:
      ``models``          model names the server "has" (default: llama3.2:3b, nomic-embed-text).
      ``chat_responder``  ``(request_body) -> Reply`` used for /api/chat once the script is empty.
      ``embed_fn``        ``(text) -> list[float]`` used for /api/embed once its script is empty.
      ``chunk_delay_s``   pause between streamed chat pieces (simulates generation speed).
      ``reply_model``     the model name chat replies carry; None (default): the model asked for.
      ``basic_auth``      ``(user, password)``: every request without them answers 401, as a proxy in front of Ollama does.
    Read-only: ``url``, ``requests``.
    """

    def __init__(self, *, models: set[str] | frozenset[str] = DEFAULT_MODELS, embed_dims: int = 64,
                 host: str = "127.0.0.1") -> None:
        self.host = host
        self.models: set[str] = set(models)
        self.chat_responder: Callable[[dict[str, Any]], Reply] = default_chat_responder
        self.embed_fn: Callable[[str], list[float]] = lambda text: hashed_embedding(text, embed_dims)
        self.chunk_delay_s: float = 0.0
        self.reply_model: str | None = None
        self.basic_auth: tuple[str, str] | None = None
        self.requests: list[RecordedRequest] = []
        self._active: dict[str, int] = {}
        self._peak: dict[str, int] = {}
        self._scripts: dict[str, deque[Reply]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> FakeOllama:
        """Bind a free port and serve in a background thread; returns self."""
        if self._httpd is not None:
            return self
        self._httpd = _Server((self.host, 0), _Handler, self)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fake-ollama-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, wake handlers sleeping in ``Slow`` and wait for them; idempotent."""
        if self._httpd is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()  # joins handler threads (block_on_close); they finish fast now
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> FakeOllama:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("FakeOllama is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL to give to clients, e.g. ``http://127.0.0.1:54321``."""
        return f"http://{self.host}:{self.port}"

    # -- scripting

    def script(self, path: str, *replies: Reply) -> None:
        """Queue replies for the next requests to ``path`` (e.g. "/api/tags"), consumed in order."""
        with self._lock:
            self._scripts.setdefault(path, deque()).extend(replies)

    def script_chat(self, *replies: Reply) -> None:
        """Queue /api/chat replies: str content, dict (sent as JSON content), or an action."""
        self.script("/api/chat", *replies)

    def script_embed(self, *replies: Reply) -> None:
        """Queue /api/embed replies: an action, or a list of vectors returned verbatim."""
        self.script("/api/embed", *replies)

    def pending(self, path: str = "/api/chat") -> int:
        """How many scripted replies for ``path`` are still unused."""
        with self._lock:
            return len(self._scripts.get(path, ()))

    def requests_to(self, path: str) -> list[RecordedRequest]:
        """The recorded requests for one path, in arrival order."""
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def peak_active(self, path: str = "/api/chat") -> int:
        """The most requests to ``path`` that were being handled at one time (a client's concurrency)."""
        with self._lock:
            return self._peak.get(path, 0)

    def _enter(self, path: str) -> None:
        with self._lock:
            self._active[path] = self._active.get(path, 0) + 1
            self._peak[path] = max(self._peak.get(path, 0), self._active[path])

    def _leave(self, path: str) -> None:
        with self._lock:
            self._active[path] -= 1

    def has_model(self, model: str) -> bool:
        return _canonical(model) in {_canonical(m) for m in self.models}

    # -- internals used by the handler

    def _record(self, method: str, path: str, body: Any) -> None:
        with self._lock:
            self.requests.append(RecordedRequest(method, path, body, time.monotonic()))

    def _next_scripted(self, path: str) -> Reply | None:
        with self._lock:
            queue = self._scripts.get(path)
            return queue.popleft() if queue else None

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless the server is stopping; True if the server should still answer."""
        return not self._stopping.wait(seconds)


class _Server(ThreadingHTTPServer):
    # Non-daemon threads + block_on_close: stop() waits for handlers, so no test leaks a thread
    # into the next one. Every response closes its connection, so no handler idles on keep-alive.
    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], fake: FakeOllama) -> None:
        self.fake = fake
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up makes later writes fail; that is the scenario, not a bug.
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked NDJSON streaming, as Ollama does
    server_version = "fake-ollama/1.0"
    timeout = 10  # a handler never blocks longer than this on a silent client
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # keep pytest output clean; tests inspect FakeOllama.requests instead

    @property
    def fake(self) -> FakeOllama:
        return self.server.fake

    # -- dispatch

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def _dispatch(self, method: str) -> None:
        self.close_connection = True
        path = self.path.split("?", 1)[0]
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body: Any = None
        bad_json = False
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                bad_json = True
        self.fake._record(method, path, body)
        if self.fake.basic_auth is not None:
            expected = "Basic " + base64.b64encode(":".join(self.fake.basic_auth).encode("utf-8")).decode("ascii")
            if self.headers.get("Authorization") != expected:
                self._text(401, "401 Authorization Required")
                return

        routes: dict[tuple[str, str], Callable[[dict[str, Any]], None]] = {
            ("POST", "/api/chat"): self._chat,
            ("POST", "/api/embed"): self._embed,
            ("GET", "/api/tags"): self._tags,
            ("POST", "/api/show"): self._show,
            ("GET", "/api/version"): lambda _body: self._json(200, {"version": "0.0.0-fake"}),
            ("GET", "/"): lambda _body: self._text(200, "Ollama is running"),
            ("HEAD", "/"): lambda _body: self._text(200, ""),
        }
        handler = routes.get((method, path))
        if handler is None:
            known_path = any(p == path for _m, p in routes)
            self._text(405 if known_path else 404, "405 method not allowed" if known_path else "404 page not found")
            return
        if bad_json or (method == "POST" and not isinstance(body, dict)):
            self._json(400, {"error": "invalid request body: expected a JSON object"})
            return
        self.fake._enter(path)
        try:
            handler(body if isinstance(body, dict) else {})
        finally:
            self.fake._leave(path)

    # -- response helpers

    def _send_head(self, status: int, content_type: str, length: int | None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if length is None:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(length))
        self.send_header("Connection", "close")
        self.end_headers()

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode("utf-8")
        self._send_head(status, "application/json; charset=utf-8", len(data))
        self.wfile.write(data)

    def _text(self, status: int, text: str) -> None:
        data = text.encode("utf-8")
        self._send_head(status, "text/plain; charset=utf-8", len(data))
        if self.command != "HEAD":
            self.wfile.write(data)

    def _chunk(self, payload: Mapping[str, Any]) -> None:
        line = json.dumps(payload).encode("utf-8") + b"\n"
        self.wfile.write(b"%X\r\n%s\r\n" % (len(line), line))
        self.wfile.flush()

    def _end_chunks(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _fail(self, action: Fail) -> None:
        if isinstance(action.body, str):
            self._text(action.status, action.body)
            return
        body = action.body
        if body is None:
            body = {"error": _BUSY if action.status == 503 else f"fake failure (HTTP {action.status})"}
        self._json(action.status, body)

    def _resolve(self, path: str, body: dict[str, Any], default: Callable[[dict[str, Any]], Reply]) -> Reply | None:
        """Next reply for this request: the script first, else ``default``; runs Slow/Fail/Disconnect.

        Returns None when the response has already been dealt with (failure sent, connection dropped).
        """
        reply: Reply | None = self.fake._next_scripted(path)
        if reply is None:
            reply = default(body)
        while isinstance(reply, Slow):
            if not self.fake._sleep(reply.seconds):
                return None  # stopping: the client is gone anyway
            reply = reply.reply if reply.reply is not None else default(body)
        if isinstance(reply, Fail):
            self._fail(reply)
            return None
        if isinstance(reply, Disconnect):
            # Drop the socket without a status line: the client sees "server disconnected".
            self.close_connection = True
            self.connection.close()
            return None
        return reply

    def _model_or_404(self, body: dict[str, Any], template: str) -> str | None:
        model = str(body.get("model") or "")
        if not model:
            self._json(400, {"error": "model is required"})
            return None
        if not self.fake.has_model(model):
            self._json(404, {"error": template.format(model=model)})
            return None
        return model

    # -- endpoints

    def _chat(self, body: dict[str, Any]) -> None:
        model = self._model_or_404(body, _CHAT_NOT_FOUND)
        if model is None:
            return
        model = self.fake.reply_model or model  # what the replies say they came from
        reply = self._resolve("/api/chat", body, lambda b: self.fake.chat_responder(b))
        if reply is None:
            return
        stream = body.get("stream", True) is not False  # Ollama streams unless told not to
        prompt_tokens = sum(len(_WORD.findall(str(m.get("content") or "")))
                            for m in body.get("messages") or [] if isinstance(m, Mapping))
        started = time.monotonic_ns()

        if isinstance(reply, StreamError):
            if not stream:
                self._json(500, {"error": reply.message})
                return
            self._send_head(200, "application/x-ndjson", None)
            if reply.partial:
                for piece in _pieces(reply.partial):
                    self._chunk(self._chat_chunk(model, piece))
            self._chunk({"error": reply.message})
            self._end_chunks()
            return

        if isinstance(reply, (Trickle, Huge)):
            self._endless_or_huge(model, reply, stream)
            return

        if isinstance(reply, Garbage):
            content = reply.text
        elif isinstance(reply, str):
            content = reply
        else:
            content = json.dumps(reply)
        pieces = _pieces(content)
        elapsed = max(time.monotonic_ns() - started, 1)
        final = {
            **self._chat_chunk(model, ""),
            "done": True,
            "done_reason": "stop",
            "total_duration": elapsed,
            "load_duration": 1_000,
            "prompt_eval_count": prompt_tokens,
            "prompt_eval_duration": 1_000,
            "eval_count": len(pieces),
            "eval_duration": elapsed,
        }
        if not stream:
            final["message"]["content"] = content
            self._json(200, final)
            return
        self._send_head(200, "application/x-ndjson", None)
        for piece in pieces:
            if self.fake.chunk_delay_s and not self.fake._sleep(self.fake.chunk_delay_s):
                return
            self._chunk(self._chat_chunk(model, piece))
        self._chunk(final)
        self._end_chunks()

    def _endless_or_huge(self, model: str, reply: Trickle | Huge, stream: bool) -> None:
        if not stream:
            self._json(500, {"error": "the fake streams Trickle and Huge only"})
            return
        self._send_head(200, "application/x-ndjson", None)
        try:
            if isinstance(reply, Trickle):
                while self.fake._sleep(reply.interval_s):
                    self._chunk(self._chat_chunk(model, reply.piece))
                return
            block = (reply.text * (reply.piece_bytes // max(1, len(reply.text)) + 1))[: reply.piece_bytes]
            sent = 0
            while sent < reply.size and not self.fake._stopping.is_set():
                piece = block[: reply.size - sent]
                self._chunk(self._chat_chunk(model, piece))
                sent += len(piece.encode("utf-8"))
            self._chunk({**self._chat_chunk(model, ""), "done": True, "done_reason": "length",
                         "prompt_eval_count": 1, "eval_count": sent // 4})
            self._end_chunks()
        except OSError:
            pass  # the client hung up: exactly what a capped reader should do

    @staticmethod
    def _chat_chunk(model: str, content: str) -> dict[str, Any]:
        return {"model": model, "created_at": _now(), "message": {"role": "assistant", "content": content},
                "done": False}

    def _embed(self, body: dict[str, Any]) -> None:
        model = self._model_or_404(body, _CHAT_NOT_FOUND)
        if model is None:
            return
        raw_input = body.get("input", "")
        if isinstance(raw_input, str):
            texts = [raw_input]
        elif isinstance(raw_input, list) and all(isinstance(t, str) for t in raw_input):
            texts = raw_input
        else:
            self._json(400, {"error": "invalid input type"})
            return

        def compute(_body: dict[str, Any]) -> Reply:
            return [self.fake.embed_fn(text) for text in texts]

        reply = self._resolve("/api/embed", body, compute)
        if reply is None:
            return
        if isinstance(reply, Garbage):
            self._text(200, reply.text)
            return
        if isinstance(reply, StreamError):
            self._json(500, {"error": reply.message})
            return
        self._json(200, {
            "model": model,
            "embeddings": reply,
            "total_duration": 1_000,
            "load_duration": 1_000,
            "prompt_eval_count": sum(len(_WORD.findall(t)) for t in texts),
        })

    def _tags(self, body: dict[str, Any]) -> None:
        def listing(_body: dict[str, Any]) -> Reply:
            return {"models": [self._model_entry(m) for m in sorted(self.fake.models)]}

        reply = self._resolve("/api/tags", body, listing)
        if reply is None:
            return
        if isinstance(reply, (Garbage, StreamError)):
            self._text(200, reply.text if isinstance(reply, Garbage) else reply.message)
            return
        self._json(200, reply)

    @staticmethod
    def _model_entry(model: str) -> dict[str, Any]:
        name = _canonical(model)
        digest = hashlib.sha256(name.encode()).hexdigest()
        return {"name": name, "model": name, "modified_at": _now(), "size": 2_019_393_189, "digest": digest,
                "details": _Handler._details(name)}

    @staticmethod
    def _details(model: str) -> dict[str, Any]:
        family = "nomic-bert" if "embed" in model else "llama"
        return {"parent_model": "", "format": "gguf", "family": family, "families": [family],
                "parameter_size": "3.2B", "quantization_level": "Q4_K_M"}

    def _show(self, body: dict[str, Any]) -> None:
        model = str(body.get("model") or body.get("name") or "")
        if not model:
            self._json(400, {"error": "model is required"})
            return
        if not self.fake.has_model(model):
            self._json(404, {"error": _SHOW_NOT_FOUND.format(model=model)})
            return

        def info(_body: dict[str, Any]) -> Reply:
            embedding = "embed" in model
            return {
                "license": "", "modelfile": f"FROM {model}\n", "parameters": "", "template": "{{ .Prompt }}",
                "details": self._details(model), "model_info": {"general.architecture": "llama"},
                "capabilities": ["embedding"] if embedding else ["completion"], "modified_at": _now(),
            }

        reply = self._resolve("/api/show", body, info)
        if reply is None:
            return
        if isinstance(reply, (Garbage, StreamError)):
            self._text(200, reply.text if isinstance(reply, Garbage) else reply.message)
            return
        self._json(200, reply)


# --------------------------------------------------------------------------- pytest fixture


@pytest.fixture
def fake_ollama() -> Iterator[FakeOllama]:
    """A started FakeOllama, fresh for each test and stopped at teardown."""
    with FakeOllama() as server:
        yield server
