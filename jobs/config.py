"""Job file (YAML) → typed, validated configuration.

webqa runs from cron, so the error line this module produces is often the only thing a user sees
in a mail. Every problem with a job file therefore becomes ONE ``ConfigError`` line naming the file,
the line (and column for YAML syntax errors), the key path, what was expected and what to do.

How line numbers are kept: the YAML text is *composed* (not constructed) into a node tree with a
safe loader, and this module turns that tree into plain Python values itself, recording the start
line of every mapping key and sequence item under its key path (``("crawl", "delay")``,
``("questions", 2)``). Pydantic validation errors carry a ``loc`` that is walked against the same
data to find the path, and thereby the line. Building the values ourselves is also where YAML alias
bombs are stopped: every node reached again through an alias counts against a small budget.

Public API: :func:`load_job` (the CLI's entry point), :func:`parse_job`, :func:`job_json_schema`,
:func:`parse_duration`, :func:`read_urls_file` and the models, :class:`JobConfig` first.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import types
from collections.abc import Iterable
from datetime import date, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, Union, get_args, get_origin
from urllib.parse import urlsplit

import annotated_types
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    Strict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from crawler.urllist import MAX_URL_FILE_BYTES, NotARegularFileError, excerpt, read_bounded
from jobs.errors import ConfigError
from jobs.prefixes import EmbeddingPrefixes, prefixes_for

__all__ = [
    "DEFAULT_OLLAMA_HOST",
    "DEFAULT_OLLAMA_OPTIONS",
    "MAX_ALIAS_NODES",
    "MAX_JOB_BYTES",
    "CrawlConfig",
    "HostOverride",
    "InvalidDurationError",
    "JobConfig",
    "JobFileError",
    "OllamaConfig",
    "OutputConfig",
    "Question",
    "SelectionConfig",
    "job_json_schema",
    "load_job",
    "parse_duration",
    "parse_job",
    "read_urls_file",
]

# ---------------------------------------------------------------------------------------------
# Limits. A job file holds settings, not data: anything near these sizes is a mistake or an attack.

MAX_JOB_BYTES = 1024 * 1024  # 1 MiB; long URL lists belong in urls_file
MAX_URLS_FILE_BYTES = MAX_URL_FILE_BYTES  # 16 MiB ≈ 200 000 URLs; the same limit as `webqa crawl -i`
# Nodes that may be reached *again* through YAML aliases (*name). Sharing a list of URLs between
# a few questions costs hundreds; a "billion laughs" bomb needs billions and is cut off here.
MAX_ALIAS_NODES = 10_000
MAX_NESTING = 64  # deeper than any job needs; also keeps our recursive walk far from Python's limit

DEFAULT_OLLAMA_HOST = "http://localhost:11434"
# num_ctx: Ollama's own default context window is smaller than selection.token_budget plus the
# prompt, which would silently truncate the evidence. temperature 0: reproducible answers for diffs.
DEFAULT_OLLAMA_OPTIONS: dict[str, Any] = {"temperature": 0, "num_ctx": 8192}
# Known Ollama model options, only used to catch typos ("temprature"): an unknown option that is
# not close to a known one is passed through, because Ollama adds options over time.
_KNOWN_OLLAMA_OPTIONS = (
    "numa num_ctx num_batch num_gpu main_gpu low_vram vocab_only use_mmap use_mlock num_thread "
    "num_keep seed num_predict top_k top_p min_p typical_p repeat_last_n temperature "
    "repeat_penalty presence_penalty frequency_penalty mirostat mirostat_tau mirostat_eta "
    "penalize_newline stop tfs_z"
).split()

_NAME_RE = re.compile(r"[A-Za-z0-9._-]+")
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Go duration syntax, which is what Ollama parses keep_alive strings with.
_GO_DURATION_RE = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h)(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))*|0")
_DURATION_RE = re.compile(r"(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_DURATION_EXAMPLES = "'24h', '30m', '7d', '90s' or '1h30m'"
# "host[:port]" then a path or nothing: text worth suggesting "https://" for (not "root:*:20228:…").
_HOST_FIRST_RE = re.compile(r"[A-Za-z0-9.-]+(?::\d+)?(?:[/?#]|$)")
_HOSTNAME_RE = re.compile(r"(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*\.?")


# ---------------------------------------------------------------------------------------------
# Errors


class JobFileError(ConfigError):
    """A ConfigError that also keeps where it happened, for callers that want more than the line.

    ``str(err)`` is the complete one-line message; the attributes repeat its parts.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        column: int | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(message)
        self.file = file
        self.line = line
        self.column = column
        self.key = key


class InvalidDurationError(ConfigError, ValueError):
    """Raised by :func:`parse_duration`.

    A ConfigError so the CLI can print it as is (e.g. for a command-line duration), and a
    ValueError so that it also behaves like any other parse failure.
    """


def _job_error(
    source: str,
    message: str,
    *,
    line: int | None = None,
    column: int | None = None,
    key: str | None = None,
) -> JobFileError:
    """Build the one line: ``source[:line[:column]]: [key: ]message``."""
    where = source
    if line is not None:
        where += f":{line}"
        if column is not None:
            where += f":{column}"
    text = f"{where}: {key}: {message}" if key else f"{where}: {message}"
    return JobFileError(text, file=source, line=line, column=column, key=key)


def _fail(message: str, *, at: tuple[str | int, ...] = (), also: tuple[str | int, ...] | None = None) -> NoReturn:
    """Raise a validation error whose text is ours, not pydantic's.

    ``at`` extends the error's location below the validated field (a dict key, a list index), so
    that the reported line is the offending entry rather than its parent; ``also`` names a second
    location whose line is mentioned too (duplicates). Both are relative to the field's location.
    """
    raise PydanticCustomError("webqa", "{message}", {"message": message, "at": at, "also": also})


def _got(value: Any) -> str:
    """Show a value the way it was (probably) written in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping" if value else "an empty mapping"
    if isinstance(value, list):
        return "a list" if value else "an empty list"
    if isinstance(value, str):
        # Errors go to cron mail and logs: a short printable prefix, never a password hash or a token
        # (a job file or urls_file pointed at /etc/shadow must not be echoed).
        return excerpt(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, bytes):
        return "binary data"
    return str(value)


def _did_you_mean(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The closest choice, compared without case ("LLM" → "llm"), or None."""
    by_lower = {choice.lower(): choice for choice in choices}
    match = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=cutoff)
    return by_lower[match[0]] if match else None


