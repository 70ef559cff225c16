"""Render answers: the JSON object of one question (shared by `ask --json` and the run's JSONL),
the Markdown report and the CSV."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from jobs.answer import Attempt, Outcome, candidate_dict, citation_records, selection_rows
from pipelines.redact import inert
from jobs.changes import EMPTY_ANSWER, LABELS
from jobs.markdown_text import md_text, md_url
from jobs.typed import AnswerType, value_text
from pipelines.formats import page_link


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    """One question as JSON: the selection in rank order, the exact prompt, and the answer if any."""
    selection = outcome.selection
    final = outcome.final
    result: dict[str, Any] = {
        "question_id": outcome.spec.id,
        "question": outcome.spec.question,
        "method": selection.method if selection else None,
        "method_used": selection.method_used if selection else None,
        "notice": outcome.notice,
        "error": outcome.error,
    }
    if selection is not None and final is not None:
        result["chunks"] = [
            {**row, "text": candidate.text}
            for row, candidate in zip(selection_rows(selection, final.packed, final.sources, final.evidence), selection.candidates)
        ]
        result["prompt"] = final.prompt
        pages = {u.lead.chunk_id: u.chunks[0].page for u in final.evidence.units} if final.evidence else {}  # where its text starts
        result["sources"] = [
            {"number": s.number, "chunk_id": s.chunk_id, "url": s.url, "link": page_link(s.url, pages.get(s.chunk_id)),
             "heading_path": s.heading} for s in final.sources
        ]
    else:
        result["chunks"] = []
        result["prompt"] = None
        result["sources"] = []
    if final is not None and final.data is not None:
        result.update(_answer_fields(final))
        result.update(_typed_fields(outcome.spec.type, final))
        result["attempts"] = len(outcome.attempts)
    elif final is not None and final.answer_id is not None:
        # A failed attempt shows no answer text, but its id leads to the raw reply in `webqa explain`.
        result["answer_id"] = final.answer_id
    if final is not None and final.data is None and final.host is not None:
        result["host"] = final.host  # which server failed it
    return result


def _answer_fields(attempt: Attempt) -> dict[str, Any]:
    data = attempt.data or {}
    validation = attempt.validation
    citations = [
        {"source": c["source"], "quote": c["quote"], "valid": c["valid"], "reason": c["reason"], "url": c["url"],
         "link": c.get("link"), "heading_path": c["heading"], "chunk_id": c["chunk_id"], "matched": c.get("matched")}
        for c in citation_records(attempt)
    ]
    return {
        "answer_id": attempt.answer_id,
        "answer": data.get("answer"),
        "confidence": data.get("confidence"),
        "citations": citations,
        "grounded": validation.grounded if validation else False,
        "not_enough_information": validation.not_enough_information if validation else None,
        "answerer": attempt.answerer,
        "host": attempt.host,
        "attempt": attempt.number,
        "retry_reason": attempt.retry_reason,
        "latency_s": attempt.latency_s,
    }


def _typed_fields(atype: AnswerType, attempt: Attempt) -> dict[str, Any]:
    typed = attempt.typed
    return {"type": str(atype), "answered": typed.answered if typed else None,
            "value": typed.value if typed else None, "value_problem": typed.problem if typed else None}


def _row_typed_fields(row: dict[str, Any]) -> dict[str, Any]:
    """The typed fields of a stored answer (rows of a webqa before schema 10 have none: text, answered read
    from the verdict)."""
    try:
        value = json.loads(row["value"]) if row.get("value") is not None else None
    except (TypeError, ValueError):
        value = None
    answered = row.get("answered")
    if answered is None:
        answered = not row.get("not_enough_info")
    return {"type": row.get("value_type") or "text", "answered": bool(answered), "value": value,
            "value_problem": row.get("value_problem")}


def write_jsonl_line(stream: TextIO, obj: dict[str, Any]) -> None:
    stream.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")
    stream.flush()


def answer_row_json(row: dict[str, Any], attempts: int = 1) -> dict[str, Any]:
    """The JSON object of a question rebuilt from its stored final answer (``answers`` row).

    For a resumed run: questions answered before the interruption are reported from the database
    when the run's JSONL line is missing. The selection and prompt stay in the database
    (`webqa explain ANSWER_ID`).
    """
    result: dict[str, Any] = {
        "question_id": row["question_id"], "question": row["question"], "method": row.get("method"),
        "method_used": row.get("method"), "notice": None, "error": row.get("error"),
        "chunks": [], "prompt": None, "sources": [],
    }
    if row.get("error") is not None and row.get("host"):
        result["host"] = row["host"]
    if row.get("error") is None and row.get("answer") is not None:
        try:
            stored = json.loads(row.get("citations") or "[]")
        except ValueError:
            stored = []
        result.update({
            "answer_id": row["answer_id"], "answer": row.get("answer"), "confidence": row.get("confidence"),
            "citations": [{"source": c.get("source"), "quote": c.get("quote"), "valid": c.get("valid"),
                           "reason": c.get("reason"), "url": c.get("url"), "link": c.get("link") or c.get("url"),
                           "heading_path": c.get("heading"),
                           "chunk_id": c.get("chunk_id"), "matched": c.get("matched")} for c in stored],
            "grounded": bool(row.get("grounded")), "not_enough_information": row.get("not_enough_info"),
            **_row_typed_fields(row),
            "answerer": row.get("answerer"), "host": row.get("host"), "attempt": row.get("attempt"),
            "retry_reason": row.get("retry_reason"),
            "latency_s": row.get("latency_s"), "attempts": attempts,
        })
    return result


def markdown_report(title: str, summary_lines: Sequence[str], results: Iterable[dict[str, Any]],
                    preamble: Sequence[str] = ()) -> str:
    """The report as one string (see :func:`write_markdown_report`)."""
    out = io.StringIO()
    write_markdown_report(out, title, summary_lines, results, preamble)
    return out.getvalue()


def write_markdown_report(out: TextIO, title: str, summary_lines: Sequence[str], results: Iterable[dict[str, Any]],
                          preamble: Sequence[str] = ()) -> None:
    """The report: ``preamble`` (what changed, as Markdown lines) first, then the summary and the answers.

    With a preamble, the answers stand under a level-1 "Answers" heading; each question is a level-2
    heading either way. Written question by question, so a run of any size needs the memory of one.
    """
    lines = [f"# {title}", ""]
    if preamble:
        lines += [*preamble]
        if lines[-1] != "":
            lines.append("")
        lines += ["# Answers", ""]
    lines += [f"- {line}" for line in summary_lines]
    lines.append("")
    # Answers, quotes, headings and URLs come from outside: a control character is shown, never obeyed.
    out.write(inert("\n".join(lines)))
    for obj in results:
        out.write(inert("\n" + "\n".join(_answer_section(obj))))


def _answer_section(obj: dict[str, Any]) -> list[str]:
    lines = [f"## {obj['question_id']}: {obj['question']}", ""]
    if obj.get("error"):
        where = f" (answer id {obj['answer_id']}: `webqa explain {obj['answer_id']}`)" if obj.get("answer_id") else ""
        host = f" (Ollama host {obj['host']})" if obj.get("host") else ""
        return [*lines, f"**Failed:** {md_text(obj['error'], one_line=True)}{host}{where}", ""]
    if obj.get("answer") is None:
        return [*lines, "_No answer (dry run)._", ""]
    answer = str(obj["answer"]).strip()
    # The model's words, led by the pages: text, never markup. An empty reply is said, as `webqa history` says it.
    lines += _quoted(md_text(answer)) if answer else [f"_{EMPTY_ANSWER}_"]
    lines.append("")
    if obj.get("type") not in (None, "text") and obj.get("answered"):
        problem = f" (not trusted: {md_text(obj['value_problem'], one_line=True)})" if obj.get("value_problem") else ""
        lines += [f"Value ({obj['type']}): **{md_text(value_text(obj.get('value')), one_line=True)}**{problem}", ""]
    # "Not enough information" claims nothing: no confidence or grounding to show (the summary counts it apart).
    verdict = "**Not enough information**" if obj.get("not_enough_information") else (
        f"Confidence: **{obj.get('confidence')}** · grounded: **{'yes' if obj.get('grounded') else 'no'}**")
    lines.append(f"{verdict} · answerer: {obj.get('answerer')}{f' on {host}' if (host := obj.get('host')) else ''} · "
                 f"attempt {obj.get('attempt')} · answer id {obj.get('answer_id')}")
    lines.append("")
    if obj.get("change"):
        change = str(obj["change"])
        lines += [f"Change since the previous run: **{LABELS.get(change, change.replace('_', ' '))}**", ""]
    if obj.get("citations"):
        stale = {s["url"]: s.get("last_fetched_at") for s in obj.get("sources", []) if s.get("stale")}
        lines.append("Sources:")
        for c in obj["citations"]:
            mark = "✓" if c["valid"] else f"✗ {md_text(c['reason'], one_line=True)}"
            label, link = md_text(c["heading_path"] or c["url"], one_line=True), md_url(c.get("link") or c["url"])
            where = f"[{label}]({link})" if c.get("url") else "(unknown source)"
            if c.get("url") in stale:
                where += f" (stale: last fetched {stale[c['url']]})"
            lines.append(f"- [{c['source']}] {where} — “{md_text(c['quote'], one_line=True)}” {mark}")
        lines.append("")
    return lines


def _quoted(text: str) -> list[str]:
    """``text`` as a blockquote, its paragraphs kept: every line of it starts with ">", so none can pass for one
    of the report's own lines (a "Confidence:" line, "Sources:")."""
    return [f"> {line}" if line else ">" for line in text.split("\n")]


CSV_FIELDS = ("question_id", "question", "answer", "value", "answered", "type", "confidence", "grounded", "answerer",
              "host", "attempt", "answer_id", "citations", "error", "change")


def write_csv(path: Path, results: Iterable[dict[str, Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for obj in results:
            row = dict(obj)
            if isinstance(row.get("value"), (bool, list)):
                row["value"] = json.dumps(row["value"], ensure_ascii=False)  # true/false and ["a", "b"], as in JSONL
            row["citations"] = "; ".join(f"[{c['source']}] {c.get('link') or c.get('url') or ''}" for c in obj.get("citations", []))
            writer.writerow({key: csv_cell(value) for key, value in row.items()})


# A spreadsheet runs a cell that starts with one of these as a formula (=HYPERLINK(…), +cmd|…, @SUM(…)).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A CSV value that a spreadsheet shows as text: control characters escaped, a formula start quoted
    with a leading apostrophe (OWASP's advice); numbers and booleans stay as they are."""
    if not isinstance(value, str):
        return value
    text = inert(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


__all__ = ["outcome_json", "answer_row_json", "write_jsonl_line", "markdown_report", "write_markdown_report", "write_csv", "candidate_dict"]
