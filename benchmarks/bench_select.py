"""Benchmark 4 (and 6): selection latency per method at 10k and 100k chunks of the real corpus.

The chunks of benchmark 1's crawl (``benchmarks/results/corpus.duckdb``, made by ``bench_crawl.py``;
crawled here if missing) are replicated by SQL into a fresh bench database until it holds N chunks.
Every copy gets its own URL (``…?copy=r``), chunk id and heading path (``… › copy r``), hence its own
``embed_key`` (computed exactly as ``pipelines.store.embed_key`` does); each chunk gets the product's
embedding windows (``chunk_windows``: one per 150 words) and each window a hashed 384-dimension vector,
inserted in bulk. Then ``Store.rebuild_fts()``.

Latency is ``Selector.select(question, method)`` wall time for 30 questions about the manual (each
repeated, after one warm-up call per method), with the query embedding precomputed: the Selector's
embedder returns a ready vector, so no embedding model time is included. Build and queries run in
separate subprocesses, so the peak memory of each is measurable on its own.

Goals: bm25 < 50 ms, hybrid < 150 ms, median per question (the p95 is reported too).

    .venv/bin/python benchmarks/bench_select.py [--sizes 10000,100000] [--repeat 3] [--db CORPUS.duckdb]

``--recrawl`` measures the daily re-crawl instead (issue 16): on the built database, 1% of its pages are
rewritten through ``Store.save_pages`` in batches of 50 as the crawl writes them (every chunk's text changed,
as a changed page on the server), which indexes the batch's chunks in the batch's own transaction; then ``Store.reindex()`` rebuilds every index
in full, as every changed page used to cost. Both on the same database in the same process, then one
bm25 and one hybrid question after each.

    .venv/bin/python benchmarks/bench_select.py --recrawl --sizes 100000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import common

MODEL = "bench-hashed-384"
DIMS = 384
METHODS = ("keyword", "bm25", "embedding", "hybrid")
GOALS_MS = {"bm25": 50.0, "hybrid": 150.0}

# A deterministic pseudo-random vector in [-1, 1) per (seed, dimension), computed inside DuckDB.
_VECTOR_SQL = f"list_transform(range({DIMS}), i -> ((hash(%s || ':' || i) %% 20000)::FLOAT / 10000 - 1))"


def build(source: Path, target: Path, size: int) -> None:
    """Child process: the bench database with ``size`` chunks, vectors and the BM25 index."""
    from jobs.select import Selector
    from pipelines.store import Store
    from pipelines.vectors import add_windows, embed_key

    figures: dict[str, Any] = {}
    t0 = time.perf_counter()
    with Store.open(target) as store:
        conn = store.conn
        conn.execute(f"ATTACH '{source}' AS src (READ_ONLY)")
        base = conn.execute("SELECT count(*) FROM src.chunks").fetchone()[0]
        copies = -(-size // base)
        conn.execute(
            """
            INSERT INTO chunks
            SELECT chunk_id, url, ordinal, heading_path, text, token_estimate, content_hash,
                   sha256(CASE WHEN heading_path <> '' THEN heading_path || chr(10) || chr(10) || text ELSE text END)
            FROM (
                SELECT CASE WHEN r = 0 THEN s.chunk_id ELSE s.chunk_id || '-copy' || r END AS chunk_id,
                       CASE WHEN r = 0 THEN s.url ELSE s.url || '?copy=' || r END AS url,
                       s.ordinal,
                       CASE WHEN r = 0 THEN s.heading_path
                            WHEN s.heading_path = '' THEN 'copy ' || r
                            ELSE s.heading_path || ' › copy ' || r END AS heading_path,
                       s.text, s.token_estimate, s.content_hash, r
                FROM src.chunks s, range(0, $copies) t(r)
                ORDER BY r, s.chunk_id
                LIMIT $size
            )
            """,
            {"copies": copies, "size": size},
        )
        # The SQL embed_key must be the product's, or the Selector would see every chunk as un-embedded.
        sample = conn.execute("SELECT heading_path, text, embed_key FROM chunks USING SAMPLE 20 ROWS").fetchall()
        mismatched = sum(embed_key(h, t) != k for h, t, k in sample)
        if mismatched:
            raise SystemExit(f"embed_key computed in SQL differs from pipelines.store.embed_key on {mismatched}/20 rows")
        figures["chunks_insert_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        # The product's windows (a long chunk is embedded as several 150-word windows), then one hashed
        # vector per window, as Selector.embed_missing would store them.
        add_windows(conn, None)
        conn.execute(
            f"INSERT INTO embeddings SELECT $model, window_key, {DIMS}, {_VECTOR_SQL % 'window_key'} "
            "FROM (SELECT DISTINCT window_key FROM chunk_windows)",
            {"model": MODEL},
        )
        figures["embeddings_insert_s"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        store.rebuild_fts()
        figures["rebuild_fts_s"] = time.perf_counter() - t2
        conn.execute("DETACH src")
        figures["chunks"] = store.count_chunks()
        figures["distinct_urls"] = conn.execute("SELECT count(DISTINCT url) FROM chunks").fetchone()[0]
        figures["embeddings"] = conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]
        figures["source_chunks"] = base
        figures["copies"] = copies
        figures["text_mib"] = round(conn.execute("SELECT sum(strlen(text)) FROM chunks").fetchone()[0] / 2**20, 1)
    figures["total_s"] = time.perf_counter() - t0
    figures["db_mib"] = round(target.stat().st_size / 2**20, 1)
    print(json.dumps(figures))


def recrawl(db: Path, fraction: float) -> None:
    """Child process: rewrite ``fraction`` of the pages (indexed page by page), then rebuild in full."""
    import hashlib

    from jobs.select import Selector
    from pipelines.chunk import Chunk
    from pipelines.store import PageRecord, Store, utcnow

    out: dict[str, Any] = {}
    with Store.open(db) as store:
        conn = store.conn
        urls = [u for (u,) in conn.execute("SELECT DISTINCT url FROM chunks ORDER BY url").fetchall()]
        step = max(1, round(1 / fraction))
        changed = urls[::step]
        pages = []
        for url in changed:
            rows = conn.execute("SELECT chunk_id, ordinal, heading_path, text, token_estimate FROM chunks "
                                "WHERE url = ? ORDER BY ordinal", [url]).fetchall()
            chunks = [Chunk(cid, ordinal, tuple(heading.split(" › ")) if heading else (), f"{text} Changed today.",
                            tokens + 2, hashlib.sha256(f"{text} Changed today.".encode()).hexdigest())
                      for cid, ordinal, heading, text, tokens in rows]
            body = "\n".join(c.text for c in chunks)
            pages.append((PageRecord(url=url, final_url=url, status=200, fetched_at=utcnow(), content_type="text/html",
                                     etag=None, last_modified=None, content_hash=hashlib.sha256(body.encode()).hexdigest(),
                                     title=url, lang="en", extractor="main", html_bytes=len(body), text_bytes=len(body),
                                     text=body, html=body), chunks))
        out.update(pages=len(urls), changed_pages=len(changed), changed_chunks=sum(len(c) for _, c in pages),
                   chunks=store.count_chunks())
        index_s = 0.0
        index_pages = store.index_pages

        def timed_index(page_urls: Any, rows: Any = ()) -> None:
            nonlocal index_s
            t = time.perf_counter()
            index_pages(page_urls, rows)
            index_s += time.perf_counter() - t

        store.index_pages = timed_index  # type: ignore[method-assign]
        t = time.perf_counter()
        store.load_fts()  # once per process (the crawl pays it once), not per page
        out["load_fts_s"] = round(time.perf_counter() - t, 3)
        t0 = time.perf_counter()
        for start in range(0, len(pages), 50):  # as the crawl writes them (StorePipeline.batch_pages)
            store.save_pages(pages[start : start + 50], None)
        out["save_pages_s"] = time.perf_counter() - t0
        out["incremental_index_s"] = index_s
        store.index_pages = index_pages  # type: ignore[method-assign]
        vectors = {q: conn.execute(f"SELECT {_VECTOR_SQL % '$q'}", {"q": "question " + q}).fetchone()[0]
                   for q in common.QUESTIONS}
        questions = list(common.QUESTIONS)

        def first_questions(label: str) -> None:
            selector = Selector(conn, embedder=PrecomputedEmbedder(vectors), embedding_model=MODEL,
                                ensure_fts=store.load_fts)
            t = time.perf_counter()
            selector.select(questions[0], "hybrid")  # embeds the changed chunks' windows (stand-in vectors)
            out[f"{label}_first_hybrid_s"] = round(time.perf_counter() - t, 2)
            for method in ("bm25", "hybrid"):
                samples = []
                for q in questions:
                    t = time.perf_counter()
                    selector.select(q, method)
                    samples.append(time.perf_counter() - t)
                out[f"{label}_{method}_median_ms"] = round(common.median(samples) * 1000, 1)

        first_questions("after_incremental")
        t1 = time.perf_counter()
        store.reindex()
        out["full_rebuild_s"] = time.perf_counter() - t1
        first_questions("after_full")
    out["incremental_over_full"] = round(out["incremental_index_s"] / out["full_rebuild_s"], 4)
    print(json.dumps(out))


class PrecomputedEmbedder:
    """Returns the vector prepared for each question: the benchmark leaves the embedding model out."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors
        self.calls = 0

    def embed(self, texts: Sequence[str], *, model: str | None = None) -> list[list[float]]:
        self.calls += 1
        return [self.vectors[t] if t in self.vectors else _hashed_vector(t) for t in texts]


