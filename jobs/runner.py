"""One run of a job: lock → record the run → crawl (incremental) → answer every question → verdict → reports.

The run row is written the moment the lock is held, so a crawl killed by SIGKILL leaves a run that
`--resume` finishes (fetching only what that run had not fetched, then answering). Each answer is
committed as soon as it is made, with its evidence and its change since the job's previous successful
run, and its JSONL line written, so a run that dies keeps everything it finished.

A run's verdict (status, exit code, reason) is decided in one place, :func:`verdict`, from what happened
in every phase: a crawl that fetched nothing, pages answered from stale copies, a degraded answerer,
failed questions, a signal. Nothing that went wrong ends as "done", exit 0.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from jobs.answer import AskSettings, Outcome, QuestionAnswerer, QuestionSpec
from jobs.changes import Evidence, classify
from jobs.config import JobConfig
from jobs.errors import (DatabaseLockedError, ExitCode, Interrupted, LLMUnavailableError, ModelNotFoundError,
                         NothingToDoError, WriteFailedError, StoreError, WebqaError)
from jobs.history import RunDiff, change_line, compare_runs, evidence_from_row, process_alive, render_diff
from jobs.hosts import HostPool, HostSpec, connect_hosts
from jobs.llm import OllamaAccess, OllamaSettings, connect
from jobs.lock import RunLock
from jobs.report import answer_row_json, outcome_json, write_csv, write_jsonl_line, write_markdown_report
from jobs.second_stage import selection_stages
from jobs.session import open_session
from crawler.run import SHOWN_FAILURES, failures_phrase
from pipelines.items import dropped_reason, is_failure
from pipelines.signals import StopSignalScope, stop_signals
from jobs.runstore import IN_PROGRESS, RunStore

log = logging.getLogger(__name__)


class Notify:
    """Where the runner's messages go: ``info`` is progress, ``important`` is shown even under --quiet."""

    def __init__(self, info: Callable[[str], None] = lambda _m: None,
                 important: Callable[[str], None] | None = None) -> None:
        self.info = info
        self.important = important or info

    def __call__(self, message: str) -> None:
        self.info(message)




@dataclass
class RunOptions:
    db: Path
    crawl: bool = True
    out_dir: Path | None = None
    dry_run: bool = False
    refresh: bool = False
    wait_seconds: float = 0.0
    answerer: str | None = None  # overrides the job's
    verbose: bool = False
    progress: bool = False
    resume: bool = False  # continue the job's last run when it was killed or interrupted
    fail_on_change: bool = False  # exit 5 when an answer changed, is new or is no longer answered
    fail_on_reworded: bool = False  # and when an answer was reworded (same quotes and verdict, other words)
    allow_private_networks: bool = False  # --allow-private-networks; the job key does the same


@dataclass
class CrawlReport:
    """What the run's crawl did, as the verdict and the reports need it."""

    summary: Any = None  # crawler.run.CrawlSummary; None when the run did not crawl (or could not start)
    line: str | None = None  # the crawl's summary line
    crawl_run_id: int | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)  # URLs that failed, or were blocked
    stale: dict[str, datetime] = field(default_factory=dict)  # URL → when its stored copy was fetched
    # Stored pages dropped by this crawl (404/410, now refused by robots.txt or not HTML) → why: not stale.
    removed: dict[str, str] = field(default_factory=dict)
    skipped: list[dict[str, Any]] = field(default_factory=list)  # URLs skipped on purpose (robots.txt, not HTML)
    nothing_fetched: bool = False  # the crawl had work and none of it reached a server successfully
    gone: int = 0
    stopped_after: float | None = None  # crawl.max_duration, when it cut the crawl short


@dataclass
class Verdict:
    status: str  # done | partial | failed | interrupted
    exit_code: ExitCode
    reason: str | None = None


def verdict(*, counts: dict[str, int], crawl: CrawlReport, degraded: list[str], allow_degraded: bool,
            interrupted: bool = False, fatal: WebqaError | None = None, changed: Sequence[str] | bool = False,
            fail_on_change: bool = False, dry_run: bool = False, failed_questions: Sequence[str] = ()) -> Verdict:
    """The run's status and exit code from everything that happened; the first that applies wins.

    failed (the error's code, usually 3) → interrupted (130) → partial (1: failed questions or URLs,
    stale pages, degraded answering) → changed (5, with --fail-on-change) → done (0).
    """
    reasons: list[str] = []
    if fatal is not None:
        return Verdict("failed", fatal.exit_code, str(fatal))
    if interrupted:
        return Verdict("interrupted", ExitCode.INTERRUPTED, "interrupted by a signal; --resume continues it")
    if counts.get("questions", 0) and counts.get("failed", 0) == counts.get("questions", 0):
        return Verdict("failed", ExitCode.FAILED, f"all {counts['failed']} questions failed")
    if counts.get("failed"):
        named = f" ({_named(failed_questions)})" if failed_questions else ""
        reasons.append(f"{counts['failed']} of {counts['questions']} questions failed{named}")
    if crawl.failures:
        reasons.append(failures_phrase(crawl.failures, SHOWN_FAILURES))
    if crawl.stale:
        reasons.append(f"{len(crawl.stale)} pages answered from stale copies")
    if crawl.stopped_after:
        reasons.append(f"the crawl stopped after {crawl.stopped_after:g} s (crawl.max_duration)")
    if crawl.summary is not None and getattr(crawl.summary, "internal_errors", 0):
        reasons.append(f"the crawl met {crawl.summary.internal_errors} internal errors (logged; please report them)")
    if degraded and not allow_degraded and not dry_run:
        reasons.append("degraded: " + "; ".join(degraded))
    if reasons:
        return Verdict("partial", ExitCode.PARTIAL, "; ".join(reasons))
    if changed and fail_on_change:
        named = f": {_named(changed)}" if not isinstance(changed, bool) else ""
        return Verdict("done", ExitCode.CHANGED, f"answers changed (--fail-on-change){named}")
    return Verdict("done", ExitCode.OK)


