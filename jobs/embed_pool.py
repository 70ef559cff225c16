"""Embeddings spread over every Ollama host that has the embedding model (``ollama.hosts``).

:class:`EmbedPool` stands where one :class:`OllamaClient` stands as the selector's embedder: its
:meth:`EmbedPool.embed` cuts the texts into batches of ``embed_batch``, puts them on a queue shared by
one worker thread per host in use, and returns the vectors in the texts' order, so the caller inserts
them in bulk as with one host. Each request keeps the client's own bounded retries and timeouts. A host
that still fails a batch (unreachable, 5xx, the model gone) is retired for the rest of the run (a log
line then, one notice at the run's end: :func:`retirement_notices`), and its batch goes back on the queue
for another host. When no host is left the
pool raises :class:`LLMUnavailableError`, which selection already answers with bm25.

A request the server rejected (4xx) or a reply of the wrong size is raised at once, as with one host:
another host of the same model would do the same.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Sequence

from jobs.errors import LLMError, LLMUnavailableError, ModelNotFoundError
from jobs.llm import LLMServerError, OllamaClient

__all__ = ["EmbedPool", "embedder_for", "retirement_notices"]

log = logging.getLogger(__name__)

# What retires a host: the host itself failed, so another host may embed the same batch.
_HOST_FAILURES: tuple[type[BaseException], ...] = (LLMUnavailableError, ModelNotFoundError, LLMServerError)


class EmbedPool:
    """The hosts that embed for one run, shared by the question threads; see the module doc."""

    def __init__(self, clients: Sequence[OllamaClient]) -> None:
        if not clients:
            raise ValueError("an EmbedPool needs at least one host")
        self._clients = list(clients)
        self._retired: dict[str, str] = {}  # host URL -> why it was retired
        self._lock = threading.Lock()
        self._turn = itertools.count()  # spreads one-batch calls (a question's vector) over the hosts
        self.embedded: dict[str, int] = {c.host: 0 for c in self._clients}  # texts embedded per host

    @property
    def hosts(self) -> list[str]:
        """The URLs of the hosts still in use, in configured order."""
        with self._lock:
            return [c.host for c in self._clients if c.host not in self._retired]

    @property
    def width(self) -> int:
        """How many hosts embed at once: callers size their slices of windows by it."""
        return max(1, len(self.hosts))

    def retired(self) -> dict[str, str]:
        """Host URL -> why, for every host retired during the run."""
        with self._lock:
            return dict(self._retired)

    def embed(self, texts: Sequence[str], *, model: str | None = None) -> list[list[float]]:
        """One vector per text, in order, the batches spread over the hosts in use (see the module doc)."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string")
        items = list(texts)
        size = self._clients[0].settings.embed_batch
        pending: queue.SimpleQueue[int] = queue.SimpleQueue()
        starts = list(range(0, len(items), size))
        for start in starts:
            pending.put(start)
        done: dict[int, list[list[float]]] = {}
        errors: list[BaseException] = []
        # A round ends when the queue looks empty to every worker; a batch put back by a retiring host
        # after the others stopped is taken by the next round.
        while len(done) < len(starts) and not errors:
            workers = self._in_use()[: len(starts) - len(done)]
            if not workers:
                raise LLMUnavailableError(self._all_out())
            job = _Round(self, items, size, model, pending, done, errors)
            if len(workers) == 1:
                job.work(workers[0])
            else:
                threads = [threading.Thread(target=job.work, args=(c,), name=f"embed-{i}", daemon=True)
                           for i, c in enumerate(workers)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
        if errors:
            raise errors[0]
        return [vector for start in starts for vector in done[start]]

    def close(self) -> None:
        for client in self._clients:
            client.close()

    # -- hosts ------------------------------------------------------------------------------------

    def _in_use(self) -> list[OllamaClient]:
        """The hosts in use, starting from the next in turn so small calls go round the hosts."""
        with self._lock:
            usable = [c for c in self._clients if c.host not in self._retired]
        if not usable:
            return []
        first = next(self._turn) % len(usable)
        return usable[first:] + usable[:first]

    def _retire(self, client: OllamaClient, why: str) -> None:
        with self._lock:
            if client.host in self._retired:
                return
            self._retired[client.host] = why
            left = [c.host for c in self._clients if c.host not in self._retired]
        # Said here as it happens (-v); the run says it once more as a notice at its end (retirement_notices).
        log.info("Ollama host %s retired from embedding for the rest of the run: %s; %s", client.host,
                 why, f"its batches go to {', '.join(left)}" if left else "no embedding host is left")

    def _count(self, client: OllamaClient, texts: int) -> None:
        with self._lock:
            self.embedded[client.host] += texts

    def _all_out(self) -> str:
        with self._lock:
            reasons = "; ".join(f"{url}: {why}" for url, why in self._retired.items())
        return f"every Ollama host that embeds was retired ({reasons})"


class _Round:
    """One round of workers over the shared queue of batch starts of one :meth:`EmbedPool.embed` call."""

    def __init__(self, pool: EmbedPool, items: list[str], size: int, model: str | None,
                 pending: queue.SimpleQueue[int], done: dict[int, list[list[float]]],
                 errors: list[BaseException]) -> None:
        self.pool, self.items, self.size, self.model = pool, items, size, model
        self.pending, self.done, self.errors = pending, done, errors

    def work(self, client: OllamaClient) -> None:
        """Embed batches on ``client`` until the queue is empty, the host fails, or another worker hit an error."""
        while not self.errors:
            try:
                start = self.pending.get_nowait()
            except queue.Empty:
                return
            batch = self.items[start : start + self.size]
            try:
                vectors = client.embed(batch, model=self.model)
            except _HOST_FAILURES as exc:
                self.pool._retire(client, str(exc))
                self.pending.put(start)
                return
            except LLMError as exc:  # rejected or malformed: another host of the same model would do the same
                self.errors.append(exc)
                return
            except Exception as exc:  # a bug: raised to the caller, never a batch retried round after round
                self.errors.append(exc)
                return
            self.done[start] = vectors
            self.pool._count(client, len(batch))


def embedder_for(clients: Sequence[OllamaClient]) -> OllamaClient | EmbedPool | None:
    """The embedder of a run: None without a host that has the model, the one client for one host (as
    before), else a pool over all of them."""
    if not clients:
        return None
    return clients[0] if len(clients) == 1 else EmbedPool(clients)


def retirement_notices(embedder: object) -> list[str]:
    """One notice per host retired from embedding during the run (none for a single client): capacity was
    lost, not work, so they are notices, not a degraded run."""
    if not isinstance(embedder, EmbedPool):
        return []
    left = embedder.hosts
    then = f"the other batches went to {', '.join(left)}" if left else "no embedding host was left"
    return [f"Ollama host {url} retired from embedding for the rest of the run: {why}; {then}"
            for url, why in embedder.retired().items()]
