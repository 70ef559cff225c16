"""Benchmark: selection levers that need no new weights (issue 15), on both development corpora.

Every lever is measured on the same devset database and cached vectors as ``bench_recall.py`` (run it
first: it crawls and embeds), with the product's packing (jobs/answer.py) and the same answer-in-prompt
test (jobs/evaluate.py). For each variant of hybrid selection it prints, per half (tune: choose; check:
report), answer-in-prompt at the default packing, R@5 and paraphrased R@5. The levers:

- ``fusion W``: the bm25 list's weight in hybrid's min-max fusion (the product: 0.5);
- ``nostop``: the question embedded without its stop words (jobs.extractive.STOP_WORDS);
- ``heading W``: a third list fused with weight W: the cosine of the question with a vector of each
  chunk's heading path (embedded here, in memory; the product has no such vectors);
- ``neighbours M``: packing puts the same-section neighbours (ordinal ± 1, same page and heading path)
  of the top M chunks right after them, so they are sent before lower-ranked chunks (``M=0``: only when
  budget remains after packing);
- ``merge``: ``AskSettings.merge_pages`` on (several sent chunks of a page as one source);
- ``--rerank-host URL``: also the opt-in listwise rerank (jobs/rerank.py) through a real Ollama model.

    .venv/bin/python benchmarks/bench_levers.py --devset python
    .venv/bin/python benchmarks/bench_levers.py --devset postgresql

Results: ``benchmarks/results/levers-<devset>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import bench_recall as br
import common


def strip_stop_words(question: str) -> str:
    from jobs.extractive import STOP_WORDS

    kept = [t for t in question.split() if t.lower().replace("\u2019", "'").strip("\"'`?.,;:!()") not in STOP_WORDS]
    return " ".join(kept) or question


# Ranked lists per (question, scope): the variants re-fuse the same lists.
_BM25: dict[Any, list[Any]] = {}
_EMBEDDING: dict[Any, list[Any]] = {}


class LeverSelector:
    """The product's Selector with hybrid's fusion changed by the levers (hybrid only)."""

    def __init__(self, base: Any, *, bm25_weight: float = 0.5, nostop: bool = False, heading_weight: float = 0.0,
                 heading_vectors: dict[str, list[float]] | None = None) -> None:
        self.base = base
        self.bm25_weight = bm25_weight
        self.nostop = nostop
        self.heading_weight = heading_weight
        self.heading_vectors = heading_vectors or {}
        self.cache: dict[tuple[str, str | None], list[Any]] = {}

    def select(self, question: str, method: str, *, urls: Sequence[str] | None = None) -> Any:
        from jobs.select import Selection, _min_max, _ranked

        assert method == "hybrid"
        scope = sorted(set(urls)) if urls else None
        key = tuple(scope) if scope else None
        if (question, key) not in _BM25:
            _BM25[(question, key)] = self.base.bm25(question, scope)
        text = strip_stop_words(question) if self.nostop else question
        if (text, key) not in _EMBEDDING:
            _EMBEDDING[(text, key)] = self.base.embedding(text, scope)
        bm25, embedding = _BM25[(question, key)], _EMBEDDING[(text, key)]
        lists = [(self.bm25_weight, bm25), (1.0 - self.bm25_weight, embedding)]
        if self.heading_weight > 0:
            lists = [(w * (1.0 - self.heading_weight), ranked) for w, ranked in lists]
            lists.append((self.heading_weight, self._heading_list(question, bm25, embedding)))
        fused: dict[str, dict[str, Any]] = {}
        for weight, ranked in lists:
            for candidate, scaled in zip(ranked, _min_max([c.score for c in ranked]), strict=True):
                entry = fused.setdefault(candidate.chunk_id, {"candidate": candidate, "score": 0.0})
                entry["score"] += weight * scaled
                merged = entry["candidate"]
                entry["candidate"] = replace(
                    merged,
                    bm25_score=merged.bm25_score if merged.bm25_score is not None else candidate.bm25_score,
                    embedding_score=merged.embedding_score if merged.embedding_score is not None else candidate.embedding_score)
        order = sorted(fused.values(), key=lambda e: (-round(e["score"], 8), e["candidate"].url, e["candidate"].ordinal))
        ranked = [replace(e["candidate"], score=round(e["score"], 8)) for e in order[: self.base.pool]]
        return Selection(question, method, "hybrid", _ranked(ranked))

    def _heading_list(self, question: str, *lists: Sequence[Any]) -> list[Any]:
        """The union of the two lists' candidates, scored by the cosine of question and heading path."""
        vector = self._question_vector(question)
        seen: dict[str, Any] = {}
        for ranked in lists:
            for c in ranked:
                seen.setdefault(c.chunk_id, c)
        scored = [replace(c, score=_dot(vector, self.heading_vectors[c.heading])) for c in seen.values()
                  if c.heading in self.heading_vectors]
        return sorted(scored, key=lambda c: (-c.score, c.url, c.ordinal))

    def _question_vector(self, question: str) -> list[float]:
        key = (question, None)
        if key not in self.cache:
            self.cache[key] = _unit(self.base.embedder.embed([self.base.prefixes.query + question],
                                                             model=self.base.embedding_model)[0])
        return self.cache[key]


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


