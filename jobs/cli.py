"""The `webqa` command line: parse arguments, call the library, turn its errors into `Error: …` lines.

Business rules live in the library; this module only wires options, prints, and picks exit codes.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from jobs.errors import ConfigError, ExitCode, Interrupted, NothingToDoError, StoreError, WebqaError
from pipelines import defaults
from pipelines.redact import inert, redact_text

# A command gets its parsed arguments and the console that prints (and logs) its messages.
Handler = Callable[[argparse.Namespace, "Console"], int]


def _argument(convert: Callable[[str], Any], what: str, ok: Callable[[Any], bool], in_range: str) -> Callable[[str], Any]:
    """An argparse ``type``: ``convert`` the text, then check it; each failure is one line naming the value."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {in_range}, got {text!r}")
        return value

    return parse


_positive_float = _argument(float, "a number of seconds", lambda v: v >= 0, "a number ≥ 0")
_duration = _argument(float, "a number of seconds", lambda v: v > 0, "a number > 0")
_similarity = _argument(float, "a number between 0 and 1", lambda v: 0 < v <= 1, "a number between 0 and 1")
_non_negative_int = _argument(int, "a whole number", lambda v: v >= 0, "a whole number ≥ 0")
_run_id = _argument(int, "a run id (a whole number, see `webqa runs`)", lambda v: v >= 1, "a run id ≥ 1")