def _named(items: Sequence[str], limit: int = SHOWN_FAILURES) -> str:
    """The first few of ``items``, comma-separated, with "and N more"."""
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


@dataclass
class RunResult:
    run_id: int
    status: str
    exit_code: ExitCode
    counts: dict[str, int]
    outputs: list[Path]
    notices: list[str] = field(default_factory=list)
    crawl_line: str | None = None
    dry_run: bool = False
    diff: RunDiff | None = None  # the answers and pages against the job's previous successful run
    resumed: bool = False
    reason: str | None = None
    hosts_lost: list[str] = field(default_factory=list)  # servers of ollama.hosts left out at start or taken out

    def line(self) -> str:
        c = self.counts
        if self.dry_run:
            # Nothing is answered in a dry run: "0/5 answered" would read as a failure.
            selected = c.get("questions", 0) - c.get("failed", 0)
            line = (f"Run {self.run_id} {self.status} (dry run, no LLM called): {selected}/{c.get('questions', 0)} "
                    f"questions selected, {c.get('failed', 0)} failed")
        else:
            line = (
                f"Run {self.run_id} {self.status}: {c.get('answered', 0)}/{c.get('questions', 0)} answered "
                f"({c.get('grounded', 0)} grounded, {c.get('not_enough_info', 0)} not enough information), "
                f"{c.get('failed', 0)} failed"
            )
            if self.diff is not None:
                line += f"; {change_line(self.diff)}"
        if self.reason and self.status != "done":
            line += f" — {self.reason}"
        if self.hosts_lost:
            # Cron reads this line: a dead server must be named even when the other hosts answered everything.
            line += f"; Ollama host{'s' if len(self.hosts_lost) > 1 else ''} lost: {', '.join(self.hosts_lost)}"
        return line


def ollama_settings(job: JobConfig) -> OllamaSettings:
    return OllamaSettings(
        host=job.ollama.resolved_host, model=job.model, embedding_model=job.embedding_model,
        timeout_s=job.ollama.timeout, options=dict(job.ollama.options),
        keep_alive=None if job.ollama.keep_alive is None else str(job.ollama.keep_alive),
        max_attempts=job.ollama.max_attempts,
        reply_timeout_s=job.ollama.reply_timeout, max_reply_bytes=job.ollama.max_reply_bytes,
    )


def crawl_options(job: JobConfig, options: RunOptions, fresh_since: datetime | None = None) -> Any:
    from crawler.run import CrawlOptions, HostPolicy

    job.require_urls()  # one clear error when the job lists no URLs at all
    crawl = job.crawl
    return CrawlOptions(
        url_entries=job.url_entries(), urls_files=[job.urls_file] if job.urls_file else [],
        depth=crawl.depth, max_pages=crawl.max_pages, delay=crawl.delay,
        hosts={h: HostPolicy(o.delay, o.concurrency) for h, o in crawl.hosts.items()},
        allow=crawl.allow, deny=crawl.deny, follow=crawl.follow, contact=crawl.user_agent_contact,
        obey_robots=crawl.obey_robots, obey_noindex=crawl.obey_noindex, max_crawl_delay=crawl.max_crawl_delay,
        allow_private_networks=crawl.allow_private_networks or options.allow_private_networks,
        timeout=crawl.timeout, max_bytes=crawl.max_bytes,
        recrawl_after=crawl.recrawl_after, refresh=options.refresh, fresh_since=fresh_since, job_name=job.name,
        max_duration=crawl.max_duration, sitemap_max_urls=crawl.sitemap_max_urls,
        pdf_max_pages=crawl.pdf_max_pages,
        verbose=options.verbose, progress=options.progress, redis=job.redis,
    )


def _stop_after_current(flag: threading.Event) -> AbstractContextManager[None]:
    """SIGTERM/SIGINT: finish the question in hand, then stop and mark the run interrupted."""

    def handler(signum: int, frame: Any) -> None:
        if flag.is_set():
            raise KeyboardInterrupt  # a second signal means now
        flag.set()

    return stop_signals(handler)


class RunSignals(StopSignalScope):
    """SIGINT/SIGTERM for the whole run, between the two phases that stop gracefully on their own.

    The crawl (crawler/shutdown.py) and the question loop (``_stop_after_current``) install handlers of
    their own while they run. Around them: before the lock is held the first signal stops at once
    (nothing has started); after that it is noted and the run stops at its next checkpoint, recorded as
    interrupted (a setup step such as checking Ollama is bounded by its own timeout). A second signal
    stops at once, wherever the run is.
    """

    def __init__(self) -> None:
        self.received: str | None = None  # the first signal, e.g. "SIGTERM"
        self.count = 0
        self.started = False  # the run row exists: note the first signal instead of stopping at once

    def _handle(self, signum: int, _frame: Any) -> None:
        self.count += 1
        if self.received is None:
            self.received = signal.Signals(signum).name
        if not self.started or self.count > 1:
            raise KeyboardInterrupt

    def checkpoint(self, where: str) -> None:
        if self.received is not None:
            raise Interrupted(f"{self.received}: the run stopped {where}; `webqa run --resume` continues it")


