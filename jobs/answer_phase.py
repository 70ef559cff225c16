"""A run's answering: Ollama reached (or not, and what the run does instead), the session opened, the questions
asked (jobs/question_pool.py), then the verdict recorded and the reports written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawler.run import SHOWN_FAILURES
from jobs.answer import AskSettings, QuestionAnswerer, QuestionSpec
from jobs.change_tracking import ChangeTracker
from jobs.output_folder import make_output_folder
from jobs.question_pairs import scope_key
from jobs.config import JobConfig
from jobs.crawl_phase import CrawlReport
from jobs.embed_phase import embed_after_crawl, embeds_on_crawl
from jobs.embed_pool import retirement_notices
from jobs.errors import NothingToDoError
from jobs.history import RunDiff, compare_runs
from jobs.hosts import HostPool, HostSpec, connect_hosts
from jobs.job_scope import job_scope, stored_form
from jobs.llm import OllamaAccess, OllamaSettings, connect
from jobs.notify import announce, private_allowed
from jobs.question_pool import QuestionPool
from jobs.resume import count_result, resumed_results
from jobs.run_options import Notify
from jobs.run_report import RunResult, hosts_line, hosts_lost, write_reports
from jobs.runstore import RunStore
from jobs.second_stage import selection_stages
from jobs.select import EMBEDDING_METHODS
from jobs.session import open_session
from jobs.storage_failures import is_storage_failure, storage_error
from jobs.typed import parse_type
from jobs.verdict import Verdict, verdict

if TYPE_CHECKING:
    from jobs.runner import Run


def ollama_settings(job: JobConfig) -> OllamaSettings:
    return OllamaSettings(
        host=job.ollama.resolved_host, model=job.model, embedding_model=job.embedding_model,
        timeout_s=job.ollama.timeout, options=dict(job.ollama.options),
        keep_alive=None if job.ollama.keep_alive is None else str(job.ollama.keep_alive),
        max_attempts=job.ollama.max_attempts,
        reply_timeout_s=job.ollama.reply_timeout, max_reply_bytes=job.ollama.max_reply_bytes,
    )


def answer_all(run: Run, crawl: CrawlReport) -> RunResult:
    """Reach Ollama (or fall back, with a notice), open the session, scope the pages, and answer."""
    job, options, notify = run.job, run.options, run.notify
    notices = run.notices
    degraded: list[str] = []
    answerer = run.answerer
    method = job.selection.method
    chat = answerer == "llm" and not options.dry_run
    wants_embeddings = method in EMBEDDING_METHODS
    access = _connect(job, notify, notices, chat=chat, embeddings=wants_embeddings or embeds_on_crawl(run))
    if access.unreachable is not None and chat:
        if not job.fallback_extractive:
            raise access.unreachable
        answerer = "extractive"
        degraded.append(access.extractive_instead(method, bm25_instead=wants_embeddings))
    elif wants_embeddings and access.embedding_unavailable:
        degraded.append(f"{access.embedding_unavailable}; selected with bm25 instead of {method}")
    for notice in degraded:
        notify.important(f"Notice: {notice}")
    notices += degraded
    run.signals.checkpoint("before answering")

    assert run.run_id is not None
    run_id = run.run_id
    with open_session(options.db, access, embedding_model=job.embedding_model, prefixes=job.embedding_prefixes(),
                      approximate=job.selection.approximate,
                      embedding_first=job.selection.embedding_first,
                      no_chunks=f"{options.db} holds no chunks to answer from; check the crawl (webqa crawl -v)") as session:
        store = session.store
        scope = job_scope(store, job, crawl)
        if scope is not None:
            scope = store.stored_urls(scope)  # a listed URL never fetched is reported by the crawl, not per question
        if scope is not None and not scope:
            raise NothingToDoError(f"no page of job {job.name} is stored; nothing to answer from "
                                   "(check the crawl above, or set scope: database to search every stored page)")
        if embeds_on_crawl(run):
            embed_after_crawl(run, session.selector, scope, access.embedding_unavailable)
        if run.resume is None or run.resume.get("phase") == "crawl":
            store.start_answering(run_id, job.name, crawl.crawl_run_id, scope, answerer=answerer,
                                  model=job.model if answerer == "llm" else None)
        run_row = store.run_row(run_id) or {}
        previous_run_id = run_row.get("previous_run_id")
        if not options.dry_run and (shared := _other_job_file(store, run_row, previous_run_id)) is not None:
            notify.important(f"Notice: {shared}")
            notices.append(shared)
        ask = AskSettings(method=method, top_k=job.selection.top_k, token_budget=job.selection.token_budget,
                          retry_wider=job.selection.retry_wider, answerer=answerer, dry_run=options.dry_run,
                          model=job.model, min_similarity=job.selection.min_similarity,
                          **selection_stages(job.selection))
        answerer_obj = session.answerer(ask, run_id=run_id)
        out_dir = (options.out_dir or job.output.dir) / f"run-{run_id}"
        resumed_answers = run.resume is not None and run.resume.get("phase") != "crawl"
        return answer_questions(run, store, answerer_obj, out_dir, crawl, degraded, previous_run_id, scope,
                                resumed=run.resume is not None, resumed_answers=resumed_answers,
                                bm25_from_start=wants_embeddings and access.embedding_unavailable is not None)


def _other_job_file(store: RunStore, run_row: dict[str, Any], previous_run_id: int | None) -> str | None:
    """Said when the run it is compared with was started from another job file: two files with one ``name:``
    share one history, and each run would report the other file's questions and pages as changes."""
    before = store.run_row(previous_run_id) if previous_run_id is not None else None
    mine, theirs = run_row.get("job_file"), (before or {}).get("job_file")
    # The same file by a symlinked folder or a path with ".." is the same file.
    if not mine or not theirs or os.path.realpath(mine) == os.path.realpath(theirs):
        return None
    return (f"job {run_row['job_name']} was last run (run {previous_run_id}) from {theirs}, not {mine}, and its answers "
            f"are compared with that run's; if two job files share this name, give each its own name:")


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


