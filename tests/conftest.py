"""Shared pytest wiring: fixtures live in their own modules and are registered here, and the `e2e` marker
is kept honest (tests/support/e2e.py)."""

import os

# Every test site (tests/support/site_server.py, tests/support/fake_ollama.py) listens on loopback, which the SSRF
# guard refuses by default. Crawls in tests run as subprocesses and inherit this switch, the same
# one an operator uses for intranet crawls (SECURITY.md). Tests of the guard itself remove it from
# their subprocess's environment (tests/crawler/test_hardening.py).
os.environ["WEBQA_ALLOW_PRIVATE_NETWORKS"] = "1"

pytest_plugins = [
    "pytester",
    "tests.support.e2e",
    "tests.support.fake_ollama",
    "tests.support.site_server",
]