def run_job(job: JobConfig, options: RunOptions, notify: Notify | Callable[[str], None] = Notify()) -> RunResult:
    with RunSignals() as signals:
        return _run_job(job, options, notify, signals)


def _run_job(job: JobConfig, options: RunOptions, notify: Notify | Callable[[str], None],
             signals: RunSignals) -> RunResult:
    if not isinstance(notify, Notify):
        notify = Notify(notify)
    if not options.crawl and not options.resume and not Path(options.db).exists():
        # Opening it would create an empty database (and a lock file) only to report "no chunks".
        raise StoreError(f"{options.db}: no such database; run `webqa crawl` (or `webqa run` without --no-crawl) "
                         "first, or pass --db")
    if options.crawl:
        from crawler.run import gather_urls

        gather_urls(crawl_options(job, options))  # a job without a usable URL list: exit 2 before anything opens
    with RunLock(options.db, options.wait_seconds):
        resume = _resumable_run(job, options, notify) if options.resume else None
        if resume is None and not options.crawl and not Path(options.db).exists():
            raise StoreError(f"{options.db}: no such database; run `webqa crawl` (or `webqa run` without --no-crawl) "
                             "first, or pass --db")
        run = _Run(job, options, notify, signals)
        run.begin(resume)
        signals.started = True
        try:
            signals.checkpoint("before its crawl")
            crawl = run.crawl_phase()
            return run.answer_phase(crawl)
        except BaseException as exc:
            raise run.stopped(exc) from None


def _resumable_run(job: JobConfig, options: RunOptions, notify: Notify) -> dict[str, Any] | None:
    """The job's last run, when it did not finish: killed (in progress, its process gone), interrupted,
    or stopped by a storage error.

    None (a new run starts) when the last run finished, failed otherwise, or was made from another
    version of the job file: a resumed run must ask the same questions as the part already answered.
    """
    if not Path(options.db).exists():
        notify(f"Nothing to resume: {options.db} does not exist yet; starting a new run")
        return None
    with RunStore.open(options.db) as store:
        last = store.last_run(job.name)
        if last is None:
            notify(f"Nothing to resume: job {job.name} has no earlier run; starting a new run")
            return None
        run_id, status = last["run_id"], last["status"]
        if status in IN_PROGRESS and process_alive(last["pid"]):
            raise DatabaseLockedError(f"run {run_id} of job {job.name} is still running (PID {last['pid']}); "
                                      "wait for it to finish")
        if not (status in IN_PROGRESS or status == "interrupted" or (status == "failed" and last.get("resumable"))):
            notify(f"Nothing to resume: the last run of job {job.name} (run {run_id}) is {status}; starting a new run")
            return None
        if last["job_hash"] and job.file_hash and last["job_hash"] != job.file_hash:
            notify(f"Notice: run {run_id} did not finish, but the job file changed since it started; "
                   "starting a new run instead of resuming it")
            return None
        how = {"interrupted": "was interrupted", "failed": "stopped on an error"}.get(status, "was killed")
        if last.get("phase") == "crawl":
            notify(f"Resuming run {run_id} ({how} during its crawl): fetching the pages it had not fetched, "
                   "then answering every question")
        else:
            done = {r["question_id"] for r in store.final_answers(run_id)}
            asked = sum(1 for q in job.questions if q.id in done)
            notify(f"Resuming run {run_id} ({how}; {asked}/{len(job.questions)} questions answered): "
                   "answering the rest from the pages stored, without crawling")
        return last


def _is_storage_failure(exc: BaseException) -> bool:
    """Disk full, read-only file system, I/O error: the environment, not the job."""
    if isinstance(exc, WriteFailedError):
        return True
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG):
        return True
    # DuckDB reports a write the disk refused at COMMIT as a TransactionException, naming the OS error.
    return isinstance(exc, duckdb.IOException) or (isinstance(exc, duckdb.Error) and any(
        os_error in str(exc) for os_error in _OS_WRITE_ERRORS))


_OS_WRITE_ERRORS = tuple(os.strerror(code) for code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG))


def storage_error(exc: BaseException, what: str) -> WriteFailedError:
    if isinstance(exc, WriteFailedError):
        return exc
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0][:300]
    return WriteFailedError(f"{what}: {detail}; what was stored before stays (free space, then `webqa run --resume`)")


