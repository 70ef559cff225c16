"""Benchmarks 1, 3 and 6: crawl throughput, re-crawl of the unchanged site, peak memory.

1. A few hundred real pages (the Python manual's ``library/*.html`` and ``tutorial/*.html``) spread
   round-robin over H loopback hosts, crawled with ``webqa crawl -i urls.txt --delay 0 --db fresh.duckdb``
   (delay 0 still means one request at a time per host, so H hosts = H concurrent downloads).
   Compared with bare ``pipelines.page_processing.process_page(html, url)`` over the same files in a loop, in one
   process pinned to one core: throughput ratio (goal ≥ 1.8 on 2 cores).
3. The same crawl again on the same database, nothing changed on the server: bodies downloaded
   (200s in the server's log) vs 304s, chunks rewritten, wall time vs the first crawl (goals 0, 0, ≤ 10%).
6. Peak memory of each subprocess.

    .venv/bin/python benchmarks/bench_crawl.py [--hosts 4] [--pages N] [--replicate K]

``--replicate K`` serves every page under K distinct URLs (``/``, ``/r1/``, … ``/r{K-1}/``) so the crawl covers
K × the pages (2,000+ with K = 6) and fixed costs (start-up, robots.txt, the index build) weigh less; the
re-crawl (3) is skipped then, and the baseline runs over the distinct pages once (its rate is per page).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import common


def baseline_worker(list_file: Path) -> None:
    """Child process: process_page over every file, one process, one core; prints one JSON line.

    Then, timed apart and not part of the baseline, ``Store.save_page`` of every result into a fresh
    database: what the crawl's writer thread spends per page, in the crawling process.
    """
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    entries = json.loads(list_file.read_text())
    pages = [((common.CORPUS / rel).read_bytes(), url) for rel, url in entries]
    from pipelines.page_processing import process_page  # imported before the clock starts, as in a pool worker

    times: list[float] = []
    results = []
    chunks = errors = 0
    cpu0 = time.process_time()
    start = time.perf_counter()
    for body, url in pages:
        t0 = time.perf_counter()
        result = process_page(body.decode("utf-8", "replace"), url)
        times.append(time.perf_counter() - t0)
        results.append(result)
        chunks += len(result.chunks)
        errors += result.error is not None
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    # Issue 16's yardstick: the bare trafilatura call in a plain loop, same pages, same core.
    import trafilatura

    bare_cpu0 = time.process_time()
    bare_start = time.perf_counter()
    for body, _url in pages:
        trafilatura.extract(body.decode("utf-8", "replace"), output_format="xml", include_formatting=True)
    bare_wall = time.perf_counter() - bare_start
    bare_cpu = time.process_time() - bare_cpu0
    figures = {
        "bare_trafilatura_seconds": bare_wall, "bare_trafilatura_cpu_seconds": bare_cpu,
        "pages": len(pages), "seconds": wall, "cpu_seconds": cpu, "chunks": chunks,
        "errors": errors, "page_ms_median": common.median(times) * 1000,
        "page_ms_p95": common.percentile(times, 95) * 1000, "page_ms_max": max(times) * 1000,
        "cpu": sorted(os.sched_getaffinity(0)),
    }

    import hashlib
    from datetime import datetime

    from pipelines.store import PageRecord, Store

    db = list_file.with_name("store-only.duckdb")
    save_times: list[float] = []
    with Store.open(db) as store:
        run_id = store.begin_crawl("bench-store")
        for (body, url), result in zip(pages, results):
            if result.clean is None:
                continue
            clean = result.clean
            record = PageRecord(
                url=url, final_url=url, status=200, fetched_at=datetime.utcnow(), content_type="text/html",
                etag=None, last_modified=None, content_hash=hashlib.sha256(body).hexdigest(), title=clean.title,
                lang=clean.lang, extractor=clean.method, html_bytes=len(body), text_bytes=clean.text_bytes,
                text=clean.text, html=body.decode("utf-8", "replace"), extract_seconds=result.seconds,
            )
            t0 = time.perf_counter()
            store.save_page(record, result.chunks, run_id)
            save_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        store.rebuild_fts()
        fts = time.perf_counter() - t0
    # The same pages written as the crawl now writes them: Store.save_pages, 50 pages a batch.
    batched = [(PageRecord(url=url, final_url=url, status=200, fetched_at=datetime.utcnow(), content_type="text/html",
                           etag=None, last_modified=None, content_hash=hashlib.sha256(body).hexdigest(),
                           title=r.clean.title, lang=r.clean.lang, extractor=r.clean.method, html_bytes=len(body),
                           text_bytes=r.clean.text_bytes, text=r.clean.text, html=body.decode("utf-8", "replace"),
                           extract_seconds=r.seconds), r.chunks)
               for (body, url), r in zip(pages, results) if r.clean is not None]
    with Store.open(db.with_name("store-batched.duckdb")) as store:
        t0 = time.perf_counter()
        for start_at in range(0, len(batched), 50):
            store.save_pages(batched[start_at : start_at + 50], None)
        figures["store_save_pages_batched_total_s"] = time.perf_counter() - t0
    figures["store_save_page_ms_median"] = common.median(save_times) * 1000
    figures["store_save_page_ms_p95"] = common.percentile(save_times, 95) * 1000
    figures["store_save_page_total_s"] = sum(save_times)
    figures["store_save_page_ms_per_chunk"] = sum(save_times) * 1000 / max(1, chunks)
    figures["store_rebuild_fts_s"] = fts
    print(json.dumps(figures))


def extract_parts(limit: int) -> None:
    """What ``process_page`` spends beyond the bare trafilatura call: CPU ms per page of each variant over
    the same ``limit`` manual pages, one process pinned to one core, each variant in its own pass."""
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    from copy import copy

    import trafilatura

    from pipelines import html_prepare, text
    from pipelines import trafilatura_adapter as clean
    from pipelines.page_processing import process_page

    pages = [((common.CORPUS / rel).read_text("utf-8", "replace"), f"http://127.0.0.1/{rel}")
             for rel in common.corpus_pages()[:limit]]
    common_options = dict(output_format="xml", include_comments=False, include_tables=True,
                          include_formatting=False, include_links=False, include_images=False)

    def main_attempt(fast: bool, metadata: bool) -> Any:
        def run(html: str, url: str) -> None:
            tree = html_prepare.parse_html(text.sanitise(html))
            html_prepare.prepare(tree)
            if metadata:
                trafilatura.extract_with_metadata(copy(tree), url=url, fast=fast, **common_options,
                                                  date_extraction_params=dict(clean._DATE_PARAMS))
            else:
                trafilatura.extract(copy(tree), url=url, fast=fast, **common_options)
        return run

    def with_switches(metadata: bool, fallback: bool) -> Any:
        def run(html: str, url: str) -> None:
            saved = clean.TRAFILATURA_METADATA, clean.TRAFILATURA_FALLBACK
            clean.TRAFILATURA_METADATA, clean.TRAFILATURA_FALLBACK = metadata, fallback
            try:
                process_page(html, url)
            finally:
                clean.TRAFILATURA_METADATA, clean.TRAFILATURA_FALLBACK = saved
        return run

    variants = {
        "bare trafilatura.extract(html, xml, include_formatting)":
            lambda html, url: trafilatura.extract(html, output_format="xml", include_formatting=True),
        "clean's main attempt: metadata + fallback comparison": main_attempt(fast=False, metadata=True),
        "main attempt, metadata, no fallback (fast=True)": main_attempt(fast=True, metadata=True),
        "main attempt, fallback, no metadata": main_attempt(fast=False, metadata=False),
        "main attempt, no metadata, no fallback": main_attempt(fast=True, metadata=False),
        "process_page (clean_html + chunking) as it is": lambda html, url: process_page(html, url),
        "process_page with trafilatura's metadata and fallback comparison (before issue 16)":
            with_switches(True, True),
        "process_page with neither": with_switches(False, False),
    }
    out: dict[str, Any] = {"pages": len(pages), "cpu_ms_per_page": {}}
    for name, run in variants.items():
        cpu0 = time.process_time()
        for html, url in pages:
            run(html, url)
        out["cpu_ms_per_page"][name] = round((time.process_time() - cpu0) * 1000 / len(pages), 1)
        print(f"  {out['cpu_ms_per_page'][name]:7.1f} ms  {name}", file=sys.stderr, flush=True)
    methods = Counter(process_page(html, url).clean.method for html, url in pages)  # type: ignore[union-attr]
    out["winning_attempt"] = dict(methods)
    print(json.dumps(out))


def _status_counts(site: Any) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for record in site.log:
        kind = "robots" if record.path.split("?")[0] == "/robots.txt" else "page"
        counts[f"{kind}_{record.status}"] += 1
        counts[f"{kind}_requests"] += 1
    return dict(counts)


def _timeline(site: Any, measured: common.Measured) -> dict[str, float]:
    """Where the wall time went, on the server's clock: start-up, requests, after the last request."""
    times = [r.time for r in site.log]
    pages = [r.time for r in site.log if r.path.split("?")[0] != "/robots.txt"]
    if not pages:
        return {}
    return {
        "start_to_first_request_s": round(min(times) - measured.started_mono, 3),
        "page_request_window_s": round(max(pages) - min(pages), 3),
        "last_request_to_exit_s": round(measured.ended_mono - max(times), 3),
    }


