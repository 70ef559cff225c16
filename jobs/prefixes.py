"""Task prefixes of embedding models: the text a model expects before a question and before a document.

Retrieval models trained on (query, passage) pairs are asymmetric: their cards ask for an instruction in
front of each side, and without it a question and the passage that answers it land further apart.
nomic-embed-text (the default) wants ``search_query: `` and ``search_document: ``; e5 models ``query: ``
and ``passage: ``; mxbai-embed-large, the bge English models and snowflake-arctic-embed (v1) an
instruction before the query only. Ollama sends the text as given, so webqa adds them.

A document prefix changes every stored vector, so vectors are cached per :func:`vector_space`: the model
with its document prefix. A job that changes the prefix re-embeds its chunks once and keeps the old
vectors beside the new.
"""

from __future__ import annotations

from dataclasses import dataclass

_SEARCH_INSTRUCTION = "Represent this sentence for searching relevant passages: "


@dataclass(frozen=True)
class EmbeddingPrefixes:
    query: str = ""
    document: str = ""


NONE = EmbeddingPrefixes()

# Model name (as Ollama names it, without namespace or tag) → prefixes, from each model's card. Matched by
# the name's start, so "nomic-embed-text:v1.5" and "nomic-embed-text-v2-moe" take the nomic prefixes.
# Longer names first: "snowflake-arctic-embed2" is not "snowflake-arctic-embed".
KNOWN_PREFIXES: tuple[tuple[str, EmbeddingPrefixes], ...] = (
    ("nomic-embed-text", EmbeddingPrefixes("search_query: ", "search_document: ")),
    ("snowflake-arctic-embed2", EmbeddingPrefixes("query: ", "")),
    ("snowflake-arctic-embed", EmbeddingPrefixes(_SEARCH_INSTRUCTION, "")),
    ("mxbai-embed-large", EmbeddingPrefixes(_SEARCH_INSTRUCTION, "")),
    ("bge-large", EmbeddingPrefixes(_SEARCH_INSTRUCTION, "")),
    ("bge-base", EmbeddingPrefixes(_SEARCH_INSTRUCTION, "")),
    ("bge-small", EmbeddingPrefixes(_SEARCH_INSTRUCTION, "")),
    ("multilingual-e5", EmbeddingPrefixes("query: ", "passage: ")),
    ("e5-", EmbeddingPrefixes("query: ", "passage: ")),
)


def model_family(model: str) -> str:
    """``"library/nomic-embed-text:latest"`` → ``"nomic-embed-text"``."""
    return model.rsplit("/", 1)[-1].split(":", 1)[0].strip().lower()


def prefixes_for(model: str, *, query: str | None = None, document: str | None = None) -> EmbeddingPrefixes:
    """The prefixes to use with ``model``: the model's own (none for a model not listed), each replaced
    by ``query`` / ``document`` when given ("" turns one off)."""
    family = model_family(model)
    known = next((p for name, p in KNOWN_PREFIXES if family.startswith(name)), NONE)
    return EmbeddingPrefixes(known.query if query is None else query,
                             known.document if document is None else document)


def vector_space(model: str, prefixes: EmbeddingPrefixes) -> str:
    """The key vectors are cached under: the model, and the document prefix when there is one."""
    return f"{model} + {prefixes.document.strip()!r}" if prefixes.document else model
