"""The ``fxprof`` command: read baselines and reports outside pytest.

One module per subcommand (``show``, ``diff``, ``prune``, ``merge``, ``migrate``), what they share in ``inputs``.
This module owns the command line that dispatches to them and its exit codes (0: nothing to report, 1: a regression
found, 2: a usage error or an input that cannot be read, 141: the reader closed the pipe). The commands decide
nothing themselves and write files only through ``store.files.write_atomic``.

Must not import torch or pytest. Must not import pandas at module level.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from pytest_fxprof.cli import diff, merge, migrate, prune, show
from pytest_fxprof.cli.inputs import EXIT_BROKEN_PIPE, EXIT_USAGE, PROG, CliError


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROG,
        description="Read pytest-fxprof baselines and reports: show a baseline, diff two profiles as the gate "
        "judges them, prune the baselines of deleted tests (or their history), merge the reports of a run's shards, "
        "migrate older baseline files to the current schema.",
        epilog="Exit codes: 0 nothing to report, 1 a regression found (diff), 2 a usage error or unreadable input.",
    )
    sub = top.add_subparsers(title="commands", metavar="COMMAND")
    for command in (show, diff, prune, merge, migrate):
        command.add_parser(sub)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``fxprof`` command; return its exit code."""
    top = parser()
    try:
        args = top.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse has already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if not hasattr(args, "run"):
        top.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code: int = args.run(args)
    except CliError as exc:
        if exc.details:
            print(exc.details, file=sys.stderr)
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # the reader (head, less) went away: the shell's code for SIGPIPE, never "found"
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    return code


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


__all__ = ["main", "parser"]