class _Run:
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
            if _is_storage_failure(exc):
                raise storage_error(exc, f"{self.options.db}: cannot record the run") from None
            raise

    # -- crawl ------------------------------------------------------------------------------------

    def crawl_phase(self) -> CrawlReport:
        if self.phase != "crawl":
            return self.crawl
        from crawler.run import run_crawl

        fresh_since = self.resume.get("started_at") if self.resume is not None else None
        summary: Any = None
        try:
            summary = run_crawl(crawl_options(self.job, self.options, fresh_since), self.options.db)
        except (Interrupted, WriteFailedError) as exc:
            summary = getattr(exc, "summary", None)
            if summary is not None:
                self.notify.important(summary.line())
            raise
        except NothingToDoError as exc:
            summary = exc.summary
            self.crawl.nothing_fetched = True
            if summary is None:
                self.crawl.failures = [{"url": "(the job's URL list)", "outcome": "failed", "reason": str(exc)}]
        self.crawl.summary = summary
        self.crawl.crawl_run_id = getattr(summary, "crawl_run_id", None)
        self.crawl.line = summary.line() if summary is not None else None
        self.crawl.gone = int(getattr(summary, "gone", 0) or 0)
        self.crawl.stopped_after = getattr(summary, "stopped_after", None)
        for problem in getattr(summary, "problems", []):
            self.notify(f"Skipped {problem}")
        self._sort_outcomes()
        self._report_crawl()
        if self.crawl.nothing_fetched and self.crawl.removed and not self.crawl.failures:
            why = sorted(set(self.crawl.removed.values()))
            if all(w.startswith("HTTP ") for w in why):
                raise NothingToDoError(
                    f"every page of job {self.job.name} answered 404 or 410: they are gone from the site; "
                    "update the job's URLs")
            raise NothingToDoError(
                f"no page of job {self.job.name} can be answered from: each is gone or refused now "
                f"({'; '.join(why[:SHOWN_FAILURES])}); update the job's URLs")
        if self.crawl.nothing_fetched and self.job.on_crawl_failure != "answer_stale":
            summary = self.crawl.summary
            named = f" ({failures_phrase(self.crawl.failures)})" if summary is not None and self.crawl.failures else ""
            if not named and self.crawl.skipped:  # nothing failed: say what kept every URL out
                raise NothingToDoError(f"no page of job {self.job.name} can be answered from "
                                       f"({failures_phrase(self.crawl.skipped, what='were skipped')})")
            hint = summary.blocked_hint() if summary is not None else None
            if hint:  # under --quiet this one line is all cron mails: it must say what to change
                raise NothingToDoError(f"no page of job {self.job.name} could be fetched{named}: {hint}")
            raise NothingToDoError(
                f"no page of job {self.job.name} could be fetched{named}, so nothing was answered from older copies "
                "(set on_crawl_failure: answer_stale in the job to answer from them)")
        return self.crawl

    def _sort_outcomes(self) -> None:
        """Split the crawl's URLs without a page: dropped (a stored page now 404/410 or refused: see
        ``dropped_reason``), failed (their stored copies answered from as stale), skipped on purpose (left out)."""
        summary = self.crawl.summary
        if summary is None:
            return
        kept = []
        for row in summary.outcomes:
            why = dropped_reason(row["outcome"], row["status"], str(row["reason"]))
            if why is not None and row["stored_fetched_at"] is not None:
                # Removed or refused: a page change (`gone` in the report and `webqa diff`), not an outage.
                self.crawl.removed[row["url"]] = why
                continue
            if not is_failure(row["outcome"], str(row["reason"])):
                self.crawl.skipped.append(row)  # a skip on purpose (robots.txt rules, not HTML): not a failure
                continue
            kept.append(row)
            if row["stored_fetched_at"] is not None:
                self.crawl.stale[row["url"]] = row["stored_fetched_at"]
        summary.outcomes = kept
        self.crawl.failures = self.crawl.failures or summary.failures

    def _report_crawl(self) -> None:
        crawl, summary = self.crawl, self.crawl.summary
        troubled = bool(crawl.failures or crawl.nothing_fetched or crawl.removed)
        if crawl.line:
            (self.notify.important if troubled else self.notify.info)(crawl.line)
        if crawl.failures:
            self.notify.important(f"Not fetched ({len(crawl.failures)}):")
            lines = summary.failure_lines() if summary is not None else [
                f"  {f['url']}: {f['outcome']}: {f['reason']}" for f in crawl.failures]
            for line in lines:
                self.notify.important(line)
        hint = summary.blocked_hint() if summary is not None else None
        if hint:
            self.notify.important(f"Notice: {hint}")
        if crawl.removed:
            named = ", ".join(f"{url} ({why})" for url, why in list(crawl.removed.items())[:SHOWN_FAILURES])
            more = f" and {len(crawl.removed) - SHOWN_FAILURES} more" if len(crawl.removed) > SHOWN_FAILURES else ""
            notice = (f"{len(crawl.removed)} pages of the job are gone from the site or refused now, no longer "
                      f"answered from: {named}{more}")
            self.notify.important(f"Notice: {notice}")
            self.notices.append(notice)  # in the report and the run's notes: under --quiet a clean run says nothing
        if crawl.stale and not crawl.nothing_fetched:
            self.notify.important(f"Notice: {len(crawl.stale)} pages could not be refreshed; their stored copies "
                                  "are used and marked stale in the report")
        workers_lost = getattr(summary, "workers_lost", None)
        if workers_lost:  # a crawl through Redis: their leases were fetched again; nothing lost, but cron hears
            self.notify.important(f"Notice: workers lost: {workers_lost}")
        if crawl.nothing_fetched and crawl.failures and self.job.on_crawl_failure == "answer_stale":
            self.notify.important("Notice: no page could be fetched; answering from the stored copies "
                                  "(on_crawl_failure: answer_stale)")

    # -- answering -------------------------------------------------------------------------------

    def answer_phase(self, crawl: CrawlReport) -> RunResult:
        self.signals.checkpoint("after its crawl, before answering")
        self.phase = "answer"
        return _answer_all(self, crawl)

    # -- stopping --------------------------------------------------------------------------------

    def stopped(self, exc: BaseException) -> BaseException:
        """Record why the run stopped (whatever stopped it, the row must not stay in progress); the error to raise."""
        if self.signals.received is not None and not isinstance(exc, (Interrupted, KeyboardInterrupt)):
            # A signal that reached a library call mid-way (DuckDB: "Query interrupted") is still the signal.
            log.debug("Stopped by %s in %r", self.signals.received, exc)
            exc = KeyboardInterrupt() if self.signals.count > 1 else Interrupted(
                f"{self.signals.received}: the run stopped during its {self.phase}")
        immediate = isinstance(exc, KeyboardInterrupt) or (isinstance(exc, Interrupted) and exc.immediate)
        if isinstance(exc, (Interrupted, KeyboardInterrupt)):
            error: BaseException = exc if isinstance(exc, Interrupted) else Interrupted(
                f"stopped at once during the {self.phase}; what was finished is stored; `webqa run --resume` "
                "continues the run", immediate=True)
            status, code, resumable = "interrupted", ExitCode.INTERRUPTED, True
            reason = f"interrupted during the {self.phase}" + (" (at once)" if immediate else "")
            if isinstance(exc, Interrupted) and not immediate:
                error = Interrupted(f"{exc}; `webqa run --resume` finishes the crawl, then answers", exc.summary)
        elif _is_storage_failure(exc):
            error = storage_error(exc, f"{self.options.db} or the output folder: cannot write")
            status, code, resumable, reason = "failed", ExitCode.FAILED, True, str(error)
        elif isinstance(exc, WebqaError):
            error, status, code, resumable, reason = exc, "failed", exc.exit_code, False, str(exc)
        else:
            error, status, code, resumable, reason = exc, "failed", ExitCode.FAILED, False, f"crashed: {exc!r}"
        self._record_stop(status, int(code), reason, resumable)
        if isinstance(error, WebqaError):
            error.run_id = self.run_id  # type: ignore[attr-defined]  # for the CLI's summary line on stdout
        return error

    def _record_stop(self, status: str, code: int, reason: str, resumable: bool) -> None:
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


