"""The job file's sections: crawl (with per-host overrides), questions, selection and output.

Each section is a pydantic model of jobs/config_types.py's strict fields; jobs/config.py's JobConfig
puts them together (the Ollama section is jobs/config_ollama.py's).
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import (AfterValidator, ConfigDict, Field, Strict, StrictBool, StrictFloat, StrictInt, ValidationInfo,
                      field_validator, model_validator)

from jobs.config_messages import fail, got
from jobs.config_render import RenderSetting
from jobs.config_types import (
    HttpUrl,
    InvalidDurationError,
    Name,
    NonEmptyStr,
    NonNegFloat,
    NonNegInt,
    PosFloat,
    PosInt,
    Regex,
    StrictModel,
    parse_duration,
)
from jobs.typed import check_type_text
from pipelines import defaults

_HOSTNAME_RE = re.compile(r"(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*\.?")


class HostOverride(StrictModel):
    """Per-host crawl settings; unset values use the crawl-wide ones."""

    delay: NonNegFloat | None = Field(None, description="Seconds between requests to this host.")
    concurrency: PosInt | None = Field(None, description="Requests to this host at the same time.")


class CrawlConfig(StrictModel):
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
    render: RenderSetting = Field(
        None, description="Render pages with JavaScript in Chromium: 'js' for every page, or {js: [regex, ...]}."
    )

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


def _check_answer_type(value: str) -> str:
    try:
        return check_type_text(value)
    except ValueError as exc:
        fail(str(exc))


AnswerTypeText = Annotated[str, Strict(), AfterValidator(_check_answer_type)]


class Question(StrictModel):
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
    kind: Literal["question", "summary"] = Field(
        "question", description="'summary': a summary of the whole of its pages (its urls, or the job's), every "
                                "claim cited; 'question': answered from the chunks that match it best."
    )
    type: AnswerTypeText = Field(
        "text", description="The answer's value: yes_no, number, date (YYYY-MM-DD), list, enum(a, b, ...) or text."
    )
    expect: list[NonEmptyStr] = Field(
        default_factory=list, description="Phrases a correct answer contains (evaluation)."
    )
    url: HttpUrl | None = Field(None, description="The page that answers it (evaluation).")
    also_urls: list[HttpUrl] = Field(
        default_factory=list,
        description="Other pages that answer it too (evaluation): their chunks with an expect phrase count.",
    )

    @field_validator("type")
    @classmethod
    def _summary_is_text(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("kind") == "summary" and value != "text":
            fail(f"a summary question's answer is text, not {value}; remove 'type:' or make it a question")
        return value

    @field_validator("urls")
    @classmethod
    def _urls_not_empty(cls, value: list[str] | None) -> list[str] | None:
        # An empty list would restrict the search to no page at all: certainly not meant.
        if value is not None and not value:
            fail("expected a non-empty list of URLs; remove 'urls:' to search all pages")
        return value


class RerankConfig(StrictModel):
    """Opt-in listwise rerank of the top candidates by the job's own chat model (jobs/rerank.py)."""

    candidates: StrictInt = Field(
        20, ge=2, le=50, description="How many of the best candidates the model orders (one call per question)."
    )
    excerpt_chars: StrictInt = Field(
        600, ge=100, le=4000, description="Longest excerpt of each candidate shown to the model, in characters."
    )
    timeout: PosFloat = Field(60.0, description="Seconds the rerank call may take; then the selection order is kept.")


class SecondStageConfig(StrictModel):
    """The top candidates scored again by their best sentence window (jobs/second_stage.py)."""

    embedding_model: NonEmptyStr | None = Field(
        None, description="The Ollama embedding model that scores the windows: null, the job's embedding_model "
        "(its cached vectors of the windows are reused); or a second model on the same Ollama (task prefixes by "
        "name, as for embedding_model).",
    )
    candidates: StrictInt = Field(defaults.SECOND_STAGE_CANDIDATES, ge=2, le=50,
                            description="How many of the best candidates are scored again.")
    weight: StrictFloat = Field(
        defaults.SECOND_STAGE_WEIGHT, ge=0, le=1, description="The share of the window score in the new order (the rest is the first "
        "selection's score; both scaled within the candidates); 0 keeps the order.",
    )
    keyword_gate: StrictFloat | None = Field(
        None, gt=0, le=1, description="Score only questions whose best keyword (bm25) match holds less than this "
        "share of the most the question's words can score, e.g. 0.3: a question naming an exact term (an option, "
        "a function) keeps the first selection's order, which window scores would move its exact hits down from; "
        "null: every question.",
    )


