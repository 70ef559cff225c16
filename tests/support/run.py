"""The `webqa run`/`ask` test world: a three-page loopback site, a fake LLM that quotes its sources,
`webqa` as a subprocess, job files, and the run's outputs and tables read back.

Shared by tests/jobs/test_run.py, tests/jobs/test_ask.py and the other end-to-end tests; the fixtures (``crawled``,
``db``, ``llm``) are imported by name where they are used.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.support.fake_ollama import FakeOllama, user_prompt
from tests.support.site_server import SiteServer

REPO = Path(__file__).resolve().parent.parent.parent
_CONSOLE_SCRIPT = Path(sys.executable).parent / "webqa"
# The installed console script is what users run; `-m jobs.cli` when the venv has none.
WEBQA = [str(_CONSOLE_SCRIPT)] if _CONSOLE_SCRIPT.exists() else [sys.executable, "-m", "jobs.cli"]

# --------------------------------------------------------------------------------------------
# The test site: three hand-made pages on two loopback hosts, sections with distinctive facts.

WIDGET = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Widget Toolkit Manual</title></head>
<body><main><article>
<h1>Widget Toolkit Manual</h1>
<p>The Widget Toolkit draws dials, gauges and sliders for industrial dashboards. This manual covers installation,
configuration and the release history of the toolkit, with one section for each topic.</p>
<h2>Installation</h2>
<p>Widget Toolkit 4.2 requires Python 3.9 or newer and runs on Linux, macOS and Windows. Install it with the command
pip install widget-toolkit inside a virtual environment. The installer also places a small command line helper
called widgetctl on the search path, which checks that the graphics drivers are present.</p>
<h2>Configuration</h2>
<p>The dashboard server listens on port 8731 unless another port is configured. All settings live in a file called
widget.toml in the project folder. The refresh interval defaults to 250 milliseconds, which suits most sensors;
slower sensors may use a longer interval without any visible flicker on the dials.</p>
<h2>Release history</h2>
<h3>Version 4.2</h3>
<p>Version 4.2 was released on 14 March 2023 and introduced the Zephyr renderer, which draws gauges on the graphics
card. It also removed the deprecated Classic theme, so dashboards that still used it now fall back to the Modern
theme automatically.</p>
<h3>Version 4.1</h3>
<p>Version 4.1 appeared in November 2022 with support for touch screens and a new colour picker. Touch gestures such
as pinch and swipe move the sliders, and the colour picker remembers the last twelve colours chosen by each user of
the dashboard.</p>
</article></main></body></html>"""

GARDEN = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Community Garden Handbook</title></head>
<body><main><article>
<h1>Community Garden Handbook</h1>
<p>The Riverside Community Garden has forty plots shared by neighbours from the surrounding streets. This handbook
explains how the watering rota works, what a plot costs and how the compost heaps are looked after.</p>
<h2>Watering rota</h2>
<p>The tomatoes are watered every Tuesday at seven in the morning by the volunteer on duty. In dry summers a second
round happens on Friday evenings, and the water butts by the shed are refilled from the rain barrels before anyone
opens the mains tap.</p>
<h2>Plots and fees</h2>
<p>Each plot measures three by five metres and costs forty euros per season. The fee pays for seeds, tools and the
insurance of the garden. Members who cannot pay may work four hours in the common beds instead, which the committee
counts as the full season fee.</p>
<h2>Compost</h2>
<p>Kitchen scraps go into the green bins near the gate, never straight onto the heaps. The compost heaps are turned
on the first Sunday of every month, and finished compost is shared out in April to every plot holder who helped turn
it during the winter.</p>
</article></main></body></html>"""

LIGHTHOUSE = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Harbour Lighthouse</title></head>
<body><main><article>
<h1>Harbour Lighthouse</h1>
<p>The Harbour Lighthouse stands on the northern breakwater and still guides fishing boats into the bay. The local
heritage society looks after the building, its small museum and the keeper's cottage beside it.</p>
<h2>History</h2>
<p>The lighthouse was built in 1887 by the engineer Margaret Ellory, who designed the cast iron lantern room herself.
Its lamp burned paraffin until 1952, when it was converted to electricity, and the last resident keeper left the
cottage in 1979 after the light became automatic.</p>
<h2>Visiting the tower</h2>
<p>Guided tours run every Saturday from May to September and start at the keeper's cottage. The tower has 212 steps
and a narrow gallery at the top, so children under eight years must be carried or wait below with an adult from the
heritage society.</p>
</article></main></body></html>"""

