"""Crawling with several worker processes on several machines, coordinated through Redis.

One command, the coordinator (``webqa crawl --redis URL``), seeds a shared frontier, stores what the
workers send into DuckDB and decides when the crawl is over; any number of ``webqa worker --redis URL``
processes fetch and clean. Redis holds everything shared, under one key prefix per crawl
(``webqa:<job>-<hash>``, ``queue.crawl_prefix``; ``webqa:crawls`` lists the running ones, which is how a
worker finds one), removed by the coordinator when the crawl ends:

* ``queue.py``: the frontier (requests by priority, leased while a worker has them, requeued when a
  lease expires), the duplicate filter and the crawl's limits (``max_pages``), as Lua scripts;
* ``gate.py``: one politeness gate per host for all workers (delay, Crawl-delay, Retry-After, and
  robots.txt fetched once and shared);
* ``items.py``: items as JSON, handed over to the coordinator together with the lease's release;
* ``entries.py``: everything read back from Redis parsed, checked and bounded (items, requests with their
  meta allow-list, the crawl's record and config); a bad entry goes to the dead-letter list;
* ``worker.py`` and ``coordinator.py``: the two commands.

A crawl on one machine (no ``--redis``) imports none of this, and Redis is an optional dependency
(``pip install 'webqa[redis]'``).
"""
