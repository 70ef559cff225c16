"""`webqa eval`: where is the answer lost? The coverage funnel for questions with known answers.

For each question with ``expect`` phrases (and ideally the ``url`` that answers it) the funnel asks, in
order: is a phrase in the fetched HTML? in the cleaned text? in which chunks? at which rank does the
first answer-bearing chunk come for each selection method? and, the headline: is a phrase inside the
evidence really sent to the model at the job's packing settings (first attempt, and the wider retry)?
The summary gives answer-in-prompt, recall@1/3/5 and MRR per method and how many questions were lost at
cleaning, at chunking, at selection and at packing.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from html import unescape
from typing import Any

from jobs.answer import AskSettings, packed_sources, prompt_costed
from jobs.prompt import SOURCE_SEPARATOR, source_block
from jobs.second_stage import SecondStage
from jobs.select import EMBEDDING_METHODS, Selector
from pipelines.chunk import estimate_tokens
from pipelines.store import Store

KS = (1, 3, 5)
_DROP = re.compile(r"<(script|style)\b.*?</\1\s*>|<!--.*?-->", re.S | re.I)
# Inline elements join their text to the neighbours' ("(default: <code>True</code>)" reads "(default: True)");
# every other tag separates words.
_INLINE_TAGS = re.compile(
    r"</?(?:a|abbr|b|bdi|bdo|cite|code|data|del|dfn|em|font|i|ins|kbd|mark|q|s|samp|small|span|strike|strong|"
    r"sub|sup|time|tt|u|var|wbr)\b[^>]*>",
    re.I,
)
_TAGS = re.compile(r"<[^>]+>")


def normalise(text: str) -> str:
    """Case- and whitespace-insensitive form used to look for expected phrases."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = text.replace("\u2018", "'").replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"')
    return " ".join(text.split())


def html_text(html: str) -> str:
    """All text of an HTML page, navigation included: "was it fetched at all?" must not depend on cleaning."""
    return unescape(_TAGS.sub(" ", _INLINE_TAGS.sub("", _DROP.sub(" ", html))))


def contains_any(text: str, phrases: Sequence[str]) -> bool:
    haystack = normalise(text)
    return any(normalise(p) in haystack for p in phrases if p.strip())


@dataclass(frozen=True)
class EvalQuestion:
    id: str
    question: str
    expect: tuple[str, ...]
    url: str | None = None
    urls: tuple[str, ...] | None = None
    # Other pages that answer it as well: a chunk there with an expect phrase is also a right chunk.
    also_urls: tuple[str, ...] = ()


