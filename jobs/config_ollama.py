"""The job file's ``ollama:`` section: which server (or servers) answers, and with which options."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from jobs import llm_defaults as llm
from jobs.config_messages import did_you_mean, fail, got
from jobs.config_types import PosFloat, PosInt, StrictModel
from pipelines.redact import redact_unparsed, url_error

# Known Ollama model options, only used to catch typos ("temprature"): an unknown option that is
# not close to a known one is passed through, because Ollama adds options over time.
_KNOWN_OLLAMA_OPTIONS = (
    "numa num_ctx num_batch num_gpu main_gpu low_vram vocab_only use_mmap use_mlock num_thread "
    "num_keep seed num_predict top_k top_p min_p typical_p repeat_last_n temperature "
    "repeat_penalty presence_penalty frequency_penalty mirostat mirostat_tau mirostat_eta "
    "penalize_newline stop tfs_z"
).split()
# Go duration syntax, which is what Ollama parses keep_alive strings with.
_GO_DURATION_RE = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h)(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))*|0")


def _check_ollama_url(value: Any) -> str:
    """An Ollama server URL as written in the job: http(s) with a host name, no trailing slash."""
    if not isinstance(value, str):
        fail(f"expected a URL like 'http://localhost:11434', got {got(value)}")
    url = value.strip().rstrip("/")
    # Shown without its login: a password with an unencoded "#", "/" or "?" is what breaks the parse.
    shown = got(redact_unparsed(url))
    if "://" not in url:
        fail(f"expected a URL like 'http://localhost:11434', got {shown}: write http:// or https:// before the host")
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number or out of range
    except ValueError as exc:
        fail(f"expected a URL like 'http://localhost:11434', got {shown} ({url_error(url, exc)})")
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        fail(f"expected a URL like 'http://localhost:11434', got {shown}")
    return url


class OllamaHost(StrictModel):
    """One server of ``ollama.hosts``; in YAML a URL string or a mapping."""

    url: str = Field(description="Server URL, e.g. http://gpu1:11434.")
    parallel: PosInt | None = Field(
        None, description="Requests to this server at the same time; null = ollama.parallel.")

    @field_validator("url", mode="before")
    @classmethod
    def _check_url(cls, value: Any) -> Any:
        return _check_ollama_url(value)


class OllamaConfig(StrictModel):
    """How the local LLM server (or servers) is reached."""

    host: str | None = Field(None, description=f"Server URL; null = $OLLAMA_HOST or {llm.DEFAULT_HOST}.")
    hosts: list[OllamaHost] | None = Field(
        None, description="Several servers (URL strings or {url, parallel} mappings) sharing the questions, "
        "instead of host.",
    )
    timeout: PosFloat = Field(llm.DEFAULT_TIMEOUT_S, description="Seconds to wait for one answer.")
    # The per-read timeout above never fires on a model that keeps sending a token a second.
    reply_timeout: PosFloat = Field(
        llm.DEFAULT_REPLY_TIMEOUT_S,
        description="Seconds one whole reply may take, from request to last token; then the attempt fails."
    )
    max_reply_bytes: PosInt = Field(
        llm.DEFAULT_MAX_REPLY_BYTES, description="Longest reply in bytes; a longer one is cut off and the attempt fails."
    )
    options: dict[str, Any] = Field(
        default_factory=llm.default_options,
        description="Ollama model options, merged over {"
        + ", ".join(f"{key}: {value}" for key, value in llm.DEFAULT_OPTIONS.items()) + "}; "
        f"num_predict is {llm.DEFAULT_NUM_PREDICT} unless set here.",
    )
    keep_alive: str | int | float | None = Field(
        llm.DEFAULT_KEEP_ALIVE, description="How long Ollama keeps the model loaded: Go duration or seconds."
    )
    parallel: PosInt = Field(
        1, description="Concurrent requests to one Ollama server (each of hosts, unless it sets its own).")
    max_attempts: PosInt = Field(llm.DEFAULT_MAX_ATTEMPTS, description="Tries per request before giving up.")

    @field_validator("host", mode="before")
    @classmethod
    def _check_host(cls, value: Any) -> Any:
        return None if value is None else _check_ollama_url(value)

    @field_validator("hosts", mode="before", json_schema_input_type=list[str | OllamaHost] | None)
    @classmethod
    def _hosts_as_mappings(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, list) or not value:
            fail(f"expected a non-empty list of Ollama server URLs (or {{url, parallel}} mappings), got {got(value)}")
        return [{"url": item} if isinstance(item, str) else item for item in value]

    @field_validator("hosts")
    @classmethod
    def _distinct_hosts(cls, value: list[OllamaHost] | None) -> list[OllamaHost] | None:
        seen: dict[str, int] = {}
        for index, entry in enumerate(value or []):
            url = llm.normalize_host(entry.url)  # http://gpu1 and http://gpu1:80/ are one server
            if url in seen:
                fail(f"Ollama server {url} is listed twice", at=(index,), also=(seen[url],))
            seen[url] = index
        return value

    @model_validator(mode="after")
    def _one_way_to_name_servers(self) -> OllamaConfig:
        if self.host is not None and self.hosts is not None:
            fail("give either ollama.host (one server) or ollama.hosts (several), not both; "
                 "add the host to the hosts list", at=("hosts",))
        return self

    @field_validator("options", mode="before")
    @classmethod
    def _merge_options(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        for key, option in value.items():
            if not isinstance(key, str):
                fail(f"expected an option name, got {got(key)}", at=(key,))
            if key not in _KNOWN_OLLAMA_OPTIONS:
                # Strict cutoff: only near-identical spellings are typos; others may be new options.
                close = did_you_mean(key, _KNOWN_OLLAMA_OPTIONS, cutoff=0.8)
                if close:
                    fail(f"unknown Ollama option; did you mean {close!r}?", at=(key,))
            if not _is_plain(option):
                fail(f"expected a number, string, boolean or list, got {got(option)}", at=(key,))
        # Merged, not replaced: setting only temperature must not drop num_ctx back to Ollama's
        # small default and silently cut the evidence.
        return {**llm.DEFAULT_OPTIONS, **value}

    @field_validator("keep_alive", mode="before")
    @classmethod
    def _check_keep_alive(cls, value: Any) -> Any:
        # Ollama reads a number as seconds (negative = forever) and a string as a Go duration.
        if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            return value
        if isinstance(value, str) and _GO_DURATION_RE.fullmatch(value.strip()):
            return value.strip()
        fail(f"expected a duration like '10m', '1h' or a number of seconds (-1 = forever), got {got(value)}")

    def resolved_hosts(self) -> list[tuple[str, int]] | None:
        """(URL, parallel) of each server of ``hosts``; None when the job names one server (``host``)."""
        if self.hosts is None:
            return None
        return [(h.url, h.parallel or self.parallel) for h in self.hosts]

    @property
    def resolved_host(self) -> str:
        """The server URL: ``host`` (or the first of ``hosts``), else ``$OLLAMA_HOST``, else Ollama's local default."""
        host = self.host or (self.hosts[0].url if self.hosts else None) or llm.default_host()
        # OLLAMA_HOST is often written as the server's bind address ("0.0.0.0:11434", "myhost"):
        # without a scheme, Ollama's own rules apply (jobs/llm.py). With a scheme, the URL is shown
        # as written (https://host means port 443, as in a browser).
        return llm.normalize_host(host) if "://" not in host else host.rstrip("/")


def _is_plain(value: Any) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    return isinstance(value, list) and all(_is_plain(item) and not isinstance(item, list) for item in value)