class Console:
    """Where messages go: stderr as --quiet allows, and every one of them, timestamped, to --log-file.

    ``info`` is progress and summaries of steps, ``important`` is errors and notices, ``result`` is a
    command's final summary on stdout. The log file gets all three whatever --quiet says, so cron can
    keep stdout/stderr short and the file complete.

    Under --quiet nothing is printed while the command works: a command that exits 0 prints nothing at
    all, and any other exit code prints one line on stderr (``quiet_line``), which names what happened.
    """

    def __init__(self, quiet: bool = False, log: TextIO | None = None) -> None:
        self.quiet = quiet
        self.log = log
        self.verdict: str | None = None  # the command's one line for --quiet, set by its handler
        self.last_important: str | None = None

    def _stamp(self, message: str) -> None:
        if self.log is None:
            return
        message = shown(message)
        prefix = f"{time.strftime('%Y-%m-%d %H:%M:%S')} webqa[{os.getpid()}] "
        try:
            self.log.write("".join(f"{prefix}{line}\n" for line in message.splitlines() or [""]))
            self.log.flush()
        except OSError:
            pass  # a full disk must not turn a finished run into a failure

    def info(self, message: str) -> None:
        if not self.quiet:
            print(shown(message), file=sys.stderr, flush=True)
        self._stamp(message)

    def important(self, message: str) -> None:
        if not self.quiet:
            print(shown(message), file=sys.stderr, flush=True)
        self.last_important = message
        self._stamp(message)

    def result(self, message: str) -> None:
        if not self.quiet:
            print(shown(message), flush=True)
        self._stamp(message)

    def error(self, message: str) -> None:
        """The line of a command that stopped on an error: printed under --quiet too (it is the one line)."""
        print(shown(message), file=sys.stderr, flush=True)
        self.verdict = None
        self._stamp(message)

    def quiet_line(self, code: int) -> None:
        """Under --quiet, at the end: nothing for exit 0, else the command's one line naming what happened."""
        if not self.quiet or code == 0:
            return
        line = self.verdict or self.last_important
        if line:
            print(shown(line), file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None


def show(text: object = "") -> None:
    """print() for text that carries what came from outside (answers, quotes, URLs, headings): :func:`shown`."""
    print(shown(str(text)), flush=True)


def shown(message: str) -> str:
    """What may reach a terminal, cron mail or log file: no URL credentials, no control characters (text
    from pages, LLM replies and URLs is in many messages)."""
    return inert(redact_text(message))


class _Shown(logging.Filter):
    """Log records as :func:`shown` makes messages: Scrapy logs its settings, a Redis URL with its password."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is logging's to report, as before
            return True
        cleaned = shown(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def default_db() -> str:
    """$WEBQA_DB, read when the command line is parsed (not at import), else ./webqa.duckdb."""
    return os.environ.get("WEBQA_DB", defaults.DB)


def _add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=default_db(), metavar="PATH",
                        help="DuckDB file (default: $WEBQA_DB or ./webqa.duckdb)")


def _check_db(args: argparse.Namespace) -> None:
    """A folder as --db would fail later with a DuckDB or lock-file message that hides the slip."""
    db = getattr(args, "db", None)
    if db is not None and Path(db).is_dir():
        raise ConfigError(f"--db {db}: is a folder; pass a file path such as {Path(db) / 'webqa.duckdb'}")


def _add_global_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, after_command: bool) -> None:
    """-v, -q and --log-file: on the main parser with defaults, and on every subcommand without.

    A subcommand's default would overwrite what was given before its name (``webqa -q run JOB``), so
    there each option sets its attribute only when it is written (``webqa run JOB -q``).
    """
    flag, path = (argparse.SUPPRESS, argparse.SUPPRESS) if after_command else (False, None)
    parser.add_argument("-v", "--verbose", action="store_true", default=flag, help="show Scrapy's and webqa's log")
    parser.add_argument("-q", "--quiet", action="store_true", default=flag,
                        help="for cron: nothing on exit 0, else one line naming what happened (other commands: "
                             "their output only)")
    parser.add_argument("--log-file", type=Path, metavar="PATH", default=path,
                        help="append every message (progress, notices, errors, summaries, warnings), timestamped, "
                             "to PATH, whatever --quiet says")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("webqa")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed; run scripts/setup.sh)"


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage error under --quiet is the one line --quiet promises (exit 2)."""

    quiet = False

    def error(self, message: str) -> NoReturn:
        if _Parser.quiet:
            self.exit(int(ExitCode.USAGE), f"Error: {self.prog}: {message}\n")
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    from jobs import llm_defaults as llm  # Ollama's defaults for `ask`, without importing the client

    parser = _Parser(
        prog="webqa",
        description="Crawl URL lists politely, store them in DuckDB, and answer questions about them with a local LLM.",
    )
    parser.add_argument("--version", action="version", version=f"webqa {_version()}",
                        help="print the installed version and exit")
    _add_global_options(parser, after_command=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    crawl = sub.add_parser("crawl", help="fetch, clean, chunk and store pages",
                           description="Fetch URLs (arguments and/or files), clean and chunk them into the database.")
    crawl.add_argument("urls", nargs="*", metavar="URL", help="URLs to crawl; 'sitemap:URL' crawls the pages a sitemap lists")
    crawl.add_argument("-i", "--input", action="append", default=[], type=Path, metavar="FILE",
                       help="file of URLs: one per line (# comments allowed) or a YAML list; repeatable")
    _add_db(crawl)
    crawl.add_argument("--depth", type=_non_negative_int, default=0, help="follow links this many levels (default 0)")
    crawl.add_argument("--max-pages", type=_non_negative_int, default=0, help="stop scheduling after N pages (0: no cap)")
    crawl.add_argument("--delay", type=_positive_float, default=defaults.DELAY,
                       help=f"seconds between requests to one host (default {defaults.DELAY:g})")
    crawl.add_argument("--allow", action="append", default=[], metavar="REGEX", help="only follow links matching")
    crawl.add_argument("--deny", action="append", default=[], metavar="REGEX", help="never follow links matching")
    crawl.add_argument("--contact", metavar="URL", help="contact URL put in the User-Agent")
    crawl.add_argument("--ignore-robots", action="store_true", help="do not obey robots.txt, robots meta tags or X-Robots-Tag (only for sites you own)")
    crawl.add_argument("--workers", type=_non_negative_int, default=0, help="extraction processes (default: one per core)")
    crawl.add_argument("--timeout", type=_positive_float, default=defaults.TIMEOUT, metavar="SECONDS",
                       help=f"give up on a response after this long (default {defaults.TIMEOUT:g})")
    crawl.add_argument("--max-bytes", type=_non_negative_int, default=defaults.MAX_BYTES, metavar="N",
                       help="largest body accepted, counted after decompression "
                            f"(default {defaults.MAX_BYTES // (1024 * 1024)} MiB)")
    crawl.add_argument("--allow-private-networks", action="store_true",
                       help="crawl loopback, private and link-local addresses (intranets); see SECURITY.md")
    crawl.add_argument("--max-duration", type=_duration, default=None, metavar="SECONDS",
                       help="stop after this long, keeping what was fetched (exit 1); default: no bound")
    crawl.add_argument("--redis", metavar="URL",
                       help="share the crawl through Redis (redis://host:6379/0): this command seeds it and stores "
                            "the pages, `webqa worker --redis URL` processes fetch them; needs webqa[redis]")
    crawl.set_defaults(handler=cmd_crawl)

    worker = sub.add_parser("worker", help="fetch pages for a crawl shared through Redis (webqa crawl --redis)",
                            description="Join the crawl a `webqa crawl --redis URL` coordinator published, fetch and "
                                        "clean its pages until the coordinator ends it, then exit.")
    worker.add_argument("--redis", required=True, metavar="URL", help="the coordinator's Redis, e.g. redis://host:6379/0")
    worker.add_argument("--wait", type=_positive_float, default=600.0, metavar="SECONDS",
                        help="how long to wait for a crawl to be published (default 600)")
    worker.add_argument("--workers", type=_non_negative_int, default=0,
                        help="extraction processes (default: one per core)")
    worker.set_defaults(handler=cmd_worker)

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
    run.add_argument("--allow-private-networks", action="store_true",
                     help="crawl loopback, private and link-local addresses (intranets); see SECURITY.md")
    run.add_argument("--wait", type=_positive_float, default=0.0, metavar="SECONDS",
                     help="wait this long for another run on the same database to finish (default: exit at once)")
    run.add_argument("--resume", action="store_true",
                     help="continue the job's last run if it was killed, interrupted or stopped by a full disk (same "
                          "run id): stopped in its crawl, fetch the pages it had not fetched, then answer; stopped "
                          "while answering, ask only the questions without an answer, without crawling; otherwise "
                          "start a new run")
    run.add_argument("--fail-on-change", action="store_true",
                     help="exit 5 when an answer changed (other verdict or quotes), is new or is no longer answered "
                          "since the job's previous successful run (failures keep their own exit codes)")
    run.add_argument("--fail-on-reworded", action="store_true",
                     help="as --fail-on-change, and a reworded answer (same verdict and quotes, other words) "
                          "counts as a change too")
    run.set_defaults(handler=cmd_run)

    runs = sub.add_parser("runs", help="list the runs recorded in the database, newest first",
                          description="List runs (newest first): status (a run whose process died shows as "
                                      "'killed'), times, counts and how many answers changed.")
    _add_db(runs)
    runs.add_argument("--job", metavar="NAME", help="only the runs of this job")
    runs.add_argument("--limit", type=_non_negative_int, default=20, metavar="N",
                      help="show at most N runs (default 20; 0: all)")
    runs.add_argument("--json", action="store_true", help="print a JSON list")
    runs.set_defaults(handler=cmd_runs)

    reindex = sub.add_parser("reindex", help="rebuild the selection indexes from the stored chunks",
                             description="Rebuild BM25 postings, document statistics and embedding vector tables "
                                         "from every stored chunk. Crawls keep them current page by page; this is "
                                         "the full build, for checking or after editing the database by hand.")
    _add_db(reindex)
    reindex.set_defaults(handler=cmd_reindex)

    diff = sub.add_parser("diff", help="what changed between two runs: answers and pages",
                          description="Compare two runs: answers changed (on their evidence, not their wording), "
                                      "new, no longer answered; pages new, changed, unchanged, gone, and which "
                                      "answers cite them. Without run ids: the last two successful runs of the job "
                                      "(--job, or the only job). With one: that run against the run before it.")
    diff.add_argument("run_a", type=_run_id, nargs="?", metavar="RUN_A", help="the earlier run")
    diff.add_argument("run_b", type=_run_id, nargs="?", metavar="RUN_B", help="the later run")
    _add_db(diff)
    diff.add_argument("--job", metavar="NAME", help="the job whose last two successful runs to compare")
    diff.add_argument("--json", action="store_true", help="print one JSON object")
    diff.set_defaults(handler=cmd_diff)

    ask = sub.add_parser("ask", help="answer one question from the stored pages",
                         description="Answer one question from the chunks already in the database.")
    ask.add_argument("question", help="the question")
    ask.add_argument("--url", action="append", default=[], metavar="URL", help="only search this page; repeatable")
    ask.add_argument("--job", metavar="NAME",
                     help="only search the pages that job's crawls reached (default: the whole database)")
    _add_db(ask)
    ask.add_argument("--method", choices=("keyword", "bm25", "embedding", "hybrid"), default=defaults.SELECTION_METHOD,
                     help=f"chunk ranking method (default {defaults.SELECTION_METHOD}, as a job's)")
    ask.add_argument("--top-k", type=_non_negative_int, default=defaults.TOP_K,
                     help=f"most chunks sent to the answerer, a ceiling (default {defaults.TOP_K}, as a job's)")
    ask.add_argument("--budget", type=_non_negative_int, default=defaults.TOKEN_BUDGET,
                     help=f"token budget of the sources (default {defaults.TOKEN_BUDGET}, as a job's)")
    ask.add_argument("--model", default=llm.DEFAULT_MODEL, help=f"Ollama model (default {llm.DEFAULT_MODEL})")
    ask.add_argument("--embedding-model", default=llm.DEFAULT_EMBEDDING_MODEL, help="Ollama embedding model")
    ask.add_argument("--answerer", choices=("llm", "extractive"), default="llm",
                     help="who writes the answer (default llm); extractive quotes the best sentences and needs no "
                          "Ollama with --method keyword or bm25")
    ask.add_argument("--no-retry", action="store_true", help="do not retry with a wider selection")
    ask.add_argument("--min-similarity", type=_similarity, default=None, metavar="X",
                     help="embedding/hybrid: below this best cosine, answer Not enough information without the LLM")
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

    schema = sub.add_parser("schema", help="print the job file's JSON Schema (for editor completion and checks)",
                            description="Print the JSON Schema of job files. Point your editor's YAML support at it, "
                                        "e.g. `# yaml-language-server: $schema=configs/job.schema.json`.")
    schema.set_defaults(handler=cmd_schema)

    evaluate = sub.add_parser(
        "eval", help="where are answers lost? the coverage funnel and recall per selection method",
        description="For questions with `url` (the page that answers) and `expect` (verbatim phrases from it): "
                    "is a phrase in the fetched HTML, in the cleaned text, in which chunks, and at which rank "
                    "does the first answer-bearing chunk come for each method. Prints recall@1/3/5, MRR and "
                    "how many questions were lost at cleaning, chunking and selection.")
    evaluate.add_argument("questions", type=Path, metavar="QUESTIONS.yaml", help="a job file whose questions have expect (and url)")
    _add_db(evaluate)
    evaluate.add_argument("--method", action="append", choices=("keyword", "bm25", "embedding", "hybrid"),
                          help="methods to compare (repeatable; default: all four)")
    evaluate.add_argument("--top-k", type=_non_negative_int, default=5, help="rank that counts as found for 'lost at selection' (default 5)")
    evaluate.add_argument("--budget", type=_non_negative_int, default=None,
                          help="token budget of the evidence for answer-in-prompt (default: the job's selection.token_budget)")
    evaluate.add_argument("--pack-top-k", type=_non_negative_int, default=None,
                          help="most sources sent, for answer-in-prompt (default: the job's selection.top_k)")
    evaluate.add_argument("--json", action="store_true", help="print the funnel and summary as JSON")
    evaluate.set_defaults(handler=cmd_eval)
    for command in sub.choices.values():
        # Last, in their own section: each command's help starts with its own options.
        _add_global_options(command.add_argument_group("global options (also accepted before COMMAND)"),
                            after_command=True)
    return parser


def _notifier(console: Console) -> Callable[[str], None]:
    def notify(message: str) -> None:
        if message.startswith(("Notice", "Error")):
            console.important(message)
        else:
            console.info(message)

    return notify


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    from jobs.config import load_job

    if args.resume and args.dry_run:
        raise ConfigError("--resume continues a run that answers questions; it cannot be combined with --dry-run")
    job = load_job(args.job)
    # Imported after the job file is read: a bad job file is reported without paying for Scrapy's import.
    from jobs.runner import Notify, RunOptions, run_job

    options = RunOptions(db=Path(args.db), crawl=not args.no_crawl, out_dir=args.out, dry_run=args.dry_run,
                         refresh=args.refresh, wait_seconds=args.wait, answerer=args.answerer,
                         verbose=args.verbose, progress=_interactive(args), resume=args.resume,
                         fail_on_change=args.fail_on_change, fail_on_reworded=args.fail_on_reworded,
                         allow_private_networks=args.allow_private_networks)
    try:
        result = run_job(job, options, Notify(_notifier(console), console.important))
    except WebqaError as exc:
        run_id = getattr(exc, "run_id", None)
        if run_id is not None:  # stdout's summary line names the run, whatever stopped it
            status = "interrupted" if isinstance(exc, Interrupted) else "failed"
            console.result(f"Run {run_id} {status} (exit {int(exc.exit_code)}); see `webqa runs`")
        raise
    console.result(result.line())
    for path in result.outputs:
        console.result(f"  {path}")
    console.verdict = result.line()
    return int(result.exit_code)


def cmd_runs(args: argparse.Namespace, console: Console) -> int:
    import json

    from jobs.history import list_runs, render_runs, runs_json
    from jobs.runstore import RunStore

    with RunStore.open(args.db, read_only=True) as store:
        store.require_runs()
        runs = list_runs(store, args.job, args.limit or None)
    if args.json:
        print(json.dumps(runs_json(runs), ensure_ascii=False, indent=2, default=str))
    else:
        show(render_runs(runs))
    return ExitCode.OK


def cmd_reindex(args: argparse.Namespace, console: Console) -> int:
    from pipelines.store import Store

    if not Path(args.db).exists():
        raise StoreError(f"{args.db}: no such database; run `webqa crawl` first or pass --db")
    started = time.perf_counter()
    with Store.open(args.db) as store:
        store.reindex()
        chunks = store.count_chunks()
    show(f"reindexed {chunks} chunks in {time.perf_counter() - started:.1f} s")
    return ExitCode.OK


def cmd_diff(args: argparse.Namespace, console: Console) -> int:
    import json

    from jobs.history import compare_runs, default_pair, diff_json, previous_for, render_diff
    from jobs.runstore import RunStore

    if args.run_a is not None and args.job:
        raise ConfigError("give run ids or --job, not both")
    with RunStore.open(args.db, read_only=True) as store:
        store.require_runs()
        if args.run_a is None:
            run_a, run_b = default_pair(store, args.job)
        elif args.run_b is None:
            run_a, run_b = previous_for(store, args.run_a), args.run_a
        else:
            run_a, run_b = args.run_a, args.run_b
        diff = compare_runs(store, run_a, run_b)
    if args.json:
        print(json.dumps(diff_json(diff), ensure_ascii=False, indent=2, default=str))
    else:
        show("\n".join(render_diff(diff, between=True)).rstrip())
    return ExitCode.OK


def cmd_ask(args: argparse.Namespace, console: Console) -> int:
    import json

    from crawler.urllist import normalise_url
    from jobs.answer import AskSettings, QuestionSpec
    from jobs.llm import OllamaSettings, connect
    from jobs.report import outcome_json
    from jobs.session import open_session

    urls = []
    for raw in args.url:
        url, reason = normalise_url(raw)
        if url is None:
            raise ConfigError(f"--url {raw!r}: {reason}")
        urls.append(url)
    notify = _notifier(console)
    if not Path(args.db).exists():
        # Opening it would create an empty database only to report that it holds nothing.
        raise StoreError(f"{args.db}: no such database; run `webqa crawl URL… --db {args.db}` first, or pass --db")
    answerer = args.answerer
    chat = answerer == "llm" and not args.dry_run
    wants_embeddings = args.method in ("embedding", "hybrid")
    access = connect(OllamaSettings(model=args.model, embedding_model=args.embedding_model),
                     chat=chat, embeddings=wants_embeddings)
    degraded = None
    if access.unreachable is not None and chat:
        # As `webqa run` does: answer without the LLM, say so once, and exit 1 (degraded).
        answerer = "extractive"
        also = f" and selected with bm25 instead of {args.method}" if wants_embeddings else ""
        degraded = f"{access.unreachable}; answered extractively (quoting the best sentences) instead{also}"
        console.important(f"Notice: {degraded}")
    # The selection's notice says once why embedding selection cannot be used, with the fix.
    with open_session(args.db, access, embedding_model=args.embedding_model,
                      no_chunks=f"{args.db} holds no chunks; run `webqa crawl URL… --db {args.db}` first") as session:
        store = session.store
        if args.job:
            # The pages that job's last finished crawl reached, less those gone since, as `webqa run` searches them.
            job_pages = store.job_scope(args.job)
            if not job_pages:
                raise ConfigError(f"--job {args.job}: no stored page was reached by a crawl of that job; "
                                  "check the name (webqa runs lists the jobs)")
            urls = urls or job_pages  # --url narrows further
        ask = AskSettings(method=args.method, top_k=max(1, args.top_k), token_budget=max(1, args.budget),
                          retry_wider=not args.no_retry, answerer=answerer, dry_run=args.dry_run, model=args.model,
                          min_similarity=args.min_similarity)
        outcome = session.answerer(ask).answer(
            QuestionSpec("ask", args.question, tuple(urls) if urls else None))
    obj = outcome_json(outcome)
    if outcome.notice and degraded is None:  # a degraded ask has said why already, bm25 included
        notify(f"Notice: {outcome.notice}")
    if degraded is not None:
        obj["notice"] = degraded
    if args.json:
        print(json.dumps(obj, ensure_ascii=False, indent=2, default=str))
    else:
        _print_answer(obj, args.dry_run)
    if outcome.error:
        raise WebqaError(outcome.error)
    if degraded is not None:
        console.verdict = f"Notice: {degraded}"
        return ExitCode.PARTIAL
    return ExitCode.OK


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


def cmd_schema(args: argparse.Namespace, console: Console) -> int:
    import json

    from jobs.config import job_json_schema

    print(json.dumps(job_json_schema(), indent=2, ensure_ascii=False))
    return ExitCode.OK


def cmd_eval(args: argparse.Namespace, console: Console) -> int:
    import dataclasses
    import json

    from jobs.config import load_job
    from jobs.evaluate import EvalQuestion, Packing, evaluate, render_table, summarise
    from jobs.llm import connect
    from jobs.second_stage import job_stage
    from jobs.runner import ollama_settings
    from jobs.session import open_session

    job = load_job(args.questions)
    questions = [EvalQuestion(q.id, q.question, tuple(q.expect), q.url, tuple(q.urls) if q.urls else None,
                              tuple(q.also_urls)) for q in job.questions]
    if not any(q.expect for q in questions):
        raise ConfigError(f"{args.questions}: no question has `expect` phrases; eval needs them to know what a right chunk contains")
    methods = list(dict.fromkeys(args.method or ["keyword", "bm25", "embedding", "hybrid"]))
    if not Path(args.db).exists():
        raise StoreError(f"{args.db}: no such database; crawl the pages first (webqa crawl / webqa run)")
    access = connect(ollama_settings(job), chat=False,
                     embeddings=any(m in ("embedding", "hybrid") for m in methods))
    if access.embedding_unavailable:
        _notifier(console)(f"Notice: {access.embedding_unavailable}; leaving out embedding and hybrid")
        methods = [m for m in methods if m not in ("embedding", "hybrid")] or ["bm25"]
    with open_session(args.db, access, embedding_model=job.embedding_model, prefixes=job.embedding_prefixes(),
                      no_chunks=f"{args.db} holds no chunks to evaluate") as session:
        if job.scope != "database" and session.store.job_page_urls(job.name):
            # As `webqa run` without a crawl: the pages of the job's last finished crawl, less those gone since.
            scope = tuple(session.store.job_scope(job.name))
            questions = [q if q.urls else dataclasses.replace(q, urls=scope) for q in questions]
        packing = Packing(top_k=max(1, args.pack_top_k or job.selection.top_k),
                          token_budget=max(1, args.budget or job.selection.token_budget))
        stage = job_stage(session.selector, job)
        funnels = evaluate(session.selector, session.store, questions, methods, packing, stage=stage)
    summary = summarise(funnels, methods, k=max(1, args.top_k))
    if args.json:
        print(json.dumps({
            "methods": methods, "packing": {"top_k": packing.top_k, "token_budget": packing.token_budget,
                                            "retry_factor": packing.retry_factor},
            "summary": summary,
            "questions": [{"id": f.question.id, "in_html": f.in_html, "in_text": f.in_text,
                           "answer_chunks": f.answer_chunks, "ranks": f.ranks, "best_scores": f.best_scores,
                           "best_similarity": f.best_similarity, "in_prompt": f.in_prompt,
                           "in_prompt_wider": f.in_prompt_wider, "evidence_tokens": f.prompt_tokens,
                           "lost_at": {m: f.lost_at(m, max(1, args.top_k)) for m in methods},
                           "packing_ranks": f.packing_ranks, "cut_ranks": f.cut_ranks,
                           "prompt_loss": {m: f.prompt_loss(m) for m in methods}} for f in funnels],
        }, indent=2))
    else:
        show(render_table(funnels, summary, methods))
    return ExitCode.OK


def cmd_explain(args: argparse.Namespace, console: Console) -> int:
    from jobs.explain import explain_answer
    from jobs.runstore import RunStore

    with RunStore.open(args.db, read_only=True) as store:
        store.require_runs()
        show(explain_answer(store, args.answer_id, show_prompt=not args.no_prompt))
    return ExitCode.OK


def cmd_crawl(args: argparse.Namespace, console: Console) -> int:
    from crawler.run import CrawlOptions, run_crawl
    from jobs.crawl_lines import workers_lost_line
    from jobs.errors import WriteFailedError

    if not args.urls and not args.input:
        raise ConfigError("nothing to crawl: give URLs or -i FILE")
    options = CrawlOptions(
        urls=args.urls, urls_files=args.input, depth=args.depth, max_pages=args.max_pages, delay=args.delay,
        allow=args.allow, deny=args.deny, contact=args.contact, obey_robots=not args.ignore_robots,
        extract_workers=args.workers, verbose=args.verbose, progress=_interactive(args),
        timeout=args.timeout, max_bytes=args.max_bytes or defaults.MAX_BYTES,
        allow_private_networks=args.allow_private_networks, max_duration=args.max_duration,
        redis=args.redis,
    )
    try:
        summary = run_crawl(options, args.db)
    except Interrupted as exc:
        if exc.summary is not None:
            console.important(exc.summary.line())  # type: ignore[attr-defined]
        raise
    except (NothingToDoError, WriteFailedError) as exc:
        for problem in getattr(exc.summary, "problems", []):
            console.info(f"Skipped {problem}")
        if exc.summary is not None:
            console.important(exc.summary.line())
            _crawl_failures(console, exc.summary)
        raise
    for problem in summary.problems:
        console.info(f"Skipped {problem}")
    console.result(summary.line())
    console.verdict = "; ".join(filter(None, (summary.line(), summary.failures_phrase())))
    _crawl_failures(console, summary)
    if workers_lost_line(summary):  # a crawl through Redis: their leases were fetched again, but cron hears of it
        console.important(workers_lost_line(summary))
    # A crawl stopped by --max-duration left URLs unfetched, and one that met a bug may have: partial, like
    # failed ones.
    partial = summary.failures or summary.stopped_after or summary.internal_errors
    return ExitCode.PARTIAL if partial else ExitCode.OK


def _crawl_failures(console: Console, summary: Any) -> None:
    """The URLs that could not be fetched and why: for cron, so also under --quiet."""
    from jobs.crawl_lines import not_fetched_lines

    for line in not_fetched_lines(summary):  # the same lines as `webqa run` (jobs/crawl_lines.py)
        console.important(line)


def cmd_worker(args: argparse.Namespace, console: Console) -> int:
    try:
        from crawler.distributed.worker import run_worker
    except ImportError as exc:  # redis and scrapy-redis are the optional extra
        raise ConfigError(f"`webqa worker` needs the redis extra: pip install 'webqa[redis]' ({exc})") from None
    summary = run_worker(args.redis, wait=args.wait, extract_workers=args.workers, verbose=args.verbose)
    console.result(summary.line())
    return ExitCode.OK


def _interactive(args: argparse.Namespace) -> bool:
    return sys.stderr.isatty() and not args.quiet and not args.verbose


def _configure_logging(args: argparse.Namespace, log: TextIO | None = None) -> None:
    # The level sits on the handler, not only the root logger: Scrapy lowers the root level to DEBUG
    # when a crawl starts, and its chatter must not reach a cron mail.
    level = logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handlers: list[logging.Handler] = [handler]
    if log is not None:
        # The log file gets what a run without --quiet would show, --quiet or not.
        file_level = logging.DEBUG if args.verbose else logging.WARNING
        to_file = logging.StreamHandler(log)
        to_file.setLevel(file_level)
        to_file.setFormatter(logging.Formatter(f"%(asctime)s webqa[%(process)d] %(levelname)s %(name)s: %(message)s",
                                               datefmt="%Y-%m-%d %H:%M:%S"))
        handlers.append(to_file)
        level = min(level, file_level)
    for h in handlers:
        h.addFilter(_Shown())
        if not args.verbose:
            h.addFilter(_hide_disabled_components)
    logging.basicConfig(level=level, handlers=handlers, force=True)


def _hide_disabled_components(record: logging.LogRecord) -> bool:
    # Every failed URL is already recorded in fetch_log and counted in the summary line; Scrapy's
    # and Twisted's own reports of the same failures (with tracebacks) only show with -v.
    return not record.name.startswith(("scrapy", "twisted", "asyncio", "py.warnings"))


def _exit_now(console: Console, code: int) -> None:
    """A second signal: what had to be recorded is; do not wait for threads still talking to a server."""
    console.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _signals_until_exit() -> None:
    """From here to the process's end a stop signal is ignored: the command has recorded its outcome and its
    exit code says it (130 after a first signal). A Python handler would not do: interpreter shutdown puts
    the default action back, which ends the process as killed (143 for SIGTERM); an ignored signal stays so."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


class _Outcome:
    """Whether the command has its outcome (its exit code decided): later stop signals change nothing."""

    decided = False


def _stop(_signum: int, _frame: Any) -> None:
    """SIGINT and SIGTERM outside a command's own handling: stop (exit 130) until the outcome is decided."""
    if not _Outcome.decided:
        raise KeyboardInterrupt


def _signals_until_handled() -> None:
    """Before and after a command's own handling, SIGTERM stops like SIGINT (KeyboardInterrupt: exit 130)."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
                signal.signal(sig, _stop)


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:  # the process's own command line: main owns the process's signals
        _signals_until_handled()
    try:
        return _main(argv)
    except KeyboardInterrupt:  # a signal as the outcome was being decided: the run is stopped either way
        return int(ExitCode.INTERRUPTED)
    finally:
        if argv is None:
            _signals_until_exit()


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    _Parser.quiet = any(w in ("-q", "--quiet") for w in words[: words.index("--") if "--" in words else None])
    args = parser.parse_args(argv)
    log: TextIO | None = None
    if args.log_file is not None:
        try:
            log = args.log_file.open("a", encoding="utf-8")
        except OSError as exc:
            print(f"Error: --log-file {args.log_file}: cannot open for appending: {exc.strerror or exc}",
                  file=sys.stderr)
            return int(ExitCode.USAGE)
    console = Console(args.quiet, log)
    _configure_logging(args, log)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        console.close()
        return ExitCode.USAGE
    try:
        if log is not None:
            console._stamp(f"$ webqa {' '.join(sys.argv[1:] if argv is None else argv)}")
        _check_db(args)
        code = int(handler(args, console))
        _Outcome.decided = True
        console.quiet_line(code)
        if log is not None:
            console._stamp(f"exit {code}")
        return code
    except Interrupted as exc:
        _Outcome.decided = True
        console.error(f"Interrupted: {exc}")
        console._stamp(f"exit {int(exc.exit_code)}")
        if exc.immediate:
            _exit_now(console, int(exc.exit_code))
        return int(exc.exit_code)
    except WebqaError as exc:
        _Outcome.decided = True
        console.error(f"Error: {exc}")
        console._stamp(f"exit {int(exc.exit_code)}")
        return int(exc.exit_code)
    except KeyboardInterrupt:
        _Outcome.decided = True
        console.error("Interrupted.")
        console._stamp(f"exit {int(ExitCode.INTERRUPTED)}")
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        # `webqa … | head`: the reader left; say nothing more.
        sys.stderr.close()
        return int(ExitCode.OK)
    finally:
        console.close()


if __name__ == "__main__":
    sys.exit(main())