def _db_state(db: Path) -> dict[str, Any]:
    import duckdb

    conn = duckdb.connect(str(db), read_only=True)
    try:
        q = lambda sql: conn.execute(sql).fetchall()  # noqa: E731
        runs = q("SELECT crawl_run_id, new, changed, unchanged, not_modified, skipped, failed, chunks, fetched "
                 "FROM crawl_runs ORDER BY crawl_run_id")
        return {
            "pages": q("SELECT count(*) FROM pages")[0][0],
            "chunks": q("SELECT count(*) FROM chunks")[0][0],
            "chunk_rows": q("SELECT md5(string_agg(chunk_id || content_hash || url || ordinal, ',' "
                            "ORDER BY chunk_id)) FROM chunks")[0][0],
            "pages_by_run": dict(q("SELECT crawl_run_id, count(*) FROM pages GROUP BY 1")),
            "meta": dict(q("SELECT key, value FROM meta WHERE key IN ('chunks_changed_at', 'fts_built_at')")),
            "runs": [dict(zip(("crawl_run_id", "new", "changed", "unchanged", "not_modified", "skipped", "failed",
                               "chunks", "fetched"), r)) for r in runs],
            "fetch_log": q("SELECT outcome, reason, count(*) FROM fetch_log GROUP BY ALL ORDER BY 3 DESC LIMIT 5"),
            "extract_s": dict(zip(("sum", "median", "p95", "max"), [round(v or 0, 3) for v in q(
                "SELECT sum(extract_seconds), median(extract_seconds), quantile_disc(extract_seconds, 0.95), "
                "max(extract_seconds) FROM pages")[0]])),
            "db_mib": round(db.stat().st_size / 1024 / 1024, 1),
        }
    finally:
        conn.close()