def _short_tag(tag: str) -> str:
    """``tag:yaml.org,2002:python/object`` → ``!!python/object``, as the user wrote it."""
    prefix = "tag:yaml.org,2002:"
    return "!!" + tag[len(prefix):] if tag.startswith(prefix) else tag


# ---------------------------------------------------------------------------------------------
# Durations


def parse_duration(text: str) -> timedelta:
    """Parse ``"24h"``, ``"30m"``, ``"7d"``, ``"90s"``, ``"2w"`` or combinations like ``"1h30m"``.

    Units must come largest first and at most once each; whole numbers only (write ``"1h30m"``,
    not ``"1.5h"``) so that every duration has exactly one spelling.
    """
    if not isinstance(text, str):
        hint = f"; add a unit, e.g. '{text}s'" if isinstance(text, int) and not isinstance(text, bool) else ""
        raise InvalidDurationError(f"expected a duration like {_DURATION_EXAMPLES}, got {_got(text)}{hint}")
    compact = re.sub(r"\s+", "", text).lower()
    match = _DURATION_RE.fullmatch(compact)
    if not compact or match is None:
        raise InvalidDurationError(f"expected a duration like {_DURATION_EXAMPLES}, got {_got(text)}")
    weeks, days, hours, minutes, seconds = (int(part) if part else 0 for part in match.groups())
    try:
        return timedelta(weeks=weeks, days=days, hours=hours, minutes=minutes, seconds=seconds)
    except OverflowError:
        raise InvalidDurationError(f"duration {_got(text)} is too long") from None


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
        _fail("expected an http(s) URL, got an empty string")
    if any(ch.isspace() for ch in url):
        _fail(f"expected an http(s) URL, got {_got(url)}; a URL cannot contain spaces (write them as %20)")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        if "://" not in url and _HOST_FIRST_RE.match(url.lstrip("/")):
            # "example.org/docs" or "localhost:8000/x" (which urlsplit reads as scheme "localhost").
            _fail(f"expected an http(s) URL, got {_got(url)}; did you mean {_got('https://' + url.lstrip('/'))}?")
        _fail(f"expected an http(s) URL, got {_got(url)}; only http:// and https:// URLs can be crawled")
    if not parts.hostname:
        _fail(f"expected an http(s) URL with a host, got {_got(url)}; write it as '{scheme}://host/path'")
    try:
        parts.port  # noqa: B018 - urlsplit only checks the port when asked
    except ValueError:
        _fail(f"expected an http(s) URL, got {_got(url)}; the port is not a number from 0 to 65535")
    if parts.username is not None or parts.password is not None:
        # Same rule as crawler/urllist.py: they would be sent along to every redirect target.
        _fail(f"expected an http(s) URL without credentials, got {_got(url)}; remove 'user:password@'")
    return url


def _check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        _fail(f"not a valid regular expression: {exc}; escape special characters like . ? ( with a backslash")
    return value


def _check_non_empty(value: str) -> str:
    if not value.strip():
        _fail(f"expected a non-empty string, got {_got(value)}")
    return value.strip()


def _check_name(value: str) -> str:
    # Names end up in folder and file names ({name} in output.dir), hence the small alphabet and
    # the refusal of "." and "..", which would point output at the parent folder.
    if not _NAME_RE.fullmatch(value) or set(value) == {"."}:
        suggestion = re.sub(r"[^A-Za-z0-9._-]+", "-", value).strip("-.") or "my-job"
        _fail(
            f"expected letters, digits, '.', '_' or '-' only, got {_got(value)}; "
            f"try {suggestion!r}"
        )
    return value


HttpUrl = Annotated[str, Strict(), AfterValidator(_check_http_url)]
Regex = Annotated[str, Strict(), AfterValidator(_check_regex)]
NonEmptyStr = Annotated[str, Strict(), AfterValidator(_check_non_empty)]
Name = Annotated[str, Strict(), AfterValidator(_check_name)]


class _Model(BaseModel):
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


# ---------------------------------------------------------------------------------------------
# Models


class HostOverride(_Model):
    """Per-host crawl settings; unset values use the crawl-wide ones."""

    delay: NonNegFloat | None = Field(None, description="Seconds between requests to this host.")
    concurrency: PosInt | None = Field(None, description="Requests to this host at the same time.")


class CrawlConfig(_Model):
    """How pages are fetched (see docs/job-reference.md)."""

    depth: NonNegInt = Field(0, description="Link-following depth; 0 = only the listed URLs.")
    max_pages: PosInt = Field(500, description="Stop after fetching this many pages.")
    delay: NonNegFloat = Field(1.0, description="Seconds between requests to one host.")
    follow: Literal["same_host", "none"] = Field(
        "same_host", description="Which links to follow when depth > 0."
    )
    allow: list[Regex] = Field(default_factory=list, description="Regexes; follow only matching URLs.")
    deny: list[Regex] = Field(default_factory=list, description="Regexes; never follow matching URLs.")
    user_agent_contact: HttpUrl | None = Field(None, description="URL put in the User-Agent.")
    obey_robots: StrictBool = Field(True, description="Honour robots.txt.")
    max_crawl_delay: NonNegFloat = Field(
        30.0, description="Skip hosts whose robots.txt Crawl-delay is above this many seconds."
    )
    allow_private_networks: StrictBool = Field(
        False, description="Allow fetching from loopback/private/link-local addresses."
    )
    recrawl_after: timedelta | None = Field(
        None, description="Re-fetch a page only when older than this; null = always (conditionally)."
    )
    timeout: PosFloat = Field(30.0, description="Seconds before a request is abandoned.")
    max_bytes: PosInt = Field(10_485_760, description="Largest response body accepted, in bytes.")
    hosts: dict[str, HostOverride] = Field(default_factory=dict, description="Per-host overrides.")

    @field_validator("recrawl_after", mode="before", json_schema_input_type=str | None)
    @classmethod
    def _parse_recrawl_after(cls, value: Any) -> Any:
        if value is None or isinstance(value, timedelta):
            return value
        try:
            return parse_duration(value)
        except InvalidDurationError as exc:
            _fail(str(exc))

    @field_validator("hosts", mode="before")
    @classmethod
    def _normalise_hosts(cls, value: Any) -> Any:
        # Keys are host names as Scrapy's per-host slots see them: lower case, no scheme/port/path.
        if not isinstance(value, dict):
            return value
        result: dict[Any, Any] = {}
        for key, override in value.items():
            if not isinstance(key, str):
                _fail(f"expected a host name as key, got {_got(key)}", at=(key,))
            host = key.strip().lower()
            if not _HOSTNAME_RE.fullmatch(host):
                hint = ""
                guessed = urlsplit(host if "://" in host else f"//{host}").hostname
                if guessed and guessed != host:
                    hint = f"; use just the host name, e.g. {guessed!r}"
                _fail(f"expected a host name like 'docs.example.org', got {_got(key)}{hint}", at=(key,))
            if host in result:
                _fail(f"host {host!r} is listed twice (host names ignore case)", at=(key,))
            result[host] = override
        return result


