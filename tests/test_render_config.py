"""crawl.render in the job file: its two written forms, and one line naming file, line and key for a bad one."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.config import parse_job
from jobs.errors import ConfigError

BASE = "name: j\nurls: [https://example.org/]\nquestions:\n  - What?\ncrawl:\n"


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_job(text, "job.yaml")
    assert "\n" not in str(info.value)
    return str(info.value)


def test_every_page_some_pages_or_none(tmp_path: Path) -> None:
    assert parse_job(BASE + "  render: js\n", "job.yaml").crawl.render == "js"
    assert parse_job(BASE + "  render: {js: ['/app/', '\\.spa$']}\n", "job.yaml").crawl.render == ["/app/", r"\.spa$"]
    assert parse_job(BASE + "  render: {js: /app/}\n", "job.yaml").crawl.render == ["/app/"]
    assert parse_job(BASE + "  delay: 1\n", "job.yaml").crawl.render is None


def test_a_bad_render_value_is_one_line_naming_the_key() -> None:
    assert error_of(BASE + "  render: yes\n").startswith("job.yaml:6: crawl.render: expected 'js' (render every page)")
    assert "got true" in error_of(BASE + "  render: yes\n")
    assert "got a mapping with css" in error_of(BASE + "  render: {css: [x]}\n")
    message = error_of(BASE + "  render:\n    js: ['/ok/', '(']\n")
    assert message.startswith("job.yaml:7:") and "crawl.render.js[1]" in message
    assert "'(' is not a valid regex" in message
    assert "one or more regexes" in error_of(BASE + "  render: {js: []}\n")
