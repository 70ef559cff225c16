"""The questions of a run asked on a thread pool, as many at a time as the Ollama servers take.

Each result is handled the moment it comes: its change since the previous run stored, its JSONL line
written, its progress line shown. When Ollama goes away mid-run the questions in hand are asked again
without it (``fallback_extractive``); a lost model stops the run; any other error fails its question alone.
"""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import duckdb

from jobs.answer import Outcome, QuestionAnswerer, QuestionSpec
from jobs.change_tracking import ChangeTracker
from jobs.config import JobConfig
from jobs.errors import LLMUnavailableError, ModelNotFoundError, WebqaError
from jobs.hosts import HostPool
from jobs.report import outcome_json, write_jsonl_line
from jobs.run_options import Notify, RunOptions
from jobs.run_signals import stop_after_current
from jobs.storage_failures import is_storage_failure, storage_error


class QuestionPool:
    """Asks the questions not yet answered and keeps the tally: ``counts`` and ``failed_ids`` (shared with the
    run, which records them however it stops), ``fell_back``, ``fatal`` and ``interrupted``."""

    def __init__(self, job: JobConfig, options: RunOptions, notify: Notify, notices: list[str], degraded: list[str],
                 answerer: QuestionAnswerer, changes: ChangeTracker | None, stale: dict[str, datetime],
                 counts: dict[str, int], failed_ids: list[str], *, bm25_from_start: bool = False) -> None:
        self.job, self.options, self.notify, self.notices, self.degraded = job, options, notify, notices, degraded
        self.answerer, self.changes, self.stale = answerer, changes, stale
        self.counts, self.failed_ids = counts, failed_ids
        self.fell_back: list[str] = []  # questions whose selection fell back to bm25 (the embedding model failed)
        self.bm25_from_start = bm25_from_start  # the run said at its start it selects with bm25: not counted again
        self.fatal: WebqaError | None = None
        self.interrupted = False
        self.hosts = answerer.llm if isinstance(answerer.llm, HostPool) else None
        # With ollama.hosts every usable server takes its own `parallel`; without, one server takes ollama.parallel.
        self.parallel = self.hosts.capacity if self.hosts is not None else max(1, job.ollama.parallel)
        self.requeued: set[str] = set()  # questions sent back once because Ollama went away (answered without it)
        self.announced = 0  # hosts of the pool taken out and already told
        self.queue: list[QuestionSpec] = []

    def ask(self, specs: list[QuestionSpec], results: dict[str, dict[str, Any]], jsonl_path: Path) -> set[str]:
        """Write ``results`` (a resumed run's answers), then ask the rest of ``specs``; the ids done."""
        stop = threading.Event()
        pool = ThreadPoolExecutor(max_workers=self.parallel)
        try:
            with jsonl_path.open("w", encoding="utf-8") as jsonl, stop_after_current(stop):
                for spec in specs:  # a resumed run's file starts with what it had answered, in job order
                    if spec.id in results:
                        mark_stale(results[spec.id], self.stale)
                        write_jsonl_line(jsonl, results[spec.id])
                done_ids = set(results)
                results.clear()  # from here on the JSONL file holds the results: memory does not grow with them
                self.queue = [s for s in specs if s.id not in done_ids]
                self._drain(pool, stop, jsonl, done_ids, len(specs))
                self._announce_lost_hosts()
                self.interrupted = stop.is_set() and bool(self.queue)
        except OSError as exc:
            if is_storage_failure(exc):
                raise storage_error(exc, f"{jsonl_path}: cannot write") from None
            raise
        finally:
            # A second signal leaves a question waiting on the model: do not wait for it here.
            pool.shutdown(wait=False, cancel_futures=True)
        return done_ids

    def _drain(self, pool: ThreadPoolExecutor, stop: threading.Event, jsonl: TextIO, done_ids: set[str],
               total: int) -> None:
        pending: dict[Future[Outcome], QuestionSpec] = {}
        while self.queue or pending:
            while self.queue and len(pending) < in_flight(self.hosts, self.answerer, self.parallel) \
                    and not stop.is_set() and self.fatal is None:
                spec = self.queue.pop(0)
                pending[pool.submit(self.answerer.answer, spec)] = spec
            if not pending:
                break
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            self._announce_lost_hosts()
            for future in done:
                spec = pending.pop(future)
                self._settle(future, spec, jsonl, done_ids, total)

    def _settle(self, future: Future[Outcome], spec: QuestionSpec, jsonl: TextIO, done_ids: set[str],
                total: int) -> None:
        """One question's result: stored, written and counted (unless it was sent back to be asked again)."""
        outcome, stops_run = self._outcome(future, spec)
        if outcome is None:
            return
        obj = outcome_json(outcome)
        if self.changes is not None and not stops_run:
            # A question the run could not ask (the model went away) gets no answer row: it
            # was not answered, and a later run of the job asks it again.
            obj["change"] = self.changes.record(spec, outcome.error)
        mark_stale(obj, self.stale)
        done_ids.add(spec.id)
        write_jsonl_line(jsonl, obj)
        count(self.counts, outcome, self.options.dry_run)
        if outcome.error:
            self.failed_ids.append(spec.id)
        if obj.get("method_used") not in (None, self.job.selection.method) and not self.bm25_from_start:
            self.fell_back.append(spec.id)
        self.notify(progress_line(len(done_ids), total, obj, self.options.dry_run))

    def _outcome(self, future: Future[Outcome], spec: QuestionSpec) -> tuple[Outcome | None, bool]:
        """The question's outcome and whether it stops the run; None when it goes back to the queue."""
        try:
            return future.result(), False
        except LLMUnavailableError as exc:
            # Once per question: several in flight may see Ollama go, and each is answered without it.
            if self.job.fallback_extractive and spec.id not in self.requeued:
                self._ask_again_without_llm(spec, exc)
                return None, False
            self.fatal = exc
            return Outcome(spec, None, error=str(exc)), True
        except ModelNotFoundError as exc:
            self.fatal = exc
            return Outcome(spec, None, error=str(exc)), True
        except WebqaError as exc:
            # Anything else the user can act on fails this question alone.
            return Outcome(spec, None, error=str(exc)), False
        except (OSError, duckdb.Error) as exc:
            if not is_storage_failure(exc):
                raise
            raise storage_error(exc, f"{self.options.db}: cannot store the answer to {spec.id}") from None

    def _ask_again_without_llm(self, spec: QuestionSpec, exc: LLMUnavailableError) -> None:
        self.requeued.add(spec.id)
        if self.answerer.answerer == "llm":
            notice = f"{exc}; answered the remaining questions extractively"
            self.notify.important(f"Notice: {notice}")
            self.notices.append(notice)
            self.degraded.append(notice)
            self.answerer.switch_to_extractive(notice)
        self.queue.insert(0, spec)

    def _announce_lost_hosts(self) -> None:
        lost = self.hosts.lost() if self.hosts is not None else []
        for url, why in lost[self.announced:]:
            notice = (f"Ollama host {url} taken out for the rest of the run: {why}; "
                      "its questions went to the other hosts")
            self.notify.important(f"Notice: {notice}")
            self.notices.append(notice)
        self.announced = len(lost)


