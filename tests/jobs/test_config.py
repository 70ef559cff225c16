"""Job file → JobConfig: defaults, paths, ids, and above all the one-line error messages.

Error tests compare whole messages where practical: the exact text (file, line, key path, what
was expected, the suggestion) is the module's contract with users reading cron mail.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from crawler import urllist
from jobs.config import (
    MAX_ALIAS_NODES,
    MAX_JOB_BYTES,
    CrawlConfig,
    HostOverride,
    InvalidDurationError,
    JobConfig,
    JobFileError,
    OllamaConfig,
    OllamaHost,
    OutputConfig,
    SelectionConfig,
    job_json_schema,
    load_job,
    parse_duration,
    parse_job,
)
from jobs.errors import ConfigError, ExitCode

REPO = Path(__file__).resolve().parents[2]

# Lines 1-4 of most test jobs; the key under test then starts on line 5.
BASE = "name: j\nurls: [https://example.org/]\nquestions:\n  - What?\n"


def error_of(text: str, source: str = "job.yaml") -> str:
    """The one-line message parse_job raises for ``text``."""
    with pytest.raises(ConfigError) as info:
        parse_job(text, source)
    message = str(info.value)
    assert "\n" not in message
    return message


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# Valid jobs


def test_minimal_job_gets_every_default(tmp_path: Path) -> None:
    job = load_job(write(tmp_path / "job.yaml", BASE))

    assert job.name == "j"
    assert job.urls == ["https://example.org/"]
    assert job.urls_file is None
    assert job.crawl.depth == 0
    assert job.crawl.max_pages == 500
    assert job.crawl.delay == 1.0
    assert job.crawl.follow == "same_host"
    assert job.crawl.allow == [] and job.crawl.deny == []
    assert job.crawl.user_agent_contact is None
    assert job.crawl.obey_robots is True
    assert job.crawl.max_crawl_delay == 30
    assert job.crawl.allow_private_networks is False
    assert job.crawl.recrawl_after is None
    assert job.crawl.timeout == 30
    assert job.crawl.max_bytes == 10_485_760
    assert job.crawl.hosts == {}
    assert [(q.id, q.question, q.urls, q.expect, q.url) for q in job.questions] == [("q1", "What?", None, [], None)]
    assert job.model == "llama3.2:3b"
    assert job.embedding_model == "nomic-embed-text"
    assert job.selection == SelectionConfig(method="hybrid", top_k=40, token_budget=3000, retry_wider=True)
    assert job.answerer == "llm"
    assert job.fallback_extractive is True
    assert job.output.dir == tmp_path / "out" / "j"
    assert job.output.formats == ["jsonl", "markdown", "html"]
    assert job.ollama.host is None
    assert job.ollama.timeout == 120
    assert job.ollama.options == {"temperature": 0, "num_ctx": 8192}
    assert job.ollama.keep_alive == "10m"
    assert job.ollama.parallel == 1
    assert job.ollama.max_attempts == 4


def test_load_records_source_path_and_sha256_of_the_bytes(tmp_path: Path) -> None:
    path = write(tmp_path / "job.yaml", BASE + "# a comment changes the hash\n")
    job = load_job(path)
    assert job.source_path == path.absolute()
    assert job.file_hash == hashlib.sha256(path.read_bytes()).hexdigest()
    assert job.base_dir == tmp_path


def test_parse_job_hashes_the_text_and_has_no_source_path() -> None:
    job = parse_job(BASE)
    assert job.source_path is None
    assert job.file_hash == hashlib.sha256(BASE.encode()).hexdigest()


def test_example_job_loads_with_its_documented_values() -> None:
    job = load_job(REPO / "configs" / "example.yaml")
    assert job.name == "release-notes"
    assert [q.id for q in job.questions] == ["q1", "aot"]
    assert job.questions[1].expect == ["ahead-of-time"]
    assert job.crawl.hosts == {"docs.example.org": HostOverride(delay=2.0, concurrency=1)}
    assert job.crawl.recrawl_after == timedelta(hours=24)
    assert job.output.dir == REPO / "configs" / "out" / "release-notes"


def test_example_job_names_every_key_of_every_model() -> None:
    # The example is meant to show every setting; a field added without documenting it fails here.
    text = (REPO / "configs" / "example.yaml").read_text(encoding="utf-8")
    reference = (REPO / "docs" / "job-reference.md").read_text(encoding="utf-8")
    models = (JobConfig, CrawlConfig, HostOverride, SelectionConfig, OutputConfig, OllamaConfig, OllamaHost)
    for model in models:
        for field in model.model_fields:
            assert f"{field}:" in text, f"{model.__name__}.{field} missing from configs/example.yaml"
            assert f"`{field}`" in reference, f"{model.__name__}.{field} missing from docs/job-reference.md"


def test_question_ids_default_to_position_and_explicit_ids_are_kept() -> None:
    job = parse_job("name: j\nquestions:\n  - A?\n  - id: mine\n    question: B?\n  - C?\n")
    assert [q.id for q in job.questions] == ["q1", "mine", "q3"]
    assert [q.question for q in job.questions] == ["A?", "B?", "C?"]


def test_question_mapping_fields() -> None:
    job = parse_job(
        "name: j\nquestions:\n  - question: '  AOT?  '\n    urls: [https://e.org/a]\n"
        "    expect: [ahead-of-time]\n    url: https://e.org/a\n"
    )
    question = job.questions[0]
    assert (question.question, question.urls, question.expect, question.url) == (
        "AOT?",
        ["https://e.org/a"],
        ["ahead-of-time"],
        "https://e.org/a",
    )


def test_urls_file_resolves_relative_to_the_job_file_not_the_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    write(jobs / "urls.txt", "# comment\nhttps://a.org/\n\nhttps://b.org/x  # trailing comment\nhttps://a.org/\n")
    write(jobs / "job.yaml", "name: j\nurls: [https://c.org/]\nurls_file: urls.txt\nquestions: [x]\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    job = load_job(Path("..") / "jobs" / "job.yaml")
    assert job.urls_file == (elsewhere / ".." / "jobs" / "urls.txt")
    assert job.urls_file.resolve() == (jobs / "urls.txt").resolve()
    # Inline first, then the file; comments, blank lines and repeats dropped.
    assert job.require_urls() == ["https://c.org/", "https://a.org/", "https://b.org/x"]


def test_output_dir_substitutes_name_relative_to_job_folder(tmp_path: Path) -> None:
    job = load_job(write(tmp_path / "job.yaml", BASE + "output:\n  dir: results/{name}-run\n"))
    assert job.output.dir == tmp_path / "results" / "j-run"
    inside = load_job(write(tmp_path / "in.yaml", BASE + "output:\n  dir: a/../b/./{name}\n"))
    assert inside.output.dir == tmp_path / "b" / "j"


@pytest.mark.parametrize(
    ("written", "problem"),
    [
        ("../../../../etc/webqa-x", "inside the job file's folder, got '../../../../etc/webqa-x', which leaves it"),
        ("out/../../x", "inside the job file's folder, got 'out/../../x', which leaves it"),
        ("/etc/webqa-x", "relative to the job file's folder, got '/etc/webqa-x'"),
        ("~/webqa-x", "relative to the job file's folder, got '~/webqa-x'"),
        ("~root/{name}", "relative to the job file's folder, got '~root/{name}'"),
    ],
)
def test_output_dir_must_stay_inside_the_job_folder(tmp_path: Path, written: str, problem: str) -> None:
    # As root, "../../../../etc/webqa-x" used to create /etc/webqa-x/run-N/.
    with pytest.raises(ConfigError) as info:
        load_job(write(tmp_path / "job.yaml", BASE + f"output:\n  dir: '{written}'\n"))
    assert str(info.value) == (
        f"{tmp_path / 'job.yaml'}:6: output.dir: expected a folder {problem}; "
        "to write elsewhere, remove output.dir and run with --out DIR"
    )


def test_output_dir_may_not_leave_the_job_folder_through_a_symbolic_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "link").symlink_to(outside)
    with pytest.raises(ConfigError, match="leaves it through a symbolic link"):
        load_job(write(tmp_path / "jobs" / "job.yaml", BASE + "output:\n  dir: link/x\n"))
    (tmp_path / "jobs" / "inside").mkdir()
    (tmp_path / "jobs" / "inner").symlink_to(tmp_path / "jobs" / "inside")
    job = load_job(write(tmp_path / "jobs" / "job.yaml", BASE + "output:\n  dir: inner/x\n"))
    assert job.output.dir == tmp_path / "jobs" / "inner" / "x"


def test_shipped_jobs_still_load() -> None:
    example = load_job(REPO / "configs" / "example.yaml")
    assert REPO / "configs" in example.output.dir.parents
    # The demo job is a template: scripts/demo.sh fills in the port of its local site.
    demo = (REPO / "demo" / "job.yaml").read_text(encoding="utf-8").replace("__PORT__", "8765")
    assert REPO / "demo" in parse_job(demo, "demo/job.yaml", base_dir=REPO / "demo").output.dir.parents


def test_parse_job_resolves_against_given_base_dir_or_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = BASE + "urls_file: u.txt\n"
    assert parse_job(text, base_dir=tmp_path).urls_file == tmp_path / "u.txt"
    monkeypatch.chdir(tmp_path)
    assert parse_job(text).urls_file == tmp_path / "u.txt"


def test_empty_sections_and_keys_mean_defaults() -> None:
    job = parse_job(BASE + "crawl:\nselection:\n  top_k:\nollama:\n")
    assert job.crawl == CrawlConfig()
    assert job.selection.top_k == 40
    assert job.ollama.options == {"temperature": 0, "num_ctx": 8192}


def test_ollama_options_merge_over_defaults_and_keep_alive_forms() -> None:
    job = parse_job(BASE + "ollama:\n  options: {temperature: 0.2, seed: 7}\n  keep_alive: 1h30m\n")
    assert job.ollama.options == {"temperature": 0.2, "num_ctx": 8192, "seed": 7}
    assert job.ollama.keep_alive == "1h30m"
    assert parse_job(BASE + "ollama:\n  keep_alive: -1\n").ollama.keep_alive == -1
    # An unknown option far from any known one is passed through (Ollama adds options).
    assert parse_job(BASE + "ollama:\n  options: {brand_new_knob: 1}\n").ollama.options["brand_new_knob"] == 1


def test_ollama_resolved_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    assert OllamaConfig().resolved_host == "http://localhost:11434"
    monkeypatch.setenv("OLLAMA_HOST", "0.0.0.0")
    assert OllamaConfig().resolved_host == "http://0.0.0.0:11434"
    monkeypatch.setenv("OLLAMA_HOST", "gpu-box:8080")
    assert OllamaConfig().resolved_host == "http://gpu-box:8080"
    assert OllamaConfig(host="https://llm.example.org/").resolved_host == "https://llm.example.org"


def test_hosts_are_lower_cased_and_formats_deduplicated() -> None:
    job = parse_job(BASE + "crawl:\n  hosts:\n    Docs.Example.ORG: {delay: 3}\noutput:\n  formats: [csv, csv, jsonl]\n")
    assert job.crawl.hosts == {"docs.example.org": HostOverride(delay=3.0)}
    assert job.output.formats == ["csv", "jsonl"]


def test_anchors_aliases_merge_keys_and_x_keys_work() -> None:
    job = parse_job(
        "x-common: &common {delay: 2, depth: 5}\n"
        "name: j\n"
        "urls: &u [https://a.org/]\n"
        "questions:\n  - {question: 'A?', urls: *u}\n"
        "crawl:\n  <<: *common\n  depth: 1\n"
    )
    assert (job.crawl.delay, job.crawl.depth) == (2.0, 1)  # explicit keys win over merged ones
    assert job.questions[0].urls == ["https://a.org/"]


def test_models_are_frozen() -> None:
    job = parse_job(BASE)
    with pytest.raises(ValidationError):
        job.name = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        job.crawl.delay = 5  # type: ignore[misc]


def test_line_of_and_url_entries_name_job_lines() -> None:
    job = parse_job("name: j\nurls:\n  - https://a.org/\n  - https://b.org/\nquestions: [x]\n", "job.yaml")
    assert job.line_of("urls", 1) == 4
    assert job.url_entries() == [("job.yaml:3", "https://a.org/"), ("job.yaml:4", "https://b.org/")]


# ---------------------------------------------------------------------------------------------
# Durations


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("24h", timedelta(hours=24)),
        ("30m", timedelta(minutes=30)),
        ("7d", timedelta(days=7)),
        ("90s", timedelta(seconds=90)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2w", timedelta(weeks=2)),
        ("1d 12h", timedelta(days=1, hours=12)),
        ("0s", timedelta(0)),
        ("10M", timedelta(minutes=10)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "24", "1.5h", "30m1h", "1h1h", "1 day", "h", "-5m", "99999999999d"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(InvalidDurationError) as info:
        parse_duration(text)
    assert isinstance(info.value, ConfigError) and isinstance(info.value, ValueError)


def test_recrawl_after_in_a_job() -> None:
    assert parse_job(BASE + "crawl:\n  recrawl_after: 1h30m\n").crawl.recrawl_after == timedelta(minutes=90)
    assert error_of(BASE + "crawl:\n  recrawl_after: 1 day\n") == (
        "job.yaml:6: crawl.recrawl_after: expected a duration like '24h', '30m', '7d', '90s' or '1h30m', got '1 day'"
    )
    assert error_of(BASE + "crawl:\n  recrawl_after: 3600\n").endswith("got 3600; add a unit, e.g. '3600s'")


# ---------------------------------------------------------------------------------------------
# Files


def test_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_job("jobs/x.yaml")
    assert str(info.value) == "jobs/x.yaml: no such file; check the path"
    assert info.value.exit_code == ExitCode.USAGE


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_job(tmp_path)
    assert str(info.value) == f"{tmp_path}: is a folder, not a job file; give the path of the file"


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "job.yaml", BASE)

    def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    # Simulated: chmod 000 does not stop root, and tests may run as root in containers. The file is
    # opened with os.open (non-blocking, so that a FIFO cannot hang the read).
    monkeypatch.setattr(urllist.os, "open", denied)
    with pytest.raises(ConfigError) as info:
        load_job(path)
    assert str(info.value) == f"{path}: cannot read the job file (permission denied); check its permissions"


def test_file_over_size_limit(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * (MAX_JOB_BYTES + 1))
    with pytest.raises(ConfigError) as info:
        load_job(path)
    assert str(info.value) == (
        f"{path}: job file is larger than 1 MiB; a job file holds settings only; put long URL lists in urls_file"
    )
    assert "larger than 1 MiB" in error_of("#" * (MAX_JOB_BYTES + 1))


def test_file_exactly_at_size_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "edge.yaml"
    path.write_bytes(BASE.encode() + b"#" * (MAX_JOB_BYTES - len(BASE)))
    assert load_job(path).name == "j"


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(b"name: j\nquestions:\n  - caf\xe9?\n")
    with pytest.raises(ConfigError) as info:
        load_job(path)
    assert str(info.value) == f"{path}:3: not UTF-8 text; save the file as UTF-8"


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + BASE.encode())
    assert load_job(path).name == "j"


# ---------------------------------------------------------------------------------------------
# YAML-level errors


def test_yaml_syntax_error_has_line_and_column() -> None:
    assert error_of("name: j\nquestions: [x]\nmodel: a: b\n") == (
        "job.yaml:3:9: YAML syntax error: mapping values are not allowed here; "
        "check the indentation, or quote a value that contains ': '"
    )


def test_yaml_tab_indentation() -> None:
    assert error_of("name: j\n\tquestions: []\n").startswith(
        "job.yaml:2:1: YAML syntax error: found character '\\t' that cannot start any token; indent with spaces"
    )


def test_yaml_unclosed_quote_names_where_it_started() -> None:
    message = error_of("name: 'j\nurls: []\n")
    assert message.startswith("job.yaml:3:1: YAML syntax error: found unexpected end of stream")
    assert "(while scanning a quoted scalar on line 1)" in message
    assert message.endswith("a quote or bracket is not closed")


def test_yaml_multiple_documents() -> None:
    assert error_of(BASE + "---\nname: k\n").endswith("a job file is one document; remove the extra '---'")


def test_control_character() -> None:
    assert error_of("name: j\nmodel: a\x07\n") == (
        "job.yaml:2: YAML syntax error: unacceptable character #x0007; remove control characters"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("# only a comment\n", "job.yaml: the job file is empty; start from configs/example.yaml"),
        ("- a\n- b\n", "job.yaml:1: the top level must be a mapping of keys (name:, urls:, questions:, …), got a list"),
        ("\nhello\n", "job.yaml:2: the top level must be a mapping of keys (name:, urls:, questions:, …), got 'hello'"),
    ],
)
def test_top_level_must_be_a_mapping(text: str, expected: str) -> None:
    assert error_of(text) == expected


def test_duplicate_key() -> None:
    assert error_of("name: j\nquestions: [x]\nname: k\n") == "job.yaml:3: name: duplicate key (first on line 1); keep only one"


def test_unsafe_tags_are_rejected() -> None:
    assert error_of(BASE + "model: !!python/object/apply:os.system ['true']\n") == (
        "job.yaml:5: model: YAML tag !!python/object/apply:os.system is not supported in job files; remove it"
    )
    assert error_of(BASE + "crawl: !!set {a}\n") == "job.yaml:5: crawl: YAML tag !!set is not supported in job files; remove it"


def _billion_laughs() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    previous = "a"
    for name in "bcdefghi":  # 9 levels: 9**9 ≈ 387 million strings if expanded
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        previous = name
    return "\n".join(lines) + "\n"


# Expanding the bomb would take minutes and gigabytes; the timeout turns a hang into a failure
# without making the test depend on the machine's speed.
@pytest.mark.timeout(20)
def test_billion_laughs_is_rejected_quickly() -> None:
    message = error_of(_billion_laughs())
    # Named at the first line where aliases blow the budget (level e, line 5), not at the anchor.
    assert message == (
        f"job.yaml:5: e[0]: YAML aliases expand to more than {MAX_ALIAS_NODES} values; "
        "use anchors (&) and aliases (*) only for small repeated parts"
    )


@pytest.mark.timeout(20)
def test_merge_key_bomb_is_rejected_quickly() -> None:
    lines = ["a: &a {k0: 1, k1: 1, k2: 1, k3: 1, k4: 1, k5: 1, k6: 1, k7: 1, k8: 1}"]
    previous = "a"
    for name in "bcdefghijklmnopqrstuvwxyz":
        lines.append(f"{name}: &{name} {{<<: [" + ", ".join([f"*{previous}"] * 4) + "]}")
        previous = name
    message = error_of("\n".join(lines) + "\n")
    assert "YAML aliases expand to more than" in message


def test_recursive_alias() -> None:
    assert error_of("name: j\nquestions: &q [*q]\n") == (
        "job.yaml:2: questions[0]: recursive YAML alias (a value contains itself); remove the alias"
    )


@pytest.mark.timeout(20)
def test_deep_nesting() -> None:
    assert error_of("[" * 100_000) == "job.yaml: YAML nested too deeply; a job file is much flatter"
    assert error_of("a: " + "[" * 70 + "]" * 70 + "\n").endswith("nested more than 64 levels deep; a job file is much flatter")


# ---------------------------------------------------------------------------------------------
# Key errors


def test_unknown_key_with_did_you_mean() -> None:
    assert error_of(BASE + "selection:\n  metod: bm25\n") == "job.yaml:6: selection.metod: unknown key; did you mean 'method'?"


def test_unknown_key_in_the_wrong_section() -> None:
    assert error_of(BASE + "delay: 3\n") == "job.yaml:5: delay: unknown key at the top level; 'delay' belongs under 'crawl:'"


def test_unknown_key_without_close_match_lists_allowed_keys() -> None:
    assert error_of(BASE + "selection:\n  zzz: 1\n") == (
        "job.yaml:6: selection.zzz: unknown key; allowed keys: method, top_k, token_budget, retry_wider, min_similarity, "
        "query_prefix, document_prefix, approximate, embedding_first, rerank, second_stage, passages"
    )


def test_unknown_key_in_question_and_host_override() -> None:
    assert error_of("name: j\nquestions:\n  - question: x\n    expected: [a]\n") == (
        "job.yaml:4: questions[0].expected: unknown key; did you mean 'expect'?"
    )
    assert error_of(BASE + "crawl:\n  hosts:\n    docs.example.org: {dealy: 2}\n") == (
        "job.yaml:7: crawl.hosts['docs.example.org'].dealy: unknown key; did you mean 'delay'?"
    )


def test_runtime_only_attributes_cannot_be_set_from_the_file() -> None:
    assert error_of(BASE + "file_hash: abc\n").startswith("job.yaml:5: file_hash: unknown key")


def test_ollama_option_typo() -> None:
    assert error_of(BASE + "ollama:\n  options:\n    num_ctx: 4096\n    temprature: 0.2\n") == (
        "job.yaml:8: ollama.options.temprature: unknown Ollama option; did you mean 'temperature'?"
    )


# ---------------------------------------------------------------------------------------------
# Value errors


def test_wrong_type_names_expectation_and_value() -> None:
    assert error_of(BASE + "crawl:\n  delay: fast\n") == "job.yaml:6: crawl.delay: expected a number ≥ 0, got 'fast'"


def test_quoted_number_suggests_removing_quotes() -> None:
    assert error_of(BASE + "crawl:\n  delay: '2'\n") == "job.yaml:6: crawl.delay: expected a number ≥ 0, got '2'; remove the quotes"


@pytest.mark.parametrize("snippet", [
    "selection:\n  second_stage: {keyword_gate: '0.3'}\n", "selection:\n  second_stage: {weight: '0.5'}\n",
    "selection:\n  second_stage: {candidates: '40'}\n", "selection:\n  passages: {words: '120'}\n",
    "selection:\n  passages: {candidates: '10'}\n", "selection:\n  rerank: {candidates: '20'}\n",
    "selection:\n  rerank: {excerpt_chars: '600'}\n", "selection:\n  min_similarity: '0.3'\n",
    "notify:\n  command: [x]\n  timeout: '5'\n",
])
def test_a_quoted_number_is_refused_in_every_section(snippet: str) -> None:
    # Every number of the job is read one way: a quoted one is refused with the fix, never taken as the number.
    assert error_of(BASE + snippet).endswith("; remove the quotes")


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        ("crawl:\n  delay: -1\n", "job.yaml:6: crawl.delay: expected a number ≥ 0, got -1"),
        ("crawl:\n  delay: .nan\n", "job.yaml:6: crawl.delay: expected a number ≥ 0, got nan"),
        ("crawl:\n  timeout: 0\n", "job.yaml:6: crawl.timeout: expected a number > 0, got 0"),
        ("crawl:\n  depth: 1.5\n", "job.yaml:6: crawl.depth: expected a whole number ≥ 0, got 1.5; use a whole number"),
        ("selection:\n  top_k: true\n", "job.yaml:6: selection.top_k: expected a whole number ≥ 1, got true"),
        ("crawl:\n  obey_robots: 'no'\n", "job.yaml:6: crawl.obey_robots: expected true or false, got 'no'; remove the quotes"),
        ("crawl:\n  obey_robots: 1\n", "job.yaml:6: crawl.obey_robots: expected true or false, got 1; write true or false"),
        ("crawl: [1]\n", "job.yaml:5: crawl: expected a mapping (key: value lines), got a list"),
        (
            "output:\n  formats: csv\n",
            "job.yaml:6: output.formats: expected a list, got 'csv'; write it as a list: [item, ...] or '- item' lines",
        ),
        (
            "output:\n  formats: []\n",
            "job.yaml:6: output.formats: expected a non-empty list, got an empty list; list at least one of jsonl, markdown, html, csv",
        ),
        ("output:\n  dir: out/{date}\n", "job.yaml:6: output.dir: unknown placeholder {date} in 'out/{date}'; only {name} is replaced"),
        (
            "crawl:\n  allow: ['[abc']\n",
            "job.yaml:6: crawl.allow[0]: not a valid regular expression: unterminated character set at position 0; "
            "escape special characters like . ? ( with a backslash",
        ),
        (
            "crawl:\n  hosts:\n    docs.example.org:\n      delay: slow\n",
            "job.yaml:8: crawl.hosts['docs.example.org'].delay: expected a number ≥ 0, got 'slow'",
        ),
        (
            "crawl:\n  hosts:\n    https://docs.example.org/x: {delay: 2}\n",
            "job.yaml:7: crawl.hosts['https://docs.example.org/x']: expected a host name like 'docs.example.org', "
            "got 'https://docs.example.org/x'; use just the host name, e.g. 'docs.example.org'",
        ),
        (
            "ollama:\n  keep_alive: forever\n",
            "job.yaml:6: ollama.keep_alive: expected a duration like '10m', '1h' or a number of seconds (-1 = forever), got 'forever'",
        ),
        ("ollama:\n  host: localhost\n", "job.yaml:6: ollama.host: expected a URL like 'http://localhost:11434', got 'localhost': write http:// or https:// before the host"),
        ("model: ''\n", "job.yaml:5: model: expected a non-empty string, got ''"),
    ],
)
def test_bad_values(snippet: str, expected: str) -> None:
    assert error_of(BASE + snippet) == expected


def test_bad_enum_lists_allowed_values_and_suggests() -> None:
    assert error_of(BASE + "selection:\n  method: bm26\n") == (
        "job.yaml:6: selection.method: expected one of 'keyword', 'bm25', 'embedding', 'hybrid', got 'bm26'; did you mean 'bm25'?"
    )
    assert error_of(BASE + "answerer: LLM\n") == (
        "job.yaml:5: answerer: expected one of 'llm', 'extractive', got 'LLM'; did you mean 'llm'?"
    )
    assert error_of(BASE + "output:\n  formats: [jsonl, pdf]\n") == (
        "job.yaml:6: output.formats[1]: expected one of 'jsonl', 'markdown', 'html', 'csv', got 'pdf'"
    )


def test_bad_name() -> None:
    assert error_of("name: my job!\nquestions: [x]\n") == (
        "job.yaml:1: name: expected letters, digits, '.', '_' or '-' only, got 'my job!'; try 'my-job'"
    )
    assert error_of("name: '..'\nquestions: [x]\n").startswith("job.yaml:1: name: expected letters")
    assert error_of("name: 2024\nquestions: [x]\n") == "job.yaml:1: name: expected a string, got 2024; put the value in quotes"
    assert error_of("name: yes\nquestions: [x]\n") == (
        "job.yaml:1: name: expected a string, got true; YAML reads yes/no/on/off/true/false as a boolean: put the text in quotes"
    )
    assert error_of("questions: [x]\n") == "job.yaml:1: name: required key is missing; add e.g. 'name: my-job' at the top level"


def test_only_the_earliest_problem_is_shown_with_a_count() -> None:
    assert error_of("name: j\nquestions: [x]\ncrawl:\n  delay: x\n  depth: -1\nmodel: 3\n") == (
        "job.yaml:4: crawl.delay: expected a number ≥ 0, got 'x' (and 2 more problems)"
    )


# ---------------------------------------------------------------------------------------------
# Questions


def test_empty_question_list() -> None:
    assert error_of("name: j\nquestions: []\n") == (
        "job.yaml:2: questions: expected a non-empty list, got an empty list; add at least one question, e.g. '- What changed in 2.0?'"
    )


def test_missing_questions() -> None:
    assert error_of("name: j\nurls: [https://a.org/]\n") == (
        "job.yaml:1: questions: required key is missing; add a 'questions:' list with at least one question"
    )


def test_question_without_question_key() -> None:
    assert error_of("name: j\nquestions:\n  - What?\n  - id: x\n    expect: [a]\n") == (
        "job.yaml:4: questions[1].question: required key is missing; add 'question: <what to ask>' to this item"
    )


def test_empty_string_question() -> None:
    assert error_of("name: j\nquestions:\n  - What?\n  - '  '\n") == "job.yaml:4: questions[1]: expected a non-empty string, got '  '"
    assert error_of("name: j\nquestions:\n  - question: ''\n") == "job.yaml:3: questions[0].question: expected a non-empty string, got ''"


def test_question_of_wrong_type() -> None:
    assert error_of("name: j\nquestions:\n  - 42\n") == (
        "job.yaml:3: questions[0]: expected a question: a string, or a mapping with a 'question:' key, got 42"
    )


def test_duplicate_ids_name_both_lines() -> None:
    assert error_of("name: j\nquestions:\n  - id: a\n    question: x\n  - What\n  - id: a\n    question: y\n") == (
        "job.yaml:6: questions[2].id: duplicate question id 'a' (also on line 3); "
        "give each question its own id (ids default to q1, q2, … by position)"
    )


def test_explicit_id_colliding_with_an_automatic_one() -> None:
    assert error_of("name: j\nquestions:\n  - id: q2\n    question: x\n  - What\n").startswith(
        "job.yaml:5: questions[1]: duplicate question id 'q2' (also on line 3);"
    )


def test_question_urls_must_not_be_empty() -> None:
    assert error_of("name: j\nquestions:\n  - question: x\n    urls: []\n") == (
        "job.yaml:4: questions[0].urls: expected a non-empty list of URLs; remove 'urls:' to search all pages"
    )


# ---------------------------------------------------------------------------------------------
# URLs


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("example.org/docs", "expected an http(s) URL, got 'example.org/docs'; did you mean 'https://example.org/docs'?"),
        ("ftp://example.org/docs", "expected an http(s) URL, got 'ftp://example.org/docs'; only http:// and https:// URLs can be crawled"),
        ("http:///docs", "expected an http(s) URL with a host, got 'http:///docs'; write it as 'http://host/path'"),
        ("https://e.org:99999/", "expected an http(s) URL, got 'https://e.org:99999/'; the port is not a number from 0 to 65535"),
        ("https://u:p@e.org/", "expected an http(s) URL without credentials, got 'https://…@e.org/'; remove 'user:password@'"),
    ],
)
def test_bad_urls_name_the_line(url: str, expected: str) -> None:
    assert error_of(f"name: j\nurls:\n  - https://ok.org/\n  - '{url}'\nquestions: [x]\n") == f"job.yaml:4: urls[1]: {expected}"


@pytest.mark.parametrize(("key", "value", "shown", "reason"), [
    ("host", "http://admin:PASSWORD1#x@127.0.0.1:35563", "@127.0.0.1:35563'",
     "(a '#', '/', '?' or '@' in its user:password must be percent-encoded"),
    ("hosts", "['https://admin:PASS/WORD1@gpu1:1']", "@gpu1:1'", "(a '#', '/', '?' or '@'"),
    ("hosts", "[{url: 'http://admin:PASSWORD1?x@gpu1:1'}]", "@gpu1:1'", "(a '#', '/', '?' or '@'"),
    ("host", "http://u:PASSWORD1@gpu1:99999", "@gpu1:99999'", "(Port out of range 0-65535)"),
    ("host", "u:PASSWORD1@gpu1:11434", "@gpu1:11434'", ": write http:// or https:// before the host"),
])
def test_an_ollama_url_with_a_login_is_shown_without_it_and_says_why(key: str, value: str, shown: str,
                                                                     reason: str) -> None:
    # A password with an unencoded "#", "/" or "?" ends the authority where urlsplit reads it: all before the last
    # "@" is hidden, and the reason is the URL's fault (the port, the scheme), not the password read as a port.
    quoted = value if value.startswith("[") else f"'{value}'"
    message = error_of(f"{BASE}ollama:\n  {key}: {quoted}\n")
    assert f"{shown} {reason}".replace("' :", "':") in message, message
    assert "PASSWORD1" not in message and "PASS/" not in message and "admin" not in message, message


def test_bad_url_in_question_and_contact() -> None:
    assert error_of("name: j\nquestions:\n  - question: x\n    url: mailto:a@b.org\n").startswith(
        "job.yaml:4: questions[0].url: expected an http(s) URL, got 'mailto:a@b.org'"
    )
    assert error_of(BASE + "crawl:\n  user_agent_contact: example.org/bot\n") == (
        "job.yaml:6: crawl.user_agent_contact: expected an http(s) URL, got 'example.org/bot'; "
        "did you mean 'https://example.org/bot'?"
    )


def test_require_urls_without_any(tmp_path: Path) -> None:
    job = load_job(write(tmp_path / "job.yaml", "name: j\nquestions: [x]\n"))
    with pytest.raises(ConfigError) as info:
        job.require_urls()
    assert str(info.value) == f"{tmp_path / 'job.yaml'}: no URLs to crawl; add a 'urls:' list or a 'urls_file:', or run with --no-crawl"


def test_require_urls_with_missing_urls_file(tmp_path: Path) -> None:
    job = load_job(write(tmp_path / "job.yaml", "name: j\nquestions: [x]\nurls_file: urls.txt\n"))
    with pytest.raises(ConfigError) as info:
        job.require_urls()
    assert str(info.value) == (
        f"{tmp_path / 'urls.txt'}: no such file (urls_file on line 3 of {tmp_path / 'job.yaml'}); check the path"
    )


def test_require_urls_skips_a_bad_line_of_the_urls_file(tmp_path: Path) -> None:
    # One behaviour with `webqa crawl -i` (docs/job-reference.md): the crawl reports the line and skips it.
    write(tmp_path / "urls.txt", "https://a.org/\n# fine\nftp://b.org/\n")
    job = load_job(write(tmp_path / "job.yaml", "name: j\nquestions: [x]\nurls_file: urls.txt\n"))
    assert job.require_urls() == ["https://a.org/"]


def test_require_urls_refuses_a_urls_file_without_a_valid_url(tmp_path: Path) -> None:
    write(tmp_path / "urls.txt", "# only comments\nftp://b.org/\nnot a url\n")
    job = load_job(write(tmp_path / "job.yaml", "name: j\nquestions: [x]\nurls_file: urls.txt\n"))
    with pytest.raises(ConfigError) as info:
        job.require_urls()
    assert str(info.value) == (
        f"{tmp_path / 'urls.txt'}:2: 'ftp://b.org/': unsupported scheme 'ftp'; only http and https are fetched "
        f"(and 1 more); the file lists no valid URL (urls_file on line 3 of {tmp_path / 'job.yaml'})"
    )
    assert info.value.exit_code == ExitCode.USAGE
    write(tmp_path / "urls.txt", "# nothing yet\n")
    with pytest.raises(ConfigError, match=r"urls\.txt: lists no URLs \(urls_file on line 3 of .*\); add one"):
        job.require_urls()


def test_job_file_error_attributes() -> None:
    with pytest.raises(JobFileError) as info:
        parse_job(BASE + "selection:\n  metod: bm25\n", "job.yaml")
    assert (info.value.file, info.value.line, info.value.column, info.value.key) == ("job.yaml", 6, None, "selection.metod")


# ---------------------------------------------------------------------------------------------
# Schema


def test_json_schema_for_editors() -> None:
    schema = job_json_schema()
    assert isinstance(schema, dict)
    assert set(schema["properties"]) == set(JobConfig.model_fields)
    assert schema["required"] == ["name", "questions"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["questions"]["minItems"] == 1
    # A question may be written as a plain string, and its id may be left out.
    items = schema["properties"]["questions"]["items"]["anyOf"]
    assert {"type": "string"} in items
    assert schema["$defs"]["Question"]["required"] == ["question"]
    json.dumps(schema)  # serialisable as is


# ---------------------------------------------------------------------------------------------
# Input files: bounded, never blocking, never echoed (issue 13 rows 5 and 8)

SHADOW = "root:$6$saltsalt$0123456789abcdefABCDEF:19000:0:99999:7:::\ndaemon:*:20228:0:99999:7:::\n"


@pytest.mark.timeout(30)  # the old code blocked forever on the FIFO
def test_urls_file_that_is_a_fifo_or_a_device_is_refused_without_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "urls.fifo"
    os.mkfifo(fifo)  # without a writer, reading it blocks forever (while holding the run lock)
    for target, kind in ((fifo, "a named pipe (FIFO)"), (Path("/dev/zero"), "a character device")):
        job = load_job(write(tmp_path / "job.yaml", f"name: j\nquestions: [x]\nurls_file: {target}\n"))
        with pytest.raises(ConfigError) as info:
            job.require_urls()  # returns at once: the kind is checked before any open or read
        assert str(info.value) == (
            f"{target}: is {kind} (urls_file on line 3 of {tmp_path / 'job.yaml'}), "
            "expected a file with one URL per line"
        )


@pytest.mark.timeout(30)  # the old code blocked forever on the FIFO
def test_job_file_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError) as info:
        load_job(fifo)
    assert str(info.value) == f"{fifo}: is a named pipe (FIFO), not a regular file; give the path of a job file"


def test_urls_file_over_16_mib_is_refused(tmp_path: Path) -> None:
    with (tmp_path / "urls.txt").open("wb") as handle:
        handle.truncate(16 * 1024 * 1024 + 1)
    job = load_job(write(tmp_path / "job.yaml", "name: j\nquestions: [x]\nurls_file: urls.txt\n"))
    with pytest.raises(ConfigError, match=r"urls\.txt: URL file is larger than 16 MiB; split the URLs"):
        job.require_urls()


def test_errors_about_a_secret_file_do_not_quote_it(tmp_path: Path) -> None:
    write(tmp_path / "shadow", SHADOW)
    job = load_job(write(tmp_path / "job.yaml", "name: j\nquestions: [x]\nurls_file: shadow\n"))
    with pytest.raises(ConfigError) as info:
        job.require_urls()
    assert str(info.value) == (
        f"{tmp_path / 'shadow'}:1: 'root…': unsupported scheme 'root'; only http and https are fetched (and 1 more); "
        f"the file lists no valid URL (urls_file on line 3 of {tmp_path / 'job.yaml'})"
    )
    # The file given as the job file itself: one line naming it, without its content.
    with pytest.raises(ConfigError) as info:
        load_job(tmp_path / "shadow")
    assert "$6$" not in str(info.value) and "20228" not in str(info.value) and "0123456789abcdef" not in str(info.value)
    assert str(info.value).startswith(f"{tmp_path / 'shadow'}:1:")


def test_errors_about_proc_environ_do_not_quote_the_environment(tmp_path: Path) -> None:
    environ = Path("/proc/self/environ")
    if not environ.is_file():
        pytest.skip("no /proc/self/environ here")
    job = load_job(write(tmp_path / "job.yaml", f"name: j\nquestions: [x]\nurls_file: {environ}\n"))
    with pytest.raises(ConfigError) as info:
        job.require_urls()
    message = str(info.value)
    assert message.startswith(f"{environ}:1: '")
    quoted = message.split(": ", 2)[1]
    assert "=" not in quoted and len(quoted) <= 44, quoted  # a name at most, never a value