class PassagesConfig(StrictModel):
    """Send the best part of each top candidate instead of the whole chunk (jobs/second_stage.py)."""

    words: StrictInt = Field(
        defaults.PASSAGE_WORDS, ge=30, le=1000, description="Most words of a passage: the best-scoring sentence window of the chunk, "
        "grown by neighbouring sentences.",
    )
    candidates: StrictInt = Field(
        defaults.SECOND_STAGE_CANDIDATES, ge=1, le=50,
        description="How many of the best candidates are cut to passages (the rest are sent whole).",
    )


class SelectionConfig(StrictModel):
    """How chunks are chosen as evidence for a question."""

    method: Literal[defaults.SELECTION_METHODS] = Field(  # type: ignore[valid-type]
        defaults.SELECTION_METHOD, description="Chunk ranking method."
    )
    top_k: PosInt = Field(
        defaults.TOP_K, description="Most chunks given to the answerer: a ceiling; the token budget is what normally binds."
    )
    token_budget: PosInt = Field(defaults.TOKEN_BUDGET, description="Most tokens of evidence per question.")
    retry_wider: StrictBool = Field(
        True, description="Ask once more with more chunks on NEI/low confidence/failed citations."
    )
    min_similarity: StrictFloat | None = Field(
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
    approximate: Literal["auto", "always"] | StrictBool = Field(
        "auto", description="embedding/hybrid: 'auto' (or true) ranks by binary codes of the vectors first (re-scored "
        "exactly; a job's scope: its windows' codes) from 200,000 windows in the database, about 11x less CPU for the "
        "embedding leg at a million chunks (hybrid about 3x); 'always' at any size, false never (every window scored "
        "exactly). Loss measured on every dev set (BENCHMARKS.md, 'Selection latency at 1,000,000 chunks').",
    )
    embedding_first: NonNegInt = Field(
        0, le=50, description="hybrid: the embedding list's best this many are packed among the fused best as many, "
        "so a paraphrase only the embedding ranks high reaches the prompt; 0: the fused order (BENCHMARKS.md, "
        "'Answer in the prompt (selection)').",
    )
    rerank: RerankConfig | None = Field(
        None, description="Off unless set: the answering model reorders the top candidates before packing (one "
        "more LLM call per question; BENCHMARKS.md, 'Answer in the prompt (selection)'). {} takes the defaults.",
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

    @field_validator("approximate", mode="before", json_schema_input_type=Literal["auto", "always"] | bool)
    @classmethod
    def _approximate_word(cls, value: Any) -> Any:
        # true meant "past the threshold" before 'auto' existed: it still does, so no job turns lossy unasked.
        if value in ("auto", "always") or isinstance(value, bool):
            return value
        fail(f"expected auto, always, true or false, got {got(value)}")

    @model_validator(mode="after")
    def _embedding_first_applies(self) -> SelectionConfig:
        # Each of these would leave embedding_first silently without effect.
        if not self.embedding_first:
            return self
        if self.method != "hybrid":
            fail(f"applies to method hybrid only (this job's method is {self.method}); remove it or set "
                 "selection.method: hybrid", at=("embedding_first",))
        if self.embedding_first >= self.top_k:
            fail(f"expected fewer than top_k ({self.top_k}): the candidates it moves are packed after the fused "
                 f"best {self.embedding_first}", at=("embedding_first",))
        if self.rerank is not None or (self.second_stage is not None and self.second_stage.weight > 0):
            fail("has no effect with selection.rerank or selection.second_stage, which reorder the candidates "
                 "after it; keep one of them", at=("embedding_first",))
        return self


class OutputConfig(StrictModel):
    """Where results are written."""

    dir: Path = Field(
        Path("out/{name}"),
        description="Output folder; {name} = job name; relative to the job file's folder and inside it "
        "(absolute, ~ and ../ paths are refused: use --out DIR on the command line).",
    )
    formats: list[Literal["jsonl", "markdown", "html", "csv"]] = Field(
        default_factory=lambda: ["jsonl", "markdown", "html"], min_length=1,
        description="Files to write: answers.jsonl, report.md, report.html (quotes linked into their pages), answers.csv."
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
