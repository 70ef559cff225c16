"""Tests of crawler/: URL lists, middlewares, the spider, and crawls run as subprocesses."""
