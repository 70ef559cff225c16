# webqa: the things most people want, plus cleaning up.
#
#   make demo       set up .venv, serve the sample site on 127.0.0.1 and answer its questions
#   make test       set up .venv (and, when possible, the python3.11-doc corpus in build/corpus) and run the
#                   whole test suite: what CI runs (.ci/run)
#   make test-fast  the same set-up, then only the tests that start no child process (pytest -m "not e2e":
#                   no crawl, no `webqa` subprocess, no redis-server; tests/support/e2e.py)
#   make clean      remove build/ (demo database, reports) and caches; .venv and build/corpus stay (make distclean)

SHELL := /bin/bash
.PHONY: all demo setup test test-fast corpus clean distclean

all: test

setup:
	scripts/setup.sh

demo:
	scripts/demo.sh

# The corpus tests read Debian's python3.11-doc HTML manual. scripts/install-corpus.sh downloads and
# unpacks it into build/corpus/ (no root, the system's Python untouched); when it cannot, it says why
# in one line and those tests are skipped, not failed.
corpus:
	@scripts/install-corpus.sh || true

test: setup corpus
	.venv/bin/pytest -q

test-fast: setup corpus
	.venv/bin/pytest -q -m "not e2e"

# build/corpus is kept: it is a 12 MB download that no build step changes.
clean:
	if [ -d build ]; then find build -mindepth 1 -maxdepth 1 ! -name corpus -exec rm -rf {} +; fi
	rm -rf demo-out/ .pytest_cache/
	find . -path ./.venv -prune -o -type d -name __pycache__ -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf .venv/ webqa.egg-info/ build/
