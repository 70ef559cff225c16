#!/usr/bin/env bash
# Fetch one Debian documentation package and unpack it into a folder of this project, for the dev corpora of
# the selection benchmarks (scripts/install-corpus-postgresql.sh and scripts/install-corpus-git.sh call it).
#
# `apt-get download` + `dpkg-deb -x`: never installed, no root needed (except an `apt-get update` when apt
# does not know the package yet). Unpacked into a fresh folder and swapped in, so an interrupted run never
# leaves half a manual. Idempotent; build/ is git-ignored.
#
#   scripts/install-deb-corpus.sh NAME PACKAGE DEST HTML PROBE
#     NAME     what the messages call the caller (install-corpus-git)
#     PACKAGE  the Debian package (git-doc)
#     DEST     the folder it is unpacked into (build/corpus-git)
#     HTML     the package's folder of HTML pages (usr/share/doc/git-doc)
#     PROBE    a page every copy has (git-rebase.html)
set -euo pipefail

[ "$#" -eq 5 ] || { echo "usage: $0 NAME PACKAGE DEST HTML PROBE" >&2; exit 2; }
NAME=$1 PACKAGE=$2 DEST=$3 HTML=$4 PROBE=$5

say() { echo "$NAME: $*"; }
give_up() { echo "$NAME: $*" >&2; exit 1; }

if [ -f "$DEST/$HTML/$PROBE" ]; then
    say "$PACKAGE is already in $DEST/$HTML"
    exit 0
fi
command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 \
    || give_up "apt-get and dpkg-deb are needed to fetch $PACKAGE (Debian/Ubuntu only)"

mkdir -p "$(dirname "$DEST")"
WORK=$(mktemp -d "$DEST-download.XXXXXX")
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

mkdir "$WORK/tree"
dpkg-deb -x "$WORK"/"$PACKAGE"_*.deb "$WORK/tree"
[ -f "$WORK/tree/$HTML/$PROBE" ] || give_up "the downloaded $PACKAGE has no $HTML/$PROBE"
rm -rf "$DEST"
mv "$WORK/tree" "$DEST"
say "$PACKAGE ($(cd "$WORK" && ls "$PACKAGE"_*.deb)) is in $DEST/$HTML"
