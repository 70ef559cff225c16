"""What a run is given: its options (the command line's) and where its messages go."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


class Notify:
    """Where the runner's messages go: ``info`` is progress, ``important`` is shown even under --quiet."""

    def __init__(self, info: Callable[[str], None] = lambda _m: None,
                 important: Callable[[str], None] | None = None) -> None:
        self.info = info
        self.important = important or info

    def __call__(self, message: str) -> None:
        self.info(message)


@dataclass
class RunOptions:
    db: Path
    crawl: bool = True
    out_dir: Path | None = None
    dry_run: bool = False
    refresh: bool = False
    wait_seconds: float = 0.0
    answerer: str | None = None  # overrides the job's
    verbose: bool = False
    progress: bool = False
    resume: bool = False  # continue the job's last run when it was killed or interrupted
    fail_on_change: bool = False  # exit 5 when an answer changed, is new or is no longer answered
    fail_on_reworded: bool = False  # and when an answer was reworded (same quotes and verdict, other words)
    allow_private_networks: bool = False  # --allow-private-networks; the job key does the same
