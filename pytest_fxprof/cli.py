"""The ``fxprof`` command: read baselines and reports outside pytest.

``fxprof show`` prints the per-node table of a baseline file, ``fxprof diff`` judges one file's profiles
against another's with the gate's own decision and policy, and ``fxprof prune`` removes the baselines of
tests that no longer exist. Owns the command line, its wording and its exit codes (0: nothing to report,
1: a regression found, 2: a usage error or an input that cannot be read); decides nothing itself (the
decision is ``decision.compare``) and writes files only through ``baseline.write_atomic``.

Must not import torch; pytest runs only in the subprocess that ``prune`` starts to collect the tests (it
loads this module as a plugin there, for one hook), and pandas only when a CSV file is written.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_fxprof.baseline import (
    SUFFIX,
    BaselineError,
    BaselineFile,
    BaselineStore,
    entry_from_json,
    parse,
    write_atomic,
)
from pytest_fxprof.decision import Comparison, NodeVerdict, Policy, Status, Verdict, compare
from pytest_fxprof.records import BaselineEntry, NodeInfo, iqr_int, median_int
from pytest_fxprof.render import (
    band_used,
    fmt_ns,
    grid,
    improvement_lines,
    notice_lines,
    regression_message,
    structural_lines,
    summary_line,
)
from pytest_fxprof.report import REPORT_VERSION
from pytest_fxprof.session import why_unused
from pytest_fxprof.settings import Settings, SettingsError, apply

if TYPE_CHECKING:
    import pytest

PROG = "fxprof"
EXIT_OK = 0
EXIT_FOUND = 1
EXIT_USAGE = 2

DEFAULT_BASELINE_DIR = "baselines"
SORTS = ("time", "graph")
OUTPUT_TAIL = 40
"""Lines of pytest's output shown when the collection that ``prune`` relies on failed."""

ROOTDIR_LINE = "fxprof rootdir: "
"""What this module's collection hook prints, so that ``prune`` knows what node ids are relative to."""
COLLECT_ARGS = ("--collect-only", "-q", "-p", "no:cacheprovider", "-p", "pytest_fxprof.cli")
COLLECTED = re.compile(r"^(?:(?P<selected>\d+)/)?(?P<count>\d+) tests? collected|^no tests collected")
ERRORS = re.compile(r"\b\d+ errors?\b")
PYTEST_NO_TESTS = 5

VERDICT_ORDER = {Verdict.SLOWER: 0, Verdict.NOISY: 2, Verdict.OK: 3, Verdict.FASTER: 4}
"""Worst first in the diff's node table; a slower node too small to fail alone ranks 1."""


class CliError(Exception):
    """An input the command cannot use; the message names it, the problem and the fix. ``details`` (another
    program's output) are printed before it."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE, what a shell reports for a command whose reader closed the pipe."""


def _error(where: object, problem: str, fix: str) -> CliError:
    return CliError(f"{where}: {problem}. {fix}")


# Reading baselines and reports --------------------------------------------------------------------


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
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _error(path, "no such file", f"Check the path (relative to {Path.cwd()})") from None
    except IsADirectoryError:
        raise _error(path, "is a directory", "Pass a baseline file (one .json file per test) or a report") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _error(path, f"cannot be read ({exc})", "Check the file's permissions and encoding") from None


def load(path: Path) -> BaselineFile | Report:
    """A baseline file or a report, told apart by their version keys; ``CliError`` for anything else."""
    text = _read_text(path)
    try:
        raw = json.loads(text)
    except ValueError:
        raw = None  # not JSON: the baseline parser words what is wrong (conflict markers, empty, truncated)
    try:
        if raw is None or (isinstance(raw, dict) and "schema_version" in raw):
            return parse(text, path)
    except BaselineError as exc:
        raise CliError(str(exc)) from None
    if isinstance(raw, dict) and "report_version" in raw:
        return _report(raw, path)
    raise _error(
        path,
        "neither a pytest-fxprof baseline (it has no schema_version) nor a report (no report_version)",
        "Pass a file from the baseline directory or a report written by `pytest --fxprof --fxprof-report PATH`",
    )