def answer_questions(run: Run, store: RunStore, answerer: QuestionAnswerer, out_dir: Path, crawl: CrawlReport,
                     degraded: list[str], previous_run_id: int | None, scope: list[str] | None, *,
                     resumed: bool = False, resumed_answers: bool = False, bm25_from_start: bool = False) -> RunResult:
    """Ask every question of the job not answered yet, then record the run's verdict and write its reports.

    ``bm25_from_start``: the run said at its start that it selects with bm25, so the questions selected so
    are not counted again as failed embedding selections."""
    job, options = run.job, run.options
    run_id = answerer.run_id
    assert run_id is not None
    make_output_folder(out_dir)
    default_urls = tuple(scope) if scope is not None else None
    if default_urls is not None:
        answerer.checked_scope(default_urls, list(default_urls))  # answer_all checked them against the pages
    specs = [QuestionSpec(q.id, q.question, stored_form(q.urls) or default_urls, parse_type(q.type), q.kind)
             for q in job.questions]
    # Each with its scope key, so a text asked of two pages is two questions to compare (jobs/question_pairs.py).
    questions = [(q.id, q.question, scope_key(stored_form(q.urls), q.kind, str(parse_type(q.type))))
                 for q in job.questions]
    changes = None if options.dry_run else ChangeTracker(store, answerer.db_lock, run_id, previous_run_id, questions)
    jsonl_path = out_dir / "answers.jsonl"
    results: dict[str, dict[str, Any]] = {}
    if resumed_answers and changes is not None:
        results = resumed_results(store, changes, run_id, specs, jsonl_path)
    counts = run.counts = {"questions": len(specs), "answered": 0, "grounded": 0, "not_enough_info": 0, "failed": 0}
    failed_ids: list[str] = []
    for obj in results.values():
        count_result(counts, obj)
        if obj.get("error"):
            failed_ids.append(str(obj["question_id"]))
    pool = QuestionPool(job, options, run.notify, run.notices, degraded, answerer, changes, crawl.stale, counts,
                        failed_ids, bm25_from_start=bm25_from_start)
    done_ids = pool.ask(specs, results, jsonl_path)
    _closing_notices(run, answerer, pool.fell_back, len(specs), degraded)
    order = [s.id for s in specs]
    diff = None
    if not options.dry_run and pool.fatal is None and not pool.interrupted:
        diff = compare_runs(store, previous_run_id, run_id, order=order)
    failed_set = frozenset(failed_ids)
    result = verdict(counts=counts, crawl=crawl, degraded=degraded, allow_degraded=job.allow_degraded,
                     interrupted=pool.interrupted, fatal=pool.fatal,
                     changed=diff.changed_ids(reworded=options.fail_on_reworded) if diff is not None else [],
                     fail_on_change=options.fail_on_change or options.fail_on_reworded, dry_run=options.dry_run,
                     failed_questions=[q for q in order if q in failed_set])
    # Announced before the run's row and reports are written, so that a failed notification is in both.
    for problem in announce(job.notify, job.name, diff, out_dir, job.output.formats, allow_private=private_allowed(
            job.crawl.allow_private_networks, options.allow_private_networks)):
        run.notify.important(f"Notice: {problem}")  # a failed notification is a notice, never the exit code
        run.notices.append(problem)
    _record_finish(store, run_id, result, counts, run.notices, resumed)
    outputs = _write_all(run, out_dir, run_id, result, order, crawl, jsonl_path, diff, pool.hosts)
    if pool.fatal is not None:
        raise pool.fatal
    if pool.interrupted:
        run.notify.important(f"Interrupted: run {run_id} stopped after the questions in hand "
                             f"({len(done_ids)}/{len(specs)} done: {counts['answered']} answered, {counts['failed']} "
                             "failed); `webqa run --resume` asks the rest")
    return RunResult(run_id, result.status, result.exit_code, counts, outputs, run.notices, crawl.line,
                     dry_run=options.dry_run, diff=diff, resumed=resumed, reason=result.reason,
                     hosts_lost=hosts_lost(pool.hosts))


