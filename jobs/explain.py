"""`webqa explain`: the article's debugging checklist for one stored answer.

Selected chunk ids and scores, which terms matched, what was sent and what dropped (and why), the
exact prompt, the raw reply and each citation check: everything needed to tell whether a wrong answer
was lost at selection, at packing, or by the model.
"""

from __future__ import annotations

import json
import textwrap

from jobs import first_stage
from jobs.errors import StoreError
from jobs.rerank import RerankTrail
from jobs.runstore import RunStore
from pipelines.store import PAGE_TEXT_QUERY


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


# Attempts per question: the first and the wider retry.
MAX_ATTEMPTS = 2


def _attempts_of(store: RunStore, a: dict) -> list[dict]:
    """Every attempt of the question ``a`` answers, in order (``a`` itself included).

    In a run, the attempts share run and question id. `webqa ask` stores no run: the attempts of
    one ask are the rows written one after the other by that process (the database admits one
    writer at a time), so they are found by their consecutive ids and attempt numbers.
    """
    if a["run_id"] is not None:
        return store.run_attempts(a["run_id"], a["question_id"])
    first = a["answer_id"] - (a["attempt"] - 1)
    rows = store.ask_attempts(a["question_id"], a["question"], first, first + MAX_ATTEMPTS - 1)
    return [r for r in rows if r["answer_id"] - r["attempt"] == first - 1]


def source_summary(selections: list[dict]) -> list[str]:
    """One line per SOURCE that carries several ranked chunks (pieces of one page merged in page order)."""
    ranks: dict[int, list[int]] = {}
    urls: dict[int, str] = {}
    for s in selections:
        if s["sent"] and s["source_number"] is not None:
            ranks.setdefault(s["source_number"], []).append(s["rank"])
            urls.setdefault(s["source_number"], s["url"])
    return [f"SOURCE {n}: ranks {', '.join(map(str, sorted(r)))} merged in page order <{urls[n]}>"
            for n, r in sorted(ranks.items()) if len(r) > 1]


def sent_units(selections: list[dict], method: str | None, before: dict[str, int]) -> list[str]:
    """Each SOURCE of the prompt: which chunk leads it and why (method, scores, rank before and after a
    rerank), and which other chunks were merged into it."""
    units: dict[int, list[dict]] = {}
    for s in selections:
        if s["sent"] and s["source_number"] is not None:
            units.setdefault(s["source_number"], []).append(s)
    if not units:
        return []
    lines = ["Sent units (SOURCE n as numbered in the prompt; why each was sent):"]
    for number, rows in sorted(units.items()):
        lead = min(rows, key=lambda r: r["rank"])
        was = before.get(lead["chunk_id"], lead["rank"])
        rank = f"rank {lead['rank']}" + (f" (rank {was} before the rerank)" if was != lead["rank"] else "")
        scores = ", ".join(f"{name} {_fmt(lead[key], 4 if key == 'score' else 3)}"
                           for name, key in (("score", "score"), ("keyword", "keyword_score"), ("bm25", "bm25_score"),
                                             ("embedding", "embedding_score")) if lead[key] is not None)
        lines.append(f"SOURCE {number}: {lead['chunk_id']} {rank} by {method or '-'} ({scores}); "
                     f"{lead['heading_path'] or '(page top)'} <{lead['url']}>")
        for other in sorted(rows, key=lambda r: r["rank"]):
            if other is not lead:
                lines.append(f"    + merged: {other['chunk_id']} rank {other['rank']}, same page, in page order; "
                             f"{other['heading_path'] or '(page top)'}")
    return lines


def stored_trail(row: dict) -> RerankTrail:
    return RerankTrail(row["status"], list(row["before"] or []), list(row["after"] or []), error=row["error"],
                       model=row["model"], dropped=row["dropped"] or 0, appended=row["appended"] or 0,
                       prompt_tokens=row["prompt_tokens"], eval_tokens=row["eval_tokens"], seconds=row["seconds"])


def explain_answer(store: RunStore, answer_id: int, *, show_prompt: bool = True) -> str:
    a = store.answer(answer_id)
    if a is None:
        raise StoreError(f"no answer {answer_id} in {store.path}; answer ids are printed by `webqa ask` and in reports")
    rerank = store.rerank_of(answer_id)
    out = [*_heading(store, a, answer_id), *_answer_lines(a), *_selection_lines(store, a, answer_id, rerank),
           *_exchange_lines(store, answer_id, rerank, show_prompt)]
    out.append("Next: if the right chunk is not among the candidates, the loss is upstream — check the page "
               f"({PAGE_TEXT_QUERY}) and its chunks, or run `webqa eval` with expect phrases.")
    return "\n".join(out)


