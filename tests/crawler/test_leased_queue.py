"""The worker's Scrapy queue when Redis goes away between two engine ticks."""

from __future__ import annotations

import redis

from crawler.distributed.queue import Frontier, Keys, LeasedQueue


def test_len_with_redis_gone_is_zero_not_a_traceback_from_the_engine() -> None:
    # A closed port: redis-py raises ConnectionError on the first command, as when the server is stopped.
    client = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=1, socket_timeout=1)
    queue = LeasedQueue.__new__(LeasedQueue)  # the scrapy-redis base needs a spider; only the frontier matters
    queue.frontier = Frontier(client, Keys("t"), lease_seconds=5, token="w")
    assert len(queue) == 0
