#!/usr/bin/env bash
# Fetch the second development corpus of the selection benchmarks: PostgreSQL 15's HTML manual
# (DocBook XSL output: no <main> element, navigation tables at the top and bottom of every page,
# parameters as definition lists) from Debian's postgresql-doc-15, unpacked into
# build/corpus-postgresql/ of this project.
#
# Like scripts/install-corpus.sh: `apt-get download` + `dpkg-deb -x`, never installed, no root needed
# (except an `apt-get update` when apt does not know the package yet). Its own folder, because
# install-corpus.sh replaces build/corpus/ as a whole. Idempotent; build/ is git-ignored.
#
#   scripts/install-corpus-postgresql.sh        # prints the folder holding the HTML pages
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
DEST="$ROOT/build/corpus-postgresql"
PACKAGE=postgresql-doc-15
HTML="usr/share/doc/postgresql-doc-15/html"

say() { echo "install-corpus-postgresql: $*"; }
give_up() { echo "install-corpus-postgresql: $*" >&2; exit 1; }

if [ -f "$DEST/$HTML/sql-createindex.html" ]; then
    say "the PostgreSQL 15 manual is already in $DEST/$HTML"
    exit 0
fi
command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 \
    || give_up "apt-get and dpkg-deb are needed to fetch $PACKAGE (Debian/Ubuntu only)"

mkdir -p "$ROOT/build"
WORK=$(mktemp -d "$ROOT/build/corpus-postgresql-download.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
LOG="$WORK/apt.log"

download() { (cd "$WORK" && apt-get download -q "$PACKAGE") >"$LOG" 2>&1; }
first_error() { grep -m1 '^E:' "$LOG" || tail -n1 "$LOG"; }

if ! download; then
    if [ "$(id -u)" -eq 0 ]; then
        say "apt-get download failed; refreshing the package lists (apt-get update) and retrying"
        apt-get update -qq >>"$LOG" 2>&1 || true
        download || give_up "apt-get download $PACKAGE failed after apt-get update: $(first_error)"
    else
        give_up "apt-get download $PACKAGE failed: $(first_error); run 'sudo apt-get update' once and rerun $0"
    fi
fi

# Unpacked into a fresh folder and swapped in, so an interrupted run never leaves half a manual.
mkdir "$WORK/tree"
dpkg-deb -x "$WORK"/"$PACKAGE"_*.deb "$WORK/tree"
[ -f "$WORK/tree/$HTML/sql-createindex.html" ] || give_up "the downloaded $PACKAGE has no $HTML/sql-createindex.html"
rm -rf "$DEST"
mv "$WORK/tree" "$DEST"
say "the PostgreSQL 15 manual ($(cd "$WORK" && ls "$PACKAGE"_*.deb)) is in $DEST/$HTML"