def _crawled_seconds(stdout: str) -> float | None:
    match = re.search(r"Crawled in ([\d.]+)s", stdout)
    return float(match.group(1)) if match else None


def _change_pages(served: Path, pages: list[str], fraction: float) -> list[str]:
    """Give every ``1 / fraction``-th page a new paragraph (a new body for the server, new chunks for the store)."""
    step = max(1, round(1 / fraction))
    changed = pages[::step]
    for page in changed:
        path = served / page
        html = path.read_text(encoding="utf-8", errors="replace")
        at = html.lower().rfind("</body>")
        note = "<p>Changed for the re-crawl benchmark: this paragraph is new on the server.</p>"
        path.write_text(html[:at] + note + html[at:] if at >= 0 else html + note, encoding="utf-8")
    return changed


def crawl_once(site: Any, url_file: Path, db: Path, label: str, max_wait: float) -> dict[str, Any]:
    quiet = common.wait_for_quiet(max_wait)
    site.reset_log()
    server_cpu0 = time.process_time()  # this process only serves (and samples RSS) during the crawl
    measured = common.run_measured(common.crawl_cmd(url_file, db, delay=0), env=common.CRAWL_ENV)
    server_cpu = time.process_time() - server_cpu0
    if measured.returncode not in (0, 1):  # 1: some URLs failed; recorded below, the figures still stand
        measured.check()
    print(f"  {label}: exit {measured.returncode}, {measured.wall_s:.2f} s wall; {measured.stdout.strip()}")
    print(f"    {common.load_note(measured.load)}")
    timeline = _timeline(site, measured)
    print(f"    timeline: {timeline}")
    for line in measured.stderr.strip().splitlines()[:5]:
        print(f"    stderr: {line}")
    return {
        **measured.summary(),
        "before": quiet,
        "crawled_in_s": _crawled_seconds(measured.stdout),
        "summary_line": measured.stdout.strip(),
        "server": _status_counts(site),
        **timeline,
        "server_process_cpu_s": round(server_cpu, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=4, help="loopback hosts to spread the pages over (default 4)")
    parser.add_argument("--pages", type=int, default=0, help="use only the first N pages (default: all)")
    parser.add_argument("--max-wait", type=float, default=15.0,
                        help="wait up to this many seconds for a quiet machine before each measurement (default 15)")
    parser.add_argument("--replicate", type=int, default=1, metavar="K",
                        help="serve and crawl every page under K distinct URLs (default 1; 6 gives 2,000+ pages)")
    parser.add_argument("--changed", type=float, default=0.0, metavar="FRACTION",
                        help="after the unchanged re-crawl, change this fraction of the distinct pages on the server "
                             "and crawl again (issue 16's daily re-crawl; e.g. --replicate 20 --changed 0.01)")
    parser.add_argument("--baseline-worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--extract-parts", type=int, metavar="N",
                        help="only measure the CPU per page of process_page's parts over N manual pages (issue 16)")
    args = parser.parse_args()
    common.stop_cleanly_on_sigterm()
    if args.extract_parts:
        extract_parts(args.extract_parts)
        return
    if args.baseline_worker:
        baseline_worker(args.baseline_worker)
        return

    common.require_corpus()
    machine = common.machine_info()
    common.print_machine(machine)
    pages = common.corpus_pages()
    if args.pages:
        pages = pages[: args.pages]
    hosts = common.loopback_hosts(args.hosts)
    replicate = max(1, args.replicate)
    unique_pages = pages
    pages = [p if k == 0 else f"r{k}/{p}" for k in range(replicate) for p in unique_pages]
    html_mib = replicate * sum((common.CORPUS / p).stat().st_size for p in unique_pages) / 1024 / 1024
    print(f"corpus: {len(pages)} pages ({len(unique_pages)} distinct × {replicate}; {html_mib:.1f} MiB HTML) over "
          f"{len(hosts)} hosts ({', '.join(hosts)}), 1 request at a time per host, delay 0; extraction workers = "
          f"CPU count ({os.cpu_count()}); load average before: {os.getloadavg()}")

    with common.temp_dir("crawl") as tmp, common.corpus_site(hosts) as site:
        served = common.CORPUS
        if args.changed:
            # A copy of the pages, so that some can be changed on the server between crawls.
            served = tmp / "site"
            for page in unique_pages:
                (served / page).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(common.CORPUS / page, served / page)
            for host in hosts:
                site.serve_dir(host, "/", served)
        for host in hosts:
            for k in range(1, replicate):
                site.serve_dir(host, f"/r{k}/", served)
        url_file = tmp / "urls.txt"
        urls = common.write_url_file(url_file, pages, hosts, site.port)
        db = tmp / "fresh.duckdb"

        print("crawl 1 (fresh database):")
        first = crawl_once(site, url_file, db, "first", args.max_wait)
        state1 = _db_state(db)
        third = None
        if replicate == 1 or args.changed:
            print("crawl 2 (same database, nothing changed on the server):")
            second = crawl_once(site, url_file, db, "second", args.max_wait)
            state2 = _db_state(db)
            if replicate == 1 and not args.changed:
                common.RESULTS.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(db, common.CORPUS_DB)  # the selection and runner benchmarks start from this crawl
        else:
            second, state2 = None, None
        if args.changed:
            changed = _change_pages(served, unique_pages, args.changed)
            print(f"crawl 3 (same database, {len(changed)} of {len(unique_pages)} distinct pages changed on the "
                  f"server, i.e. {len(changed) * replicate} of {len(pages)} pages):")
            third = crawl_once(site, url_file, db, "third", args.max_wait)
            third["changed_distinct_pages"] = len(changed)
            third["changed_pages"] = len(changed) * replicate
            third["db_after"] = _db_state(db)

        list_file = tmp / "baseline.json"
        list_file.write_text(json.dumps([[p, u] for p, u in zip(pages, urls)][: len(unique_pages)]))
        print("baseline: process_page() in a loop, one process pinned to one core ...")
        base_quiet = common.wait_for_quiet(args.max_wait)
        base_run = common.run_measured([common.PYTHON, Path(__file__).resolve(), "--baseline-worker", list_file],
                                       cwd=common.REPO).check()
        baseline = json.loads(base_run.stdout.strip().splitlines()[-1])
        baseline["max_rss_mib"] = round(base_run.max_rss_mib, 1)
        baseline["process_wall_s"] = round(base_run.wall_s, 2)
        baseline["load"] = base_run.load
        baseline["before"] = base_quiet
        print(f"  {baseline['pages']} pages in {baseline['seconds']:.2f} s; {common.load_note(base_run.load)}")

    n = len(pages)
    first_rate = n / first["wall_s"]
    window_rate = n / first["page_request_window_s"]
    base_rate = baseline["pages"] / baseline["seconds"]
    bare_rate = baseline["pages"] / baseline["bare_trafilatura_seconds"]
    recrawl: dict[str, Any] = {}
    if second is not None and state2 is not None:
        run2 = state2["runs"][-1]
        second_id = run2["crawl_run_id"]
        bodies = second["server"].get("page_200", 0)
        not_modified = second["server"].get("page_304", 0)
        rewritten_pages = state2["pages_by_run"].get(second_id, 0)
        chunks_same = state1["chunk_rows"] == state2["chunk_rows"]
        recrawl = {
            "recrawl_bodies_downloaded": bodies,
            "recrawl_not_modified": not_modified,
            "recrawl_pages_rewritten": rewritten_pages,
            "recrawl_chunks_written": run2["chunks"],
            "recrawl_chunk_rows_identical": chunks_same,
            "recrawl_chunks_changed_at_moved": state1["meta"].get("chunks_changed_at") != state2["meta"].get("chunks_changed_at"),
            "recrawl_fts_rebuilt": state1["meta"].get("fts_built_at") != state2["meta"].get("fts_built_at"),
            "recrawl_wall_fraction": round(second["wall_s"] / first["wall_s"], 3),
        }
    if third is not None and second is not None:
        # The changed pages' own fetch and extraction, at the first crawl's rate per page.
        own = third["changed_pages"] * first["wall_s"] / n
        recrawl["changed_recrawl"] = {
            "changed_pages": third["changed_pages"], "wall_s": third["wall_s"],
            "unchanged_recrawl_wall_s": second["wall_s"], "changed_pages_own_s": round(own, 2),
            "ratio_to_unchanged_plus_own": round(third["wall_s"] / (second["wall_s"] + own), 3),
            "server": third["server"], "run": third["db_after"]["runs"][-1], "chunks": third["db_after"]["chunks"],
        }
    figures = {
        "pages": n, "replicate": replicate, "distinct_pages": len(unique_pages), "hosts": len(hosts),
        "concurrency": f"{len(hosts)} (1 per host)", "html_mib": round(html_mib, 1),
        "cpus": os.cpu_count(),
        "first_crawl": first, "second_crawl": second, "db_after_first": state1, "db_after_second": state2,
        "baseline": baseline,
        "crawl_pages_per_s": round(first_rate, 2),
        "crawl_pages_per_s_request_window": round(window_rate, 2),
        "baseline_pages_per_s": round(base_rate, 2),
        "ratio": round(first_rate / base_rate, 2),
        "bare_trafilatura_pages_per_s": round(bare_rate, 2),
        "ratio_vs_bare_trafilatura": round(first_rate / bare_rate, 2),
        "ratio_request_window": round(window_rate / base_rate, 2),
        **recrawl,
        # CPU accounting, robust to other load on a shared machine: CPU seconds per page.
        "baseline_cpu_s_per_page": round(baseline["cpu_seconds"] / baseline["pages"], 4),
        "crawl_cpu_s_per_page": round(first["tree_cpu_s"] / n, 4),
        "crawl_cpu_by_role_s": first["cpu_by_role_s"],
    }
    cores = os.cpu_count() or 1
    figures["ratio_cpu_ceiling"] = round(cores * figures["baseline_cpu_s_per_page"] / figures["crawl_cpu_s_per_page"], 2)
    path = common.save_result(("crawl" if replicate == 1 else f"crawl-x{replicate}") + ("-changed" if args.changed else ""), figures, command=common.command_line(), machine=machine)

    print()
    print(f"[1] crawl: {n} pages in {first['wall_s']:.2f} s wall (process start to exit) = {first_rate:.1f} pages/s; "
          f"page requests spanned {first['page_request_window_s']:.2f} s ({window_rate:.1f} pages/s); "
          f"CPU {first['tree_cpu_s']:.1f} s for the crawl's processes {first['cpu_by_role_s']}, "
          f"test server {first['server_process_cpu_s']:.1f} s")
    print(f"    db: {state1['pages']} pages, {state1['chunks']} chunks, {state1['db_mib']} MiB; "
          f"server saw {first['server']}; fetch_log {state1['fetch_log']}")
    print(f"    extraction inside the crawl (pages.extract_seconds): {state1['extract_s']}")
    print(f"    baseline: {baseline['pages']} pages in {baseline['seconds']:.2f} s on CPU {baseline['cpu']} = "
          f"{base_rate:.1f} pages/s (median {baseline['page_ms_median']:.0f} ms, p95 {baseline['page_ms_p95']:.0f} ms, "
          f"max {baseline['page_ms_max']:.0f} ms per page; {baseline['chunks']} chunks, {baseline['errors']} errors)")
    print(f"    not in the baseline, measured apart: Store.save_page {baseline['store_save_page_ms_median']:.0f} ms "
          f"median per page ({baseline['store_save_page_ms_per_chunk']:.1f} ms per chunk, "
          f"{baseline['store_save_page_total_s']:.1f} s for all pages), rebuild_fts {baseline['store_rebuild_fts_s']:.1f} s")
    print(f"    batched (Store.save_pages, 50 a batch): {baseline['store_save_pages_batched_total_s']:.1f} s for all pages")
    print(f"    bare trafilatura.extract loop on one core: {bare_rate:.1f} pages/s "
          f"({baseline['bare_trafilatura_cpu_seconds'] * 1000 / baseline['pages']:.0f} ms CPU a page, process_page "
          f"{baseline['cpu_seconds'] * 1000 / baseline['pages']:.0f} ms); crawl/bare = "
          f"{figures['ratio_vs_bare_trafilatura']:.2f} (issue 16 goal >= 1.8)")
    print(f"    ratio crawl/baseline = {figures['ratio']:.2f} (goal >= 1.8 on 2 cores); "
          f"over the request window {figures['ratio_request_window']:.2f}")
    print(f"    CPU per page: crawl {figures['crawl_cpu_s_per_page'] * 1000:.0f} ms (all its processes) vs baseline "
          f"{figures['baseline_cpu_s_per_page'] * 1000:.0f} ms: even with {cores} idle cores the ratio cannot exceed "
          f"{figures['ratio_cpu_ceiling']:.2f}")
    print(f"    machine load: crawl {common.load_note(first['load'])}; baseline {common.load_note(baseline['load'])}")
    if recrawl:
        print(f"[3] re-crawl: {recrawl['recrawl_bodies_downloaded']} bodies downloaded (200), {recrawl['recrawl_not_modified']} not modified (304); "
              f"pages rewritten {recrawl['recrawl_pages_rewritten']}, chunks written {recrawl['recrawl_chunks_written']}, chunk rows identical {recrawl['recrawl_chunk_rows_identical']}, "
              f"FTS rebuilt {figures['recrawl_fts_rebuilt']}; {second['wall_s']:.2f} s = "
              f"{figures['recrawl_wall_fraction']:.1%} of the first crawl (goals 0, 0, <= 10%)")
    if "changed_recrawl" in recrawl:
        cr = recrawl["changed_recrawl"]
        print(f"[16] daily re-crawl: {cr['changed_pages']} of {n} pages changed on the server ({cr['chunks']} chunks stored): "
              f"{cr['wall_s']:.2f} s against the unchanged re-crawl {cr['unchanged_recrawl_wall_s']:.2f} s + the changed "
              f"pages' own fetch and extraction {cr['changed_pages_own_s']:.2f} s (at the first crawl's rate): ratio "
              f"{cr['ratio_to_unchanged_plus_own']:.3f} (issue 16 goal <= 1.10); server saw {cr['server']}")
    print(f"[6] peak RSS: crawl 1 {first['max_rss_mib']:.0f} MiB largest process / {first['tree_peak_rss_mib']:.0f} MiB "
          f"whole tree; crawl 2 {second['max_rss_mib'] if second else float('nan'):.0f} / "
          f"{second['tree_peak_rss_mib'] if second else float('nan'):.0f} MiB; "
          f"baseline {baseline['max_rss_mib']:.0f} MiB")
    print(f"results: {path.relative_to(common.REPO)}")


if __name__ == "__main__":
    sys.exit(main())
