"""One run of a job: lock → crawl (incremental) → answer every question → record → reports.

Each answer is committed as soon as it is made, with its evidence and its change since the job's
previous successful run, and its JSONL line written, so a run that dies keeps everything it finished;
`--resume` continues such a run under the same id, answering only the questions it had not. A bad
question fails alone; only a missing model (every question would fail the same way) stops the run.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.answer import AskSettings, Outcome, QuestionAnswerer, QuestionSpec
from jobs.changes import Evidence, classify
from jobs.config import JobConfig
from jobs.errors import (DatabaseLockedError, ExitCode, LLMUnavailableError, ModelNotFoundError, NothingToDoError,
                         StoreError, WebqaError)
from jobs.history import RunDiff, change_line, compare_runs, evidence_from_row, process_alive, render_diff
from jobs.llm import OllamaSettings, connect
from jobs.lock import RunLock
from jobs.report import answer_row_json, markdown_report, outcome_json, write_csv, write_jsonl_line
from jobs.select import Selector
from pipelines.store import RunStore

log = logging.getLogger(__name__)

Notify = Callable[[str], None]


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
    allow_private_networks: bool = False  # --allow-private-networks; the job key does the same


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

    def line(self) -> str:
        c = self.counts
        if self.dry_run:
            # Nothing is answered in a dry run: "0/5 answered" would read as a failure.
            selected = c.get("questions", 0) - c.get("failed", 0)
            return (f"Run {self.run_id} {self.status} (dry run, no LLM called): {selected}/{c.get('questions', 0)} "
                    f"questions selected, {c.get('failed', 0)} failed")
        line = (
            f"Run {self.run_id} {self.status}: {c.get('answered', 0)}/{c.get('questions', 0)} answered "
            f"({c.get('grounded', 0)} grounded, {c.get('not_enough_info', 0)} not enough information), "
            f"{c.get('failed', 0)} failed"
        )
        if self.diff is not None:
            line += f"; {change_line(self.diff)}"
        return line


def ollama_settings(job: JobConfig) -> OllamaSettings:
    return OllamaSettings(
        host=job.ollama.resolved_host, model=job.model, embedding_model=job.embedding_model,
        timeout_s=job.ollama.timeout, options=dict(job.ollama.options),
        keep_alive=None if job.ollama.keep_alive is None else str(job.ollama.keep_alive),
        max_attempts=job.ollama.max_attempts,
    )


def crawl_options(job: JobConfig, options: RunOptions) -> Any:
    from crawler.run import CrawlOptions, HostPolicy

    job.require_urls()  # one clear error when the job lists no URLs at all
    crawl = job.crawl
    return CrawlOptions(
        url_entries=job.url_entries(), urls_files=[job.urls_file] if job.urls_file else [],
        depth=crawl.depth, max_pages=crawl.max_pages, delay=crawl.delay,
        hosts={h: HostPolicy(o.delay, o.concurrency) for h, o in crawl.hosts.items()},
        allow=crawl.allow, deny=crawl.deny, follow=crawl.follow, contact=crawl.user_agent_contact,
        obey_robots=crawl.obey_robots, max_crawl_delay=crawl.max_crawl_delay,
        allow_private_networks=crawl.allow_private_networks or options.allow_private_networks, timeout=crawl.timeout, max_bytes=crawl.max_bytes,
        recrawl_after=crawl.recrawl_after, refresh=options.refresh, job_name=job.name,
        verbose=options.verbose, progress=options.progress, redis=job.redis,
    )


@contextmanager
def _stop_after_current(flag: threading.Event) -> Iterator[None]:
    """SIGTERM/SIGINT: finish the question in hand, then stop and mark the run interrupted."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if flag.is_set():
            raise KeyboardInterrupt  # a second signal means now
        flag.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run_job(job: JobConfig, options: RunOptions, notify: Notify = lambda _m: None) -> RunResult:
    if not options.crawl and not options.resume and not Path(options.db).exists():
        # Opening it would create an empty database (and a lock file) only to report "no chunks".
        raise StoreError(f"{options.db}: no such database; run `webqa crawl` (or `webqa run` without --no-crawl) "
                         "first, or pass --db")
    with RunLock(options.db, options.wait_seconds):
        resume = _resumable_run(job, options, notify) if options.resume else None
        if resume is None and not options.crawl and not Path(options.db).exists():
            raise StoreError(f"{options.db}: no such database; run `webqa crawl` (or `webqa run` without --no-crawl) "
                             "first, or pass --db")
        crawl_run_id = None
        crawl_line = None
        if options.crawl and resume is None:
            crawl_run_id, crawl_line = _crawl(job, options, notify)
        return _answer_all(job, options, notify, crawl_run_id, crawl_line, resume)