def _hashed_vector(text: str) -> list[float]:
    """A deterministic stand-in vector for a text not prepared in SQL (a chunk changed by --recrawl)."""
    import hashlib

    digest = hashlib.sha256(text.encode()).digest()
    return [((digest[i % 32] * 31 + i) % 200) / 100 - 1 for i in range(DIMS)]


def query(db: Path, repeat: int, methods: Sequence[str], budget_s: float) -> None:
    """Child process: time Selector.select for every question and method; prints one JSON line.

    Every question is asked at least once per method; further passes (up to ``repeat``) only while the
    method has used less than ``budget_s``, so a slow method cannot stretch the run to many minutes.
    """
    from jobs.select import Selector
    from pipelines.store import Store

    questions = list(common.QUESTIONS)
    out: dict[str, Any] = {"questions": len(questions), "repeat": repeat, "methods": {}}
    with Store.open(db) as store:
        vectors = {q: store.conn.execute(f"SELECT {_VECTOR_SQL % '$q'}", {"q": "question " + q}).fetchone()[0]
                   for q in questions}
        embedder = PrecomputedEmbedder(vectors)
        selector = Selector(store.conn, embedder=embedder, embedding_model=MODEL, ensure_fts=store.load_fts)
        for method in methods:
            t0 = time.perf_counter()
            first = selector.select(questions[0], method)
            first_s = time.perf_counter() - t0
            if first.method_used != method:
                raise SystemExit(f"{method} fell back to {first.method_used}: {first.notice}")
            samples: list[float] = []
            per_question: dict[str, list[float]] = {}
            candidates = 0
            passes = 0
            method_start = time.perf_counter()
            while passes < repeat and (passes == 0 or time.perf_counter() - method_start < budget_s):
                passes += 1
                for q in questions:
                    t = time.perf_counter()
                    selection = selector.select(q, method)
                    elapsed = time.perf_counter() - t
                    samples.append(elapsed)
                    per_question.setdefault(q, []).append(elapsed)
                    candidates += len(selection.candidates)
            # One figure per question: its median over the repeats; then median and p95 over questions.
            by_question = [common.median(v) for v in per_question.values()]
            slowest = max(per_question, key=lambda k: common.median(per_question[k]))
            out["methods"][method] = {
                "first_call_ms": round(first_s * 1000, 1),
                "median_ms": round(common.median(by_question) * 1000, 2),
                "p95_ms": round(common.percentile(by_question, 95) * 1000, 2),
                "max_ms": round(max(by_question) * 1000, 2),
                "min_ms": round(min(by_question) * 1000, 2),
                "all_samples_p95_ms": round(common.percentile(samples, 95) * 1000, 2),
                "mean_candidates": round(candidates / len(samples), 1),
                "passes": passes,
                "slowest_question": slowest,
            }
            print(f"    {method}: median {out['methods'][method]['median_ms']:.1f} ms, "
                  f"p95 {out['methods'][method]['p95_ms']:.1f} ms ({passes} passes)", file=sys.stderr, flush=True)
        out["embedder_calls"] = embedder.calls
    print(json.dumps(out))