def _report(raw: Mapping[str, Any], path: Path) -> Report:
    rewrite = "Write it again with `pytest --fxprof --fxprof-report PATH`"
    version = raw["report_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _error(path, f"report_version {version!r} is not a version pytest-fxprof ever wrote", rewrite)
    if version > REPORT_VERSION:
        raise _error(
            path,
            f"it has report version {version}, newer than the {REPORT_VERSION} this pytest-fxprof reads",
            "Upgrade pytest-fxprof to the version that wrote it",
        )
    profiles = raw.get("profiles")
    if not isinstance(profiles, list):
        raise _error(path, "the report's 'profiles' should be a list", rewrite)
    entries: dict[tuple[str, str], BaselineEntry] = {}
    skipped = []
    for i, profile in enumerate(profiles):
        where = f"profiles[{i}]"
        try:
            ident, entry = _profile_entry(profile, where)
        except ValueError as exc:
            raise _error(path, f"the report is malformed: {exc}", rewrite) from None
        if entry is None:
            skipped.append(f"{ident[0]} [{ident[1]}]")
        elif ident in entries:
            raise _error(path, f"{where}: {ident[0]} [{ident[1]}] appears twice", rewrite)
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
    if profile["status"] == "unmeasured":
        return ident, None
    # the tolerances an entry records are for reference only: the diff judges with its own policy
    tolerances = Settings().tolerances()
    raw = {name: profile[name] for name in ENTRY_FIELDS if name in profile}
    raw["tolerances"] = {"node": tolerances.node, "total": tolerances.total}
    return ident, entry_from_json(raw, where)


def _load_baseline(path: Path) -> BaselineFile:
    loaded = load(path)
    if isinstance(loaded, Report):
        raise _error(
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
        raise _error(
            spec,
            f"no such file, nor a baseline of a test with this id in {baseline_dir}{missing}",
            "Pass a baseline file's path, or a test id with --baseline-dir set to where its baseline lives",
        )
    return store.path_for(spec), baseline


# fxprof show ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeRow:
    """One node of a baseline entry: its median and spread across the recorded processes."""

    info: NodeInfo
    median_ns: int
    spread: float | None
    """Interquartile range / median across processes; None with a single process."""
    share: float


def node_rows(entry: BaselineEntry, sort: str = "time") -> list[NodeRow]:
    per_node = [[run.node_ns[i] for run in entry.runs] for i in range(len(entry.nodes))]
    medians = [median_int(times) for times in per_node]
    busy = sum(medians) or 1
    rows = [
        NodeRow(
            info=info,
            median_ns=m,
            spread=iqr_int(times) / m if m and len(times) > 1 else None,
            share=m / busy,
        )
        for info, m, times in zip(entry.nodes, medians, per_node, strict=True)
    ]
    if sort == "time":
        rows.sort(key=lambda r: (-r.median_ns, r.info.key))
    return rows


def _fmt_spread(spread: float | None) -> str:
    return "-" if spread is None else f"{spread:.0%}"


def entry_header(entry: BaselineEntry) -> list[str]:
    env, cap, proto = entry.environment, entry.capture, entry.protocol
    leaves = ", ".join(cap.leaf_modules) or "none"
    runs = entry.runs
    return [
        f"environment: torch {env.torch}; python {env.python}; platform {env.platform}; cpu {env.cpu}; "
        f"threads {env.threads}; device {env.device}; allocator {env.allocator}; clock {env.clock}; "
        f"engine {env.engine}",
        f"capture: {cap.method}, {cap.graphs} graph(s), leaf modules: {leaves}"
        + (f"; {cap.detail}" if cap.detail else ""),
        f"protocol: {proto.warmup} warm-up + {proto.passes} passes, {proto.threads} thread(s), "
        f"{proto.processes} process(es); {len(runs)} process(es) recorded",
        f"total (median over processes): plain forward {fmt_ns(median_int([r.total_ns for r in runs]))}, "
        f"instrumented pass {fmt_ns(median_int([r.instrumented_ns for r in runs]))}, "
        f"reference workload {fmt_ns(median_int([r.reference_ns for r in runs]))}; "
        f"recorded with tolerances node +{entry.tolerances.node:.0%}, total +{entry.tolerances.total:.0%}",
    ]


def entry_table(entry: BaselineEntry, sort: str, limit: int | None) -> list[str]:
    rows = node_rows(entry, sort)
    shown = rows[:limit] if limit is not None else rows
    sources = any(r.info.source for r in rows)
    header = ["node", "op", "target", "module", "median", "spread", "share", *(["source"] if sources else [])]
    cells = [
        [
            r.info.name,
            r.info.op,
            r.info.target,
            r.info.where,
            fmt_ns(r.median_ns),
            _fmt_spread(r.spread),
            f"{r.share:.1%}",
            *([r.info.source] if sources else []),
        ]
        for r in shown
    ]
    lines = grid(header, cells, right={4, 5, 6})
    if len(shown) < len(rows):
        lines.append(f"... {len(rows) - len(shown)} more nodes")
    lines.append(
        f"{len(rows)} nodes; median and spread (interquartile range / median) across the {len(entry.runs)} "
        "recorded process(es); share of the summed node medians"
    )
    return lines


SHOW_COLUMNS = [
    "test_id", "key", "node_key", "node", "op", "target", "module", "source", "median_us", "spread", "share",
    "processes",
]  # fmt: skip


def show_csv_rows(test_id: str, key: str, entry: BaselineEntry, sort: str) -> list[dict[str, Any]]:
    return [
        {
            "test_id": test_id,
            "key": key,
            "node_key": r.info.key,
            "node": r.info.name,
            "op": r.info.op,
            "target": r.info.target,
            "module": r.info.module,
            "source": r.info.source,
            "median_us": r.median_ns / 1e3,
            "spread": r.spread,
            "share": r.share,
            "processes": len(entry.runs),
        }
        for r in node_rows(entry, sort)
    ]


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
    """The rows as a CSV file, written whole or not at all."""
    import pandas as pd

    text = pd.DataFrame(list(rows), columns=list(columns)).to_csv(index=False)
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise _error(
            path, f"cannot be written ({exc.strerror or exc})", "Pass a --csv path in a writable directory"
        ) from None


def _entries(path: Path, baseline: BaselineFile, key: str | None) -> dict[str, BaselineEntry]:
    if key is None:
        return dict(baseline.entries)
    if key not in baseline.entries:
        keys = ", ".join(baseline.entries) or "none"
        raise _error(path, f"it has no entry {key!r} (its entries: {keys})", "Pass one of its keys to --key")
    return {key: baseline.entries[key]}


def cmd_show(args: argparse.Namespace) -> int:
    path, baseline = resolve_baseline(args.baseline, Path(args.baseline_dir))
    entries = _entries(path, baseline, args.key)
    blocks = []
    for key, entry in entries.items():
        lines = [f"{baseline.test_id} [{key}]  ({path})", *entry_header(entry), ""]
        lines += entry_table(entry, args.sort, args.limit)
        blocks.append("\n".join(lines))
    print("\n\n".join(blocks) if blocks else f"{path}: no entries ({baseline.test_id})")
    if args.csv is not None:
        rows = [row for key, entry in entries.items() for row in show_csv_rows(baseline.test_id, key, entry, args.sort)]
        write_csv(Path(args.csv), rows, SHOW_COLUMNS)
        print(f"wrote {len(rows)} rows to {args.csv}")
    return EXIT_OK


# fxprof diff ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    """One side of a diff: its profiles by (test id, key)."""

    path: Path
    what: str
    entries: dict[tuple[str, str], BaselineEntry]
    test_id: str | None = None
    """The test of a baseline file (None for a report)."""
    skipped: tuple[str, ...] = ()


def load_side(path: Path) -> Side:
    loaded = load(path)
    if isinstance(loaded, Report):
        mode = f"{loaded.mode} " if loaded.mode else ""
        what = f"report of a {mode}run, {len(loaded.entries)} measured profile(s)"
        return Side(path, what, dict(loaded.entries), None, loaded.skipped)
    entries = {(loaded.test_id, key): e for key, e in loaded.entries.items()}
    return Side(path, f"baseline of {loaded.test_id}", entries, loaded.test_id)


@dataclass
class Pairing:
    """The profiles both sides hold, and those only one side does."""

    pairs: list[tuple[tuple[str, str], BaselineEntry, BaselineEntry]] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _label(ident: tuple[str, str]) -> str:
    return f"{ident[0]} [{ident[1]}]"


def _for_test(side: Side, test_id: str, notes: list[str]) -> dict[tuple[str, str], BaselineEntry]:
    """A report's profiles of one test (the other side is that test's baseline)."""
    kept = {k: e for k, e in side.entries.items() if k[0] == test_id}
    others = len(side.entries) - len(kept)
    if others:
        notes.append(f"{others} profile(s) of other tests in {side.path} left out (the other side is one test's)")
    return kept


def pair(a: Side, b: Side, key: str | None) -> Pairing:
    """Pair profiles by (test id, key); two baseline files pair by key (they may be of renamed tests)."""
    out = Pairing()
    a_entries, b_entries = a.entries, b.entries
    if a.test_id is not None and b.test_id is not None:
        b_entries = {(a.test_id, k[1]): e for k, e in b.entries.items()}
        if a.test_id != b.test_id:
            out.notes.append(f"the two baselines are of different tests ({a.test_id} and {b.test_id}): paired by key")
    elif a.test_id is not None:
        b_entries = _for_test(b, a.test_id, out.notes)
    elif b.test_id is not None:
        a_entries = _for_test(a, b.test_id, out.notes)
    if key is not None:
        a_entries = {k: e for k, e in a_entries.items() if k[1] == key}
        b_entries = {k: e for k, e in b_entries.items() if k[1] == key}
    for ident in sorted(a_entries.keys() | b_entries.keys()):
        if ident in a_entries and ident in b_entries:
            out.pairs.append((ident, a_entries[ident], b_entries[ident]))
        else:
            (out.only_a if ident in a_entries else out.only_b).append(_label(ident))
    return out


def diff_policy(args: argparse.Namespace) -> Policy:
    """The gate's policy: the defaults of ``Settings``, with the flags laid over them and validated alike."""
    settings = Settings()
    for flag, name, value in (
        ("--node-tolerance", "node_tolerance", args.node_tolerance),
        ("--total-tolerance", "total_tolerance", args.total_tolerance),
        ("--floor-us", "floor_us", args.floor_us),
    ):
        if value is None:
            continue
        try:
            settings = apply(settings, {name: value}, flag)
        except SettingsError as exc:
            fix = "Pass microseconds, e.g. 20" if name == "floor_us" else "Pass a fraction, e.g. 0.15 for +15 %"
            raise CliError(f"{exc}. {fix}") from None
    return settings.policy()


def _verdict_text(v: NodeVerdict) -> str:
    if v.verdict is Verdict.SLOWER and not v.gates:
        return "slower (small)"
    return v.verdict.value


def _rank(v: NodeVerdict) -> tuple[int, float, str]:
    """By verdict, then furthest into or beyond the band first (``render.band_used``, as every view ranks)."""
    order = 1 if v.verdict is Verdict.SLOWER and not v.gates else VERDICT_ORDER[v.verdict]
    return order, -band_used(v.ratio, v.band), v.node.key


def node_table(c: Comparison, limit: int | None) -> list[str]:
    """Every node both sides hold, worst first: A, B, the judged ratio, its band and the verdict."""
    ranked = sorted(c.nodes, key=_rank)
    shown = ranked[:limit] if limit is not None else ranked
    cells = [
        [
            v.node.name,
            v.node.where,
            fmt_ns(v.baseline_ns),
            fmt_ns(v.current_ns),
            f"x{v.ratio:.2f}",
            f"+{v.band:.0%}",
            _verdict_text(v),
        ]
        for v in shown
    ]
    lines = grid(["node", "module", "A", "B", "ratio", "band", "verdict"], cells, right={2, 3, 4, 5})
    if len(shown) < len(ranked):
        lines.append(f"... {len(ranked) - len(shown)} more nodes")
    return lines


def pair_lines(label: str, c: Comparison, limit: int | None) -> list[str]:
    """What the gate would say of B against A, then the node table."""
    lines = [summary_line(label, c)]
    if c.status is Status.MISMATCH:
        lines.append(
            f"fxprof: {label}: A and B were measured in different environments, so they were not compared: "
            f"{'; '.join(c.mismatches)}. Compare profiles measured on the same runner class"
        )
        return lines
    if c.graph_changed:
        structure = structural_lines(c)
        lines += [f"fxprof: {label}: {structure[0]}", *structure[1:]]
    if c.status is Status.REGRESSION:
        lines.append(regression_message(label, c))
    lines += [f"fxprof: {label}: {line}" for line in notice_lines(c)]
    improved = improvement_lines(c)
    if improved:
        lines += [f"fxprof: {label} got faster than its baseline", *improved]
    return [*lines, "", *node_table(c, limit)]


TABLE_LEGEND = (
    "node tables: A is the median over A's processes, B the first of B's measurements; ratio is the gate's "
    "judged ratio: B over A after dividing out the drift of the node's peers, in every measurement of B (the "
    "one they all support, which may be another measurement's than the B shown); slower beyond x(1 + band)"
)

DIFF_COLUMNS = [
    "test_id", "key", "node_key", "node", "op", "target", "module", "source", "a_us", "b_us", "ratio", "band",
    "band_source", "verdict", "gates", "reason",
]  # fmt: skip


def _node_row(ident: tuple[str, str], info: NodeInfo, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "test_id": ident[0],
        "key": ident[1],
        "node_key": info.key,
        "node": info.name,
        "op": info.op,
        "target": info.target,
        "module": info.module,
        "source": info.source,
    }
    return {**row, **values}


def diff_csv_rows(ident: tuple[str, str], a: BaselineEntry, b: BaselineEntry, c: Comparison) -> list[dict[str, Any]]:
    """The node decisions of one pair, then the nodes only one side holds (verdict added or removed)."""
    rows = [
        _node_row(
            ident,
            v.node,
            a_us=v.baseline_ns / 1e3,
            b_us=v.current_ns / 1e3,
            ratio=v.ratio,
            band=v.band,
            band_source=v.band_source.value,
            verdict=v.verdict.value,
            gates=v.gates,
            reason=v.reason,
        )
        for v in sorted(c.nodes, key=_rank)
    ]
    rows += [_node_row(ident, n, a_us=_median_us(a, n), verdict="removed") for n in c.removed]
    rows += [_node_row(ident, n, b_us=b.runs[0].node_ns[b.nodes.index(n)] / 1e3, verdict="added") for n in c.added]
    return rows


def _median_us(entry: BaselineEntry, node: NodeInfo) -> float:
    i = entry.nodes.index(node)
    return median_int([r.node_ns[i] for r in entry.runs]) / 1e3


def _policy_line(policy: Policy) -> str:
    return (
        f"judged with node tolerance +{policy.node_tolerance:.0%}, total tolerance +{policy.total_tolerance:.0%}, "
        f"floor {fmt_ns(policy.floor_ns)} (the gate's defaults unless set here: the ini file's fxprof_* settings "
        "and a test's @pytest.mark.fxprof are not read; pass them as flags)"
    )


def cmd_diff(args: argparse.Namespace) -> int:
    policy = diff_policy(args)
    a, b = load_side(Path(args.a)), load_side(Path(args.b))
    pairing = pair(a, b, args.key)
    print(f"A (old, as the baseline): {a.path}, {a.what}")
    print(f"B (new, as this run): {b.path}, {b.what}")
    print(_policy_line(policy))
    for side in (a, b):
        if side.skipped:
            print(f"not measured in {side.path} (a plain run's single pass), not compared: {', '.join(side.skipped)}")
    for note in pairing.notes:
        print(f"note: {note}")
    print(TABLE_LEGEND)
    statuses: dict[str, int] = {}
    rows: list[dict[str, Any]] = []
    for ident, entry_a, entry_b in pairing.pairs:
        c = compare(entry_a, entry_b, policy)
        statuses[c.status.value] = statuses.get(c.status.value, 0) + 1
        print("\n" + "\n".join(pair_lines(_label(ident), c, args.limit)))
        rows += diff_csv_rows(ident, entry_a, entry_b, c)
    print()
    for side, only in ((a, pairing.only_a), (b, pairing.only_b)):
        for label in only:
            print(f"only in {'A' if side is a else 'B'} ({side.path}): {label}")
    if not pairing.pairs:
        raise _error(
            f"{a.path} and {b.path}",
            "no profile is in both (same test id and key" + (f" {args.key!r}" if args.key else "") + ")",
            "Pass two files of the same tests",
        )
    counts = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()))
    print(f"{len(pairing.pairs)} compared: {counts}; {len(pairing.only_a)} only in A, {len(pairing.only_b)} only in B")
    if args.csv is not None:
        write_csv(Path(args.csv), rows, DIFF_COLUMNS)
        print(f"wrote {len(rows)} rows to {args.csv}")
    return EXIT_FOUND if statuses.get(Status.REGRESSION.value) else EXIT_OK