def _unit(v: Sequence[float]) -> list[float]:
    n = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / n for x in v]


def heading_vectors(conn: Any, embedder: Any, model: str) -> dict[str, list[float]]:
    headings = [h for (h,) in conn.execute("SELECT DISTINCT heading_path FROM chunks WHERE heading_path <> '' "
                                            "ORDER BY 1").fetchall()]
    out: dict[str, list[float]] = {}
    for start in range(0, len(headings), 256):
        part = headings[start:start + 256]
        out.update(zip(part, (_unit(v) for v in embedder.embed(part, model=model))))
    return out


def _section_neighbours(conn: Any, lead: Any) -> list[tuple[Any, ...]]:
    """The chunks right before and after ``lead`` in its page, under the same heading path."""
    return conn.execute(
        "SELECT chunk_id, url, heading_path, text, token_estimate, ordinal FROM chunks "
        "WHERE url = ? AND heading_path = ? AND ordinal IN (?, ?) ORDER BY ordinal",
        [lead.url, lead.heading, lead.ordinal - 1, lead.ordinal + 1]).fetchall()


def with_neighbours(conn: Any, candidates: Sequence[Any], top: int) -> list[Any]:
    """Candidates with the same-section neighbours (ordinal ± 1, same url and heading path) of the top
    ``top`` chunks placed right after them (at their rank); ``top`` 0: neighbours of every chunk go last,
    so that they only take budget that remains."""
    from jobs.answer import prompt_costed
    from jobs.select import Candidate

    present = {c.chunk_id for c in candidates}
    leads = list(candidates[:top]) if top else list(candidates)
    extra: dict[str, list[Any]] = {}
    for lead in leads:
        rows = _section_neighbours(conn, lead)
        found = []
        for cid, url, heading, text, tokens, ordinal in rows:
            if cid in present:
                continue
            present.add(cid)
            found.append(Candidate(cid, url, heading, text, tokens, rank=lead.rank, score=lead.score, ordinal=ordinal))
        extra[lead.chunk_id] = prompt_costed(found) if found else []
    if not top:
        return list(candidates) + [n for lead in leads for n in extra[lead.chunk_id]]
    out: list[Any] = []
    for c in candidates:
        out.append(c)
        out.extend(extra.get(c.chunk_id, []))
    return out


class RerankedSelector:
    """Hybrid selection, then the product's listwise rerank (jobs/rerank.py) through a real Ollama model."""

    def __init__(self, base: Any, llm: Any, candidates: int, model: str) -> None:
        from jobs.rerank import Reranker, RerankSettings

        self.base, self.model = base, model
        self.reranker = Reranker(llm, RerankSettings(candidates=candidates), model=model)
        self.trails: list[Any] = []

    def select(self, question: str, method: str, *, urls: Sequence[str] | None = None) -> Any:
        selection = self.base.select(question, method, urls=urls)
        selection.candidates, trail = self.reranker.apply(question, selection.candidates)
        self.trails.append(trail)
        return selection


