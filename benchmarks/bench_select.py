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

Issue 16 at 300,000 chunks: ``--index-build`` also times ``Store.reindex()`` (the full index build: docs,
postings, unit vectors) on the built database in a process of its own, for its peak RSS; ``--vectors``
compares the embedding leg as the product runs it (exact dot product over unit FLOAT[384] vectors) with
cheaper exact forms (cosine function, list type, DOUBLE, one thread), with a bm25 prefilter for hybrid and
with DuckDB's vss HNSW index (``duckdb-extension-vss``, loaded from its wheel as the fts extension is),
reporting latency and what each loses against the exact ranking (top-50/top-10 overlap, and whether
hybrid's packed selection, top_k 40 / 3000 tokens, changes) over the 30 questions and the dev set's.

    .venv/bin/python benchmarks/bench_select.py --sizes 300000 --index-build --vectors --max-wait 5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import common

MODEL = "bench-hashed-384"
DIMS = 384
METHODS = ("keyword", "bm25", "embedding", "hybrid")
GOALS_MS = {"bm25": 50.0, "hybrid": 150.0}

# A deterministic pseudo-random vector in [-1, 1) per (seed, dimension), computed inside DuckDB.
# Hashed from (seed, dimension) as two values: hashing a concatenated string cost 7 times the CPU (a million
# chunks' 1.66M windows).
_VECTOR_SQL = f"list_transform(range({DIMS}), i -> ((hash(%s, i) %% 20000)::FLOAT / 10000 - 1))"


def build(source: Path, target: Path, size: int, *, index: bool = True, real: Path | None = None) -> None:
    """Child process: the bench database with ``size`` chunks, vectors and the BM25 index (``index`` False:
    without any index, for bench_vectors_scale.py's own index build; ``real``: a database of real vectors,
    see _insert_real_vectors)."""
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
        # A build killed after its chunks were inserted resumes from them (a million chunks take long).
        resumed = conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == size
        # ... and from its vectors, when they were inserted too (the index build is what failed).
        vectored = resumed and conn.execute("SELECT count(*) FROM embeddings").fetchone()[0] > 0
        # BENCH_NO_VECTORS=1: chunks and the bm25 index only (at a million chunks the vectors' build peaks
        # at 13 GiB, and bm25's latency does not need them).
        no_vectors = os.environ.get("BENCH_NO_VECTORS") == "1"
        vectored = vectored or no_vectors
        if not vectored or no_vectors:
            conn.execute("DELETE FROM chunk_windows")
            conn.execute("DELETE FROM embeddings")
        conn.execute("SELECT $copies + $size" if resumed else
            """
            INSERT INTO chunks (chunk_id, url, ordinal, heading_path, text, token_estimate, content_hash, embed_key)
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
        if not vectored:
            _add_windows_bulk(conn)
        if real is not None and not vectored:
            _insert_real_vectors(conn, real)
        conn.execute("SELECT $model" if vectored or real is not None else
            f"INSERT INTO embeddings SELECT $model, window_key, {DIMS}, {_VECTOR_SQL % 'window_key'} "
            "FROM (SELECT DISTINCT window_key FROM chunk_windows)",
            {"model": MODEL},
        )
        figures["embeddings_insert_s"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        # At a million chunks the index build would otherwise hold its sorts in memory (DuckDB's default
        # limit is 80% of RAM, on a machine others share): past the limit DuckDB spills to disk.
        if os.environ.get("BENCH_MEMORY_LIMIT"):
            conn.execute(f"SET memory_limit = '{os.environ['BENCH_MEMORY_LIMIT']}'")  # rebuild_fts keeps a lower one
        if index:
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


# The real model's vectors a --real-vectors build perturbs, and the noise: a uniform value in [-1, 1) per
# dimension times a scale drawn per window in [REAL_NOISE_LOW, REAL_NOISE_LOW + REAL_NOISE_SPREAD): a copy's
# cosine to its real vector is then about 0.95 down to 0.70.
REAL_MODEL = "all-minilm"
REAL_NOISE_LOW, REAL_NOISE_SPREAD = 0.03, 0.06
# A window's noise scale, and the noise of dimension i, hashed from its key (deterministic).
_REAL_SCALE_SQL = f"({REAL_NOISE_LOW} + {REAL_NOISE_SPREAD} * (hash(%s, -1) %% 10000)::FLOAT / 10000)"
_NOISE_SQL = "((hash(%s, i) %% 20000)::FLOAT / 10000 - 1)"


def _insert_real_vectors(conn: Any, real: Path) -> None:
    """Every window's vector: a real all-minilm vector of the database ``real`` (chosen by the window key's
    hash), plus noise, so that neighbours exist as in a real corpus (copies of a page embed alike; a random
    vector has no neighbours). Normalised later, as every vector is (unit_vectors_<dims>)."""
    conn.execute(f"ATTACH '{real}' AS realdb (READ_ONLY)")
    conn.execute("CREATE OR REPLACE TEMP TABLE real_vectors AS SELECT (row_number() OVER (ORDER BY embed_key) - 1) "
                 f"AS i, vector::FLOAT[{DIMS}] AS v FROM realdb.embeddings WHERE model = $m AND dims = {DIMS}",
                 {"m": REAL_MODEL})
    count = conn.execute("SELECT count(*) FROM real_vectors").fetchone()[0]
    if not count:
        raise SystemExit(f"{real}: no {REAL_MODEL} vectors of {DIMS} dimensions")
    noise = _NOISE_SQL % "w.window_key"
    conn.execute(
        f"INSERT INTO embeddings SELECT $model, w.window_key, {DIMS}, list_transform(range({DIMS}), i -> "
        f"r.v[i + 1] + {_REAL_SCALE_SQL % 'w.window_key'} * {noise}) FROM (SELECT window_key, "
        f"hash(window_key) % {count} AS i FROM (SELECT DISTINCT window_key FROM chunk_windows)) w "
        "JOIN real_vectors r USING (i)", {"model": MODEL})
    conn.execute("DETACH realdb")


def _add_windows_bulk(conn: Any) -> None:
    """pipelines.vectors.add_windows for every chunk, inserted in bulk (its VALUES statements of 200 rows
    would take most of an hour for 1.66M windows); the same rows."""
    import numpy as np

    from pipelines.vectors import EMBED_SCHEME, embed_windows, text_key

    last = ""
    while True:  # in slices of embed keys, so the texts of a million chunks are never all in memory
        chunks = conn.execute("SELECT embed_key, any_value(heading_path), any_value(text) FROM chunks "
                              "WHERE embed_key > $last GROUP BY embed_key ORDER BY embed_key LIMIT 100000",
                              {"last": last}).fetchall()
        if not chunks:
            return
        rows = [(key, index, text_key(window)) for key, heading, text in chunks
                for index, window in enumerate(embed_windows(heading, text))]
        batch = {"embed_key": np.array([r[0] for r in rows], dtype=object),  # noqa: F841 (DuckDB scans it)
                 "part": np.array([r[1] for r in rows], dtype=np.int32),
                 "window_key": np.array([r[2] for r in rows], dtype=object)}
        conn.execute("INSERT OR IGNORE INTO chunk_windows SELECT embed_key, $scheme, part, window_key FROM batch",
                     {"scheme": EMBED_SCHEME})
        last = chunks[-1][0]


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


def query(db: Path, repeat: int, methods: Sequence[str], budget_s: float, approximate: bool | None = None) -> None:
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
        selector = Selector(store.conn, embedder=embedder, embedding_model=MODEL, ensure_fts=store.load_fts,
                            approximate=approximate)
        out["approximate"] = approximate
        out["rss_before_mib"] = round(_vm_kib("VmRSS") / 1024)
        for method in methods:
            t0 = time.perf_counter()
            first = selector.select(questions[0], method)
            first_s = time.perf_counter() - t0
            if first.method_used != method:
                raise SystemExit(f"{method} fell back to {first.method_used}: {first.notice}")
            samples: list[float] = []
            per_question: dict[str, list[float]] = {}
            cpu_per_question: dict[str, list[float]] = {}
            candidates = 0
            passes = 0
            method_start = time.perf_counter()
            while passes < repeat and (passes == 0 or time.perf_counter() - method_start < budget_s):
                passes += 1
                for q in questions:
                    t, cpu = time.perf_counter(), time.process_time()
                    selection = selector.select(q, method)
                    elapsed = time.perf_counter() - t
                    # CPU seconds of every thread of this process: what other load on a shared machine
                    # changes far less than the wall time (DuckDB runs a query on up to 2 threads here).
                    cpu_per_question.setdefault(q, []).append(time.process_time() - cpu)
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
                "cpu_median_ms": round(common.median([common.median(v) for v in cpu_per_question.values()]) * 1000, 1),
                "cpu_p95_ms": round(common.percentile([common.median(v) for v in cpu_per_question.values()], 95) * 1000, 1),
                "mean_candidates": round(candidates / len(samples), 1),
                "passes": passes,
                "slowest_question": slowest,
            }
            m = out["methods"][method]
            print(f"    {method}: median {m['median_ms']:.1f} ms, p95 {m['p95_ms']:.1f} ms ({passes} passes); CPU "
                  f"per question median {m['cpu_median_ms']:.1f} ms, p95 {m['cpu_p95_ms']:.1f} ms; load average "
                  f"{os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
        out["embedder_calls"] = embedder.calls
    out["rss_after_mib"] = round(_vm_kib("VmRSS") / 1024)
    out["vm_hwm_mib"] = round(_vm_kib("VmHWM") / 1024)
    print(json.dumps(out))


def codes_build(db: Path) -> None:
    """Child process: vector_codes.rebuild (every unit vector encoded, in batches) alone, for its time and peak
    memory, as a database indexed before the codes existed pays it once."""
    from pipelines import vector_codes
    from pipelines.store import Store

    with Store.open(db) as store:
        t, cpu = time.perf_counter(), time.process_time()
        with store.transaction():
            rows = vector_codes.rebuild(store.conn, DIMS)
        print(json.dumps({"codes_build_s": round(time.perf_counter() - t, 1),
                          "codes_build_cpu_s": round(time.process_time() - cpu, 1), "rows": rows,
                          "vm_hwm_mib": round(_vm_kib("VmHWM") / 1024)}))


def vectors_index(db: Path) -> None:
    """Child process: the embedding index alone on a built database: selection_docs numbered by SQL as a full
    build numbers them (no bm25 postings: at a million chunks their build did not fit the time a loaded
    machine left), then the product's sliced unit-vector build and its codes (vectors.rebuild_unit_vectors).
    For the embedding leg's latency and recall when the full build is out of reach; bm25 is then unusable."""
    from pipelines import search_index as si, vectors as vec
    from pipelines.store import Store

    with Store.open(db) as store:
        conn = store.conn
        t, cpu = time.perf_counter(), time.process_time()
        with store.transaction():
            conn.execute("DELETE FROM bm25_postings")
            conn.execute("DELETE FROM selection_docs")
            conn.execute("INSERT INTO selection_docs SELECT (row_number() OVER (ORDER BY url, ordinal))::INTEGER, "
                         "chunk_id, url, ordinal, embed_key, 0, 'porter' FROM chunks ORDER BY 1")
            si.recount_statistics(conn)
        docs_s = time.perf_counter() - t
        t2 = time.perf_counter()
        with store.transaction():
            vec.rebuild_unit_vectors(conn, DIMS)
        print(json.dumps({"selection_docs_s": round(docs_s, 1), "unit_vectors_and_codes_s": round(time.perf_counter() - t2, 1),
                          "cpu_s": round(time.process_time() - cpu, 1), "vm_hwm_mib": round(_vm_kib("VmHWM") / 1024),
                          "windows": conn.execute(f"SELECT count(*) FROM unit_vectors_{DIMS}").fetchone()[0]}))


def postings_index(db: Path) -> None:
    """Child process: bm25's postings for a database indexed by ``vectors_index`` (docs kept, so the vectors
    keyed by them stay valid), slice by slice as the product's full build goes (search_index.url_slices), one
    transaction per slice. Prints time and peak RSS."""
    from pipelines import search_index as si
    from pipelines.store import Store

    with Store.open(db) as store:
        conn = store.conn
        store.load_fts()
        t, cpu = time.perf_counter(), time.process_time()
        conn.execute("DELETE FROM bm25_postings")
        slices = si.url_slices(conn, si.REBUILD_SLICE_CHUNKS)
        for piece in slices:
            bound = {"low": piece.low, "high": piece.high}
            with store.transaction():
                conn.execute(si.language_of_pages(si._IN_SLICE), bound)
                conn.execute(si.index_terms(f"(SELECT * FROM chunks WHERE {si._IN_SLICE})"), bound)
                conn.execute("UPDATE selection_docs s SET len = l.len FROM (SELECT chunk_id, sum(tf_heading + tf_text) "
                             "AS len FROM index_terms GROUP BY chunk_id) l WHERE s.chunk_id = l.chunk_id")
                conn.execute(si.INDEX_POSTINGS, {"base": 0})
                for statement in si.DROP_INDEX_TERMS:
                    conn.execute(statement)
        # As the product's full build ends: statistics counted, postings rewritten in one term order.
        t2, cpu2 = time.perf_counter(), time.process_time()
        with store.transaction():
            si.recount_statistics(conn)
            si.sort_postings(conn)
        print(json.dumps({"postings_s": round(time.perf_counter() - t, 1), "cpu_s": round(time.process_time() - cpu, 1),
                          "stats_and_sort_s": round(time.perf_counter() - t2, 1),
                          "stats_and_sort_cpu_s": round(time.process_time() - cpu2, 1),
                          "slices": len(slices), "vm_hwm_mib": round(_vm_kib("VmHWM") / 1024),
                          "postings": conn.execute("SELECT count(*) FROM bm25_postings").fetchone()[0]}))


def recall_questions(count: int) -> list[str]:
    """The 30 benchmark questions, the dev set's, then numbered ones up to ``count`` (their vectors are
    hashed like every bench vector, so a numbered question is as good a probe as a real one)."""
    qs = list(dict.fromkeys(list(common.QUESTIONS) + devset_questions()))
    return qs + [f"probe question {i}" for i in range(max(0, count - len(qs)))]


def codes_recall(db: Path, count: int, rescore: Sequence[int]) -> None:
    """Child process: the approximate first stage against the exact scan, per question: recall of the exact
    top 50 chunks, identical rankings, CPU per question of each, and whether two fresh runs agree."""
    from jobs.select import _unit_length
    from pipelines import vector_codes, vectors as vec
    from pipelines.store import Store

    questions = recall_questions(count)
    out: dict[str, Any] = {"questions": len(questions), "rescore": {}}
    with Store.open(db) as store:
        conn = store.conn
        qv = {q: _unit_length(conn.execute(f"SELECT {_VECTOR_SQL % '$q'}", {"q": "question " + q}).fetchone()[0])
              for q in questions}
        exact, exact_cpu = {}, []
        for q in questions:
            cpu = time.process_time()
            exact[q] = [r[0] for r in vec.rank(conn, qv[q], MODEL, None, pool=50)]
            exact_cpu.append(time.process_time() - cpu)
        out["exact_cpu_median_ms"] = round(common.median(exact_cpu) * 1000, 1)
        for k in rescore:
            runs = []
            for _ in range(2):  # two fresh caches: the same answer both times
                cache, ranked, cpu_s = vector_codes.CodeCache(), {}, []
                cpu0 = time.process_time()
                cache.get(conn, DIMS, MODEL)
                load_s = time.process_time() - cpu0
                for q in questions:
                    cpu = time.process_time()
                    rows = vector_codes.rank(conn, cache, qv[q], MODEL, pool=50, windows=k)
                    cpu_s.append(time.process_time() - cpu)
                    ranked[q] = [r[0] for r in rows] if rows is not None else None
                runs.append((ranked, cpu_s, load_s))
            ranked, cpu_s, load_s = runs[0]
            recalls = [len(set(ranked[q] or []) & set(exact[q])) / len(exact[q]) for q in questions]
            fig = {"mean_recall_top50": round(sum(recalls) / len(recalls), 4), "min_recall_top50": min(recalls),
                   "questions_all_50": sum(r == 1.0 for r in recalls), "same_order": sum(ranked[q] == exact[q] for q in questions),
                   "fell_back": sum(ranked[q] is None for q in questions), "repeatable": runs[0][0] == runs[1][0],
                   "cpu_median_ms": round(common.median(cpu_s) * 1000, 1),
                   "cpu_p95_ms": round(common.percentile(cpu_s, 95) * 1000, 1), "codes_load_cpu_s": round(load_s, 2)}
            out["rescore"][str(k)] = fig
            print(f"    rescore {k}: {fig}", file=sys.stderr, flush=True)
        out["vm_hwm_mib"] = round(_vm_kib("VmHWM") / 1024)
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


def reindex(db: Path) -> None:
    """Child process: the full index build (``Store.reindex()``: docs, postings, unit vectors) alone, so
    that its time and peak memory are its own, not the bench build's inserts."""
    from pipelines.store import Store

    with Store.open(db) as store:
        t = time.perf_counter()
        store.load_fts()
        store.reindex()
        seconds = time.perf_counter() - t
        windows = store.conn.execute(f"SELECT count(*) FROM unit_vectors_{DIMS}").fetchone()[0]
        postings = store.conn.execute("SELECT count(*) FROM bm25_postings").fetchone()[0]
    print(json.dumps({"reindex_s": round(seconds, 2), "vectors": windows, "postings": postings,
                      "vm_hwm_mib": _vm_kib("VmHWM") / 1024}))


def _vm_kib(field: str) -> int:
    """This process's VmRSS or VmHWM (peak) in KiB, from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def vss_extension_path() -> Path:
    """DuckDB's vss extension (HNSW indexes) from the ``duckdb-extension-vss`` wheel for this DuckDB version,
    loaded as pipelines.store.fts_extension_path loads fts. Benchmark only: the product does not use it."""
    import duckdb

    try:
        import duckdb_extension_vss
    except ImportError:
        raise SystemExit(f"--vectors needs the vss extension: .venv/bin/pip install "
                         f"duckdb-extension-vss=={duckdb.__version__}") from None
    path = (Path(duckdb_extension_vss.__file__).parent / "extensions" / f"v{duckdb.__version__}"
            / "vss.duckdb_extension")
    if not path.exists():
        raise SystemExit(f"{path} is missing: pip install duckdb-extension-vss=={duckdb.__version__}")
    return path


def devset_questions() -> list[str]:
    """The answerable questions of the Python-manual dev set (benchmarks/devset/questions.yaml)."""
    import yaml

    data = yaml.safe_load((common.REPO / "benchmarks" / "devset" / "questions.yaml").read_text())
    return [q["question"] for q in data["questions"] if q.get("url")]


def _spread(samples_by_question: dict[str, list[float]]) -> dict[str, float]:
    """Median and p95 over questions of each question's median, in ms."""
    by_question = [common.median(v) for v in samples_by_question.values()]
    return {"median_ms": round(common.median(by_question) * 1000, 1),
            "p95_ms": round(common.percentile(by_question, 95) * 1000, 1)}


def _overlap(approx: Sequence[str], exact: Sequence[str], n: int) -> float:
    return len(set(approx[:n]) & set(exact[:n])) / max(1, len(exact[:n]))


def vectors(db: Path, repeat: int, efs: Sequence[int], prefilters: Sequence[int]) -> None:
    """Child process: the embedding leg at this size, exact as the product runs it, cheaper exact forms,
    and approximate ones (a bm25 prefilter for hybrid; DuckDB's vss HNSW index) with the rankings they lose.

    Latency: the 30 benchmark questions, each the median of ``repeat`` runs. Rankings: those and the dev
    set's answerable questions (bm25 on their text; the query vectors are the bench's hashed ones).
    """
    from jobs.select import Selector, _unit_length, pack
    from pipelines.vectors import _EMBEDDING_RESULT, EMBEDDING_SQL, WINDOWS_PER_DOC, unit_vectors_table
    from pipelines.store import Store

    sql_selector, prefilter_selector = _selector_classes()
    table = unit_vectors_table(DIMS)
    latency_qs = list(common.QUESTIONS)
    ranking_qs = list(dict.fromkeys(latency_qs + devset_questions()))
    out: dict[str, Any] = {"latency_questions": len(latency_qs), "ranking_questions": len(ranking_qs),
                           "repeat": repeat, "variants": {}, "approximate": {}, "hybrid": {}}

    def log(msg: str) -> None:
        print(f"    {msg}", file=sys.stderr, flush=True)

    with Store.open(db) as store:
        conn = store.conn
        store.load_fts()
        raw = {q: conn.execute(f"SELECT {_VECTOR_SQL % '$q'}", {"q": "question " + q}).fetchone()[0]
               for q in ranking_qs}
        unit = {q: json.dumps(_unit_length(v)) for q, v in raw.items()}
        out["windows"] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        out["chunks"] = conn.execute("SELECT count(*) FROM selection_docs").fetchone()[0]

        def params(q: str) -> dict[str, Any]:
            return {"q": unit[q], "model": MODEL, "pool": 50, "windows": 50 * WINDOWS_PER_DOC}

        def run_variant(name: str, sql: str, *, rank: bool = True, bind: Callable[[str], dict[str, Any]] = params,
                        reference: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
            used = {name for name in ("q", "model", "pool", "windows") if f"${name}" in sql}
            bound = bind
            bind = lambda q: {k: v for k, v in bound(q).items() if k in used}  # noqa: E731 (DuckDB refuses extras)
            conn.execute(sql, bind(latency_qs[0])).fetchall()  # warm-up
            samples: dict[str, list[float]] = {}
            for _ in range(repeat):
                for q in latency_qs:
                    t = time.perf_counter()
                    conn.execute(sql, bind(q)).fetchall()
                    samples.setdefault(q, []).append(time.perf_counter() - t)
            fig: dict[str, Any] = _spread(samples)
            ranked: dict[str, list[str]] = {}
            if rank:
                ranked = {q: [r[0] for r in conn.execute(sql, bind(q)).fetchall()] for q in ranking_qs}
                if reference is not None:
                    fig["same_top50_order"] = sum(ranked[q] == reference[q] for q in ranking_qs)
                    fig["same_top50_set"] = sum(set(ranked[q]) == set(reference[q]) for q in ranking_qs)
                    fig["mean_overlap_top50"] = round(sum(_overlap(ranked[q], reference[q], 50)
                                                          for q in ranking_qs) / len(ranking_qs), 4)
                    fig["mean_overlap_top10"] = round(sum(_overlap(ranked[q], reference[q], 10)
                                                          for q in ranking_qs) / len(ranking_qs), 4)
                    fig["min_overlap_top10"] = min(_overlap(ranked[q], reference[q], 10) for q in ranking_qs)
            out["variants"][name] = fig
            log(f"{name}: {fig}")
            return ranked

        exact_sql = EMBEDDING_SQL.format(table=table, dims=DIMS, scope="")
        exact = run_variant("exact: product EMBEDDING_SQL (array_inner_product, unit FLOAT[384])", exact_sql)
        # -- hybrid, exact: the reference for the packed selections ------------------------------------------
        embedder = PrecomputedEmbedder(raw)

        def hybrid_run(name: str, selector: Selector, reference: dict[str, list[str]] | None = None,
                       ref_packed: dict[str, list[str]] | None = None) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
            selector.select(latency_qs[0], "hybrid")
            samples: dict[str, list[float]] = {}
            for _ in range(repeat):
                for q in latency_qs:
                    t = time.perf_counter()
                    selector.select(q, "hybrid")
                    samples.setdefault(q, []).append(time.perf_counter() - t)
            fig: dict[str, Any] = _spread(samples)
            ranked, packed = {}, {}
            for q in ranking_qs:
                candidates = selector.select(q, "hybrid").candidates
                ranked[q] = [c.chunk_id for c in candidates]
                packed[q] = [c.chunk_id for c in pack(candidates, top_k=40, token_budget=3000).sent]
            if reference is not None and ref_packed is not None:
                fig["same_top50_order"] = sum(ranked[q] == reference[q] for q in ranking_qs)
                fig["mean_overlap_top10"] = round(sum(_overlap(ranked[q], reference[q], 10)
                                                      for q in ranking_qs) / len(ranking_qs), 4)
                fig["same_packed_selection"] = sum(packed[q] == ref_packed[q] for q in ranking_qs)
                fig["same_packed_set"] = sum(set(packed[q]) == set(ref_packed[q]) for q in ranking_qs)
                fig["mean_packed_overlap"] = round(sum(len(set(packed[q]) & set(ref_packed[q])) / max(1, len(ref_packed[q]))
                                                       for q in ranking_qs) / len(ranking_qs), 4)
            out["hybrid"][name] = fig
            log(f"hybrid {name}: {fig}")
            return ranked, packed

        def selector(cls: type = Selector, **kw: Any) -> Selector:
            return cls(conn, embedder=embedder, embedding_model=MODEL, ensure_fts=store.load_fts, **kw)

        hybrid_exact, packed_exact = hybrid_run("exact (the product)", selector())

        # -- vss HNSW over an in-memory copy of the unit vectors --------------------------------------------------
        conn.execute(f"LOAD '{vss_extension_path()}'")
        conn.execute("ATTACH ':memory:' AS ann")
        rss0, hwm0 = _vm_kib("VmRSS"), _vm_kib("VmHWM")
        t = time.perf_counter()
        conn.execute(f"CREATE TABLE ann.vecs AS SELECT doc, url, ordinal, part, vector FROM {table} "
                     "WHERE model = $model ORDER BY doc, part", {"model": MODEL})
        copy_s = time.perf_counter() - t
        rss1 = _vm_kib("VmRSS")
        t = time.perf_counter()
        conn.execute("CREATE INDEX vecs_hnsw ON ann.vecs USING HNSW (vector) WITH (metric = 'ip')")
        build_s = time.perf_counter() - t
        rss2 = _vm_kib("VmRSS")
        cursor = conn.execute("SELECT * FROM pragma_hnsw_index_info()")
        info = dict(zip([d[0] for d in cursor.description], cursor.fetchone(), strict=True))
        out["hnsw_build"] = {"copy_s": round(copy_s, 2), "copy_rss_mib": round((rss1 - rss0) / 1024),
                             "index_build_s": round(build_s, 1), "index_rss_mib": round((rss2 - rss1) / 1024),
                             "index_info": {k: v for k, v in info.items() if not isinstance(v, list)},
                             "process_peak_rss_before_mib": round(hwm0 / 1024),
                             "process_peak_rss_after_mib": round(_vm_kib("VmHWM") / 1024),
                             "metric": "ip", "M": 16, "ef_construction": 128}
        log(f"HNSW build: {out['hnsw_build']}")
        hnsw_sql = f"""
WITH windows AS (
    SELECT doc, url, ordinal, -d AS score FROM (
        SELECT doc, url, ordinal, array_negative_inner_product(vector, $q::FLOAT[{DIMS}]) AS d
        FROM ann.vecs ORDER BY d LIMIT $windows)
),
top AS (
    SELECT doc, url, ordinal, max(score) AS score FROM windows GROUP BY doc, url, ordinal
    ORDER BY score DESC, url, ordinal LIMIT $pool
)
""" + _EMBEDDING_RESULT.replace("{windows_seen}", "NULL")
        plan = conn.execute("EXPLAIN " + hnsw_sql, {k: v for k, v in params(latency_qs[0]).items()
                                                     if k != "model"}).fetchall()[0][1]
        out["hnsw_plan_uses_index"] = "HNSW" in plan
        if "HNSW" not in plan:
            log("the HNSW query does not use the index:\n" + plan)
        for ef in efs:
            conn.execute(f"SET hnsw_ef_search = {int(ef)}")
            run_variant(f"HNSW ef_search {ef}: top {50 * WINDOWS_PER_DOC} windows from the index", hnsw_sql,
                        reference=exact)
            hybrid_run(f"HNSW ef_search {ef}", selector(sql_selector, embedding_sql=hnsw_sql),
                       hybrid_exact, packed_exact)
        conn.execute("RESET hnsw_ef_search")
        conn.execute("DETACH ann")
        run_variant("scan floor: max(array_inner_product) over every vector, no top-N",
                    f"SELECT max(array_inner_product(vector, $q::FLOAT[{DIMS}])) FROM {table} WHERE model = $model",
                    rank=False)
        run_variant("exact, windows CTE MATERIALIZED",
                    exact_sql.replace("WITH windows AS (", "WITH windows AS MATERIALIZED ("), reference=exact)
        run_variant("exact, array_cosine_similarity instead of the dot product",
                    exact_sql.replace("array_inner_product(", "array_cosine_similarity("), reference=exact)
        conn.execute(f"CREATE OR REPLACE TABLE bench_list_vectors AS SELECT model, doc, url, ordinal, part, "
                     f"vector::FLOAT[] AS vector FROM {table} ORDER BY model, doc, part")
        run_variant("exact, list_dot_product over FLOAT[] (a list column, as embeddings.vector)",
                    exact_sql.replace(table, "bench_list_vectors").replace(
                        f"array_inner_product(v.vector, $q::FLOAT[{DIMS}])", "list_dot_product(v.vector, $q::FLOAT[])"),
                    reference=exact)
        conn.execute("DROP TABLE bench_list_vectors")
        conn.execute(f"CREATE OR REPLACE TABLE bench_double_vectors AS SELECT model, doc, url, ordinal, part, "
                     f"vector::DOUBLE[{DIMS}] AS vector FROM {table} ORDER BY model, doc, part")
        run_variant("exact, DOUBLE[384] (wider: the cost of the float width)",
                    exact_sql.replace(table, "bench_double_vectors").replace(f"$q::FLOAT[{DIMS}]", f"$q::DOUBLE[{DIMS}]"),
                    reference=exact)
        conn.execute("DROP TABLE bench_double_vectors")
        conn.execute("SET threads = 1")
        run_variant("exact, one thread (threads = 1)", exact_sql, reference=exact)
        conn.execute("RESET threads")

        # -- bm25 prefilter: cosine only over the windows of bm25's best K chunks ---------------------------------
        for k in prefilters:
            hybrid_run(f"bm25 prefilter, cosine over bm25's top {k} chunks only",
                       selector(prefilter_selector, prefilter=k), hybrid_exact, packed_exact)

    print(json.dumps(out))


def _selector_classes() -> tuple[type, type]:
    """The Selector subclasses the vectors child compares (defined here: jobs.select is imported lazily)."""
    from jobs.select import Candidate, Selector, _matched_stems, _stems, _unit_length
    from pipelines.vectors import EMBEDDING_SQL, WINDOWS_PER_DOC, unit_vectors_table

    class SqlEmbeddingSelector(Selector):
        """The product's Selector whose embedding list comes from another SQL statement (an approximate one)."""

        def __init__(self, *args: Any, embedding_sql: str, **kw: Any) -> None:
            super().__init__(*args, **kw)
            self.embedding_sql = embedding_sql

        def _embedding_params(self, question: str) -> dict[str, Any]:
            assert self.embedder is not None
            vector = _unit_length(self.embedder.embed([self.prefixes.query + question], model=self.embedding_model)[0])
            return {"q": json.dumps(vector), "model": self.vector_space, "pool": self.pool,
                    "windows": self.pool * WINDOWS_PER_DOC}

        def embedding(self, question: str, scope: list[str] | None) -> list[Candidate]:
            params = {k: v for k, v in self._embedding_params(question).items() if f"${k}" in self.embedding_sql}
            rows = self.conn.execute(self.embedding_sql, params).fetchall()
            terms = _stems(question)
            return [Candidate(cid, url, heading, text, tokens, score=float(score), embedding_score=float(score),
                              matched=_matched_stems(terms, heading + " " + text), ordinal=ordinal)
                    for cid, url, heading, text, tokens, score, ordinal, _ in rows]

    class PrefilterSelector(SqlEmbeddingSelector):
        """Hybrid whose cosine is computed only for the chunks of bm25's best ``prefilter``: approximate (a
        chunk close in meaning but sharing no word with the question is never scored)."""

        def __init__(self, *args: Any, prefilter: int, **kw: Any) -> None:
            sql = EMBEDDING_SQL.format(
                table=unit_vectors_table(DIMS), dims=DIMS,
                scope="AND v.doc IN (SELECT doc FROM selection_docs WHERE chunk_id IN (SELECT unnest($ids)))")
            super().__init__(*args, embedding_sql=sql, **kw)
            self.prefilter = prefilter
            self._ids: list[str] = []

        def bm25(self, question: str, scope: list[str] | None) -> list[Candidate]:
            pool, self.pool = self.pool, self.prefilter
            try:
                wide = Selector.bm25(self, question, scope)
            finally:
                self.pool = pool
            self._ids = [c.chunk_id for c in wide]
            return wide[:pool]

        def _embedding_params(self, question: str) -> dict[str, Any]:
            return {**super()._embedding_params(question), "ids": self._ids}

    return SqlEmbeddingSelector, PrefilterSelector


def _build(me: Path, source: Path, db: Path, size: int) -> tuple[Any, dict[str, Any]]:
    db.unlink(missing_ok=True)
    print(f"{size} chunks: building {db.name} from {source.name} ...")
    built = common.run_measured([common.PYTHON, me, "--build", source, db, size],
                                timeout=max(900, size / 100)).check()
    build_fig = json.loads(built.stdout.strip().splitlines()[-1])
    print(f"  built in {built.wall_s:.1f} s: {build_fig['chunks']} chunks ({build_fig['source_chunks']} real "
          f"× {build_fig['copies']} copies), {build_fig['text_mib']} MiB text; insert "
          f"{build_fig['chunks_insert_s']:.1f} s, vectors {build_fig['embeddings_insert_s']:.1f} s, "
          f"FTS {build_fig['rebuild_fts_s']:.1f} s; peak RSS {built.max_rss_mib:.0f} MiB")
    return built, build_fig


def _codes(me: Path, db: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The codes' full build in its own process, then the first stage's recall against the exact scan."""
    fig: dict[str, Any] = {}
    if not args.skip_codes_build:
        common.wait_for_quiet(args.max_wait)
        ran = common.run_measured([common.PYTHON, me, "--codes-build-one", db], timeout=3600).check()
        fig["build"] = {**json.loads(ran.stdout.strip().splitlines()[-1]), "process": ran.summary()}
        print(f"  codes build (own process): {fig['build']}; {common.load_note(ran.load)}")
    common.wait_for_quiet(args.max_wait)
    ran = common.run_measured([common.PYTHON, me, "--codes-recall-one", db, "--recall-questions",
                               args.recall_questions, "--rescore", args.rescore], timeout=3600).check()
    for line in ran.stderr.strip().splitlines():
        print(line)
    fig["recall"] = {**json.loads(ran.stdout.strip().splitlines()[-1]), "process": ran.summary()}
    print(f"  recall: {common.load_note(ran.load)}; peak RSS {ran.max_rss_mib:.0f} MiB")
    return fig


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
    parser.add_argument("--index-build", action="store_true",
                        help="also time the full index build (Store.reindex()) on the built database in a process "
                             "of its own, for its peak memory")
    parser.add_argument("--vectors", action="store_true",
                        help="also compare the embedding leg: exact as the product runs it, cheaper exact forms, a "
                             "bm25 prefilter and DuckDB's vss HNSW index (needs duckdb-extension-vss), with the "
                             "rankings each loses")
    parser.add_argument("--ef", default="64,400,1600", help="HNSW ef_search values for --vectors (default 64,400,1600)")
    parser.add_argument("--prefilter", default="1000,5000",
                        help="bm25 prefilter depths (chunks) for --vectors (default 1000,5000)")
    parser.add_argument("--keep", type=Path,
                        help="build the bench databases in this folder and keep them (default: a temporary folder)")
    parser.add_argument("--approximate", choices=("auto", "on", "off"), default="auto",
                        help="embedding selection's binary-code first stage in the latency runs: by size (auto), "
                             "forced on, or off (the exact scan); 'both' is --approximate-compare")
    parser.add_argument("--approximate-compare", action="store_true",
                        help="run the latency queries twice, exact scan and codes, on the same database")
    parser.add_argument("--codes", action="store_true",
                        help="also time the codes' full build (own process) and measure the first stage's recall "
                             "of the exact top 50 against the exact scan")
    parser.add_argument("--skip-codes-build", action="store_true", help="with --codes: use the codes as stored")
    parser.add_argument("--recall-questions", type=int, default=120, help="questions for --codes recall (default 120)")
    parser.add_argument("--rescore", default="1000", help="windows re-scored exactly, for --codes (default 1000)")
    parser.add_argument("--reuse", action="store_true", help="with --keep: reuse a kept database instead of building it")
    parser.add_argument("--codes-build-one", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--postings-one", type=Path,
                        help="add bm25's postings to a database indexed by --vectors-index-one and exit")
    parser.add_argument("--vectors-index-one", type=Path,
                        help="index only the vectors of a kept database (see vectors_index) and exit")
    parser.add_argument("--codes-recall-one", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--reindex-one", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--vectors-one", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--recrawl-one", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--build", nargs=3, metavar=("SOURCE", "TARGET", "SIZE"), help=argparse.SUPPRESS)
    parser.add_argument("--real-vectors", type=Path,
                        help="with --build: each window's vector a real all-minilm vector of this database plus noise")
    parser.add_argument("--no-index", action="store_true",
                        help="with --build SOURCE TARGET SIZE: chunks, windows and vectors only, no index")
    parser.add_argument("--query", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--profile-one", nargs=3, metavar=("DB", "METHOD", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    common.stop_cleanly_on_sigterm()
    methods = [m for m in args.methods.split(",") if m]
    if args.build:
        build(Path(args.build[0]), Path(args.build[1]), int(args.build[2]), index=not args.no_index, real=args.real_vectors)
        return
    approximate = {"auto": None, "on": True, "off": False}[args.approximate]
    if args.query:
        query(args.query, args.repeat, methods, args.budget, approximate)
        return
    if args.postings_one:
        postings_index(args.postings_one)
        return
    if args.vectors_index_one:
        vectors_index(args.vectors_index_one)
        return
    if args.codes_build_one:
        codes_build(args.codes_build_one)
        return
    if args.codes_recall_one:
        codes_recall(args.codes_recall_one, args.recall_questions, [int(k) for k in args.rescore.split(",") if k])
        return
    if args.recrawl_one:
        recrawl(args.recrawl_one, args.changed)
        return
    if args.reindex_one:
        reindex(args.reindex_one)
        return
    if args.vectors_one:
        vectors(args.vectors_one, args.repeat, [int(e) for e in args.ef.split(",") if e],
                [int(k) for k in args.prefilter.split(",") if k])
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
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    with (contextlib.nullcontext(args.keep) if args.keep else common.temp_dir("select")) as tmp:
        for size in sizes:
            db = tmp / f"bench-{size}.duckdb"
            if args.reuse and db.exists():
                print(f"{size} chunks: reusing {db} (--reuse)")
                built, build_fig = None, {"reused": str(db)}
            else:
                built, build_fig = _build(me, source, db, size)
            index_build = None
            if args.index_build:
                common.wait_for_quiet(args.max_wait)
                rebuilt = common.run_measured([common.PYTHON, me, "--reindex-one", db], timeout=3600).check()
                index_build = {**json.loads(rebuilt.stdout.strip().splitlines()[-1]), "process": rebuilt.summary()}
                print(f"  full index build (Store.reindex(), own process): {index_build['reindex_s']:.1f} s, "
                      f"peak RSS {rebuilt.max_rss_mib:.0f} MiB ({index_build['postings']:,} postings, "
                      f"{index_build['vectors']:,} vectors); {common.load_note(rebuilt.load)}; "
                      f"load average {os.getloadavg()[0]:.1f}")
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
            entry: dict[str, Any] = {}
            if args.codes:
                entry["codes"] = _codes(me, db, args)
            modes = ["off", "on"] if args.approximate_compare else [args.approximate]
            for mode in modes:
                print(f"  querying (first stage {mode}): {len(common.QUESTIONS)} questions × {args.repeat} per method ...")
                ran = common.run_measured([common.PYTHON, me, "--query", db, "--repeat", args.repeat, "--approximate", mode,
                                           "--budget", args.budget, "--methods", ",".join(methods)], timeout=1800).check()
                for line in ran.stderr.strip().splitlines():
                    print(line)
                fig = json.loads(ran.stdout.strip().splitlines()[-1])
                print(f"  {common.load_note(ran.load)}; load average {os.getloadavg()[0]:.1f}; "
                      f"peak RSS {ran.max_rss_mib:.0f} MiB; RSS before/after queries {fig['rss_before_mib']}/"
                      f"{fig['rss_after_mib']} MiB")
                entry[f"query_{mode}"] = {"process": ran.summary(), "methods": fig["methods"], "rss": fig}
            entry.update({"build": {**build_fig, **({f"process_{k}": v for k, v in built.summary().items()} if built else {})},
                          "query_process": ran.summary(), "before": quiet, "methods": fig["methods"],
                          "embedder_calls": fig["embedder_calls"], "load_average_1m": os.getloadavg()[0]})
            if index_build is not None:
                entry["index_build"] = index_build
            if args.vectors:
                common.wait_for_quiet(args.max_wait)
                print(f"  vectors: exact forms, bm25 prefilter, HNSW (ef_search {args.ef}) ...")
                vec = common.run_measured([common.PYTHON, me, "--vectors-one", db, "--repeat", args.repeat,
                                           "--ef", args.ef, "--prefilter", args.prefilter], timeout=5400).check()
                for line in vec.stderr.strip().splitlines():
                    print(line)
                entry["vectors"] = {**json.loads(vec.stdout.strip().splitlines()[-1]), "process": vec.summary(),
                                    "load_average_1m": os.getloadavg()[0]}
                print(f"  {common.load_note(vec.load)}; load average {os.getloadavg()[0]:.1f}; "
                      f"peak RSS {vec.max_rss_mib:.0f} MiB")
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
        f"{size}: build {e['build'].get('process_max_rss_mib', 0):.0f} MiB, queries {e['query_process']['max_rss_mib']:.0f} MiB"
        for size, e in results["sizes"].items()))
    print(f"results: {path.relative_to(common.REPO)}")


if __name__ == "__main__":
    sys.exit(main())