def _job_scope(store: RunStore, job: JobConfig, crawl: CrawlReport) -> list[str] | None:
    """The pages a question without ``urls`` searches: the job's own, or None for the whole database.

    A job's pages are its listed URLs (and the questions' urls) plus the pages its last finished crawl
    reached within its depth (``Store.job_page_urls``), less the pages dropped since their copy was
    fetched (404, 410, refused by robots.txt: ``Store.dropped_pages``), with or without a crawl in this run.
    ``scope: database``, or a job that lists no URL at all, searches every stored page.
    """
    if job.scope == "database" or (not job.urls and job.urls_file is None):
        return None
    listed = _job_page_urls(job) or []
    reached = store.job_page_urls(job.name)
    return sorted((set(listed) | set(reached)) - set(crawl.removed) - set(store.dropped_pages()))


class _Changes:
    """Stores each final answer's evidence and its change since the job's previous successful run."""

    def __init__(self, store: RunStore, lock: threading.Lock, run_id: int, previous_run_id: int | None) -> None:
        self.store = store
        self.lock = lock
        self.run_id = run_id
        self.previous: dict[str, Evidence] = {}
        if previous_run_id is not None:
            self.previous = {r["question_id"]: evidence_from_row(r) for r in store.final_answers(previous_run_id)}

    def record(self, spec: QuestionSpec, error: str | None) -> str:
        with self.lock:
            row = self.store.final_answer(self.run_id, spec.id)
            if row is None:
                # Failed before any attempt was stored (e.g. its URLs were never crawled).
                self.store.save_failure(self.run_id, spec.id, spec.question, error or "no answer")
                row = self.store.final_answer(self.run_id, spec.id)
                assert row is not None
            return self.fill(row)

    def fill(self, row: dict[str, Any]) -> str:
        evidence = evidence_from_row(row, stored=False)
        change = classify(self.previous.get(row["question_id"]), evidence)
        self.store.set_change(row["answer_id"], evidence.to_json(), change)
        return change


def _resumed_results(store: RunStore, changes: _Changes, run_id: int, specs: list[QuestionSpec],
                     jsonl_path: Path) -> dict[str, dict[str, Any]]:
    """The questions a resumed run had answered: their JSONL objects (from the file, else the database)."""
    rows = {r["question_id"]: r for r in store.final_answers(run_id)}
    attempts = store.attempt_counts(run_id)
    written: dict[str, dict[str, Any]] = {}
    try:
        with jsonl_path.open(encoding="utf-8") as old:
            for line in old:
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue  # the line the killed process was writing
                if isinstance(obj, dict) and "question_id" in obj:
                    written[str(obj["question_id"])] = obj
    except OSError:
        pass
    results: dict[str, dict[str, Any]] = {}
    for spec in specs:
        row = rows.get(spec.id)
        if row is None:
            continue
        change = row.get("change") if row.get("evidence") else changes.fill(row)
        obj = written.get(spec.id)
        if obj is None or obj.get("answer_id", row["answer_id"]) != row["answer_id"] or bool(obj.get("error")) != bool(
                row.get("error")):
            obj = answer_row_json(row, attempts.get(spec.id, 1))
        obj["change"] = change
        results[spec.id] = obj
    return results




