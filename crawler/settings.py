"""Scrapy settings for webqa: politeness and safety defaults.

Every value that differs from Scrapy's default says why. Per-run values (database, delays, per-host
overrides, validators) are layered on top by ``crawler.run.crawl_settings``.
"""

BOT_NAME = "webqa"
SPIDER_MODULES = ["crawler.spiders"]
NEWSPIDER_MODULE = "crawler.spiders"

# Identify ourselves honestly; `crawler.run` appends the job's contact URL when one is configured.
USER_AGENT = "webqa/0.1 (batch question answering; +https://pypi.org/project/webqa/)"

# Site owners decide what may be crawled.
ROBOTSTXT_OBEY = True

# One request per host at a time, a fixed second apart: predictable load on servers we do not own.
CONCURRENT_REQUESTS_PER_DOMAIN = 1
DOWNLOAD_DELAY = 1.0
# No jitter: the delay is a promise to the server and must hold as a minimum, not an average.
DOWNLOAD_DELAY_JITTER = 0
# Many hosts may be crawled in parallel; politeness is per host.
CONCURRENT_REQUESTS = 32

# A redirect chain longer than this is a loop or a trap.
REDIRECT_MAX_TIMES = 5
# Scrapy waits 180 s by default; a cron job over many URLs cannot afford that per dead server.
DOWNLOAD_TIMEOUT = 30
# Documentation pages are far below this; anything larger is a dump or a bomb (counted after decompression).
DOWNLOAD_MAXSIZE = 10 * 1024 * 1024
DOWNLOAD_WARNSIZE = 5 * 1024 * 1024
# Retries are few: a page that fails three times is recorded as failed, the next run tries again.
RETRY_TIMES = 2

# Only http and https are ever fetched; local files, data: URLs, FTP and S3 are not a web page.
DOWNLOAD_HANDLERS = {"file": None, "data": None, "ftp": None, "s3": None}

DOWNLOADER_MIDDLEWARES = {
    # Scrapy's own lets requests queued during the robots.txt download through unchecked (all but the
    # first waiter get "allow all"), reads 5xx as allow-all and ignores Crawl-delay.
    "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
    # RFC 9309 robots.txt with Crawl-delay, at the stock one's place: before anything spends work
    # (conditional headers, retries, redirects) on a request robots.txt may forbid.
    "crawler.middlewares.robots.RobotsPolicyMiddleware": 100,
    # After RobotsTxtMiddleware (100) so disallowed requests are never made conditional, before
    # HttpCompressionMiddleware (590) so our headers go out on the wire.
    "crawler.middlewares.conditional.ConditionalGetMiddleware": 560,
}

ITEM_PIPELINES = {
    "pipelines.extraction.ExtractionPipeline": 100,
    "pipelines.store_pipeline.StorePipeline": 800,
}

# Where pages go when the crawl is started with `scrapy crawl urls` from the repository root.
WEBQA_DB = "webqa.duckdb"
WEBQA_EXTRACT_TIMEOUT = 10.0
WEBQA_CHUNK_TOKENS = 350
WEBQA_CHUNK_OVERLAP = 40
# A host asking for more than this many seconds between requests is skipped, not crawled for hours.
WEBQA_MAX_CRAWL_DELAY = 30
# JSON file of robots.txt results reused by later runs; `crawler.run` puts it next to the database.
WEBQA_ROBOTS_CACHE = None
# RFC 9309 §2.4: a cached robots.txt should not be trusted for more than 24 hours.
WEBQA_ROBOTS_CACHE_TTL = 24 * 3600

# No interactive console port on machines that run cron jobs.
TELNETCONSOLE_ENABLED = False
# Our own summary line replaces Scrapy's INFO chatter; `webqa -v` turns it back on.
LOG_LEVEL = "INFO"
