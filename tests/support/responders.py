"""Fake-Ollama chat responders and a quiet `webqa run`, for the end-to-end tests of new page kinds (PDFs,
duplicates, sitemaps)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.fake_ollama import user_prompt
from tests.support.run import prompt_sources, read_jsonl, webqa


def quoting(needle: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A model that answers with the first sentence of its sources holding ``needle``, quoting it; else
    "Not enough information"."""
    def responder(body: dict[str, Any]) -> dict[str, Any]:
        for number, text in sorted(prompt_sources(user_prompt(body)).items()):
            for sentence in text.replace("\n", " ").split(". "):
                if needle in sentence:
                    return {"answer": sentence, "citations": [{"source": number, "quote": sentence}],
                            "confidence": "high"}
        return {"answer": "Not enough information", "citations": [], "confidence": "low"}
    return responder


def run_quietly(tmp_path: Path, job_text: str, host: str | None) -> tuple[Path, Path, list[dict[str, Any]]]:
    """`webqa -q run` of a job written to ``tmp_path``: it must exit 0 printing nothing (cron's clean run).
    Returns the database, the run's folder and its answers.jsonl."""
    job = tmp_path / "job.yaml"
    job.write_text(job_text, encoding="utf-8")
    db, out = tmp_path / "w.duckdb", tmp_path / "out"
    result = webqa("-q", "run", job, "--db", db, "--out", out, host=host, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == "" and result.stderr == "", result.stderr
    (run_dir,) = sorted(out.glob("run-*"))
    return db, run_dir, read_jsonl(run_dir / "answers.jsonl")
