"""Job file (YAML) → typed, validated configuration: the models and the entry points.

webqa runs from cron, so the error line a job file produces is often the only thing a user sees in a
mail. Every problem with a job file therefore becomes ONE ``ConfigError`` line naming the file, the
line (and column for YAML syntax errors), the key path, what was expected and what to do.

The work is split by concern, each module with one reason to change:

* this module: the pydantic models (what a job may say) and :func:`load_job`;
* ``jobs/config_files.py``: reading the file (bounded, never blocking, UTF-8);
* ``jobs/config_yaml.py``: YAML → plain values plus the line of every key, with the alias-bomb guard;
* ``jobs/config_messages.py``: the one-line messages, pydantic's errors translated back to their line.

Public API: :func:`load_job` (the CLI's entry point), :func:`parse_job`, :func:`job_json_schema`,
:func:`parse_duration` and the models, :class:`JobConfig` first.
"""

from __future__ import annotations

import hashlib
import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
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

from crawler.urllist import MAX_URL_FILE_BYTES, collect_urls, require_url_file, sitemap_entry
from jobs import llm_defaults as llm
from jobs.config_files import MAX_JOB_BYTES, TOO_LARGE, decode_job, read_job_bytes
from jobs.config_messages import DURATION_EXAMPLES, JobFileError, did_you_mean, fail, got, job_error, validation_error
from jobs.config_yaml import MAX_ALIAS_NODES, compose
from jobs.errors import ConfigError
from jobs.prefixes import EmbeddingPrefixes, prefixes_for
from pipelines import defaults

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
    "OllamaHost",
    "OutputConfig",
    "Question",
    "SelectionConfig",
    "job_json_schema",
    "load_job",
    "parse_duration",
    "parse_job",
]

# Limits (MAX_JOB_BYTES, MAX_ALIAS_NODES) are the file reader's and the YAML reader's, re-exported above.
MAX_URLS_FILE_BYTES = MAX_URL_FILE_BYTES  # the same limit as `webqa crawl -i`

# Ollama's defaults are jobs/llm_defaults.py's; the names stay here for callers of this module.
DEFAULT_OLLAMA_HOST = llm.DEFAULT_HOST
DEFAULT_OLLAMA_OPTIONS = llm.DEFAULT_OPTIONS
# Known Ollama model options, only used to catch typos ("temprature"): an unknown option that is
# not close to a known one is passed through, because Ollama adds options over time.
_KNOWN_OLLAMA_OPTIONS = (
    "numa num_ctx num_batch num_gpu main_gpu low_vram vocab_only use_mmap use_mlock num_thread "
    "num_keep seed num_predict top_k top_p min_p typical_p repeat_last_n temperature "
    "repeat_penalty presence_penalty frequency_penalty mirostat mirostat_tau mirostat_eta "
    "penalize_newline stop tfs_z"
).split()

