"""Run history: list runs, compare two runs' answers and pages, render what changed.

Used by the runner (the "What changed" part of every report, the change of each answer) and by
`webqa runs` and `webqa diff`. Answers are compared on what they say (``jobs.changes``): verdict,
quoted text and words; an answer whose quotes now come from a rewritten chunk is the same answer
("same (evidence moved)"). Pages are compared on the content hashes recorded in ``run_pages`` when each
run began, and each changed answer names the page changes behind it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from jobs.changes import (CHANGE_KINDS, CHANGED, EMPTY_ANSWER, EVIDENCE_MOVED, LABELS, NEW, NO_LONGER_ANSWERED,
                          REPORTABLE, REPORTABLE_REWORDED, REWORDED, UNCHANGED, Evidence, classify, evidence_of)
from jobs.errors import ConfigError, StoreError
from jobs.markdown_text import md_text, md_url
from jobs.question_pairs import edited, pair_previous
from jobs.runstore import IN_PROGRESS, RunStore
from jobs.typed import value_key, value_text

# A question of the earlier run that the later run did not ask (removed from the job, or the run
# was interrupted before it). Not one of jobs.changes' kinds: nothing can be said about its answer.
NOT_ASKED = "not_asked"
# Page changes between two runs' snapshots.
PAGE_NEW, PAGE_CHANGED, PAGE_UNCHANGED, PAGE_GONE = "new", "changed", "unchanged", "gone"
SUCCESSFUL = ("done", "partial")


# --------------------------------------------------------------------------------------------
# Evidence of stored answers


def citations_of(row: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        value = json.loads(row.get("citations") or "[]")
    except (TypeError, ValueError):
        return []
    return value if isinstance(value, list) else []


def evidence_from_row(row: dict[str, Any], *, stored: bool = True) -> Evidence:
    """The evidence of a stored answer: the ``evidence`` column, or computed from the row's columns.

    Computing gives the same value the runner stores; rows written before the column existed, or by a
    webqa that stored (chunk, quote) pairs there, or by a run killed between storing an answer and its
    evidence, are computed from their answer, verdict and citations, which every schema keeps.
    """
    if stored and row.get("evidence"):
        evidence = Evidence.from_json(row["evidence"])
        if evidence is not None:
            return evidence
    return evidence_of(row.get("answer"), row.get("not_enough_info"), citations_of(row), row.get("error"),
                       typed_key(row))


def typed_key(row: dict[str, Any]) -> str | None:
    """A typed answer's value as compared between runs (None: a text question, no trusted value, an older row)."""
    if row.get("value") is None or row.get("value_type") in (None, "text"):
        return None
    try:
        return value_key(json.loads(row["value"]))
    except (TypeError, ValueError):
        return None


def cited_urls(row: dict[str, Any]) -> set[str]:
    """The pages a final answer rests on: the URLs of its valid citations."""
    return {str(c["url"]) for c in citations_of(row) if c.get("valid") and c.get("url")}


# --------------------------------------------------------------------------------------------
# Comparing two runs


@dataclass
class AnswerChange:
    question_id: str
    question: str
    change: str  # new | changed | unchanged | no_longer_answered | not_asked
    before: dict[str, Any] | None  # the final answer row in the earlier run
    after: dict[str, Any] | None  # the final answer row in the later run


@dataclass
class PageChange:
    url: str
    change: str  # new | changed | unchanged | gone
    before_hash: str | None
    after_hash: str | None
    fetched_at: datetime | None
    cited_by: list[str] = field(default_factory=list)  # question ids whose answers (in either run) cite it
    reason: str | None = None  # why a gone page went: 404, robots.txt …, or no longer the job's


@dataclass
class RunDiff:
    run_a: dict[str, Any] | None  # None: the job has no earlier successful run
    run_b: dict[str, Any]
    answers: list[AnswerChange]
    pages: list[PageChange]
    pages_recorded: bool  # both runs have a page snapshot (runs of webqa before schema 2 have none)

    def counts(self) -> dict[str, int]:
        result = {kind: 0 for kind in (*CHANGE_KINDS, NOT_ASKED)}
        for a in self.answers:
            result[a.change] += 1
        return result

    def page_counts(self) -> dict[str, int]:
        result = {kind: 0 for kind in (PAGE_CHANGED, PAGE_NEW, PAGE_GONE, PAGE_UNCHANGED)}
        for p in self.pages:
            result[p.change] += 1
        return result

    @property
    def changed(self) -> bool:
        """True when an answer changed, is new, or is no longer answered."""
        return bool(self.changed_ids())

    def changed_ids(self, *, reworded: bool = False) -> list[str]:
        """The questions whose answer changed, is new or is no longer answered (and, with ``reworded``,
        was reworded), in report order."""
        kinds = REPORTABLE_REWORDED if reworded else REPORTABLE
        return [a.question_id for a in self.answers if a.change in kinds]

    def pages_behind(self, change: AnswerChange) -> list[PageChange]:
        """The page changes behind an answer's change: the pages it cites, before or now, that changed,
        appeared or went."""
        return [p for p in self.pages if p.change != PAGE_UNCHANGED and change.question_id in p.cited_by]