@dataclass
class QuestionFunnel:
    question: EvalQuestion
    in_html: bool | None  # None: no url given (or no HTML kept); False also when the page is not stored
    in_text: bool | None
    answer_chunks: list[str]
    ranks: dict[str, int | None] = field(default_factory=dict)  # method → 1-based rank of first answer chunk
    best_scores: dict[str, float | None] = field(default_factory=dict)
    # method → the best embedding cosine among its candidates (embedding and hybrid only)
    best_similarity: dict[str, float | None] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    # method → is an expect phrase inside a source block sent (first attempt / the wider retry)?
    in_prompt: dict[str, bool] = field(default_factory=dict)
    in_prompt_wider: dict[str, bool] = field(default_factory=dict)
    # method → estimated tokens of the source blocks sent on the first attempt, and how many sources
    prompt_tokens: dict[str, int] = field(default_factory=dict)
    sources_sent: dict[str, int] = field(default_factory=dict)
    # method → the answer's rank in the order packing used (after a second stage; else the pool's rank),
    # the rank of the last candidate packed (the cut), and whether an answer chunk was packed at all
    packing_ranks: dict[str, int | None] = field(default_factory=dict)
    cut_ranks: dict[str, int | None] = field(default_factory=dict)
    packed_answer: dict[str, bool] = field(default_factory=dict)

    @property
    def answerable(self) -> bool:
        return bool(self.question.expect)

    def lost_upstream(self) -> str | None:
        """The stage before selection that lost the answer (fetch, cleaning, chunking), or None."""
        if self.in_html is False:
            return "fetch"
        if self.in_text is False:
            return "cleaning"
        if not self.answer_chunks:
            return "chunking"
        return None

    def lost_at(self, method: str, k: int = 5) -> str | None:
        """The first stage that lost the answer for this method, or None if it is in the top k."""
        if not self.answerable:
            return None
        rank = self.ranks.get(method)
        return self.lost_upstream() or ("selection" if rank is None or rank > k else None)

    def lost_before_prompt(self, method: str) -> str | None:
        """The stage that kept the answer out of the first prompt, or None when it was sent.

        "packing": an answer chunk was ranked (anywhere in the pool) but not sent at the job's budget.
        """
        if not self.answerable or self.in_prompt.get(method, False):
            return None
        return self.lost_upstream() or ("packing" if self.ranks.get(method) is not None else "selection")

    def prompt_loss(self, method: str) -> str | None:
        """Where the answer was lost on its way into the first prompt, or None when it got there:
        an upstream stage (fetch, cleaning, chunking); ``not in pool`` (no answer chunk among the ranked
        candidates); ``below cut`` (ranked, but below the last candidate the budget took); ``truncated``
        (an answer chunk was packed, but the part sent does not hold the phrase: a passage left it out)."""
        if not self.answerable or self.in_prompt.get(method, False):
            return None
        return prompt_loss(self.lost_upstream(), self.ranks.get(method), self.packed_answer.get(method, False))


@dataclass(frozen=True)
class Packing:
    """The packing settings a job answers with (selection.top_k, token_budget; the retry multiplies both)."""

    top_k: int = AskSettings.top_k
    token_budget: int = AskSettings.token_budget
    retry_factor: int = AskSettings.retry_factor
    merge: bool = AskSettings.merge_pages


LOSSES = ("fetch", "cleaning", "chunking", "not in pool", "below cut", "truncated")


def prompt_loss(upstream: str | None, pool_rank: int | None, packed: bool) -> str:
    """Classify a question whose answer is not in the prompt (see ``QuestionFunnel.prompt_loss``)."""
    if upstream:
        return upstream
    if pool_rank is None:
        return "not in pool"
    return "truncated" if packed else "below cut"


def evidence_tokens(sources: Sequence[Any]) -> int:
    """Estimated tokens of the source blocks as the prompt carries them (separators included)."""
    return estimate_tokens(SOURCE_SEPARATOR.join(source_block(s) for s in sources)) if sources else 0


def answer_in_sources(sources: Sequence[Any], phrases: Sequence[str]) -> bool:
    """Is a phrase inside one of the source blocks exactly as the prompt carries them?"""
    return any(contains_any(source_block(s), phrases) for s in sources)


