#!/usr/bin/env bash
# Install the real documentation corpus used by the `corpus` tests and the benchmarks:
# the Python 3.11 HTML manual from Debian's python3.11-doc package.
# Idempotent: does nothing when the manual is already there. The pages themselves are
# never committed to this repository.
set -euo pipefail

CORPUS_DIR=/usr/share/doc/python3.11/html
PROBE="$CORPUS_DIR/library/json.html"

if [ -f "$PROBE" ]; then
    echo "python3.11-doc already installed: HTML in $CORPUS_DIR"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "install-corpus: need root (or sudo) to run apt-get" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive

# Try without refreshing first (fast when the package lists are current); refresh only if
# apt does not know the package yet or the cached lists are stale.
if ! $SUDO apt-get install -y --no-install-recommends python3.11-doc; then
    $SUDO apt-get update
    $SUDO apt-get install -y --no-install-recommends python3.11-doc
fi

if [ ! -f "$PROBE" ]; then
    echo "install-corpus: python3.11-doc installed but $PROBE is missing" >&2
    exit 1
fi
echo "python3.11-doc installed: HTML in $CORPUS_DIR"
