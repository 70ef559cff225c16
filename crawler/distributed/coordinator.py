"""`webqa crawl --redis URL`: seed the shared frontier, be its one DuckDB writer, end the crawl.

The coordinator reads what the crawl needs from the store (as ``crawler.run.run_crawl`` does),
publishes the crawl for the workers, queues the listed URLs, and then, until the agreed stop, moves
items from Redis into DuckDB through the same code as the local store pipeline. The stop: nothing
queued, nothing leased and nothing left to write, for a grace period. Then it records the crawl run,
reports the same ``CrawlSummary`` as a local crawl, and removes the crawl's keys, which tells every
worker to close.

A coordinator killed at any point is restarted with the same command: it finds the crawl in Redis,
finishes writing the item it was writing without storing it twice, and carries on.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import uuid
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from crawler.distributed.entries import BadEntry, dead_letter, dead_letter_key, describe, parse_crawl, parse_item
from crawler.distributed.backlog import (
    DEFAULT_BACKLOG, DEFAULT_BACKLOG_WAIT, MAX_BACKLOG_WAIT, TAKE, WRITE_BATCH, take,
)
from crawler.distributed.items import encode_item, item_url
from crawler.distributed.queue import (
    DEFAULT_LEASE_SECONDS, REGISTRY, Frontier, JsonSerializer, Keys, RedisLost, connect, crawl_prefix,
    delete_namespace,
)
from pipelines.items import ExtractedPage, FetchOutcome
from pipelines.redact import redact_text, redact_url
from pipelines.signals import stop_signals
from crawler.options import CrawlOptions, allows_private_networks
from crawler.plan import CrawlPlan, plan_crawl
from crawler.summary import CrawlSummary
from pipelines.errors import ConfigError, Interrupted, NothingToDoError, WebqaError
from pipelines.store import Store, failures_query
from pipelines.store_pipeline import StorePipeline

log = logging.getLogger(__name__)

#: The coordinator's "I am alive" key expires after this long; a restart waits for a dead one's to go.
HEARTBEAT_SECONDS = 10
#: The longest the coordinator waits for an item before it looks at the crawl's state again.
POLL = 0.25
#: How often it says it is alive, returns expired leases to the queue and looks for dead workers.
BEAT_EVERY = 1.0


def _env_float(name: str, default: float, *, positive: bool = False, most: float = float("inf")) -> float:
    try:
        value = float(os.environ.get(name, "") or default)
    except ValueError:
        value = -1.0
    if not (0 < value if positive else 0 <= value) or not value <= most:  # NaN too
        bound = f" of at most {most:g}" if most < float("inf") else ""
        raise ConfigError(f"{name}={os.environ[name]!r}: expected a {'positive ' if positive else ''}number of "
                          f"seconds{bound}")
    return value


def _env_count(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, "") or default)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"{name}={os.environ[name]!r}: expected a whole number of items (0: no bound)")
    return value


class Writer:
    """Items from Redis into DuckDB, a batch at a time, through ``StorePipeline``'s own write code.

    A batch of items is moved to the ``writing`` list before it is stored (one transaction for its pages,
    ``backlog.take``) and removed (with its counts added) after; a coordinator killed in between finds
    them there, and ``resume`` stores each only if DuckDB does not have it yet (one item per URL and crawl
    run makes that check exact). One transaction a page was most of a page's cost to the writer
    (BENCHMARKS.md, "The writer's ceiling"); a batch holds what waited, so an idle crawl still writes
    each item as soon as it comes.
    """

    def __init__(self, client: Any, keys: Keys, store: Store, crawl_run_id: int, job_name: str | None,
                 max_bytes: int, batch: int = WRITE_BATCH) -> None:
        self.r = client
        self.keys = keys
        self.max_bytes = max_bytes
        self.batch = max(1, batch)
        self.store = store
        self.crawl_run_id = crawl_run_id
        self.sink = StorePipeline(None, str(store.path), job_name)  # type: ignore[arg-type]  # only its writes
        self.sink.store = store
        self.sink.crawl_run_id = crawl_run_id
        self._take = client.register_script(TAKE)

    def resume(self) -> int:
        pending = self.r.lrange(self.keys.writing, 0, -1)
        for raw in pending:
            self._apply(raw, check=True)
        return len(pending)

    def drain(self, limit: int | None = None, block: float = 0.0) -> int:
        """Write up to ``limit`` waiting items (a batch by default); with ``block``, wait that long for the
        first (BLMOVE, no polling)."""
        limit = self.batch if limit is None else limit
        written = 0
        while written < limit:
            raws = take(self.r, self._take, self.keys.items, self.keys.writing, min(self.batch, limit - written))
            if not raws and block > 0 and written == 0:
                first = self.r.blmove(self.keys.items, self.keys.writing, block, "LEFT", "RIGHT")
                if first is not None:
                    raws = [first, *take(self.r, self._take, self.keys.items, self.keys.writing,
                                         min(self.batch, limit) - 1)]
            if not raws:
                break
            self._apply_batch(raws)
            written += len(raws)
        return written

    def _apply_batch(self, raws: list[bytes]) -> None:
        """Store the items of ``raws`` (all in ``writing``), their pages in one transaction; a bad entry is
        set aside alone, and a URL met twice starts a new batch (a batch names each page once)."""
        batch: list[tuple[bytes, ExtractedPage | FetchOutcome]] = []
        urls: set[str] = set()
        for raw in raws:
            try:
                item = parse_item(raw, self.max_bytes)
            except BadEntry as exc:
                self._reject(raw, describe(exc))
                continue
            url = item_url(item)
            if url in urls:
                self._write_batch(batch)
                batch, urls = [], set()
            batch.append((raw, item))
            urls.add(url)
        self._write_batch(batch)

    def _write_batch(self, batch: list[tuple[bytes, ExtractedPage | FetchOutcome]]) -> None:
        if not batch:
            return
        counts = self.sink.write_now(*(item for _raw, item in batch))
        pipe = self.r.pipeline(transaction=True)
        for raw, _item in batch:
            pipe.lrem(self.keys.writing, 1, raw)
        for key, value in counts.items():
            pipe.hincrby(self.keys.counts, key, value)
        pipe.execute()

    def _apply(self, raw: bytes, *, check: bool) -> None:
        try:
            item = parse_item(raw, self.max_bytes)
        except BadEntry as exc:
            self._reject(raw, describe(exc))
            return
        counts: dict[str, int] | None = self._already_written(item) if check else None
        if counts is None:
            counts = self.sink.write_now(item)
        pipe = self.r.pipeline(transaction=True)
        pipe.lrem(self.keys.writing, 1, raw)
        for key, value in counts.items():
            pipe.hincrby(self.keys.counts, key, value)
        pipe.execute()

    def _reject(self, raw: bytes, why: str) -> None:
        """An item that is not one a worker wrote: recorded as a failed entry (the crawl's verdict is partial:
        whatever it stood for is not stored), kept in the dead-letter list, and gone from the lists."""
        key = dead_letter_key(self.keys.prefix)
        counts = self.sink.write_now(FetchOutcome(f"(an entry of Redis list {self.keys.items})", "failed",
                                                  f"invalid item in Redis: {why}; kept in {key}"))
        pipe = self.r.pipeline(transaction=True)
        dead_letter(self.r, self.keys.prefix, raw, why, self.keys.items, pipe=pipe)
        pipe.lrem(self.keys.writing, 1, raw)
        for name, value in counts.items():
            pipe.hincrby(self.keys.counts, name, value)
        pipe.execute()

    def _already_written(self, item: ExtractedPage | FetchOutcome) -> dict[str, int] | None:
        """The item's counts if DuckDB already has it, else None."""
        if isinstance(item, ExtractedPage):
            page = item.page
            changed = self.store.page_written_at(page.url, page.fetched_at)
            if changed is None:
                return None
            # Whether it was new or changed is no longer known: a changed body is counted as changed.
            state = "changed" if changed else "unchanged"
            counts = {"fetched": 1, state: 1, "html_bytes": page.html_bytes, "text_bytes": item.text_bytes}
            if state != "unchanged":
                counts["chunks"] = len(item.chunks)
            return counts
        if item.outcome == "not_modified":
            return None  # marking a page checked twice changes nothing
        logged = self.store.fetch_logged(self.crawl_run_id, item.url, item.outcome, item.reason)
        return {item.outcome: 1} if logged else None


