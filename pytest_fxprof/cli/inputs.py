"""What every ``fxprof`` command shares: its exit codes, its one error type, and the files it reads and writes.

Owns the reading of a baseline file or a JSON report (told apart by their version keys; anything else is
refused with the fix), the lookup of a test's baseline by its id, and CSV output written whole or not at all.
Every error is one line, ``fxprof: error: <file>: <problem>. <fix>``, and exit code 2.

Must not import torch or pytest. Must not import pandas at module level.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pytest_fxprof.records.measurement import BaselineEntry, NodeInfo
from pytest_fxprof.records.verdicts import Status
from pytest_fxprof.settings import Settings
from pytest_fxprof.store.baseline import BaselineError, BaselineFile, BaselineStore, entry_from_json, parse
from pytest_fxprof.store.files import TooLargeError, loads, read_text, write_atomic
from pytest_fxprof.views.report import REPORT_MAX_BYTES, REPORT_VERSION, ReportJSON

PROG = "fxprof"
DEFAULT_BASELINE_DIR = "baselines"
EXIT_OK = 0
EXIT_FOUND = 1
EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE, what a shell reports for a command whose reader closed the pipe."""


class CliError(Exception):
    """An input the command cannot use; the message names it, the problem and the fix. ``details`` (another
    program's output) are printed before it."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


def error(where: object, problem: str, fix: str) -> CliError:
    return CliError(f"{where}: {problem}. {fix}")


def refuse_listed(directory: Path, refused: Sequence[tuple[Path, str]], heading: str, problem: str, fix: str) -> None:
    """List the files a command left alone, each with why, and end it with an error naming ``problem`` and ``fix``
    (exit 2); nothing where none was."""
    if not refused:
        return
    print(f"{len(refused)} {heading}:")
    print("\n".join(f"  {path}: {why}" for path, why in refused))
    raise error(directory, f"{len(refused)} file(s) in it {problem} (listed above)", fix)


def count_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


@dataclass(frozen=True)
class Report:
    """A JSON report of ``--fxprof-report``: its measured profiles as entries, by (test id, key)."""

    path: Path
    mode: str
    entries: dict[tuple[str, str], BaselineEntry]
    skipped: tuple[str, ...] = ()
    """Profiles that hold no measurement (a plain run's single cold pass)."""


def _read_text(path: Path) -> str:
    try:
        return read_text(path, REPORT_MAX_BYTES)
    except TooLargeError as exc:
        raise error(path, f"too large for a baseline or a report ({exc})", "Pass a file pytest-fxprof wrote") from None
    except FileNotFoundError:
        raise error(path, "no such file", f"Check the path (relative to {Path.cwd()})") from None
    except IsADirectoryError:
        raise error(path, "is a directory", "Pass a baseline file (one .json file per test) or a report") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(path, f"cannot be read ({exc})", "Check the file's permissions and encoding") from None


def load(path: Path) -> BaselineFile | Report:
    """A baseline file or a report, told apart by their version keys; ``CliError`` for anything else."""
    text = _read_text(path)
    try:
        raw = loads(text)
    except ValueError:
        raw = None  # not JSON this package writes: the baseline parser words what is wrong
    try:
        if raw is None or (isinstance(raw, dict) and "schema_version" in raw):
            return parse(text, path)
    except BaselineError as exc:
        raise CliError(str(exc)) from None
    if isinstance(raw, dict) and "report_version" in raw:
        return _report(raw, path)
    raise error(
        path,
        "neither a pytest-fxprof baseline (it has no schema_version) nor a report (no report_version)",
        "Pass a file from the baseline directory or a report written by `pytest --fxprof --fxprof-report PATH`",
    )


REPORT_AGAIN = "run the shard again to write it anew"
"""The fix for a report that cannot be used: it is written again by running its tests, never recorded."""

_PARTIAL_TOKEN = re.compile(r"(?:t(?:r(?:ue?)?)?|f(?:a(?:l(?:se?)?)?)?|n(?:u(?:ll?)?)?|-?[0-9.eE+-]*)")
"""What the end of a JSON text cut inside a literal or a number holds."""


def read_report(path: Path) -> tuple[Report, ReportJSON]:
    """A JSON report of ``--fxprof-report`` and its data, for a command that reads reports only: a file that is not
    whole JSON gets advice for a report (written by a run, not recorded as a baseline is)."""
    text = _read_text(path)
    try:
        raw = loads(text)
    except json.JSONDecodeError as exc:
        raise _not_json(path, text, exc) from None
    except ValueError as exc:
        raise error(
            path, f"the report is malformed: {exc}", f"It is not as pytest-fxprof writes it: {REPORT_AGAIN}"
        ) from None
    if isinstance(raw, dict) and "schema_version" in raw:
        raise error(path, "is a baseline file, not a report", "Pass the reports written by --fxprof-report")
    if not isinstance(raw, dict) or "report_version" not in raw:
        raise error(
            path,
            "is not a pytest-fxprof report (it has no report_version)",
            "Pass the JSON reports written by `pytest --fxprof-report PATH`",
        )
    return _report(raw, path), cast("ReportJSON", raw)


def _not_json(path: Path, text: str, exc: json.JSONDecodeError) -> CliError:
    """Why ``text`` is no report: empty, cut short (its JSON ends early: an interrupted write or copy), or not JSON."""
    if not text.strip():
        return error(path, "the report is empty", f"Was the run that wrote it interrupted? Then {REPORT_AGAIN}")
    rest = text[exc.pos :].strip()
    if exc.msg.startswith("Unterminated string") or _PARTIAL_TOKEN.fullmatch(rest):
        return error(
            path,
            f"the report ends before its JSON does (line {exc.lineno}: {exc.msg}): it was cut short",
            f"Was the run that wrote it interrupted, or its copy (a CI artifact) incomplete? Then {REPORT_AGAIN}",
        )
    return error(
        path,
        f"the report is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})",
        f"Pass the JSON report of --fxprof-report (not its HTML or Markdown view), or {REPORT_AGAIN}",
    )


def _report(raw: Mapping[str, Any], path: Path) -> Report:
    rewrite = "Write it again with `pytest --fxprof --fxprof-report PATH`"
    version = raw["report_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise error(path, f"report_version {version!r} is not a version pytest-fxprof ever wrote", rewrite)
    if version > REPORT_VERSION:
        raise error(
            path,
            f"it has report version {version}, newer than the {REPORT_VERSION} this pytest-fxprof reads",
            "Upgrade pytest-fxprof to the version that wrote it",
        )
    profiles = raw.get("profiles")
    if not isinstance(profiles, list):
        raise error(path, "the report's 'profiles' should be a list", rewrite)
    entries: dict[tuple[str, str], BaselineEntry] = {}
    skipped = []
    for i, profile in enumerate(profiles):
        where = f"profiles[{i}]"
        try:
            ident, entry = _profile_entry(profile, where)
        except ValueError as exc:
            raise error(path, f"the report is malformed: {exc}", rewrite) from None
        if entry is None:
            skipped.append(f"{ident[0]} [{ident[1]}]")
        elif ident in entries:
            raise error(path, f"{where}: {ident[0]} [{ident[1]}] appears twice", rewrite)
        else:
            entries[ident] = entry
    return Report(path, str(raw.get("mode", "")), entries, tuple(skipped))


ENTRY_FIELDS = ("capture", "environment", "protocol", "nodes", "runs")


def _profile_entry(profile: object, where: str) -> tuple[tuple[str, str], BaselineEntry | None]:
    """A report's profile as the entry a baseline would hold (None if it was not measured)."""
    if not isinstance(profile, dict):
        raise ValueError(f"{where} should be an object")
    for name in ("test_id", "key", "status"):
        if not isinstance(profile.get(name), str):
            raise ValueError(f"{where}.{name} should be a string")
    ident = (profile["test_id"], profile["key"])
    if profile["status"] == Status.UNMEASURED:
        return ident, None
    # the tolerances an entry records are for reference only: the diff judges with its own policy
    tolerances = Settings().tolerances()
    raw = {name: profile[name] for name in ENTRY_FIELDS if name in profile}
    if isinstance(profile.get("setup"), dict):  # reports before setups were recorded have none
        raw["setup"] = profile["setup"]
    raw["tolerances"] = {"node": tolerances.node, "total": tolerances.total}
    return ident, entry_from_json(raw, where)


def _load_baseline(path: Path) -> BaselineFile:
    loaded = load(path)
    if isinstance(loaded, Report):
        raise error(
            path,
            "it is a report of a pytest run, not a baseline",
            "Pass a baseline file or a test id (or compare the report with `fxprof diff BASELINE REPORT`)",
        )
    return loaded


def resolve_baseline(spec: str, baseline_dir: Path) -> tuple[Path, BaselineFile]:
    """A baseline given as a file path, or as the id of a test recorded in ``baseline_dir``."""
    path = Path(spec)
    if "::" not in spec or path.exists():  # a test id always has one: a pytest node id
        return path, _load_baseline(path)
    store = BaselineStore(baseline_dir)
    try:
        baseline = store.load(spec)
    except BaselineError as exc:
        raise CliError(str(exc)) from None
    if baseline is None:
        missing = "" if baseline_dir.is_dir() else " (the directory does not exist)"
        raise error(
            spec,
            f"no such file, nor a baseline of a test with this id in {baseline_dir}{missing}",
            "Pass a baseline file's path, or a test id with --baseline-dir set to where its baseline lives",
        )
    return store.path_for(spec), baseline


NAMING = ("test_id", "key", "node_key", "node", "direction", "op", "target", "module", "source")
"""The first columns of a CSV file of nodes: what names each node."""


def node_row(test_id: str, key: str, info: NodeInfo, **values: Any) -> dict[str, Any]:
    """A CSV row of a node: the columns that name it (``NAMING``), then ``values``."""
    named = (test_id, key, info.key, info.name, info.direction, info.op, info.target, info.module, info.source)
    return {**dict(zip(NAMING, named, strict=True)), **values}


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]], values: Sequence[str]) -> None:
    """The rows of nodes (``node_row``) as a CSV file, the ``NAMING`` columns then ``values``, written whole or not
    at all."""
    import pandas as pd

    text = pd.DataFrame(list(rows), columns=[*NAMING, *values]).to_csv(index=False)
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise error(
            path, f"cannot be written ({exc.strerror or exc})", "Pass a --csv path in a writable directory"
        ) from None
