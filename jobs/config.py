"""Job file (YAML) → typed, validated configuration: the job model and the entry points.

webqa runs from cron, so the error line a job file produces is often the only thing a user sees in a
mail. Every problem with a job file therefore becomes ONE ``ConfigError`` line naming the file, the
line (and column for YAML syntax errors), the key path, what was expected and what to do.

The work is split by concern, each module with one reason to change:

* this module: :class:`JobConfig` (what a job may say at the top level) and :func:`load_job`;
* ``jobs/config_types.py``: durations, the strict field types and their checks, the shared base model;
* ``jobs/config_sections.py``: the crawl, question, selection and output sections;
* ``jobs/config_ollama.py``: the ollama section;
* ``jobs/config_files.py``: reading the file (bounded, never blocking, UTF-8);
* ``jobs/config_yaml.py``: YAML → plain values plus the line of every key, with the alias-bomb guard;
* ``jobs/config_messages.py``: the one-line messages, pydantic's errors translated back to their line.

Public API: :func:`load_job` (the CLI's entry point), :func:`parse_job`, :func:`job_json_schema`,
:func:`parse_duration` and the models, :class:`JobConfig` first; all importable from here whichever
module defines them.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import Field, PrivateAttr, StrictBool, ValidationError, ValidationInfo, field_validator, model_validator

from crawler.urllist import MAX_URL_FILE_BYTES, collect_urls, require_url_file
from jobs import llm_defaults as llm
from jobs.config_files import MAX_JOB_BYTES, TOO_LARGE, decode_job, read_job_bytes
from jobs.config_messages import JobFileError, fail, got, job_error, validation_error
from jobs.config_ollama import OllamaConfig, OllamaHost
from jobs.config_sections import (
    CrawlConfig,
    HostOverride,
    OutputConfig,
    PassagesConfig,
    Question,
    RerankConfig,
    SecondStageConfig,
    SelectionConfig,
)
from jobs.config_types import InvalidDurationError, ListedUrl, Name, NonEmptyStr, StrictModel, parse_duration
from jobs.config_yaml import MAX_ALIAS_NODES, compose
from jobs.notify_config import NotifyConfig
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
    "OllamaHost",
    "OutputConfig",
    "PassagesConfig",
    "Question",
    "RerankConfig",
    "SecondStageConfig",
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


class JobConfig(StrictModel):
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
    embed: Literal["on_question", "on_crawl"] = Field(
        "on_question", description="When chunk windows are embedded (embedding/hybrid selection): 'on_question' = "
        "when a question first needs them; 'on_crawl' = right after the run's crawl, for the pages its questions "
        "search, so the first question does not wait (a failure is a notice; the questions then select with bm25).",
    )
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
    notify: NotifyConfig | None = Field(
        None, description="Announce a run whose answers changed: {webhook: URL} (one JSON POST) and/or "
                          "{command: [program, args]} (the JSON on stdin); see docs/job-reference.md.",
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
