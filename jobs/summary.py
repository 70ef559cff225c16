"""Summary questions (``kind: summary``): the whole of the question's pages, not a top-k of one query.

Map, then reduce. Map: every chunk of the pages, in page order, goes into sections of at most the token
budget; each section is one prompt (the same rules and fencing as any question), and its reply is
validated against that section's sources. Reduce: the sections' answers are put together in page order,
their ``[n]`` markers and citations renumbered to one numbering of every source sent, so every claim keeps
the citation that was checked against its own source. The reduce step asks no model: a model asked to
merge summaries would quote the summaries, not the pages.

Without a model (the extractive answerer) each source contributes its first sentence, quoted. At most
``MAX_SECTIONS`` prompts per summary; the pages beyond them are named in the answer's notice.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jobs.errors import LLMError, LLMUnavailableError, ModelNotFoundError
from jobs.prompt import ANSWER_SCHEMA, NOT_ENOUGH_INFORMATION, Source, build_prompt
from jobs.select import Candidate, Packed, Selection
from jobs.typed import TEXT, check_value
from jobs.validate import CitationCheck, Validation, coerce_answer, validate_answer

if TYPE_CHECKING:
    from jobs.answer import Attempt, Outcome, QuestionAnswerer, QuestionSpec

__all__ = ["MAX_SECTIONS", "sections", "summarise"]

MAX_SECTIONS = 20  # prompts per summary: a bound on time, whatever the size of the pages
PROMPT_SEPARATOR = "\n\n=== next section ===\n\n"
_MARKER = re.compile(r"\[\s*(\d+(?:\s*[,;]\s*\d+)*)\s*\]")
_FIRST_SENTENCE = re.compile(r"^(.+?[.!?])(?=\s|$)", re.S)


@dataclass
class Part:
    """One map step: the sources of a section and what came back."""

    sources: list[Source]
    prompt: str
    data: dict[str, Any] | None = None
    validation: Validation | None = None
    raw_reply: str | None = None
    error: str | None = None
    tokens: tuple[int | None, int | None] = field(default=(None, None))


def sections(chunks: Sequence[Candidate], token_budget: int) -> list[list[Candidate]]:
    """Chunks in page order cut into runs of at most ``token_budget`` tokens (a larger chunk goes alone)."""
    out: list[list[Candidate]] = []
    used = token_budget + 1
    for chunk in chunks:
        if used + chunk.tokens > token_budget:
            out.append([])
            used = 0
        out[-1].append(chunk)
        used += chunk.tokens
    return out


def _chunks(answerer: QuestionAnswerer, urls: Sequence[str]) -> list[Candidate]:
    from jobs.answer import prompt_costed

    found = [Candidate(chunk_id, url, heading, text, 0, ordinal=ordinal)
             for url in urls for chunk_id, ordinal, heading, text in answerer.store.chunks_for(url)]
    ranked = [Candidate(**{**c.__dict__, "rank": i}) for i, c in enumerate(found, start=1)]
    return prompt_costed(ranked)


def _lead_sentences(sources: Sequence[Source]) -> dict[str, Any]:
    """The extractive summary of a section: each source's first sentence, quoted."""
    picked = [(s.number, m.group(1).strip()) for s in sources if (m := _FIRST_SENTENCE.match(" ".join(s.text.split())))]
    if not picked:
        return {"answer": NOT_ENOUGH_INFORMATION, "citations": [], "confidence": "low", "answered": False}
    return {"answer": " ".join(f"{text} [{n}]" for n, text in picked),
            "citations": [{"source": n, "quote": text} for n, text in picked], "confidence": "medium",
            "answered": True}


def _map(answerer: QuestionAnswerer, spec: QuestionSpec, part: Part) -> None:
    if answerer.answerer != "llm":
        part.data = _lead_sentences(part.sources)
    else:
        assert answerer.llm is not None
        try:
            result = answerer.llm.chat_json(part.prompt, ANSWER_SCHEMA)
        except (ModelNotFoundError, LLMUnavailableError):
            raise  # the runner decides, as for any question
        except LLMError as exc:
            part.error = str(exc)
            return
        part.raw_reply, part.tokens = result.content, (result.prompt_tokens, result.eval_tokens)
        if result.data is None:
            part.error = "the model's reply was not valid JSON"
            return
        part.data = coerce_answer(result.data)
    part.validation = validate_answer(part.data, part.sources, spec.question)


def _renumber(text: str, offset: int) -> str:
    return _MARKER.sub(lambda m: "[" + ", ".join(str(int(n) + offset) for n in re.split(r"\s*[,;]\s*", m.group(1)))
                       + "]", text)


