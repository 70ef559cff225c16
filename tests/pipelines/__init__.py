"""Tests of pipelines/: decoding, cleaning, chunks, the store, formats and what a crawl keeps."""