def _answer_all(run: _Run, crawl: CrawlReport) -> RunResult:
    job, options, notify = run.job, run.options, run.notify
    notices = run.notices
    degraded: list[str] = []
    answerer = run.answerer
    method = job.selection.method
    chat = answerer == "llm" and not options.dry_run
    wants_embeddings = method in ("embedding", "hybrid")
    access = _connect(job, notify, notices, chat=chat, embeddings=wants_embeddings)
    if access.unreachable is not None and chat:
        if not job.fallback_extractive:
            raise access.unreachable
        answerer = "extractive"
        also = f" and selected with bm25 instead of {method}" if wants_embeddings else ""
        degraded.append(f"{access.unreachable}; answered extractively (quoting the best sentences) instead{also}")
    elif wants_embeddings and access.embedding_unavailable:
        degraded.append(f"{access.embedding_unavailable}; selected with bm25 instead of {method}")
    for notice in degraded:
        notify.important(f"Notice: {notice}")
    notices += degraded
    run.signals.checkpoint("before answering")

    assert run.run_id is not None
    run_id = run.run_id
    with open_session(options.db, access, embedding_model=job.embedding_model, prefixes=job.embedding_prefixes(),
                      no_chunks=f"{options.db} holds no chunks to answer from; check the crawl (webqa crawl -v)") as session:
        store = session.store
        scope = _job_scope(store, job, crawl)
        if scope is not None:
            scope = store.stored_urls(scope)  # a listed URL never fetched is reported by the crawl, not per question
        if scope is not None and not scope:
            raise NothingToDoError(f"no page of job {job.name} is stored; nothing to answer from "
                                   "(check the crawl above, or set scope: database to search every stored page)")
        if run.resume is None or run.resume.get("phase") == "crawl":
            store.start_answering(run_id, job.name, crawl.crawl_run_id, scope, answerer=answerer,
                                  model=job.model if answerer == "llm" else None)
        run_row = store.run_row(run_id) or {}
        previous_run_id = run_row.get("previous_run_id")
        ask = AskSettings(method=method, top_k=job.selection.top_k, token_budget=job.selection.token_budget,
                          retry_wider=job.selection.retry_wider, answerer=answerer, dry_run=options.dry_run,
                          model=job.model, min_similarity=job.selection.min_similarity,
                          **selection_stages(job.selection))
        answerer_obj = session.answerer(ask, run_id=run_id)
        out_dir = (options.out_dir or job.output.dir) / f"run-{run_id}"
        resumed_answers = run.resume is not None and run.resume.get("phase") != "crawl"
        return _run_questions(run, store, answerer_obj, out_dir, crawl, degraded, previous_run_id, scope,
                              resumed=run.resume is not None, resumed_answers=resumed_answers)


def _connect(job: JobConfig, notify: Notify, notices: list[str], *, chat: bool, embeddings: bool) -> OllamaAccess:
    """The job's Ollama: one server (``ollama.host``), or a pool of ``ollama.hosts`` whose troubles are notices."""
    hosts = job.ollama.resolved_hosts()
    if hosts is None:
        return connect(ollama_settings(job), chat=chat, embeddings=embeddings)

    def left_out(url: str, why: str) -> None:
        notice = f"Ollama host {url} left out of this run: {why}"
        notify.important(f"Notice: {notice}")
        notices.append(notice)

    return connect_hosts(ollama_settings(job), [HostSpec(url, parallel) for url, parallel in hosts], chat=chat,
                         embeddings=embeddings, on_left_out=left_out)


def _job_page_urls(job: JobConfig) -> list[str] | None:
    """The job's URLs as stored (normalised); None: the job lists none (it answers from every page)."""
    from crawler.run import CrawlOptions, gather_urls

    scoped = [url for q in job.questions for url in (_stored_form(q.urls) or ())]
    if not job.urls and job.urls_file is None:
        return scoped or None
    try:
        listed, _problems = gather_urls(CrawlOptions(
            url_entries=job.url_entries(), urls_files=[job.urls_file] if job.urls_file else []))
    except WebqaError as exc:
        log.warning("Cannot read the job's URLs for its page scope: %s", exc)
        return scoped
    return list(dict.fromkeys([*(u.url for u in listed), *scoped]))


def access_degraded_selection(degraded: list[str]) -> bool:
    """Whether the run already said, at its start, that it selects with bm25 instead of embeddings."""
    return any("selected with bm25 instead of" in d for d in degraded)


def _mark_stale(obj: dict[str, Any], stale: dict[str, datetime]) -> None:
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


