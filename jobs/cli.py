"""The `webqa` command line: parse arguments, call the library, turn its errors into `Error: …` lines.

Business rules live in the library; this module only wires options, prints, and picks exit codes.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from jobs.errors import ConfigError, ExitCode, LLMUnavailableError, NothingToDoError, StoreError, WebqaError

DEFAULT_DB = os.environ.get("WEBQA_DB", "webqa.duckdb")

Handler = Callable[[argparse.Namespace], int]


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number ≥ 0, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 0, got {text!r}")
    return value


def _add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=DEFAULT_DB, metavar="PATH",
                        help="DuckDB file (default: $WEBQA_DB or ./webqa.duckdb)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="webqa",
        description="Crawl URL lists politely, store them in DuckDB, and answer questions about them with a local LLM.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show Scrapy's and webqa's log")
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors and the final summary")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    crawl = sub.add_parser("crawl", help="fetch, clean, chunk and store pages",
                           description="Fetch URLs (arguments and/or files), clean and chunk them into the database.")
    crawl.add_argument("urls", nargs="*", metavar="URL", help="URLs to crawl")
    crawl.add_argument("-i", "--input", action="append", default=[], type=Path, metavar="FILE",
                       help="file of URLs: one per line (# comments allowed) or a YAML list; repeatable")
    _add_db(crawl)
    crawl.add_argument("--depth", type=_non_negative_int, default=0, help="follow links this many levels (default 0)")
    crawl.add_argument("--max-pages", type=_non_negative_int, default=0, help="stop scheduling after N pages (0: no cap)")
    crawl.add_argument("--delay", type=_positive_float, default=1.0, help="seconds between requests to one host (default 1)")
    crawl.add_argument("--allow", action="append", default=[], metavar="REGEX", help="only follow links matching")
    crawl.add_argument("--deny", action="append", default=[], metavar="REGEX", help="never follow links matching")
    crawl.add_argument("--contact", metavar="URL", help="contact URL put in the User-Agent")
    crawl.add_argument("--ignore-robots", action="store_true", help="do not obey robots.txt (only for sites you own)")
    crawl.add_argument("--workers", type=_non_negative_int, default=0, help="extraction processes (default: one per core)")
    crawl.set_defaults(handler=cmd_crawl)

    run = sub.add_parser("run", help="crawl and answer every question of a job file",
                         description="Crawl a job's URLs (incrementally) and answer every question; "
                                     "the exit code tells cron whether every question was answered.")
    run.add_argument("job", type=Path, metavar="JOB.yaml", help="the job file")
    _add_db(run)
    run.add_argument("--no-crawl", action="store_true", help="answer from the pages already stored")
    run.add_argument("--refresh", action="store_true", help="fetch pages even when recrawl_after says they are fresh")
    run.add_argument("--out", type=Path, metavar="DIR", help="output folder (default: the job's output.dir)")
    run.add_argument("--dry-run", action="store_true",
                     help="call no LLM: write each question's selection and exact prompt to the JSONL output")
    run.add_argument("--answerer", choices=("llm", "extractive"), help="override the job's answerer")
    run.add_argument("--wait", type=_positive_float, default=0.0, metavar="SECONDS",
                     help="wait this long for another run on the same database to finish (default: exit at once)")
    run.set_defaults(handler=cmd_run)

    ask = sub.add_parser("ask", help="answer one question from the stored pages",
                         description="Answer one question from the chunks already in the database.")
    ask.add_argument("question", help="the question")
    ask.add_argument("--url", action="append", default=[], metavar="URL", help="only search this page; repeatable")
    _add_db(ask)
    ask.add_argument("--method", choices=("keyword", "bm25", "embedding", "hybrid"), default="hybrid")
    ask.add_argument("--top-k", type=_non_negative_int, default=6, help="chunks sent to the answerer (default 6)")
    ask.add_argument("--budget", type=_non_negative_int, default=3000, help="token budget of the sources (default 3000)")
    ask.add_argument("--model", default="llama3.2:3b", help="Ollama model (default llama3.2:3b)")
    ask.add_argument("--embedding-model", default="nomic-embed-text", help="Ollama embedding model")
    ask.add_argument("--answerer", choices=("llm", "extractive"), default="llm")
    ask.add_argument("--no-retry", action="store_true", help="do not retry with a wider selection")
    ask.add_argument("--json", action="store_true", help="print one JSON object (selection, prompt, answer)")
    ask.add_argument("--dry-run", action="store_true", help="call no LLM: show the selection and the exact prompt")
    ask.set_defaults(handler=cmd_ask)

    explain = sub.add_parser("explain", help="show why an answer came out as it did",
                             description="The debugging checklist for one answer: every candidate chunk with its "
                                         "scores and matched terms, what was sent and what dropped and why, the "
                                         "exact prompt, the raw reply and the citation checks.")
    explain.add_argument("answer_id", type=int, metavar="ANSWER_ID")
    _add_db(explain)
    explain.add_argument("--no-prompt", action="store_true", help="leave out the prompt text")
    explain.set_defaults(handler=cmd_explain)
    return parser


def _notifier(args: argparse.Namespace) -> Callable[[str], None]:
    def notify(message: str) -> None:
        if not args.quiet or message.startswith(("Notice", "Error")):
            print(message, file=sys.stderr, flush=True)

    return notify


def cmd_run(args: argparse.Namespace) -> int:
    from jobs.config import load_job
    from jobs.runner import RunOptions, run_job

    job = load_job(args.job)
    options = RunOptions(db=Path(args.db), crawl=not args.no_crawl, out_dir=args.out, dry_run=args.dry_run,
                         refresh=args.refresh, wait_seconds=args.wait, answerer=args.answerer,
                         verbose=args.verbose, progress=_interactive(args))
    result = run_job(job, options, _notifier(args))
    print(result.line())
    for path in result.outputs:
        print(f"  {path}")
    return int(result.exit_code)


def cmd_ask(args: argparse.Namespace) -> int:
    import json

    from crawler.urllist import normalise_url
    from jobs.answer import AskSettings, QuestionAnswerer, QuestionSpec
    from jobs.llm import OllamaClient, OllamaSettings
    from jobs.report import outcome_json
    from jobs.select import Selector
    from pipelines.store import RunStore

    urls = []
    for raw in args.url:
        url, reason = normalise_url(raw)
        if url is None:
            raise ConfigError(f"--url {raw!r}: {reason}")
        urls.append(url)
    notify = _notifier(args)
    if not Path(args.db).exists():
        # Opening it would create an empty database only to report that it holds nothing.
        raise StoreError(f"{args.db}: no such database; run `webqa crawl URL… --db {args.db}` first, or pass --db")
    settings = OllamaSettings(model=args.model, embedding_model=args.embedding_model)
    client = OllamaClient(settings)
    answerer = args.answerer
    llm = embedder = None
    wants_embeddings = args.method in ("embedding", "hybrid")
    # Why embedding selection cannot be used; the selection's notice says it once, with the fix.
    embedding_unavailable = None
    if wants_embeddings or (answerer == "llm" and not args.dry_run):
        try:
            client.ping()
            if answerer == "llm" and not args.dry_run:
                client.ensure_model(args.model)
                llm = client
            if wants_embeddings:
                embedder = client if client.has_model(args.embedding_model) else None
                if embedder is None:
                    embedding_unavailable = (f"embedding model {args.embedding_model} is not available on "
                                             f"{client.host}; run `ollama pull {args.embedding_model}`")
        except LLMUnavailableError as exc:
            if answerer == "llm" and not args.dry_run:
                raise
            embedding_unavailable = str(exc)
    with RunStore.open(args.db) as store:
        if store.count_chunks() == 0:
            raise NothingToDoError(f"{args.db} holds no chunks; run `webqa crawl URL… --db {args.db}` first")
        if store.fts_is_stale():
            store.rebuild_fts()
        selector = Selector(store.conn, embedder=embedder, embedding_model=args.embedding_model if embedder else None,
                            ensure_fts=store.load_fts, embedding_unavailable=embedding_unavailable)
        ask = AskSettings(method=args.method, top_k=max(1, args.top_k), token_budget=max(1, args.budget),
                          retry_wider=not args.no_retry, answerer=answerer, dry_run=args.dry_run, model=args.model)
        outcome = QuestionAnswerer(store, selector, llm, ask).answer(
            QuestionSpec("ask", args.question, tuple(urls) if urls else None))
    obj = outcome_json(outcome)
    if outcome.notice:
        notify(f"Notice: {outcome.notice}")
    if args.json:
        print(json.dumps(obj, ensure_ascii=False, indent=2, default=str))
    else:
        _print_answer(obj, args.dry_run)
    if outcome.error:
        raise WebqaError(outcome.error)
    return ExitCode.OK


def _print_answer(obj: dict, dry_run: bool) -> None:
    if dry_run:
        print(f"Selection ({obj['method_used']}):")
        for chunk in obj["chunks"]:
            mark = f"SOURCE {chunk['source_number']}" if chunk["sent"] else "dropped"
            print(f"  #{chunk['rank']:<3} {chunk['score']:.4f}  {mark:<9}  {chunk['heading_path'] or chunk['url']}")
        print()
        print(obj["prompt"] or "")
        return
    print(obj.get("answer"))
    print()
    print(f"Confidence: {obj.get('confidence')}; grounded: {'yes' if obj.get('grounded') else 'no'}; "
          f"answer id {obj.get('answer_id')} (webqa explain {obj.get('answer_id')})")
    for c in obj.get("citations", []):
        mark = "ok" if c["valid"] else f"INVALID: {c['reason']}"
        print(f"  [{c['source']}] {c.get('heading_path') or ''} <{c.get('url')}> “{c['quote']}” ({mark})")


def cmd_explain(args: argparse.Namespace) -> int:
    from jobs.explain import explain_answer
    from pipelines.store import RunStore

    with RunStore.open(args.db, read_only=True) as store:
        print(explain_answer(store, args.answer_id, show_prompt=not args.no_prompt))
    return ExitCode.OK


def cmd_crawl(args: argparse.Namespace) -> int:
    from crawler.run import CrawlOptions, run_crawl

    if not args.urls and not args.input:
        raise ConfigError("nothing to crawl: give URLs or -i FILE")
    options = CrawlOptions(
        urls=args.urls, urls_files=args.input, depth=args.depth, max_pages=args.max_pages, delay=args.delay,
        allow=args.allow, deny=args.deny, contact=args.contact, obey_robots=not args.ignore_robots,
        extract_workers=args.workers, verbose=args.verbose, progress=_interactive(args),
    )
    try:
        summary = run_crawl(options, args.db)
    except NothingToDoError as exc:
        for problem in getattr(exc.summary, "problems", []):
            _note(args, f"Skipped {problem}")
        if exc.summary is not None:
            print(exc.summary.line(), file=sys.stderr)  # type: ignore[attr-defined]
        raise
    for problem in summary.problems:
        _note(args, f"Skipped {problem}")
    print(summary.line())
    return ExitCode.OK if summary.count("failed") == 0 else ExitCode.PARTIAL


def _interactive(args: argparse.Namespace) -> bool:
    return sys.stderr.isatty() and not args.quiet and not args.verbose


def _note(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        print(message, file=sys.stderr)


def _configure_logging(args: argparse.Namespace) -> None:
    # The level sits on the handler, not only the root logger: Scrapy lowers the root level to DEBUG
    # when a crawl starts, and its chatter must not reach a cron mail.
    level = logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    if not args.verbose:
        handler.addFilter(_hide_disabled_components)
    logging.basicConfig(level=level, handlers=[handler], force=True)


def _hide_disabled_components(record: logging.LogRecord) -> bool:
    # Every failed URL is already recorded in fetch_log and counted in the summary line; Scrapy's
    # and Twisted's own reports of the same failures (with tracebacks) only show with -v.
    return not record.name.startswith(("scrapy", "twisted", "asyncio", "py.warnings"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return ExitCode.USAGE
    try:
        return int(handler(args))
    except WebqaError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        # `webqa … | head`: the reader left; say nothing more.
        sys.stderr.close()
        return int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
