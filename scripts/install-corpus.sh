#!/usr/bin/env bash
# Fetch the real documentation corpus used by the `corpus` tests and the benchmarks: the Python 3.11
# HTML manual from Debian's python3.11-doc package, unpacked into build/corpus/ of this project.
#
# The package is downloaded (`apt-get download`) and unpacked (`dpkg -x`), never installed: installing
# it pulled in upgrades of the system's own python3.11 packages. No root is needed, except for an
# `apt-get update` when apt does not know the package yet. tests/support/corpus.py says where the manual is
# looked for ($WEBQA_CORPUS_DIR, then build/corpus/…, then the system's copy). Idempotent; the pages
# are never committed (build/ is git-ignored).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
DEST="$ROOT/build/corpus"
# The manual's HTML page depends on these two for _static/jquery.js and _static/underscore.js
# (relative symlinks into usr/share/javascript), so they are unpacked beside it.
PACKAGES=(python3.11-doc libjs-jquery libjs-underscore)

say() { echo "install-corpus: $*"; }
give_up() { echo "install-corpus: $*; the corpus tests will be skipped" >&2; exit 1; }

corpus_dir() { python3 -m tests.support.corpus; }  # the one place that knows where the manual is read from

command -v python3 >/dev/null 2>&1 || give_up "python3 is not on PATH"
DIR=$(corpus_dir)
if [ -f "$DIR/library/json.html" ]; then
    say "the Python 3.11 manual is already in $DIR"
    exit 0
fi
if [ -n "${WEBQA_CORPUS_DIR:-}" ]; then
    give_up "WEBQA_CORPUS_DIR=$WEBQA_CORPUS_DIR has no library/json.html; unset it to unpack the manual into $DEST"
fi
command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 \
    || give_up "apt-get and dpkg-deb are needed to fetch python3.11-doc (Debian/Ubuntu only)"

mkdir -p "$ROOT/build"
WORK=$(mktemp -d "$ROOT/build/corpus-download.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
LOG="$WORK/apt.log"

download() { (cd "$WORK" && apt-get download -q "${PACKAGES[@]}") >"$LOG" 2>&1; }
first_error() { grep -m1 '^E:' "$LOG" || tail -n1 "$LOG"; }  # one line of apt's complaint, not its whole log

if ! download; then
    # Usually the package lists are missing or stale (a fresh container); refreshing them needs root.
    if [ "$(id -u)" -eq 0 ]; then
        say "apt-get download failed; refreshing the package lists (apt-get update) and retrying"
        apt-get update -qq >>"$LOG" 2>&1 || true
        download || give_up "apt-get download ${PACKAGES[*]} failed after apt-get update: $(first_error)"
    else
        give_up "apt-get download ${PACKAGES[*]} failed: $(first_error); if apt does not know them yet, run 'sudo apt-get update' once and rerun $0"
    fi
fi

# Unpack into a fresh folder and swap it in, so an interrupted run never leaves half a manual.
mkdir "$WORK/tree"
for deb in "$WORK"/*.deb; do
    dpkg-deb -x "$deb" "$WORK/tree"
done
[ -f "$WORK/tree/usr/share/doc/python3.11/html/library/json.html" ] \
    || give_up "the downloaded python3.11-doc has no usr/share/doc/python3.11/html/library/json.html"
rm -rf "$DEST"
mv "$WORK/tree" "$DEST"

DIR=$(corpus_dir)
[ -f "$DIR/library/json.html" ] || give_up "unpacked into $DEST, but tests/support/corpus.py looks in $DIR"
say "the Python 3.11 manual ($(cd "$WORK" && ls python3.11-doc_*.deb)) is in $DIR"
