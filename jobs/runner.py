"""One run of a job: lock → record the run → crawl (incremental) → answer every question → verdict → reports.

The run row is written the moment the lock is held, so a crawl killed by SIGKILL leaves a run that
`--resume` finishes (fetching only what that run had not fetched, then answering). Each answer is
committed as soon as it is made, with its evidence and its change since the job's previous successful
run, and its JSONL line written, so a run that dies keeps everything it finished.

This module is the entry (:func:`run_job`) and the run's row; each phase and concern has its own module:
the crawl (``crawl_phase.py``, its console lines ``crawl_lines.py``), the answering (``answer_phase.py``,
the thread pool ``question_pool.py``), ``verdict.py``, the reports (``run_report.py``), change tracking
(``change_tracking.py``), the page scope (``job_scope.py``), ``resume.py``, signals and how a run stopped
(``run_signals.py``) and disk errors (``storage_failures.py``). The names callers use stay importable here.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from jobs.answer_phase import answer_all, ollama_settings
from jobs.config import JobConfig
from jobs.crawl_phase import CrawlReport, crawl_options, run_crawl_phase
from jobs.errors import WebqaError, require_database
from jobs.lock import RunLock
from jobs.output_folder import check_output_folder
from jobs.resume import resumable_run
from jobs.run_options import Notify, RunOptions
from jobs.run_report import RunResult, read_back
from jobs.run_signals import RunSignals, how_it_stopped
from jobs.runstore import IN_PROGRESS, RunStore
from jobs.storage_failures import is_storage_failure, storage_error
from jobs.verdict import Verdict, verdict

__all__ = [
    "CrawlReport", "Notify", "Run", "RunOptions", "RunResult", "RunSignals", "Verdict",
    "crawl_options", "ollama_settings", "read_back", "run_job", "storage_error", "verdict",
]

log = logging.getLogger(__name__)


def run_job(job: JobConfig, options: RunOptions, notify: Notify | Callable[[str], None] = Notify()) -> RunResult:
    with RunSignals() as signals:
        return _run_job(job, options, notify, signals)


def _run_job(job: JobConfig, options: RunOptions, notify: Notify | Callable[[str], None],
             signals: RunSignals) -> RunResult:
    if not isinstance(notify, Notify):
        notify = Notify(notify)
    if not options.crawl and not options.resume:
        # Opening a missing one would create an empty database (and a lock file) only to report "no chunks".
        require_database(options.db)
    if options.crawl:
        from crawler.run import gather_urls

        gather_urls(crawl_options(job, options))  # a job without a usable URL list: exit 2 before anything opens
    with RunLock(options.db, options.wait_seconds):
        check_output_folder(options.out_dir or job.output.dir)  # after the lock: a refused run leaves nothing behind
        resume = resumable_run(job, options, notify) if options.resume else None
        if resume is None and not options.crawl:
            require_database(options.db)
        run = Run(job, options, notify, signals)
        run.begin(resume)
        signals.started = True
        try:
            signals.checkpoint("before its crawl")
            crawl = run.crawl_phase()
            return run.answer_phase(crawl)
        except BaseException as exc:
            raise run.record_stop(exc) from None


class Run:
    """The run being made: its row, its phases and how it stopped."""

    def __init__(self, job: JobConfig, options: RunOptions, notify: Notify, signals: RunSignals | None = None) -> None:
        self.job = job
        self.options = options
        self.notify = notify
        self.signals = signals or RunSignals()
        self.run_id: int | None = None
        self.resume: dict[str, Any] | None = None
        self.phase = "crawl"
        self.notices: list[str] = []
        self.counts: dict[str, int] = {"questions": len(job.questions)}
        self.crawl = CrawlReport()
        self.crawled = False  # this process ran the crawl phase (``embed: on_crawl`` embeds after it)

    @property
    def answerer(self) -> str:
        return self.options.answerer or self.job.answerer

    def begin(self, resume: dict[str, Any] | None) -> None:
        self.resume = resume
        try:
            with RunStore.open(self.options.db) as store:
                if resume is not None:
                    self.run_id = int(resume["run_id"])
                    store.resume_run(self.run_id, os.getpid(), len(self.job.questions))
                    self.phase = "crawl" if resume.get("phase") == "crawl" else "answer"
                else:
                    self.phase = "crawl" if self.options.crawl else "answer"
                    self.run_id = store.begin_run(
                        self.job.name, str(self.job.source_path) if self.job.source_path else None,
                        self.job.file_hash, questions=len(self.job.questions), answerer=self.answerer,
                        model=self.job.model if self.answerer == "llm" else None, method=self.job.selection.method,
                        dry_run=self.options.dry_run, pid=os.getpid(), crawling=self.phase == "crawl")
        except (OSError, duckdb.Error) as exc:
            if is_storage_failure(exc):
                raise storage_error(exc, f"{self.options.db}: cannot record the run") from None
            raise

    def crawl_phase(self) -> CrawlReport:
        if self.phase != "crawl":
            return self.crawl
        fresh_since = self.resume.get("started_at") if self.resume is not None else None
        self.crawled = True
        return run_crawl_phase(self.crawl, self.job, self.options, self.notify, self.notices, fresh_since)

    def answer_phase(self, crawl: CrawlReport) -> RunResult:
        self.signals.checkpoint("after its crawl, before answering")
        self.phase = "answer"
        return answer_all(self, crawl)

    def record_stop(self, exc: BaseException) -> BaseException:
        """Record why the run stopped (whatever stopped it, the row must not stay in progress) and return the
        error to raise in ``exc``'s place."""
        stop = how_it_stopped(exc, self.signals, self.phase, self.options.db)
        self._write_stop(stop.status, int(stop.code), stop.reason, stop.resumable)
        if isinstance(stop.error, WebqaError):
            stop.error.run_id = self.run_id  # type: ignore[attr-defined]  # for the CLI's summary line on stdout
        return stop.error

    def _write_stop(self, status: str, code: int, reason: str, resumable: bool) -> None:
        if self.run_id is None:
            return
        try:
            with RunStore.open(self.options.db) as store:
                row = store.run_row(self.run_id)
                if row is not None and row["status"] in IN_PROGRESS:
                    store.finish_run(self.run_id, status, self.counts, notes="; ".join(self.notices) or None,
                                     exit_code=code, reason=reason, resumable=resumable)
        except Exception:  # noqa: BLE001 - the original error is the one to report
            log.debug("Could not record how run %s stopped", self.run_id, exc_info=True)