def _run_questions(run: _Run, store: RunStore, answerer: QuestionAnswerer, out_dir: Path, crawl: CrawlReport,
                   degraded: list[str], previous_run_id: int | None, scope: list[str] | None, *,
                   resumed: bool = False, resumed_answers: bool = False) -> RunResult:
    job, options, notify, notices = run.job, run.options, run.notify, run.notices
    run_id = answerer.run_id
    assert run_id is not None
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if _is_storage_failure(exc):
            raise storage_error(exc, f"{out_dir}: cannot create the output folder") from None
        raise StoreError(f"{out_dir}: cannot create the output folder: {exc.strerror}") from None
    default_urls = tuple(scope) if scope is not None else None
    specs = [QuestionSpec(q.id, q.question, _stored_form(q.urls) or default_urls) for q in job.questions]
    changes = None if options.dry_run else _Changes(store, answerer.db_lock, run_id, previous_run_id)
    jsonl_path = out_dir / "answers.jsonl"
    results: dict[str, dict[str, Any]] = {}
    if resumed_answers and changes is not None:
        results = _resumed_results(store, changes, run_id, specs, jsonl_path)
    counts = run.counts = {"questions": len(specs), "answered": 0, "grounded": 0, "not_enough_info": 0, "failed": 0}
    failed_ids: list[str] = []
    for obj in results.values():
        _count_result(counts, obj)
        if obj.get("error"):
            failed_ids.append(str(obj["question_id"]))
    stop = threading.Event()
    interrupted = False
    fell_back: list[str] = []  # questions whose selection fell back to bm25 (the embedding model failed)
    fatal: WebqaError | None = None
    hosts = answerer.llm if isinstance(answerer.llm, HostPool) else None
    # With ollama.hosts every usable server takes its own `parallel`; without, one server takes ollama.parallel.
    parallel = hosts.capacity if hosts is not None else max(1, job.ollama.parallel)
    requeued: set[str] = set()  # questions sent back once because Ollama went away (answered without it)
    announced = 0  # hosts of the pool taken out and already told

    def announce_lost_hosts() -> None:
        nonlocal announced
        lost = hosts.lost() if hosts is not None else []
        for url, why in lost[announced:]:
            notice = (f"Ollama host {url} taken out for the rest of the run: {why}; "
                      "its questions went to the other hosts")
            notify.important(f"Notice: {notice}")
            notices.append(notice)
        announced = len(lost)
    pool = ThreadPoolExecutor(max_workers=parallel)
    try:
        with jsonl_path.open("w", encoding="utf-8") as jsonl, _stop_after_current(stop):
            for spec in specs:  # a resumed run's file starts with what it had answered, in job order
                if spec.id in results:
                    _mark_stale(results[spec.id], crawl.stale)
                    write_jsonl_line(jsonl, results[spec.id])
            done_ids = set(results)
            results.clear()  # from here on the JSONL file holds the results: memory does not grow with them
            pending: dict[Future[Outcome], QuestionSpec] = {}
            queue = [s for s in specs if s.id not in done_ids]
            while queue or pending:
                while queue and len(pending) < _in_flight(hosts, answerer, parallel) and not stop.is_set() \
                        and fatal is None:
                    spec = queue.pop(0)
                    pending[pool.submit(answerer.answer, spec)] = spec
                if not pending:
                    break
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                announce_lost_hosts()
                for future in done:
                    spec = pending.pop(future)
                    stops_run = False
                    try:
                        outcome = future.result()
                    except LLMUnavailableError as exc:
                        # Once per question: several in flight may see Ollama go, and each is answered without it.
                        if job.fallback_extractive and spec.id not in requeued:
                            requeued.add(spec.id)
                            if answerer.answerer == "llm":
                                notice = f"{exc}; answered the remaining questions extractively"
                                notify.important(f"Notice: {notice}")
                                notices.append(notice)
                                degraded.append(notice)
                                answerer.switch_to_extractive(notice)
                            queue.insert(0, spec)
                            continue
                        fatal, stops_run = exc, True
                        outcome = Outcome(spec, None, error=str(exc))
                    except ModelNotFoundError as exc:
                        fatal, stops_run = exc, True
                        outcome = Outcome(spec, None, error=str(exc))
                    except WebqaError as exc:
                        # Anything else the user can act on fails this question alone.
                        outcome = Outcome(spec, None, error=str(exc))
                    except (OSError, duckdb.Error) as exc:
                        if not _is_storage_failure(exc):
                            raise
                        raise storage_error(exc, f"{options.db}: cannot store the answer to {spec.id}") from None
                    obj = outcome_json(outcome)
                    if changes is not None and not stops_run:
                        # A question the run could not ask (the model went away) gets no answer row: it
                        # was not answered, and a later run of the job asks it again.
                        obj["change"] = changes.record(spec, outcome.error)
                    _mark_stale(obj, crawl.stale)
                    done_ids.add(spec.id)
                    write_jsonl_line(jsonl, obj)
                    _count(counts, outcome, options.dry_run)
                    if outcome.error:
                        failed_ids.append(spec.id)
                    if (obj.get("method_used") not in (None, job.selection.method)
                            and not access_degraded_selection(degraded)):
                        fell_back.append(spec.id)
                    notify(_progress_line(len(done_ids), len(specs), obj, options.dry_run))
            announce_lost_hosts()
            interrupted = stop.is_set() and bool(queue)
    except OSError as exc:
        if _is_storage_failure(exc):
            raise storage_error(exc, f"{jsonl_path}: cannot write") from None
        raise
    finally:
        # A second signal leaves a question waiting on the model: do not wait for it here.
        pool.shutdown(wait=False, cancel_futures=True)
    order = [s.id for s in specs]
    failed_set = frozenset(failed_ids)
    if fell_back:
        notice = (f"embedding selection failed for {len(fell_back)} of {len(specs)} questions "
                  f"({', '.join(fell_back[:SHOWN_FAILURES])}{' …' if len(fell_back) > SHOWN_FAILURES else ''}); "
                  f"they were selected with bm25 instead of {job.selection.method} (see their notice)")
        notify.important(f"Notice: {notice}")
        notices.append(notice)
        degraded.append(notice)
    if answerer.stage is not None and answerer.stage.notice:
        # Once per run: the second stage failed (a model missing, Ollama away) and the first stage's order was used.
        notify.important(f"Notice: {answerer.stage.notice}")
        notices.append(answerer.stage.notice)
        degraded.append(answerer.stage.notice)
    diff = None
    if not options.dry_run and fatal is None and not interrupted:
        diff = compare_runs(store, previous_run_id, run_id, order=[s.id for s in specs])
    result = verdict(counts=counts, crawl=crawl, degraded=degraded, allow_degraded=job.allow_degraded,
                     interrupted=interrupted, fatal=fatal,
                     changed=diff.changed_ids(reworded=options.fail_on_reworded) if diff is not None else [],
                     fail_on_change=options.fail_on_change or options.fail_on_reworded, dry_run=options.dry_run,
                     failed_questions=[q for q in order if q in failed_set])
    notes = notices
    if resumed:
        # The row keeps what the first part of the run noted; the report shows this part's notices.
        earlier = (store.run_row(run_id) or {}).get("notes")
        notes = [*([earlier] if earlier else []), f"resumed by PID {os.getpid()}", *notices]
    store.finish_run(run_id, result.status, counts, notes="; ".join(notes) or None, exit_code=int(result.exit_code),
                     reason=result.reason, resumable=result.status == "interrupted")
    try:
        outputs = _write_reports(job, out_dir, run_id, result, counts, order, notices, crawl, jsonl_path, diff,
                                 hosts_line=_hosts_line(hosts) if hosts is not None else None)
    except OSError as exc:
        if _is_storage_failure(exc):
            raise storage_error(exc, f"{out_dir}: cannot write the reports") from None
        raise
    if fatal is not None:
        raise fatal
    if interrupted:
        notify.important(f"Interrupted: run {run_id} stopped after the questions in hand "
                         f"({len(done_ids)}/{len(specs)} done: {counts['answered']} answered, {counts['failed']} "
                         "failed); `webqa run --resume` asks the rest")
    return RunResult(run_id, result.status, result.exit_code, counts, outputs, notices, crawl.line,
                     dry_run=options.dry_run, diff=diff, resumed=resumed, reason=result.reason,
                     hosts_lost=_hosts_lost(hosts))


