"""Shared helpers for the benchmark scripts: machine description, measured subprocesses, results files.

Not a test module and not imported by the product. Every ``bench_*.py`` script:

* runs its workload in a subprocess where it can (so its peak memory is measurable on its own),
* prints its figures as it goes and a summary at the end,
* records them in ``benchmarks/results/<name>.json`` (``latest`` plus a short ``history``),
* cleans up after itself (temporary folders removed, servers stopped), even on failure.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
# The interpreter running the benchmark (normally .venv/bin/python); `webqa` is installed next to it.
PYTHON = Path(sys.executable)
WEBQA = PYTHON.parent / "webqa"
HISTORY_KEEP = 20

if str(REPO) not in sys.path:  # `tests.support.site_server` and `tests.support.fake_ollama` live in the repository
    sys.path.insert(0, str(REPO))

from tests.support.corpus import CORPUS_DIR as CORPUS  # noqa: E402 - the one place that knows where the manual is
from tests.support.corpus import has_manual  # noqa: E402


# -- machine ------------------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return float("nan")


def _version(module: str) -> str:
    try:
        return str(__import__(module).__version__)
    except Exception:  # noqa: BLE001 - a missing module is reported, not fatal
        return "missing"


def _git_state() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return commit + (" + uncommitted changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine_info() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "cpu_model": _cpu_model(),
        "ram_gib": _mem_total_gib(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "scrapy": _version("scrapy"),
        "trafilatura": _version("trafilatura"),
        "duckdb": _version("duckdb"),
        "lxml": _version("lxml"),
        "git": _git_state(),
    }


def print_machine(info: dict[str, Any]) -> None:
    print(f"machine: {info['cpus']} CPUs ({info['cpus_usable']} usable), {info['cpu_model']}, "
          f"{info['ram_gib']} GiB RAM, Linux {info['kernel']}")
    print(f"versions: Python {info['python']}, Scrapy {info['scrapy']}, trafilatura {info['trafilatura']}, "
          f"DuckDB {info['duckdb']}, lxml {info['lxml']}; webqa at {info['git']}")


# -- results ------------------------------------------------------------------------------------


def save_result(name: str, figures: dict[str, Any], *, command: str, machine: dict[str, Any]) -> Path:
    """Write ``benchmarks/results/<name>.json``: this run as ``latest``, earlier ones in ``history``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    history: list[dict[str, Any]] = []
    if path.exists():
        try:
            old = json.loads(path.read_text())
            history = list(old.get("history", []))
            if old.get("latest"):
                history.insert(0, old["latest"])
        except (OSError, ValueError):
            history = []
    record = {
        "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "machine": machine,
        "figures": figures,
    }
    path.write_text(json.dumps({"latest": record, "history": history[:HISTORY_KEEP]}, indent=2, default=str) + "\n")
    return path


def command_line() -> str:
    script = Path(sys.argv[0]).resolve()
    try:
        script_text = str(script.relative_to(REPO))
    except ValueError:
        script_text = str(script)
    return " ".join([".venv/bin/python", script_text, *sys.argv[1:]])


# -- statistics ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100): the value at or below which p% of the samples fall."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


# -- corpus -------------------------------------------------------------------------------------


def require_corpus() -> None:
    if not has_manual(CORPUS):
        sys.exit(f"the Python 3.11 manual is not in {CORPUS}; run scripts/install-corpus.sh (or set WEBQA_CORPUS_DIR)")


def corpus_pages(patterns: Sequence[str] = ("library/*.html", "tutorial/*.html")) -> list[str]:
    """Relative paths of corpus pages, sorted, e.g. ``library/json.html``."""
    found: set[str] = set()
    for pattern in patterns:
        found.update(str(p.relative_to(CORPUS)) for p in CORPUS.glob(pattern) if p.is_file())
    return sorted(found)


def loopback_hosts(count: int) -> list[str]:
    return [f"127.0.0.{i}" for i in range(1, count + 1)]