def compare_runs(store: RunStore, run_a: int | None, run_b: int, order: Sequence[str] | None = None) -> RunDiff:
    """What changed from run ``run_a`` (None: nothing before) to run ``run_b``.

    ``order`` lists question ids in the order to report them (the job's); others follow in the
    order the later run answered them.
    """
    row_b = store.run_row(run_b)
    if row_b is None:
        raise ConfigError(f"no run {run_b} in {store.path}; `webqa runs` lists them")
    row_a = None
    if run_a is not None:
        row_a = store.run_row(run_a)
        if row_a is None:
            raise ConfigError(f"no run {run_a} in {store.path}; `webqa runs` lists them")
    before = {r["question_id"]: r for r in store.final_answers(run_a)} if run_a is not None else {}
    after = {r["question_id"]: r for r in store.final_answers(run_b)}
    ids = list(dict.fromkeys([*(order or []), *after, *before]))
    answers = _answer_changes(before, after, ids)

    pages_a = store.run_pages(run_a) if run_a is not None else {}
    pages_b = store.run_pages(run_b)
    recorded = bool(pages_b) and (run_a is None or bool(pages_a))
    citing: dict[str, set[str]] = {}
    for change in answers:  # under the question's id now, the earlier answer's pages too
        for row in (change.before, change.after):
            for url in cited_urls(row) if row is not None else ():
                citing.setdefault(url, set()).add(change.question_id)
    rank = {qid: i for i, qid in enumerate(ids)}
    dropped = store.dropped_pages() if set(pages_a) - set(pages_b) else {}
    pages = []
    for url in sorted(set(pages_a) | set(pages_b)):
        pa, pb = pages_a.get(url), pages_b.get(url)
        if pa is None:
            kind = PAGE_NEW
        elif pb is None:
            kind = PAGE_GONE
        else:
            kind = PAGE_UNCHANGED if pa["content_hash"] == pb["content_hash"] else PAGE_CHANGED
        by = sorted(citing.get(url, ()), key=lambda q: (rank.get(q, len(rank)), q))
        reason = None
        if kind == PAGE_GONE:
            reason = dropped.get(url, "no longer listed or reached by the job")
        pages.append(PageChange(url, kind, pa and pa["content_hash"], pb and pb["content_hash"],
                                (pb or pa or {}).get("fetched_at"), by, reason))
    return RunDiff(row_a, row_b, answers, pages, recorded)


def _answer_changes(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]], ids: list[str]
                    ) -> list[AnswerChange]:
    """Each question of either run with its change; a question is compared with the same question of the
    earlier run (jobs/question_pairs.py), and an earlier question no later one was paired with was not asked."""
    pairs = pair_previous(before, [(qid, row["question"], row.get("scope")) for qid, row in after.items()])
    paired = {p for p in pairs.values() if p is not None}
    answers = []
    for qid in ids:
        b = after.get(qid)
        if b is None:
            a = before.get(qid)
            if a is not None and qid not in paired:
                answers.append(AnswerChange(qid, a["question"], NOT_ASKED, a, None))
            continue
        earlier = pairs.get(qid)
        a = before[earlier] if earlier is not None else None
        change = classify(evidence_from_row(a) if a is not None else None, evidence_from_row(b))
        answers.append(AnswerChange(qid, b["question"], change, a, b))
    return answers


def default_pair(store: RunStore, job: str | None) -> tuple[int, int]:
    """The last two successful (done or partial, not dry) runs of the job, or of the only job."""
    name = job or only_job(store)
    ids = store.last_successful_runs(name, 2)
    if len(ids) < 2:
        raise ConfigError(f"job {name} has {len(ids) or 'no'} successful run{'s' if len(ids) != 1 else ''} in "
                          f"{store.path}; give two run ids (`webqa runs` lists them)")
    return int(ids[1]), int(ids[0])


