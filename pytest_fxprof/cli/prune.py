"""``fxprof prune``: remove the baselines of tests that no longer exist, or trim their history.

Owns the collection it relies on (``pytest --collect-only`` in a subprocess, which loads this module as a plugin for
its one hook, so that the rootdir is known) and the refusals that keep it from removing a live baseline: a failed,
empty or deselecting collection, or a directory none of whose baselines belongs to a collected test. Applies the
plugin's rule for unused baselines (``session.why_unused``); ``--history N`` trims instead (``store.history.trim``).

Must not import torch. Must not import pytest at module level.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_fxprof.cli.inputs import DEFAULT_BASELINE_DIR, EXIT_OK, PROG, CliError, count_arg, error, refuse_listed
from pytest_fxprof.session.run import why_unused
from pytest_fxprof.store.baseline import SUFFIX, BaselineError, BaselineFile, read_baseline, render
from pytest_fxprof.store.files import TEMPORARY, stale_temporaries, write_atomic
from pytest_fxprof.store.history import trim

if TYPE_CHECKING:
    import pytest


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "prune",
        help="Remove the baselines of tests that no longer exist",
        description="Collect the tests with pytest (in this directory, with PYTEST_ARGS after --) and list the "
        "baselines whose test was not collected although its test file collected other tests, or whose test "
        "file is gone. Removes them only with --yes. Refuses if the collection fails, collects nothing or "
        "deselects tests, or if none of the directory's baselines belongs to a collected test (another project's "
        "directory); never removes an unreadable baseline. With --history N, it removes no baseline and collects "
        "nothing: it trims every baseline's history to N recordings per entry in all (the latest and the N-1 "
        "newest before it), and rewrites the files only with --yes.",
    )
    p.add_argument(
        "--baseline-dir",
        default=DEFAULT_BASELINE_DIR,
        metavar="DIR",
        help="The baseline directory (default: baselines)",
    )
    p.add_argument("--yes", action="store_true", help="Remove what was found (without it, only list it)")
    p.add_argument(
        "--history",
        type=count_arg,
        metavar="N",
        help="Instead of removing baselines, keep at most N recordings per entry (the latest and the N-1 newest "
        "earlier ones; 1 drops every entry's history); collects no tests",
    )
    p.add_argument("pytest_args", nargs="*", metavar="PYTEST_ARGS", help="Arguments for pytest's collection, after --")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    directory = Path(args.baseline_dir)
    if not directory.is_dir():
        raise error(directory, "no such directory", "Pass the baseline directory with --baseline-dir")
    if args.history is not None:
        return trim_histories(args, directory)
    if not any(directory.glob(f"*{SUFFIX}")) and not any(directory.glob(".*.tmp")):
        print(f"no baselines in {directory}; nothing to prune")
        return EXIT_OK
    found = find_prunable(directory, collect(args.pytest_args))
    removable = [path for path, _ in found.unused] + found.leftovers
    print(f"{found.kept} baseline(s) in {directory} belong to tests that exist")
    if found.unused:
        print(f"{len(found.unused)} baseline(s) of tests that no longer exist:")
        print("\n".join(f"  {path}  ({why})" for path, why in found.unused))
    if found.leftovers:
        print(f"{len(found.leftovers)} temporary file(s) of interrupted writes:")
        print("\n".join(f"  {path}" for path in found.leftovers))
    if found.unreadable:
        print(f"{len(found.unreadable)} unreadable (fix or delete by hand; never removed here):")
        print("\n".join(f"  {path}: {problem}" for path, problem in found.unreadable))
    if not removable:
        print("nothing to prune")
    elif not args.yes:
        print(f"nothing was removed; to remove these {len(removable)} file(s): {_hint(args)}")
    else:
        _remove(removable)
    if found.unreadable:
        raise error(
            directory,
            f"{len(found.unreadable)} file(s) in it cannot be read as baselines (listed above)",
            "Fix them, or delete them by hand: prune never removes a file it cannot read",
        )
    return EXIT_OK


def trim_histories(args: argparse.Namespace, directory: Path) -> int:
    """``prune --history N``: list every entry holding more than N recordings, and trim them with ``--yes``."""
    keep: int = args.history
    if args.pytest_args:
        raise CliError(
            f"--history trims the baselines' histories without collecting tests, so it takes no pytest arguments "
            f"(got {shlex.join(args.pytest_args)}); run it without them, and fxprof prune without --history to "
            "remove the baselines of deleted tests"
        )
    trimmed: list[tuple[Path, BaselineFile, list[str]]] = []
    unreadable: list[tuple[Path, str]] = []
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        try:
            baseline = read_baseline(path)
        except BaselineError as exc:
            unreadable.append((path, exc.problem))
            continue
        except OSError as exc:
            unreadable.append((path, f"cannot be read ({exc})"))
            continue
        lines, entries = [], {}
        for key, entry in baseline.entries.items():
            entries[key] = kept = trim(entry, keep)
            dropped = entry.recordings[len(kept.recordings) :]
            if dropped:
                dates = ", ".join(r.date or "undated" for r in dropped)
                lines.append(
                    f"{baseline.test_id} [{key}]: {len(entry.recordings)} -> {len(kept.recordings)} recording(s), "
                    f"dropping {dates}"
                )
        if lines:
            trimmed.append((path, BaselineFile(baseline.test_id, entries), lines))
    entries_trimmed = sum(len(lines) for _, _, lines in trimmed)
    if not trimmed:
        print(f"no baseline in {directory} holds more than {keep} recording(s) per entry; nothing to trim")
    else:
        print(f"{_entries(entries_trimmed)} in {len(trimmed)} file(s) hold more than {keep} recording(s):")
        for path, _, lines in trimmed:
            print(f"  {path}")
            print("\n".join(f"    {line}" for line in lines))
        if not args.yes:
            print(f"nothing was written; to trim these {len(trimmed)} file(s): {_hint(args, '--history', str(keep))}")
        else:
            for path, baseline, _ in trimmed:
                write_atomic(path, render(baseline))
            print(f"trimmed {_entries(entries_trimmed)} in {len(trimmed)} file(s)")
    refuse_listed(
        directory,
        unreadable,
        "unreadable (fix or delete by hand; never rewritten here)",
        "cannot be read as baselines",
        "Fix them, or delete them by hand: prune never rewrites a file it cannot read",
    )
    return EXIT_OK


def _entries(count: int) -> str:
    return f"{count} entry" if count == 1 else f"{count} entries"


OUTPUT_TAIL = 40
"""Lines of pytest's output shown when the collection that ``prune`` relies on failed."""
ROOTDIR_LINE = "fxprof rootdir: "
"""What this module's collection hook prints, so that ``prune`` knows what node ids are relative to."""
COLLECT_ARGS = ("--collect-only", "-q", "-p", "no:cacheprovider", "-p", "pytest_fxprof.cli.prune")
COLLECTED = re.compile(r"^(?:(?P<selected>\d+)/)?(?P<count>\d+) tests? collected|^no tests collected")
ERRORS = re.compile(r"\b\d+ errors?\b")
PYTEST_NO_TESTS = 5


