"""Benchmark: what `crawl.render` costs a crawl (issue 27, item 3).

Serves N documentation-like pages on loopback (tests/site_server.py) twice over: as plain HTML, and as an
empty shell whose script builds the same text. Crawls (`run_crawl` in a subprocess, delay 0) the plain pages
without rendering, the same pages with `render: js`, and the shells with `render: js`; reports wall seconds,
CPU seconds of the crawl process and of its children (playwright's driver and Chromium) and the peak RSS of
the largest child. Wall time on a shared machine is noisy; CPU seconds are the figure to compare.

    .venv/bin/python benchmarks/bench_render.py [--pages 40]

Writes benchmarks/results/render.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_CRAWL = """
import json, resource, sys
from crawler.run import CrawlOptions, run_crawl
summary = run_crawl(CrawlOptions(**json.loads(sys.argv[1])), sys.argv[2])
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"line": summary.line(), "chunks": summary.count("chunks"), "cpu_self": me.ru_utime + me.ru_stime,
                  "cpu_children": kids.ru_utime + kids.ru_stime, "maxrss_self_mb": me.ru_maxrss / 1024,
                  "maxrss_child_mb": kids.ru_maxrss / 1024}))
"""


def shell(title: str, html: str) -> str:
    """The page's body, built by its script from a JSON string: no text in the served bytes."""
    body = html.split("<body>", 1)[1].rsplit("</body>", 1)[0]
    return (f"<!doctype html><html><head><title>{title}</title></head><body><div id='root'></div><script>"
            f"document.getElementById('root').innerHTML = {json.dumps(body)};</script></body></html>")


def crawl(urls: list[str], db: Path, render: str | None) -> dict[str, object]:
    options = {"urls": urls, "delay": 0, "render": render, "max_pages": 10_000}
    env = {**os.environ, "WEBQA_ALLOW_PRIVATE_NETWORKS": "1"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _CRAWL, json.dumps(options), str(db)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall"] = time.monotonic() - started
    return result


def main() -> None:
    from tests.site_server import SiteServer
    from tests.support.crawling import page

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=40)
    args = parser.parse_args()
    results: dict[str, object] = {"pages": args.pages}
    with SiteServer(("127.0.0.1",)) as site, tempfile.TemporaryDirectory() as tmp:
        site.add(0, "/robots.txt", "User-agent: *\nAllow: /\n", content_type="text/plain")
        for i in range(args.pages):
            html = page(f"Page {i}", ("Install", "Usage", "Errors"))
            site.add(0, f"/plain/{i}.html", html)
            site.add(0, f"/js/{i}.html", shell(f"Page {i}", html))
        plain = [site.url(0, f"/plain/{i}.html") for i in range(args.pages)]
        built = [site.url(0, f"/js/{i}.html") for i in range(args.pages)]
        for name, urls, render in (("plain, not rendered", plain, None), ("plain, rendered", plain, "js"),
                                   ("script-built, rendered", built, "js")):
            results[name] = crawl(urls, Path(tmp) / f"{name.replace(' ', '_').replace(',', '')}.duckdb", render)
            row = results[name]
            print(f"{name:24} wall {row['wall']:6.1f} s  cpu crawl {row['cpu_self']:6.1f} s  "
                  f"cpu children {row['cpu_children']:6.1f} s  chunks {row['chunks']}  "
                  f"peak child RSS {row['maxrss_child_mb']:.0f} MB")
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "render.json").write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
