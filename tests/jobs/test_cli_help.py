"""`webqa --help` and `webqa COMMAND --help`: exit 0 and every option is documented."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from jobs.cli import build_parser
from tests.support.run import WEBQA



def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


# Every subcommand the parser has, so a new one is covered as soon as it is added.
COMMANDS = tuple(_subparsers())


def _help(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*WEBQA, *args, "--help"], capture_output=True, text=True, timeout=60,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def test_the_core_commands_exist() -> None:
    assert {"crawl", "run", "ask", "explain"} <= set(COMMANDS)


@pytest.mark.e2e
def test_top_level_help() -> None:
    done = _help()
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("usage: webqa")
    for command in COMMANDS:
        assert command in done.stdout
    for option in ("--verbose", "--quiet"):
        assert option in done.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("command", COMMANDS)
def test_command_help_mentions_every_option(command: str) -> None:
    done = _help(command)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.startswith(f"usage: webqa {command}")
    options = [s for a in _subparsers()[command]._actions for s in a.option_strings]
    for option in options:
        assert option in done.stdout, f"{command} --help does not mention {option}"


EXPECTED = {
    "crawl": ("--input", "--db", "--depth", "--max-pages", "--delay", "--allow", "--deny", "--contact",
              "--ignore-robots", "--workers"),
    "run": ("--db", "--no-crawl", "--refresh", "--out", "--dry-run", "--answerer", "--wait"),
    "ask": ("--url", "--db", "--method", "--top-k", "--budget", "--model", "--embedding-model", "--answerer",
            "--no-retry", "--json", "--dry-run"),
    "explain": ("--db", "--no-prompt"),
}


@pytest.mark.e2e
@pytest.mark.parametrize("command", COMMANDS)
def test_command_help_lists_the_documented_options(command: str) -> None:
    out = _help(command).stdout
    for option in EXPECTED.get(command, ()):
        assert option in out
    if command == "ask":
        assert "keyword" in out and "bm25" in out and "embedding" in out and "hybrid" in out


@pytest.mark.e2e
def test_no_command_prints_usage_and_exits_2() -> None:
    done = subprocess.run(WEBQA, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "usage: webqa" in done.stderr


@pytest.mark.e2e
def test_committed_job_schema_matches_the_models() -> None:
    # configs/job.schema.json is what editors read; it must not drift from the pydantic models.
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    printed = subprocess.run([sys.executable, "-m", "jobs.cli", "schema"], cwd=repo, capture_output=True,
                             text=True, timeout=60, check=True).stdout
    assert json.loads(printed) == json.loads((repo / "configs" / "job.schema.json").read_text(encoding="utf-8"))
    assert "questions" in json.loads(printed)["properties"]


@pytest.mark.e2e
@pytest.mark.parametrize("command", COMMANDS)
def test_command_help_lists_global_options_last_in_their_own_section(command: str) -> None:
    out = _help(command).stdout
    own, sep, global_part = out.partition("global options (also accepted before COMMAND):")
    assert sep, out
    for option in ("--verbose", "--quiet", "--log-file"):
        assert option in global_part and option not in own.split("options:", 1)[-1]


@pytest.mark.e2e
def test_version_is_in_the_top_level_help() -> None:
    assert "--version" in _help().stdout


# --------------------------------------------------------------------------------------------
# --help and README say the same (issue 24, item 5)

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
GLOBAL_OPTIONS = {"-h", "--help", "-v", "--verbose", "-q", "--quiet", "--log-file"}


def readme_entry(command: str) -> str:
    """The README's bullet for ``webqa COMMAND`` under "Using it": its usage and the lines that follow it."""
    match = re.search(rf"^- `webqa {command}\b.*?(?=^- |^\S|\Z)", README, re.M | re.S)
    assert match, f"README has no `webqa {command}` entry under Using it"
    return match.group(0)


@pytest.mark.parametrize("command", [c for c in COMMANDS if c not in ("schema",)])
def test_readme_names_every_option_and_no_other(command: str) -> None:
    options = {s for a in _subparsers()[command]._actions for s in a.option_strings} - GLOBAL_OPTIONS
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-[a-zA-Z])\b", readme_entry(command))) - GLOBAL_OPTIONS
    assert named == options, f"README's `webqa {command}` names {sorted(named - options)} that --help lacks, and " \
                             f"lacks {sorted(options - named)}"


@pytest.mark.e2e
def test_resume_help_says_what_readme_says() -> None:
    """--help said "no crawl" while README (and the code) fetch what the stopped crawl had not fetched."""
    options = _help("run").stdout.split("\noptions:", 1)[1]
    resume = " ".join(options.split("\n  --resume", 1)[1].split("\n  --", 1)[0].split())
    assert "no crawl" not in resume and "fetch the pages it had not fetched" in resume
    assert "fetches only the pages that run had not fetched yet" in " ".join(README.split())
