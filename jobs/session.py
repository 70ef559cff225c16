"""The answering session `webqa run`, `webqa ask` and `webqa eval` share: the store, a selector over it
with whatever Ollama offers, and answerers built from selection settings.

Written once so that the three commands select the same way from the same defaults.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from jobs.answer import AskSettings, QuestionAnswerer
from jobs.errors import NothingToDoError
from jobs.llm import OllamaAccess, OllamaClient
from jobs.prefixes import EmbeddingPrefixes
from jobs.runstore import RunStore
from jobs.select import Selector


@dataclass
class Session:
    store: RunStore
    selector: Selector
    llm: OllamaClient | None

    def answerer(self, settings: AskSettings, *, run_id: int | None = None) -> QuestionAnswerer:
        return QuestionAnswerer(self.store, self.selector, self.llm, settings, run_id=run_id)


@contextmanager
def open_session(db: str | Path, access: OllamaAccess, *, embedding_model: str | None, no_chunks: str,
                 prefixes: EmbeddingPrefixes | None = None, approximate: str | bool = "auto",
                 embedding_first: int = 0) -> Iterator[Session]:
    """Open the database for answering: it must hold chunks (else NothingToDoError(``no_chunks``)), and its
    selection indexes are brought up to date first; embeddings are used when ``access`` has an embedder."""
    store = RunStore.open(db)
    try:
        if store.count_chunks() == 0:
            raise NothingToDoError(no_chunks)
        if store.fts_is_stale():
            store.rebuild_fts()
        selector = Selector(store.conn, embedder=access.embedder,
                            embedding_model=embedding_model if access.embedder else None,
                            ensure_fts=store.load_fts, embedding_unavailable=access.embedding_unavailable,
                            prefixes=prefixes, approximate=_first_stage(approximate),
                            embedding_first=embedding_first)
        yield Session(store, selector, access.llm)
    finally:
        store.close()


def _first_stage(approximate: str | bool) -> bool | None:
    """``selection.approximate`` as the Selector takes it: None by size ('auto', and true as before 'auto'
    existed), True at any size ('always'), False never."""
    return True if approximate == "always" else False if approximate is False else None
