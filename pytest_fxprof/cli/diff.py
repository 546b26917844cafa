"""``fxprof diff``: judge one file's profiles against another's, as the gate does.

Owns the pairing of two baseline files or reports by test id and key, the policy laid from the flags over the
gate's defaults (validated as pytest's options are), and the output: the gate's own messages, then a node
table ranked as every view ranks. Decides nothing itself: the decision is ``judge.decision.compare``.

Must not import torch or pytest.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_fxprof.cli.inputs import EXIT_FOUND, EXIT_OK, CliError, Report, count_arg, error, load, node_row, write_csv
from pytest_fxprof.judge.decision import Policy, compare
from pytest_fxprof.records.measurement import BaselineEntry, NodeInfo, directed, median_int
from pytest_fxprof.records.units import fmt_ns
from pytest_fxprof.records.verdicts import Comparison, NodeVerdict, Status, Verdict
from pytest_fxprof.settings import Settings, SettingsError, apply
from pytest_fxprof.views.render import (
    grid,
    improvement_lines,
    notice_lines,
    regression_message,
    structural_lines,
    summary_line,
)


def add_parser(sub: Any) -> None:
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
    p.add_argument("--limit", type=count_arg, metavar="N", help="Show at most N nodes per pair (the CSV holds all)")
    p.add_argument("--csv", metavar="PATH", help="Also write the node comparisons of every pair to PATH as CSV")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
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
        raise error(
            f"{a.path} and {b.path}",
            "no profile is in both (same test id and key" + (f" {args.key!r}" if args.key else "") + ")",
            "Pass two files of the same tests",
        )
    counts = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()))
    print(f"{len(pairing.pairs)} compared: {counts}; {len(pairing.only_a)} only in A, {len(pairing.only_b)} only in B")
    if args.csv is not None:
        write_csv(Path(args.csv), rows, DIFF_VALUES)
        print(f"wrote {len(rows)} rows to {args.csv}")
    return EXIT_FOUND if statuses.get(Status.REGRESSION.value) else EXIT_OK


VERDICT_ORDER = {Verdict.SLOWER: 0, Verdict.NOISY: 2, Verdict.OK: 3, Verdict.FASTER: 4}
"""Worst first in the diff's node table; a slower node too small to fail alone ranks 1."""


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
    """By verdict, then the most time lost first (``views.render.at_stake``, as every view ranks)."""
    order = 1 if v.verdict is Verdict.SLOWER and not v.gates else VERDICT_ORDER[v.verdict]
    return order, -v.delta_ns, v.node.key


def node_table(c: Comparison, limit: int | None) -> list[str]:
    """Every node both sides hold, worst first: A, B, the judged ratio, its band and the verdict."""
    ranked = sorted(c.nodes, key=_rank)
    shown = ranked[:limit] if limit is not None else ranked
    cells = [
        [
            v.node.name,
            directed(v.node.where, v.node.direction),
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


DIFF_VALUES = ("a_us", "b_us", "ratio", "band", "band_source", "verdict", "gates", "reason")


def diff_csv_rows(ident: tuple[str, str], a: BaselineEntry, b: BaselineEntry, c: Comparison) -> list[dict[str, Any]]:
    """The node decisions of one pair, then the nodes only one side holds (verdict added or removed)."""
    rows = [
        node_row(
            *ident,
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
    rows += [node_row(*ident, n, a_us=_median_us(a, n), verdict="removed") for n in c.removed]
    rows += [node_row(*ident, n, b_us=b.runs[0].node_ns[b.nodes.index(n)] / 1e3, verdict="added") for n in c.added]
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
