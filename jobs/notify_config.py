"""The job's ``notify:`` key: where a run with changed answers is announced (jobs/notify.py sends it)."""

from __future__ import annotations

import shlex
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, field_validator, model_validator

from pipelines.redact import redact_unparsed, split_login, url_error

__all__ = ["NotifyConfig", "shown_webhook"]


def shown_webhook(url: str) -> str:
    """The webhook as messages, logs and reports show it: scheme and host only, because services put the
    secret in the path or query (Slack's /services/T/B/TOKEN, ?token=) and the userinfo is a password."""
    parts = urlsplit(url.strip())
    netloc = parts.netloc.rpartition("@")[2]
    rest = "/…" if parts.path not in ("", "/") or parts.query else "/"
    return f"{parts.scheme}://{netloc}{rest}"


class NotifyConfig(BaseModel):
    """``notify: {webhook: URL, command: [...]}``: called once per run whose answers changed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    webhook: str | None = Field(
        None, description="http(s) URL that gets one JSON POST per run with changes; a private or loopback address "
                          "needs crawl.allow_private_networks (the crawl's SSRF rule).")
    command: list[str] | None = Field(
        None, description="Program and arguments (a list, or a string split like a shell would, never run by one) "
                          "that gets the same JSON on stdin.")
    timeout: StrictFloat = Field(10.0, gt=0, le=300, description="Seconds one POST or the command may take.")
    attempts: StrictInt = Field(3, ge=1, le=10, description="Most POSTs of one notification (retried on a network "
                                                            "error, 429 or 5xx, with a growing wait).")

    @field_validator("webhook")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value.strip())
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise ValueError("expected an http(s) URL like 'https://hooks.example.org/webqa', "
                             f"got {shown_webhook(redact_unparsed(value))!r}")
        try:
            parts.port  # urllib reads the port only when asked: a bad one would fail after the run is saved
        except ValueError as exc:
            # Only a login can be to blame (its unencoded "#", "/" or "?"): urlsplit read the port from it.
            login = f"; {url_error(value, exc)}" if split_login(value) is not None else ""
            raise ValueError(f"the port of {shown_webhook(redact_unparsed(value))!r} is not a number from 0 to "
                             f"65535{login}") from None
        return value.strip()

    @field_validator("command", mode="before")
    @classmethod
    def _argv(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = shlex.split(value)
            except ValueError as exc:
                raise ValueError(f"cannot split the command {value!r}: {exc}") from None
        if isinstance(value, list) and not value:
            raise ValueError("expected a program and its arguments, got an empty list")
        return value

    @model_validator(mode="after")
    def _something(self) -> NotifyConfig:
        if self.webhook is None and self.command is None:
            raise ValueError("give webhook: URL, command: [program, args...], or both")
        return self