PAGES: dict[tuple[int, str], str] = {
    (0, "/widget.html"): WIDGET,
    (0, "/garden.html"): GARDEN,
    (1, "/lighthouse.html"): LIGHTHOUSE,
}

# Question → a phrase of the sentence that answers it. The fake LLM quotes that sentence when a
# source holds it, and says "Not enough information" otherwise (or for a question not listed).
QUESTIONS: dict[str, tuple[str, str]] = {
    "port": ("Which port does the dashboard server listen on?", "port 8731"),
    "python": ("Which Python version does Widget Toolkit 4.2 require?", "Python 3.9"),
    "tomatoes": ("When are the tomatoes watered?", "every Tuesday"),
    "builder": ("Who built the lighthouse and in which year?", "built in 1887"),
    "steps": ("How many steps does the lighthouse tower have?", "212 steps"),
}
NEEDLES = {question: needle for question, needle in QUESTIONS.values()}
UNANSWERABLE = "How much did the repairs of the museum roof cost the heritage society?"

_SOURCE_BLOCK = re.compile(r'<source n="(\d+)" url="([^"]*)" section="([^"]*)">\n(.*?)\n</source n="\1">', re.S)
_SENTENCE_END = re.compile(r"(?<=[.;])\s+")


def prompt_sources(prompt: str) -> dict[int, str]:
    """The numbered source texts of a prompt, as the model sees them."""
    return {int(m.group(1)): m.group(4) for m in _SOURCE_BLOCK.finditer(prompt)}


def prompt_source_urls(prompt: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(2) for m in _SOURCE_BLOCK.finditer(prompt)}


def prompt_question(prompt: str) -> str:
    return prompt.rsplit("\nQuestion: ", 1)[1].strip()


def quoting_answer(prompt: str) -> dict[str, Any]:
    """What a well-behaved model says: the sentence holding the fact, cited with an exact quote."""
    needle = NEEDLES.get(prompt_question(prompt))
    if needle is not None:
        for number, text in sorted(prompt_sources(prompt).items()):
            for sentence in _SENTENCE_END.split(text):
                if needle in sentence:
                    return {"answer": f"{sentence} [{number}]", "citations": [{"source": number, "quote": sentence}],
                            "confidence": "high"}
    return {"answer": "Not enough information", "citations": [], "confidence": "low"}


def quoting_responder(body: Mapping[str, Any]) -> dict[str, Any]:
    return quoting_answer(user_prompt(body))


# --------------------------------------------------------------------------------------------
# Running the CLI


