"""`webqa explain`: the article's debugging checklist for one stored answer.

Selected chunk ids and scores, which terms matched, what was sent and what dropped (and why), the
exact prompt, the raw reply and each citation check: everything needed to tell whether a wrong answer
was lost at selection, at packing, or by the model.
"""

from __future__ import annotations

import json
import textwrap

from jobs.errors import StoreError
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


def explain_answer(store: RunStore, answer_id: int, *, show_prompt: bool = True) -> str:
    a = store.answer(answer_id)
    if a is None:
        raise StoreError(f"no answer {answer_id} in {store.path}; answer ids are printed by `webqa ask` and in reports")
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
    out.append("1. Answer")
    out.append(textwrap.indent(str(a["answer"]), "   "))
    out.append(f"   confidence {a['confidence']}; grounded {'yes' if a['grounded'] else 'NO'}; "
               f"valid JSON {'-' if a['valid_json'] is None else 'yes' if a['valid_json'] else 'NO'}")
    out.append("")
    out.append("2. Citation checks (source sent? quote found in it?)")
    citations = json.loads(a["citations"] or "[]")
    if not citations:
        out.append("   (no citations)")
    for c in citations:
        verdict = f"ok, matched {c.get('similarity', 1.0):.2f}" if c["valid"] else f"FAILED: {c['reason']}"
        out.append(f"   [{c['source']}] “{c['quote']}” — {verdict}")
        if c.get("url"):
            out.append(f"       {c.get('heading') or ''} <{c['url']}>")
    out.append("")
    selections = store.selections_of(answer_id)
    sent = sum(1 for s in selections if s["sent"])
    out.append(f"3. Selection: {len(selections)} candidates ranked, {sent} sent "
               f"({sum(s['tokens'] or 0 for s in selections if s['sent'])} tokens)")
    out.extend(f"   {line}" for line in source_summary(selections))
    out.append("   rank  score     keyword  bm25     embed    sent      chunk             heading / matched terms / reason")
    for s in selections:
        mark = f"SOURCE {s['source_number']}" if s["sent"] else "dropped"
        out.append(f"   {s['rank']:<5} {_fmt(s['score'], 4):<9} {_fmt(s['keyword_score'], 1):<8} {_fmt(s['bm25_score']):<8} "
                   f"{_fmt(s['embedding_score']):<8} {mark:<9} {s['chunk_id']:<17} {s['heading_path'] or s['url']}")
        terms = ", ".join(s["matched_terms"] or []) or "none"
        out.append(f"   {'':<70}matched: {terms}; {s['reason']}")
    out.append("")
    prompt = store.prompt_of(answer_id)
    if prompt:
        if show_prompt:
            out.append(f"4. Prompt sent (template version {prompt['prompt_version']})")
            out.append(textwrap.indent(prompt["prompt"], "   | ", lambda _line: True))
            out.append("")
        out.append("5. Raw reply")
        out.append(textwrap.indent(prompt["raw_reply"] or "(none: answered without an LLM)", "   | ", lambda _l: True))
        out.append("")
    out.append("Next: if the right chunk is not among the candidates, the loss is upstream — check the page "
               f"({PAGE_TEXT_QUERY}) and its chunks, or run `webqa eval` with expect phrases.")
    return "\n".join(out)
