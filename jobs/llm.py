"""The product's only door to Ollama: structured chat answers and embeddings, with retries.

Everything goes through the official ``ollama`` client over HTTP. This module adds what the
client leaves out and a batch job needs:

* a timeout on every call (the client's default is to wait forever);
* retries with exponential backoff for what can heal (connection refused while Ollama restarts,
  timeouts, 5xx such as 503 "server busy", 429, errors reported inside a 200 stream), and none
  for what cannot (404 model not pulled, other 4xx);
* a second ask when the model's reply is not valid JSON despite ``format=schema``;
* a bound on every reply: a deadline for the whole stream (``reply_timeout_s``; the per-read
  timeout only covers silence) and a size cap (``max_reply_bytes``, plus ``num_predict`` sent
  by default), so a looping or trickling model ends as a failed attempt, not a hung run;
* errors from :mod:`jobs.errors` whose text tells the user what to do.

An :class:`OllamaClient` holds one ``ollama.Client`` (one httpx connection pool) and no other
mutable state, so a small thread pool may call :meth:`OllamaClient.chat_json` concurrently.
"""

from __future__ import annotations

import json
import logging
import reprlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import httpx

from jobs.llm_defaults import check_env_host

check_env_host()  # before ollama's import, whose module-level client crashes on a bad OLLAMA_HOST
import ollama  # noqa: E402
import pydantic
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from jobs.errors import ConfigError, LLMError, LLMUnavailableError, ModelNotFoundError
from pipelines.redact import redact_url
from jobs.llm_defaults import (
    DEFAULT_EMBEDDING_MODEL,
    DEFAULT_HOST,
    DEFAULT_KEEP_ALIVE,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_REPLY_BYTES,
    DEFAULT_MODEL,
    DEFAULT_NUM_PREDICT,
    DEFAULT_OPTIONS,
    DEFAULT_PORT,
    DEFAULT_REPLY_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    default_host,
    default_options,
    host_credentials,
    normalize_host,
)