def evaluate(selector: Selector, store: Store, questions: Sequence[EvalQuestion], methods: Sequence[str],
             packing: Packing = Packing(), stage: SecondStage | None = None) -> list[QuestionFunnel]:
    funnels = []
    for q in questions:
        in_html = in_text = None
        if q.url and q.expect:
            row = store.page_text_and_html(q.url)
            if row is None:
                # The page was never stored: the answer is lost at fetch, not at chunking.
                in_html = in_text = False
            else:
                in_text = contains_any(row[0] or "", q.expect)
                in_html = contains_any(html_text(row[1] or ""), q.expect) if row[1] is not None else None
        answer_chunks: list[str] = []
        if q.expect:
            for chunk_id, heading, text in store.chunk_texts([q.url, *q.also_urls] if q.url else None):
                if contains_any(text, q.expect):
                    answer_chunks.append(chunk_id)
        funnel = QuestionFunnel(q, in_html, in_text, answer_chunks)
        wanted = set(answer_chunks)
        for method in methods:
            selection = selector.select(q.question, method, urls=list(q.urls) if q.urls else None)
            if selection.notice:
                funnel.notices.append(selection.notice)
            funnel.best_scores[method] = selection.candidates[0].score if selection.candidates else None
            if selection.method_used in EMBEDDING_METHODS:
                funnel.best_similarity[method] = selection.best_similarity
            funnel.ranks[method] = next((c.rank for c in selection.candidates if c.chunk_id in wanted), None)
            # What the answerer really sends: the same costing, packing and numbering (jobs/answer.py).
            costed = prompt_costed(selection.candidates)
            if stage is not None:
                staged, _trail = stage.apply(q.question, costed,
                                             embeddings=selection.method_used in EMBEDDING_METHODS)
                costed = prompt_costed(staged)
            funnel.packing_ranks[method] = next((c.rank for c in costed if c.chunk_id in wanted), None)
            first = packed_sources(costed, top_k=packing.top_k, token_budget=packing.token_budget, merge=packing.merge)
            funnel.prompt_tokens[method] = evidence_tokens(first.sources)
            funnel.sources_sent[method] = len(first.sources)
            funnel.cut_ranks[method] = max((c.rank for c in first.packed.sent), default=None)
            funnel.packed_answer[method] = any(c.chunk_id in wanted for c in first.packed.sent)
            wider = packed_sources(costed, top_k=packing.top_k * packing.retry_factor,
                                   token_budget=packing.token_budget * packing.retry_factor, merge=packing.merge)
            if q.expect:
                funnel.in_prompt[method] = answer_in_sources(first.sources, q.expect)
                funnel.in_prompt_wider[method] = answer_in_sources(wider.sources, q.expect)
        funnels.append(funnel)
    return funnels


def summarise(funnels: Sequence[QuestionFunnel], methods: Sequence[str], k: int = 5) -> dict[str, dict[str, Any]]:
    answerable = [f for f in funnels if f.answerable]
    n = len(answerable) or 1
    summary: dict[str, dict[str, Any]] = {}
    for method in methods:
        ranks = [f.ranks.get(method) for f in answerable]
        row: dict[str, Any] = {f"recall@{k}": round(sum(1 for r in ranks if r is not None and r <= k) / n, 3) for k in KS}
        row["mrr"] = round(sum(1.0 / r for r in ranks if r) / n, 3)
        row["answer_in_prompt"] = round(sum(1 for f in answerable if f.in_prompt.get(method)) / n, 3)
        row["answer_in_prompt_wider"] = round(sum(1 for f in answerable if f.in_prompt_wider.get(method)) / n, 3)
        tokens = [f.prompt_tokens[method] for f in funnels if method in f.prompt_tokens]
        row["evidence_tokens_median"] = _median(tokens)
        row["evidence_tokens_mean"] = round(sum(tokens) / len(tokens), 1) if tokens else None
        row["sources_median"] = _median([f.sources_sent[method] for f in funnels if method in f.sources_sent])
        row["lost_at_packing"] = sum(1 for f in answerable if f.lost_before_prompt(method) == "packing")
        losses = [f.prompt_loss(method) for f in answerable]
        row["prompt_losses"] = {loss: losses.count(loss) for loss in LOSSES}
        row["answer_in_top_40"] = round(sum(1 for r in ranks if r is not None and r <= 40) / n, 3)
        for stage in ("fetch", "cleaning", "chunking", "selection"):
            row[f"lost_at_{stage}"] = sum(1 for f in answerable if f.lost_at(method, k) == stage)
        unanswerable = [f.best_scores.get(method) for f in funnels if not f.answerable]
        answered = [f.best_scores.get(method) for f in answerable]
        row["questions"] = len(answerable)
        row["best_score_answerable_median"] = _median(answered)
        row["best_score_unanswerable_median"] = _median(unanswerable)
        floor = similarity_floor(funnels, method)
        if floor is not None:
            row["min_similarity"] = floor
        summary[method] = row
    return summary


