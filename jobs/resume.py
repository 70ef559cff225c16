"""`webqa run --resume`: which run to continue, and what the part already done left behind.

A run killed (in progress, its process gone), interrupted, or stopped by a storage error is continued: a
crawl phase fetches what it had not fetched, an answer phase asks the questions it had not answered. The
answers it had made are taken back from its JSONL file, else rebuilt from the database.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jobs.answer import QuestionSpec
from jobs.change_tracking import ChangeTracker
from jobs.config import JobConfig
from jobs.errors import DatabaseLockedError
from jobs.history import process_alive
from jobs.report import answer_row_json
from jobs.run_options import Notify, RunOptions
from jobs.runstore import IN_PROGRESS, RunStore


def resumable_run(job: JobConfig, options: RunOptions, notify: Notify) -> dict[str, Any] | None:
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


def resumed_results(store: RunStore, changes: ChangeTracker, run_id: int, specs: list[QuestionSpec],
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


def count_result(counts: dict[str, int], obj: dict[str, Any]) -> None:
    """Count a question answered before a resumed run's interruption, from its JSONL object."""
    if obj.get("error"):
        counts["failed"] += 1
        return
    counts["answered"] += 1
    nei = bool(obj.get("not_enough_information"))
    counts["grounded"] += int(bool(obj.get("grounded")) and not nei)
    counts["not_enough_info"] += int(nei)
