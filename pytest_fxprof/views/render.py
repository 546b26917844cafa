"""Text views of profiles and verdicts: the per-node table, failure messages and summary lines.

Owns wording and layout only; decides nothing. Must not import torch or pytest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pytest_fxprof.records.measurement import DIRECTIONS, FORWARD, NodeInfo, is_step
from pytest_fxprof.records.profile import ROOT, Profile
from pytest_fxprof.records.units import fmt_ns, fmt_rate
from pytest_fxprof.records.verdicts import (
    AggregateVerdict,
    Comparison,
    Kind,
    NodeVerdict,
    Status,
    TotalVerdict,
    Verdict,
)

WORST_SHOWN = 3
AGGREGATES_SHOWN = 6


def grid(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def profile_table(result: Profile, sort: str = "time", limit: int | None = None) -> str:
    """The per-node table of a profile, slowest first (``sort="time"``) or in graph order."""
    if sort not in ("time", "graph"):
        raise ValueError(f"sort must be 'time' or 'graph', not {sort!r}")
    nodes = list(result.nodes)
    cuda = any(n.host_ns is not None for n in nodes)
    if sort == "time":
        nodes.sort(key=lambda n: (-n.median_ns, n.info.key))
    shown = nodes[:limit] if limit is not None else nodes
    flops = any(n.flops for n in nodes)
    sources = any(n.info.source for n in nodes)
    step = is_step([n.info for n in nodes])
    rows = [
        [
            n.name,
            *([n.info.direction] if step else []),
            n.op,
            n.target,
            n.info.where,
            fmt_ns(n.median_ns),
            f"{n.spread:.0%}",
            f"{n.share:.1%}",
            *([fmt_rate(n.flops_per_s)] if flops else []),
            *([fmt_ns(n.host_ns or 0), _fmt_bytes(n.peak_bytes)] if cuda else []),
            *([n.info.source] if sources else []),
        ]
        for n in shown
    ]
    header = ["node", *(["direction"] if step else []), "op", "target", "module", "median", "spread", "share"]
    header += [
        *(["GFLOP/s"] if flops else []),
        *(["host", "peak mem"] if cuda else []),
        *(["source"] if sources else []),
    ]
    numeric = set(range(header.index("median"), len(header) - (1 if sources else 0)))
    lines = grid(header, rows, right=numeric)
    if len(shown) < len(nodes):
        lines.append(f"... {len(nodes) - len(shown)} more nodes")
    lines.append(_totals_line(result))
    return "\n".join(lines)


def _fmt_bytes(size: int | None) -> str:
    if size is None:
        return ""
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}"
        size /= 1024  # type: ignore[assignment]
    return f"{size:.1f} GiB"


def rollup_table(result: Profile, by: str = "module", limit: int | None = None) -> str:
    """Time per module subtree (indented by depth) or per operator type, slowest first."""
    groups = result.rollup(by)
    shown = groups[:limit] if limit is not None else groups
    rows = [
        ["  " * r.depth + r.name, str(r.nodes), fmt_ns(r.median_ns), f"{r.share:.1%}", fmt_rate(r.flops_per_s)]
        for r in shown
    ]
    header = ["module" if by == "module" else "operator", "nodes", "median", "share", "GFLOP/s"]
    lines = grid(header, rows, right={1, 2, 3, 4})
    if len(shown) < len(groups):
        lines.append(f"... {len(groups) - len(shown)} more")
    return "\n".join(lines)


def _totals_line(result: Profile) -> str:
    parts = [f"total {fmt_ns(result.total_ns)} over {len(result.nodes)} nodes"]
    if is_step([n.info for n in result.nodes]):
        by = {r.direction: r for r in result.rollup("module") if r.path == ROOT and r.direction}
        split = ", ".join(f"{d} {fmt_ns(by[d].median_ns)}" for d in DIRECTIONS if d in by)
        parts[0] = f"training step {fmt_ns(result.total_ns)} over {len(result.nodes)} nodes ({split}, instrumented)"
    if result.overhead is not None:
        parts.append(f"profiler overhead x{result.overhead:.2f}")
    if not result.measured:
        parts.append("single cold pass: run with --fxprof or --fxprof-update for measured times")
    else:
        p = result.protocol
        parts.append(f"{p.passes} passes after {p.warmup} warm-up, {p.threads} thread(s)")
    return "; ".join(parts)


def _measured(ratios: Sequence[float], *, paired: bool = False) -> str:
    if paired:
        return " (per pair " + ", ".join(f"x{r:.2f}" for r in ratios) + ")"
    return "" if len(ratios) < 2 else " (measurements " + ", ".join(f"x{r:.2f}" for r in ratios) + ")"


def _factor(f: float, divisor: float) -> str:
    """The peers' speed factor and what the slower test divided by, as the decision used it."""
    if f > 1.0:
        return f"x{f:.2f} (divided by x{divisor:.2f}, the drift in doubt)"
    if f < 1.0 and abs(divisor - 1.0) > 5e-3:
        return f"x{f:.2f} (divided by x{divisor:.2f}, part of the speed-up credited)"
    return f"x{f:.2f}"


