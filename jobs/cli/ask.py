"""`webqa ask`: answer one question from the chunks already in the database."""

from __future__ import annotations

import argparse
from typing import Any

from jobs import llm_defaults as llm  # Ollama's defaults, without importing the client
from jobs.cli.console import Console, print_json, show
from jobs.cli.options import add_db, positive_int, question_text, similarity
from jobs.errors import ConfigError, ExitCode, WebqaError, require_database
from pipelines import defaults

NAME = "ask"
HELP = "answer one question from the stored pages"
DESCRIPTION = "Answer one question from the chunks already in the database."


def add_arguments(ask: argparse.ArgumentParser) -> None:
    ask.add_argument("question", type=question_text, help="the question")
    ask.add_argument("--url", action="append", default=[], metavar="URL", help="only search this page; repeatable")
    ask.add_argument("--job", metavar="NAME",
                     help="only search the pages that job's crawls reached (default: the whole database)")
    add_db(ask)
    ask.add_argument("--method", choices=defaults.SELECTION_METHODS, default=defaults.SELECTION_METHOD,
                     help=f"chunk ranking method (default {defaults.SELECTION_METHOD}, as a job's)")
    ask.add_argument("--top-k", type=positive_int, default=defaults.TOP_K,
                     help=f"most chunks sent to the answerer, a ceiling (default {defaults.TOP_K}, as a job's)")
    ask.add_argument("--budget", type=positive_int, default=defaults.TOKEN_BUDGET,
                     help=f"token budget of the sources (default {defaults.TOKEN_BUDGET}, as a job's)")
    ask.add_argument("--model", default=llm.DEFAULT_MODEL, help=f"Ollama model (default {llm.DEFAULT_MODEL})")
    ask.add_argument("--embedding-model", default=llm.DEFAULT_EMBEDDING_MODEL, help="Ollama embedding model")
    ask.add_argument("--answerer", choices=("llm", "extractive"), default="llm",
                     help="who writes the answer (default llm); extractive quotes the best sentences and needs no "
                          "Ollama with --method keyword or bm25")
    ask.add_argument("--no-retry", action="store_true", help="do not retry with a wider selection")
    ask.add_argument("--min-similarity", type=similarity, default=None, metavar="X",
                     help="embedding/hybrid: below this best cosine, answer Not enough information without the LLM")
    ask.add_argument("--json", action="store_true", help="print one JSON object (selection, prompt, answer)")
    ask.add_argument("--dry-run", action="store_true", help="call no LLM: show the selection and the exact prompt")


def handle(args: argparse.Namespace, console: Console) -> int:
    from jobs.answer import AskSettings, QuestionSpec
    from jobs.report import outcome_json
    from jobs.session import open_session

    urls = _urls(args.url)
    # Opening a missing database would create an empty one only to report that it holds nothing.
    require_database(args.db)
    access, answerer, degraded = _access(args, console)
    # The selection's notice says once why embedding selection cannot be used, with the fix.
    with open_session(args.db, access, embedding_model=args.embedding_model,
                      no_chunks=f"{args.db} holds no chunks; run `webqa crawl URL… --db {args.db}` first") as session:
        if urls and not session.store.stored_urls(tuple(urls)):
            # Said here, once: the answer block would only print "None" above it.
            raise WebqaError(f"none of the --url pages is in {args.db} ({', '.join(urls)}); crawl them first: "
                             f"`webqa crawl URL… --db {args.db}`")
        if args.job:
            pages = _job_pages(session.store, args.job, console)
            urls = urls or pages  # --url narrows further
        ask = AskSettings(method=args.method, top_k=max(1, args.top_k), token_budget=max(1, args.budget),
                          retry_wider=not args.no_retry, answerer=answerer, dry_run=args.dry_run, model=args.model,
                          min_similarity=args.min_similarity)
        outcome = session.answerer(ask).answer(
            QuestionSpec("ask", args.question, tuple(urls) if urls else None))
    obj = outcome_json(outcome)
    if outcome.notice and degraded is None:  # a degraded ask has said why already, bm25 included
        console.notifier()(f"Notice: {outcome.notice}")
    if degraded is not None:
        obj["notice"] = degraded
    if args.json:
        print_json(obj)
    elif not outcome.error:  # a failed question has no answer block to show ("None"), only its error below
        _print_answer(obj, args.dry_run)
    if outcome.error:
        raise WebqaError(outcome.error)
    if degraded is not None:
        console.verdict = f"Notice: {degraded}"
        return ExitCode.PARTIAL
    return ExitCode.OK


def _urls(given: list[str]) -> list[str]:
    """--url as stored (normalised); a URL that cannot be is a usage error naming it."""
    from crawler.urllist import normalise_url

    urls = []
    for raw in given:
        url, reason = normalise_url(raw)
        if url is None:
            raise ConfigError(f"--url {raw!r}: {reason}")
        urls.append(url)
    return urls


def _access(args: argparse.Namespace, console: Console) -> tuple[Any, str, str | None]:
    """Ollama as this ask needs it, the answerer it can have, and why it is degraded (None: it is not)."""
    from jobs.llm import OllamaSettings, connect

    chat = args.answerer == "llm" and not args.dry_run
    wants_embeddings = args.method in defaults.EMBEDDING_METHODS
    access = connect(OllamaSettings(model=args.model, embedding_model=args.embedding_model),
                     chat=chat, embeddings=wants_embeddings)
    if access.unreachable is None or not chat:
        return access, args.answerer, None
    # As `webqa run` does: answer without the LLM, say so once, and exit 1 (degraded).
    degraded = access.extractive_instead(args.method, bm25_instead=wants_embeddings)
    console.important(f"Notice: {degraded}")
    return access, "extractive", degraded


def _job_pages(store: Any, job: str, console: Console) -> list[str]:
    """The pages that job's last finished crawl reached, less those gone since, as `webqa run` searches them;
    the pages left out for being gone are named as `webqa run` names them."""
    from jobs.crawl_lines import dropped_notice

    dropped = store.dropped_pages()
    notice = dropped_notice({url: dropped[url] for url in store.stored_urls(store.job_page_urls(job)) if url in dropped})
    if notice is not None:
        console.important(f"Notice: {notice}")
    pages = store.job_scope(job)
    if not pages:
        raise ConfigError(f"--job {job}: no stored page was reached by a crawl of that job; "
                          "check the name (webqa runs lists the jobs)")
    return pages


def _print_answer(obj: dict, dry_run: bool) -> None:
    if dry_run:
        show(f"Selection ({obj['method_used']}):")
        for chunk in obj["chunks"]:
            mark = f"SOURCE {chunk['source_number']}" if chunk["sent"] else "dropped"
            show(f"  #{chunk['rank']:<3} {chunk['score']:.4f}  {mark:<9}  {chunk['heading_path'] or chunk['url']}")
        show()
        show(obj["prompt"] or "")
        return
    show(obj.get("answer"))
    show()
    verdict = "Not enough information" if obj.get("not_enough_information") else (
        f"Confidence: {obj.get('confidence')}; grounded: {'yes' if obj.get('grounded') else 'no'}")
    show(f"{verdict}; answer id {obj.get('answer_id')} (webqa explain {obj.get('answer_id')})")
    for c in obj.get("citations", []):
        mark = "ok" if c["valid"] else f"INVALID: {c['reason']}"
        show(f"  [{c['source']}] {c.get('heading_path') or ''} <{c.get('url')}> “{c['quote']}” ({mark})")
