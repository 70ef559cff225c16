#!/usr/bin/env bash
# Fetch the third development corpus of the selection benchmarks: Git's HTML manual (asciidoc output: one
# page per command, options as definition lists, the glossary and the FAQ as long pages) from Debian's
# git-doc, unpacked into build/corpus-git/ of this project (scripts/install-deb-corpus.sh: apt-get download
# + dpkg-deb -x, never installed, no root needed). Idempotent; build/ is git-ignored.
#
#   scripts/install-corpus-git.sh        # prints the folder holding the HTML pages
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/install-deb-corpus.sh install-corpus-git git-doc "$(pwd)/build/corpus-git" usr/share/doc/git-doc \
    git-rebase.html