def _at(n: NodeInfo) -> str:
    return f", {n.source}" if n.source else ""


def node_head(n: NodeInfo) -> str:
    """A node as a failure names it: ``conv (call_function aten.convolution.default in layer1.0.conv1, file:line)``;
    outside the forward, module and direction first: ``layer3.0.conv2 backward (aten.convolution_backward.default)
    [convolution_backward_8 of convolution_10, file:line]``."""
    if n.direction == FORWARD:
        return f"{n.name} ({n.op} {n.target} in {n.where}{_at(n)})"
    of = f" of {n.forward}" if n.forward else ""
    return f"{n.where} {n.direction} ({n.target}) [{n.name}{of}{_at(n)}]"


def node_line(v: NodeVerdict) -> str:
    n = v.node
    if v.judgement.paired:  # against a revision: no speed factor, the ratios are per pair
        return (
            f"{node_head(n)}: {fmt_ns(v.baseline_ns)} -> {fmt_ns(v.current_ns)}"
            f" = x{v.ratio:.2f}, band +{v.band:.0%} ({v.band_source.value}), "
            f"{'+' if v.delta_ns >= 0 else '-'}{fmt_ns(abs(v.delta_ns))}{_measured(v.judgement.ratios, paired=True)}"
            f"{_shapes(v)}"
        )
    return (
        f"{node_head(n)}: {fmt_ns(v.baseline_ns)} -> {fmt_ns(v.current_ns)}"
        f" = x{v.ratio:.2f} after speed factor {_factor(v.speed_factor, v.divisor)}, "
        f"band +{v.band:.0%} ({v.band_source.value}), {'+' if v.delta_ns >= 0 else '-'}{fmt_ns(abs(v.delta_ns))}"
        f"{_measured(v.judgement.ratios)}{_shapes(v)}"
    )


def _shapes(v: NodeVerdict) -> str:
    since = "" if v.judgement.paired else " since the baseline"
    return f"; output changed{since}: {v.shapes[0]} -> {v.shapes[1]}" if v.shapes else ""


def aggregate_line(a: AggregateVerdict) -> str:
    j = a.judgement
    what = f"every {a.name} node" if a.kind is Kind.OP else f"module {a.name}"
    if j.paired:
        return (
            f"{what} ({len(a.members)} nodes): {fmt_ns(a.baseline_ns)} -> {fmt_ns(a.current_ns)} = x{a.ratio:.2f}, "
            f"band +{j.band:.0%} ({j.band_source.value}), {'+' if a.delta_ns >= 0 else '-'}"
            f"{fmt_ns(abs(a.delta_ns))}{_measured(j.ratios, paired=True)}"
        )
    return (
        f"{what} ({len(a.members)} nodes): {fmt_ns(a.baseline_ns)} -> {fmt_ns(a.current_ns)} = x{a.ratio:.2f} "
        f"after speed factor {_factor(a.speed_factor, a.divisor)} from nodes outside it, band +{j.band:.0%} "
        f"({j.band_source.value}), {'+' if a.delta_ns >= 0 else '-'}{fmt_ns(abs(a.delta_ns))}{_measured(j.ratios)}"
    )


def total_line(t: TotalVerdict) -> str:
    if t.judgement.paired:
        return (
            f"total: {fmt_ns(t.baseline_ns)} -> {fmt_ns(t.current_ns)}, x{t.ratio:.2f}, band +{t.band:.0%} "
            f"({t.band_source.value}): {t.verdict.value}{_measured(t.judgement.ratios, paired=True)}"
        )
    return (
        f"total: {fmt_ns(t.baseline_ns)} -> {fmt_ns(t.current_ns)}, x{t.ratio:.2f} against the reference workload "
        f"(machine x{t.machine_factor:.2f}), band +{t.band:.0%} ({t.band_source.value}): {t.verdict.value}"
        f"{_measured(t.judgement.ratios)}"
    )


def _names(nodes: Sequence[NodeInfo], limit: int = 8) -> str:
    shown = ", ".join(f"{n.name} ({n.target} in {n.where})" for n in nodes[:limit])
    return shown + (f", ... {len(nodes) - limit} more" if len(nodes) > limit else "")


def structural_lines(c: Comparison) -> list[str]:
    lines = []
    if c.graph_changed:
        since = f"at {c.against}" if c.against else "since the baseline"
        lines.append(f"graph changed {since}: {len(c.added)} node(s) added, {len(c.removed)} removed")
        if c.graphs_changed:
            lines.append(f"  {graphs_text(*c.graphs)}")
        if c.added:
            lines.append(f"  added: {_names(c.added)}")
        if c.removed:
            lines.append(f"  removed: {_names(c.removed)}")
    return lines


def graphs_text(before: int, now: int) -> str:
    """A change of the number of captured graphs, named as the graph breaks it means."""
    breaks = abs(now - before)
    what = f"{breaks} new graph break(s)" if now > before else f"{breaks} graph break(s) fewer"
    return f"captured graphs: {before} -> {now} ({what})"


