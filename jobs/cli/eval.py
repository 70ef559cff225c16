"""`webqa eval`: where are answers lost? The coverage funnel and recall per selection method."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from jobs.cli.console import Console, show
from jobs.cli.options import add_db, non_negative_int
from jobs.errors import ConfigError, ExitCode, require_database
from pipelines import defaults

NAME = "eval"
HELP = "where are answers lost? the coverage funnel and recall per selection method"
DESCRIPTION = ("For questions with `url` (the page that answers) and `expect` (verbatim phrases from it): is a "
               "phrase in the fetched HTML, in the cleaned text, in which chunks, and at which rank does the first "
               "answer-bearing chunk come for each method. Prints recall@1/3/5, MRR and how many questions were "
               "lost at cleaning, chunking and selection.")


def add_arguments(evaluate: argparse.ArgumentParser) -> None:
    evaluate.add_argument("questions", type=Path, metavar="QUESTIONS.yaml",
                          help="a job file whose questions have expect (and url)")
    add_db(evaluate)
    evaluate.add_argument("--method", action="append", choices=defaults.SELECTION_METHODS,
                          help="methods to compare (repeatable; default: all four)")
    evaluate.add_argument("--top-k", type=non_negative_int, default=5,
                          help="rank that counts as found for 'lost at selection' (default 5)")
    evaluate.add_argument("--budget", type=non_negative_int, default=None,
                          help="token budget of the evidence for answer-in-prompt "
                               "(default: the job's selection.token_budget)")
    evaluate.add_argument("--pack-top-k", type=non_negative_int, default=None,
                          help="most sources sent, for answer-in-prompt (default: the job's selection.top_k)")
    evaluate.add_argument("--json", action="store_true", help="print the funnel and summary as JSON")


def handle(args: argparse.Namespace, console: Console) -> int:
    from jobs.config import load_job
    from jobs.evaluate import Packing, eval_json, eval_questions, evaluate, in_job_scope, render_table, summarise
    from jobs.llm import connect
    from jobs.runner import ollama_settings
    from jobs.second_stage import job_stage
    from jobs.session import open_session

    job = load_job(args.questions)
    questions = eval_questions(job.questions)
    if not any(q.expect for q in questions):
        raise ConfigError(f"{args.questions}: no question has `expect` phrases; "
                          "eval needs them to know what a right chunk contains")
    methods = list(dict.fromkeys(args.method or defaults.SELECTION_METHODS))
    require_database(args.db)
    access = connect(ollama_settings(job), chat=False,
                     embeddings=any(m in defaults.EMBEDDING_METHODS for m in methods))
    if access.embedding_unavailable:
        console.notifier()(f"Notice: {access.embedding_unavailable}; leaving out embedding and hybrid")
        methods = [m for m in methods if m not in defaults.EMBEDDING_METHODS] or ["bm25"]
    with open_session(args.db, access, embedding_model=job.embedding_model, prefixes=job.embedding_prefixes(),
                      approximate=job.selection.approximate,
                      embedding_first=job.selection.embedding_first,
                      no_chunks=f"{args.db} holds no chunks to evaluate") as session:
        questions = in_job_scope(questions, session.store, job.name, job.scope)
        packing = Packing(top_k=max(1, args.pack_top_k or job.selection.top_k),
                          token_budget=max(1, args.budget or job.selection.token_budget))
        stage = job_stage(session.selector, job)
        funnels = evaluate(session.selector, session.store, questions, methods, packing, stage=stage)
    summary = summarise(funnels, methods, k=max(1, args.top_k))
    if args.json:
        print(json.dumps(eval_json(funnels, summary, methods, packing, max(1, args.top_k)), indent=2))
    else:
        show(render_table(funnels, summary, methods))
    return ExitCode.OK