def neighbours_first(conn: Any, candidates: Sequence[Any], top: int) -> list[Any]:
    """The candidates with the same-section neighbours (same page and heading path, position ± 1) of the
    first ``top`` placed right after each, sharing its rank; a neighbour already ranked lower moves up."""
    from jobs.answer import prompt_costed
    from jobs.select import Candidate

    leads = list(candidates[:top])
    taken = {c.chunk_id for c in leads}
    ranked = {c.chunk_id: c for c in candidates}
    added: dict[str, list[Any]] = {}
    for lead in leads:
        rows = _section_neighbours(conn, lead)
        found = []
        for cid, url, heading, text, tokens, ordinal in rows:
            if cid not in taken:
                taken.add(cid)
                found.append(ranked.get(cid) or Candidate(cid, url, heading, text, tokens, ordinal=ordinal))
        added[lead.chunk_id] = [replace(n, rank=lead.rank, score=lead.score) for n in prompt_costed(found)]
    out: list[Any] = []
    for c in leads:
        out.append(c)
        out.extend(added[c.chunk_id])
    return out + [c for c in candidates[top:] if c.chunk_id not in taken]


def evaluate_variant(selector: Any, conn: Any, questions: Sequence[Any], *, neighbours: int | None = None,
                     merge: bool = False) -> dict[str, Any]:
    """Per half: answer-in-prompt (default packing, first attempt), R@5, paraphrased R@5 for hybrid."""
    from jobs.answer import AskSettings, packed_sources, prompt_costed
    from jobs.evaluate import answer_in_sources, contains_any, evidence_tokens

    per_q = []
    for q in questions:
        if not q.expect:
            continue
        selection = selector.select(q.question, "hybrid", urls=list(q.urls) if q.urls else None)
        pages = {q.url, *q.also_urls}
        rank = next((c.rank for c in selection.candidates if c.url in pages and contains_any(c.text, q.expect)), None)
        costed = prompt_costed(selection.candidates)
        if neighbours == 0:
            costed = with_neighbours(conn, costed, neighbours)
        elif neighbours:
            costed = neighbours_first(conn, costed, neighbours)
        sent = packed_sources(costed, top_k=AskSettings.top_k, token_budget=AskSettings.token_budget, merge=merge)
        per_q.append({"id": q.id, "half": br.half(q.id), "para": q.id.startswith("para-"), "rank": rank,
                      "in_prompt": answer_in_sources(sent.sources, q.expect),
                      "tokens": evidence_tokens(sent.sources)})
    out: dict[str, Any] = {}
    for name in ("tune", "check"):
        part = [r for r in per_q if r["half"] == name]
        para = [r for r in part if r["para"]]
        out[name] = {
            "n": len(part), "para_n": len(para),
            "in_prompt": sum(r["in_prompt"] for r in part),
            "r5": sum(1 for r in part if r["rank"] and r["rank"] <= 5),
            "para_r5": sum(1 for r in para if r["rank"] and r["rank"] <= 5),
            "tokens_median": sorted(r["tokens"] for r in part)[len(part) // 2] if part else None,
        }
    out["questions"] = per_q
    return out


VARIANTS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("baseline (fusion .5)", {}, {}),
    ("fusion .3", {"bm25_weight": 0.3}, {}),
    ("fusion .4", {"bm25_weight": 0.4}, {}),
    ("fusion .6", {"bm25_weight": 0.6}, {}),
    ("fusion .7", {"bm25_weight": 0.7}, {}),
    ("question without stop words", {"nostop": True}, {}),
    ("heading vectors .15", {"heading_weight": 0.15}, {}),
    ("heading vectors .3", {"heading_weight": 0.3}, {}),
    ("neighbours when budget remains", {}, {"neighbours": 0}),
    ("neighbours of the top 1 first", {}, {"neighbours": 1}),
    ("neighbours of the top 3 first", {}, {"neighbours": 3}),
    ("merge_pages on", {}, {"merge": True}),
    ("neighbours of the top 3 first + merge", {}, {"neighbours": 3, "merge": True}),
]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--devset", choices=sorted(br.DEVSETS), default="python")
    parser.add_argument("--only", default="", help="comma-separated variant numbers (default: all)")
    parser.add_argument("--no-heading-vectors", action="store_true", help="skip the heading-path vectors (slow to embed)")
    parser.add_argument("--rerank-host", default=None,
                        help="also measure selection.rerank through a real Ollama at this URL (none here)")
    parser.add_argument("--rerank-model", default="llama3.2:3b", help="the chat model for --rerank-host")
    parser.add_argument("--rerank-candidates", type=int, default=20)
    args = parser.parse_args(argv)
    kind = br.crawled_devset(args.devset)
    from jobs.llm import OllamaClient, OllamaSettings
    from jobs.select import Selector
    from jobs.runstore import RunStore

    netloc, _stored, _ = br.stored_netloc(kind.db)
    devset = br.load_devset(netloc)
    started = time.perf_counter()
    results: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        client = br.embedding_client(stack)
        store = stack.enter_context(RunStore.open(kind.db))
        conn = store.conn
        base = Selector(conn, embedder=client, embedding_model=br.EMBEDDING_MODEL, ensure_fts=store.load_fts)
        base.embed_missing()
        has_headings = conn.execute("SELECT count(*) FILTER (WHERE heading_path <> '') FROM chunks").fetchone()[0]
        vectors = heading_vectors(conn, client, br.EMBEDDING_MODEL) if has_headings and not args.no_heading_vectors else {}
        print(f"{args.devset}: {len(devset.questions)} questions; {len(vectors)} distinct heading paths embedded")
        wanted = {int(x) for x in args.only.split(",") if x.strip()}
        print(f"{'#':>2} {'variant':<40} {'tune: in prompt / R@5 / para R@5':<34} {'check: in prompt / R@5 / para R@5':<34} tokens")
        for number, (name, sel_kw, pack_kw) in enumerate(VARIANTS):
            if wanted and number not in wanted:
                continue
            if sel_kw.get("heading_weight") and not vectors:
                print(f"{number:>2} {name:<40} n/a: no heading-path vectors")
                continue
            selector = LeverSelector(base, heading_vectors=vectors, **sel_kw)
            r = evaluate_variant(selector, conn, devset.questions, **pack_kw)
            t, c = r["tune"], r["check"]
            print(f"{number:>2} {name:<40} {t['in_prompt']:>2}/{t['n']} {t['r5']:>3}/{t['n']} {t['para_r5']:>3}/{t['para_n']:<14} "
                  f"{c['in_prompt']:>2}/{c['n']} {c['r5']:>3}/{c['n']} {c['para_r5']:>3}/{c['para_n']:<14} "
                  f"{t['tokens_median']}/{c['tokens_median']}", flush=True)
            results[name] = r
        # What the opt-in rerank would send per question (no model needed): its prompt's estimated tokens.
        from jobs.rerank import DEFAULT_CANDIDATES, DEFAULT_EXCERPT_CHARS, rerank_prompt
        from pipelines.chunk import estimate_tokens

        sizes = sorted(estimate_tokens(rerank_prompt(q.question, LeverSelector(base).select(
            q.question, "hybrid", urls=list(q.urls) if q.urls else None).candidates[:DEFAULT_CANDIDATES],
            DEFAULT_EXCERPT_CHARS)) for q in devset.questions)
        results["rerank_prompt_tokens"] = {"median": sizes[len(sizes) // 2], "max": sizes[-1]}
        print(f"rerank prompt at the defaults ({DEFAULT_CANDIDATES} candidates, {DEFAULT_EXCERPT_CHARS} chars): "
              f"median {sizes[len(sizes) // 2]} tokens, max {sizes[-1]} (estimate_tokens)")
        if args.rerank_host:
            llm = stack.enter_context(OllamaClient(OllamaSettings(host=args.rerank_host, model=args.rerank_model)))
            selector = RerankedSelector(LeverSelector(base), llm, args.rerank_candidates, args.rerank_model)
            r = evaluate_variant(selector, conn, devset.questions)
            t, c = r["tune"], r["check"]
            failed = sum(1 for x in selector.trails if x.status == "failed")
            seconds = sorted(x.seconds for x in selector.trails if x.seconds is not None)
            name = f"rerank {args.rerank_candidates} by {args.rerank_model}"
            print(f"   {name:<40} {t['in_prompt']:>2}/{t['n']} {t['r5']:>3}/{t['n']} {t['para_r5']:>3}/{t['para_n']:<14} "
                  f"{c['in_prompt']:>2}/{c['n']} {c['r5']:>3}/{c['n']} {c['para_r5']:>3}/{c['para_n']:<14} "
                  f"{failed} failed; median {seconds[len(seconds) // 2] if seconds else '-'} s")
            results[name] = {**r, "trails": [x.as_dict() for x in selector.trails]}
    path = common.save_result(f"levers-{args.devset}", {"variants": results, "wall_s": round(time.perf_counter() - started, 1)},
                              command=common.command_line(), machine=common.machine_info())
    print(f"wrote {path.relative_to(common.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