class Question(_Model):
    """One question. In YAML a question is a string or a mapping; ``id`` is filled in on load."""

    model_config = ConfigDict(
        # The Python model requires an id (load always sets one); the file does not.
        json_schema_extra=lambda schema: schema.update(
            required=[key for key in schema.get("required", []) if key != "id"]
        ),
    )

    id: Name = Field(description="Stable id; default 'q<position>' (q1, q2, …).")
    question: NonEmptyStr = Field(description="The text asked.")
    urls: list[HttpUrl] | None = Field(
        None, description="Only search pages from these URLs (null = all pages)."
    )
    expect: list[NonEmptyStr] = Field(
        default_factory=list, description="Phrases a correct answer contains (evaluation)."
    )
    url: HttpUrl | None = Field(None, description="The page that answers it (evaluation).")
    also_urls: list[HttpUrl] = Field(
        default_factory=list,
        description="Other pages that answer it too (evaluation): their chunks with an expect phrase count.",
    )

    @field_validator("urls")
    @classmethod
    def _urls_not_empty(cls, value: list[str] | None) -> list[str] | None:
        # An empty list would restrict the search to no page at all: certainly not meant.
        if value is not None and not value:
            _fail("expected a non-empty list of URLs; remove 'urls:' to search all pages")
        return value


class SelectionConfig(_Model):
    """How chunks are chosen as evidence for a question."""

    method: Literal["keyword", "bm25", "embedding", "hybrid"] = Field(
        "hybrid", description="Chunk ranking method."
    )
    top_k: PosInt = Field(
        40, description="Most chunks given to the answerer: a ceiling; the token budget is what normally binds."
    )
    token_budget: PosInt = Field(3000, description="Most tokens of evidence per question.")
    retry_wider: StrictBool = Field(
        True, description="Ask once more with more chunks on NEI/low confidence/failed citations."
    )
    min_similarity: float | None = Field(
        None, gt=0, le=1,
        description="embedding/hybrid: below this best cosine, answer NEI without the LLM (model-specific; "
        "`webqa eval` suggests one).",
    )
    query_prefix: str | None = Field(
        None, description="embedding/hybrid: text put before each question when it is embedded; null: the "
        "embedding model's own task prefix (nomic-embed-text: 'search_query: '), '' for none.",
    )
    document_prefix: str | None = Field(
        None, description="embedding/hybrid: text put before each chunk when it is embedded; null: the "
        "embedding model's own (nomic-embed-text: 'search_document: '), '' for none. Changing it re-embeds.",
    )


class OutputConfig(_Model):
    """Where results are written."""

    dir: Path = Field(
        Path("out/{name}"),
        description="Output folder; {name} = job name; relative to the job file's folder and inside it "
        "(absolute, ~ and ../ paths are refused: use --out DIR on the command line).",
    )
    formats: list[Literal["jsonl", "markdown", "csv"]] = Field(
        default_factory=lambda: ["jsonl", "markdown"], min_length=1, description="Files to write."
    )

    @field_validator("dir", mode="before", json_schema_input_type=str)
    @classmethod
    def _check_dir(cls, value: Any) -> Any:
        if isinstance(value, Path):
            return value
        if not isinstance(value, str) or not value.strip():
            _fail(f"expected a folder path like 'out/{{name}}', got {_got(value)}")
        unknown = [p for p in re.findall(r"\{[^{}]*\}", value) if p != "{name}"]
        if unknown:
            _fail(f"unknown placeholder {unknown[0]} in {_got(value)}; only {{name}} is replaced")
        return Path(value.strip())

    @field_validator("formats")
    @classmethod
    def _dedupe(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))  # keep order; writing a file twice helps nobody