# fxprof prune ---------------------------------------------------------------------------------------


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
    out = Prunable(leftovers=sorted(directory.glob(".*.tmp")))
    files = collection.files
    tests: list[str] = []
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        try:
            test_id = parse(path.read_text(encoding="utf-8"), path).test_id
        except BaselineError as exc:
            out.unreadable.append((path, exc.problem))
            continue
        except (OSError, UnicodeDecodeError) as exc:
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


def _prune_hint(args: argparse.Namespace) -> str:
    parts = [PROG, "prune", "--yes"]
    if args.baseline_dir != DEFAULT_BASELINE_DIR:
        parts += ["--baseline-dir", args.baseline_dir]
    if args.pytest_args:
        parts += ["--", *args.pytest_args]
    return " ".join(parts)


def cmd_prune(args: argparse.Namespace) -> int:
    directory = Path(args.baseline_dir)
    if not directory.is_dir():
        raise _error(directory, "no such directory", "Pass the baseline directory with --baseline-dir")
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
        return EXIT_OK
    if not args.yes:
        print(f"nothing was removed; to remove these {len(removable)} file(s): {_prune_hint(args)}")
        return EXIT_OK
    return _remove(removable)


def _remove(paths: Sequence[Path]) -> int:
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
        raise _error(", ".join(failed), "could not be removed", "Check the directory's permissions")
    return EXIT_OK