__all__ = ["DEFAULT_EMBEDDING_MODEL", "DEFAULT_HOST", "DEFAULT_KEEP_ALIVE", "DEFAULT_MAX_ATTEMPTS",
           "DEFAULT_MAX_REPLY_BYTES", "DEFAULT_MODEL", "DEFAULT_NUM_PREDICT", "DEFAULT_OPTIONS", "DEFAULT_PORT",
           "DEFAULT_REPLY_TIMEOUT_S", "DEFAULT_TIMEOUT_S", "ChatResult", "LLMReplyError", "LLMServerError",
           "OllamaAccess", "OllamaClient", "OllamaSettings", "ReplyDeadlineError", "default_host", "default_options",
           "normalize_host", "reply_problem", "schema_problem"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class OllamaSettings:
    """How to reach Ollama and how hard to try. ``host`` is normalised to a full base URL."""

    host: str = field(default_factory=default_host)
    model: str = DEFAULT_MODEL
    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    timeout_s: float = DEFAULT_TIMEOUT_S
    connect_timeout_s: float = 5.0
    reply_timeout_s: float = DEFAULT_REPLY_TIMEOUT_S
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES
    options: dict[str, Any] = field(default_factory=default_options, hash=False)  # keeps settings hashable
    keep_alive: str | None = DEFAULT_KEEP_ALIVE
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    embed_batch: int = 64
    # (host, user, password) from the host's user:password@, sent as Basic auth; never in host, repr or messages.
    credentials: tuple[str, str, str] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Frozen: normalise through object.__setattr__ so every message names the URL really used.
        raw, host = self.host, normalize_host(self.host)
        object.__setattr__(self, "host", host)
        object.__setattr__(self, "credentials", host_credentials(raw, host, self.credentials))
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, not {self.max_attempts}")
        if self.embed_batch < 1:
            raise ConfigError(f"embed_batch must be at least 1, not {self.embed_batch}")
        if self.timeout_s <= 0 or self.connect_timeout_s <= 0 or self.reply_timeout_s <= 0:
            raise ConfigError("Ollama timeouts must be positive")
        if self.max_reply_bytes < 1:
            raise ConfigError(f"max_reply_bytes must be at least 1, not {self.max_reply_bytes}")


@dataclass
class ChatResult:
    """One structured answer. Token counts and ``content`` belong to the reply finally kept."""

    content: str  # raw reply text
    data: dict[str, Any] | None  # parsed JSON object, None if the reply is not a valid JSON object
    valid_json: bool
    prompt_tokens: int | None
    eval_tokens: int | None
    latency_s: float  # wall clock for the whole call, retries and the JSON re-ask included
    model: str
    attempts: int  # HTTP attempts used (retries included)
    host: str | None = None  # the server that gave this reply (one of several with ollama.hosts)


class LLMReplyError(LLMError):
    """A reply that came but cannot be used (too long, too slow, not JSON); not retried.

    ``raw_reply`` keeps what was received (at most ``max_reply_bytes``) for `webqa explain`.
    """

    def __init__(self, message: str, raw_reply: str, host: str | None = None) -> None:
        super().__init__(message)
        self.raw_reply = raw_reply
        self.host = host  # the server that sent it (shown without credentials)


class ReplyDeadlineError(LLMReplyError):
    """No complete reply within ``reply_timeout_s``: the server is stuck or overloaded, another may answer."""


class LLMServerError(LLMError):
    """The server failed the request after its bounded retries (5xx, a broken stream, timeouts, a foreign API).

    Unlike a rejected request or an unusable reply, another server may well answer the same request.
    """


class _IncompleteStream(Exception):
    """The chat stream ended without its ``done`` line (the server went away mid-answer)."""


# Failures that may heal on their own. ollama.Client turns httpx.ConnectError into the builtin
# ConnectionError for plain requests but lets it through raw from a stream, so both are listed.
_TRANSIENT_EXCEPTIONS: tuple[type[BaseException], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
    ConnectionError,
    json.JSONDecodeError,  # a half-written NDJSON line
    _IncompleteStream,
)
_UNREACHABLE_EXCEPTIONS: tuple[type[BaseException], ...] = (httpx.ConnectError, httpx.ConnectTimeout, ConnectionError)

# A ResponseError raised for an {"error": …} line inside a 200 stream has no status; ollama uses -1.
_STREAM_ERROR_STATUS = -1


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, ollama.ResponseError):
        code = exc.status_code
        return code == _STREAM_ERROR_STATUS or code == 429 or code >= 500
    return isinstance(exc, _TRANSIENT_EXCEPTIONS)