def _capped(lines: Sequence[str], limit: int = AGGREGATES_SHOWN) -> list[str]:
    return [*lines[:limit], *([f"  ... {len(lines) - limit} more"] if len(lines) > limit else [])]


def _led_by(c: Comparison, a: AggregateVerdict) -> str:
    """The aggregate's members that point at the cause, on a line of their own."""
    leaders = c.leaders(a)
    if not leaders:
        return ""
    shown = "; ".join(
        f"{v.node.name} ({v.node.label} in {v.node.where}{_at(v.node)}) "
        f"{fmt_ns(v.baseline_ns)} -> {fmt_ns(v.current_ns)}"
        for v in leaders
    )
    return f"\n    most of it: {shown}"


def regression_message(label: str, c: Comparison) -> str:
    """The failure text of one profile: each slowed node worst first, the slowed aggregates, the total."""
    confirmed = ""
    if c.measurements > 1:
        confirmed = f"; every one of {c.measurements} measurements agrees (a second one confirmed the first)"
    if c.against:
        lines = [f"fxprof: {label} got slower than {c.against} ({c.pairs} pairs of old and new processes)"]
    else:
        learnt = f" over {c.recordings} recordings" if c.recordings > 1 else ""
        processes = f"{c.baseline_processes} process(es){learnt}"
        lines = [f"fxprof: {label} got slower than its baseline ({processes}){confirmed}"]
    lines.extend(f"  slower node: {node_line(v)}" for v in c.slower)
    lines.extend(_capped([f"  slower: {aggregate_line(a)}{_led_by(c, a)}" for a in c.slower_aggregates]))
    small = c.slower_small[:WORST_SHOWN]  # the small nodes that slowed the aggregates above
    lines.extend(f"  slower small node (its aggregates gate it): {node_line(v)}" for v in small)
    if c.total is not None:
        lines.append(f"  {total_line(c.total)}")
    if not c.against:
        lines.append(f"  speed factor of the whole run: x{c.speed_factor:.2f} (each node's own comes from its peers)")
    lines.extend("  " + s for s in structural_lines(c))
    return "\n".join(lines)


def notice_lines(c: Comparison) -> list[str]:
    """What the gate saw but does not fail on: small slowed nodes, unconfirmed flags, undecidable bands."""
    out = [f"slower small node (its aggregates gate it): {node_line(v)}" for v in c.slower_small[:WORST_SHOWN]]
    if len(c.slower_small) > WORST_SHOWN:
        out.append(f"... {len(c.slower_small) - WORST_SHOWN} more small nodes slower")
    out += [f"not confirmed by the second measurement, so not failed: {t}" for t in c.unconfirmed]
    fix = "more pairs or a quieter machine" if c.against else "record the baseline with more processes"
    out += [f"too noisy to decide ({fix}): {t}" for t in c.noisy]
    return out


def improvement_lines(c: Comparison) -> list[str]:
    """Nodes, aggregates and the total that every measurement found faster beyond their band."""
    out = [f"  faster node: {node_line(v)}" for v in c.faster]
    faster = [a for a in c.aggregates if a.verdict is Verdict.FASTER]
    out += _capped([f"  faster: {aggregate_line(a)}" for a in sorted(faster, key=lambda a: a.delta_ns)])
    if c.total is not None and c.total.verdict is Verdict.FASTER:
        out.append(f"  {total_line(c.total)}")
    return out


def band_used(ratio: float, band: float) -> float:
    """How much of its band a ratio uses: 0 at the baseline, 1 at the band's edge, more beyond it, negative
    when faster. Ranks nodes by how near they are to failing, so that a tiny node whose time doubled inside a
    band a hundred times wider does not rank above a large one near its edge."""
    if band > 0:
        return (ratio - 1.0) / band
    return math.inf if ratio > 1.0 else ratio - 1.0


def summary_line(label: str, c: Comparison | None) -> str:
    """One line per profile for the terminal summary: its verdict and worst nodes."""
    if c is None:
        return f"{label}: recorded"
    if c.status is Status.MISMATCH:
        return f"{label}: mismatch ({'; '.join(c.mismatches)})"
    if c.status is Status.NOISY:
        return f"{label}: too noisy to decide ({c.noisy_reason})"
    total = f"total x{round(c.total.ratio, 4):.2f}" if c.total else ""
    worst = sorted(c.nodes, key=lambda v: -band_used(v.ratio, v.band))[:WORST_SHOWN]  # as report.worst_nodes
    # ratios rounded as the report rounds them first, so that this line and every view print the same digits
    worst_text = ", ".join(f"{v.node.name} x{round(v.ratio, 4):.2f}" for v in worst) or "no node in common"
    graphs = f", graphs {c.graphs[0]} -> {c.graphs[1]}" if c.graphs_changed else ""
    changed = f"; graph changed (+{len(c.added)}/-{len(c.removed)}{graphs})" if c.graph_changed else ""
    against = f"; against {c.against}, {c.pairs} pairs" if c.against else ""
    return f"{label}: {c.status.value}, {total}; worst: {worst_text}{changed}{against}"
