#!/usr/bin/env bash
# Create .venv and install webqa into it (editable, with the test tools). Idempotent: a second
# run only checks, unless pyproject.toml changed or SETUP_FORCE=1.
#
#   scripts/setup.sh                     # uses python3 from PATH (3.11+ required)
#   PYTHON=python3.12 scripts/setup.sh   # or another interpreter
#
# On Debian/Ubuntu, `python3 -m venv` needs the python3-venv package; as root with apt-get this
# script installs it, otherwise it prints the command to run.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
PYTHON=${PYTHON:-python3}
VENV="$ROOT/.venv"
STAMP="$VENV/.webqa-setup"

step() { echo "setup: $*"; }
die() { echo "setup: ERROR: $*" >&2; exit 1; }

# The version check runs the interpreter itself: `python3 --version` output varies across builds.
version_ok() {  # $1 = interpreter; true when it is Python 3.11 or newer
    "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null
}

# 1. A suitable interpreter.
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found; install Python 3.11 or newer (Debian/Ubuntu: apt-get install -y python3 python3-venv), or set PYTHON=/path/to/python3.11+"
PY_VERSION=$("$PYTHON" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
if ! version_ok "$PYTHON"; then
    die "webqa needs Python 3.11 or newer; $PYTHON is $PY_VERSION. Install a newer Python (e.g. apt-get install -y python3.11 python3.11-venv) and rerun with PYTHON=python3.11 $0"
fi
step "using $(command -v "$PYTHON") (Python $PY_VERSION)"

# 2. The virtual environment.
if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
    # What a failed `python3 -m venv` (ensurepip missing) leaves behind: a venv without pip.
    step "$VENV exists but has no working pip (an earlier venv creation failed?); recreating it"
    rm -rf "$VENV"
fi
if [ -x "$VENV/bin/python" ]; then
    if ! version_ok "$VENV/bin/python"; then
        die "$VENV uses Python $("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])'); webqa needs 3.11+. Remove it (rm -rf .venv) and rerun $0"
    fi
    step "virtual environment $VENV already exists"
else
    if ! "$PYTHON" -c 'import ensurepip' >/dev/null 2>&1; then
        # Debian and Ubuntu ship ensurepip separately, in python3-venv (python3.X-venv).
        PKG="python3-venv"
        PKG_VERSIONED="python$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv"
        if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
            step "ensurepip is missing; installing $PKG with apt-get"
            export DEBIAN_FRONTEND=noninteractive
            if ! apt-get install -y --no-install-recommends "$PKG" "$PKG_VERSIONED" >/dev/null 2>&1 \
                && ! apt-get install -y --no-install-recommends "$PKG" >/dev/null 2>&1; then
                step "apt-get install failed; refreshing the package lists (apt-get update) and retrying"
                apt-get update -qq
                apt-get install -y --no-install-recommends "$PKG" "$PKG_VERSIONED" >/dev/null 2>&1 \
                    || apt-get install -y --no-install-recommends "$PKG" >/dev/null
            fi
            "$PYTHON" -c 'import ensurepip' >/dev/null 2>&1 \
                || die "ensurepip is still missing after installing $PKG; try: apt-get install -y $PKG_VERSIONED"
        else
            die "$PYTHON cannot create virtual environments: ensurepip is missing. On Debian/Ubuntu run: sudo apt-get install -y $PKG   (then rerun $0)"
        fi
    fi
    step "creating virtual environment $VENV"
    if ! "$PYTHON" -m venv "$VENV"; then
        rm -rf "$VENV"
        die "'$PYTHON -m venv $VENV' failed (see above). On Debian/Ubuntu: sudo apt-get install -y python3-venv"
    fi
fi

# 3. Packages. Skipped when this exact pyproject.toml was installed before and webqa still imports.
WANT=$("$VENV/bin/python" -c 'import hashlib, sys; print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest())')
if [ "${SETUP_FORCE:-0}" != "1" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] \
    && [ -x "$VENV/bin/webqa" ] && "$VENV/bin/python" -c 'import jobs.cli, duckdb, scrapy, trafilatura' >/dev/null 2>&1; then
    step "webqa is installed and pyproject.toml is unchanged; nothing to do (SETUP_FORCE=1 reinstalls)"
else
    step "upgrading pip (pip install -U pip)"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -U pip
    step "installing webqa and its test tools (pip install -e \".[test]\"); the first time takes a minute"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[test]"
    echo "$WANT" > "$STAMP"
fi

"$VENV/bin/webqa" --help >/dev/null || die "$VENV/bin/webqa does not start (see above); rerun with SETUP_FORCE=1"
step "done: $VENV/bin/webqa is ready"
