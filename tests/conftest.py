"""Shared pytest wiring: fixtures live in their own modules and are registered here."""

import os

# Every test site (tests/site_server.py, tests/fake_ollama.py) listens on loopback, which the SSRF
# guard refuses by default. Crawls in tests run as subprocesses and inherit this switch, the same
# one an operator uses for intranet crawls (SECURITY.md). Tests of the guard itself remove it from
# their subprocess's environment (tests/test_hardening.py).
os.environ["WEBQA_ALLOW_PRIVATE_NETWORKS"] = "1"

pytest_plugins = [
    "tests.fake_ollama",
    "tests.site_server",
]