def write_url_file(path: Path, pages: Sequence[str], hosts: Sequence[str], port: int) -> list[str]:
    """Spread ``pages`` round-robin over ``hosts``; returns the URLs written, one per line."""
    urls = [f"http://{hosts[i % len(hosts)]}:{port}/{page}" for i, page in enumerate(pages)]
    path.write_text("".join(u + "\n" for u in urls))
    return urls


@contextlib.contextmanager
def corpus_site(hosts: Sequence[str]) -> Iterator[Any]:
    """The manual served at / on every host by the in-process test site (request log included)."""
    from tests.support.site_server import SiteServer

    server = SiteServer(hosts, 0)
    for host in hosts:
        server.serve_dir(host, "/", CORPUS)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"webqa-bench-{prefix}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- measured subprocesses ----------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                kids += [int(x) for x in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    except OSError:
        pass
    return kids


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of one process so far (its own, not its children's)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK
    except (OSError, ValueError, IndexError):
        return None


def tree_pids(root: int) -> list[int]:
    stack, seen = [root], []
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.append(pid)
        stack += _children(pid)
    return seen


def _role(pid: int, root: int) -> str:
    """"main" for the started process, "grandchild" below its children (pool workers forked by a
    forkserver), else the child's kind from its command line."""
    if pid == root:
        return "main"
    try:
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except (OSError, ValueError, IndexError):
        return "other"
    if ppid != root:
        return "grandchild"
    if "forkserver" in cmdline:
        return "forkserver"
    if "resource_tracker" in cmdline:
        return "resource_tracker"
    return "child"


def tree_rss_kib(root: int) -> int:
    """Sum of the resident set sizes of a process and all its descendants right now."""
    return sum(_rss_kib(pid) for pid in tree_pids(root))


def system_cpu() -> tuple[float, float]:
    """(busy, steal) core-seconds of the whole machine since boot, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    return (user + nice + system + irq + softirq) / _CLK_TCK, steal / _CLK_TCK


class MachineLoad:
    """CPU the whole machine spent during a measurement, to tell how much came from elsewhere.

    This machine may be shared: other processes' CPU during a run is recorded as ``others_cores``
    (average cores busy with work that is not the benchmark), so noisy figures can be recognised.
    """

    def __init__(self) -> None:
        self.start_busy, self.start_steal = system_cpu()
        self.start_own = time.process_time()
        self.start_wall = time.perf_counter()
        self.start_loadavg = os.getloadavg()[0]

    def finish(self, benchmark_cpu_s: float) -> dict[str, float]:
        busy, steal = system_cpu()
        wall = time.perf_counter() - self.start_wall
        own = time.process_time() - self.start_own
        others = max(0.0, busy - self.start_busy - benchmark_cpu_s - own)
        return {
            "wall_s": round(wall, 2),
            "machine_busy_cores": round((busy - self.start_busy) / wall, 2),
            "benchmark_cores": round((benchmark_cpu_s + own) / wall, 2),
            "others_cores": round(others / wall, 2),
            "steal_cores": round((steal - self.start_steal) / wall, 2),
            "loadavg_1m_start": round(self.start_loadavg, 2),
            "loadavg_1m_end": round(os.getloadavg()[0], 2),
        }


def wait_for_quiet(max_wait: float, *, threshold_cores: float = 0.3, window: float = 2.0) -> dict[str, float]:
    """Wait (up to ``max_wait`` s) until the machine is nearly idle; returns what was seen last.

    Other processes on a shared machine take cores the benchmark needs; starting when they are quiet
    makes figures comparable. Gives up after ``max_wait`` and says so (the figures are then marked).
    """
    waited = 0.0
    while True:
        busy0, _ = system_cpu()
        time.sleep(window)
        busy1, _ = system_cpu()
        cores = (busy1 - busy0) / window
        waited += window
        if cores <= threshold_cores or waited >= max_wait:
            quiet = cores <= threshold_cores
            if not quiet:
                print(f"  (machine still busy after {waited:.0f} s: {cores:.2f} cores used by others; going on)")
            return {"idle_wait_s": round(waited, 1), "busy_cores_before": round(cores, 2), "quiet": quiet}


@dataclass
class Measured:
    cmd: list[str]
    returncode: int
    wall_s: float
    user_s: float  # CPU of the process and the descendants it reaped
    sys_s: float
    max_rss_mib: float  # largest single process of the tree (wait4's ru_maxrss)
    tree_peak_rss_mib: float  # largest sampled sum over the whole tree (every 0.1 s)
    stdout: str
    stderr: str
    tree_cpu_s: float = 0.0  # CPU of every process of the tree, reaped or not (sampled, last 0.1 s may be missed)
    load: dict[str, float] = field(default_factory=dict)
    started_mono: float = 0.0  # time.monotonic() at start and exit: the test servers log on this clock
    ended_mono: float = 0.0
    cpu_by_role: dict[str, float] = field(default_factory=dict)  # main / worker processes of the tree

    def check(self) -> Measured:
        if self.returncode != 0:
            sys.stderr.write(self.stderr[-4000:])
            raise SystemExit(f"command failed with exit code {self.returncode}: {' '.join(self.cmd)}")
        return self

    def summary(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall_s, 3), "user_s": round(self.user_s, 2), "sys_s": round(self.sys_s, 2),
            "tree_cpu_s": round(self.tree_cpu_s, 2),
            "max_rss_mib": round(self.max_rss_mib, 1), "tree_peak_rss_mib": round(self.tree_peak_rss_mib, 1),
            "returncode": self.returncode, "load": self.load,
            "cpu_by_role_s": {k: round(v, 2) for k, v in self.cpu_by_role.items()},
        }


def run_measured(cmd: Sequence[str], *, cwd: Path = REPO, env: dict[str, str] | None = None,
                 timeout: float = 600.0, sample_every: float = 0.1) -> Measured:
    """Run ``cmd`` to completion; wall time, CPU time and peak memory of it and its children."""
    cmd = [str(c) for c in cmd]
    full_env = {**os.environ, **(env or {})}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        started_mono = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=cwd, env=full_env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        load = MachineLoad()
        peak = [0]
        cpu: dict[int, float] = {}
        roles: dict[int, str] = {}
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                pids = tree_pids(proc.pid)
                peak[0] = max(peak[0], sum(_rss_kib(pid) for pid in pids))
                for pid in pids:
                    seconds = _cpu_s(pid)
                    if seconds is not None:
                        cpu[pid] = max(cpu.get(pid, 0.0), seconds)
                        if pid not in roles:
                            roles[pid] = _role(pid, proc.pid)
                done.wait(sample_every)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _pid, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            _stop_child(proc)  # interrupted: the child must not outlive the benchmark
            raise
        finally:
            timer.cancel()
            done.set()
            sampler.join()
        wall = time.perf_counter() - started
        ended_mono = time.monotonic()
        proc.returncode = os.waitstatus_to_exitcode(status)
        tree_cpu = max(sum(cpu.values()), usage.ru_utime + usage.ru_stime)
        by_role: dict[str, float] = {}
        for pid, seconds in cpu.items():
            by_role[roles.get(pid, "other")] = by_role.get(roles.get(pid, "other"), 0.0) + seconds
        out.seek(0)
        err.seek(0)
        return Measured(cmd, proc.returncode, wall, usage.ru_utime, usage.ru_stime, usage.ru_maxrss / 1024,
                        peak[0] / 1024, out.read(), err.read(), tree_cpu, load.finish(tree_cpu),
                        started_mono, ended_mono, by_role)


def _stop_child(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM (so it can clean up), then SIGKILL after 10 s."""
    with contextlib.suppress(ProcessLookupError, ChildProcessError):
        proc.terminate()
        for _ in range(100):
            pid, _status = os.waitpid(proc.pid, os.WNOHANG)
            if pid:
                return
            time.sleep(0.1)
        proc.kill()
        os.waitpid(proc.pid, 0)


# The test site listens on loopback addresses, which webqa's SSRF guard refuses unless told otherwise.
CRAWL_ENV = {"WEBQA_ALLOW_PRIVATE_NETWORKS": "1"}


def crawl_cmd(url_file: Path, db: Path, *, delay: float, extra: Sequence[str] = ()) -> list[str]:
    return [str(WEBQA), "--quiet", "crawl", "-i", str(url_file), "--delay", f"{delay:g}", "--db", str(db), *extra]


# -- the crawled corpus database shared by the benchmarks -----------------------------------------

CORPUS_DB = RESULTS / "corpus.duckdb"


def load_note(load: dict[str, float]) -> str:
    return (f"machine busy {load.get('machine_busy_cores', float('nan')):.2f} cores on average, "
            f"of which others {load.get('others_cores', float('nan')):.2f}")


def ensure_corpus_db(path: Path | None = None, *, hosts: int = 4) -> Path:
    """The database of benchmark 1's crawl (library/ + tutorial/ pages); crawls it if missing.

    ``bench_crawl.py`` leaves a copy at ``benchmarks/results/corpus.duckdb``; the selection and runner
    benchmarks start from it so the crawl is not repeated. Pass a path to use another database.
    """
    if path is not None:
        if not path.exists():
            raise SystemExit(f"{path}: no such database")
        return path
    if CORPUS_DB.exists():
        return CORPUS_DB
    require_corpus()
    print(f"no {CORPUS_DB.relative_to(REPO)} yet: crawling the corpus once to make it ...")
    RESULTS.mkdir(parents=True, exist_ok=True)
    addresses = loopback_hosts(hosts)
    with temp_dir("corpus") as tmp, corpus_site(addresses) as site:
        url_file = tmp / "urls.txt"
        write_url_file(url_file, corpus_pages(), addresses, site.port)
        db = tmp / "corpus.duckdb"
        measured = run_measured(crawl_cmd(url_file, db, delay=0), env=CRAWL_ENV)
        print(f"  {measured.stdout.strip()}")
        if measured.returncode not in (0, 1):  # 1 = some pages failed; the rest is still a corpus
            measured.check()
        shutil.copyfile(db, CORPUS_DB)
    return CORPUS_DB


# -- questions about the manual, for the selection and runner benchmarks ----------------------------

QUESTIONS: tuple[str, ...] = (
    "How do I parse JSON from a string?",
    "What does functools.lru_cache do?",
    "How can I run a subprocess and capture its output?",
    "How do I create a temporary directory that is removed automatically?",
    "What is the difference between a list and a tuple?",
    "How do I read a CSV file with a header row?",
    "How do I compute a SHA-256 hash of a file?",
    "How do I format a datetime as ISO 8601?",
    "What exception does open() raise when the file does not exist?",
    "How do I define a dataclass with default values?",
    "How are asyncio tasks cancelled?",
    "How do I match a regular expression at the start of a string?",
    "What does the with statement do with a context manager?",
    "How do I sort a list of dictionaries by a key?",
    "How do I add an optional flag with argparse?",
    "Is it safe to unpickle data received from an untrusted source?",
    "How do I open a SQLite database and run a query?",
    "What does itertools.groupby return?",
    "How do I log messages to a file with the logging module?",
    "How do I walk a directory tree recursively?",
    "How do I send an HTTP request with urllib?",
    "What is a generator expression?",
    "How do I define an enum with automatic values?",
    "How do I run functions concurrently in a thread pool?",
    "How do I read an environment variable?",
    "How do I compress data with gzip?",
    "How do I use typing.Optional in function annotations?",
    "What does the decimal module offer over binary floating point?",
    "How do I create a virtual environment?",
    "How do try, except and finally work together?",
)


def stop_cleanly_on_sigterm() -> None:
    """SIGTERM raises SystemExit, so ``finally`` blocks still remove temporary folders and stop servers.

    (SIGINT already raises KeyboardInterrupt, except in jobs started with ``&`` by a non-interactive
    shell, where it is ignored: send SIGTERM to those.)
    """
    import signal

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