def _resumable_run(job: JobConfig, options: RunOptions, notify: Notify) -> dict[str, Any] | None:
    """The job's last run, when it did not finish: left 'running' by a killed process, or 'interrupted'.

    None (a new run starts) when the last run finished, failed, or was made from another version
    of the job file: a resumed run must ask the same questions as the part already answered.
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
        if status == "running" and process_alive(last["pid"]):
            raise DatabaseLockedError(f"run {run_id} of job {job.name} is still running (PID {last['pid']}); "
                                      "wait for it to finish")
        if status not in ("running", "interrupted"):
            notify(f"Nothing to resume: the last run of job {job.name} (run {run_id}) is {status}; starting a new run")
            return None
        if last["job_hash"] and job.file_hash and last["job_hash"] != job.file_hash:
            notify(f"Notice: run {run_id} did not finish, but the job file changed since it started; "
                   "starting a new run instead of resuming it")
            return None
        done = {r["question_id"] for r in store.final_answers(run_id)}
        asked = sum(1 for q in job.questions if q.id in done)
        how = "was killed" if status == "running" else "was interrupted"
        notify(f"Resuming run {run_id} ({how}; {asked}/{len(job.questions)} questions answered): "
               "answering the rest from the pages stored, without crawling")
        return last


def _crawl(job: JobConfig, options: RunOptions, notify: Notify) -> tuple[int | None, str | None]:
    from crawler.run import run_crawl

    try:
        summary = run_crawl(crawl_options(job, options), options.db)
    except NothingToDoError as exc:
        # Yesterday's pages still answer today's questions: go on when the store has content.
        notify(f"Crawl: {exc}; answering from the pages already stored")
        return None, None
    for problem in summary.problems:
        notify(f"Skipped {problem}")
    notify(summary.line())
    return summary.crawl_run_id, summary.line()


def _answer_all(job: JobConfig, options: RunOptions, notify: Notify, crawl_run_id: int | None,
                crawl_line: str | None, resume: dict[str, Any] | None = None) -> RunResult:
    notices: list[str] = []
    answerer = options.answerer or job.answerer
    method = job.selection.method
    chat = answerer == "llm" and not options.dry_run
    wants_embeddings = method in ("embedding", "hybrid")
    access = connect(ollama_settings(job), chat=chat, embeddings=wants_embeddings)
    if access.unreachable is not None and chat:
        if not job.fallback_extractive:
            raise access.unreachable
        answerer = "extractive"
        notices.append(f"{access.unreachable}; answering extractively (quoting the best sentences) instead")
    elif wants_embeddings and access.embedding_unavailable:
        notices.append(f"{access.embedding_unavailable}; selecting with bm25")
    llm, embedder, embedding_unavailable = access.llm, access.embedder, access.embedding_unavailable
    for notice in notices:
        notify(f"Notice: {notice}")

    store = RunStore.open(options.db)
    try:
        if store.count_chunks() == 0:
            raise NothingToDoError(f"{options.db} holds no chunks to answer from; check the crawl (webqa crawl -v)")
        if store.fts_is_stale():
            store.rebuild_fts()
        selector = Selector(store.conn, embedder=embedder, embedding_model=job.embedding_model if embedder else None,
                            ensure_fts=store.load_fts, embedding_unavailable=embedding_unavailable,
                            prefixes=job.embedding_prefixes())
        if resume is not None:
            run_id = int(resume["run_id"])
            store.resume_run(run_id, os.getpid(), len(job.questions))
        else:
            run_id = store.begin_run(
                job.name, str(job.source_path) if job.source_path else None, job.file_hash, crawl_run_id=crawl_run_id,
                questions=len(job.questions), answerer=answerer, model=job.model if answerer == "llm" else None,
                method=method, dry_run=options.dry_run, pid=os.getpid(), page_urls=_job_page_urls(job),
            )
        run_row = store.run_row(run_id) or {}
        previous_run_id = run_row.get("previous_run_id")
        ask = AskSettings(method=method, top_k=job.selection.top_k, token_budget=job.selection.token_budget,
                          retry_wider=job.selection.retry_wider, answerer=answerer, dry_run=options.dry_run,
                          model=job.model, min_similarity=job.selection.min_similarity)
        answerer_obj = QuestionAnswerer(store, selector, llm, ask, run_id=run_id)
        out_dir = (options.out_dir or job.output.dir) / f"run-{run_id}"
        try:
            return _run_questions(job, options, notify, store, answerer_obj, run_id, out_dir, notices, crawl_line,
                                  previous_run_id, resumed=resume is not None)
        except BaseException as exc:
            # Whatever stopped the run, its row must not stay 'running' forever.
            try:
                row = store.conn.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchone()
                if row is not None and row[0] == "running":
                    status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
                    store.finish_run(run_id, status, {"questions": len(job.questions)},
                                     notes="; ".join([*notices, f"stopped: {exc!r}"]))
            except Exception:  # noqa: BLE001 - the original error is the one to report
                log.debug("Could not mark run %s as stopped", run_id, exc_info=True)
            raise
    finally:
        store.close()


def _job_page_urls(job: JobConfig) -> list[str] | None:
    """The job's URLs as stored (normalised), for the run's page snapshot; None: the job lists none."""
    from crawler.run import CrawlOptions, gather_urls

    scoped = [url for q in job.questions for url in (_stored_form(q.urls) or ())]
    if not job.urls and job.urls_file is None:
        return scoped or None
    try:
        listed, _problems = gather_urls(CrawlOptions(
            url_entries=job.url_entries(), urls_files=[job.urls_file] if job.urls_file else []))
    except WebqaError as exc:
        log.warning("Cannot read the job's URLs for the page snapshot: %s", exc)
        return scoped
    return list(dict.fromkeys([*(u.url for u in listed), *scoped]))


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
    attempts = dict(store.conn.execute(
        "SELECT question_id, count(*) FROM answers WHERE run_id = ? GROUP BY ALL", [run_id]).fetchall())
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


def _run_questions(job: JobConfig, options: RunOptions, notify: Notify, store: RunStore,
                   answerer: QuestionAnswerer, run_id: int, out_dir: Path, notices: list[str],
                   crawl_line: str | None, previous_run_id: int | None = None, *, resumed: bool = False) -> RunResult:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"{out_dir}: cannot create the output folder: {exc.strerror}") from None
    specs = [QuestionSpec(q.id, q.question, _stored_form(q.urls)) for q in job.questions]
    changes = None if options.dry_run else _Changes(store, answerer.db_lock, run_id, previous_run_id)
    jsonl_path = out_dir / "answers.jsonl"
    results: dict[str, dict[str, Any]] = {}
    if resumed and changes is not None:
        results = _resumed_results(store, changes, run_id, specs, jsonl_path)
    counts = {"questions": len(specs), "answered": 0, "grounded": 0, "not_enough_info": 0, "failed": 0}
    for obj in results.values():
        _count_result(counts, obj)
    stop = threading.Event()
    status = "done"
    fatal: Exception | None = None
    with jsonl_path.open("w", encoding="utf-8") as jsonl, _stop_after_current(stop), \
            ThreadPoolExecutor(max_workers=max(1, job.ollama.parallel)) as pool:
        for spec in specs:  # a resumed run's file starts with what it had answered, in job order
            if spec.id in results:
                write_jsonl_line(jsonl, results[spec.id])
        pending: dict[Future[Outcome], QuestionSpec] = {}
        queue = [s for s in specs if s.id not in results]
        while queue or pending:
            while queue and len(pending) < max(1, job.ollama.parallel) and not stop.is_set() and fatal is None:
                spec = queue.pop(0)
                pending[pool.submit(answerer.answer, spec)] = spec
            if not pending:
                break
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                spec = pending.pop(future)
                stops_run = False
                try:
                    outcome = future.result()
                except LLMUnavailableError as exc:
                    if job.fallback_extractive and answerer.answerer == "llm":
                        notice = f"{exc}; answering the remaining questions extractively"
                        notify(f"Notice: {notice}")
                        notices.append(notice)
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
                obj = outcome_json(outcome)
                if changes is not None and not stops_run:
                    # A question the run could not ask (the model went away) gets no answer row: it
                    # was not answered, and a later run of the job asks it again.
                    obj["change"] = changes.record(spec, outcome.error)
                results[spec.id] = obj
                write_jsonl_line(jsonl, obj)
                _count(counts, outcome, options.dry_run)
                notify(_progress_line(len(results), len(specs), obj, options.dry_run))
        if stop.is_set() and queue:
            status = "interrupted"
    ordered = [results[s.id] for s in specs if s.id in results]
    if fatal is not None:
        status = "failed"
    elif status != "interrupted":
        status = "done" if counts["failed"] == 0 else ("failed" if counts["answered"] == 0 else "partial")
    notes = notices
    if resumed:
        # The row keeps what the first part of the run noted; the report shows this part's notices.
        earlier = (store.run_row(run_id) or {}).get("notes")
        notes = [*([earlier] if earlier else []), f"resumed by PID {os.getpid()}", *notices]
    store.finish_run(run_id, status, counts, notes="; ".join(notes) or None)
    diff = None
    if not options.dry_run:
        diff = compare_runs(store, previous_run_id, run_id, order=[s.id for s in specs])
    outputs = _write_reports(job, out_dir, run_id, status, counts, ordered, notices, crawl_line, jsonl_path, diff)
    if fatal is not None:
        raise fatal
    exit_code = {"done": ExitCode.OK, "partial": ExitCode.PARTIAL, "interrupted": ExitCode.INTERRUPTED}.get(
        status, ExitCode.FAILED)
    # Failures come first: a partial run says so (1) even when answers changed; 5 only for a clean run.
    if exit_code == ExitCode.OK and options.fail_on_change and diff is not None and diff.changed:
        exit_code = ExitCode.CHANGED
    return RunResult(run_id, status, exit_code, counts, outputs, notices, crawl_line, dry_run=options.dry_run,
                     diff=diff, resumed=resumed)


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
    grounded = "grounded" if obj.get("grounded") else "NOT grounded"
    return f"{prefix}: {obj.get('confidence')} confidence, {grounded}, attempt {obj.get('attempt')}"


def _write_reports(job: JobConfig, out_dir: Path, run_id: int, status: str, counts: dict[str, int],
                   results: list[dict[str, Any]], notices: list[str], crawl_line: str | None,
                   jsonl_path: Path, diff: RunDiff | None = None) -> list[Path]:
    outputs = []
    if "jsonl" in job.output.formats:
        outputs.append(jsonl_path)
    else:
        jsonl_path.unlink(missing_ok=True)
    if "markdown" in job.output.formats:
        summary = [f"run {run_id}: {status}", f"questions: {counts['questions']}, answered: {counts['answered']}, "
                   f"grounded: {counts['grounded']}, not enough information: {counts['not_enough_info']}, "
                   f"failed: {counts['failed']}"]
        if crawl_line:
            summary.append(crawl_line)
        summary += [f"notice: {n}" for n in notices]
        preamble = render_diff(diff) if diff is not None else []
        path = out_dir / "report.md"
        path.write_text(markdown_report(f"{job.name} — run {run_id}", summary, results, preamble), encoding="utf-8")
        outputs.append(path)
    if "csv" in job.output.formats:
        path = out_dir / "answers.csv"
        write_csv(path, results)
        outputs.append(path)
    return outputs
