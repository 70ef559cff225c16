"""The crawl's and selection's defaults, each written once: Scrapy's settings, the job models,
``CrawlOptions``, ``AskSettings`` and the command line all take theirs from here, so that they cannot drift apart.

In the bottom layer and importing nothing, because all three layers need them (the chunker in
pipelines/, the Scrapy settings in crawler/, the job file and argparse in jobs/), and a job file is
checked without paying for Scrapy's or trafilatura's import.
"""

from __future__ import annotations

# The database when neither --db, $WEBQA_DB nor WEBQA_DB (for `scrapy crawl`) says otherwise.
DB = "webqa.duckdb"

# Seconds between two requests to one host: a fixed second is predictable load on servers we do not own.
DELAY = 1.0
# Seconds before a response is abandoned; Scrapy's 180 s per dead server is too long for a cron job.
TIMEOUT = 30.0
# Largest response body, after decompression: documentation pages are far below it; above is a dump or a bomb.
MAX_BYTES = 10 * 1024 * 1024
# Longest URL requested (RFC 9110 recommends servers take 8,000 octets); longer is recorded as failed.
MAX_URL_LENGTH = 8192
# A host whose robots.txt asks for a longer Crawl-delay (seconds) is skipped, not crawled for hours.
MAX_CRAWL_DELAY = 30.0

# Most pages one listed sitemap may name (with the sitemaps its index leads to): sitemaps.org's limit for one file.
SITEMAP_MAX_URLS = 50_000

# Chunk size and the overlap between consecutive pieces of one section, in estimated tokens.
CHUNK_TOKENS = 350
CHUNK_OVERLAP = 40
# Seconds of CPU time (not wall time: a busy machine does not count against a page) one page may
# spend in trafilatura and the chunker before it is recorded as failed.
EXTRACT_TIMEOUT = 10.0

# A PDF with more pages than this is not read (recorded as failed), and one PDF may spend this many seconds of
# CPU time in the parser and the chunker, what pdfminer.six needs for that many pages (BENCHMARKS.md, "PDF documents").
PDF_MAX_PAGES = 500
PDF_EXTRACT_TIMEOUT = 120.0

# Selection, the same for `webqa run` (a job's selection:), `webqa ask` and `webqa eval`.
SELECTION_METHOD = "hybrid"
# The selection methods, here rather than in jobs/select.py so that the CLI parser and the job models read them
# without importing DuckDB.
SELECTION_METHODS = ("keyword", "bm25", "embedding", "hybrid")
EMBEDDING_METHODS = ("embedding", "hybrid")  # the methods that need Ollama's embeddings
# Most chunks sent to the answerer: a ceiling, the token budget is what binds (BENCHMARKS.md, "Answer in the prompt (selection)").
TOP_K = 40
# Most estimated tokens of evidence per question.
TOKEN_BUDGET = 3000
# The second stage (selection.second_stage): how many of the best candidates are scored again by their best
# sentence window, and that score's share in their new order (BENCHMARKS.md, "Answer in the prompt (selection)").
SECOND_STAGE_CANDIDATES = 40
SECOND_STAGE_WEIGHT = 0.5
# Most words of a passage (selection.passages, opt-in).
PASSAGE_WORDS = 120

# Where the User-Agent points when the job names no contact URL.
PROJECT_URL = "https://pypi.org/project/webqa/"

# DuckDB caches blocks up to 80% of RAM unless told: a full index build's bound (BENCHMARKS.md, "Selection
# latency at 1,000,000 chunks").
INDEX_BUILD_MEMORY_LIMIT = "2GB"


def user_agent(contact: str = PROJECT_URL) -> str:
    """Identify ourselves honestly, with a URL a site owner can follow (the job's contact, else the project)."""
    return f"webqa/0.1 (batch question answering; +{contact})"
