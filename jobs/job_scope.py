"""The pages a run's questions search: the job's own (listed, reached by its crawls, not dropped since), or
every stored page; and a question's URLs in the form the crawler stores them."""

from __future__ import annotations

import logging

from jobs.config import JobConfig
from jobs.crawl_phase import CrawlReport
from jobs.errors import WebqaError
from jobs.runstore import RunStore

log = logging.getLogger("jobs.runner")  # the run's log lines keep the logger name users filter on


def job_scope(store: RunStore, job: JobConfig, crawl: CrawlReport) -> list[str] | None:
    """The pages a question without ``urls`` searches: the job's own, or None for the whole database.

    A job's pages are its listed URLs (and the questions' urls) plus the pages its last finished crawl
    reached within its depth (``Store.job_page_urls``), less the pages dropped since their copy was
    fetched (404, 410, refused by robots.txt: ``Store.dropped_pages``), with or without a crawl in this run.
    ``scope: database``, or a job that lists no URL at all, searches every stored page.
    """
    if job.scope == "database" or (not job.urls and job.urls_file is None):
        return None
    listed = job_page_urls(job) or []
    reached = store.job_page_urls(job.name)
    return sorted((set(listed) | set(reached)) - set(crawl.removed) - set(store.dropped_pages()))


def job_page_urls(job: JobConfig) -> list[str] | None:
    """The job's URLs as stored (normalised); None: the job lists none (it answers from every page)."""
    from crawler.run import CrawlOptions, gather_urls

    scoped = [url for q in job.questions for url in (stored_form(q.urls) or ())]
    if not job.urls and job.urls_file is None:
        return scoped or None
    try:
        listed, _problems = gather_urls(CrawlOptions(
            url_entries=job.url_entries(), urls_files=[job.urls_file] if job.urls_file else []))
    except WebqaError as exc:
        log.warning("Cannot read the job's URLs for its page scope: %s", exc)
        return scoped
    return list(dict.fromkeys([*(u.url for u in listed), *scoped]))


def stored_form(urls: list[str] | None) -> tuple[str, ...] | None:
    """A question's URLs as the crawler stores them (scheme/host lower case, no fragment, '/' path)."""
    from crawler.urllist import normalise_url

    if not urls:
        return None
    return tuple(dict.fromkeys(normalise_url(url)[0] or url for url in urls))