def _reason(exc: BaseException) -> str:
    """A one-line cause for messages; digs out the httpx error ollama hides behind ConnectionError."""
    if isinstance(exc, ollama.ResponseError):
        if exc.status_code == _STREAM_ERROR_STATUS:
            return f"error in response stream: {exc.error}"
        return f"HTTP {exc.status_code}: {exc.error}"
    if isinstance(exc, ConnectionError) and isinstance(exc.__context__, httpx.HTTPError):
        exc = exc.__context__
    if isinstance(exc, _IncompleteStream):
        return "the response stream ended before the answer was complete"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class OllamaClient:
    """Structured chat and embeddings against one Ollama server; see the module doc."""

    def __init__(self, settings: OllamaSettings) -> None:
        self.settings = settings
        # The ollama client has no timeout by default: a wedged server would hang the run forever.
        self._client = ollama.Client(
            host=settings.host,
            timeout=httpx.Timeout(settings.timeout_s, connect=settings.connect_timeout_s),
            auth=settings.credentials[1:] if settings.credentials else None,
        )

    @property
    def host(self) -> str:
        """The server's URL as shown in messages, reports and the database: without credentials."""
        return redact_url(self.settings.host)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def __enter__(self) -> OllamaClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ health and models

    def ping(self) -> None:
        """Check that Ollama answers (GET /api/tags), once, without retrying.

        One attempt on purpose: callers use this to decide quickly whether to fall back to the
        extractive answerer. Any failure raises LLMUnavailableError.
        """
        try:
            self._client.list()
        except (ollama.ResponseError, pydantic.ValidationError, httpx.HTTPError, *_TRANSIENT_EXCEPTIONS) as exc:
            raise self._unavailable(exc) from exc

    def has_model(self, model: str) -> bool:
        """Whether ``model`` is pulled on the server (from /api/tags; a name without tag means ``:latest``)."""
        listing, _ = self._retrying("list models", self._client.list)
        wanted = _canonical_model(model)
        return any(_canonical_model(m.model or "") == wanted for m in listing.models)

    def ensure_model(self, model: str) -> None:
        """Raise ModelNotFoundError (with the ``ollama pull`` command) unless ``model`` is pulled."""
        if not self.has_model(model):
            raise self._model_not_found(model)

    # ------------------------------------------------------------------ chat

    def chat_json(self, prompt: str, schema: dict[str, Any], *, system: str | None = None) -> ChatResult:
        """Ask ``prompt`` with structured output ``format=schema``; stream and collect the reply.

        An invalid-JSON reply is asked for once more; if the second one is invalid too it is
        returned with ``valid_json=False`` (no exception), so the caller can record it.
        Raises ModelNotFoundError, LLMUnavailableError or LLMError (after retries).
        """
        messages: list[dict[str, str]] = []
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": prompt})
        model = self.settings.model
        started = time.monotonic()
        total_attempts = 0
        for ask in (1, 2):  # the second ask only when the first reply was not JSON
            reply, attempts = self._retrying("chat", partial(self._stream_chat, model, messages, schema), model=model)
            total_attempts += attempts
            content, final = reply
            data = _parse_object(content)
            if data is not None or ask == 2:
                break
            log.warning("Ollama model %s replied with invalid JSON (%d chars); asking once more", model, len(content))
        return ChatResult(
            content=content,
            data=data,
            valid_json=data is not None,
            prompt_tokens=final.prompt_eval_count,
            eval_tokens=final.eval_count,
            latency_s=time.monotonic() - started,
            model=final.model or model,
            attempts=total_attempts,
            host=self.host,
        )

    def _stream_chat(
        self, model: str, messages: list[dict[str, str]], schema: dict[str, Any]
    ) -> tuple[str, ollama.ChatResponse]:
        """One HTTP attempt: the whole stream, or an exception for the retry policy to judge.

        Stops reading (and raises LLMReplyError) as soon as the reply outgrows ``max_reply_bytes``
        or ``reply_timeout_s`` has passed since the request was sent: a model that trickles
        tokens never trips the per-read timeout, and one that loops would fill memory.
        """
        s = self.settings
        deadline = time.monotonic() + s.reply_timeout_s
        stream: Iterator[ollama.ChatResponse] = self._client.chat(
            model=model,
            messages=messages,
            stream=True,
            format=schema,
            options=request_options(s.options),
            keep_alive=s.keep_alive,
        )
        pieces: list[str] = []
        size = 0
        final: ollama.ChatResponse | None = None
        try:
            for chunk in stream:
                content = chunk.message.content or ""
                if content:
                    pieces.append(content)
                    size += len(content.encode("utf-8"))
                if size > s.max_reply_bytes:
                    raw = _clip_utf8("".join(pieces), s.max_reply_bytes)
                    raise LLMReplyError(f"reply longer than {s.max_reply_bytes} bytes (model {model})", raw, self.host)
                if chunk.done:
                    final = chunk
                    break
                if time.monotonic() > deadline:
                    raise ReplyDeadlineError(
                        f"no complete reply within {s.reply_timeout_s:g} s (model {model}; ollama.reply_timeout)",
                        "".join(pieces), self.host,
                    )
        finally:
            # Release the connection even when we stop early on an error.
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        if final is None:
            raise _IncompleteStream()
        return "".join(pieces), final

    # ------------------------------------------------------------------ embeddings

    def embed(self, texts: Sequence[str], *, model: str | None = None) -> list[list[float]]:
        """One vector per text, in order, in batches of ``embed_batch`` texts per request."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string")
        name = model or self.settings.embedding_model
        items = list(texts)
        vectors: list[list[float]] = []
        size = self.settings.embed_batch
        for start in range(0, len(items), size):
            batch = items[start : start + size]
            call = partial(self._client.embed, model=name, input=batch, keep_alive=self.settings.keep_alive)
            response, _ = self._retrying("embed", call, model=name)
            if len(response.embeddings) != len(batch):
                raise LLMError(
                    f"Ollama at {self.host} returned {len(response.embeddings)} embeddings "
                    f"for {len(batch)} texts (model {name})"
                )
            vectors.extend([float(x) for x in vector] for vector in response.embeddings)
        return vectors

    # ------------------------------------------------------------------ retry policy

    def _retrying(self, what: str, call: Callable[[], T], *, model: str | None = None) -> tuple[T, int]:
        """Run ``call`` under the retry policy; return its result and the number of attempts.

        ``model``: the model the request names, so a 404 becomes ModelNotFoundError for it.
        """
        s = self.settings
        attempts = 0

        def attempt() -> T:
            nonlocal attempts
            attempts += 1
            return call()

        # A fresh Retrying per call: it carries per-call state, and threads must not share it.
        retrying = Retrying(
            stop=stop_after_attempt(s.max_attempts),
            wait=wait_exponential(multiplier=s.backoff_s, max=s.backoff_max_s),
            retry=retry_if_exception(_is_transient),
            before_sleep=partial(self._log_retry, what),
            reraise=True,
        )
        try:
            return retrying(attempt), attempts
        except ollama.ResponseError as exc:
            if exc.status_code == 404 and model is not None:
                raise self._model_not_found(model) from exc
            if _is_transient(exc):
                raise self._gave_up(what, attempts, exc) from exc
            raise LLMError(f"Ollama at {self.host} rejected the {what} request: {_reason(exc)}") from exc
        except _UNREACHABLE_EXCEPTIONS as exc:
            raise self._unavailable(exc) from exc
        except _TRANSIENT_EXCEPTIONS as exc:
            raise self._gave_up(what, attempts, exc) from exc
        except pydantic.ValidationError as exc:
            # Neither retry nor a crash: the server is not speaking Ollama's API as we know it.
            raise LLMServerError(f"Ollama at {self.host}: unexpected data in the {what} exchange: {exc}") from exc
        except httpx.HTTPError as exc:  # e.g. UnsupportedProtocol: a misconfigured host
            raise LLMServerError(f"Ollama at {self.host} could not be asked ({what}): {_reason(exc)}") from exc

    def _log_retry(self, what: str, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning(
            "Ollama %s at %s failed (attempt %d of %d): %s; retrying in %.2fs",
            what, self.host, state.attempt_number, self.settings.max_attempts,
            _reason(exc) if exc is not None else "unknown error", delay,
        )

    # ------------------------------------------------------------------ error texts

    def _unavailable(self, exc: BaseException) -> LLMUnavailableError:
        if isinstance(exc, ollama.ResponseError) and exc.status_code in (401, 403):
            # A proxy asking for a password: starting Ollama would not help.
            sent = "refused the user and password of" if self.settings.credentials else "wants a user and password in"
            return LLMUnavailableError(f"Ollama at {self.host} answered HTTP {exc.status_code}: it {sent} the host "
                                       "URL; give them as user:password@ before the host (ollama.host or OLLAMA_HOST)")
        return LLMUnavailableError(
            f"Ollama is not reachable at {self.host}: {_reason(exc)}; "
            "start it with `ollama serve` or set OLLAMA_HOST"
        )

    def _model_not_found(self, model: str) -> ModelNotFoundError:
        return ModelNotFoundError(f"model {model} is not available on {self.host}; run `ollama pull {model}`")

    def _gave_up(self, what: str, attempts: int, exc: BaseException) -> LLMServerError:
        plural = "attempt" if attempts == 1 else "attempts"
        reason = _reason(exc)
        if isinstance(exc, httpx.TimeoutException):  # say which knob to turn
            reason += f" (no data within timeout_s={self.settings.timeout_s:g})"
        return LLMServerError(f"Ollama at {self.host} failed after {attempts} {plural}: {reason} ({what} request)")


def _canonical_model(name: str) -> str:
    """Ollama's rule: no tag means ``:latest`` (a ':' in a registry host:port is not a tag)."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def request_options(options: dict[str, Any]) -> dict[str, Any]:
    """The model options sent with a chat: the settings' options, with num_predict capped by default."""
    return {"num_predict": DEFAULT_NUM_PREDICT, **options}


