"""Where the real documentation corpus (the Python 3.11 HTML manual from Debian's python3.11-doc) lives.

The one place tests, benchmarks and scripts/install-corpus.sh ask. In order:

1. ``$WEBQA_CORPUS_DIR``, when set (the folder holding ``library/json.html``);
2. ``build/corpus/usr/share/doc/python3.11/html`` in this project, where scripts/install-corpus.sh
   unpacks the package (``apt-get download`` + ``dpkg -x``: the system's Python is never touched);
3. ``/usr/share/doc/python3.11/html``, when the package happens to be installed system-wide.

``python -m tests.support.corpus`` prints the folder chosen (stdlib only, so it runs without the venv).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Where scripts/install-corpus.sh unpacks the .deb (git-ignored with the rest of build/).
PROJECT_ROOT = REPO / "build" / "corpus"
PROJECT_DIR = PROJECT_ROOT / "usr" / "share" / "doc" / "python3.11" / "html"
SYSTEM_DIR = Path("/usr/share/doc/python3.11/html")
#: A page every copy of the manual has; its presence means the corpus is usable.
PROBE = Path("library") / "json.html"


def has_manual(folder: Path) -> bool:
    return (folder / PROBE).is_file()


def corpus_dir() -> Path:
    """The manual's HTML folder (the project's, even when absent, unless only the system has one)."""
    configured = os.environ.get("WEBQA_CORPUS_DIR")
    if configured:
        return Path(configured).expanduser()
    if not has_manual(PROJECT_DIR) and has_manual(SYSTEM_DIR):
        return SYSTEM_DIR
    return PROJECT_DIR


CORPUS_DIR = corpus_dir()
#: Why a corpus test is skipped, with the fix.
MISSING = f"Python 3.11 HTML manual not found in {CORPUS_DIR}; run scripts/install-corpus.sh (or set WEBQA_CORPUS_DIR)"


if __name__ == "__main__":
    print(CORPUS_DIR)