def pytest_report_collectionfinish(config: pytest.Config) -> str:
    """In the collection that ``prune`` starts: the rootdir, which node ids are relative to."""
    return f"{ROOTDIR_LINE}{config.rootpath}"


@dataclass(frozen=True)
class Collection:
    """The test ids pytest collected and the directory they are relative to."""

    ids: frozenset[str]
    rootdir: Path

    @property
    def files(self) -> frozenset[str]:
        return frozenset(test_id.partition("::")[0] for test_id in self.ids)


def _refuse(why: str, output: str = "") -> CliError:
    lines = [line for line in output.rstrip().splitlines() if not line.startswith(ROOTDIR_LINE)]
    tail = "\n".join(lines[-OUTPUT_TAIL:])
    return CliError(f"{why}; no baseline was removed", details=tail)


def collect(pytest_args: Sequence[str]) -> Collection:
    """Collect the tests as pytest would here; refuse anything short of a complete, clean collection."""
    if any("::" in arg for arg in pytest_args):
        raise _refuse("pytest arguments select single tests (a node id with '::'): the other tests would look deleted")
    cmd = [sys.executable, "-m", "pytest", *COLLECT_ARGS, *pytest_args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    output = done.stdout + done.stderr
    lines = done.stdout.splitlines()
    summary = next((line for line in reversed(lines) if line.strip()), "")
    if done.returncode not in (0, PYTEST_NO_TESTS) or ERRORS.search(summary):
        raise _refuse(
            f"the collection failed (pytest exit code {done.returncode}): a test file that did not collect would "
            "look deleted. Fix the collection errors (or pass the arguments that collect your tests after --)",
            output,
        )
    if "deselected" in summary:
        raise _refuse("the collection deselected tests (-k, -m, --deselect): every test must be collected", output)
    rootdir = next((Path(line[len(ROOTDIR_LINE) :]) for line in lines if line.startswith(ROOTDIR_LINE)), None)
    ids = _collected_ids(lines)
    match = COLLECTED.search(summary)
    expected = 0 if match is None or match["count"] is None else int(match["selected"] or match["count"])
    if rootdir is None or match is None or len(ids) != expected:
        raise _refuse(
            "could not read the collected test ids from pytest's output (do not pass options that change it, "
            "such as -v or -p no:terminal)",
            output,
        )
    if not ids:
        raise _refuse(
            "pytest collected no test here, so every baseline would look unused: run fxprof prune from the "
            "project's root, or pass the paths of its tests after --",
            output,
        )
    return Collection(frozenset(ids), rootdir)


def _collected_ids(lines: Sequence[str]) -> list[str]:
    """The node ids ``--collect-only -q`` prints, one a line, up to the blank line before the summary."""
    ids = []
    for line in lines:
        if line.startswith(ROOTDIR_LINE):
            continue
        if not line.strip():
            break
        if "::" in line and not line.startswith(" "):
            ids.append(line.strip())
    return ids


@dataclass
class Prunable:
    """What ``prune`` found in the baseline directory."""

    unused: list[tuple[Path, str]] = field(default_factory=list)
    """(file, why) for each baseline whose test no longer exists."""
    unreadable: list[tuple[Path, str]] = field(default_factory=list)
    leftovers: list[Path] = field(default_factory=list)
    """Temporary files of interrupted writes."""
    kept: int = 0


def find_prunable(directory: Path, collection: Collection) -> Prunable:
    """The plugin's rule: a test not collected whose file is gone, or whose file collected other tests."""
    out = Prunable(leftovers=leftovers(directory))
    files = collection.files
    tests: list[str] = []
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        try:
            test_id = read_baseline(path).test_id
        except BaselineError as exc:
            out.unreadable.append((path, exc.problem))
            continue
        except OSError as exc:
            out.unreadable.append((path, f"cannot be read ({exc})"))
            continue
        tests.append(test_id)
        why = why_unused(test_id, collection.ids, files, collection.rootdir, roots=None)
        if why is None:
            out.kept += 1  # collected, or its file collected nothing (skipped at module level): it says nothing
        else:
            out.unused.append((path, f"{test_id}: {why}"))
    if out.unused and not any(test_id in collection.ids for test_id in tests):
        raise CliError(
            f"{directory}: none of its {len(tests)} baseline(s) belongs to a test collected here (rootdir "
            f"{collection.rootdir}), so it cannot tell a deleted test from a baseline directory of another "
            "project or rootdir; no baseline was removed. Run fxprof prune from the root of the project whose "
            "baselines these are, with --baseline-dir pointing at them"
        )
    return out


def leftovers(directory: Path) -> list[Path]:
    """Temporary files of interrupted writes: those of writers no longer running, and those named before
    writers put their process id in the name (nothing can be writing them still)."""
    unnamed = [p for p in directory.glob(".*.tmp") if TEMPORARY.match(p.name) is None]
    return sorted({*unnamed, *stale_temporaries(directory)})


def _hint(args: argparse.Namespace, *options: str) -> str:
    """The command that does what this run listed (with ``options``), quoted for a POSIX shell."""
    parts = [PROG, "prune", *options, "--yes"]
    if args.baseline_dir != DEFAULT_BASELINE_DIR:
        parts += ["--baseline-dir", args.baseline_dir]
    if args.pytest_args:
        parts += ["--", *args.pytest_args]
    return shlex.join(parts)


def _remove(paths: Sequence[Path]) -> None:
    failed = []
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            continue  # gone already
        except OSError as exc:
            failed.append(f"{path} ({exc.strerror or exc})")
    print(f"removed {len(paths) - len(failed)} file(s)")
    if failed:
        raise error(", ".join(failed), "could not be removed", "Check the directory's permissions")