_NAME_RE = re.compile(r"[A-Za-z0-9._-]+")
# Go duration syntax, which is what Ollama parses keep_alive strings with.
_GO_DURATION_RE = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h)(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))*|0")
_DURATION_RE = re.compile(r"(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
# "host[:port]" then a path or nothing: text worth suggesting "https://" for (not "root:*:20228:…").
_HOST_FIRST_RE = re.compile(r"[A-Za-z0-9.-]+(?::\d+)?(?:[/?#]|$)")
_HOSTNAME_RE = re.compile(r"(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*\.?")


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


class SitemapEntry(_Model):
    """``- sitemap: URL`` in ``urls``: crawl the pages a sitemap lists (see docs/job-reference.md)."""

    sitemap: HttpUrl = Field(description="A sitemap, a sitemap index (.xml or .xml.gz), or a site's /robots.txt "
                                          "for the sitemaps its Sitemap: lines name.")


# An entry of the job's urls: a page, or a sitemap whose pages are crawled.
ListedUrl = Annotated[str, BeforeValidator(_sitemap_mapping, json_schema_input_type=Union[str, SitemapEntry]),
                      Strict(), AfterValidator(_check_listed_url)]



class HostOverride(_Model):
    """Per-host crawl settings; unset values use the crawl-wide ones."""

    delay: NonNegFloat | None = Field(None, description="Seconds between requests to this host.")
    concurrency: PosInt | None = Field(None, description="Requests to this host at the same time.")


class CrawlConfig(_Model):
    """How pages are fetched (see docs/job-reference.md)."""

    depth: NonNegInt = Field(0, description="Link-following depth; 0 = only the listed URLs.")
    max_pages: PosInt = Field(500, description="Stop after fetching this many pages.")
    delay: NonNegFloat = Field(defaults.DELAY, description="Seconds between requests to one host.")
    follow: Literal["same_host", "none"] = Field(
        "same_host", description="Which links to follow when depth > 0."
    )
    allow: list[Regex] = Field(default_factory=list, description="Regexes; follow only matching URLs.")
    deny: list[Regex] = Field(default_factory=list, description="Regexes; never follow matching URLs.")
    user_agent_contact: HttpUrl | None = Field(None, description="URL put in the User-Agent.")
    obey_robots: StrictBool = Field(True, description="Honour robots.txt (and robots meta tags / X-Robots-Tag).")
    obey_noindex: StrictBool = Field(
        True, description="Leave out pages whose meta robots or X-Robots-Tag say noindex; false stores them "
                          "(pages you own)."
    )
    max_crawl_delay: NonNegFloat = Field(
        defaults.MAX_CRAWL_DELAY, description="Skip hosts whose robots.txt Crawl-delay is above this many seconds."
    )
    allow_private_networks: StrictBool = Field(
        False, description="Allow fetching from loopback/private/link-local addresses."
    )
    recrawl_after: timedelta | None = Field(
        None, description="Re-fetch a page only when older than this; null = always (conditionally)."
    )
    timeout: PosFloat = Field(defaults.TIMEOUT, description="Seconds before a request is abandoned.")
    max_bytes: PosInt = Field(defaults.MAX_BYTES, description="Largest response body accepted, in bytes.")
    max_duration: PosFloat | None = Field(
        None, description="Stop the crawl gracefully after this many seconds; null = no bound."
    )
    pdf_max_pages: PosInt = Field(
        defaults.PDF_MAX_PAGES, description="A PDF with more pages than this is not read (recorded as failed)."
    )
    sitemap_max_urls: PosInt = Field(
        defaults.SITEMAP_MAX_URLS, description="Most page URLs read from one listed sitemap (with its index's sitemaps)."
    )
    hosts: dict[str, HostOverride] = Field(default_factory=dict, description="Per-host overrides.")

    @field_validator("recrawl_after", mode="before", json_schema_input_type=str | None)
    @classmethod
    def _parse_recrawl_after(cls, value: Any) -> Any:
        if value is None or isinstance(value, timedelta):
            return value
        try:
            return parse_duration(value)
        except InvalidDurationError as exc:
            fail(str(exc))

    @field_validator("hosts", mode="before")
    @classmethod
    def _normalise_hosts(cls, value: Any) -> Any:
        # Keys are host names as Scrapy's per-host slots see them: lower case, no scheme/port/path.
        if not isinstance(value, dict):
            return value
        result: dict[Any, Any] = {}
        for key, override in value.items():
            if not isinstance(key, str):
                fail(f"expected a host name as key, got {got(key)}", at=(key,))
            host = key.strip().lower()
            if not _HOSTNAME_RE.fullmatch(host):
                hint = ""
                guessed = urlsplit(host if "://" in host else f"//{host}").hostname
                if guessed and guessed != host:
                    hint = f"; use just the host name, e.g. {guessed!r}"
                fail(f"expected a host name like 'docs.example.org', got {got(key)}{hint}", at=(key,))
            if host in result:
                fail(f"host {host!r} is listed twice (host names ignore case)", at=(key,))
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
    # What a wrong value should have been, in an error message (jobs/config_messages.py).
    described_as: ClassVar[str] = "a question: a string, or a mapping with a 'question:' key"

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
            fail("expected a non-empty list of URLs; remove 'urls:' to search all pages")
        return value


class RerankConfig(_Model):
    """Opt-in listwise rerank of the top candidates by the job's own chat model (jobs/rerank.py)."""

    candidates: int = Field(
        20, ge=2, le=50, description="How many of the best candidates the model orders (one call per question)."
    )
    excerpt_chars: int = Field(
        600, ge=100, le=4000, description="Longest excerpt of each candidate shown to the model, in characters."
    )
    timeout: PosFloat = Field(60.0, description="Seconds the rerank call may take; then the selection order is kept.")


class SecondStageConfig(_Model):
    """The top candidates scored again by their best sentence window (jobs/second_stage.py)."""

    embedding_model: NonEmptyStr | None = Field(
        None, description="The Ollama embedding model that scores the windows: null, the job's embedding_model "
        "(its cached vectors of the windows are reused); or a second model on the same Ollama (task prefixes by "
        "name, as for embedding_model).",
    )
    candidates: int = Field(defaults.SECOND_STAGE_CANDIDATES, ge=2, le=50,
                            description="How many of the best candidates are scored again.")
    weight: float = Field(
        defaults.SECOND_STAGE_WEIGHT, ge=0, le=1, description="The share of the window score in the new order (the rest is the first "
        "selection's score; both scaled within the candidates); 0 keeps the order.",
    )


class PassagesConfig(_Model):
    """Send the best part of each top candidate instead of the whole chunk (jobs/second_stage.py)."""

    words: int = Field(
        defaults.PASSAGE_WORDS, ge=30, le=1000, description="Most words of a passage: the best-scoring sentence window of the chunk, "
        "grown by neighbouring sentences.",
    )
    candidates: int = Field(
        defaults.SECOND_STAGE_CANDIDATES, ge=1, le=50,
        description="How many of the best candidates are cut to passages (the rest are sent whole).",
    )


class SelectionConfig(_Model):
    """How chunks are chosen as evidence for a question."""

    method: Literal["keyword", "bm25", "embedding", "hybrid"] = Field(
        defaults.SELECTION_METHOD, description="Chunk ranking method."
    )
    top_k: PosInt = Field(
        defaults.TOP_K, description="Most chunks given to the answerer: a ceiling; the token budget is what normally binds."
    )
    token_budget: PosInt = Field(defaults.TOKEN_BUDGET, description="Most tokens of evidence per question.")
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
    rerank: RerankConfig | None = Field(
        None, description="Off unless set: the answering model reorders the top candidates before packing (one "
        "more LLM call per question; BENCHMARKS.md, 'Selection, round 3'). {} takes the defaults.",
    )
    second_stage: SecondStageConfig | None = Field(
        None, description="Off unless set: the top candidates are scored again by their best sentence window "
        "against the question (the job's embedding model, or a second one) and reordered. {} takes the defaults.",
    )
    passages: PassagesConfig | None = Field(
        None, description="Off unless set: each top candidate is sent as its best passage (a sentence window "
        "scored by the embedding model, or by the question's words under bm25) instead of the whole chunk, so "
        "more candidates fit the token budget. {} takes the defaults.",
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
            fail(f"expected a folder path like 'out/{{name}}', got {got(value)}")
        unknown = [p for p in re.findall(r"\{[^{}]*\}", value) if p != "{name}"]
        if unknown:
            fail(f"unknown placeholder {unknown[0]} in {got(value)}; only {{name}} is replaced")
        return Path(value.strip())

    @field_validator("formats")
    @classmethod
    def _dedupe(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))  # keep order; writing a file twice helps nobody


def _check_ollama_url(value: Any) -> str:
    """An Ollama server URL as written in the job: http(s) with a host name, no trailing slash."""
    if not isinstance(value, str):
        fail(f"expected a URL like 'http://localhost:11434', got {got(value)}")
    url = value.strip().rstrip("/")
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number or out of range
    except ValueError:
        fail(f"expected a URL like 'http://localhost:11434', got {got(value)} (bad port)")
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        fail(f"expected a URL like 'http://localhost:11434', got {got(value)}")
    return url


class OllamaHost(_Model):
    """One server of ``ollama.hosts``; in YAML a URL string or a mapping."""

    url: str = Field(description="Server URL, e.g. http://gpu1:11434.")
    parallel: PosInt | None = Field(
        None, description="Requests to this server at the same time; null = ollama.parallel.")

    @field_validator("url", mode="before")
    @classmethod
    def _check_url(cls, value: Any) -> Any:
        return _check_ollama_url(value)


class OllamaConfig(_Model):
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


class JobConfig(_Model):
    """A validated job. Build it with :func:`load_job` (or :func:`parse_job`)."""

    name: Name = Field(description="Job name: letters, digits, '.', '_' and '-'.")
    urls: list[ListedUrl] = Field(
        default_factory=list, description="URLs to crawl; 'sitemap: URL' (or a {sitemap: URL} item) crawls the pages "
                                          "a sitemap lists.")
    urls_file: Path | None = Field(
        None, description="File with one URL per line, relative to the job file's folder."
    )
    crawl: CrawlConfig = Field(default_factory=CrawlConfig)
    questions: list[Question] = Field(
        min_length=1,
        description="Questions to answer (at least one).",
        json_schema_extra={"minItems": 1},  # the custom input type below would drop it otherwise
    )
    model: NonEmptyStr = Field(llm.DEFAULT_MODEL, description="Ollama model that answers.")
    embedding_model: NonEmptyStr = Field(llm.DEFAULT_EMBEDDING_MODEL, description="Ollama embedding model.")
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    answerer: Literal["llm", "extractive"] = Field("llm", description="Who writes the answers.")
    fallback_extractive: StrictBool = Field(
        True, description="Answer extractively (with a notice) when Ollama cannot be reached."
    )
    output: OutputConfig = Field(default_factory=OutputConfig, validate_default=True)
    ollama: OllamaConfig = Field(default_factory=OllamaConfig)
    scope: Literal["job", "database"] = Field(
        "job", description="Pages questions without urls search: 'job' = the pages this job's crawls reached; "
                           "'database' = every page in the database file.",
    )
    on_crawl_failure: Literal["fail", "answer_stale"] = Field(
        "fail", description="When no page of the job could be fetched: 'fail' (exit 3, nothing answered) or "
                            "'answer_stale' (answer from the stored copies, marked stale; exit 1).",
    )
    allow_degraded: StrictBool = Field(
        False, description="Exit 0 even when the run was degraded (answered extractively because Ollama was "
                           "down, or selected with bm25 because the embedding model was missing).",
    )
    redis: str | None = Field(
        None, pattern=r"^(redis|rediss|unix)://",
        description="Redis URL (redis://host:6379/0): crawl through Redis with `webqa worker` processes; "
                    "null = crawl on this machine.",
    )

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
            fail(f"expected a file path like 'urls.txt', got {got(value)}")
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
                fail(
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
            fail(f"expected a folder relative to the job file's folder, got {got(written)}{elsewhere}", at=("dir",))
        base = Path(os.path.normpath((info.context or {}).get("base_dir") or Path.cwd()))
        resolved = Path(os.path.normpath(base / folder))
        if resolved != base and base not in resolved.parents:
            fail(f"expected a folder inside the job file's folder, got {got(written)}, which leaves it{elsewhere}",
                  at=("dir",))
        # The same after following symbolic links: a link in the job's folder must not lead the reports out.
        real, real_base = Path(os.path.realpath(resolved)), Path(os.path.realpath(base))
        if real != real_base and real_base not in real.parents:
            fail(f"expected a folder inside the job file's folder, got {got(written)}, which leaves it through a "
                 f"symbolic link{elsewhere}", at=("dir",))
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
        """All URLs to crawl, normalised: ``urls`` then the valid lines of ``urls_file``, without repeats.

        The runner calls this unless ``--no-crawl``: a job that only answers from the existing
        database needs no URLs. Raises ConfigError when there are none, or urls_file is unusable or
        holds no valid URL; a bad line of it is skipped here and reported by the crawl (file:line).
        """
        if not self.urls and self.urls_file is None:
            raise job_error(
                self._source_name,
                "no URLs to crawl; add a 'urls:' list or a 'urls_file:', or run with --no-crawl",
            )
        entries = self.url_entries()
        if self.urls_file is not None:
            # The same reader as `webqa crawl -i` (crawler/urllist.py), so the file means the same to both.
            entries += require_url_file(self.urls_file, mentioned_in=self._urls_file_origin())
        listed, _problems = collect_urls(entries)
        return [entry.url for entry in listed]

    def _urls_file_origin(self) -> str:
        line = self.line_of("urls_file")
        return f"urls_file on line {line} of {self._source_name}" if line else f"urls_file of {self._source_name}"


def _resolve(path: Path, info: ValidationInfo) -> Path:
    """Make ``path`` absolute against the job file's folder (or the current folder)."""
    path = path.expanduser()
    if path.is_absolute():
        return path
    base = (info.context or {}).get("base_dir") or Path.cwd()
    return base / path


# ---------------------------------------------------------------------------------------------
# Entry points


def _parse(
    text: str,
    *,
    source: str,
    base_dir: Path,
    source_path: Path | None,
    file_hash: str,
) -> JobConfig:
    raw, lines = compose(text, source)
    if not isinstance(raw, dict):
        raise job_error(
            source,
            f"the top level must be a mapping of keys (name:, urls:, questions:, …), got {got(raw)}",
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
        raise validation_error(exc, raw, lines, source, JobConfig) from None


def parse_job(text: str, source: str = "<string>", base_dir: Path | None = None) -> JobConfig:
    """Validate a job given as YAML text; ``source`` names it in errors.

    Relative paths (urls_file, output.dir) resolve against ``base_dir``, default the current folder.
    """
    data = text.encode("utf-8")
    if len(data) > MAX_JOB_BYTES:
        raise job_error(source, TOO_LARGE)
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
    data = read_job_bytes(path, display)
    text = decode_job(data, display)
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
