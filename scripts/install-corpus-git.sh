#!/usr/bin/env bash
# Fetch the third development corpus of the selection benchmarks: Git's HTML manual (asciidoc output:
# one page per command, options as definition lists, the user manual and how-tos as long pages) from
# Debian's git-doc, unpacked into build/corpus-git/ of this project.
#
# Like scripts/install-corpus-postgresql.sh: `apt-get download` + `dpkg-deb -x`, never installed, no root
# needed (except an `apt-get update` when apt does not know the package yet). Its own folder. Idempotent;
# build/ is git-ignored.
#
#   scripts/install-corpus-git.sh        # prints the folder holding the HTML pages
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
DEST="$ROOT/build/corpus-git"
PACKAGE=git-doc
HTML="usr/share/doc/git-doc"
PROBE="git-rebase.html"

say() { echo "install-corpus-git: $*"; }
give_up() { echo "install-corpus-git: $*" >&2; exit 1; }

if [ -f "$DEST/$HTML/$PROBE" ]; then
    say "the Git manual is already in $DEST/$HTML"
    exit 0
fi
command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 \
    || give_up "apt-get and dpkg-deb are needed to fetch $PACKAGE (Debian/Ubuntu only)"

mkdir -p "$ROOT/build"
WORK=$(mktemp -d "$ROOT/build/corpus-git-download.XXXXXX")
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
[ -f "$WORK/tree/$HTML/$PROBE" ] || give_up "the downloaded $PACKAGE has no $HTML/$PROBE"
rm -rf "$DEST"
mv "$WORK/tree" "$DEST"
say "the Git manual ($(cd "$WORK" && ls "$PACKAGE"_*.deb)) is in $DEST/$HTML"
