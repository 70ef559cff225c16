"""The job file's building blocks: durations, strict field types with their checks, the shared base model.

Split from jobs/config.py (the job's models) so each section module (jobs/config_sections.py,
jobs/config_ollama.py) and the job model import one set of rules.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any, Union
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, Strict, model_validator

from crawler.urllist import sitemap_entry
from jobs.config_messages import DURATION_EXAMPLES, fail, got
from jobs.errors import ConfigError

_NAME_RE = re.compile(r"[A-Za-z0-9._-]+")
_DURATION_RE = re.compile(r"(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
# "host[:port]" then a path or nothing: text worth suggesting "https://" for (not "root:*:20228:…").
_HOST_FIRST_RE = re.compile(r"[A-Za-z0-9.-]+(?::\d+)?(?:[/?#]|$)")


# ---------------------------------------------------------------------------------------------
# Errors (JobFileError and the message helpers are jobs/config_messages.py's)


class InvalidDurationError(ConfigError, ValueError):
    """Raised by :func:`parse_duration`.

    A ConfigError so the CLI can print it as is (e.g. for a command-line duration), and a
    ValueError so that it also behaves like any other parse failure.
    """


# ---------------------------------------------------------------------------------------------
# Durations


def parse_duration(text: str) -> timedelta:
    """Parse ``"24h"``, ``"30m"``, ``"7d"``, ``"90s"``, ``"2w"`` or combinations like ``"1h30m"``.

    Units must come largest first and at most once each; whole numbers only (write ``"1h30m"``,
    not ``"1.5h"``) so that every duration has exactly one spelling.
    """
    if not isinstance(text, str):
        hint = f"; add a unit, e.g. '{text}s'" if isinstance(text, int) and not isinstance(text, bool) else ""
        raise InvalidDurationError(f"expected a duration like {DURATION_EXAMPLES}, got {got(text)}{hint}")
    compact = re.sub(r"\s+", "", text).lower()
    match = _DURATION_RE.fullmatch(compact)
    if not compact or match is None:
        raise InvalidDurationError(f"expected a duration like {DURATION_EXAMPLES}, got {got(text)}")
    weeks, days, hours, minutes, seconds = (int(part) if part else 0 for part in match.groups())
    try:
        return timedelta(weeks=weeks, days=days, hours=hours, minutes=minutes, seconds=seconds)
    except OverflowError:
        raise InvalidDurationError(f"duration {got(text)} is too long") from None


# ---------------------------------------------------------------------------------------------
# Reusable field types. Strict: YAML already says what type a value is, so "1.0" in quotes for a
# number or 0/1 for a boolean is almost certainly a mistake worth reporting, not coercing.

NonNegInt = Annotated[int, Strict(), Field(ge=0)]
PosInt = Annotated[int, Strict(), Field(ge=1)]
NonNegFloat = Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)]
PosFloat = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]


def _check_http_url(value: str) -> str:
    """Accept only absolute http(s) URLs with a host: anything else cannot be crawled."""
    url = value.strip()
    if not url:
        fail("expected an http(s) URL, got an empty string")
    if any(ch.isspace() for ch in url):
        fail(f"expected an http(s) URL, got {got(url)}; a URL cannot contain spaces (write them as %20)")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        if "://" not in url and _HOST_FIRST_RE.match(url.lstrip("/")):
            # "example.org/docs" or "localhost:8000/x" (which urlsplit reads as scheme "localhost").
            fail(f"expected an http(s) URL, got {got(url)}; did you mean {got('https://' + url.lstrip('/'))}?")
        fail(f"expected an http(s) URL, got {got(url)}; only http:// and https:// URLs can be crawled")
    if not parts.hostname:
        fail(f"expected an http(s) URL with a host, got {got(url)}; write it as '{scheme}://host/path'")
    try:
        parts.port  # noqa: B018 - urlsplit only checks the port when asked
    except ValueError:
        fail(f"expected an http(s) URL, got {got(url)}; the port is not a number from 0 to 65535")
    if parts.username is not None or parts.password is not None:
        # Same rule as crawler/urllist.py: they would be sent along to every redirect target.
        fail(f"expected an http(s) URL without credentials, got {got(url)}; remove 'user:password@'")
    return url


def _check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        fail(f"not a valid regular expression: {exc}; escape special characters like . ? ( with a backslash")
    return value


def _check_non_empty(value: str) -> str:
    if not value.strip():
        fail(f"expected a non-empty string, got {got(value)}")
    return value.strip()


def _check_name(value: str) -> str:
    # Names end up in folder and file names ({name} in output.dir), hence the small alphabet and
    # the refusal of "." and "..", which would point output at the parent folder.
    if not _NAME_RE.fullmatch(value) or set(value) == {"."}:
        suggestion = re.sub(r"[^A-Za-z0-9._-]+", "-", value).strip("-.") or "my-job"
        fail(
            f"expected letters, digits, '.', '_' or '-' only, got {got(value)}; "
            f"try {suggestion!r}"
        )
    return value


def _sitemap_mapping(value: Any) -> Any:
    """A YAML ``- sitemap: URL`` item (a one-key mapping) as the string ``sitemap: URL``."""
    if isinstance(value, dict):
        if list(value) == ["sitemap"] and isinstance(value["sitemap"], str):
            return f"sitemap: {value['sitemap']}"
        keys = ", ".join(map(str, value)) or "no keys"
        fail(f"expected a URL or 'sitemap: URL', got a mapping ({keys})")
    return value


def _check_listed_url(value: str) -> str:
    """A page's URL, or ``sitemap: URL`` for a sitemap (or robots.txt, for the sitemaps it names)."""
    target = sitemap_entry(value)
    return _check_http_url(value) if target is None else f"sitemap: {_check_http_url(target)}"


HttpUrl = Annotated[str, Strict(), AfterValidator(_check_http_url)]
Regex = Annotated[str, Strict(), AfterValidator(_check_regex)]
NonEmptyStr = Annotated[str, Strict(), AfterValidator(_check_non_empty)]
Name = Annotated[str, Strict(), AfterValidator(_check_name)]


class StrictModel(BaseModel):
    """Shared settings: unknown keys are errors (typos must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _empty_means_default(cls, data: Any) -> Any:
        # A key with nothing after it (``crawl:`` with every sub-key commented out, ``delay:``)
        # reads as null. Treat it as "not given" so the default applies, except where null is a
        # meaningful value (fields whose default is None) or the field is required.
        if isinstance(data, dict):
            fields = cls.model_fields
            return {
                key: value
                for key, value in data.items()
                if not (
                    value is None
                    and key in fields
                    and not fields[key].is_required()
                    and fields[key].get_default(call_default_factory=True) is not None
                )
            }
        return data


class SitemapEntry(StrictModel):
    """``- sitemap: URL`` in ``urls``: crawl the pages a sitemap lists (see docs/job-reference.md)."""

    sitemap: HttpUrl = Field(description="A sitemap, a sitemap index (.xml or .xml.gz), or a site's /robots.txt "
                                          "for the sitemaps its Sitemap: lines name.")


# An entry of the job's urls: a page, or a sitemap whose pages are crawled.
ListedUrl = Annotated[str, BeforeValidator(_sitemap_mapping, json_schema_input_type=Union[str, SitemapEntry]),
                      Strict(), AfterValidator(_check_listed_url)]
