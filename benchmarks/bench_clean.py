"""Cleaning on the dev sets' own pages, without crawling or ranking: what each variant keeps and costs.

For each development corpus (the Python manual, Sphinx; the PostgreSQL manual, DocBook) every devset page
is cleaned and chunked in this process, pinned to one core, once per variant of trafilatura's main attempt
(its metadata extraction on/off, its comparison with the fallback extractors on/off):

- CPU ms a page (``time.process_time``; other load changes it much less than wall time);
- pages whose cleaned text differs from the first variant's;
- chunks with a heading path (issue 15: DocBook pages had none);
- expect phrases lost at cleaning (not in the page's cleaned text) and at chunking (not inside one chunk),
  per half of the dev set (``bench_recall.half``: tune / check), answerable questions only;
- which attempt won (main / recall / body).

Ranking is not measured here: ``bench_recall.py --recrawl`` gives answer-in-prompt and R@k of the product's
cleaning.

    .venv/bin/python benchmarks/bench_clean.py [--devset python,postgresql] [--variants all|product]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from typing import Any

import bench_recall
import common

# (name, metadata, fallback comparison); the product's own setting is whatever pipelines.trafilatura_adapter says.
VARIANTS = {
    "metadata+fallback": (True, True),
    "metadata-only": (True, False),
    "fallback-only": (False, True),
    "neither": (False, False),
}


def run(devsets: list[str], variants: list[str]) -> dict[str, Any]:
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    from jobs.evaluate import contains_any
    from pipelines import trafilatura_adapter as clean
    from pipelines.chunk import split_by_headings

    product = (clean.TRAFILATURA_METADATA, clean.TRAFILATURA_FALLBACK)
    out: dict[str, Any] = {"product": {"metadata": product[0], "fallback": product[1]}, "devsets": {}}
    for name in devsets:
        bench_recall.use_devset(name)
        devset = bench_recall.load_devset("127.0.0.1:1")
        pages = {url: bench_recall.corpus_file(url).read_bytes() for url in devset.urls}
        answerable = [q for q in devset.questions if q.expect and not q.id.startswith("none-")]
        reference: dict[str, str] = {}
        per_variant: dict[str, Any] = {}
        for variant in variants:
            clean.TRAFILATURA_METADATA, clean.TRAFILATURA_FALLBACK = VARIANTS[variant]
            texts: dict[str, str] = {}
            chunk_texts: dict[str, list[str]] = {}
            methods: Counter[str] = Counter()
            chunks = with_path = 0
            cpu0 = time.process_time()
            for url, body in pages.items():
                result = clean.clean_html(body, url)
                page_chunks = split_by_headings(result.xml, url)
                texts[url] = result.text
                chunk_texts[url] = [c.text for c in page_chunks]
                methods[result.method] += 1
                chunks += len(page_chunks)
                with_path += sum(1 for c in page_chunks if c.heading_path)
            cpu_ms = (time.process_time() - cpu0) * 1000 / len(pages)
            lost: dict[str, list[str]] = {"cleaning": [], "chunking": []}
            for q in answerable:
                urls = [q.url] if q.url else list(q.urls or ())
                urls += list(q.also_urls or ())
                if not any(contains_any(texts.get(u, ""), q.expect) for u in urls):
                    lost["cleaning"].append(q.id)
                elif not any(contains_any(t, q.expect) for u in urls for t in chunk_texts.get(u, [])):
                    lost["chunking"].append(q.id)
            if not reference:
                reference = texts
            figures = {
                "cpu_ms_per_page": round(cpu_ms, 1),
                "pages": len(pages),
                "pages_text_differs_from_first_variant": sum(texts[u] != reference[u] for u in pages),
                "chunks": chunks,
                "chunks_with_heading_path": with_path,
                "methods": dict(methods),
                **{f"lost_at_{stage}": {h: sorted(i for i in ids if bench_recall.half(i) == h)
                                        for h in ("tune", "check")} for stage, ids in lost.items()},
            }
            per_variant[variant] = figures
            lost_note = ", ".join(f"{stage} {len(ids)} ({', '.join(ids) or '-'})" for stage, ids in lost.items())
            print(f"  {name:10s} {variant:22s} {cpu_ms:6.1f} ms/page; {with_path}/{chunks} chunks with a heading path; "
                  f"text differs on {figures['pages_text_differs_from_first_variant']} pages; lost: {lost_note}; "
                  f"{dict(methods)}", file=sys.stderr, flush=True)
        out["devsets"][name] = {"answerable": len(answerable), "variants": per_variant}
    clean.TRAFILATURA_METADATA, clean.TRAFILATURA_FALLBACK = product
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devset", default="python,postgresql", help="comma-separated: python, postgresql")
    parser.add_argument("--variants", default="all",
                        help="all (default), product (the product's setting only), or a comma-separated list of: "
                             + ", ".join(VARIANTS))
    args = parser.parse_args()
    common.stop_cleanly_on_sigterm()
    devsets = [d.strip() for d in args.devset.split(",") if d.strip()]
    if args.variants == "product":
        from pipelines import trafilatura_adapter as clean

        setting = (clean.TRAFILATURA_METADATA, clean.TRAFILATURA_FALLBACK)
        variants = [v for v, s in VARIANTS.items() if s == setting]
    elif args.variants == "all":
        variants = list(VARIANTS)
    else:
        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        if unknown := [v for v in variants if v not in VARIANTS]:
            parser.error(f"unknown variant(s): {', '.join(unknown)}")
    figures = run(devsets, variants)
    figures["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
    path = common.save_result("clean-" + "-".join(devsets), figures, command=common.command_line(), machine=common.machine_info())
    print(json.dumps({d: {v: {k: f[k] for k in ("cpu_ms_per_page", "chunks_with_heading_path", "chunks",
                                                 "lost_at_cleaning", "lost_at_chunking")}
                          for v, f in x["variants"].items()} for d, x in figures["devsets"].items()}, indent=1))
    print(f"results: {path.relative_to(common.REPO)}")


if __name__ == "__main__":
    main()