def _heading(store: RunStore, a: dict, answer_id: int) -> list[str]:
    """Which answer this is (run, question, attempt), how it was made, and why it was retried or failed."""
    siblings = _attempts_of(store, a)
    out: list[str] = []
    run = f"run {a['run_id']}" if a["run_id"] is not None else "webqa ask"
    out.append(f"Answer {answer_id} — {run}, question {a['question_id']}, attempt {a['attempt']} of {len(siblings)}"
               f"{' (final)' if a['final'] else ''}")
    for other in siblings:
        if other["answer_id"] != answer_id:
            out.append(f"  other attempt: {other['answer_id']} (attempt {other['attempt']}"
                       f"{', final' if other['final'] else ''})")
    out.append(f"Question: {a['question']}")
    out.append(f"Method: {a['method']}; answerer: {a['answerer']}; model: {a['model'] or '-'}; "
               f"host: {a.get('host') or '-'}; "
               f"latency: {_fmt(a['latency_s'], 2)} s; tokens: prompt {a['prompt_tokens'] or '-'}, reply {a['eval_tokens'] or '-'}")
    if a["retry_reason"]:
        out.append(f"Retried with a wider selection because: {a['retry_reason']}")
    if a["error"]:
        out.append(f"Error: {a['error']}")
    out.append("")
    return out


def _answer_lines(a: dict) -> list[str]:
    """Sections 1 and 2: the answer with its verdict, and each citation's check."""
    out = ["1. Answer", textwrap.indent(str(a["answer"]), "   ")]
    out.append(f"   confidence {a['confidence']}; grounded {'yes' if a['grounded'] else 'NO'}; "
               f"valid JSON {'-' if a['valid_json'] is None else 'yes' if a['valid_json'] else 'NO'}")
    if a.get("value_type") not in (None, "text"):  # a typed question: its checked value, or why it was voided
        out.append(f"   type {a['value_type']}; answered {'-' if a.get('answered') is None else 'yes' if a['answered'] else 'no'}; "
                   f"value {a.get('value') or '-'}" + (f" (not trusted: {a['value_problem']})" if a.get("value_problem") else ""))
    out.append("")
    out.append("2. Citation checks (source sent? quote found in it?)")
    citations = json.loads(a["citations"] or "[]")
    if not citations:
        out.append("   (no citations)")
    for c in citations:
        verdict = f"ok, matched {c.get('similarity', 1.0):.2f}" if c["valid"] else f"FAILED: {c['reason']}"
        out.append(f"   [{c['source']}] “{c['quote']}” — {verdict}")
        if c.get("url"):
            out.append(f"       {c.get('heading') or ''} <{c.get('link') or c['url']}>")
    out.append("")
    return out


def _selection_lines(store: RunStore, a: dict, answer_id: int, rerank: dict | None) -> list[str]:
    """Section 3: every candidate ranked, its scores, whether it was sent, and the rerank's moves."""
    selections = store.selections_of(answer_id)
    sent = sum(1 for s in selections if s["sent"])
    out = [f"3. Selection: {len(selections)} candidates ranked, {sent} sent "
           f"({sum(s['tokens'] or 0 for s in selections if s['sent'])} tokens)"]
    out.extend(f"   {line}" for line in first_stage.explain_line(a["method"], selections))
    out.extend(f"   {line}" for line in source_summary(selections))
    before = {chunk_id: i for i, chunk_id in enumerate((rerank or {}).get("before") or [], start=1)}
    if rerank is not None:
        out.append(f"   Rerank: {stored_trail(rerank).summary()}")
    out.extend(f"   {line}" for line in sent_units(selections, a["method"], before))
    out.append("   rank  score     keyword  bm25     embed    sent      chunk             heading / matched terms / reason")
    for s in selections:
        mark = f"SOURCE {s['source_number']}" if s["sent"] else "dropped"
        out.append(f"   {s['rank']:<5} {_fmt(s['score'], 4):<9} {_fmt(s['keyword_score'], 1):<8} {_fmt(s['bm25_score']):<8} "
                   f"{_fmt(s['embedding_score']):<8} {mark:<9} {s['chunk_id']:<17} {s['heading_path'] or s['url']}")
        terms = ", ".join(s["matched_terms"] or []) or "none"
        was = before.get(s["chunk_id"], s["rank"])
        moved = f"; rank {was} before the rerank" if was != s["rank"] else ""
        out.append(f"   {'':<70}matched: {terms}; {first_stage.without(s['reason'])}{moved}")
    out.append("")
    return out


def _exchange_lines(store: RunStore, answer_id: int, rerank: dict | None, show_prompt: bool) -> list[str]:
    """Sections 4 to 7: the prompts sent and the raw replies, the answer's and the rerank's."""
    out: list[str] = []
    prompt = store.prompt_of(answer_id)
    if prompt:
        if show_prompt:
            out.append(f"4. Prompt sent (template version {prompt['prompt_version']})")
            out.append(textwrap.indent(prompt["prompt"], "   | ", lambda _line: True))
            out.append("")
        out.append("5. Raw reply")
        out.append(textwrap.indent(prompt["raw_reply"] or "(none: answered without an LLM)", "   | ", lambda _l: True))
        out.append("")
    if rerank is not None and rerank["prompt"]:
        if show_prompt:
            out.append("6. Rerank prompt")
            out.append(textwrap.indent(rerank["prompt"], "   | ", lambda _line: True))
            out.append("")
        out.append("7. Rerank reply" if show_prompt else "6. Rerank reply")
        out.append(textwrap.indent(rerank["raw_reply"] or "(none)", "   | ", lambda _l: True))
        out.append("")
    return out