def previous_for(store: RunStore, run_id: int) -> int:
    """The run before ``run_id`` to compare it with: the one it was compared with when it ran."""
    row = store.run_row(run_id)
    if row is None:
        raise ConfigError(f"no run {run_id} in {store.path}; `webqa runs` lists them")
    previous = row.get("previous_run_id")
    if previous is None:
        previous = store.previous_successful_run(row["job_name"], before=run_id)
    if previous is None:
        raise ConfigError(f"run {run_id} of job {row['job_name']} has no earlier successful run to compare with")
    return int(previous)


def only_job(store: RunStore) -> str:
    names = store.job_names()
    if not names:
        raise StoreError(f"{store.path} has no runs yet; `webqa run JOB.yaml` makes one")
    if len(names) > 1:
        raise ConfigError(f"{store.path} holds runs of {len(names)} jobs ({', '.join(names)}); pick one with --job NAME")
    return str(names[0])


# --------------------------------------------------------------------------------------------
# Listing runs


def process_alive(pid: int | None) -> bool:
    """Whether ``pid`` is a live webqa process (a reused pid of another program is not)."""
    if not pid or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by someone else
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return True  # no /proc here: trust the pid
    return b"webqa" in cmdline or b"jobs.cli" in cmdline


def display_status(run: dict[str, Any]) -> str:
    """The status, with a run left in progress by a process that is gone shown as 'killed (while crawling)'."""
    if run["status"] in IN_PROGRESS and not process_alive(run.get("pid")):
        return "killed" if run["status"] == "running" else f"killed ({run['status']})"
    return str(run["status"])


def list_runs(store: RunStore, job: str | None = None, limit: int | None = 20) -> list[dict[str, Any]]:
    """Runs, newest first, with their answer-change counts and a ``state`` (status, or 'killed')."""
    runs = store.runs(job, limit)
    changes: dict[int, dict[str, int]] = {}
    if runs and store.has_column("answers", "change"):
        changes = store.change_counts([r["run_id"] for r in runs])
    for run in runs:
        run["state"] = display_status(run)
        run["changes"] = changes.get(run["run_id"], {})
    return runs


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _took(run: dict[str, Any]) -> str:
    if not run.get("finished_at") or not run.get("started_at"):
        return "-"
    seconds = (run["finished_at"] - run["started_at"]).total_seconds()
    if seconds < 120:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.0f}m" if seconds < 7200 else f"{seconds / 3600:.1f}h"


def _change_summary(changes: dict[str, int]) -> str:
    parts = [f"{changes[k]} {LABELS[k]}" for k in (*REPORTABLE, REWORDED) if changes.get(k)]
    if parts:
        return ", ".join(parts)
    return "none" if changes else "-"


def render_runs(runs: Sequence[dict[str, Any]]) -> str:
    if not runs:
        return "No runs."
    header = ("run", "job", "status", "started (UTC)", "took", "answered", "grounded", "n.e.i.", "failed", "changes",
              "exit", "reason")
    table = [header]
    for r in runs:
        status = r["state"] + (" (dry run)" if r.get("dry_run") else "") + (
            f" (resumed ×{r['resumed']})" if r.get("resumed") else "")
        table.append((
            str(r["run_id"]), r["job_name"], status, _when(r["started_at"]), _took(r),
            f"{r['answered'] or 0}/{r['questions'] or 0}", str(r["grounded"] or 0), str(r["not_enough_info"] or 0),
            str(r["failed"] or 0), "-" if r.get("dry_run") else _change_summary(r["changes"]),
            "-" if r.get("exit_code") is None else str(r["exit_code"]), _one_line(r.get("reason") or "", 80),
        ))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table)


