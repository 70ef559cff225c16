"""Scrapy settings for webqa: politeness and safety defaults.

Every value that differs from Scrapy's default says why. Per-run values (database, delays, per-host
overrides, validators) are layered on top by ``crawler.run.crawl_settings``.
"""

from pipelines import defaults as _defaults

BOT_NAME = "webqa"
SPIDER_MODULES = ["crawler.spiders"]
NEWSPIDER_MODULE = "crawler.spiders"

# Identify ourselves honestly; `crawler.run` appends the job's contact URL when one is configured.
USER_AGENT = _defaults.user_agent()

# Site owners decide what may be crawled.
ROBOTSTXT_OBEY = True

# One request per host at a time, a fixed delay apart (pipelines/defaults.py says why).
CONCURRENT_REQUESTS_PER_DOMAIN = 1
DOWNLOAD_DELAY = _defaults.DELAY
# No jitter: the delay is a promise to the server and must hold as a minimum, not an average.
DOWNLOAD_DELAY_JITTER = 0
# Many hosts may be crawled in parallel; politeness is per host.
CONCURRENT_REQUESTS = 32
# How many of one response's outputs are processed at once. Scrapy starts this many tasks for every
# response; ours yields one record and its links (requests, queued at once), so Scrapy's 100 only cost
# the reactor thread time (BENCHMARKS.md, "The daily re-crawl as a crawl").
CONCURRENT_ITEMS = 4

# A redirect chain longer than this is a loop or a trap.
REDIRECT_MAX_TIMES = 5
# Scrapy waits 180 s by default; a cron job over many URLs cannot afford that per dead server.
DOWNLOAD_TIMEOUT = _defaults.TIMEOUT
# Documentation pages are far below this; anything larger is a dump or a bomb (counted after decompression).
DOWNLOAD_MAXSIZE = _defaults.MAX_BYTES
DOWNLOAD_WARNSIZE = 5 * 1024 * 1024
# Retries are few: a page that fails three times is recorded as failed, the next run tries again.
RETRY_TIMES = 2
# Scrapy's list without a refused connection and a failed DNS lookup: nothing listens there, or the name
# does not resolve, and asking again a delay later only makes a dead host cost seconds per URL (its
# robots.txt first); the next run tries again. Timeouts and dropped connections are still retried.
RETRY_EXCEPTIONS = [
    "scrapy.exceptions.DownloadFailedError",
    "scrapy.exceptions.DownloadTimeoutError",
    "scrapy.exceptions.ResponseDataLossError",
    "twisted.internet.error.ConnectionDone",
    "twisted.internet.error.ConnectError",  # Scrapy wraps a refusal apart (DownloadConnectionRefusedError)
    "twisted.internet.error.ConnectionLost",
    OSError,
    "scrapy.core.downloader.handlers.http11.TunnelError",
]
# A resolver that has not answered in this long will not: Scrapy's 60 s would hold a cron run per host.
DNS_TIMEOUT = 10
# A 429/503 with Retry-After is retried after that long (the host waits too), unless it asks for more
# than this many seconds: then the URL is recorded as failed at once; a cron job does not wait an hour.
WEBQA_MAX_RETRY_AFTER = 60

# Nothing is dropped without a record. Scrapy's own silent drops, each off or unreachable here:
# URLLENGTH_LIMIT (a URL over 2,083 characters vanished with a log line) is off, and the spider records a
# URL longer than WEBQA_MAX_URL_LENGTH as failed; DEPTH_LIMIT is off (the spider keeps the job's depth);
# the offsite middlewares have no allowed_domains to apply (the spider follows same-host links itself);
# every request carries dont_filter (the spider's `seen` fetches each URL once; the duplicate filter
# would drop a redirect to a URL already fetched under its own name).
URLLENGTH_LIMIT = 0
WEBQA_MAX_URL_LENGTH = _defaults.MAX_URL_LENGTH
DEPTH_LIMIT = 0

# Only http and https are ever fetched; local files, data: URLs, FTP and S3 are not a web page.
DOWNLOAD_HANDLERS = {"file": None, "data": None, "ftp": None, "s3": None}

# SSRF guard (crawler/middlewares/ssrf.py, SECURITY.md): no connection to loopback, private, link-local
# or other non-public addresses. The resolver checks the very address Twisted connects to, so a DNS
# answer that changes between check and connect cannot slip through.
TWISTED_DNS_RESOLVER = "crawler.middlewares.ssrf.GuardedResolver"
# Off only on purpose: the job's crawl.allow_private_networks, `--allow-private-networks`, or
# WEBQA_ALLOW_PRIVATE_NETWORKS=1 in the environment. `crawler.run` sets the setting of that name from
# all three; without it (`scrapy crawl`) the guard reads the environment when the crawl starts, not
# when this module is imported (ssrf.private_networks_allowed). An unreadable value keeps the guard on.

