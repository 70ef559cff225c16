"""`webqa schema`: print the job file's JSON Schema."""

from __future__ import annotations

import argparse
import json

from jobs.cli.console import Console
from jobs.errors import ExitCode

NAME = "schema"
HELP = "print the job file's JSON Schema (for editor completion and checks)"
DESCRIPTION = ("Print the JSON Schema of job files. Point your editor's YAML support at it, e.g. "
               "`# yaml-language-server: $schema=configs/job.schema.json`.")


def add_arguments(schema: argparse.ArgumentParser) -> None:
    """No options of its own."""


def handle(args: argparse.Namespace, console: Console) -> int:
    from jobs.config import job_json_schema

    print(json.dumps(job_json_schema(), indent=2, ensure_ascii=False))
    return ExitCode.OK
