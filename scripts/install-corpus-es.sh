#!/usr/bin/env bash
# Fetch the Spanish development corpus of the selection benchmarks: the Spanish translation of the Debian
# Reference (Debian's debian-reference-es: one HTML page per chapter, DocBook output, no declared language, so
# the page's language is told from its text), unpacked into build/corpus-es/ of this project
# (scripts/install-deb-corpus.sh: apt-get download + dpkg-deb -x, never installed, no root needed).
# Idempotent; build/ is git-ignored.
#
#   scripts/install-corpus-es.sh        # prints the folder holding the HTML pages
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/install-deb-corpus.sh install-corpus-es debian-reference-es "$(pwd)/build/corpus-es" \
    usr/share/debian-reference ch02.es.html
