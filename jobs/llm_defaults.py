"""Ollama's defaults and how a host value reads, written here only: the client (jobs/llm.py), the job models
(jobs/config.py) and the CLI take theirs from these.

A module of its own so that reading them costs no import of the ollama client: every `webqa` command builds
the CLI's help from them, and the client's import takes longer than a small crawl's start-up (BENCHMARKS.md).
"""

from __future__ import annotations

import os
import urllib.parse
from typing import Any

from jobs.errors import ConfigError
from pipelines.redact import redact_unparsed, url_credentials, url_error

DEFAULT_PORT = 11434  # `ollama serve`'s
DEFAULT_HOST = f"http://localhost:{DEFAULT_PORT}"
DEFAULT_MODEL = "llama3.2:3b"
DEFAULT_EMBEDDING_MODEL = "nomic-embed-text"
DEFAULT_TIMEOUT_S = 120.0  # per HTTP read/write/pool wait; a stream may take longer in total
DEFAULT_REPLY_TIMEOUT_S = 300.0  # the whole streamed reply of one request: a trickling model cannot hold a run
DEFAULT_MAX_REPLY_BYTES = 64 * 1024  # UTF-8 bytes of reply content; an answer is a few hundred
DEFAULT_KEEP_ALIVE = "10m"  # keep the model loaded between questions of one run
DEFAULT_MAX_ATTEMPTS = 4
# temperature 0: the same question on the same pages should give the same answer run to run.
# num_ctx 8192: Ollama's default window is small and silently truncates retrieved context.
DEFAULT_OPTIONS: dict[str, Any] = {"temperature": 0, "num_ctx": 8192}
# Sent unless the options set num_predict: a looping small model stops after this many tokens,
# far above what an answer with two short quotes needs.
DEFAULT_NUM_PREDICT = 1024


def default_options() -> dict[str, Any]:
    """A fresh copy of ``DEFAULT_OPTIONS``, for callers that merge into it."""
    return dict(DEFAULT_OPTIONS)


def normalize_host(host: str) -> str:
    """Turn an OLLAMA_HOST-style value into a base URL, following Ollama's own rules.

    ``"host"`` and ``"host:port"`` get ``http://`` and, without a port, 11434 (``ollama serve``'s
    port); an explicit ``http://``/``https://`` URL without a port gets 80/443. A trailing ``/`` is
    dropped and a path is kept (for a reverse proxy). Raises ConfigError for an unusable value.
    """
    text = host.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest, port = "http", text, DEFAULT_PORT
    elif scheme in ("http", "https"):
        port = 80 if scheme == "http" else 443
    else:
        raise ConfigError(f"Ollama host {redact_unparsed(host)!r} must be an http:// or https:// URL, or host:port")
    try:
        split = urllib.parse.urlsplit(f"{scheme}://{rest}")
        hostname = split.hostname or "127.0.0.1"  # ":11434" means the local machine, as in Ollama
        port = split.port or port
    except ValueError as exc:
        reason = url_error(host, exc)
        raise ConfigError(f"Ollama host {redact_unparsed(host)!r} is not a valid URL: {reason}") from exc
    if ":" in hostname:  # urlsplit drops the brackets of an IPv6 literal
        hostname = f"[{hostname}]"
    path = split.path.strip("/")
    return f"{scheme}://{hostname}:{port}" + (f"/{path}" if path else "")


def check_env_host() -> None:
    """Raise ConfigError naming $OLLAMA_HOST when ``import ollama`` would crash on it: its module-level client
    parses the variable as below, and a bad port or an unclosed IPv6 bracket is a ValueError there."""
    given = os.environ.get("OLLAMA_HOST", "")
    raw = given.strip()
    if raw != given:
        # webqa reads the variable without its blanks (default_host); the client would keep them and crash on
        # "11434 " as a port, so it is handed the same value.
        if raw:
            os.environ["OLLAMA_HOST"] = raw
        else:
            os.environ.pop("OLLAMA_HOST", None)
    scheme, sep, rest = raw.partition("://")
    try:
        urllib.parse.urlsplit(f"{scheme}://{rest}" if sep else f"http://{raw}").port
    except ValueError as exc:
        raise ConfigError(f"OLLAMA_HOST {redact_unparsed(raw)!r} is not a valid URL ({url_error(raw, exc)}): "
                          "set it to host:port or an http:// URL, or unset it") from None


def default_host() -> str:
    """``$OLLAMA_HOST`` (read when asked, not at import), else the local server."""
    return os.environ.get("OLLAMA_HOST", "").strip() or DEFAULT_HOST


def host_credentials(raw: str, host: str, kept: tuple[str, str, str] | None) -> tuple[str, str, str] | None:
    """(normalised host, user, password) to send as Basic auth, for a server behind an authenticating proxy.

    Taken from the ``user:password@`` of ``raw``, which :func:`normalize_host` leaves out of ``host`` so that no
    message shows it; without one, ``kept`` stays only if it was for the same host, so a copy of the settings
    made for another server never carries this one's password there.
    """
    text = raw.strip()
    try:
        credentials = url_credentials(text if "://" in text else f"http://{text}")
    except ValueError:
        return None
    if credentials is not None:
        return host, *credentials
    return kept if kept is not None and kept[0] == host else None