def _clip_utf8(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 form fits ``max_bytes`` (no split character)."""
    return text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")


def reply_problem(result: ChatResult, schema: dict[str, Any], model: str) -> str | None:
    """Why a reply that came cannot be used as asked for, or None: not JSON, not of ``schema``'s shape
    (Ollama's ``format=`` grammar makes any working server's reply fit it), or from another model."""
    if _canonical_model(result.model or model) != _canonical_model(model):
        return f"the reply came from model {result.model!r}, not {model}"
    if result.data is None:
        return "the reply was not valid JSON"
    problem = schema_problem(result.data, schema)
    return None if problem is None else f"the reply does not fit the schema: {problem}"


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "integer": (int,), "number": (int, float),
    "boolean": (bool,), "null": (type(None),),
}


def schema_problem(value: Any, schema: dict[str, Any], where: str = "reply") -> str | None:
    """The first way ``value`` breaks ``schema`` (type, enum, required, additionalProperties, items), or None.

    The subset of JSON Schema the answer and rerank schemas use; other keywords are not checked.
    """
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []  # ["number", "null"] too
    kinds = [k for k in kinds if k in _JSON_TYPES]
    if kinds and not any(isinstance(value, _JSON_TYPES[k]) and not (k in ("integer", "number") and isinstance(value, bool))
                         for k in kinds):
        return f"{where} is {type(value).__name__}, not {' or '.join(kinds)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} is {reprlib.repr(value)}, not one of {schema['enum']}"
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        missing = [key for key in schema.get("required") or () if key not in value]
        if missing:
            return f"{where} lacks {', '.join(map(repr, missing))}"
        if schema.get("additionalProperties") is False:
            extra = [key for key in value if key not in properties]
            if extra:
                return f"{where} has unexpected {reprlib.repr(extra[0])}"
        for key, sub in properties.items():
            if key in value and isinstance(sub, dict):
                problem = schema_problem(value[key], sub, f"{where}.{key}")
                if problem:
                    return problem
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problem = schema_problem(item, schema["items"], f"{where}[{i}]")
            if problem:
                return problem
    return None


def _parse_object(content: str) -> dict[str, Any] | None:
    """The reply as a JSON object, or None (schemas here are objects, so a bare list is invalid too)."""
    try:
        data = json.loads(content)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class OllamaAccess:
    """What one command can use of the Ollama server, decided once at start-up."""

    llm: OllamaClient | None  # set when chat was asked for and the model is there
    embedder: OllamaClient | None  # set when embeddings were asked for and the embedding model is there
    embedding_unavailable: str | None  # why embedding selection cannot be used, with the fix
    unreachable: LLMUnavailableError | None  # the server did not answer at all

    def extractive_instead(self, method: str, *, bm25_instead: bool) -> str:
        """The notice of a command that answers without the unreachable LLM (and selects without embeddings)."""
        also = f" and selected with bm25 instead of {method}" if bm25_instead else ""
        return f"{self.unreachable}; answered extractively (quoting the best sentences) instead{also}"


def connect(settings: OllamaSettings, *, chat: bool, embeddings: bool) -> OllamaAccess:
    """Ping the server once and check the models a command needs.

    A missing chat model raises ModelNotFoundError (every question would fail the same way); an
    unreachable server is returned, not raised, because callers differ in what they fall back to.
    """
    if not (chat or embeddings):
        return OllamaAccess(None, None, None, None)
    client = OllamaClient(settings)
    try:
        client.ping()
        llm = None
        if chat:
            client.ensure_model(settings.model)
            llm = client
        if embeddings and not client.has_model(settings.embedding_model):
            model = settings.embedding_model
            why = f"embedding model {model} is not available on {client.host}; run `ollama pull {model}`"
            return OllamaAccess(llm, None, why, None)
        return OllamaAccess(llm, client if embeddings else None, None, None)
    except LLMUnavailableError as exc:
        return OllamaAccess(None, None, str(exc), exc)