def similarity_floor(funnels: Sequence[QuestionFunnel], method: str) -> dict[str, Any] | None:
    """The highest ``min_similarity`` that answers no answerable question "Not enough information" unasked.

    Returns the suggested value (the lowest best similarity among answerable questions, rounded down to
    two decimals) and how many unanswerable questions it would answer without the LLM; None when the
    method has no similarities or the set has no answerable question.
    """
    answerable = [f.best_similarity.get(method) for f in funnels if f.answerable]
    unanswerable = [f.best_similarity.get(method) for f in funnels if not f.answerable]
    known = [s for s in answerable if s is not None]
    if not known or len(known) < len(answerable):
        return None
    value = math.floor(min(known) * 100) / 100
    return {
        "value": value,
        "unanswerable_skipped": sum(1 for s in unanswerable if s is not None and s < value),
        "unanswerable": len(unanswerable),
        "answerable_lowest": round(min(known), 4),
        "unanswerable_highest": round(max((s for s in unanswerable if s is not None), default=0.0), 4) if unanswerable else None,
    }


def _median(values: Sequence[float | None]) -> float | None:
    present = sorted(v for v in values if v is not None)
    if not present:
        return None
    middle = len(present) // 2
    value = present[middle] if len(present) % 2 else (present[middle - 1] + present[middle]) / 2
    return round(value, 4)


def render_table(funnels: Sequence[QuestionFunnel], summary: dict[str, dict[str, Any]], methods: Sequence[str]) -> str:
    width = max([len("question")] + [len(f.question.id) for f in funnels])
    col = max([9] + [len(m) + 1 for m in methods])
    lines = ["Funnel per question (html → text → chunks → rank per method; '-' = not in the candidates; "
             "lost at: the stage per method, method=stage):", ""]
    header = f"{'question':<{width}} {'html':<5} {'text':<5} {'chunks':<6} " + " ".join(f"{m:<{col}}" for m in methods) + " lost at"
    lines.append(header)
    for f in funnels:
        def yn(v: bool | None) -> str:
            return "-" if v is None else "yes" if v else "NO"
        ranks = " ".join(f"{(str(f.ranks.get(m)) if f.ranks.get(m) else '-'):<{col}}" for m in methods)
        if not f.answerable:
            lost = "(unanswerable)"
        else:
            stages = {m: f.lost_at(m) for m in methods}
            distinct = {s for s in stages.values() if s}
            if not distinct:
                lost = ""
            elif len(distinct) == 1 and all(stages.values()) and next(iter(distinct)) != "selection":
                lost = next(iter(distinct))  # lost before selection: the same stage for every method
            else:
                lost = " ".join(f"{m}={s}" for m, s in stages.items() if s)
        lines.append(f"{f.question.id:<{width}} {yn(f.in_html):<5} {yn(f.in_text):<5} {len(f.answer_chunks):<6} {ranks} {lost}".rstrip())
    lines += ["", "In prompt: an expect phrase is inside the evidence sent at the job's packing settings (first attempt; "
              "wider: the retry's). Evidence tokens: median per question, first attempt.",
              f"{'method':<10} {'in prompt':>9} {'wider':>6} {'tokens':>7} {'R@1':>6} {'R@3':>6} {'R@5':>6} {'MRR':>6}  "
              "lost at: fetch cleaning chunking selection packing"]
    for m in methods:
        s = summary[m]
        tokens = "-" if s["evidence_tokens_median"] is None else f"{s['evidence_tokens_median']:.0f}"
        lines.append(f"{m:<10} {s['answer_in_prompt']:>9.3f} {s['answer_in_prompt_wider']:>6.3f} {tokens:>7} "
                     f"{s['recall@1']:>6.3f} {s['recall@3']:>6.3f} {s['recall@5']:>6.3f} {s['mrr']:>6.3f}  "
                     f"{s['lost_at_fetch']:>14} {s['lost_at_cleaning']:>8} {s['lost_at_chunking']:>8} "
                     f"{s['lost_at_selection']:>9} {s['lost_at_packing']:>7}")
    lines += loss_lines(funnels, summary, methods)
    for m in methods:
        floor = summary[m].get("min_similarity")
        if floor and floor["unanswerable"]:
            lines.append(
                f"{m}: selection.min_similarity {floor['value']:.2f} keeps every answerable question "
                f"(lowest best similarity {floor['answerable_lowest']:.3f}) and answers "
                f"{floor['unanswerable_skipped']} of {floor['unanswerable']} unanswerable questions without the LLM "
                f"(their highest: {floor['unanswerable_highest']:.3f})"
            )
    return "\n".join(lines)


