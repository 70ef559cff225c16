#!/usr/bin/env bash
# Fetch the PDF corpus of benchmarks/bench_pdf.py: four Debian manuals that ship as both PDF and HTML
# (debian-faq, maint-guide, developers-reference, debian-reference-en), so the HTML is the truth the PDF
# text is measured against. Unpacked into build/corpus-pdf/ with `apt-get download` + `dpkg-deb -x`,
# never installed, no root needed (except an `apt-get update` when apt does not know a package yet).
# Idempotent; build/ is git-ignored.
#
#   scripts/install-corpus-pdf.sh        # prints the folder holding the unpacked packages
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
DEST="$ROOT/build/corpus-pdf"
PACKAGES="debian-faq maint-guide developers-reference debian-reference-en"

say() { echo "install-corpus-pdf: $*"; }
give_up() { echo "install-corpus-pdf: $*" >&2; exit 1; }

if [ -f "$DEST/.complete" ]; then
    say "the PDF corpus is already in $DEST"
    exit 0
fi
command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 \
    || give_up "apt-get and dpkg-deb are needed (Debian/Ubuntu only)"

mkdir -p "$ROOT/build"
WORK=$(mktemp -d "$ROOT/build/corpus-pdf-download.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
LOG="$WORK/apt.log"

download() { (cd "$WORK" && apt-get download -q $PACKAGES) >"$LOG" 2>&1; }
if ! download; then
    if [ "$(id -u)" -eq 0 ]; then
        say "apt-get download failed; refreshing the package lists (apt-get update) and retrying"
        apt-get update -qq >>"$LOG" 2>&1 || true
        download || give_up "apt-get download failed after apt-get update: $(grep -m1 '^E:' "$LOG" || tail -n1 "$LOG")"
    else
        give_up "apt-get download failed; run 'sudo apt-get update' once and rerun $0"
    fi
fi
mkdir "$WORK/tree"
for deb in "$WORK"/*.deb; do dpkg-deb -x "$deb" "$WORK/tree"; done
# debian-faq ships its PDF gzipped.
find "$WORK/tree" -name '*.pdf.gz' -type f -exec gunzip -f {} \;
touch "$WORK/tree/.complete"
rm -rf "$DEST"
mv "$WORK/tree" "$DEST"
say "unpacked into $DEST"
