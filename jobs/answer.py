"""Answer one question: select → pack → prompt → answerer → validate → maybe retry wider → record.

Used by `webqa run` for every question of a job and by `webqa ask` for one. Every attempt is stored
with its full selection trail (sent and dropped chunks with reasons) and the exact prompt, so
`webqa explain` can replay the article's debugging checklist for any answer.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from jobs import first_stage
from jobs.errors import LLMError, LLMUnavailableError, ModelNotFoundError
from jobs.extractive import answer_extractively
from jobs.llm import LLMReplyError, OllamaClient
from jobs.prompt import (ANSWER_SCHEMA, NOT_ENOUGH_INFORMATION, PROMPT_VERSION, SOURCE_SEPARATOR, Source, build_prompt,
                         prompt_order, source_block)
from jobs.rerank import Reranker, RerankSettings, RerankTrail
from jobs.second_stage import SecondStage, StageSettings
from jobs.select import Candidate, Packed, Selection, Selector, pack
from jobs.typed import TEXT, AnswerType, TypedValue, answer_schema, check_value, prompt_question
from jobs.typed_extract import fill_extractive, number_problem
from jobs.validate import Validation, coerce_answer, validate_answer
from pipelines import defaults
from pipelines.chunk import estimate_tokens
from pipelines.formats import page_link
from jobs.runstore import RunStore

log = logging.getLogger(__name__)

# The attempt's error when the model's reply (asked twice) is not JSON; the reply itself goes to the
# prompts table only, for `webqa explain`, never into the answer.
INVALID_JSON = "the model's reply was not valid JSON"
# The attempt's error when the reply's answer is blank: no answer, whatever else the reply says (cron is told).
EMPTY_ANSWER_REPLY = "the model's reply had an empty answer"

CONFIDENCE_ORDER = {"high": 3, "medium": 2, "low": 1}


@dataclass(frozen=True)
class AskSettings:
    method: str = defaults.SELECTION_METHOD
    top_k: int = defaults.TOP_K
    token_budget: int = defaults.TOKEN_BUDGET
    retry_wider: bool = True
    # The wider retry doubles both; the default context (num_ctx 8192) still leaves room for the reply.
    retry_factor: int = 2
    answerer: str = "llm"  # llm | extractive
    dry_run: bool = False
    model: str | None = None
    # Below this best cosine similarity (embedding/hybrid) the sources cannot answer: say so without the LLM.
    min_similarity: float | None = None
    # Several sent chunks of one page go into one source, in page order (off: benchmarks/HISTORY.md, "Levers tried").
    merge_pages: bool = False
    # Opt-in listwise rerank of the top candidates by the answering model (jobs/rerank.py); None: off.
    rerank: RerankSettings | None = None
    # The second stage: windows of the top candidates scored, passages cut, maybe reordered
    # (jobs/second_stage.py); None: whole chunks in the first stage's order.
    stage: StageSettings | None = None


@dataclass(frozen=True)
class QuestionSpec:
    id: str
    question: str
    urls: tuple[str, ...] | None = None
    type: AnswerType = TEXT  # what kind of value the answer carries (jobs/typed.py)
    kind: str = "question"  # question | summary (jobs/summary.py: the whole of its pages)


@dataclass
class Attempt:
    number: int
    packed: Packed
    sources: list[Source]
    prompt: str
    data: dict[str, Any] | None = None
    validation: Validation | None = None
    answerer: str = "llm"
    raw_reply: str | None = None
    valid_json: bool | None = None
    latency_s: float | None = None
    prompt_tokens: int | None = None
    eval_tokens: int | None = None
    retry_reason: str | None = None
    answer_id: int | None = None
    error: str | None = None
    evidence: PromptSources | None = None
    host: str | None = None  # the Ollama server that answered
    typed: TypedValue | None = None  # the answer's checked value and whether it answers at all


@dataclass
class Outcome:
    """The result of one question: every attempt, and which one is final."""

    spec: QuestionSpec
    selection: Selection | None
    attempts: list[Attempt] = field(default_factory=list)
    final: Attempt | None = None
    error: str | None = None
    notice: str | None = None
    rerank: RerankTrail | None = None  # when the job reranks: what the rerank did (stored with each attempt)

    @property
    def answered(self) -> bool:
        return self.final is not None and self.final.data is not None and self.error is None


class QuestionAnswerer:
    """Holds what every question of a run shares: the store, the selector and the LLM client.

    DuckDB work is serialised by a lock so that several questions can wait on Ollama in parallel.
    """

    def __init__(self, store: RunStore, selector: Selector, llm: OllamaClient | None, settings: AskSettings,
                 *, run_id: int | None = None) -> None:
        self.store = store
        self.selector = selector
        self.llm = llm
        self.settings = settings
        self.run_id = run_id
        self.db_lock = threading.Lock()
        self.answerer = settings.answerer
        self.fallback_notice: str | None = None
        self.reranker = Reranker(llm, settings.rerank, model=settings.model) if settings.rerank else None
        self.stage = SecondStage(selector, settings.stage) if settings.stage else None
        self._stage_notice_given = False
        self._checked: tuple[tuple[str, ...], list[str]] | None = None  # the job's scope, already checked

    def checked_scope(self, urls: tuple[str, ...], stored: list[str]) -> None:
        """``urls`` (the job's default scope) are known to be the stored ``stored``: questions asked with them
        are not checked against the pages again (a scan of the pages per question)."""
        self._checked = (urls, stored)

    def switch_to_extractive(self, reason: str) -> None:
        self.answerer = "extractive"
        self.fallback_notice = reason

    def answer(self, spec: QuestionSpec) -> Outcome:
        if spec.kind == "summary":
            from jobs.summary import summarise  # it builds on this module

            return summarise(self, spec)
        with self.db_lock:
            scope = self._scope(spec)
            if isinstance(scope, str):
                return Outcome(spec, None, error=scope)
            selection = self.selector.select(spec.question, self.settings.method, urls=scope)
        # Packing must count what the prompt really carries (fence, url, section), not the bare text.
        selection.candidates = prompt_costed(selection.candidates)
        outcome = Outcome(spec, selection, notice=selection.notice)
        if self.stage is not None:
            with self.db_lock:
                staged, outcome.rerank = self.stage.apply(
                    spec.question, selection.candidates, embeddings=selection.method_used in ("embedding", "hybrid"))
                if self.stage.notice and not self._stage_notice_given:
                    # Said once per run (the first question that met it); every answer records its trail.
                    self._stage_notice_given = True
                    outcome.notice = "; ".join(n for n in (outcome.notice, self.stage.notice) if n)
            selection.candidates = prompt_costed(staged)
        if self.reranker is not None:
            # The hook where the ranking goes to packing: the model may reorder the top candidates.
            llm_used = self.answerer == "llm" and not self.settings.dry_run
            selection.candidates, outcome.rerank = self.reranker.apply(
                spec.question, selection.candidates, skip=None if llm_used else "the answers are not asked of the LLM")
        attempt = self._attempt(outcome, 1, self.settings.top_k, self.settings.token_budget)
        if outcome.error or self.settings.dry_run:
            return outcome
        reason = _retry_reason(attempt)
        factor = self.settings.retry_factor
        top_k, budget = self.settings.top_k * factor, self.settings.token_budget * factor
        # Retry only when the wider selection really sends more: candidates left out as duplicates
        # would otherwise make a second, identical prompt.
        if (reason and self.settings.retry_wider
                and len(pack(selection.candidates, top_k=top_k, token_budget=budget).sent) > len(attempt.packed.sent)):
            wider = self._attempt(outcome, 2, top_k, budget, retry_reason=reason)
            if wider.data is not None and _quality(wider) >= _quality(attempt):
                outcome.final = wider
                with self.db_lock:
                    assert wider.answer_id is not None
                    self.store.set_final(wider.answer_id, [a.answer_id for a in outcome.attempts if a.answer_id])
            elif wider.error:
                log.warning("Question %s: the wider retry failed (%s); keeping the first answer", spec.id, wider.error)
        if outcome.final is attempt and attempt.error:  # a blank first answer no wider attempt replaced
            outcome.error = attempt.error
        return outcome

    # -- internals ------------------------------------------------------------------------------

    def _scope(self, spec: QuestionSpec) -> list[str] | None | str:
        if not spec.urls:
            return None
        if self._checked is not None and (spec.urls is self._checked[0] or spec.urls == self._checked[0]):
            return self._checked[1]  # the same list for every question: the selector's scope stays resolved
        stored = self.store.stored_urls(spec.urls)
        if not stored:
            return f"question {spec.id}: none of its urls were crawled ({', '.join(spec.urls)}); add them to the job's urls"
        missing = sorted(set(spec.urls) - set(stored))
        if missing:
            log.warning("Question %s: %d of its urls were never crawled: %s", spec.id, len(missing), ", ".join(missing))
        return stored

    def _attempt(self, outcome: Outcome, number: int, top_k: int, budget: int, *, retry_reason: str | None = None) -> Attempt:
        assert outcome.selection is not None
        evidence = packed_sources(outcome.selection.candidates, top_k=top_k, token_budget=budget,
                                  merge=self.settings.merge_pages)
        packed, sources = evidence.packed, evidence.sources
        prompt = build_prompt(prompt_question(outcome.spec.question, outcome.spec.type), sources)
        attempt = Attempt(number, packed, sources, prompt, answerer=self.answerer, retry_reason=retry_reason,
                          evidence=evidence)
        outcome.attempts.append(attempt)
        outcome.final = attempt if number == 1 else outcome.final
        if self.settings.dry_run:
            return attempt
        floor = similarity_floor_reason(outcome.selection, self.settings.min_similarity)
        if not sources or floor:
            # Nothing was selected, or nothing close enough: asking a model to answer from such sources
            # can only invent (or spend a minute of GPU saying "Not enough information").
            attempt.answerer = "none" if not sources else "threshold"
            attempt.data = {"answer": NOT_ENOUGH_INFORMATION, "citations": [], "confidence": "low", "answered": False}
            if floor:
                outcome.notice = "; ".join(n for n in (outcome.notice, floor) if n)
        elif self.answerer == "extractive":
            attempt.data = fill_extractive(outcome.spec.type, outcome.spec.question,
                                           answer_extractively(outcome.spec.question, sources))
        else:
            self._ask_llm(outcome, attempt)
        if attempt.data is not None:
            attempt.validation = validate_answer(attempt.data, sources, outcome.spec.question)
            attempt.typed = typed_value(outcome.spec.type, attempt.data, attempt.validation)
        self._record(outcome, attempt)
        return attempt

    def _ask_llm(self, outcome: Outcome, attempt: Attempt) -> None:
        assert self.llm is not None
        started = time.monotonic()
        try:
            result = self.llm.chat_json(attempt.prompt, answer_schema(ANSWER_SCHEMA, outcome.spec.type))
        except ModelNotFoundError:
            raise  # the run cannot go on: every question would fail the same way
        except LLMUnavailableError:
            raise  # the runner decides: stop, or fall back to extractive answers
        except LLMError as exc:
            if isinstance(exc, LLMReplyError):
                attempt.raw_reply = exc.raw_reply
            # A failed answer names its server too (a pool has no one host: the reply says which).
            attempt.host = getattr(exc, "host", None) or (self.llm.host if isinstance(self.llm, OllamaClient) else None)
            _fail(outcome, attempt, str(exc))
            attempt.latency_s = time.monotonic() - started
            return
        attempt.raw_reply = result.content
        attempt.host = result.host
        attempt.valid_json = result.valid_json
        attempt.latency_s = result.latency_s
        attempt.prompt_tokens = result.prompt_tokens
        attempt.eval_tokens = result.eval_tokens
        if result.data is None:
            # A looping or truncated reply is no answer: its text must not be reported as one.
            _fail(outcome, attempt, INVALID_JSON)
            return
        # The typed fields are kept as sent: check_value judges them.
        data = {**coerce_answer(result.data), **{k: result.data[k] for k in ("answered", "value") if k in result.data}}
        if not str(data.get("answer") or "").strip() and data.get("value") is None:
            if data.get("answered") is not False:
                # No answer: the wider retry may still get one (answer() fails the question if it does not).
                attempt.error = EMPTY_ANSWER_REPLY
                return
            data["answer"] = NOT_ENOUGH_INFORMATION  # "answered": false said it; the blank text says nothing more
        attempt.data = data

    def _record(self, outcome: Outcome, attempt: Attempt) -> None:
        validation = attempt.validation
        citations = citation_records(attempt)
        data = attempt.data or {}
        row = {
            "run_id": self.run_id, "question_id": outcome.spec.id, "question": outcome.spec.question,
            "attempt": attempt.number, "final": attempt.number == 1 or outcome.final is attempt,
            "answer": data.get("answer"), "confidence": data.get("confidence"),
            "citations": json.dumps(citations, ensure_ascii=False),
            "grounded": validation.grounded if validation else False,
            "not_enough_info": validation.not_enough_information if validation else None,
            "failed_citations": len(validation.failed) if validation else None,
            "valid_json": attempt.valid_json, "answerer": attempt.answerer,
            "model": self.settings.model if attempt.answerer == "llm" else None,
            "method": outcome.selection.method_used if outcome.selection else None,
            "latency_s": attempt.latency_s, "prompt_tokens": attempt.prompt_tokens, "eval_tokens": attempt.eval_tokens,
            "error": attempt.error, "retry_reason": attempt.retry_reason, "host": attempt.host,
            **typed_columns(outcome.spec.type, attempt.typed),
        }
        with self.db_lock:
            attempt.answer_id = self.store.save_attempt(
                row, selection_rows(outcome.selection, attempt.packed, attempt.sources, attempt.evidence)
                if outcome.selection else [],
                attempt.prompt, PROMPT_VERSION, attempt.raw_reply,
                rerank=outcome.rerank.as_row() if outcome.rerank is not None else None,
            )


def _fail(outcome: Outcome, attempt: Attempt, error: str) -> None:
    """Record a failed model call; only a failed first attempt fails the question (a failed wider
    retry leaves the first answer standing)."""
    attempt.error = error
    if attempt.number == 1:
        outcome.error = error


@dataclass(frozen=True)
class Unit:
    """One source of the prompt: the sent chunks of one page, in page order (one chunk when not merging)."""

    chunks: tuple[Candidate, ...]

    @property
    def lead(self) -> Candidate:
        """The best-ranked chunk: the unit's place in the prompt and its id in citations."""
        return min(self.chunks, key=lambda c: c.rank)

    @property
    def heading(self) -> str:
        return common_heading([c.heading for c in self.chunks])

    @property
    def text(self) -> str:
        text = merged_text(self.chunks, self.heading)
        first, last = self.chunks[0].span, self.chunks[-1].span
        # A passage cut from its chunk says so, as a gap between pieces does.
        if first is not None and first[0] > 0:
            text = f"{GAP_MARK} {text}"
        if last is not None and last[1] < last[2]:
            text = f"{text} {GAP_MARK}"
        return text


def page_units(sent: Sequence[Candidate], *, merge: bool = True) -> list[Unit]:
    """Group rank-ordered chunks into prompt units: one per page, pieces in page order, best page first.

    Pieces of one page read as one passage (a definition next to its caveat) and share one fence.
    """
    if not merge:
        return [Unit((c,)) for c in sent]
    by_url: dict[str, list[Candidate]] = {}
    for candidate in sent:
        by_url.setdefault(candidate.url, []).append(candidate)
    return [Unit(tuple(sorted(chunks, key=lambda c: c.ordinal))) for chunks in by_url.values()]


_HEADING_SEPARATOR = " › "
# Between two pieces of a page that are not next to each other: the model must not read them as one.
GAP_MARK = "[…]"


def common_heading(headings: Sequence[str]) -> str:
    """The heading path all pieces share (at least the page title, usually)."""
    paths = [h.split(_HEADING_SEPARATOR) if h else [] for h in headings]
    shared: list[str] = []
    for parts in zip(*paths):
        if any(p != parts[0] for p in parts):
            break
        shared.append(parts[0])
    return _HEADING_SEPARATOR.join(shared)


def merged_text(chunks: Sequence[Candidate], heading: str) -> str:
    """The pieces' text in page order: a piece under another section starts with the rest of its heading
    path; a gap in the page is marked; text repeated from the previous piece (chunk overlap) is cut."""
    parts: list[str] = []
    previous: Candidate | None = None
    for chunk in chunks:
        text = chunk.text
        if previous is not None:
            # Passages (a part of their chunk) are next to each other only when nothing lies between them.
            adjacent = (chunk.ordinal == previous.ordinal + 1 and (previous.span is None or previous.span[1] >= previous.span[2])
                        and (chunk.span is None or chunk.span[0] == 0))
            if adjacent and chunk.heading == previous.heading:
                text = text[_overlap_length(previous.text, text):].lstrip()
            elif not adjacent:
                parts.append(GAP_MARK)
        if chunk.heading != heading and (previous is None or chunk.heading != previous.heading):
            parts.append(chunk.heading[len(heading):].lstrip(" ›") or chunk.heading)
        if text:
            parts.append(text)
        previous = chunk
    return "\n\n".join(parts)


def _overlap_length(before: str, after: str, shortest: int = 20) -> int:
    """Length of the longest start of ``after`` that ends ``before`` (the chunker repeats whole sentences)."""
    for length in range(min(len(before), len(after)), shortest - 1, -1):
        if before.endswith(after[:length]):
            return length
    return 0


@dataclass(frozen=True)
class PromptSources:
    """What one attempt sends: the packing, the prompt units and their numbered sources (prompt order)."""

    packed: Packed
    units: list[Unit]
    sources: list[Source]

    def source_of(self) -> dict[str, tuple[int, Candidate]]:
        """Each sent chunk id → (its source number, the lead chunk of its unit)."""
        lead_number = {s.chunk_id: s.number for s in self.sources}
        return {c.chunk_id: (lead_number[u.lead.chunk_id], u.lead) for u in self.units for c in u.chunks}


def packed_sources(candidates: Sequence[Candidate], *, top_k: int, token_budget: int, merge: bool = True) -> PromptSources:
    """What one attempt sends: the packed candidates, merged per page, numbered in prompt order.

    `webqa eval` calls this too, so its answer-in-prompt figure measures exactly what the answerer sends.
    """
    packed = pack(candidates, top_k=top_k, token_budget=token_budget)
    units = prompt_order(page_units(packed.sent, merge=merge))
    sources = [Source(i, u.lead.chunk_id, u.lead.url, u.heading, u.text) for i, u in enumerate(units, start=1)]
    return PromptSources(packed, units, sources)


def prompt_costed(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The candidates with ``tokens`` set to what each costs in the prompt: its whole source block.

    The block is built with the largest number it could get, plus a separator, so the estimate is
    an upper bound and the packed sources never exceed the token budget.
    """
    widest = max(len(candidates), 1)
    return [
        replace(c, tokens=estimate_tokens(source_block(Source(widest, c.chunk_id, c.url, c.heading, Unit((c,)).text))
                                          + SOURCE_SEPARATOR))
        for c in candidates
    ]


def citation_records(attempt: Attempt) -> list[dict[str, Any]]:
    """Each citation check joined with the source it names: what is stored and reported."""
    by_number = {s.number: s for s in attempt.sources}
    units = dict(zip((s.number for s in attempt.sources), attempt.evidence.units)) if attempt.evidence else {}
    records = []
    for check in attempt.validation.checks if attempt.validation else []:
        source = by_number.get(check.source) if check.source is not None else None
        piece = quoted_piece(units.get(check.source), check.quote) if source is not None else None
        records.append({
            "source": check.source, "quote": check.quote,
            "chunk_id": piece.chunk_id if piece else source.chunk_id if source else None,
            "url": source.url if source else None,
            # The page of a PDF the quoted piece starts on: url#page=N.
            "link": page_link(source.url, _page_of(piece, units.get(check.source))) if source is not None else None,
            "heading": piece.heading if piece else source.heading if source else None,
            "valid": check.valid, "reason": check.reason, "matched": check.matched,
            "similarity": round(check.similarity, 3),
        })
    return records


def _page_of(piece: Candidate | None, unit: Unit | None) -> int | None:
    """The PDF page a citation points to: the quoted piece's, else its source's first chunk's."""
    chunk = piece if piece is not None else unit.lead if unit is not None else None
    return chunk.page if chunk is not None else None


def quoted_piece(unit: Unit | None, quote: str) -> Candidate | None:
    """The chunk of a merged source that holds the quote (the lead when none holds it whole)."""
    if unit is None or len(unit.chunks) == 1:
        return unit.lead if unit else None
    wanted = " ".join(quote.split()).casefold()
    return next((c for c in unit.chunks if wanted and wanted in " ".join(c.text.split()).casefold()), unit.lead)


def selection_rows(selection: Selection, packed: Packed, sources: Sequence[Source],
                   evidence: PromptSources | None = None) -> list[dict[str, Any]]:
    """Every ranked candidate with whether it was sent, as which SOURCE, and why (not).

    A chunk merged into another chunk's source (same page) says so, and names that chunk's rank.
    """
    members = evidence.source_of() if evidence is not None else {}
    number = {s.chunk_id: s.number for s in sources}
    reasons = {c.chunk_id: reason for c, reason in packed.dropped}
    sent = {c.chunk_id for c in packed.sent}
    rows = []
    for candidate in selection.candidates:
        is_sent = candidate.chunk_id in sent
        source_number, lead = members.get(candidate.chunk_id, (number.get(candidate.chunk_id), candidate))
        reason = f"rank {candidate.rank} within top_k and budget"
        if is_sent and lead.chunk_id != candidate.chunk_id:
            reason += f"; merged in page order into SOURCE {source_number} with rank {lead.rank} (same page)"
        rows.append({
            **candidate_dict(candidate),
            "sent": is_sent,
            "source_number": source_number if is_sent else None,
            "reason": (reason if is_sent else reasons.get(candidate.chunk_id, "not packed")) + stage_note(candidate, is_sent),
        })
    return first_stage.recorded(rows, selection.first_stage)


def stage_note(candidate: Candidate, sent: bool) -> str:
    """What the stages after fusion did to a candidate, for its selection row: moved up by
    selection.embedding_first, the second stage's score, and the passage sent."""
    first = f"; moved into the fused top as the {candidate.first_by} (selection.embedding_first)" if candidate.first_by else ""
    if candidate.stage_score is None:
        return first
    note = f"{first}; second stage {candidate.stage_score:.4f}"
    if candidate.span is not None:
        start, end, length = candidate.span
        note += f"; {'sent' if sent else 'would be sent'} as a passage: characters {start}-{end} of {length}"
    return note


def candidate_dict(candidate: Candidate) -> dict[str, Any]:
    return {
        "chunk_id": candidate.chunk_id, "url": candidate.url, "heading_path": candidate.heading,
        "rank": candidate.rank, "score": candidate.score, "keyword_score": candidate.keyword_score,
        "bm25_score": candidate.bm25_score, "embedding_score": candidate.embedding_score,
        "matched_terms": list(candidate.matched), "tokens": candidate.tokens,
        "stage_score": candidate.stage_score, "passage": list(candidate.span) if candidate.span else None,
    }


def similarity_floor_reason(selection: Selection, min_similarity: float | None) -> str | None:
    """Why the question is answered "Not enough information" without the LLM, or None to ask it.

    Only embedding and hybrid selections carry a similarity; after a fallback to bm25 the floor cannot
    be applied and the LLM is asked as usual.
    """
    if min_similarity is None or selection.method_used not in ("embedding", "hybrid"):
        return None
    best = selection.best_similarity
    if best is not None and best >= min_similarity:
        return None
    shown = "no chunk" if best is None else f"{best:.3f}"
    return f"best similarity {shown} is below min_similarity {min_similarity:g}: not asking the LLM"


def _retry_reason(attempt: Attempt) -> str | None:
    if attempt.error == EMPTY_ANSWER_REPLY:
        return EMPTY_ANSWER_REPLY
    validation = attempt.validation
    if attempt.data is None or validation is None or attempt.answerer in ("none", "threshold"):
        return None
    if validation.not_enough_information:
        return "not enough information"
    if validation.failed:
        return f"{len(validation.failed)} citation(s) failed validation"
    if attempt.typed is not None and attempt.typed.problem:
        return attempt.typed.problem
    if not validation.grounded:
        return "answer not grounded in the sources"
    if str(attempt.data.get("confidence", "")).lower() == "low":
        return "low confidence"
    return None


def _quality(attempt: Attempt) -> tuple[int, int, int]:
    """Order attempts: a grounded real answer beats anything; then confidence; then fewer failed citations."""
    validation = attempt.validation
    if attempt.data is None or validation is None:
        return (-1, 0, 0)
    real = int(validation.grounded and not validation.not_enough_information)
    confidence = CONFIDENCE_ORDER.get(str(attempt.data.get("confidence", "")).lower(), 0)
    return (real, confidence, -len(validation.failed))


def typed_value(atype: AnswerType, data: dict[str, Any], validation: Validation) -> TypedValue:
    """The attempt's value, checked for its type and, for a number, against its valid quotes."""
    typed = check_value(atype, data, validation.not_enough_information)
    if typed.problem is None and atype.kind == "number":
        problem = number_problem(typed.value, [c.quote for c in validation.checks if c.valid])
        if problem:
            return TypedValue(None, True, problem)
    return typed


def typed_columns(atype: AnswerType, typed: TypedValue | None) -> dict[str, Any]:
    """The answers row's typed columns: the value as JSON, whether it answers, its type and its problem."""
    if typed is None:
        return {"value_type": str(atype)}
    return {"value": json.dumps(typed.value, ensure_ascii=False) if typed.value is not None else None,
            "answered": typed.answered, "value_type": str(atype), "value_problem": typed.problem}