def runs_json(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = ("run_id", "job_name", "job_file", "job_hash", "started_at", "finished_at", "state", "status", "dry_run",
            "questions", "answered", "grounded", "not_enough_info", "failed", "crawl_run_id", "previous_run_id",
            "resumed", "answerer", "model", "method", "pid", "notes", "changes", "phase", "exit_code", "reason")
    return [{k: r.get(k) for k in keys} for r in runs]


# --------------------------------------------------------------------------------------------
# Rendering a comparison


def _one_line(text: Any, limit: int = 400) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _answer_text(row: dict[str, Any] | None) -> str:
    if row is None:
        return "(not asked)"
    if row.get("error"):
        return f"failed: {md_text(_one_line(row['error'], 200))}"
    return md_text(_one_line(row.get("answer"))) or EMPTY_ANSWER


def _quotes(row: dict[str, Any] | None) -> list[str]:
    if row is None:
        return []
    return [md_text(_one_line(c.get("quote"), 200)) for c in citations_of(row) if c.get("valid") and c.get("quote")]


def _side(label: str, row: dict[str, Any] | None) -> list[str]:
    value = _stored_value(row) if row is not None and row.get("value_type") not in (None, "text") else None
    lines = [f"  - {label}: {_answer_text(row)}" + (f" (value: {md_text(value_text(value))})" if value is not None else "")]
    lines += [f"    “{q}”" for q in _quotes(row)]
    return lines


ANSWER_SECTIONS = (
    (CHANGED, "Changed"),
    (NEW, "New"),
    (NO_LONGER_ANSWERED, "No longer answered"),
    (REWORDED, "Reworded (same quotes and verdict, other words)"),
)
# Listed by question id only: nothing the answer says changed.
SAME_SECTIONS = ((EVIDENCE_MOVED, "Same (evidence moved: the quoted sections were edited elsewhere)"),
                 (UNCHANGED, "Same"))
PAGE_SECTIONS = ((PAGE_CHANGED, "Changed"), (PAGE_NEW, "New"), (PAGE_GONE, "Gone"))


def _behind(diff: RunDiff, change: AnswerChange) -> str:
    pages = diff.pages_behind(change)
    if not pages:
        return "    behind it: no page it cites changed" if diff.pages_recorded else ""
    return "    behind it: " + ", ".join(f"<{md_url(p.url)}> {p.change}" + (f" ({md_text(p.reason)})" if p.reason else "")
                                         for p in pages)


def render_diff(diff: RunDiff, *, heading: str = "#", between: bool = False) -> list[str]:
    """Markdown lines: what changed in the answers, then in the pages.

    Sections use ``heading`` (the report's answers sit under level-2 headings of their own). Titles
    say "since run A" (a run's report) or, with ``between``, "from run A to run B" (`webqa diff`). Each
    changed question shows its answer before and now and the page changes behind it.
    """
    b = diff.run_b["run_id"]
    lines: list[str] = []
    if diff.run_a is None:
        lines += [f"{heading} What changed", "",
                  f"No earlier successful run of job {diff.run_b['job_name']} to compare with: "
                  f"every answer is new ({len(diff.answers)}).", ""]
    else:
        a = diff.run_a["run_id"]
        title = f"What changed {_span(diff) if between else f'since run {a}'}"
        counts = diff.counts()
        lines += [f"{heading} {title}", ""]
        lines.append(f"Answers of run {b} against run {a} ({_when(diff.run_a['started_at'])} UTC): "
                     + ", ".join(f"{counts[k]} {LABELS[k]}" for k in (CHANGED, NEW, NO_LONGER_ANSWERED, REWORDED,
                                                                       EVIDENCE_MOVED, UNCHANGED)) + ".")
        lines.append("")
        for kind, label in ANSWER_SECTIONS:
            items = [c for c in diff.answers if c.change == kind]
            if not items:
                continue
            lines += [f"**{label}** ({len(items)}):", ""]
            for c in items:
                note = edited(c.before, c.after)
                lines.append(f"- **{c.question_id}**: {c.question}" + (f" ({md_text(note)})" if note else ""))
                if kind != NEW:
                    lines += _side(f"before (run {a})", c.before)
                lines += _side(f"now (run {b})", c.after)
                if kind != NEW and (behind := _behind(diff, c)):
                    lines.append(behind)
            lines.append("")
        for kind, label in SAME_SECTIONS:
            same = [c.question_id + (f" ({md_text(note)})" if (note := edited(c.before, c.after)) else "")
                    for c in diff.answers if c.change == kind]
            if same:
                lines += [f"**{label}** ({len(same)}): {', '.join(same)}", ""]
        missing = [c.question_id for c in diff.answers if c.change == NOT_ASKED]
        if missing:
            lines += [f"**Not asked in run {b}** ({len(missing)}): {', '.join(missing)}", ""]
    lines += render_page_changes(diff, heading=heading, between=between)
    return lines


def _span(diff: RunDiff) -> str:
    assert diff.run_a is not None
    return f"from run {diff.run_a['run_id']} to run {diff.run_b['run_id']}"


def render_page_changes(diff: RunDiff, *, heading: str = "#", between: bool = False) -> list[str]:
    if diff.run_a is None:
        n = len(diff.pages)
        return [f"{heading} Pages", "", f"{n} page{'s' if n != 1 else ''} recorded for the next comparison.", ""]
    a = diff.run_a["run_id"]
    lines = [f"{heading} Page changes {_span(diff) if between else f'since run {a}'}", ""]
    if not diff.pages_recorded:
        return lines + ["No page snapshot for one of the runs (recorded since webqa schema 2).", ""]
    counts = diff.page_counts()
    lines += [", ".join(f"{counts[k]} {label.lower()}" for k, label in (*PAGE_SECTIONS, (PAGE_UNCHANGED, "Unchanged")))
              + ".", ""]
    for kind, label in PAGE_SECTIONS:
        items = [p for p in diff.pages if p.change == kind]
        if not items:
            continue
        lines += [f"**{label}** ({len(items)}):", ""]
        for p in items:
            cited = f"cited by {', '.join(p.cited_by)}" if p.cited_by else "not cited"
            lines.append(f"- <{md_url(p.url)}> — {md_text(p.reason) + '; ' if p.reason else ''}{cited}")
        lines.append("")
    unchanged = [p for p in diff.pages if p.change == PAGE_UNCHANGED]
    if unchanged:
        lines += [f"**Unchanged** ({len(unchanged)}): " + ", ".join(f"<{md_url(p.url)}>" for p in unchanged), ""]
    return lines


def _answer_json(row: dict[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {
        "run_id": row["run_id"], "answer_id": row["answer_id"], "answer": row.get("answer"), "error": row.get("error"),
        "not_enough_information": row.get("not_enough_info"), "grounded": row.get("grounded"),
        "type": row.get("value_type") or "text", "value": _stored_value(row), "answered": row.get("answered"),
        "citations": [{k: c.get(k) for k in ("source", "quote", "url", "chunk_id", "valid")} for c in citations_of(row)],
    }


def _stored_value(row: dict[str, Any]) -> Any:
    try:
        return json.loads(row["value"]) if row.get("value") is not None else None
    except (TypeError, ValueError):
        return None


def diff_json(diff: RunDiff) -> dict[str, Any]:
    return {
        "run_a": diff.run_a["run_id"] if diff.run_a else None,
        "run_b": diff.run_b["run_id"],
        "job": diff.run_b["job_name"],
        "counts": diff.counts(),
        "changed": diff.changed,
        "answers": [{"question_id": c.question_id, "question": c.question, "change": c.change,
                     "before_question_id": c.before["question_id"] if c.before else None,
                     "before_question": c.before["question"] if c.before else None,
                     "before": _answer_json(c.before), "after": _answer_json(c.after),
                     "pages_behind": [p.url for p in diff.pages_behind(c)]} for c in diff.answers],
        "pages_recorded": diff.pages_recorded,
        "page_counts": diff.page_counts(),
        "pages": [{"url": p.url, "change": p.change, "before_hash": p.before_hash, "after_hash": p.after_hash,
                   "fetched_at": p.fetched_at, "cited_by": p.cited_by, "reason": p.reason} for p in diff.pages],
    }


def change_line(diff: RunDiff, limit: int = 5) -> str:
    """One phrase for the run's summary line, naming the questions whose answers changed."""
    if diff.run_a is None:
        return "first run of the job"
    counts = diff.counts()
    parts = []
    for kind in (CHANGED, NEW, NO_LONGER_ANSWERED, REWORDED):
        ids = [c.question_id for c in diff.answers if c.change == kind]
        named = f" ({', '.join(ids[:limit])}{f' and {len(ids) - limit} more' if len(ids) > limit else ''})" if ids else ""
        parts.append(f"{len(ids)} {LABELS[kind]}{named}")
    same = counts[UNCHANGED] + counts[EVIDENCE_MOVED]
    moved = f" ({counts[EVIDENCE_MOVED]} with evidence moved)" if counts[EVIDENCE_MOVED] else ""
    return f"since run {diff.run_a['run_id']}: {', '.join(parts)}, {same} unchanged{moved}"


__all__ = [
    "AnswerChange", "PageChange", "RunDiff", "compare_runs", "default_pair", "previous_for", "list_runs",
    "render_runs", "runs_json", "render_diff", "diff_json", "change_line", "evidence_from_row", "process_alive",
    "display_status", "NOT_ASKED",
]
