"""The ``fxprof`` section of the terminal summary: the run's lines (``run_lines``) and each profile's (its summary
line, its worst nodes and, with ``-v``, its whole node table and hints), each with the colour of its verdict.
Reads the same per-profile records as the other views, so profiles measured in xdist workers show the same way.
Colours are names the terminal writer applies only when the terminal supports them. Must not import torch or
pytest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_fxprof.records.disturbance import BUSY_LINE
from pytest_fxprof.records.measurement import FORWARD, TUNED_ALLOCATOR
from pytest_fxprof.records.units import fmt_ns
from pytest_fxprof.records.verdicts import LONE_REASON, Status
from pytest_fxprof.views.judged_json import NodeJSON
from pytest_fxprof.views.render import WORST_SHOWN, grid
from pytest_fxprof.views.report import ProfileRecord, ProfileReportJSON, busy_line, item_tone, worst_nodes

Line = tuple[str, str | None]
"""A line of text and the colour to write it in (None: the terminal's own)."""

STATUS_COLOURS: dict[str, str] = {
    Status.REGRESSION: "red",
    Status.PASS: "green",
    Status.UNCHANGED: "green",
    Status.RECORDED: "green",
}
TONE_COLOURS = {"bad": "red", "warn": "yellow", "good": "green"}
WARNING_COLOUR = "yellow"
INDENT = "    "


def status_colour(status: str) -> str:
    return STATUS_COLOURS.get(status, WARNING_COLOUR)


def node_colour(node: NodeJSON) -> str | None:
    """A node's colour, by ``report.item_tone`` as in every view (a new node has none)."""
    return TONE_COLOURS.get(item_tone(node))


def busy_counts(records: Sequence[ProfileRecord]) -> str:
    """The run's count of profiles that reached no verdict, and of those measured on a busy machine: in a check,
    this process's profile; in an update, the recording's processes, as its warnings count them; and of those
    undecided against a baseline of one process, which more processes decide, not a quieter machine ("" if none)."""
    undecided = [r for r in records if r["status"] == Status.UNDECIDED]
    lone = sum(_lone(r["report"]) for r in undecided)
    busy = sum(bool(busy_line(r["report"]) or r["report"].get("busy_processes")) for r in records)
    parts = [f"{len(undecided) - lone} profile(s) undecided, too noisy to decide"] if len(undecided) > lone else []
    parts += [f"{busy} profile(s) {BUSY_LINE}"] if busy else []
    text = "; ".join(parts) + ("; measure on a quieter machine" if parts else "")
    if lone:
        more = f"{lone} profile(s) undecided against a baseline of one process: record them from 2 or more processes"
        text += ("; " if text else "") + more + " (--fxprof-processes) or once more"
    return text


def _lone(report: ProfileReportJSON) -> bool:
    """Whether a profile decided nothing against a baseline of one process's measurement (``Comparison.refused``)."""
    return report.get("noisy") == LONE_REASON


def allocator_lines(records: Sequence[ProfileRecord]) -> list[Line]:
    """Which allocator the run's measurements ran under, once for the run: the program measured is the user's only
    with the user's allocator, so a tuned one is said in colour, with what it leaves out."""
    names = sorted(
        {
            str(r["report"]["environment"].get("allocator", ""))
            for r in records
            if r["status"] != Status.UNMEASURED and r["report"].get("environment")
        }
        - {"", "not measured"}
    )
    if not names:
        return []
    out: list[Line] = [(f"measured under the allocator {', '.join(names)}", None)]
    if TUNED_ALLOCATOR in names:
        out.append(
            (
                "the allocator was tuned by fxprof (--fxprof-allocator tuned): what a change costs in page faults and "
                "in memory handed back to the system is not measured, though the user's program pays it",
                WARNING_COLOUR,
            )
        )
    return out


def profile_lines(record: ProfileRecord, verbose: bool = False) -> list[Line]:
    """The summary line; then the worst nodes (or, with ``verbose``, every node and the hints)."""
    profile = record["report"]
    out: list[Line] = [(record["summary"], status_colour(record["status"]))]
    busy = busy_line(profile)
    if busy:  # the figures below came from a disturbed machine: say so before them
        out.append((f"{INDENT}{busy}", WARNING_COLOUR))
    coarse = profile.get("coarse")
    if coarse:  # blame cannot go inside what the capture kept whole: said, not counted among the notices
        out.append((f"{INDENT}{coarse}", WARNING_COLOUR))
    notices = profile.get("notices") or []
    if verbose:
        out += [(f"{INDENT}notice: {line}", None) for line in notices]
    elif notices:  # nothing to act on: counted here, listed with -v and in the reports
        out.append((f"{INDENT}{len(notices)} notice(s), nothing to act on (pytest -v lists them)", None))
    nodes = profile["nodes"]
    if not nodes or record["status"] in (Status.UNMEASURED, Status.UNCHANGED):  # one cold pass: its times say little
        return out
    compared = any("ratio" in n for n in nodes)
    step = any(n.get("direction", FORWARD) != FORWARD for n in nodes)  # a training step's: say which way
    if verbose:
        ordered = sorted(nodes, key=lambda n: (-n["current_ns"], n["key"]))
        out += _table(ordered, compared, step=step)
        out += [(f"{INDENT}hint: {h['message']}", "cyan") for h in profile.get("hints", [])]
    elif compared:
        out += _table(worst_nodes(nodes, WORST_SHOWN), compared, header=False, step=step)
    return out


def _table(nodes: Sequence[NodeJSON], compared: bool, header: bool = True, *, step: bool = False) -> list[Line]:
    """Nodes as aligned rows, each coloured by its verdict (and, in a training step, its direction)."""
    head = ["node", *(["direction"] if step else []), "target", "module", "shape", "median", "spread", "share"]
    if compared:
        head += ["baseline", "ratio", "band", "verdict"]
    rows = []
    for n in nodes:
        row = [
            n["name"],
            *([n.get("direction", FORWARD)] if step else []),
            n["target"],
            n["module"] or "<root>",
            n.get("shape", ""),
            fmt_ns(n["current_ns"]),
            f"{n['spread']:.0%}",
            f"{n['share']:.1%}",
        ]
        if compared:
            judged = "ratio" in n
            row += [
                fmt_ns(n["baseline_ns"]) if judged else "",
                f"x{n['ratio']:.2f}" if judged else "",
                f"+{n['band']:.0%}" if judged else "",
                n["verdict"] if judged else "added",
            ]
        rows.append(row)
    numeric = {k + (1 if step else 0) for k in (4, 5, 6, 7, 8, 9)}
    lines = grid(head, rows, right=numeric)
    colours: list[str | None] = [None, None] if header else []
    colours += [node_colour(n) for n in nodes]
    texts = lines if header else lines[2:]
    return [(INDENT + text, colour) for text, colour in zip(texts, colours, strict=True)]


WAIT_SHOWN_S = 0.5
"""Less time waited for measuring turns than this is not worth a line in the summary (shown with ``-v``)."""


@dataclass
class Final:
    """What the session's end wrote and found, for the terminal summary."""

    written: list[Path] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    outputs: list[Path] = field(default_factory=list)


@dataclass(frozen=True)
class RunFacts:
    """What the run gathered that its summary tells, beside its profiles' records (``session.run.RunState``)."""

    against: str
    failed_calls: int
    turns: int
    waited_s: float
    lock_path: Path | None
    spent: str
    """Where the time went (``Spent.line``)."""
    processes: bool
    """Whether fresh processes were started (then where the time went is always said)."""
    notes: Sequence[str]
    dropped: Mapping[str, Sequence[str]]
    directory: Path
    unused_fails: bool


def run_lines(
    records: Sequence[ProfileRecord], run: RunFacts, final: Final | None, *, verbose: bool, interrupted: bool
) -> list[Line]:
    """The run's section of the terminal summary: its profiles, where the time went, its notes, and what its end
    wrote and found (``final``; None in a run that ended before)."""
    out: list[Line] = []
    if run.against:
        out.append((f"against {run.against}: old and new code measured in pairs of fresh processes", None))
    records = sorted(records, key=lambda r: (r["test_id"], r["key"]))
    if not records and run.failed_calls:
        out.append(
            (
                f"no profile was taken: {run.failed_calls} call(s) of the fxprof fixture failed (their tests say why)",
                None,
            )
        )
    elif not records and interrupted:
        out.append(("interrupted before any profile was taken", WARNING_COLOUR))
    elif not records:
        out.append(("no test called the fxprof fixture", None))
    out += allocator_lines(records)
    for record in records:
        out += profile_lines(record, verbose=verbose)
    busy_count = busy_counts(records)
    if busy_count:
        out.append((busy_count, WARNING_COLOUR))
    if run.turns and run.lock_path and (run.waited_s >= WAIT_SHOWN_S or verbose):
        out.append(
            (
                f"measured one at a time on this machine: {run.turns} measuring turn(s), {run.waited_s:.1f} s spent "
                f"waiting for other processes' turns (lock {run.lock_path})",
                None,
            )
        )
    if records and (run.processes or verbose):
        out.append((f"where the time went: {run.spent}", None))
    out += [(note, WARNING_COLOUR) for note in run.notes]
    for test_id, keys in sorted(run.dropped.items()):
        out.append((f"{test_id}: dropped baseline entries no longer called: {', '.join(keys)}", WARNING_COLOUR))
    if final is None:
        return out
    if final.written:
        out.append((f"wrote {len(final.written)} baseline file(s) to {run.directory}", "green"))
    if final.unused:
        verb = "failing" if run.unused_fails else "warning"
        out.append(
            (
                f"{len(final.unused)} baseline(s) whose test no longer exists, or unreadable ({verb}; delete them, "
                "or fix the unreadable ones):",
                WARNING_COLOUR,
            )
        )
        out += [(f"  {name}", None) for name in final.unused]
    out += [(error, "red") for error in final.errors]
    out += [(f"report: {path}", None) for path in final.outputs]
    return out