def _hosts_lost(hosts: HostPool | None) -> list[str]:
    """Each server of ``ollama.hosts`` that did not serve the whole run, and when it was lost, for the summary line."""
    if hosts is None:
        return []
    return [*(f"{url} (left out at start)" for url, _why in hosts.left_out),
            *(f"{url} (taken out)" for url, _why in hosts.lost())]


def _hosts_line(hosts: HostPool) -> str:
    """The report's line on the servers: what each answered, and which were taken out."""
    lost = dict(hosts.lost())
    return "Ollama hosts: " + ", ".join(f"{url} answered {n}" + (" (taken out during the run)" if url in lost else "")
                                        for url, n in hosts.answered().items())


def _in_flight(hosts: HostPool | None, answerer: QuestionAnswerer, parallel: int) -> int:
    """How many questions may be in hand: what the servers still in use take (a lost host's share waits no more)."""
    if hosts is None or answerer.answerer != "llm":
        return parallel
    return hosts.capacity or parallel  # none left: let them through to the no-LLM path at once


def _stored_form(urls: list[str] | None) -> tuple[str, ...] | None:
    """A question's URLs as the crawler stores them (scheme/host lower case, no fragment, '/' path)."""
    from crawler.urllist import normalise_url

    if not urls:
        return None
    return tuple(dict.fromkeys(normalise_url(url)[0] or url for url in urls))


def _count(counts: dict[str, int], outcome: Outcome, dry_run: bool) -> None:
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


def _count_result(counts: dict[str, int], obj: dict[str, Any]) -> None:
    """Count a question answered before a resumed run's interruption, from its JSONL object."""
    if obj.get("error"):
        counts["failed"] += 1
        return
    counts["answered"] += 1
    nei = bool(obj.get("not_enough_information"))
    counts["grounded"] += int(bool(obj.get("grounded")) and not nei)
    counts["not_enough_info"] += int(nei)


def _progress_line(done: int, total: int, obj: dict[str, Any], dry_run: bool) -> str:
    prefix = f"[{done}/{total}] {obj['question_id']}"
    if obj.get("error"):
        return f"{prefix}: failed: {obj['error']}"
    if dry_run:
        return f"{prefix}: {len(obj.get('sources', []))} sources selected ({obj.get('method_used')})"
    if obj.get("not_enough_information"):  # nothing is claimed, so nothing is grounded (or not)
        return f"{prefix}: not enough information, attempt {obj.get('attempt')}"
    grounded = "grounded" if obj.get("grounded") else "NOT grounded"
    return f"{prefix}: {obj.get('confidence')} confidence, {grounded}, attempt {obj.get('attempt')}"


def read_back(jsonl_path: Path, order: list[str]) -> Iterator[dict[str, Any]]:
    """The run's results from its JSONL file, in job order, one at a time (the last line per question wins)."""
    offsets: dict[str, int] = {}
    with jsonl_path.open("rb") as stream:
        while True:
            offset = stream.tell()
            line = stream.readline()
            if not line:
                break
            try:
                offsets[str(json.loads(line)["question_id"])] = offset
            except (ValueError, KeyError, TypeError):
                continue
        for question_id in order:
            if question_id in offsets:
                stream.seek(offsets[question_id])
                yield json.loads(stream.readline())


def _write_reports(job: JobConfig, out_dir: Path, run_id: int, result: Verdict, counts: dict[str, int],
                   order: list[str], notices: list[str], crawl: CrawlReport,
                   jsonl_path: Path, diff: RunDiff | None = None, hosts_line: str | None = None) -> list[Path]:
    outputs = []
    if "markdown" in job.output.formats:
        status = result.status + (f" ({result.reason})" if result.reason and result.status != "done" else "")
        summary = [f"run {run_id}: {status}", f"questions: {counts['questions']}, answered: {counts['answered']}, "
                   f"grounded: {counts['grounded']}, not enough information: {counts['not_enough_info']}, "
                   f"failed: {counts['failed']}"]
        if crawl.line:
            summary.append(crawl.line)
        if hosts_line:
            summary.append(hosts_line)
        summary += [f"not fetched: {f['url']}: {f['reason']}" for f in crawl.failures]
        summary += [f"stale: {url} (last fetched {when:%Y-%m-%d %H:%M} UTC; the copy answered from may be out of date)"
                    for url, when in sorted(crawl.stale.items())]
        summary += [f"notice: {n}" for n in notices]
        preamble = render_diff(diff) if diff is not None else []
        path = out_dir / "report.md"
        with path.open("w", encoding="utf-8") as out:
            write_markdown_report(out, f"{job.name} — run {run_id}", summary, read_back(jsonl_path, order), preamble)
        outputs.append(path)
    if "csv" in job.output.formats:
        path = out_dir / "answers.csv"
        write_csv(path, read_back(jsonl_path, order))
        outputs.append(path)
    if "jsonl" in job.output.formats:
        outputs.insert(0, jsonl_path)
    else:
        jsonl_path.unlink(missing_ok=True)
    return outputs