def _closing_notices(run: Run, answerer: QuestionAnswerer, fell_back: list[str], total: int,
                     degraded: list[str]) -> None:
    """Once per run, after the questions: what was selected or ordered otherwise than the job asked."""
    notify, notices, method = run.notify, run.notices, run.job.selection.method
    if fell_back:
        notice = (f"embedding selection failed for {len(fell_back)} of {total} questions "
                  f"({', '.join(fell_back[:SHOWN_FAILURES])}{' …' if len(fell_back) > SHOWN_FAILURES else ''}); "
                  f"they were selected with bm25 instead of {method} (see their notice)")
        notify.important(f"Notice: {notice}")
        notices.append(notice)
        degraded.append(notice)
    for notice in retirement_notices(answerer.selector.embedder):
        notify.important(f"Notice: {notice}")
        notices.append(notice)
    if answerer.stage is not None and answerer.stage.notice:
        # Once per run: the second stage failed (a model missing, Ollama away) and the first stage's order was used.
        notify.important(f"Notice: {answerer.stage.notice}")
        notices.append(answerer.stage.notice)
        degraded.append(answerer.stage.notice)


def _record_finish(store: RunStore, run_id: int, result: Verdict, counts: dict[str, int], notices: list[str],
                   resumed: bool) -> None:
    notes = notices
    if resumed:
        # The row keeps what the first part of the run noted; the report shows this part's notices.
        earlier = (store.run_row(run_id) or {}).get("notes")
        notes = [*([earlier] if earlier else []), f"resumed by PID {os.getpid()}", *notices]
    store.finish_run(run_id, result.status, counts, notes="; ".join(notes) or None, exit_code=int(result.exit_code),
                     reason=result.reason, resumable=result.status == "interrupted")


def _write_all(run: Run, out_dir: Path, run_id: int, result: Verdict, order: list[str], crawl: CrawlReport,
               jsonl_path: Path, diff: RunDiff | None, hosts: HostPool | None) -> list[Path]:
    try:
        return write_reports(run.job, out_dir, run_id, result, run.counts, order, run.notices, crawl, jsonl_path, diff,
                             hosts_line=hosts_line(hosts) if hosts is not None else None)
    except OSError as exc:
        if is_storage_failure(exc):
            raise storage_error(exc, f"{out_dir}: cannot write the reports") from None
        raise