# The command line -----------------------------------------------------------------------------------


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _add_show(sub: Any) -> None:
    p = sub.add_parser(
        "show",
        help="Print the per-node table of a baseline file",
        description="Print each entry of a baseline file: the environment, capture and protocol it was recorded "
        "with, and per node the median across the recorded processes, the spread across them (interquartile "
        "range / median), its share of the summed node time, its module, target and source line.",
    )
    p.add_argument(
        "baseline",
        metavar="BASELINE",
        help="A baseline file, or the id of a test (file.py::test) recorded in --baseline-dir",
    )
    p.add_argument(
        "--baseline-dir",
        default=DEFAULT_BASELINE_DIR,
        metavar="DIR",
        help="Where test ids are looked up (default: baselines)",
    )
    p.add_argument("--key", help="Show only this entry (an fxprof call's name, e.g. call0)")
    p.add_argument("--sort", choices=SORTS, default="time", help="Slowest first (time, the default) or graph order")
    p.add_argument("--limit", type=_count, metavar="N", help="Show at most N nodes per entry (the CSV holds all)")
    p.add_argument("--csv", metavar="PATH", help="Also write every node of the shown entries to PATH as CSV")
    p.set_defaults(run=cmd_show)


def _add_diff(sub: Any) -> None:
    p = sub.add_parser(
        "diff",
        help="Judge B against A as the gate does",
        description="Judge the profiles of B against those of A with the gate's decision and policy, and print "
        "what the gate would say and a node table, worst first. A and B are each a baseline file or a JSON "
        "report of --fxprof-report; profiles pair by test id and key (two baseline files pair by key). B's runs "
        "are the measurements (a report's run and its confirmation, or a baseline's processes). Exit code 1 if "
        "any pair is a regression, 0 otherwise, 2 for unreadable input.",
    )
    p.add_argument("a", metavar="A", help="The old side (a baseline file or a report), in the baseline's place")
    p.add_argument("b", metavar="B", help="The new side (a baseline file or a report), in the run's place")
    p.add_argument("--key", help="Compare only the profiles with this key (e.g. call0)")
    p.add_argument(
        "--node-tolerance",
        metavar="X",
        help="Smallest band of a node or aggregate, e.g. 0.15 for +15 %% (default: the gate's)",
    )
    p.add_argument(
        "--total-tolerance", metavar="X", help="Smallest band of the total, e.g. 0.1 for +10 %% (default: the gate's)"
    )
    p.add_argument(
        "--floor-us",
        metavar="X",
        help="Changes smaller than this many microseconds never fail a node (default: the gate's)",
    )
    p.add_argument("--limit", type=_count, metavar="N", help="Show at most N nodes per pair (the CSV holds all)")
    p.add_argument("--csv", metavar="PATH", help="Also write the node comparisons of every pair to PATH as CSV")
    p.set_defaults(run=cmd_diff)


