"""Benchmark 2: politeness efficiency — how close the crawl gets to the rate its per-host delay allows.

H loopback hosts, N pages each, ``webqa crawl --delay d``: the ceiling is H/d pages/s (one request per
host every d seconds). The test site runs in this process and logs when each request line arrives, so
the gaps are the ones the *server* saw. Figures:

* efficiency = achieved pages/s ÷ (H/d), from the server's log: per host (n−1) intervals over the span
  from its first to its last page request, averaged over hosts (goal ≥ 0.97);
* the same from the crawl process's wall time (start-up, robots.txt and the index build included);
* the smallest same-host gap between two page requests (must be ≥ d), and including robots.txt.

The pages are the H·N smallest of the manual, so cleaning (≈ 0.05 s a page for these) keeps up with
the download rate and the figure measures the scheduler, not trafilatura.

    .venv/bin/python benchmarks/bench_politeness.py [--hosts 4] [--delay 0.5] [--per-host 40]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import common


def smallest_pages(count: int) -> list[str]:
    pages = [p for p in common.corpus_pages(("*.html", "*/*.html")) if not p.startswith("_")]
    pages.sort(key=lambda p: ((common.CORPUS / p).stat().st_size, p))
    if len(pages) < count:
        raise SystemExit(f"only {len(pages)} pages in the corpus, {count} asked")
    return sorted(pages[:count])


def host_figures(site: Any, host: str, delay: float) -> dict[str, Any]:
    records = sorted(site.requests_for(host), key=lambda r: r.time)
    pages = [r for r in records if r.path.split("?")[0] != "/robots.txt"]
    times = [r.time for r in pages]
    all_times = [r.time for r in records]
    gaps = [b - a for a, b in zip(times, times[1:])]
    all_gaps = [b - a for a, b in zip(all_times, all_times[1:])]
    span = times[-1] - times[0] if len(times) > 1 else float("nan")
    return {
        "host": host,
        "page_requests": len(pages),
        "robots_requests": len(records) - len(pages),
        "statuses": sorted({r.status for r in pages}, key=lambda s: s or 0),
        "span_s": round(span, 3),
        "efficiency": round((len(times) - 1) * delay / span, 4) if len(times) > 1 else float("nan"),
        "min_gap_s": round(min(gaps), 4) if gaps else float("nan"),
        "median_gap_s": round(common.median(gaps), 4) if gaps else float("nan"),
        "max_gap_s": round(max(gaps), 4) if gaps else float("nan"),
        "min_gap_incl_robots_s": round(min(all_gaps), 4) if all_gaps else float("nan"),
        "first_request": min(all_times) if all_times else float("nan"),
        "first_page": times[0] if times else float("nan"),
        "last_page": times[-1] if times else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.5)
    parser.add_argument("--per-host", type=int, default=40, help="pages per host (default 40)")
    parser.add_argument("--max-wait", type=float, default=15.0,
                        help="wait up to this many seconds for a quiet machine first (default 15)")
    args = parser.parse_args()
    common.stop_cleanly_on_sigterm()
    common.require_corpus()
    machine = common.machine_info()
    common.print_machine(machine)

    hosts = common.loopback_hosts(args.hosts)
    pages = smallest_pages(args.hosts * args.per_host)
    d = args.delay
    ceiling = len(hosts) / d
    kib = sum((common.CORPUS / p).stat().st_size for p in pages) / 1024
    print(f"{len(pages)} pages ({kib / len(pages):.0f} KiB average) over {len(hosts)} hosts, {args.per_host} each, "
          f"delay {d:g} s, 1 request at a time per host: ceiling {ceiling:g} pages/s")

    with common.temp_dir("polite") as tmp, common.corpus_site(hosts) as site:
        url_file = tmp / "urls.txt"
        common.write_url_file(url_file, pages, hosts, site.port)
        quiet = common.wait_for_quiet(args.max_wait)
        measured = common.run_measured(common.crawl_cmd(url_file, tmp / "polite.duckdb", delay=d), env=common.CRAWL_ENV)
        if measured.returncode not in (0, 1):
            measured.check()
        print(f"  exit {measured.returncode}: {measured.stdout.strip()}")
        print(f"  {common.load_note(measured.load)}")
        per_host = [host_figures(site, h, d) for h in hosts]

    total_pages = sum(h["page_requests"] for h in per_host)
    efficiency = sum(h["efficiency"] for h in per_host) / len(per_host)
    # All hosts together: from the first page request anywhere to the last, plus one delay for the last slot.
    first = min(h["first_page"] for h in per_host)
    last = max(h["last_page"] for h in per_host)
    window_rate = (total_pages - len(hosts)) / (last - first) if last > first else float("nan")
    wall_rate = total_pages / measured.wall_s
    min_gap = min(h["min_gap_s"] for h in per_host)
    min_gap_robots = min(h["min_gap_incl_robots_s"] for h in per_host)
    robots_gap = first - min(h["first_request"] for h in per_host)
    to_first_request = min(h["first_request"] for h in per_host) - measured.started_mono
    after_last_page = measured.ended_mono - last
    figures = {
        "hosts": len(hosts), "delay_s": d, "pages_per_host": args.per_host, "pages": total_pages,
        "ceiling_pages_per_s": ceiling,
        "efficiency_server_log": round(efficiency, 4),
        "aggregate_rate_server_log": round(window_rate, 3),
        "aggregate_efficiency_server_log": round(window_rate / ceiling, 4),
        "rate_process_wall": round(wall_rate, 3),
        "efficiency_process_wall": round(wall_rate / ceiling, 4),
        "min_same_host_gap_s": min_gap,
        "min_same_host_gap_incl_robots_s": min_gap_robots,
        "start_to_first_request_s": round(to_first_request, 3),
        "robots_to_first_page_s": round(robots_gap, 3),
        "last_page_to_exit_s": round(after_last_page, 3),
        "crawl": measured.summary(), "before": quiet,
        "per_host": [{k: v for k, v in h.items() if k not in ("first_request", "first_page", "last_page")}
                     for h in per_host],
    }
    path = common.save_result("politeness", figures, command=common.command_line(), machine=machine)

    print()
    for h in per_host:
        print(f"  {h['host']}: {h['page_requests']} pages (+{h['robots_requests']} robots.txt), span {h['span_s']:.2f} s, "
              f"efficiency {h['efficiency']:.3f}, gaps min {h['min_gap_s']:.4f} / median {h['median_gap_s']:.4f} / "
              f"max {h['max_gap_s']:.4f} s")
    print(f"[2] efficiency (server log, per host, mean) = {efficiency:.3f} (goal >= 0.97); all hosts together "
          f"{window_rate:.2f} pages/s = {window_rate / ceiling:.3f} of {ceiling:g}")
    print(f"    end to end (process wall {measured.wall_s:.2f} s, start-up and index build included): "
          f"{wall_rate:.2f} pages/s = {wall_rate / ceiling:.3f}")
    print(f"    of the wall time: {to_first_request:.2f} s from start to the first request, "
          f"{robots_gap:.2f} s robots.txt to first page, {last - first:.2f} s of page requests, "
          f"{after_last_page:.2f} s from the last page request to exit")
    print(f"    smallest same-host gap {min_gap:.4f} s (must be >= {d:g}); including robots.txt {min_gap_robots:.4f} s")
    print(f"[6] peak RSS: {measured.max_rss_mib:.0f} MiB largest process / {measured.tree_peak_rss_mib:.0f} MiB whole tree")
    print(f"results: {path.relative_to(common.REPO)}")


if __name__ == "__main__":
    sys.exit(main())
