"""Bugs planted in a `webqa crawl` subprocess, to test that an unexpected exception costs its URL, recorded.

No real input is known to make the spider or the pipelines raise (that is what a bug is), so the
crawl runs as ``python -c`` with the real CLI after :func:`install` has patched a step to raise for
URLs whose path holds ``/bug-NAME`` (NAME the bug's); every other URL is handled as usual. Nothing of this
is in the product.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.crawling import REPO

_SCRIPT = """
import sys
from tests.support import bugs
bugs.install(sys.argv[1].split(","))
from jobs.cli import main
sys.exit(main(sys.argv[2:]))
"""


def run_cli_with_bugs(bugs: str, *args: str, db: Path) -> subprocess.CompletedProcess[str]:
    """`webqa crawl ARGS --db DB --delay 0` with the named bugs (comma-separated) installed (not -q: the
    tests read the summary line and each failed URL's line, which -q folds into one)."""
    command = [sys.executable, "-c", _SCRIPT, bugs, "crawl", *args, "--db", str(db), "--delay", "0"]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)


def _marked(url: str, name: str) -> bool:
    return f"/bug-{name}" in url


def install(names: list[str]) -> None:
    from crawler.spiders import urls
    from pipelines import extraction, store

    for name in names:
        if name == "parse":  # the spider's callback, before the URL's record
            page_links = urls.UrlsSpider._page_links

            def raising_page_links(self: Any, response: Any) -> list[str]:
                if _marked(response.url, "parse"):
                    raise ValueError(f"planted in _page_links for {response.url}")
                return page_links(self, response)

            urls.UrlsSpider._page_links = raising_page_links  # type: ignore[method-assign]
        elif name == "follow":  # the spider's callback, after the URL's record (following its links)
            follow = urls.UrlsSpider._follow

            def raising_follow(self: Any, links: Any, depth: int) -> Any:
                links = list(links)
                if any(_marked(link, "follow") for link in links):
                    raise ValueError("planted in _follow")
                return follow(self, links, depth)

            urls.UrlsSpider._follow = raising_follow  # type: ignore[method-assign]
        elif name == "errback":  # the spider's errback, describing a failed download
            describe = urls.describe_failure

            def raising_describe(failure: Any, *args: Any, **kwargs: Any) -> tuple[str, str]:
                if _marked(failure.request.url, "errback"):
                    raise KeyError("planted in describe_failure")
                return describe(failure, *args, **kwargs)

            urls.describe_failure = raising_describe
        elif name == "extract":  # the extraction worker (pickled by reference: the worker imports this module)
            extraction.process_page = raising_process_page
        elif name == "store":  # writing a page, for a reason other than the database refusing writes
            save_pages = store.Store.save_pages

            def raising_save_pages(self: Any, pages: Any, crawl_run_id: Any) -> list[str]:
                if any(_marked(page.url, "store") for page, _ in pages):
                    raise TypeError("planted in save_pages")
                return save_pages(self, pages, crawl_run_id)

            store.Store.save_pages = raising_save_pages  # type: ignore[method-assign]
        else:
            raise ValueError(f"no such planted bug: {name}")


def raising_process_page(html: str, url: str, **kwargs: Any) -> Any:
    if _marked(url, "extract"):
        raise RuntimeError("planted in the extraction worker")
    from pipelines.page_processing import process_page

    return process_page(html, url, **kwargs)