def _add_prune(sub: Any) -> None:
    p = sub.add_parser(
        "prune",
        help="Remove the baselines of tests that no longer exist",
        description="Collect the tests with pytest (in this directory, with PYTEST_ARGS after --) and list the "
        "baselines whose test was not collected although its test file collected other tests, or whose test "
        "file is gone. Removes them only with --yes. Refuses if the collection fails, collects nothing or "
        "deselects tests, or if none of the directory's baselines belongs to a collected test (another project's "
        "directory); never removes an unreadable baseline.",
    )
    p.add_argument(
        "--baseline-dir",
        default=DEFAULT_BASELINE_DIR,
        metavar="DIR",
        help="The baseline directory (default: baselines)",
    )
    p.add_argument("--yes", action="store_true", help="Remove what was found (without it, only list it)")
    p.add_argument("pytest_args", nargs="*", metavar="PYTEST_ARGS", help="Arguments for pytest's collection, after --")
    p.set_defaults(run=cmd_prune)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROG,
        description="Read pytest-fxprof baselines and reports: show a baseline, diff two profiles as the gate "
        "judges them, prune the baselines of deleted tests.",
        epilog="Exit codes: 0 nothing to report, 1 a regression found (diff), 2 a usage error or unreadable input.",
    )
    sub = top.add_subparsers(title="commands", metavar="COMMAND")
    _add_show(sub)
    _add_diff(sub)
    _add_prune(sub)
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


if __name__ == "__main__":
    raise SystemExit(main())
