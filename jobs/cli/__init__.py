"""The `webqa` command line: one module per command, each with its options beside its handler.

A command module names itself (``NAME``, ``HELP``, ``DESCRIPTION``), adds its arguments (``add_arguments``)
and handles them (``handle``); :mod:`jobs.cli.parser` loops over the modules, :mod:`jobs.cli.app` runs the
chosen handler and turns the library's errors into `Error: …` lines and exit codes. Business rules live in
the library; these modules only wire options, print, and pick exit codes.
"""

from jobs.cli.app import main
from jobs.cli.parser import build_parser

__all__ = ["build_parser", "main"]