def in_flight(hosts: HostPool | None, answerer: QuestionAnswerer, parallel: int) -> int:
    """How many questions may be in hand: what the servers still in use take (a lost host's share waits no more)."""
    if hosts is None or answerer.answerer != "llm":
        return parallel
    return hosts.capacity or parallel  # none left: let them through to the no-LLM path at once


def mark_stale(obj: dict[str, Any], stale: dict[str, datetime]) -> None:
    """Sources and citations from pages that could not be refreshed in this run say so, with their age."""
    if not stale:
        return
    for item in [*(obj.get("sources") or []), *(obj.get("citations") or [])]:
        fetched = stale.get(str(item.get("url")))
        if fetched is not None:
            item["stale"] = True
            item["last_fetched_at"] = fetched.isoformat(timespec="seconds")
    if any(s.get("stale") for s in obj.get("sources", [])):
        obj["stale_sources"] = True


def count(counts: dict[str, int], outcome: Outcome, dry_run: bool) -> None:
    if outcome.error:
        counts["failed"] += 1
        return
    if dry_run:
        return
    counts["answered"] += 1
    final = outcome.final
    if final and final.validation:
        counts["grounded"] += int(final.validation.grounded and not final.validation.not_enough_information)
        counts["not_enough_info"] += int(final.validation.not_enough_information)


def progress_line(done: int, total: int, obj: dict[str, Any], dry_run: bool) -> str:
    prefix = f"[{done}/{total}] {obj['question_id']}"
    if obj.get("error"):
        return f"{prefix}: failed: {obj['error']}"
    if dry_run:
        return f"{prefix}: {len(obj.get('sources', []))} sources selected ({obj.get('method_used')})"
    if obj.get("not_enough_information"):  # nothing is claimed, so nothing is grounded (or not)
        return f"{prefix}: not enough information, attempt {obj.get('attempt')}"
    grounded = "grounded" if obj.get("grounded") else "NOT grounded"
    return f"{prefix}: {obj.get('confidence')} confidence, {grounded}, attempt {obj.get('attempt')}"