class _ImportSpy:
    """A meta-path finder that only counts: which modules were looked for (failed imports repeat)."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        self.names[name] = self.names.get(name, 0) + 1
        return None


def _operators(node: dict[str, Any], out: list[tuple[float, str, int]]) -> None:
    if "operator_timing" in node:
        out.append((float(node["operator_timing"]), f"{node.get('operator_name', '?')}",
                    int(node.get("operator_cardinality", 0))))
    for child in node.get("children", []):
        _operators(child, out)


def profile(db: Path, method: str, out: Path) -> None:
    """Child process: where one method's time goes (for a missed goal). Prints a report.

    * cProfile of the first 10 questions (Python side, DuckDB calls as leaves), saved to ``out``;
    * import attempts made per question, over 3 questions (a failed import is not cached, so it repeats);
    * DuckDB's own profile of the last query of one select: time per operator.
    """
    import cProfile
    import pstats

    from jobs.select import Selector
    from pipelines.store import Store

    questions = list(common.QUESTIONS)[:10]
    with Store.open(db) as store:
        vectors = {q: store.conn.execute(f"SELECT {_VECTOR_SQL % '$q'}", {"q": "question " + q}).fetchone()[0]
                   for q in questions}
        selector = Selector(store.conn, embedder=PrecomputedEmbedder(vectors), embedding_model=MODEL,
                            ensure_fts=store.load_fts)
        selector.select(questions[0], method)
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        for q in questions:
            selector.select(q, method)
        prof.disable()
        wall = time.perf_counter() - t0
        spy = _ImportSpy()
        sys.meta_path.insert(0, spy)
        for q in questions[:3]:
            selector.select(q, method)
        sys.meta_path.remove(spy)
        report = out.with_suffix(".duckdb-profile.json")
        store.conn.execute("PRAGMA enable_profiling='json'")
        store.conn.execute(f"SET profiling_output='{report}'")
        t0 = time.perf_counter()
        selector.select(questions[0], method)
        one = time.perf_counter() - t0
        store.conn.execute("PRAGMA disable_profiling")
    print(f"cProfile, one pass of {len(questions)} questions ({wall:.2f} s with the profiler on):")
    stats = pstats.Stats(prof, stream=sys.stdout)
    stats.sort_stats("cumulative").print_stats(14)
    attempts = {k: round(v / 3, 1) for k, v in sorted(spy.names.items(), key=lambda kv: -kv[1])[:5]}
    print(f"module look-ups per question (each is a failed import searched on sys.path again): {attempts}")
    try:
        tree = json.loads(report.read_text())
        ops: list[tuple[float, str, int]] = []
        _operators(tree, ops)
        ops.sort(reverse=True)
        print(f"DuckDB profile of the last query of one select ({one * 1000:.0f} ms in all; query "
              f"latency {float(tree.get('latency', 0)) * 1000:.0f} ms, cpu {float(tree.get('cpu_time', 0)) * 1000:.0f} ms):")
        for seconds, name, rows in ops[:8]:
            print(f"  {seconds * 1000:8.1f} ms  {name:<24} {rows:>10,} rows out")
    except (OSError, ValueError) as exc:
        print(f"(no DuckDB profile: {exc})")
    finally:
        report.unlink(missing_ok=True)
    stats.dump_stats(str(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="chunk counts (default 10000,100000)")
    parser.add_argument("--repeat", type=int, default=3, help="times each question is asked per method (default 3)")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--budget", type=float, default=30.0,
                        help="seconds per method after which no further pass is started (default 30)")
    parser.add_argument("--db", type=Path, help="source database (default: benchmarks/results/corpus.duckdb)")
    parser.add_argument("--profile", action="store_true", help="also cProfile the methods that miss their goal")
    parser.add_argument("--max-wait", type=float, default=15.0,
                        help="wait up to this many seconds for a quiet machine before each query run (default 15)")
    parser.add_argument("--recrawl", action="store_true",
                        help="measure the daily re-crawl (1%% of pages changed: page-by-page indexing) against a "
                             "full index rebuild, instead of selection latency")
    parser.add_argument("--changed", type=float, default=0.01, help="fraction of pages changed with --recrawl")
    parser.add_argument("--recrawl-one", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--build", nargs=3, metavar=("SOURCE", "TARGET", "SIZE"), help=argparse.SUPPRESS)
    parser.add_argument("--query", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--profile-one", nargs=3, metavar=("DB", "METHOD", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    common.stop_cleanly_on_sigterm()
    methods = [m for m in args.methods.split(",") if m]
    if args.build:
        build(Path(args.build[0]), Path(args.build[1]), int(args.build[2]))
        return
    if args.query:
        query(args.query, args.repeat, methods, args.budget)
        return
    if args.recrawl_one:
        recrawl(args.recrawl_one, args.changed)
        return
    if args.profile_one:
        profile(Path(args.profile_one[0]), args.profile_one[1], Path(args.profile_one[2]))
        return

    machine = common.machine_info()
    common.print_machine(machine)
    source = common.ensure_corpus_db(args.db)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    me = Path(__file__).resolve()
    results: dict[str, Any] = {"model": MODEL, "dims": DIMS, "questions": len(common.QUESTIONS),
                               "repeat": args.repeat, "budget_s": args.budget, "source_db": str(source), "sizes": {}}
    with common.temp_dir("select") as tmp:
        for size in sizes:
            db = tmp / f"bench-{size}.duckdb"
            print(f"{size} chunks: building {db.name} from {source.name} ...")
            built = common.run_measured([common.PYTHON, me, "--build", source, db, size], timeout=900).check()
            build_fig = json.loads(built.stdout.strip().splitlines()[-1])
            print(f"  built in {built.wall_s:.1f} s: {build_fig['chunks']} chunks ({build_fig['source_chunks']} real "
                  f"× {build_fig['copies']} copies), {build_fig['text_mib']} MiB text; insert "
                  f"{build_fig['chunks_insert_s']:.1f} s, vectors {build_fig['embeddings_insert_s']:.1f} s, "
                  f"FTS {build_fig['rebuild_fts_s']:.1f} s; peak RSS {built.max_rss_mib:.0f} MiB")
            quiet = common.wait_for_quiet(args.max_wait)
            if args.recrawl:
                ran = common.run_measured([common.PYTHON, me, "--recrawl-one", db, "--changed", args.changed],
                                          timeout=1800).check()
                fig = json.loads(ran.stdout.strip().splitlines()[-1])
                print(f"  re-crawl: {fig['changed_pages']} of {fig['pages']} pages changed ({fig['changed_chunks']} "
                      f"chunks): page-by-page indexing {fig['incremental_index_s']:.2f} s (save_page in all "
                      f"{fig['save_pages_s']:.2f} s) against a full rebuild {fig['full_rebuild_s']:.1f} s: ratio "
                      f"{fig['incremental_over_full']:.3f}; bm25/hybrid median after incremental "
                      f"{fig['after_incremental_bm25_median_ms']}/{fig['after_incremental_hybrid_median_ms']} ms, "
                      f"after full {fig['after_full_bm25_median_ms']}/{fig['after_full_hybrid_median_ms']} ms; "
                      f"{common.load_note(ran.load)}")
                results["sizes"][str(size)] = {"build": build_fig, "recrawl": fig, "before": quiet,
                                               "process": ran.summary()}
                continue
            print(f"  querying: {len(common.QUESTIONS)} questions × {args.repeat} per method ...")
            ran = common.run_measured([common.PYTHON, me, "--query", db, "--repeat", args.repeat,
                                       "--budget", args.budget, "--methods", ",".join(methods)], timeout=900).check()
            for line in ran.stderr.strip().splitlines():
                print(line)
            fig = json.loads(ran.stdout.strip().splitlines()[-1])
            print(f"  {common.load_note(ran.load)}; peak RSS {ran.max_rss_mib:.0f} MiB")
            entry = {"build": {**build_fig, **{f"process_{k}": v for k, v in built.summary().items()}},
                     "query_process": ran.summary(), "before": quiet, "methods": fig["methods"],
                     "embedder_calls": fig["embedder_calls"]}
            if args.profile:
                entry["profiles"] = {}
                for method, goal in GOALS_MS.items():
                    if method in fig["methods"] and fig["methods"][method]["p95_ms"] >= goal:
                        out = common.RESULTS / f"select-{size}-{method}.prof"
                        common.RESULTS.mkdir(parents=True, exist_ok=True)
                        prof = common.run_measured([common.PYTHON, me, "--profile-one", db, method, out]).check()
                        print(f"  profile of {method} at {size} chunks (saved to {out.relative_to(common.REPO)}):")
                        print("\n".join("    " + line for line in prof.stdout.splitlines()[:40]))
                        entry["profiles"][method] = str(out.relative_to(common.REPO))
            results["sizes"][str(size)] = entry
    path = common.save_result("recrawl" if args.recrawl else "select", results, command=common.command_line(),
                              machine=machine)
    if args.recrawl:
        print(f"results: {path.relative_to(common.REPO)}")
        return

    print()
    print(f"[4] selection latency per question (ms; {len(common.QUESTIONS)} questions, each the median of up to "
          f"{args.repeat} runs; query embedding excluded):")
    print(f"    {'chunks':>7}  {'method':<9} {'median':>8} {'p95':>8} {'max':>8}  goal")
    for size, entry in results["sizes"].items():
        for method, m in entry["methods"].items():
            goal = GOALS_MS.get(method)
            # The goal is the median per question; a p95 above it is said beside the verdict.
            verdict = "" if goal is None else (f"< {goal:g}: " + ("met" if m["median_ms"] < goal else
                                                                  f"MISSED by {m['median_ms'] - goal:.0f} ms"))
            if goal is not None and m["p95_ms"] >= goal:
                verdict += f" (p95 {m['p95_ms']:.0f} ms)"
            print(f"    {size:>7}  {method:<9} {m['median_ms']:>8.1f} {m['p95_ms']:>8.1f} {m['max_ms']:>8.1f}  {verdict}")
    print("[6] peak RSS: " + "; ".join(
        f"{size}: build {e['build']['process_max_rss_mib']:.0f} MiB, queries {e['query_process']['max_rss_mib']:.0f} MiB"
        for size, e in results["sizes"].items()))
    print(f"results: {path.relative_to(common.REPO)}")


if __name__ == "__main__":
    sys.exit(main())
