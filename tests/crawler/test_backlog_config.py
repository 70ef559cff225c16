"""The backlog's bound as published in the crawl's config: read from Redis, so checked and bounded like the
rest of it (crawler/distributed/entries.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawler.distributed.coordinator import Coordinator
from crawler.options import CrawlOptions
from pipelines.errors import ConfigError
from crawler.distributed.backlog import DEFAULT_BACKLOG, DEFAULT_BACKLOG_WAIT
from crawler.distributed.entries import RedisEntryError, parse_config
from crawler.distributed.worker import worker_settings

CONFIG = {
    "delay": 1.0, "contact": None, "obey_robots": True, "max_crawl_delay": 30.0, "allow_private_networks": False,
    "timeout": 30.0, "max_bytes": 1 << 20, "depth": 1, "max_pages": 0, "allow": [], "deny": [],
    "follow": "same_host", "stored_links": {}, "fresh": [], "validators": {}, "lease_seconds": 60.0, "hosts": {},
}


def _parsed(**extra: object) -> dict:  # type: ignore[type-arg]
    return parse_config(json.dumps({**CONFIG, **extra}).encode(), "webqa:t:config")


def test_every_worker_keeps_the_published_bound_or_the_default_without_one() -> None:
    settings = worker_settings(_parsed(backlog=7, backlog_wait=2.5), "redis://127.0.0.1:9/0", "webqa:t")
    assert (settings["WEBQA_REDIS_BACKLOG"], settings["WEBQA_REDIS_BACKLOG_WAIT"]) == (7, 2.5)
    settings = worker_settings(_parsed(), "redis://127.0.0.1:9/0", "webqa:t")  # an older coordinator's config
    assert (settings["WEBQA_REDIS_BACKLOG"], settings["WEBQA_REDIS_BACKLOG_WAIT"]) == (DEFAULT_BACKLOG,
                                                                                        DEFAULT_BACKLOG_WAIT)


@pytest.mark.parametrize("extra", [{"backlog": -1}, {"backlog": 2.5}, {"backlog": True}, {"backlog": "9"},
                                   {"backlog_wait": 0}, {"backlog_wait": 1e18}, {"backlog_wait": "60"}])
def test_a_bound_no_coordinator_would_publish_is_refused_in_one_line(extra: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(RedisEntryError, match="'backlog' or 'backlog_wait' is out of range"):
        _parsed(**extra)


@pytest.mark.parametrize("name", ["WEBQA_REDIS_LEASE", "WEBQA_REDIS_WORKER_WAIT"])
def test_a_lease_or_worker_wait_of_zero_is_named_before_redis_is_reached(name: str, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Accepted before, 0 made every worker refuse the published config and the coordinator blame Redis.
    monkeypatch.setenv(name, "0")
    with pytest.raises(ConfigError, match=f"{name}='0': expected a positive number of seconds"):
        Coordinator(CrawlOptions(urls=["http://127.0.0.1:1/"]), tmp_path / "c.duckdb", "redis://127.0.0.1:1/0")
