"""Fake-Ollama chat responders for the end-to-end tests of new page kinds (PDFs, duplicates, sitemaps)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.fake_ollama import user_prompt
from tests.support.run import prompt_sources


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
