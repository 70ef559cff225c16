"""What a run leaves for its reader: the summary line (:class:`RunResult`), and report.md and answers.csv
read back from the run's JSONL file in job order (memory does not grow with the answers)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.config import JobConfig
from jobs.crawl_phase import CrawlReport
from jobs.errors import ExitCode
from jobs.history import RunDiff, change_line, render_diff
from jobs.hosts import HostPool
from jobs.markdown_text import md_text, md_url
from jobs.report import write_csv, write_markdown_report
from jobs.report_html import write_html_report
from jobs.verdict import Verdict


@dataclass
class RunResult:
    run_id: int
    status: str
    exit_code: ExitCode
    counts: dict[str, int]
    outputs: list[Path]
    notices: list[str] = field(default_factory=list)
    crawl_line: str | None = None
    dry_run: bool = False
    diff: RunDiff | None = None  # the answers and pages against the job's previous successful run
    resumed: bool = False
    reason: str | None = None
    hosts_lost: list[str] = field(default_factory=list)  # servers of ollama.hosts left out at start or taken out

    def line(self) -> str:
        c = self.counts
        if self.dry_run:
            # Nothing is answered in a dry run: "0/5 answered" would read as a failure.
            selected = c.get("questions", 0) - c.get("failed", 0)
            line = (f"Run {self.run_id} {self.status} (dry run, no LLM called): {selected}/{c.get('questions', 0)} "
                    f"questions selected, {c.get('failed', 0)} failed")
        else:
            line = (
                f"Run {self.run_id} {self.status}: {c.get('answered', 0)}/{c.get('questions', 0)} answered "
                f"({c.get('grounded', 0)} grounded, {c.get('not_enough_info', 0)} not enough information), "
                f"{c.get('failed', 0)} failed"
            )
            if self.diff is not None:
                line += f"; {change_line(self.diff)}"
        if self.reason and self.status != "done":
            line += f" — {self.reason}"
        if self.hosts_lost:
            # Cron reads this line: a dead server must be named even when the other hosts answered everything.
            line += f"; Ollama host{'s' if len(self.hosts_lost) > 1 else ''} lost: {', '.join(self.hosts_lost)}"
        return line


def hosts_lost(hosts: HostPool | None) -> list[str]:
    """Each server of ``ollama.hosts`` that did not serve the whole run, and when it was lost, for the summary line."""
    if hosts is None:
        return []
    return [*(f"{url} (left out at start)" for url, _why in hosts.left_out),
            *(f"{url} (taken out)" for url, _why in hosts.lost())]


def hosts_line(hosts: HostPool) -> str:
    """The report's line on the servers: what each answered, and which were taken out."""
    lost = dict(hosts.lost())
    return "Ollama hosts: " + ", ".join(f"{url} answered {n}" + (" (taken out during the run)" if url in lost else "")
                                        for url, n in hosts.answered().items())


def read_back(jsonl_path: Path, order: list[str]) -> Iterator[dict[str, Any]]:
    """The run's results from its JSONL file, in job order, one at a time (the last line per question wins)."""
    offsets: dict[str, int] = {}
    with jsonl_path.open("rb") as stream:
        while True:
            offset = stream.tell()
            line = stream.readline()
            if not line:
                break
            try:
                offsets[str(json.loads(line)["question_id"])] = offset
            except (ValueError, KeyError, TypeError):
                continue
        for question_id in order:
            if question_id in offsets:
                stream.seek(offsets[question_id])
                yield json.loads(stream.readline())


def _outside_lines(crawl: CrawlReport, notices: list[str], url: Callable[[str], str], text: Callable[[Any], str]
                   ) -> list[str]:
    """The summary's lines of URLs that failed or are stale and of notices, each part written by ``url``/``text``."""
    lines = [f"not fetched: {url(f['url'])}: {text(f['reason'])}" for f in crawl.failures]
    lines += [f"stale: {url(u)} (last fetched {when:%Y-%m-%d %H:%M} UTC; the copy answered from may be out of date)"
              for u, when in sorted(crawl.stale.items())]
    return lines + [f"notice: {text(n)}" for n in notices]


def _summary_lines(run_id: int, result: Verdict, counts: dict[str, int], crawl: CrawlReport, notices: list[str],
                   hosts_line: str | None, url: Callable[[str], str], text: Callable[[Any], str]) -> list[str]:
    """The report's summary: the status and its reason (failed URLs and their errors), the counts, the crawl and
    hosts lines, then :func:`_outside_lines`; what came from outside written by ``url``/``text``."""
    reason = f" ({text(result.reason)})" if result.reason and result.status != "done" else ""
    lines = [f"run {run_id}: {result.status}{reason}", f"questions: {counts['questions']}, answered: "
             f"{counts['answered']}, grounded: {counts['grounded']}, not enough information: "
             f"{counts['not_enough_info']}, failed: {counts['failed']}"]
    lines += [text(line) for line in (crawl.line, hosts_line) if line]
    return lines + _outside_lines(crawl, notices, url, text)


def write_reports(job: JobConfig, out_dir: Path, run_id: int, result: Verdict, counts: dict[str, int],
                   order: list[str], notices: list[str], crawl: CrawlReport,
                   jsonl_path: Path, diff: RunDiff | None = None, hosts_line: str | None = None) -> list[Path]:
    outputs = []
    if "markdown" in job.output.formats or "html" in job.output.formats:
        # The URLs, reasons and notices come from outside: report.md gets them as text (report.html escapes its own).
        md_summary = _summary_lines(run_id, result, counts, crawl, notices, hosts_line,
                                    lambda url: f"<{md_url(url)}>", lambda text: md_text(text, one_line=True))
        summary = _summary_lines(run_id, result, counts, crawl, notices, hosts_line, str, str)
    if "markdown" in job.output.formats:
        preamble = render_diff(diff) if diff is not None else []
        path = out_dir / "report.md"
        with path.open("w", encoding="utf-8") as out:
            write_markdown_report(out, f"{job.name} — run {run_id}", md_summary, read_back(jsonl_path, order),
                                  preamble)
        outputs.append(path)
    if "html" in job.output.formats:
        path = out_dir / "report.html"
        with path.open("w", encoding="utf-8") as out:
            write_html_report(out, f"{job.name} — run {run_id}", summary, read_back(jsonl_path, order), diff)
        outputs.append(path)
    if "csv" in job.output.formats:
        path = out_dir / "answers.csv"
        write_csv(path, read_back(jsonl_path, order))
        outputs.append(path)
    if "jsonl" in job.output.formats:
        outputs.insert(0, jsonl_path)
    else:
        jsonl_path.unlink(missing_ok=True)
    return outputs