DOWNLOADER_MIDDLEWARES = {
    # Before everything else, robots.txt included: a blocked address costs no request at all.
    "crawler.middlewares.ssrf.SsrfGuardMiddleware": 60,
    # Scrapy's own lets requests queued during the robots.txt download through unchecked (all but the
    # first waiter get "allow all"), reads 5xx as allow-all and ignores Crawl-delay.
    "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
    # RFC 9309 robots.txt with Crawl-delay, at the stock one's place: before anything spends work
    # (conditional headers, retries, redirects) on a request robots.txt may forbid.
    "crawler.middlewares.robots.RobotsPolicyMiddleware": 100,
    # After RobotsTxtMiddleware (100) so disallowed requests are never made conditional, before
    # HttpCompressionMiddleware (590) so our headers go out on the wire.
    "crawler.middlewares.conditional.ConditionalGetMiddleware": 560,
    # Scrapy's retries ignore Retry-After; ours wait for it on 429/503 (bounded by
    # WEBQA_MAX_RETRY_AFTER), at the stock one's place.
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
    "crawler.middlewares.retry_after.RetryAfterMiddleware": 550,
    # A refused connection reached no server: the host's next request need not wait its delay.
    "crawler.middlewares.refused.RefusedConnectionMiddleware": 580,
}

SPIDER_MIDDLEWARES = {
    # Outermost (before HttpErrorMiddleware's 50), so it sees what the spider and every spider middleware
    # raise: an unexpected exception is the URL's failure, not a URL lost with only a line in Scrapy's log.
    "crawler.middlewares.internal_error.InternalErrorMiddleware": 10,
}

ITEM_PIPELINES = {
    "pipelines.extraction.ExtractionPipeline": 100,
    "pipelines.store_pipeline.StorePipeline": 800,
}

# Where pages go when the crawl is started with `scrapy crawl urls` from the repository root.
WEBQA_DB = _defaults.DB
WEBQA_EXTRACT_TIMEOUT = _defaults.EXTRACT_TIMEOUT  # seconds of CPU time per page, not wall time
# A PDF's own CPU budget (the whole document) and its page cap.
WEBQA_PDF_EXTRACT_TIMEOUT = _defaults.PDF_EXTRACT_TIMEOUT
WEBQA_PDF_MAX_PAGES = _defaults.PDF_MAX_PAGES
WEBQA_CHUNK_TOKENS = _defaults.CHUNK_TOKENS
WEBQA_CHUNK_OVERLAP = _defaults.CHUNK_OVERLAP
# A page whose meta robots or X-Robots-Tag says noindex is not stored for answering (crawl.obey_noindex).
WEBQA_OBEY_NOINDEX = True
# A host asking for more than this many seconds between requests is skipped, not crawled for hours.
WEBQA_MAX_CRAWL_DELAY = _defaults.MAX_CRAWL_DELAY
# JSON file of robots.txt results reused by later runs; `crawler.run` puts it next to the database.
WEBQA_ROBOTS_CACHE = None
# RFC 9309 §2.4: a cached robots.txt should not be trusted for more than 24 hours.
WEBQA_ROBOTS_CACHE_TTL = 24 * 3600

# No interactive console port on machines that run cron jobs.
TELNETCONSOLE_ENABLED = False
# Nor a remote control server. Left out of the base list, not switched off in EXTENSIONS: Scrapy imports
# every extension it is told about, even one set to None, and this one imports aiohttp (BENCHMARKS.md,
# "The fixed cost of a run").
EXTENSIONS_BASE = {
    "scrapy.extensions.corestats.CoreStats": 0,
    "scrapy.extensions.logcount.LogCount": 0,
    "scrapy.extensions.telnet.TelnetConsole": 0,
    "scrapy.extensions.memusage.MemoryUsage": 0,
    "scrapy.extensions.memdebug.MemoryDebugger": 0,
    "scrapy.extensions.closespider.CloseSpider": 0,
    "scrapy.extensions.feedexport.FeedExporter": 0,
    "scrapy.extensions.logstats.LogStats": 0,
    "scrapy.extensions.spiderstate.SpiderState": 0,
    "scrapy.extensions.throttle.AutoThrottle": 0,
}
EXTENSIONS: dict[str, int | None] = {}
# Scrapy's lint for `return value` in generator callbacks re-reads and parses the callback's source for
# every response whenever its cache misses, which it does with a bound method per request: a fifth of the
# reactor thread's time in a 304 re-crawl (BENCHMARKS.md). Our callbacks are covered by tests instead.
WARN_ON_GENERATOR_RETURN_VALUE = False
# Our own summary line replaces Scrapy's INFO chatter; `webqa -v` turns it back on.
LOG_LEVEL = "INFO"
