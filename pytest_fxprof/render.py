"""Text views of profiles and verdicts: the per-node table, failure messages and summary lines.

Owns wording and layout only; decides nothing. Must not import torch or pytest.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_fxprof.decision import Comparison, NodeVerdict, Status
from pytest_fxprof.records import NodeInfo, ProfileResult

WORST_SHOWN = 3


def fmt_ns(ns: float) -> str:
    """A time with a unit that keeps three significant digits readable."""
    size = abs(ns)
    for scale, unit, digits in ((1.0, "ns", 0), (1e3, "us", 1), (1e6, "ms", 2)):
        if round(size / scale, digits) < 1000:  # the next unit up once this one would show 1000
            return f"{ns / scale:.{digits}f} {unit}"
    return f"{ns / 1e9:.2f} s"


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def profile_table(result: ProfileResult, sort: str = "time", limit: int | None = None) -> str:
    """The per-node table of a profile, slowest first (``sort="time"``) or in graph order."""
    if sort not in ("time", "graph"):
        raise ValueError(f"sort must be 'time' or 'graph', not {sort!r}")
    nodes = list(result.nodes)
    if sort == "time":
        nodes.sort(key=lambda n: (-n.median_ns, n.info.key))
    shown = nodes[:limit] if limit is not None else nodes
    rows = [
        [n.name, n.op, n.target, n.info.where, fmt_ns(n.median_ns), f"{n.spread:.0%}", f"{n.share:.1%}"] for n in shown
    ]
    header = ["node", "op", "target", "module", "median", "spread", "share"]
    lines = _grid(header, rows, right={4, 5, 6})
    if len(shown) < len(nodes):
        lines.append(f"... {len(nodes) - len(shown)} more nodes")
    lines.append(_totals_line(result))
    return "\n".join(lines)


def _totals_line(result: ProfileResult) -> str:
    parts = [f"total {fmt_ns(result.total_ns)} over {len(result.nodes)} nodes"]
    if result.overhead is not None:
        parts.append(f"profiler overhead x{result.overhead:.2f}")
    if not result.measured:
        parts.append("single cold pass: run with --fxprof or --fxprof-update for measured times")
    else:
        p = result.protocol
        parts.append(f"{p.passes} passes after {p.warmup} warm-up, {p.threads} thread(s)")
    return "; ".join(parts)


def node_line(v: NodeVerdict) -> str:
    n = v.node
    return (
        f"{n.name} ({n.op} {n.target} in {n.where}): {fmt_ns(v.baseline_ns)} -> {fmt_ns(v.current_ns)}"
        f" = x{v.ratio:.2f} after speed factor x{max(v.speed_factor, 1.0):.2f}, "
        f"band +{v.band:.0%} ({v.band_source.value}), +{fmt_ns(max(v.delta_ns, 0))}"
    )


def _names(nodes: Sequence[NodeInfo], limit: int = 8) -> str:
    shown = ", ".join(f"{n.name} ({n.target} in {n.where})" for n in nodes[:limit])
    return shown + (f", ... {len(nodes) - limit} more" if len(nodes) > limit else "")


def structural_lines(c: Comparison) -> list[str]:
    lines = []
    if c.graph_changed:
        lines.append(f"graph changed since the baseline: {len(c.added)} node(s) added, {len(c.removed)} removed")
        if c.added:
            lines.append(f"  added: {_names(c.added)}")
        if c.removed:
            lines.append(f"  removed: {_names(c.removed)}")
    return lines


def regression_message(label: str, c: Comparison, *, remeasured: bool = False) -> str:
    """The failure text of one profile: each slowed node worst first, then the total."""
    confirmed = "; confirmed by a second measurement (each node's faster one counts)" if remeasured else ""
    lines = [f"fxprof: {label} got slower than its baseline ({c.baseline_processes} process(es)){confirmed}"]
    lines.extend(f"  slower: {node_line(v)}" for v in c.slower)
    if c.total is not None:
        t = c.total
        lines.append(
            f"  total: {fmt_ns(t.baseline_ns)} -> {fmt_ns(t.current_ns)}, x{t.ratio:.2f} against the reference "
            f"workload, band +{t.band:.0%} ({t.band_source.value}): {t.verdict.value}"
        )
    lines.append(f"  speed factor of the whole run: x{c.speed_factor:.2f} (each node's own comes from its peers)")
    lines.extend("  " + s for s in structural_lines(c))
    return "\n".join(lines)


def summary_line(label: str, c: Comparison | None) -> str:
    """One line per profile for the terminal summary: its verdict and worst nodes."""
    if c is None:
        return f"{label}: recorded"
    if c.status is Status.MISMATCH:
        return f"{label}: mismatch ({'; '.join(c.mismatches)})"
    total = f"total x{c.total.ratio:.2f}" if c.total else ""
    worst = sorted(c.nodes, key=lambda v: -v.ratio)[:WORST_SHOWN]
    worst_text = ", ".join(f"{v.node.name} x{v.ratio:.2f}" for v in worst) or "no node in common"
    changed = f"; graph changed (+{len(c.added)}/-{len(c.removed)})" if c.graph_changed else ""
    return f"{label}: {c.status.value}, {total}; worst: {worst_text}{changed}"