def _prepare(options: CrawlOptions, store: Store) -> dict[str, Any]:
    """What ``run_crawl`` reads before Scrapy starts (crawler.plan.plan_crawl), by name."""
    return vars(plan_crawl(options, store))


def _config(options: CrawlOptions, prep: dict[str, Any], lease_seconds: float,
            backlog: tuple[int, float] = (DEFAULT_BACKLOG, DEFAULT_BACKLOG_WAIT)) -> dict[str, Any]:
    """Everything a worker needs to crawl as this machine would (crawler/distributed/worker.py)."""
    return {
        "delay": options.delay,
        "hosts": {h: {"delay": p.delay, "concurrency": p.concurrency} for h, p in options.hosts.items()},
        "contact": options.contact, "obey_robots": options.obey_robots,
        "obey_noindex": options.obey_noindex, "pdf_max_pages": options.pdf_max_pages, "max_crawl_delay": options.max_crawl_delay,
        "allow_private_networks": allows_private_networks(options), "timeout": options.timeout,
        "max_bytes": options.max_bytes, "depth": options.depth, "max_pages": options.max_pages,
        "allow": list(options.allow), "deny": list(options.deny), "follow": options.follow,
        "stored_links": prep["links"], "fresh": sorted(prep["fresh"]), "validators": prep["validators"],
        "lease_seconds": lease_seconds,
        # Published: every worker keeps the coordinator's bound (crawler/distributed/backlog.py).
        "backlog": backlog[0], "backlog_wait": backlog[1],
    }