def loss_lines(funnels: Sequence[QuestionFunnel], summary: dict[str, dict[str, Any]], methods: Sequence[str]) -> list[str]:
    """Where each answer missing from the first prompt was lost: its rank in the pool, its rank in the
    order packing used, the rank of the last candidate packed (the cut) and the loss; then the counts."""
    rows = [(f, m) for f in funnels for m in methods if f.prompt_loss(m)]
    lines = ["", "Lost before the first prompt (pool rank: the first stage's; packing rank: after the second "
             "stage; cut: the last rank packed):"]
    if not rows:
        lines.append("  none")
    width = max([len("question")] + [len(f.question.id) for f, _m in rows])
    if rows:
        lines.append(f"  {'question':<{width}} {'method':<9} {'pool rank':>9} {'packing rank':>12} {'cut':>4}  loss")

    def rank(value: int | None) -> str:
        return "-" if value is None else str(value)

    for f, m in rows:
        lines.append(f"  {f.question.id:<{width}} {m:<9} {rank(f.ranks.get(m)):>9} {rank(f.packing_ranks.get(m)):>12} "
                     f"{rank(f.cut_ranks.get(m)):>4}  {f.prompt_loss(m)}")
    for m in methods:
        counts = summary[m]["prompt_losses"]
        lines.append(f"{m}: answer in the top 40 {summary[m]['answer_in_top_40']:.3f}, in the prompt "
                     f"{summary[m]['answer_in_prompt']:.3f}; lost: " + ", ".join(f"{loss} {counts[loss]}" for loss in LOSSES))
    return lines


def eval_questions(questions: Sequence[Any]) -> list[EvalQuestion]:
    """A job file's questions (``jobs.config`` models) as the funnel reads them."""
    return [EvalQuestion(q.id, q.question, tuple(q.expect), q.url, tuple(q.urls) if q.urls else None,
                         tuple(q.also_urls)) for q in questions]


def in_job_scope(questions: Sequence[EvalQuestion], store: Any, job_name: str, scope: str) -> list[EvalQuestion]:
    """As `webqa run` without a crawl: a question without its own URLs searches the pages of the job's last
    finished crawl, less those gone since (unless the job searches the whole database or never crawled)."""
    if scope == "database" or not store.job_page_urls(job_name):
        return list(questions)
    pages = tuple(store.job_scope(job_name))
    return [q if q.urls else replace(q, urls=pages) for q in questions]


def eval_json(funnels: Sequence[QuestionFunnel], summary: dict[str, dict[str, Any]], methods: Sequence[str],
              packing: Packing, k: int) -> dict[str, Any]:
    """`webqa eval --json`: the settings, the summary, and each question's funnel."""
    return {
        "methods": list(methods),
        "packing": {"top_k": packing.top_k, "token_budget": packing.token_budget,
                    "retry_factor": packing.retry_factor},
        "summary": summary,
        "questions": [_funnel_json(f, methods, k) for f in funnels],
    }


def _funnel_json(f: QuestionFunnel, methods: Sequence[str], k: int) -> dict[str, Any]:
    return {"id": f.question.id, "in_html": f.in_html, "in_text": f.in_text,
            "answer_chunks": f.answer_chunks, "ranks": f.ranks, "best_scores": f.best_scores,
            "best_similarity": f.best_similarity, "in_prompt": f.in_prompt,
            "in_prompt_wider": f.in_prompt_wider, "evidence_tokens": f.prompt_tokens,
            "lost_at": {m: f.lost_at(m, k) for m in methods},
            "packing_ranks": f.packing_ranks, "cut_ranks": f.cut_ranks,
            "prompt_loss": {m: f.prompt_loss(m) for m in methods}}
