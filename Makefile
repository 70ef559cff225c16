# webqa: the two things most people want, plus cleaning up.
#
#   make demo   set up .venv, serve the sample site on 127.0.0.1 and answer its questions
#   make test   set up .venv (and, when possible, the python3.11-doc corpus) and run pytest
#   make clean  remove build/ (demo database, reports) and caches; .venv stays (make distclean)

SHELL := /bin/bash
CORPUS_DIR := /usr/share/doc/python3.11/html

.PHONY: all demo setup test corpus clean distclean

all: test

setup:
	scripts/setup.sh

demo:
	scripts/demo.sh

# The corpus tests read Debian's python3.11-doc HTML manual; installing it needs apt-get and
# root (or password-less sudo). Without it those tests are skipped, not failed.
corpus:
	@if [ -f "$(CORPUS_DIR)/library/json.html" ]; then \
		echo "corpus: python3.11-doc HTML found in $(CORPUS_DIR)"; \
	elif command -v apt-get >/dev/null 2>&1 && { [ "$$(id -u)" -eq 0 ] || sudo -n true 2>/dev/null; }; then \
		scripts/install-corpus.sh || echo "corpus: installing python3.11-doc failed; the corpus tests will be skipped"; \
	else \
		echo "corpus: $(CORPUS_DIR) is missing and apt-get cannot be used here (needs root or sudo);" \
		     "the corpus tests will be skipped (install it with scripts/install-corpus.sh)"; \
	fi

test: setup corpus
	.venv/bin/pytest -q

clean:
	rm -rf build/ demo-out/ .pytest_cache/
	find . -path ./.venv -prune -o -type d -name __pycache__ -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf .venv/ webqa.egg-info/