def webqa(*args: str | Path, host: str | None = None, cwd: Path | None = None, timeout: float = 120,
          env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the `webqa` console script; ``host`` becomes OLLAMA_HOST."""
    environment = {k: v for k, v in os.environ.items() if k not in ("WEBQA_DB", "OLLAMA_HOST")}
    if host is not None:
        environment["OLLAMA_HOST"] = host
    environment.update(env or {})
    return subprocess.run([*WEBQA, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd or REPO, env=environment)


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rows(db: Path, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    conn = duckdb.connect(str(db), read_only=True)
    try:
        cursor = conn.execute(sql, params or [])
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]
    finally:
        conn.close()


@dataclass
class Crawled:
    site: SiteServer
    db: Path  # crawled once; copy it before writing
    urls: dict[str, str]  # "widget" | "garden" | "lighthouse" -> URL


def crawl_site(tmp: Path) -> Iterator[Crawled]:
    with SiteServer() as site:
        for (host, path), body in PAGES.items():
            site.add(host, path, body=body)
        urls = {path.strip("/").removesuffix(".html"): site.url(host, path) for host, path in PAGES}
        db = tmp / "crawled.duckdb"
        done = subprocess.run(
            [sys.executable, "-m", "jobs.cli", "crawl", *urls.values(), "--db", str(db), "--delay", "0"],
            capture_output=True, text=True, timeout=120, cwd=tmp,
        )
        assert done.returncode == 0, done.stderr
        assert "fetched 3 (new 3" in done.stdout, done.stdout
        yield Crawled(site, db, urls)


@pytest.fixture(scope="module")
def crawled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawled]:
    yield from crawl_site(tmp_path_factory.mktemp("crawl"))


@pytest.fixture
def db(crawled: Crawled, tmp_path: Path) -> Path:
    """A private copy of the crawled database."""
    copy = tmp_path / "webqa.duckdb"
    shutil.copy(crawled.db, copy)
    return copy


@pytest.fixture
def llm(fake_ollama: FakeOllama) -> FakeOllama:
    """The fake Ollama, answering like a careful model that quotes its sources."""
    fake_ollama.chat_responder = quoting_responder
    return fake_ollama


def job_yaml(questions: list[Any], *, method: str = "bm25", top_k: int = 2, extra: str = "",
             formats: str = "[jsonl, markdown, csv]", max_attempts: int = 2, parallel: int = 1) -> str:
    items = []
    for q in questions:
        if isinstance(q, str):
            qid, text = q, QUESTIONS[q][0]
            items.append(f"  - id: {qid}\n    question: {json.dumps(text)}")
        else:
            items.append("  - " + json.dumps(q))
    return (
        "name: qa-test\n"
        "questions:\n" + "\n".join(items) + "\n"
        f"selection:\n  method: {method}\n  top_k: {top_k}\n  token_budget: 1000\n"
        f"output:\n  formats: {formats}\n"
        f"ollama:\n  max_attempts: {max_attempts}\n  timeout: 20\n  parallel: {parallel}\n"
        + textwrap.dedent(extra)
    )


def write_job(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def job_file(path: Path, name: str, urls: list[str], questions: list[str], extra: str = "") -> Path:
    """A job crawling ``urls`` (none: no `urls` key) with the given QUESTIONS ids, as cron's tests write it."""
    text = (
        f"name: {name}\n"
        + ("urls:\n" + "".join(f"  - {u}\n" for u in urls) if urls else "")
        + "crawl:\n  delay: 0\n  timeout: 5\n  allow_private_networks: true\n"
        + "questions:\n" + "".join(f"  - id: {q}\n    question: {json.dumps(QUESTIONS[q][0])}\n" for q in questions)
        + "selection:\n  method: bm25\n  top_k: 2\n  token_budget: 1000\n"
        + "output:\n  formats: [jsonl, markdown]\n"
        + "ollama:\n  max_attempts: 2\n  timeout: 20\n"
        + extra
    )
    path.write_text(text, encoding="utf-8")
    return path


def run_job(tmp_path: Path, job: Path, db: Path, *args: str, host: str | None, timeout: float = 120
            ) -> subprocess.CompletedProcess[str]:
    return webqa("run", job, "--no-crawl", "--db", db, "--out", tmp_path / "out", *args, host=host, cwd=tmp_path,
                 timeout=timeout)


def run_dir(tmp_path: Path) -> Path:
    (folder,) = sorted((tmp_path / "out").glob("run-*"))
    return folder


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def chat_prompts(fake: FakeOllama) -> list[str]:
    return [user_prompt(r.body) for r in fake.requests_to("/api/chat")]


ALL = list(QUESTIONS)
