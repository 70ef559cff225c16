"""`webqa history QUESTION_ID`: one question's answers run by run, the record of when it changed.

For each finished run of the job (done or partial, not a dry run) that asked the question: its verdict,
its value (typed questions) or answer, its change since the run before, and the page its evidence came
from with the fetch time of the copy that run answered from (``run_pages``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobs.changes import LABELS
from jobs.errors import ConfigError
from jobs.history import citations_of, only_job
from jobs.question_pairs import pair_previous, same_question
from jobs.runstore import RunStore
from jobs.typed import value_text

__all__ = ["question_history", "render_history"]


def _value(row: dict[str, Any]) -> Any:
    try:
        return json.loads(row["value"]) if row.get("value") is not None else None
    except (TypeError, ValueError):
        return None


def _verdict(row: dict[str, Any]) -> str:
    if row.get("error"):
        return "failed"
    if row.get("not_enough_info"):
        return "not enough information"
    return "answered" if row.get("grounded") else "answered, not grounded"


def _evidence(store: RunStore, row: dict[str, Any]) -> tuple[str | None, datetime | None]:
    """The page of the answer's first valid citation, and when the copy the run answered from was fetched."""
    url = next((str(c["url"]) for c in citations_of(row) if c.get("valid") and c.get("url")), None)
    if url is None:
        return None, None
    return url, store.run_pages(int(row["run_id"])).get(url, {}).get("fetched_at")


def _followed(store: RunStore, name: str, question_id: str) -> list[dict[str, Any]]:
    """The question's final answers run by run, followed back as each run's change was decided
    (jobs/question_pairs.py): through a renumbering of q1, q2, … or an edit of its words, not by its id alone."""
    by_run: dict[int, dict[str, dict[str, Any]]] = {}
    for row in store.job_questions(name):
        by_run.setdefault(int(row["run_id"]), {})[str(row["question_id"])] = row
    runs = sorted(by_run)
    start = next((i for i in range(len(runs) - 1, -1, -1) if question_id in by_run[runs[i]]), None)
    if start is None:
        return []
    current, qid = by_run[runs[start]], question_id
    chain = [current[qid]["answer_id"]]
    for run in reversed(runs[:start]):
        earlier = pair_previous(by_run[run], [(q, r["question"], r.get("scope")) for q, r in current.items()]).get(qid)
        if earlier is not None:  # else not asked in that run; an older one may have asked it
            current, qid = by_run[run], earlier
            chain.append(current[qid]["answer_id"])
    return store.answers_with_start(chain)


def question_history(store: RunStore, question_id: str, job: str | None = None) -> list[dict[str, Any]]:
    """The question's final answer in each finished run of the job, oldest first."""
    name = job or only_job(store)
    rows = _followed(store, name, question_id)
    if not rows:
        raise ConfigError(f"job {name} has no finished run that asked question {question_id!r} in {store.path}; "
                          "`webqa runs` lists the runs, the job file names the question ids")
    history = []
    for row in rows:
        url, fetched = _evidence(store, row)
        history.append({
            "run_id": row["run_id"], "started_at": row["started_at"], "question": row["question"],
            "question_id": row["question_id"], "verdict": _verdict(row), "type": row.get("value_type") or "text",
            "value": _value(row),
            "answered": row.get("answered") if row.get("answered") is not None else not row.get("not_enough_info"),
            "answer": row.get("answer"), "error": row.get("error"), "change": row.get("change"),
            "value_problem": row.get("value_problem"), "answer_id": row["answer_id"],
            "evidence_url": url, "evidence_fetched_at": fetched,
        })
    return history


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "-"


def _said(entry: dict[str, Any], limit: int = 60) -> str:
    if entry["type"] != "text" and entry["answered"] and not entry["error"]:
        return value_text(entry["value"]) + (" (not trusted)" if entry["value_problem"] else "")
    text = " ".join(str(entry["answer"] or "").split()) if not entry["error"] else ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_history(question_id: str, history: Sequence[dict[str, Any]]) -> str:
    header = ("run", "started (UTC)", "verdict", "value" if history[0]["type"] != "text" else "answer", "change",
              "evidence", "fetched (UTC)")
    table = [header] + [(str(e["run_id"]), _when(e["started_at"]), e["verdict"], _said(e) or "-",
                         LABELS.get(str(e["change"]), str(e["change"] or "-")), e["evidence_url"] or "-",
                         _when(e["evidence_fetched_at"])) for e in history]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = [f"{question_id}: {history[-1]['question']} (type {history[-1]['type']})", ""]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
    last = history[-1]
    otherwise = [f"run {e['run_id']} as {e['question_id']}" if same_question(e["question"], last["question"]) else
                 f"run {e['run_id']} as {e['question_id']}: “{' '.join(str(e['question']).split())}”"
                 for e in history if e["question_id"] != last["question_id"] or not same_question(e["question"],
                                                                                                 last["question"])]
    if otherwise:
        lines += ["", "Asked otherwise: " + "; ".join(otherwise)]
    return "\n".join(lines)