def _reduce(parts: Sequence[Part]) -> tuple[dict[str, Any], Validation]:
    """The sections' answers in page order under one numbering of the sources."""
    answers, citations, checks, offset, confidences = [], [], [], 0, []
    every_grounded = True  # a section with uncited words fails none of the checks, so its own verdict counts
    for part in parts:
        if part.data is not None and part.validation is not None and not part.validation.not_enough_information:
            every_grounded = every_grounded and part.validation.grounded
            answers.append(_renumber(str(part.data["answer"]), offset))
            confidences.append(part.data.get("confidence"))
            for check in part.validation.checks:
                number = check.source + offset if check.source is not None else None
                citations.append({"source": number, "quote": check.quote})
                checks.append(CitationCheck(number, check.quote, check.valid, check.reason, check.matched,
                                            check.similarity))
        offset += len(part.sources)
    if not answers:
        data = {"answer": NOT_ENOUGH_INFORMATION, "citations": [], "confidence": "low", "answered": False}
        return data, Validation(True, [], [], True)
    failed = [c for c in checks if not c.valid]
    confidence = next((c for c in ("low", "medium", "high") if c in confidences), "low")
    data = {"answer": "\n\n".join(answers), "citations": citations, "confidence": confidence, "answered": True}
    return data, Validation(every_grounded and not failed and bool(checks), checks, failed, False)


def summarise(answerer: QuestionAnswerer, spec: QuestionSpec) -> Outcome:
    """Answer a summary question: map over the sections of its pages, reduce in page order, record one attempt.

    Each section's prompt numbers its sources 1, 2, … (an ordinary sequence for the model); the reduce
    renumbers them into the attempt's one numbering, in page order."""
    from jobs.answer import Attempt, Outcome, PromptSources, Unit

    with answerer.db_lock:
        scope = answerer._scope(spec)
        if isinstance(scope, str):
            return Outcome(spec, None, error=scope)
        if scope is None:
            return Outcome(spec, None, error=f"question {spec.id}: a summary needs pages: give it urls, or list "
                                             "urls in the job (scope: database has no page list to summarise)")
        chunks = _chunks(answerer, scope)
    cut = sections(chunks, answerer.settings.token_budget)
    notice = None
    if len(cut) > MAX_SECTIONS:
        left = sorted({c.url for section in cut[MAX_SECTIONS:] for c in section})
        notice = f"summary of the first {MAX_SECTIONS} sections of {len(cut)}; not covered: {', '.join(left[:5])}"
        cut = cut[:MAX_SECTIONS]
    sent = [c for section in cut for c in section]
    # Nothing is ranked: "summary" is the method asked; method_used stays the job's so no fallback is reported.
    selection = Selection(spec.question, "summary", answerer.settings.method, sent, notice)
    outcome = Outcome(spec, selection, notice=notice)
    parts = []
    for section in cut:
        sources = [Source(i, c.chunk_id, c.url, c.heading, c.text) for i, c in enumerate(section, start=1)]
        parts.append(Part(sources, build_prompt(spec.question, sources)))
    # One numbering of every source sent, in page order: what the reduced answer cites.
    numbered = [Source(i, c.chunk_id, c.url, c.heading, c.text) for i, c in enumerate(sent, start=1)]
    started = time.monotonic()
    attempt = Attempt(1, Packed(sent), numbered, PROMPT_SEPARATOR.join(p.prompt for p in parts),
                      answerer=answerer.answerer,
                      evidence=PromptSources(Packed(sent), [Unit((c,)) for c in sent], numbered))
    outcome.attempts.append(attempt)
    outcome.final = attempt
    if answerer.settings.dry_run or not sent:
        if not sent:
            outcome.error = f"question {spec.id}: its pages have no stored text to summarise"
        return outcome
    for part in parts:
        _map(answerer, spec, part)
    _finish(answerer, outcome, attempt, parts, time.monotonic() - started)
    return outcome


def _finish(answerer: QuestionAnswerer, outcome: Outcome, attempt: Attempt, parts: Sequence[Part],
            seconds: float) -> None:
    """Reduce the parts into the attempt, note the failed sections, and record it."""
    failed = [f"section {i}: {p.error}" for i, p in enumerate(parts, start=1) if p.error]
    if failed and len(failed) == len(parts):
        attempt.error = outcome.error = failed[0].split(": ", 1)[1]
    else:
        attempt.data, attempt.validation = _reduce(parts)
        attempt.typed = check_value(TEXT, attempt.data, attempt.validation.not_enough_information)
        if failed:
            outcome.notice = "; ".join(n for n in (outcome.notice, "summary without " + "; ".join(failed)) if n)
    attempt.raw_reply = PROMPT_SEPARATOR.join(p.raw_reply or "" for p in parts) or None
    attempt.valid_json = all(p.error is None for p in parts) if answerer.answerer == "llm" else None
    attempt.latency_s = seconds
    tokens = [p.tokens for p in parts]
    attempt.prompt_tokens = sum(t[0] or 0 for t in tokens) or None
    attempt.eval_tokens = sum(t[1] or 0 for t in tokens) or None
    answerer._record(outcome, attempt)
