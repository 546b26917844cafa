"""``fxprof show``: the per-node table of a baseline file.

Owns the command's arguments and output: each entry's environment, capture and protocol, per node the
median across the recorded processes, the spread across them, its share, module, target and source line, and
below them the entry's recordings (its own and its history), newest first, each marked learnt from or not and why.

Must not import torch or pytest.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_fxprof.cli.inputs import (
    DEFAULT_BASELINE_DIR,
    EXIT_OK,
    count_arg,
    error,
    node_row,
    resolve_baseline,
    write_csv,
)
from pytest_fxprof.judge.decision import (
    HISTORY_NODE_TOLERANCE,
    HISTORY_TOTAL_TOLERANCE,
    MIN_RECORDINGS,
    Policy,
    learnt_from,
)
from pytest_fxprof.judge.weak import recording_spread, weak_baseline
from pytest_fxprof.records.measurement import BaselineEntry, Environment, NodeInfo, iqr_int, is_step, median_int
from pytest_fxprof.records.units import fmt_ns
from pytest_fxprof.store.baseline import BaselineFile
from pytest_fxprof.views.render import grid

SORTS = ("time", "graph")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "show",
        help="Print the per-node table of a baseline file",
        description="Print each entry of a baseline file: the environment, capture and protocol it was recorded "
        "with, and per node the median across the recorded processes, the spread across them (interquartile "
        "range / median), its share of the summed node time, its module, target and source line; then the "
        "entry's recordings, newest first (the latest and the earlier ones --fxprof-update kept, see "
        "--fxprof-history): date, processes, environment, the median of the total, and whether the bands are learnt "
        "from it (not from an earlier one made on a busy machine or of another environment or protocol).",
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
    p.add_argument("--limit", type=count_arg, metavar="N", help="Show at most N nodes per entry (the CSV holds all)")
    p.add_argument("--csv", metavar="PATH", help="Also write every node of the shown entries to PATH as CSV")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    path, baseline = resolve_baseline(args.baseline, Path(args.baseline_dir))
    entries = _entries(path, baseline, args.key)
    blocks = []
    for key, entry in entries.items():
        label = f"{baseline.test_id} [{key}]"
        lines = [f"{label}  ({path})", *entry_header(entry), bands_line(entry)]
        weak = weak_baseline(label, entry, Policy())
        lines += [f"warning: {weak}", ""] if weak else [""]
        lines += entry_table(entry, args.sort, args.limit)
        lines += ["", *recording_lines(entry)]
        blocks.append("\n".join(lines))
    print("\n\n".join(blocks) if blocks else f"{path}: no entries ({baseline.test_id})")
    if args.csv is not None:
        rows = [row for key, entry in entries.items() for row in show_csv_rows(baseline.test_id, key, entry, args.sort)]
        write_csv(Path(args.csv), rows, SHOW_VALUES)
        print(f"wrote {len(rows)} rows to {args.csv}")
    return EXIT_OK


def _entries(path: Path, baseline: BaselineFile, key: str | None) -> dict[str, BaselineEntry]:
    if key is None:
        return dict(baseline.entries)
    if key not in baseline.entries:
        keys = ", ".join(baseline.entries) or "none"
        raise error(path, f"it has no entry {key!r} (its entries: {keys})", "Pass one of its keys to --key")
    return {key: baseline.entries[key]}


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


def bands_line(entry: BaselineEntry) -> str:
    """How the gate sets this entry's bands: from its recording's processes and the default tolerances, or learnt
    from the drift between its recordings (``judge.decision.MIN_RECORDINGS``), counting only those learnt from."""
    held = len(learnt_from(entry, Policy()))
    comparable = len(entry.comparable_recordings)
    busy, unlike = comparable - held, len(entry.recordings) - comparable
    skipped = f"; {busy} recorded on a busy machine not learnt from" if busy else ""
    if unlike:
        skipped += f"; {unlike} of another environment or protocol than the latest not learnt from ({UNLIKE_FATE})"
    if held >= MIN_RECORDINGS:
        return (
            f"bands: learnt from {held} recordings (the spread within them and the drift between them; "
            f"smallest node band +{HISTORY_NODE_TOLERANCE:.0%}, total +{HISTORY_TOTAL_TOLERANCE:.0%}){skipped}"
        )
    more = MIN_RECORDINGS - held
    return (
        f"bands: from {held} recording(s) and the default tolerances{skipped}; {more} more recording(s) with "
        "--fxprof-update (the history) will learn the runner's drift"
    )


UNLIKE_FATE = "the next --fxprof-update sets it aside and keeps the others"
"""What becomes of a recording measured otherwise than its entry's own (``BaselineEntry.not_comparable``): never
learnt from, and set aside by the next update (``store.history.carry``)."""


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
        f"total (median over processes): plain call {fmt_ns(median_int([r.total_ns for r in runs]))}, "
        f"instrumented pass {fmt_ns(median_int([r.instrumented_ns for r in runs]))}, "
        f"reference workload {fmt_ns(median_int([r.reference_ns for r in runs]))}; "
        f"recorded with tolerances node +{entry.tolerances.node:.0%}, total +{entry.tolerances.total:.0%}",
        "setup: "
        + (
            f"{entry.setup.mode} mode; inputs: {'; '.join(entry.setup.inputs) or 'none'}"
            if entry.setup is not None
            else "not recorded (a file from before setups were)"
        ),
    ]


def entry_table(entry: BaselineEntry, sort: str, limit: int | None) -> list[str]:
    rows = node_rows(entry, sort)
    shown = rows[:limit] if limit is not None else rows
    sources = any(r.info.source for r in rows)
    step = is_step(entry.nodes)
    header = ["node", *(["direction"] if step else []), "op", "target", "module", "median", "spread", "share"]
    header += ["source"] if sources else []
    cells = [
        [
            r.info.name,
            *([r.info.direction] if step else []),
            r.info.op,
            r.info.target,
            r.info.where,
            fmt_ns(r.median_ns),
            "-" if r.spread is None else f"{r.spread:.0%}",
            f"{r.share:.1%}",
            *([r.info.source] if sources else []),
        ]
        for r in shown
    ]
    lines = grid(header, cells, right={k + (1 if step else 0) for k in (4, 5, 6)})
    if len(shown) < len(rows):
        lines.append(f"... {len(rows) - len(shown)} more nodes")
    lines.append(
        f"{len(rows)} nodes; median and spread (interquartile range / median) across the {len(entry.runs)} "
        "recorded process(es); share of the summed node medians"
    )
    return lines


def environment_summary(env: Environment) -> str:
    """What a recording's environment must match on, in one line (``torch 2.4.1; cpu ...; 1 thread(s); cpu``)."""
    return f"torch {env.torch}; python {env.python}; cpu {env.cpu}; {env.threads} thread(s); {env.device}"


