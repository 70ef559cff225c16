"""What the dev-set benchmarks that read one crawled devset share: their command line and their opening.

bench_losses.py, bench_approx_devset.py, bench_promote.py, bench_tail.py and diag_ranks.py each select the
questions of one devset database (bench_recall.py crawls and embeds it) in their own way; this is the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from pathlib import Path
from collections.abc import Iterator, Sequence
from typing import Any

import bench_recall as br

MODELS = ("all-minilm", "all-mpnet-base-v2", "multilingual-e5-small")


def parser(doc: str, *, models: bool = False, budgets: bool = True) -> argparse.ArgumentParser:
    """--devset and --db (--embedding-model with ``models``, --budgets with ``budgets``); the script adds its own."""
    made = argparse.ArgumentParser(description=doc.split("\n\n", 1)[0])
    made.add_argument("--devset", choices=sorted(br.DEVSETS), default="python")
    made.add_argument("--db", type=Path, default=None, help="another copy of the devset database")
    made.add_argument("--questions", type=Path, default=None,
                      help="another question file over the same pages (e.g. benchmarks/devset/fresh/git.yaml)")
    if models:
        made.add_argument("--embedding-model", default=br.EMBEDDING_MODEL, choices=MODELS)
    if budgets:
        made.add_argument("--budgets", default="3000,6000")
    return made


def opened(stack: contextlib.ExitStack[Any], args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(the devset's questions, its database as a RunStore, an embedding client), open until ``stack`` closes."""
    from jobs.runstore import RunStore

    kind = br.crawled_devset(args.devset, args.db, args.questions)
    netloc, _stored, _ = br.stored_netloc(kind.db)
    devset = br.load_devset(netloc)
    client = br.embedding_client(stack, getattr(args, "embedding_model", br.EMBEDDING_MODEL))
    return devset, stack.enter_context(RunStore.open(kind.db)), client


def answer_chunks(store: Any, question: Any) -> set[str]:
    """The chunks of the question's pages that hold one of its expected phrases."""
    from jobs.evaluate import contains_any

    return {cid for cid, _h, text in store.chunk_texts([question.url, *question.also_urls])
            if contains_any(text, question.expect)}


def add_probe(made: argparse.ArgumentParser) -> None:
    made.add_argument("--probe", type=int, default=0, metavar="N",
                      help="instead of the devset's questions, N exact-term questions made from the pages: "
                           "'What does IDENT do?' for identifiers (snake_case or --options) found in 1-3 chunks; "
                           "answered when a chunk holding it is packed")


@dataclasses.dataclass
class Probe:
    id: str
    question: str
    expect: list[str]
    wanted: set[str]


def probes(conn: Any, n: int) -> list[Probe]:
    """``n`` exact-term questions: identifiers (snake_case names, --options) held by one to three chunks, picked
    by a hash of their text (deterministic), each asked as "What does IDENT do?"."""
    import hashlib
    import re

    pattern = re.compile(r"(?<![\w-])(?:[a-z][a-z0-9]*(?:_[a-z0-9]+)+|--[a-z][a-z0-9]+(?:-[a-z0-9]+)+)(?![\w-])")
    holders: dict[str, set[str]] = {}
    for chunk_id, text in conn.execute("SELECT chunk_id, text FROM chunks").fetchall():
        for ident in set(pattern.findall(text)):
            if len(ident) >= 8:
                holders.setdefault(ident, set()).add(chunk_id)
    rare = sorted((i for i, held in holders.items() if len(held) <= 3),
                  key=lambda i: hashlib.sha256(i.encode()).hexdigest())
    return [Probe(f"probe-{i}", f"What does {i} do?", [i], holders[i]) for i in rare[:n]]


def answerable(devset: Any, store: Any, probe: int = 0) -> Iterator[tuple[Any, set[str]]]:
    """Each question of the devset that has an answer, with the chunks that hold it (``answer_chunks``); with
    ``probe``, that many exact-term questions (``probes``) instead."""
    if probe:
        yield from ((p, p.wanted) for p in probes(store.conn, probe))
        return
    for question in devset.questions:
        if question.expect:
            yield question, answer_chunks(store, question)


def packed_cells(order: Sequence[Any], wanted: set[str], expect: Sequence[str],
                 budgets: Sequence[int]) -> dict[int, tuple[bool, bool, int, int]]:
    """Per budget, what the product packs of ``order`` (whole chunks, top_k 40): (answer in the prompt, an answer
    chunk sent, evidence tokens, sources), the cell ``report`` reads."""
    from jobs.answer import packed_sources, prompt_costed
    from jobs.evaluate import answer_in_sources, evidence_tokens

    costed = prompt_costed(order)
    cells = {}
    for budget in budgets:
        packed = packed_sources(costed, top_k=40, token_budget=budget, merge=False)
        cells[budget] = (answer_in_sources(packed.sources, expect), any(c.chunk_id in wanted for c in packed.packed.sent),
                         evidence_tokens(packed.sources), len(packed.sources))
    return cells


def report(rows: Sequence[dict[str, Any]], variants: Sequence[Any], budgets: Sequence[int]) -> None:
    """Per budget, variant and half: answers in the prompt [paraphrased], where the others were lost, the evidence
    tokens (and sources, when measured); then each question a variant gained or lost against "base".

    A row holds id, half, para, the pool rank of its answer and, per (variant, budget), (in prompt, truncated,
    tokens[, sources])."""
    for budget in budgets:
        for v in variants:
            for name in ("tune", "check"):
                part = [r for r in rows if r["half"] == name]
                cells = [r[(v, budget)] for r in part]
                got = sum(c[0] for c in cells)
                para = [r[(v, budget)] for r in part if r["para"]]
                lost = [r for r in part if not r[(v, budget)][0]]
                pool = sum(1 for r in lost if r["rank"] is None)
                trunc = sum(1 for r in lost if r["rank"] is not None and r[(v, budget)][1])
                tokens = sorted(c[2] for c in cells)
                sources = sorted(c[3] for c in cells if len(c) > 3)
                print(f"{budget} {v!s:>6} {name}: in prompt {got}/{len(part)} = {got / len(part):.3f} "
                      f"[para {sum(c[0] for c in para)}/{len(para)}]; not in pool {pool} / below cut "
                      f"{len(lost) - pool - trunc} / truncated {trunc}; tokens median {tokens[len(tokens) // 2]}"
                      + (f", sources {sources[len(sources) // 2]}" if sources else ""))
            if v != "base":
                for r in rows:
                    if r[(v, budget)][0] != r[("base", budget)][0]:
                        print(f"    {'GAINED' if r[(v, budget)][0] else 'LOST'} {r['half']} {r['id']} (pool rank {r['rank']})")