class Coordinator:
    def __init__(self, options: CrawlOptions, db_path: Path, redis_url: str, prefix: str | None = None) -> None:
        import redis as redis_lib

        self.options = options
        self.db_path = db_path
        self.redis_url = redis_url
        self.shown_url = redact_url(redis_url)  # in every message: never the password
        # One namespace per crawl (job and database): two jobs share a Redis without mixing frontiers.
        self.keys = Keys(prefix or crawl_prefix(options.job_name, db_path))
        # A lease or a wait of 0 is refused here: workers would reject the published config and the coordinator
        # would blame Redis ("no worker took a request") after its whole wait.
        self.lease_seconds = _env_float("WEBQA_REDIS_LEASE", DEFAULT_LEASE_SECONDS, positive=True)
        self.grace = _env_float("WEBQA_REDIS_GRACE", 2.0)
        self.worker_wait = _env_float("WEBQA_REDIS_WORKER_WAIT", 600.0, positive=True)
        self.backlog = (_env_count("WEBQA_REDIS_BACKLOG", DEFAULT_BACKLOG),
                        _env_float("WEBQA_REDIS_BACKLOG_WAIT", DEFAULT_BACKLOG_WAIT, positive=True,
                                   most=MAX_BACKLOG_WAIT))
        try:  # after the settings: a bad one is named without waiting for Redis's timeouts
            self.r = connect(redis_url)
        except redis_lib.RedisError as exc:
            # Redis down is the environment's failure, not the command's: exit 3, as Ollama down.
            raise WebqaError(f"cannot reach Redis at {self.shown_url}: {redact_text(str(exc))}") from None
        self.frontier = Frontier(self.r, self.keys, lease_seconds=self.lease_seconds, token="coordinator")
        self.signal_name: str | None = None
        # Workers' beats as last seen: token → (value, when it last changed, coordinator's clock).
        self._beats: dict[bytes, tuple[bytes, float]] = {}

    # -- the run -----------------------------------------------------------------------------------

    def run(self) -> CrawlSummary:
        import redis as redis_lib

        try:
            return self._run()
        except redis_lib.RedisError as exc:
            raise RedisLost(f"lost Redis at {self.shown_url}: {redact_text(str(exc)).rstrip('.')}; the pages written so far are "
                            "stored, and this command run again when Redis is back carries on from what Redis kept"
                            ) from None

    def _run(self) -> CrawlSummary:
        started = time.monotonic()
        self._wait_for_dead_coordinator()
        crawl = self._load_crawl()
        with Store.open(self.db_path) as store:  # held for the whole crawl: the one writer
            # As the local store pipeline: a batch of pages costs less CPU on one thread (6.4 against 7.5 ms
            # a page, BENCHMARKS.md "The writer's ceiling"), and the workers need the other cores.
            store.set_threads(1)
            prep = None
            if crawl is None or crawl["state"] == "seeding":
                prep = _prepare(self.options, store)
                if not prep["listed"] or (crawl is None and self._all_fresh(prep)):
                    return self._nothing_to_fetch(prep, started)
            if crawl is None:
                assert prep is not None
                crawl_run_id = store.begin_crawl(self.options.job_name,
                                                 urls_requested=len(prep["listed"]) + sum(not p.duplicate for p in prep["problems"]))
                crawl = {"id": uuid.uuid4().hex, "state": "seeding", "db": str(self.db_path.resolve()),
                         "crawl_run_id": crawl_run_id, "job_name": self.options.job_name}
                self.r.set(self.keys.config, json.dumps(_config(self.options, prep, self.lease_seconds, self.backlog)))
                self._publish(crawl)
                self.r.hset(REGISTRY, self.keys.prefix, json.dumps(
                    {"job": self.options.job_name, "db": crawl["db"], "started": time.time()}))
                self._load_robots_cache()
            else:
                log.warning("Resuming crawl run %s from Redis %s", crawl["crawl_run_id"], self.shown_url)
            writer = Writer(self.r, self.keys, store, int(crawl["crawl_run_id"]), crawl.get("job_name"),
                            self.options.max_bytes)
            writer.resume()
            if crawl["state"] == "seeding":
                assert prep is not None
                self._seed(prep)
                crawl["state"] = "running"
                self._publish(crawl)
            problems = prep["problems"] if prep is not None else []
            with self._signals():
                self._wait(writer)
            return self._finish(store, writer, crawl, problems, started)

    def _all_fresh(self, prep: dict[str, Any]) -> bool:
        return CrawlPlan(**prep).nothing_to_request()

    def _nothing_to_fetch(self, prep: dict[str, Any], started: float) -> CrawlSummary:
        fresh = [u for u in prep["listed"] if u.url in prep["fresh"]]
        problems = prep["problems"]
        if fresh:
            return CrawlSummary(None, {}, problems, len(fresh), time.monotonic() - started)
        detail = f": {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "") if problems else ""
        raise NothingToDoError(f"no valid URL to crawl{detail}")

    def _wait_for_dead_coordinator(self) -> None:
        deadline = time.monotonic() + HEARTBEAT_SECONDS + 1
        while self.r.exists(self.keys.coordinator):
            if time.monotonic() > deadline:
                raise ConfigError(f"another coordinator is running a crawl on {self.shown_url} "
                                  f"(key {self.keys.coordinator}); wait for it to finish")
            time.sleep(0.2)
        self._beat()

    def _beat(self) -> None:
        self.r.set(self.keys.coordinator, os.getpid(), ex=HEARTBEAT_SECONDS)

    def _load_crawl(self) -> dict[str, Any] | None:
        crawl = parse_crawl(self.r.get(self.keys.crawl), self.keys.crawl)
        if crawl is None:
            return None
        if crawl.get("db") != str(self.db_path.resolve()):
            raise ConfigError(
                f"Redis {self.shown_url} holds an unfinished crawl into {crawl.get('db')}, not {self.db_path}; "
                f"finish it with that --db, or remove its keys (redis-cli --scan --pattern '{self.keys.pattern()}' "
                "| xargs redis-cli del)")
        return crawl

    def _publish(self, crawl: dict[str, Any]) -> None:
        self.r.set(self.keys.crawl, json.dumps(crawl))

    def _seed(self, prep: dict[str, Any]) -> None:
        from crawler.distributed.worker import DistributedUrlsSpider
        from crawler.spiders.urls import problem_outcome

        options = self.options
        spider = DistributedUrlsSpider(
            listed=prep["listed"], problems=prep["problems"], depth=options.depth, max_pages=options.max_pages,
            allow=list(options.allow), deny=list(options.deny), follow=options.follow,
            stored_links=prep["links"], fresh=prep["fresh"], frontier=self.frontier,
        )
        for request in spider.seed_requests():
            if isinstance(request, FetchOutcome):  # a listed URL not to be requested: its record, as an item
                self.r.rpush(self.keys.items, encode_item(request))
                continue
            data = JsonSerializer.dumps(request.to_dict(spider=spider))
            self.frontier.push(request.meta["webqa_id"], data, request.priority, urlsplit(request.url).hostname or "")
        # Invalid URLs are items like any other (as the local spider yields them), queued once.
        if prep["problems"] and self.r.set(self.keys.problems_queued, 1, nx=True):
            pipe = self.r.pipeline(transaction=True)
            for problem in (p for p in prep["problems"] if not p.duplicate):
                pipe.rpush(self.keys.items, encode_item(problem_outcome(problem)))
            pipe.execute()

    def _wait(self, writer: Writer) -> None:
        """Write items until the agreed stop: nothing queued, leased or unwritten, for the grace period."""
        quiet_since: float | None = None
        last_progress = time.monotonic()
        last_beat = 0.0
        while self.signal_name is None:
            now = time.monotonic()
            if now - last_beat >= BEAT_EVERY:
                self._beat()
                self.frontier.reap()
                self._watch_workers()
                last_beat = now
            # Waits for the next item in Redis (BLMOVE) rather than sleeping: written as soon as handed over.
            wrote = writer.drain(block=POLL)
            queued, leased, items, writing = self.frontier.state()
            now = time.monotonic()
            if wrote or leased:
                last_progress = now
            if queued == leased == items == writing == 0:
                quiet_since = quiet_since if quiet_since is not None else now
                if now - quiet_since >= self.grace:
                    return
            else:
                quiet_since = None
            if now - last_progress > self.worker_wait:
                raise NothingToDoError(
                    f"no worker took a request for {self.worker_wait:g} s ({queued} queued); start workers with "
                    f"`webqa worker --redis {self.shown_url}` and rerun this command to carry on")

    def _watch_workers(self) -> None:
        """A worker beats every third of the lease; one silent for two thirds of it (two beats missed)
        died without closing (a clean close removes its beat). Recorded in Redis, so a restarted
        coordinator still reports it; its leases come back to the queue when they expire (``reap``)."""
        now = time.monotonic()
        beats = self.r.hgetall(self.keys.workers)
        for token, value in beats.items():
            seen = self._beats.get(token)
            if seen is None or seen[0] != value:
                self._beats[token] = (value, now)
            elif now - seen[1] > self.lease_seconds * 2 / 3 + BEAT_EVERY:
                log.warning("Worker %s has not renewed its leases for %.0f s: taken for dead; its requests go "
                            "back to the queue when their leases expire", token.decode(), now - seen[1])
                pipe = self.r.pipeline(transaction=True)
                pipe.hset(self.keys.dead, token, value)
                pipe.hdel(self.keys.workers, token)
                pipe.execute()
                del self._beats[token]
        for token in set(self._beats) - set(beats):
            del self._beats[token]

    def _signals(self) -> AbstractContextManager[None]:
        def stop(signum: int, frame: Any) -> None:
            self.signal_name = signal.Signals(signum).name

        return stop_signals(stop)

    def _finish(self, store: Store, writer: Writer, crawl: dict[str, Any], problems: list[Any],
                started: float) -> CrawlSummary:
        crawl_run_id = int(crawl["crawl_run_id"])
        if self.signal_name is not None:
            # Workers close at once; what they already handed over is stored, the rest is not fetched.
            crawl["state"] = "stopped"
            self._publish(crawl)
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline and (writer.drain() or self.frontier.state()[1]):
                time.sleep(POLL)
        writer.drain(limit=10**9)
        counts = _int_map(self.r.hgetall(self.keys.counts), self.keys.counts)
        reached = _int_map(self.r.hgetall(self.keys.reached), self.keys.reached)
        status = "interrupted" if self.signal_name else "done"
        if counts.get("new") or counts.get("changed") or store.fts_is_stale():
            store.rebuild_fts()
        if self.options.job_name:
            store.record_job_pages(self.options.job_name, crawl_run_id, reached)
            if status == "done":
                counts["gone"] = len(store.gone_job_pages(self.options.job_name, crawl_run_id))
        store.finish_crawl(crawl_run_id, status, counts)
        self._watch_workers()
        dead = sorted(t.decode() for t in self.r.hkeys(self.keys.dead))
        stats = _int_map(self.r.hgetall(self.keys.stats), self.keys.stats)
        requeued = stats.get("requeued", 0)
        if stats.get("backlog_waits"):
            log.info("Workers waited for room in the backlog (WEBQA_REDIS_BACKLOG=%d items) %d times, %.1f s in all: "
                     "the writer was the crawl's bottleneck then", self.backlog[0], stats["backlog_waits"],
                     stats.get("backlog_wait_ms", 0) / 1000)
        self._save_robots_cache()
        # Explicitly, at the end of the crawl (the scheduler keeps everything, SCHEDULER_PERSIST):
        # the workers see the crawl gone and close.
        delete_namespace(self.r, self.keys)
        summary = CrawlSummary(crawl_run_id, counts, problems, counts.get("fresh", 0), time.monotonic() - started,
                               interrupted=self.signal_name)
        summary.outcomes = store.crawl_failures(crawl_run_id)
        if self.signal_name is not None:
            raise Interrupted(f"{self.signal_name}: the crawl stopped; {summary.processed} pages fetched or confirmed "
                              "are stored, the rest was not fetched", summary)
        if summary.processed == 0 and not summary.fresh:
            raise NothingToDoError(
                f"no URL could be fetched ({summary.count('failed')} failed, {summary.count('skipped')} skipped); "
                f"see `{failures_query(crawl_run_id)}` in {self.db_path}",
                summary,
            )
        if dead or requeued:
            # A lease expires only when its worker stopped renewing: dead, cut off, or stuck a whole lease.
            # Nothing is lost, but cron hears of it: the CLI prints this as a Notice line after the summary.
            who = (f" ({', '.join(dead[:3])}{', …' if len(dead) > 3 else ''})" if dead else "")
            summary.workers_lost = (
                f"{len(dead) or 'a'} worker{'s' if len(dead) > 1 else ''} stopped mid-crawl without finishing{who}; "
                f"{requeued} leased request{'s' if requeued != 1 else ''} went back to the queue when the leases "
                "expired, and every URL is stored or failed with a reason")
        return summary

    # -- the robots.txt cache across runs: file next to the database ⇄ the crawl's shared verdicts ----

    def _robots_cache_path(self) -> Path:
        return self.db_path.with_name(self.db_path.name + ".robots.json")

    def _load_robots_cache(self) -> None:
        from crawler.middlewares.robots import DEFAULT_CACHE_TTL, cache_entry, load_cache

        if not self.options.obey_robots:
            return
        cached = load_cache(self._robots_cache_path(), time.time(), DEFAULT_CACHE_TTL)
        if cached:
            self.r.hset(self.keys.robots, mapping={o: json.dumps(cache_entry(r)) for o, r in cached.items()})

    def _save_robots_cache(self) -> None:
        from crawler.middlewares.robots import DEFAULT_CACHE_TTL, load_cache, result_from_cache, write_cache

        if not self.options.obey_robots:
            return
        now = time.time()
        merged = load_cache(self._robots_cache_path(), now, DEFAULT_CACHE_TTL)
        for origin, raw in self.r.hgetall(self.keys.robots).items():
            try:
                result = result_from_cache(json.loads(raw), now, DEFAULT_CACHE_TTL)
            except Exception as exc:  # noqa: BLE001 - an entry webqa did not write is not cached for next time
                log.warning("Not caching robots.txt verdict %r from Redis: %s", origin[:100], describe(exc))
                continue
            if result is not None:
                merged[origin.decode()] = result
        try:
            write_cache(self._robots_cache_path(), merged)
        except OSError as exc:
            log.warning("Cannot write robots.txt cache %s: %s", self._robots_cache_path(), exc)


def _int_map(raw: dict[bytes, bytes], key: str) -> dict[str, int]:
    """A Redis hash of counts; an entry that is not a whole number is left out, with one warning."""
    out: dict[str, int] = {}
    for name, value in raw.items():
        try:
            out[name.decode("utf-8", "replace")] = int(value)
        except (TypeError, ValueError):
            log.warning("Ignoring %r in Redis hash %s: not a whole number", name[:60], key)
    return out


def run_distributed(options: CrawlOptions, db_path: str | Path) -> CrawlSummary:
    """``run_crawl`` with the frontier in Redis (``options.redis``) and the fetching done by workers."""
    assert options.redis
    allows_private_networks(options)  # a bad WEBQA_ALLOW_PRIVATE_NETWORKS is one line, before anything runs
    return Coordinator(options, Path(db_path), options.redis).run()
