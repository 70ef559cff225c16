from __future__ import annotations

import pytest

from jobs.prefixes import EmbeddingPrefixes, model_family, prefixes_for, vector_space


@pytest.mark.parametrize(("model", "query", "document"), [
    ("nomic-embed-text", "search_query: ", "search_document: "),
    ("nomic-embed-text:v1.5", "search_query: ", "search_document: "),
    ("registry.example/library/nomic-embed-text:latest", "search_query: ", "search_document: "),
    ("snowflake-arctic-embed:335m", "Represent this sentence for searching relevant passages: ", ""),
    ("snowflake-arctic-embed2", "query: ", ""),  # not taken for its predecessor
    ("mxbai-embed-large", "Represent this sentence for searching relevant passages: ", ""),
    ("jeffh/intfloat-multilingual-e5-large:f16", "", ""),  # an unknown name is not guessed at
    ("multilingual-e5-small", "query: ", "passage: "),
    ("all-minilm", "", ""),
    ("bge-m3", "", ""),
])
def test_each_model_gets_the_prefixes_its_card_asks_for(model: str, query: str, document: str) -> None:
    assert prefixes_for(model) == EmbeddingPrefixes(query, document)


def test_a_jobs_prefixes_replace_the_models_and_empty_turns_one_off() -> None:
    assert prefixes_for("nomic-embed-text", query="Q: ") == EmbeddingPrefixes("Q: ", "search_document: ")
    assert prefixes_for("nomic-embed-text", document="") == EmbeddingPrefixes("search_query: ", "")
    assert prefixes_for("all-minilm", query="query: ", document="passage: ") == EmbeddingPrefixes("query: ", "passage: ")


def test_vectors_are_kept_apart_by_document_prefix_only() -> None:
    assert model_family("Nomic-Embed-Text:Latest") == "nomic-embed-text"
    assert vector_space("all-minilm", EmbeddingPrefixes()) == "all-minilm"
    assert vector_space("all-minilm", EmbeddingPrefixes(query="q: ")) == "all-minilm"  # queries are not stored
    assert vector_space("nomic-embed-text", prefixes_for("nomic-embed-text")) == "nomic-embed-text + 'search_document:'"