def recording_lines(entry: BaselineEntry) -> list[str]:
    """The entry's recordings, newest first: date, processes, the medians of the plain call and of the reference
    workload, environment, and whether the bands are learnt from each (and why not)."""
    recordings = entry.recordings
    spreads = [recording_spread(entry.nodes, r.runs, Policy()) for r in recordings]
    cells = [
        [
            r.date or "unknown",
            "latest" if i == 0 else f"-{i}",
            str(len(r.runs)),
            fmt_ns(median_int([run.total_ns for run in r.runs])),
            fmt_ns(median_int([run.reference_ns for run in r.runs])),
            f"+{spread.widest:.0%} ({spread.widest_of})" if spread.widest_of else "-",
            "busy" if spread.weak else "",
            environment_summary(r.environment),
            learnt_cell(entry, i, spread.weak),
        ]
        for i, (r, spread) in enumerate(zip(recordings, spreads, strict=True))
    ]
    header = [
        "date", "recording", "processes", "total", "reference", "widest band", "machine", "environment", "learnt from",
    ]  # fmt: skip
    return [
        f"recordings: {len(recordings)}, newest first (total: the plain call's median over the processes; "
        "reference: the fixed workload's, the machine's speed at the time; widest band: what the recording's own "
        "spread sets; busy: made on a busy machine, its spread a neighbour's; learnt from: whether the bands are "
        "learnt from it, and why not)",
        *grid(header, cells, right={2, 3, 4}),
    ]


def learnt_cell(entry: BaselineEntry, index: int, busy: bool) -> str:
    """``yes``, or ``not learnt from: <why>``, for the recording at ``index`` of ``entry.recordings``: an earlier one
    measured otherwise than the latest (``BaselineEntry.not_comparable``) or made on a busy machine."""
    if index == 0:
        return "yes"  # the centre of every band, whatever its spread
    unlike = entry.not_comparable(entry.recordings[index])
    if unlike:
        return f"not learnt from: {unlike}"
    return "not learnt from: made on a busy machine" if busy else "yes"


SHOW_VALUES = ("median_us", "spread", "share", "processes")


def show_csv_rows(test_id: str, key: str, entry: BaselineEntry, sort: str) -> list[dict[str, Any]]:
    n = len(entry.runs)
    return [
        node_row(test_id, key, r.info, median_us=r.median_ns / 1e3, spread=r.spread, share=r.share, processes=n)
        for r in node_rows(entry, sort)
    ]
