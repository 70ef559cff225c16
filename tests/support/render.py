"""JavaScript rendering tests' support: the system's Chromium, and a crawl (or a `webqa run`) of a "public"
site behind tests/support/proxy.py with the SSRF guard on, in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.crawling import REPO
from tests.support.proxy import _CLI, ForwardingProxy

CHROMIUM = "/usr/bin/chromium"
# CI installs chromium (.ci/run); a machine without it skips these tests and says why.
needs_chromium = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                                    reason=f"needs Chromium at {CHROMIUM} (apt-get install chromium)")

# run_crawl with docs.example resolving to a public address (as in tests/support/proxy.py), then what the
# process imported: a crawl that renders nothing must not have loaded playwright.
_API = """
import json, sys
from scrapy.resolver import CachingThreadedResolver
from twisted.internet import defer
real = CachingThreadedResolver.getHostByName
def public_dns(self, name, timeout=()):
    return defer.succeed("93.184.215.14") if name == "docs.example" else real(self, name, timeout)
CachingThreadedResolver.getHostByName = public_dns
from crawler.run import CrawlOptions, run_crawl
from jobs.errors import WebqaError
code = 0
try:
    summary = run_crawl(CrawlOptions(**json.loads(sys.argv[1])), sys.argv[2])
    print(summary.line())
    code = 0 if summary.count("failed") == 0 else 1
except WebqaError as exc:
    print(f"Error: {exc}", file=sys.stderr)
    code = int(exc.exit_code)
print("imported playwright:", "playwright" in sys.modules, "scrapy_playwright" in sys.modules)
sys.exit(code)
"""


def _env(proxy: ForwardingProxy | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "no_proxy")}
    if proxy is not None:
        env.pop("WEBQA_ALLOW_PRIVATE_NETWORKS", None)  # the guard on, as in production
        env.update(http_proxy=proxy.url, no_proxy="127.0.0.1,localhost")
    return env


def crawl(db: Path, proxy: ForwardingProxy | None, **options: Any) -> subprocess.CompletedProcess[str]:
    """``run_crawl(CrawlOptions(**options), db)`` in a subprocess; through ``proxy`` with the guard on, else
    on loopback with private networks allowed."""
    options.setdefault("delay", 0)
    return subprocess.run([sys.executable, "-c", _API, json.dumps(options), str(db)], cwd=REPO,
                          capture_output=True, text=True, timeout=180, env=_env(proxy))


def webqa_through(proxy: ForwardingProxy, *args: str, host: str) -> subprocess.CompletedProcess[str]:
    """`webqa ARGS` with docs.example behind ``proxy`` and the guard on; Ollama at ``host`` (on loopback)."""
    env = _env(proxy)
    env["OLLAMA_HOST"] = host
    return subprocess.run([sys.executable, "-c", _CLI, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=env)


# A name whose answers differ (DNS rebinding), simulated on loopback: webqa's resolver answers "localhost" with a
# public-looking address, which only that address's connections reach (httpcore's connect is sent on to 127.0.0.2,
# the "public" site); any other lookup of the name (the operating system's, as a fetcher that resolves again
# would make) answers 127.0.0.1, the private host.
REBIND_PUBLIC = "93.184.215.14"
_REBIND = """
import sys
from scrapy.resolver import CachingThreadedResolver
from twisted.internet import defer
real = CachingThreadedResolver.getHostByName
def public_dns(self, name, timeout=()):
    return defer.succeed("%(public)s") if name == "localhost" else real(self, name, timeout)
CachingThreadedResolver.getHostByName = public_dns
from httpcore._backends.auto import AutoBackend
connect = AutoBackend.connect_tcp
async def route_public(self, host, port, *args, **kwargs):
    return await connect(self, "127.0.0.2" if host == "%(public)s" else host, port, *args, **kwargs)
AutoBackend.connect_tcp = route_public
""" % {"public": REBIND_PUBLIC}


def crawl_rebinding(db: Path, **options: Any) -> subprocess.CompletedProcess[str]:
    """:func:`crawl` with the guard on, no proxy, and "localhost" rebinding as above."""
    options.setdefault("delay", 0)
    env = _env(None)
    env.pop("WEBQA_ALLOW_PRIVATE_NETWORKS", None)
    script = "import json\n" + _REBIND + _API[_API.index("from crawler.run import"):]
    return subprocess.run([sys.executable, "-c", script, json.dumps(options), str(db)], cwd=REPO,
                          capture_output=True, text=True, timeout=180, env=env)
