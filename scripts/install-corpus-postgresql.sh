#!/usr/bin/env bash
# Fetch the second development corpus of the selection benchmarks: PostgreSQL 15's HTML manual
# (DocBook XSL output: no <main> element, navigation tables at the top and bottom of every page,
# parameters as definition lists) from Debian's postgresql-doc-15, unpacked into
# build/corpus-postgresql/ of this project.
#
# Like scripts/install-corpus.sh: `apt-get download` + `dpkg-deb -x` (scripts/install-deb-corpus.sh), never
# installed, no root needed (except an `apt-get update` when apt does not know the package yet). Its own
# folder, because install-corpus.sh replaces build/corpus/ as a whole. Idempotent; build/ is git-ignored.
#
#   scripts/install-corpus-postgresql.sh        # prints the folder holding the HTML pages
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/install-deb-corpus.sh install-corpus-postgresql postgresql-doc-15 "$(pwd)/build/corpus-postgresql" \
    usr/share/doc/postgresql-doc-15/html sql-createindex.html
