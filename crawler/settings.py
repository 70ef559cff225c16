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

# No interactive console port on machines that run cron jobs.
TELNETCONSOLE_ENABLED = False
# Our own summary line replaces Scrapy's INFO chatter; `webqa -v` turns it back on.
LOG_LEVEL = "INFO"