class OllamaConfig(_Model):
    """How the local LLM server is reached."""

    host: str | None = Field(None, description="Server URL; null = $OLLAMA_HOST or http://localhost:11434.")
    timeout: PosFloat = Field(120.0, description="Seconds to wait for one answer.")
    # The per-read timeout above never fires on a model that keeps sending a token a second.
    reply_timeout: PosFloat = Field(
        300.0, description="Seconds one whole reply may take, from request to last token; then the attempt fails."
    )
    max_reply_bytes: PosInt = Field(
        65536, description="Longest reply in bytes; a longer one is cut off and the attempt fails."
    )
    options: dict[str, Any] = Field(
        default_factory=lambda: dict(DEFAULT_OLLAMA_OPTIONS),
        description="Ollama model options, merged over {temperature: 0, num_ctx: 8192}; "
        "num_predict is 1024 unless set here.",
    )
    keep_alive: str | int | float | None = Field(
        "10m", description="How long Ollama keeps the model loaded: Go duration or seconds."
    )
    parallel: PosInt = Field(1, description="Concurrent requests to Ollama.")
    max_attempts: PosInt = Field(4, description="Tries per request before giving up.")

    @field_validator("host", mode="before")
    @classmethod
    def _check_host(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str):
            _fail(f"expected a URL like 'http://localhost:11434', got {_got(value)}")
        url = value.strip().rstrip("/")
        parts = urlsplit(url)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            _fail(f"expected a URL like 'http://localhost:11434', got {_got(value)}")
        return url

    @field_validator("options", mode="before")
    @classmethod
    def _merge_options(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        for key, option in value.items():
            if not isinstance(key, str):
                _fail(f"expected an option name, got {_got(key)}", at=(key,))
            if key not in _KNOWN_OLLAMA_OPTIONS:
                # Strict cutoff: only near-identical spellings are typos; others may be new options.
                close = _did_you_mean(key, _KNOWN_OLLAMA_OPTIONS, cutoff=0.8)
                if close:
                    _fail(f"unknown Ollama option; did you mean {close!r}?", at=(key,))
            if not _is_plain(option):
                _fail(f"expected a number, string, boolean or list, got {_got(option)}", at=(key,))
        # Merged, not replaced: setting only temperature must not drop num_ctx back to Ollama's
        # small default and silently cut the evidence.
        return {**DEFAULT_OLLAMA_OPTIONS, **value}

    @field_validator("keep_alive", mode="before")
    @classmethod
    def _check_keep_alive(cls, value: Any) -> Any:
        # Ollama reads a number as seconds (negative = forever) and a string as a Go duration.
        if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            return value
        if isinstance(value, str) and _GO_DURATION_RE.fullmatch(value.strip()):
            return value.strip()
        _fail(f"expected a duration like '10m', '1h' or a number of seconds (-1 = forever), got {_got(value)}")

    @property
    def resolved_host(self) -> str:
        """The server URL to use: ``host``, else ``$OLLAMA_HOST``, else http://localhost:11434."""
        host = self.host or os.environ.get("OLLAMA_HOST", "").strip() or DEFAULT_OLLAMA_HOST
        # OLLAMA_HOST is often written as the server's bind address ("0.0.0.0:11434", "myhost"):
        # without a scheme, Ollama's own defaults apply (http, port 11434). With a scheme, the
        # URL is taken as written (https://host means port 443, as in a browser).
        if "://" not in host:
            parts = urlsplit(f"http://{host}")
            netloc = parts.netloc if parts.port is not None else f"{parts.netloc}:11434"
            host = f"http://{netloc}{parts.path}"
        return host.rstrip("/")


def _is_plain(value: Any) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    return isinstance(value, list) and all(_is_plain(item) and not isinstance(item, list) for item in value)


class JobConfig(_Model):
    """A validated job. Build it with :func:`load_job` (or :func:`parse_job`)."""

    name: Name = Field(description="Job name: letters, digits, '.', '_' and '-'.")
    urls: list[HttpUrl] = Field(default_factory=list, description="URLs to crawl.")
    urls_file: Path | None = Field(
        None, description="File with one URL per line, relative to the job file's folder."
    )
    crawl: CrawlConfig = Field(default_factory=CrawlConfig)
    questions: list[Question] = Field(
        min_length=1,
        description="Questions to answer (at least one).",
        json_schema_extra={"minItems": 1},  # the custom input type below would drop it otherwise
    )
    model: NonEmptyStr = Field("llama3.2:3b", description="Ollama model that answers.")
    embedding_model: NonEmptyStr = Field("nomic-embed-text", description="Ollama embedding model.")
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    answerer: Literal["llm", "extractive"] = Field("llm", description="Who writes the answers.")
    fallback_extractive: StrictBool = Field(
        True, description="Answer extractively (with a notice) when Ollama cannot be reached."
    )
    output: OutputConfig = Field(default_factory=OutputConfig, validate_default=True)
    ollama: OllamaConfig = Field(default_factory=OllamaConfig)

    def embedding_prefixes(self) -> EmbeddingPrefixes:
        """The embedding model's task prefixes, or the ones ``selection`` sets."""
        return prefixes_for(self.embedding_model, query=self.selection.query_prefix,
                            document=self.selection.document_prefix)

    # Set from the load, never from the file (private attributes cannot be written in YAML).
    _source_path: Path | None = PrivateAttr(default=None)
    _source_name: str = PrivateAttr(default="<job>")
    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _file_hash: str | None = PrivateAttr(default=None)
    _lines: dict[tuple[str | int, ...], int] = PrivateAttr(default_factory=dict)

    @field_validator("urls_file", mode="before", json_schema_input_type=str | None)
    @classmethod
    def _resolve_urls_file(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None or isinstance(value, Path):
            return value
        if not isinstance(value, str) or not value.strip():
            _fail(f"expected a file path like 'urls.txt', got {_got(value)}")
        return _resolve(Path(value.strip()), info)

    @field_validator("questions", mode="before", json_schema_input_type=list[Union[str, Question]])
    @classmethod
    def _questions_to_mappings(cls, value: Any) -> Any:
        # "What changed?" is shorthand for {question: "What changed?"}; questions without an id
        # get "q<position>" (1-based) so that results line up across runs of the same file.
        if not isinstance(value, list):
            return value
        result: list[Any] = []
        for position, item in enumerate(value, start=1):
            if isinstance(item, str):
                item = {"question": item}
            if isinstance(item, dict) and item.get("id") is None:
                item = {**item, "id": f"q{position}"}
            result.append(item)
        return result

    @field_validator("questions")
    @classmethod
    def _unique_ids(cls, value: list[Question]) -> list[Question]:
        first_index: dict[str, int] = {}
        for index, question in enumerate(value):
            if question.id in first_index:
                _fail(
                    f"duplicate question id {question.id!r}; give each question its own id "
                    "(ids default to q1, q2, … by position)",
                    at=(index, "id"),
                    also=(first_index[question.id],),
                )
            first_index[question.id] = index
        return value

    @field_validator("output")
    @classmethod
    def _resolve_output_dir(cls, value: OutputConfig, info: ValidationInfo) -> OutputConfig:
        name = info.data.get("name")
        if not isinstance(name, str):
            return value  # the name itself is invalid and reported; nothing sensible to do here
        written = str(value.dir)
        folder = Path(written.replace("{name}", name))
        # A job file may come from someone other than the operator (a shared repo, a generated job):
        # it may only write below its own folder; anywhere else is the command line's call (--out).
        elsewhere = "; to write elsewhere, remove output.dir and run with --out DIR"
        if written.startswith("~") or folder.is_absolute():
            _fail(f"expected a folder relative to the job file's folder, got {_got(written)}{elsewhere}", at=("dir",))
        base = Path(os.path.normpath((info.context or {}).get("base_dir") or Path.cwd()))
        resolved = Path(os.path.normpath(base / folder))
        if resolved != base and base not in resolved.parents:
            _fail(f"expected a folder inside the job file's folder, got {_got(written)}, which leaves it{elsewhere}",
                  at=("dir",))
        return value.model_copy(update={"dir": resolved})

    @model_validator(mode="after")
    def _remember_origin(self, info: ValidationInfo) -> JobConfig:
        context = info.context or {}
        self._base_dir = context.get("base_dir") or Path.cwd()
        self._source_path = context.get("source_path")
        self._source_name = context.get("source_name", "<job>")
        self._file_hash = context.get("file_hash")
        self._lines = context.get("lines", {})
        return self

    # -- where the job came from -------------------------------------------------------------

    @property
    def source_path(self) -> Path | None:
        """Absolute path of the job file, or None when parsed from a string."""
        return self._source_path

    @property
    def file_hash(self) -> str | None:
        """sha256 hex digest of the job file's bytes (of the UTF-8 text for parse_job)."""
        return self._file_hash

    @property
    def base_dir(self) -> Path:
        """Folder that relative paths in the job are resolved against."""
        return self._base_dir

    def line_of(self, *key_path: str | int) -> int | None:
        """Line in the job file where ``key_path`` (e.g. ``"questions", 2``) was written."""
        return self._lines.get(tuple(key_path))

    # -- URLs ----------------------------------------------------------------------------------

    def url_entries(self) -> list[tuple[str, str]]:
        """Inline ``urls`` as ``(origin, url)`` with origin ``"job.yaml:4"``.

        The shape crawler.run.CrawlOptions.url_entries takes, so crawl-time problems with a URL
        name the job file line it came from.
        """
        entries = []
        for index, url in enumerate(self.urls):
            line = self.line_of("urls", index)
            entries.append((f"{self._source_name}:{line}" if line else self._source_name, url))
        return entries

    def require_urls(self) -> list[str]:
        """All URLs to crawl: ``urls`` then the lines of ``urls_file``, without repeats.

        The runner calls this unless ``--no-crawl``: a job that only answers from the existing
        database needs no URLs. Raises ConfigError when there are none, or urls_file is unusable.
        """
        if not self.urls and self.urls_file is None:
            raise _job_error(
                self._source_name,
                "no URLs to crawl; add a 'urls:' list or a 'urls_file:', or run with --no-crawl",
            )
        urls = list(self.urls)
        if self.urls_file is not None:
            line = self.line_of("urls_file")
            where = f"urls_file on line {line} of {self._source_name}" if line else f"urls_file of {self._source_name}"
            urls += read_urls_file(self.urls_file, mentioned_in=where)
        unique = list(dict.fromkeys(urls))
        if not unique:
            raise _job_error(str(self.urls_file), "the URL file lists no URLs; add one http(s) URL per line")
        return unique


def _resolve(path: Path, info: ValidationInfo) -> Path:
    """Make ``path`` absolute against the job file's folder (or the current folder)."""
    path = path.expanduser()
    if path.is_absolute():
        return path
    base = (info.context or {}).get("base_dir") or Path.cwd()
    return base / path


def read_urls_file(path: str | Path, *, mentioned_in: str | None = None) -> list[str]:
    """Read one URL per line; blank lines and ``#`` comments (whole-line or after a space) skipped.

    Every bad line is reported as ``file:line: …``; ``mentioned_in`` is added to "no such file"
    errors so the user knows which setting pointed there.
    """
    path = Path(path)
    display = str(path)
    origin = f" ({mentioned_in})" if mentioned_in else ""
    data = _read_limited(path, display, MAX_URLS_FILE_BYTES, origin=origin, what="URL file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _job_error(display, f"not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None
    urls: list[str] = []
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = re.split(r"\s+#", raw_line.strip(), maxsplit=1)[0].strip()
        if not line or line.startswith("#"):
            continue
        try:
            urls.append(_check_http_url(line))
        except PydanticCustomError as exc:
            raise _job_error(display, str(exc.context["message"] if exc.context else exc), line=number) from None
    return urls


# ---------------------------------------------------------------------------------------------
# YAML → Python values + line numbers

_MERGE_TAG = "tag:yaml.org,2002:merge"
_PLAIN_COLLECTION_TAGS = {"tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"}


class _AliasNode(yaml.Node):
    """Where an alias (*name) was used, pointing at the anchored node.

    PyYAML's composer returns the anchored node itself for an alias, losing the alias's own
    position; keeping it lets errors inside expanded aliases name the line that used the alias.
    """

    id = "alias"

    def __init__(self, target: yaml.Node, start_mark: yaml.Mark, end_mark: yaml.Mark) -> None:
        super().__init__(target.tag, target.value, start_mark, end_mark)
        self.target = target


class _JobLoader(yaml.SafeLoader):
    """Safe loader used only to scan, parse and compose; values are built by :class:`_Builder`.

    The pure-Python loader (not CSafeLoader) on purpose: error texts and marks are the same on
    every machine, and job files are small.
    """

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            target = super().compose_node(parent, index)  # raises on an undefined alias
            return _AliasNode(target, event.start_mark, event.end_mark)
        return super().compose_node(parent, index)


class _Builder:
    """Turn a composed YAML node tree into plain values, remembering the line of every entry."""

    def __init__(self, loader: _JobLoader, source: str) -> None:
        self.loader = loader
        self.source = source
        self.lines: dict[tuple[str | int, ...], int] = {}
        self._active: set[int] = set()  # nodes on the current path (cycle detection)
        self._alias_depth = 0  # > 0 while building a node reached again (through an alias)
        self._alias_budget = MAX_ALIAS_NODES
        self._alias_entry: tuple[str | int, ...] = ()  # where the outermost alias was used

    def _error(self, node: yaml.Node, message: str, path: tuple[str | int, ...] = ()) -> JobFileError:
        line = self.lines.get(path) or node.start_mark.line + 1
        return _job_error(self.source, message, line=line, key=_format_path(path) or None)

    def build(self, node: yaml.Node, path: tuple[str | int, ...] = (), depth: int = 0) -> Any:
        if depth > MAX_NESTING:
            raise self._error(node, f"nested more than {MAX_NESTING} levels deep; a job file is much flatter", path)
        if isinstance(node, _AliasNode):
            # Everything reached through an alias is paid for from the budget, however often
            # the same anchored node is reached: that repetition is what a bomb multiplies.
            if not self._alias_depth:
                self._alias_entry = path
            self._alias_depth += 1
            try:
                return self.build(node.target, path, depth)
            finally:
                self._alias_depth -= 1
        key = id(node)
        if key in self._active:
            raise self._error(node, "recursive YAML alias (a value contains itself); remove the alias", path)
        if self._alias_depth:
            self._alias_budget -= 1
            if self._alias_budget < 0:
                # Reported where the alias was used: the anchor's own line says nothing.
                raise self._error(
                    node,
                    f"YAML aliases expand to more than {MAX_ALIAS_NODES} values; "
                    "use anchors (&) and aliases (*) only for small repeated parts",
                    self._alias_entry,
                )
        self._active.add(key)
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, path, depth)
            if isinstance(node, yaml.SequenceNode):
                self._plain_tag(node, path)
                items = []
                for index, child in enumerate(node.value):
                    self.lines[path + (index,)] = child.start_mark.line + 1
                    items.append(self.build(child, path + (index,), depth + 1))
                return items
            return self._scalar(node, path)
        finally:
            self._active.discard(key)

    def _plain_tag(self, node: yaml.Node, path: tuple[str | int, ...]) -> None:
        if node.tag not in _PLAIN_COLLECTION_TAGS:
            raise self._error(node, f"YAML tag {_short_tag(node.tag)} is not supported in job files; remove it", path)

    def _scalar(self, node: yaml.ScalarNode, path: tuple[str | int, ...]) -> Any:
        try:
            # SafeConstructor only knows the standard YAML types; any other tag is an error here.
            return self.loader.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:
            problem = exc.problem or "cannot read value"
            if "could not determine a constructor" in problem:
                problem = f"YAML tag {_short_tag(node.tag)} is not supported in job files; remove it"
            raise self._error(node, problem, path) from None
        except (ValueError, TypeError, OverflowError):
            # e.g. "!!float abc": the explicit tag promised a type the text is not.
            raise self._error(node, f"cannot read {_got(node.value)} as {node.tag.rsplit(':', 1)[-1]}", path) from None

    def _mapping(self, node: yaml.MappingNode, path: tuple[str | int, ...], depth: int) -> dict[str, Any]:
        self._plain_tag(node, path)
        result: dict[str, Any] = {}
        explicit_lines: dict[str, int] = {}
        merged: list[dict[str, Any]] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                # "<<: *defaults" — explicit keys win, then earlier merged mappings (YAML spec).
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for source in sources:
                    value = self.build(source, path, depth + 1)
                    if not isinstance(value, dict):
                        raise self._error(key_node, "'<<' can only merge mappings", path)
                    merged.append(value)
                continue
            if isinstance(key_node, _AliasNode):
                key_node = key_node.target  # "*k: value": the key is the anchored text
            if not isinstance(key_node, yaml.ScalarNode):
                raise self._error(key_node, "a key must be plain text, not a list or mapping", path)
            key = self._scalar(key_node, path)
            line = key_node.start_mark.line + 1
            if not isinstance(key, str):
                raise self._error(
                    key_node,
                    f"key {_got(key)} is read as a {type(key).__name__}, not text; put it in quotes",
                    path,
                )
            if key in explicit_lines:
                child_path = _format_path(path + (key,))
                raise _job_error(
                    self.source,
                    f"duplicate key (first on line {explicit_lines[key]}); keep only one",
                    line=line,
                    key=child_path,
                )
            explicit_lines[key] = line
            self.lines[path + (key,)] = line
            result[key] = self.build(value_node, path + (key,), depth + 1)
        for extra in merged:
            for key, value in extra.items():
                result.setdefault(key, value)
        return result


def _format_path(path: Iterable[str | int]) -> str:
    """``("crawl", "hosts", "docs.example.org", "delay")`` → ``crawl.hosts['docs.example.org'].delay``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _IDENT_RE.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{part!r}]"
    return text


_SYNTAX_HINTS = (
    ("mapping values are not allowed", "check the indentation, or quote a value that contains ': '"),
    ("cannot start any token", "indent with spaces, not tabs, and quote values starting with @ or `"),
    ("expected <block end>", "check the indentation of this line"),
    ("could not find expected ':'", "a key needs ': ' after it; quote text that is not a key"),
    ("found undefined alias", "define the anchor (&name) before using *name"),
    ("expected a single document", "a job file is one document; remove the extra '---'"),
    ("end of stream", "a quote or bracket is not closed"),
    ("did not find expected", "a quote or bracket is not closed, or the indentation is off"),
)


def _syntax_error(source: str, text: str, exc: yaml.YAMLError) -> JobFileError:
    if isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, exc.position) + 1
        return _job_error(
            source,
            f"YAML syntax error: unacceptable character #x{exc.character:04x}; remove control characters",
            line=line,
        )
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        problem = exc.problem or exc.context or "invalid YAML"
        message = f"YAML syntax error: {problem}"
        if exc.context_mark is not None and exc.context_mark.line != mark.line and exc.context:
            message += f" ({exc.context} on line {exc.context_mark.line + 1})"
        both = f"{problem} {exc.context or ''}"
        hint = next((h for needle, h in _SYNTAX_HINTS if needle in both), None)
        if hint:
            message += f"; {hint}"
        return _job_error(source, message, line=mark.line + 1, column=mark.column + 1)
    return _job_error(source, f"YAML syntax error: {exc}")


def _compose(text: str, source: str) -> tuple[Any, dict[tuple[str | int, ...], int]]:
    """YAML text → (plain value, {key path: line})."""
    try:
        loader = _JobLoader(text)  # the reader already rejects control characters here
    except yaml.YAMLError as exc:
        raise _syntax_error(source, text, exc) from None
    try:
        try:
            node = loader.get_single_node()
        except yaml.YAMLError as exc:
            raise _syntax_error(source, text, exc) from None
        except RecursionError:
            # The composer is recursive: thousands of nested brackets exhaust the stack first.
            raise _job_error(source, "YAML nested too deeply; a job file is much flatter") from None
        if node is None:
            raise _job_error(source, "the job file is empty; start from configs/example.yaml")
        builder = _Builder(loader, source)
        builder.lines[()] = node.start_mark.line + 1
        return builder.build(node), builder.lines
    finally:
        loader.dispose()


# ---------------------------------------------------------------------------------------------
# Validation errors → one line


def _unwrap(tp: Any, meta: list[Any]) -> tuple[Any, list[Any]]:
    """Strip Annotated[...] (collecting constraints) and Optional[...] from a type."""
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            args = get_args(tp)
            tp = args[0]
            for extra in args[1:]:
                meta = meta + (list(extra.metadata) if isinstance(extra, FieldInfo) else [extra])
        elif origin is Union or origin is types.UnionType:
            options = [arg for arg in get_args(tp) if arg is not type(None)]
            if len(options) != 1:
                return tp, meta
            tp = options[0]
        else:
            return tp, meta


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _type_at(path: tuple[str | int, ...]) -> tuple[Any, list[Any]] | None:
    """The declared type (and constraints) of the value at ``path`` in a job, if known."""
    tp: Any = JobConfig
    meta: list[Any] = []
    for part in path:
        tp, meta = _unwrap(tp, meta)
        if _is_model(tp):
            field = tp.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return None
            tp, meta = field.annotation, list(field.metadata)
        elif get_origin(tp) is list and isinstance(part, int):
            tp, meta = get_args(tp)[0], []
        elif get_origin(tp) is dict:
            tp, meta = get_args(tp)[1], []
        else:
            return None
    return _unwrap(tp, meta)


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _describe(tp: Any, meta: list[Any]) -> str | None:
    """What a value of this type looks like, in words: 'a number ≥ 0', "one of 'a', 'b'"."""
    bounds = ""
    for item in meta:
        if isinstance(item, annotated_types.Ge):
            bounds += f" ≥ {_number(item.ge)}"
        elif isinstance(item, annotated_types.Gt):
            bounds += f" > {_number(item.gt)}"
        elif isinstance(item, annotated_types.Le):
            bounds += f" ≤ {_number(item.le)}"
        elif isinstance(item, annotated_types.Lt):
            bounds += f" < {_number(item.lt)}"
    if tp is bool:
        return "true or false"
    if tp is int:
        return "a whole number" + bounds
    if tp is float:
        return "a number" + bounds
    if tp is str:
        return "a string"
    if tp is timedelta:
        return f"a duration like {_DURATION_EXAMPLES}"
    if tp is Path:
        return "a path"
    if tp is Question:
        return "a question: a string, or a mapping with a 'question:' key"
    if get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(choice) for choice in get_args(tp))
    if get_origin(tp) is list:
        return "a list"
    if get_origin(tp) is dict or _is_model(tp):
        return "a mapping (key: value lines)"
    return None


_MISSING_HINTS = {
    "name": "add e.g. 'name: my-job' at the top level",
    "questions": "add a 'questions:' list with at least one question",
    "questions[].question": "add 'question: <what to ask>' to this item",
    "questions[].id": "add 'id: <short-id>'",
}
_TOO_SHORT_HINTS = {
    "questions": "add at least one question, e.g. '- What changed in 2.0?'",
    "output.formats": "list at least one of jsonl, markdown, csv",
}
_TYPE_FAMILY = ("_type", "_parsing", "int_from_float", "greater_than", "less_than", "finite_number")


def _data_path(raw: Any, loc: tuple[str | int, ...], keep_last: bool) -> tuple[str | int, ...]:
    """Map pydantic's ``loc`` onto the data actually written.

    pydantic adds entries that are not in the file (union member names, '[key]', fields a
    before-validator added); walking the raw data keeps only real keys/indexes. ``keep_last``
    keeps a final key that is absent on purpose (a missing required key).
    """
    node = raw
    path: list[str | int] = []
    for position, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            path.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path.append(part)
            node = node[part]
        elif keep_last and position == len(loc) - 1 and isinstance(part, str):
            path.append(part)
    return tuple(path)


def _value_at(raw: Any, path: tuple[str | int, ...]) -> Any:
    node = raw
    for part in path:
        node = node[part]
    return node


def _line_at(lines: dict[tuple[str | int, ...], int], path: tuple[str | int, ...]) -> int | None:
    """Line of ``path`` or, when it was not written (a missing key), of its nearest parent."""
    for end in range(len(path), -1, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return None


def _pattern(path: tuple[str | int, ...]) -> str:
    """``("questions", 3, "question")`` → ``questions[].question`` for the hint tables."""
    return re.sub(r"\[\d+\]", "[]", _format_path(path))


def _unknown_key_message(path: tuple[str | int, ...]) -> str:
    key = path[-1]
    parent = _type_at(path[:-1])
    fields: list[str] = list(parent[0].model_fields) if parent and _is_model(parent[0]) else []
    # A right key in the wrong place ("delay:" at the top level instead of under "crawl:") is
    # checked first: a fuzzy match in the wrong section ("delay" ~ "model") would mislead.
    if len(path) == 1:
        for section, field in JobConfig.model_fields.items():
            inner = _unwrap(field.annotation, [])[0]
            if _is_model(inner) and key in inner.model_fields:
                return f"unknown key at the top level; {key!r} belongs under '{section}:'"
    close = _did_you_mean(str(key), fields) if fields else None
    if close:
        return f"unknown key; did you mean {close!r}?"
    return "unknown key; allowed keys: " + ", ".join(fields) if fields else "unknown key"


def _explain(error: dict[str, Any], path: tuple[str | int, ...], value: Any) -> str:
    kind = error["type"]
    pattern = _pattern(path)
    if kind == "missing":
        return "required key is missing; " + _MISSING_HINTS.get(pattern, f"add '{path[-1]}:'")
    if kind == "extra_forbidden":
        return _unknown_key_message(path)
    declared = _type_at(path)
    expected = _describe(*declared) if declared else None
    if kind in ("too_short", "string_too_short"):
        what = "a non-empty list" if kind == "too_short" else "a non-empty string"
        hint = _TOO_SHORT_HINTS.get(pattern)
        return f"expected {what}, got {_got(value)}" + (f"; {hint}" if hint else "")
    if kind == "literal_error" and expected:
        message = f"expected {expected}, got {_got(value)}"
        choices = [str(c) for c in get_args(declared[0])] if declared else []
        close = _did_you_mean(value, choices) if isinstance(value, str) else None
        return message + (f"; did you mean {close!r}?" if close else "")
    if expected and (kind.endswith(_TYPE_FAMILY) or kind.startswith(_TYPE_FAMILY) or kind in ("model_attributes_type",)):
        return f"expected {expected}, got {_got(value)}" + _quoting_hint(declared[0] if declared else None, value)
    message = error["msg"]
    return message[:1].lower() + message[1:]


def _quoting_hint(expected: Any, value: Any) -> str:
    """Most type errors in YAML are quoting mistakes in one direction or the other."""
    if value is None:
        return "; give a value"
    if expected is str and isinstance(value, bool):
        return "; YAML reads yes/no/on/off/true/false as a boolean: put the text in quotes"
    if expected is str and isinstance(value, (int, float, date)):
        return "; put the value in quotes"
    if expected in (int, float) and isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return ""
        return "; remove the quotes"
    if expected is int and isinstance(value, float):
        return "; use a whole number"
    if expected is bool and isinstance(value, str) and value.lower() in ("true", "false", "yes", "no"):
        return "; remove the quotes"
    if expected is bool and isinstance(value, int):
        return "; write true or false"
    if get_origin(expected) is list and isinstance(value, (str, int, float)):
        return "; write it as a list: [item, ...] or '- item' lines"
    return ""


def _without_misspelt_required(errors: list[Any], raw: Any) -> list[Any]:
    """Drop "required key is missing" when an unknown key beside it is that key misspelt.

    ``questons:`` raises both errors; the missing one sorts first (it has no line of its own) but
    the fix is the unknown key's "did you mean 'questions'?".
    """
    unknown = [_data_path(raw, tuple(e["loc"]), keep_last=False) for e in errors if e["type"] == "extra_forbidden"]

    def misspelt(error: Any) -> bool:
        if error["type"] != "missing":
            return False
        path = _data_path(raw, tuple(error["loc"]), keep_last=True)
        hint = f"did you mean {path[-1]!r}?"
        return any(u[:-1] == path[:-1] and hint in _unknown_key_message(u) for u in unknown if u)

    return [e for e in errors if not misspelt(e)]


def _validation_error(
    exc: ValidationError, raw: Any, lines: dict[tuple[str | int, ...], int], source: str
) -> JobFileError:
    """The earliest problem in the file, as one line (plus how many more there are)."""
    errors = _without_misspelt_required(exc.errors(include_url=False), raw)
    found: list[tuple[int, int, str, str]] = []
    for order, error in enumerate(errors):
        loc = tuple(error["loc"])
        context = error.get("ctx") or {}
        if error["type"] == "webqa":
            path = _data_path(raw, loc + tuple(context.get("at") or ()), keep_last=False)
            message = str(context.get("message", error["msg"]))
            also = context.get("also")
            if also is not None:
                other = _line_at(lines, _data_path(raw, loc + tuple(also), keep_last=False))
                if other is not None:
                    message = message.replace(";", f" (also on line {other});", 1)
        else:
            path = _data_path(raw, loc, keep_last=error["type"] == "missing")
            try:
                value = _value_at(raw, path) if error["type"] != "missing" else None
            except (KeyError, IndexError, TypeError):
                value = error.get("input")
            message = _explain(error, path, value)
        line = _line_at(lines, path) or 0
        found.append((line, order, _format_path(path), message))
    line, _, key, message = min(found)
    if len(found) > 1:
        more = len(found) - 1
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return _job_error(source, message, line=line or None, key=key or None)


# ---------------------------------------------------------------------------------------------
# Entry points


def _read_limited(path: Path, display: str, limit: int, *, origin: str = "", what: str = "job file") -> bytes:
    """Read a whole file, refusing folders, FIFOs, devices and sockets and anything over ``limit`` bytes."""
    try:
        # Checked before any read: a FIFO blocks (while the run lock is held) and /dev/zero never ends.
        data = read_bounded(path, limit)  # limit + 1 bytes at most: "too large" even when stat() cannot tell
    except NotARegularFileError as exc:
        if exc.kind == "a folder":
            raise _job_error(display, f"is a folder, not a {what}{origin}; give the path of the file") from None
        raise _job_error(display, f"is {exc.kind}, not a regular file{origin}; give the path of a {what}") from None
    except FileNotFoundError:
        raise _job_error(display, f"no such file{origin}; check the path") from None
    except PermissionError:
        raise _job_error(display, f"cannot read the {what}{origin} (permission denied); check its permissions") from None
    except IsADirectoryError:
        raise _job_error(display, f"is a folder, not a {what}{origin}; give the path of the file") from None
    except OSError as exc:
        raise _job_error(display, f"cannot read the {what}{origin}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise _job_error(display, f"{what} is larger than {limit // (1024 * 1024)} MiB; {_TOO_LARGE_HINT[what]}")
    return data


_TOO_LARGE_HINT = {
    "job file": "a job file holds settings only; put long URL lists in urls_file",
    "URL file": "split the URLs over several jobs",
}


def _parse(
    text: str,
    *,
    source: str,
    base_dir: Path,
    source_path: Path | None,
    file_hash: str,
) -> JobConfig:
    raw, lines = _compose(text, source)
    if not isinstance(raw, dict):
        raise _job_error(
            source,
            f"the top level must be a mapping of keys (name:, urls:, questions:, …), got {_got(raw)}",
            line=lines.get(()),
        )
    # Top-level "x-…" keys are free for anchors ("x-common: &common …"), as in docker-compose:
    # without a place to define them, aliases could only point at real settings.
    raw = {key: value for key, value in raw.items() if not key.startswith("x-")}
    context = {
        "base_dir": base_dir,
        "source_path": source_path,
        "source_name": source,
        "file_hash": file_hash,
        "lines": lines,
    }
    try:
        return JobConfig.model_validate(raw, context=context)
    except ValidationError as exc:
        raise _validation_error(exc, raw, lines, source) from None


def parse_job(text: str, source: str = "<string>", base_dir: Path | None = None) -> JobConfig:
    """Validate a job given as YAML text; ``source`` names it in errors.

    Relative paths (urls_file, output.dir) resolve against ``base_dir``, default the current folder.
    """
    data = text.encode("utf-8")
    if len(data) > MAX_JOB_BYTES:
        raise _job_error(source, f"job file is larger than 1 MiB; {_TOO_LARGE_HINT['job file']}")
    return _parse(
        text,
        source=source,
        base_dir=(base_dir or Path.cwd()).absolute(),
        source_path=None,
        file_hash=hashlib.sha256(data).hexdigest(),
    )


def load_job(path: str | Path) -> JobConfig:
    """Read and validate a job file. Every problem is raised as one ConfigError line."""
    display = str(path)
    path = Path(path).expanduser()
    data = _read_limited(path, display, MAX_JOB_BYTES)
    try:
        text = data.decode("utf-8-sig")  # -sig: editors on Windows like to add a BOM
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise _job_error(display, "not UTF-8 text; save the file as UTF-8", line=line) from None
    absolute = path.absolute()  # not resolve(): a symlinked job resolves paths next to the link
    return _parse(
        text,
        source=display,
        base_dir=absolute.parent,
        source_path=absolute,
        file_hash=hashlib.sha256(data).hexdigest(),
    )


def job_json_schema() -> dict[str, Any]:
    """JSON Schema of the job file, for editors (e.g. yaml-language-server)."""
    schema = JobConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "webqa job"
    return schema
