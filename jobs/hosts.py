"""Several Ollama servers for one run (``ollama.hosts``): per-host slots, questions spread, failover.

:func:`connect_hosts` checks every host at start-up and leaves out, with one line each, a host that
does not answer or lacks the model. :class:`HostPool` then stands where one :class:`OllamaClient`
stands for ``ollama.host``: its :meth:`HostPool.chat_json` sends each request to the least busy host
with a free slot (at most ``parallel`` requests per host at once). A host that fails a request after
its own bounded retries (unreachable, 5xx, a broken stream, the reply deadline, the model gone) is
taken out for the rest of the run and the request goes to another host; the request is never on two
hosts at once. When every host is out, the pool raises :class:`LLMUnavailableError`, which the runner
already answers with its no-LLM path (extractive answers, or exit 3 without ``fallback_extractive``).

A host is judged by its answers too. A reply that came but cannot be used (longer than
``max_reply_bytes``, not JSON, not of the schema's shape, from another model: :func:`jobs.llm.reply_problem`)
is asked again of a host not yet tried for the request before the caller sees it. When another host
then answers it well, the request was fine and the first host's reply was not: a strike. A host with
``BAD_REPLY_STRIKES`` strikes in a row is taken out as a dead one is; a good reply clears its strikes.
A request no host answers well (a prompt every model loops on) strikes nobody: the last bad reply goes
to the caller, naming its host, as with one server. A request the server rejected (4xx) is raised at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence, Set as AbstractSet
from dataclasses import dataclass, replace
from typing import Any

from jobs.embed_pool import embedder_for
from jobs.errors import LLMError, LLMUnavailableError, ModelNotFoundError
from jobs.llm import (ChatResult, LLMReplyError, LLMServerError, OllamaAccess, OllamaClient, OllamaSettings,
                      ReplyDeadlineError, reply_problem)
from jobs.typed import judged_schema

__all__ = ["HOST_FAILURES", "HostPool", "HostSpec", "connect_hosts"]

log = logging.getLogger(__name__)

# What takes a host out: the host itself failed, so another host may answer the same request.
HOST_FAILURES: tuple[type[BaseException], ...] = (
    LLMUnavailableError, ModelNotFoundError, LLMServerError, ReplyDeadlineError)

# Bad replies in a row, each answered well by another host, that take a host out: one could be chance.
BAD_REPLY_STRIKES = 2

# How long a request waiting for a free slot sleeps before it looks again (a release wakes it sooner).
_SLOT_POLL_S = 1.0


@dataclass(frozen=True)
class HostSpec:
    """One entry of ``ollama.hosts``: the server URL and how many requests it takes at once."""

    url: str
    parallel: int


@dataclass
class _Host:
    client: OllamaClient
    parallel: int
    order: int
    busy: int = 0
    answered: int = 0
    strikes: int = 0  # bad replies in a row that another host then answered well
    out: str | None = None  # why the host was taken out; None while it is in use


class HostPool:
    """The usable hosts of a run, shared by the question threads; see the module doc."""

    def __init__(self, hosts: Sequence[tuple[OllamaClient, int]], left_out: Sequence[tuple[str, str]] = ()) -> None:
        if not hosts:
            raise ValueError("a HostPool needs at least one host")
        self._hosts = [_Host(client, parallel, i) for i, (client, parallel) in enumerate(hosts)]
        self._lost: list[tuple[str, str]] = []  # (URL, why), in the order the hosts were taken out
        self.left_out = list(left_out)  # (URL, why) of the configured hosts found unusable at start-up
        self._changed = threading.Condition()

    @property
    def capacity(self) -> int:
        """How many requests the hosts still in use take at once."""
        with self._changed:
            return sum(h.parallel for h in self._hosts if h.out is None)

    def lost(self) -> list[tuple[str, str]]:
        """(URL, why) of every host taken out during the run, in the order they were taken out.

        Polled by the caller's own thread, not called back from the question threads: their output
        would interleave with its lines.
        """
        with self._changed:
            return list(self._lost)

    def answered(self) -> dict[str, int]:
        """Replies per host URL (every configured host, 0 for one that gave none)."""
        with self._changed:
            return {h.client.host: h.answered for h in self._hosts}

    def chat_json(self, prompt: str, schema: dict[str, Any], *, system: str | None = None) -> ChatResult:
        """:meth:`OllamaClient.chat_json` on the least busy host; on a host failure or a bad reply, on
        another one (see the module doc).

        Each host is tried at most once per request, so the loop ends. The result's ``latency_s``
        covers the failed tries too: it is what the question waited.
        """
        started = time.monotonic()
        tried: set[int] = set()
        bad: list[tuple[_Host, str, ChatResult | LLMReplyError]] = []  # (host, why, what it sent)
        while True:
            host = self._acquire(tried, bad_so_far=bool(bad))
            if host is None:
                break
            tried.add(host.order)
            reply: ChatResult | LLMReplyError
            try:
                reply = host.client.chat_json(prompt, schema, system=system)
            except HOST_FAILURES as exc:
                self._take_out(host, str(exc))
                continue
            except LLMReplyError as exc:
                reply = exc
            finally:
                self._release(host)
            why = str(reply) if isinstance(reply, LLMReplyError) else reply_problem(reply, judged_schema(schema),
                                                                                   host.client.settings.model)
            if why is None:
                assert isinstance(reply, ChatResult)
                self._good_reply(host, [(h, w) for h, w, _ in bad])
                return replace(reply, latency_s=time.monotonic() - started)
            log.warning("Ollama host %s sent a reply that cannot be used (%s); asking another host", host.client.host,
                        why)
            bad.append((host, why, reply))
        if not bad:
            raise LLMUnavailableError(self._all_out())
        # No host answered well: the request's fault, not a host's. A reply that parsed comes first.
        parsed = [r for _, _, r in bad if isinstance(r, ChatResult) and r.data is not None]
        last = parsed[0] if parsed else bad[-1][2]
        if isinstance(last, LLMReplyError):
            raise last
        return replace(last, latency_s=time.monotonic() - started)

    def close(self) -> None:
        for host in self._hosts:
            host.client.close()

    def __enter__(self) -> HostPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- slots ------------------------------------------------------------------------------------

    def _acquire(self, tried: AbstractSet[int] = frozenset(), *, bad_so_far: bool = False) -> _Host | None:
        """A slot on the least busy host in use not yet ``tried`` (the first configured on a tie); waits
        while all are full. None when every host in use was tried (after a bad reply), and
        LLMUnavailableError when no host is left in use and none replied."""
        with self._changed:
            while True:
                usable = [h for h in self._hosts if h.out is None]
                if not usable and not bad_so_far:
                    raise LLMUnavailableError(self._all_out())
                untried = [h for h in usable if h.order not in tried]
                if not untried:
                    return None
                free = [h for h in untried if h.busy < h.parallel]
                if free:
                    host = min(free, key=lambda h: (h.busy / h.parallel, h.order))
                    host.busy += 1
                    return host
                # Bounded so a lost wake-up costs a second, not the run.
                self._changed.wait(_SLOT_POLL_S)

    def _release(self, host: _Host) -> None:
        with self._changed:
            host.busy -= 1
            self._changed.notify_all()

    def _good_reply(self, host: _Host, bad: list[tuple[_Host, str]]) -> None:
        """``host`` answered well; each host in ``bad`` had failed the same request: a strike each."""
        with self._changed:
            host.answered += 1
            host.strikes = 0
        for other, why in bad:
            with self._changed:
                other.strikes += 1
                strikes = other.strikes
            if strikes >= BAD_REPLY_STRIKES:
                self._take_out(other, f"{strikes} replies in a row could not be used while another host answered "
                                      f"the same requests (the last: {why})")

    def _take_out(self, host: _Host, why: str) -> None:
        with self._changed:
            if host.out is not None:
                return  # another question on the same host saw it fail first
            host.out = why
            self._lost.append((host.client.host, why))
            left = [h.client.host for h in self._hosts if h.out is None]
            self._changed.notify_all()
        # The caller tells the user (see lost()); the log keeps where the questions went.
        log.info("Ollama host %s taken out for the rest of the run: %s; %s", host.client.host, why,
                 f"its questions go to {', '.join(left)}" if left else "no Ollama host is left")

    def _all_out(self) -> str:
        reasons = "; ".join(f"{h.client.host}: {h.out}" for h in self._hosts)
        return f"every Ollama host was taken out ({reasons})"


def connect_hosts(settings: OllamaSettings, hosts: Sequence[HostSpec], *, chat: bool, embeddings: bool,
                  on_left_out: Callable[[str, str], None] = lambda _url, _why: None) -> OllamaAccess:
    """:func:`jobs.llm.connect` for several hosts: check each, leave out the unusable ones, pool the rest.

    ``on_left_out(url, why)`` hears of each host left out at start-up. With no usable host the result
    is what :func:`jobs.llm.connect` gives for one: ModelNotFoundError when every host answered and
    none has the model, else an ``unreachable`` access naming every host and why.
    """
    if not (chat or embeddings):
        return OllamaAccess(None, None, None, None)
    usable: list[tuple[OllamaClient, int]] = []
    problems: list[tuple[str, str]] = []  # (URL, why) of each host left out
    unreachable = 0
    embedders: list[OllamaClient] = []  # every usable host that has the embedding model
    embedding_missing: list[str] = []
    for spec in hosts:
        client = OllamaClient(replace(settings, host=spec.url))
        why: str | None = None
        try:
            client.ping()
            if chat and not client.has_model(settings.model):
                why = f"model {settings.model} is not available on {client.host}; run `ollama pull {settings.model}`"
            elif embeddings:
                if client.has_model(settings.embedding_model):
                    embedders.append(client)
                else:
                    embedding_missing.append(client.host)
        except LLMError as exc:  # down, or answering nonsense: left out either way
            why, unreachable = str(exc), unreachable + 1
        if why is None and chat:
            usable.append((client, spec.parallel))
        elif why is None and client in embedders:
            pass  # kept for embeddings only (a dry run)
        else:
            if why is not None:
                problems.append((client.host, why))
            client.close()
    if unreachable == len(hosts):
        error = LLMUnavailableError("no Ollama host is reachable: " + "; ".join(why for _, why in problems))
        return OllamaAccess(None, None, str(error), error)
    embedder = embedder_for(embedders)
    embedding_unavailable = None
    if embeddings and embedder is None:
        model = settings.embedding_model
        where = ", ".join(embedding_missing) or "any usable host"
        embedding_unavailable = f"embedding model {model} is not available on {where}; run `ollama pull {model}`"
    if chat and not usable:
        if unreachable == 0:
            raise ModelNotFoundError("; ".join(why for _, why in problems))
        error = LLMUnavailableError("no Ollama host is usable: " + "; ".join(why for _, why in problems))
        return OllamaAccess(None, None, str(error), error)
    for url, why in problems:  # said only now: when no host is usable, the one no-LLM notice says it all
        on_left_out(url, why)
    pool = HostPool(usable, problems) if chat else None
    # A pool chats like one client, which is all the answerer asks of OllamaAccess.llm.
    return OllamaAccess(pool, embedder, embedding_unavailable, None)  # type: ignore[arg-type]
