"""Text views of profiles and verdicts: the per-node table, failure messages and summary lines. Owns wording and
layout only; decides nothing. Must not import torch or pytest."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_fxprof.judge.aggregates import fold, parent_path
from pytest_fxprof.records.measurement import DIRECTIONS, Capture, NodeStats, directed, is_step
from pytest_fxprof.records.profile import ROOT, Profile
from pytest_fxprof.records.units import fmt_ns, fmt_rate
from pytest_fxprof.records.verdicts import (
    MODULE_KINDS,
    AggregateVerdict,
    Comparison,
    Kind,
    NodeVerdict,
    Status,
    Verdict,
)
from pytest_fxprof.views.item_lines import (
    aggregate_line,
    code_change_line,
    led_by,
    node_head,
    node_line,
    nodes_text,
    signed_ns,
    total_detail_lines,
    total_line,
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


def _limited(
    header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int], limit: int | None, more: str
) -> list[str]:
    """The grid of the first ``limit`` rows, and a line counting the rest."""
    shown = rows[:limit]
    return grid(header, shown, right) + ([f"... {len(rows) - len(shown)} more{more}"] if len(shown) < len(rows) else [])


SORTS = ("time", "graph", "stake")


def profile_table(result: Profile, sort: str = "time", limit: int | None = None) -> str:
    """The per-node table of a profile, slowest first (``sort="time"``), in graph order, or for a compared profile,
    what is at stake first (``"stake"``: ``stake_table``)."""
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(map(repr, SORTS))}, not {sort!r}")
    if sort == "stake":
        if result.comparison is None or not result.comparison.nodes:
            raise ValueError("sort='stake' ranks a compared profile's verdicts: this profile was not compared")
        return stake_table(result.comparison, limit)
    nodes = list(result.nodes)
    cuda = any(n.host_ns is not None for n in nodes)
    if sort == "time":
        nodes.sort(key=lambda n: (-n.median_ns, n.info.key))
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
        for n in nodes
    ]
    header = ["node", *(["direction"] if step else []), "op", "target", "module", "median", "spread", "share"]
    header += [
        *(["GFLOP/s"] if flops else []),
        *(["host", "peak mem"] if cuda else []),
        *(["source"] if sources else []),
    ]
    numeric = set(range(header.index("median"), len(header) - (1 if sources else 0)))
    return "\n".join([*_limited(header, rows, numeric, limit, " nodes"), _totals_line(result)])


def stake_table(c: Comparison, limit: int | None = None) -> str:
    """A comparison's nodes, what is at stake first (``at_stake``): each node that can fail a test alone on its row,
    those too small to folded into one row per module, ranked by the time they lost together."""
    rows: list[tuple[tuple[int, float], list[str]]] = []
    small: dict[str, list[NodeVerdict]] = {}
    for v in c.nodes:
        if v.gates:
            what = f"{v.verdict.value}" + (" (failed)" if v.verdict is Verdict.SLOWER else "")
            stake = at_stake(v.delta_ns, v.verdict.value, failed=v.verdict is Verdict.SLOWER)
            cells = [v.node.name, directed(v.node.where, v.node.direction), fmt_ns(v.baseline_ns)]
            cells += [fmt_ns(v.current_ns), f"x{v.ratio:.2f}", signed_ns(v.delta_ns), what]
            rows.append((stake, cells))
        else:  # in the module around it: a module called whole (call_module) is the node itself
            home = parent_path(v.node.module) if v.node.op == "call_module" else v.node.module
            small.setdefault(directed(home or "<root>", v.node.direction), []).append(v)
    for where, group in small.items():
        before, now = sum(v.baseline_ns for v in group), sum(v.current_ns for v in group)
        lost = sum(v.delta_ns for v in group)
        slower = sum(v.verdict is Verdict.SLOWER for v in group)
        what = f"{slower} slower" if slower else "ok"
        cells = [f"{len(group)} small node(s)", where, fmt_ns(before), fmt_ns(now)]
        cells += [f"x{now / before:.2f}" if before else "-", signed_ns(lost), what]
        rows.append((at_stake(lost, "", failed=False), cells))
    rows.sort(key=lambda r: r[0])
    header = ["node", "module", "baseline", "now", "ratio", "lost", "verdict"]
    return "\n".join(_limited(header, [cells for _, cells in rows], {2, 3, 4, 5}, limit, " rows"))


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
    rows = [
        ["  " * r.depth + r.name, str(r.nodes), fmt_ns(r.median_ns), f"{r.share:.1%}", fmt_rate(r.flops_per_s)]
        for r in result.rollup(by)
    ]
    header = ["module" if by == "module" else "operator", "nodes", "median", "share", "GFLOP/s"]
    return "\n".join(_limited(header, rows, {1, 2, 3, 4}, limit, ""))


def _totals_line(result: Profile) -> str:
    parts = [f"total {fmt_ns(result.total_ns)} over {len(result.nodes)} nodes"]
    if is_step([n.info for n in result.nodes]):
        by = {r.direction: r for r in result.rollup("module") if r.path == ROOT and r.direction}
        split = ", ".join(f"{d} {fmt_ns(by[d].median_ns)}" for d in DIRECTIONS if d in by)
        parts[0] = f"training step {fmt_ns(result.total_ns)} over {len(result.nodes)} nodes ({split}, instrumented)"
    if result.overhead is not None:
        parts.append(f"profiler overhead x{result.overhead:.2f}")
    if not result.measured:
        parts.append(f"single cold pass: {result.cold or 'run with --fxprof or --fxprof-update for measured times'}")
    else:
        p = result.protocol
        parts.append(f"{p.passes} passes after {p.warmup} warm-up, {p.threads} thread(s)")
    return "; ".join(parts)


def blame_lines(c: Comparison) -> list[str]:
    """What a failure leads with (``Comparison.blame``): where the time went, the modules around it on one line,
    and what changed in its code; [] where no module could be named."""
    b = c.blame
    if b is None:
        return []
    chain = " > ".join(f"{a.name} x{a.ratio:.2f}" for a in b.chain)  # with its direction in a training step
    chained = [f"    in: {chain}"] if chain else []
    if b.lead is None:  # a node: named here with where it sits, its verdict among the slower nodes below
        assert b.node is not None
        v = b.node
        share = f", {b.share:.0%} of the extra time" if b.share < 0.995 else ""
        return [f"  where: node {node_head(v.node)}: x{v.ratio:.2f}, +{fmt_ns(v.delta_ns)}{share}", *chained]
    a = b.lead
    share = f", {b.share:.0%} of the extra time" if 0 < b.share < 0.995 else ""
    if b.by_memory:  # the times name nothing: the allocator's cost, which the plain call pays, does
        share = (
            f"; the plain call's +{fmt_ns(b.extra_ns)} is the allocator's: this code took {b.share:.0%} of the page "
            "faults the call gained, which the graphs' nodes (freeing memory at other points) do not pay"
        )
    elif b.by_change:  # neither the times nor the faults name a place: the code that changed is all that differs
        share = (
            f"; the only code that changed: the plain call lost +{fmt_ns(b.extra_ns)}, which no module's time in the "
            "graphs holds"
        )
    elif a.verdict is not Verdict.SLOWER:  # led because its code changed and it holds most of the extra time
        factor = "" if a.judgement.paired else f" after the run's speed factor x{c.speed_factor:.2f}"
        share = (
            f"; within its band measured alone, but its code changed and it lost +{fmt_ns(b.share * b.extra_ns)}"
            f"{factor}, {b.share:.0%} of the extra time"
        )
    out = [f"  where: {aggregate_line(a)}{share}", *chained]
    swap = a.judgement.replaced
    if swap:
        out.append(f"    its new operations against those they replaced: {swap}")
    changed = code_change_line(a)
    if changed:
        out.append(f"    {changed}")
    else:  # its nodes are those of the baseline: the ones that lost the most point at the cause
        led = led_by(c, a)
        if led:
            out.append(led.lstrip("\n"))
    return out


def _shown_apart(c: Comparison, a: AggregateVerdict) -> bool:
    """Whether a slower aggregate says something the lead and its chain do not: not the lead, not around it, not
    inside it (its instances, its submodules)."""
    b = c.blame
    if b is None:
        return True
    if a is b.lead or any(a is x for x in b.chain):
        return False
    if b.lead is None:
        return True
    if a.kind is Kind.OP or a.direction != b.lead.direction:
        return True
    lead = b.lead.where
    home = fold(a.where) if a.kind is Kind.MODULE else a.where
    if b.lead.kind is Kind.CLASS:
        places = {fold(p) for p in b.lead.instances}
        return not any(home == p or home.startswith(p + ".") for p in places)
    inside = home == lead or home.startswith(lead + ".") or a.where.startswith(lead + ".")
    return not (inside or lead.startswith(home + "."))  # nor one of the instances around it


def structural_lines(c: Comparison) -> list[str]:
    lines = []
    if c.graph_changed:
        since = f"at {c.against}" if c.against else "since the baseline"
        lines.append(f"graph changed {since}: {len(c.added)} node(s) added, {len(c.removed)} removed")
        if c.graphs_changed:
            lines.append(f"  {graphs_text(*c.graphs)}")
        if c.added:
            lines.append(f"  added: {nodes_text(c.added)}")
        if c.removed:
            lines.append(f"  removed: {nodes_text(c.removed)}")
    return lines


def graphs_text(before: int, now: int) -> str:
    """A change of the number of captured graphs, named as the graph breaks it means."""
    breaks = abs(now - before)
    what = f"{breaks} new graph break(s)" if now > before else f"{breaks} graph break(s) fewer"
    return f"captured graphs: {before} -> {now} ({what})"


def _capped(lines: Sequence[str], limit: int = AGGREGATES_SHOWN, more: str = "  ... {} more") -> list[str]:
    return [*lines[:limit], *([more.format(len(lines) - limit)] if len(lines) > limit else [])]


def _slower(c: Comparison, a: AggregateVerdict) -> str:
    """How a slower aggregate shown apart from the lead is introduced: a module whose code did not change, where the
    lead's did, slowed as a knock-on of the change (its input, or the caches it runs in, changed) or by itself."""
    lead = c.blame.lead if c.blame is not None else None
    if lead is not None and lead.changed and a.kind in MODULE_KINDS and not a.changed:
        return "also slower, its code unchanged"
    return "slower"


def _pointer(c: Comparison, a: AggregateVerdict) -> str:
    """What points at an aggregate's cause, on a line of its own: what changed in its code, or where its graph did
    not change, the members that lost the most."""
    changed = code_change_line(a)
    return f"\n    {changed}" if changed else led_by(c, a)


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
    lines.extend(blame_lines(c))
    lines.extend(f"  slower node: {node_line(v)}" for v in c.slower)
    apart = [a for a in c.slower_aggregates if _shown_apart(c, a)]
    lines.extend(_capped([f"  {_slower(c, a)}: {aggregate_line(a)}{_pointer(c, a)}" for a in apart]))
    small = c.slower_small[:WORST_SHOWN]  # the small nodes that slowed the aggregates above
    lines.extend(f"  slower small node (its aggregates gate it): {node_line(v)}" for v in small)
    if c.total is not None:
        lines.append(f"  {total_line(c.total)}")
        lines.extend(f"  {line}" for line in total_detail_lines(c.total))
    if not c.against:
        lines.append(f"  speed factor of the whole run: x{c.speed_factor:.2f} (each node's own comes from its peers)")
    lines.extend("  " + s for s in structural_lines(c))
    return "\n".join(lines)


def capture_notices(capture: Capture) -> list[str]:
    """What the automatic capture did that a user would not expect, as a notice: the method it fell back to and
    why, so that node names after aten ops (``linear_6``) or submodules kept whole are no surprise."""
    if not capture.detail:
        return []
    after = ""
    if capture.method in ("export", "dynamo"):  # it fell back
        after = "; its node names follow the operators (linear_6) and each node's module path says where it sits"
    detail = capture.detail.removesuffix(f"; captured with {capture.method}")
    return [f"captured with {capture.method}: {detail}{after}"]


COARSE_SHARE = 0.1
"""Submodules ``auto`` kept whole that hold this share of the model's time or more leave blame coarse enough for the
terminal to say so (a kept-whole ``Dropout`` does not)."""


def coarse_line(capture: Capture, nodes: Sequence[NodeStats]) -> str:
    """Where the automatic capture kept submodules whole that hold much of the time (``Capture.opaque``), what that
    means for blame and the options that would resolve them; "" where it kept none, or they hold little."""
    if not capture.opaque:
        return ""
    shares = dict.fromkeys(capture.opaque, 0.0)
    for n in nodes:
        if n.op == "call_module" and n.module in shares:
            shares[n.module] += n.share
    if sum(shares.values()) < COARSE_SHARE:
        return ""
    parts = ", ".join(f"{path} ({share:.0%})" for path, share in sorted(shares.items(), key=lambda x: -x[1]))
    return (
        f"blame stays coarse: {capture.method} kept {parts} of the time whole, each one node, so a slowdown inside "
        "them is named at their call, not at the module and line that changed; export and dynamo resolved no more "
        "of it (pytest -v lists why). Fix: make them traceable (torch.fx.wrap the call that breaks tracing, or "
        "pass tracer=), or make torch.export take the model and set capture='export'"
    )


def notice_lines(c: Comparison) -> list[str]:
    """What the gate saw but does not fail on: small slowed nodes, unconfirmed flags, undecidable bands."""
    small = [f"slower small node (its aggregates gate it): {node_line(v)}" for v in c.slower_small]
    out = _capped(small, WORST_SHOWN, "... {} more small nodes slower")
    out += [f"not confirmed by the second measurement, so not failed: {t}" for t in c.unconfirmed]
    fix = "more pairs or a quieter machine" if c.against else "record the baseline with more processes"
    out += [f"too noisy to decide ({fix}): {t}" for t in c.noisy]
    return out


def undecided_message(label: str, c: Comparison, fix: str) -> str:
    """Why a check reached no verdict (``Status.UNDECIDED``): what it could not decide, then ``fix``."""
    head = f"fxprof: {label}: undecided against {c.reference}, no verdict (neither a pass nor a slowdown)"
    items = [c.noisy_reason] if c.noisy_reason else list(c.noisy)
    more = "  ... {} more too noisy to decide (pytest -v lists them)"
    lines = _capped([f"  too noisy to decide: {t}" for t in items], WORST_SHOWN, more)
    return "\n".join([head, *lines, f"  {fix}"])


def improvement_lines(c: Comparison) -> list[str]:
    """Nodes, aggregates and the total that every measurement found faster beyond their band."""
    out = [f"  faster node: {node_line(v)}" for v in c.faster]
    faster = [a for a in c.aggregates if a.verdict is Verdict.FASTER]
    out += _capped([f"  faster: {aggregate_line(a)}" for a in sorted(faster, key=lambda a: a.delta_ns)])
    if c.total is not None and c.total.verdict is Verdict.FASTER:
        out.append(f"  {total_line(c.total)}")
    return out


def at_stake(delta_ns: float, verdict: str, *, failed: bool) -> tuple[int, float]:
    """How every view ranks compared items, worst first: what failed the test, then by the time each lost (never by
    its ratio: a tiny node that tripled is not worse than a large one that lost 1 ms)."""
    return (0 if failed else 1, -delta_ns if verdict != Verdict.NOISY.value else 0.0)


def worst_text(c: Comparison, limit: int = WORST_SHOWN) -> str:
    """The nodes a comparison puts most time at stake in, worst first (``at_stake``): compared ones by their ratio
    (``fc1 x1.31``), those the change added or removed by their time (``add_2 +1.20 ms (added)``)."""
    ranked: list[tuple[tuple[int, float], int, str]] = []
    for k, v in enumerate(c.nodes):
        stake = at_stake(v.delta_ns, v.verdict.value, failed=v.verdict is Verdict.SLOWER and v.gates)
        # ratios rounded as the report rounds them first, so that this line and every view print the same digits
        ranked.append((stake, k, f"{v.node.name} x{round(v.ratio, 4):.2f}"))
    for sign, nodes, times, word in ((1, c.added, c.added_ns, "added"), (-1, c.removed, c.removed_ns, "removed")):
        for k, (n, ns) in enumerate(zip(nodes, times, strict=False)):
            text = f"{n.name} {'+' if sign > 0 else '-'}{fmt_ns(round(ns))} ({word})"
            ranked.append((at_stake(sign * ns, word, failed=False), len(c.nodes) + k, text))
    return ", ".join(text for _, _, text in sorted(ranked)[:limit]) or "no node in common"


def summary_line(label: str, c: Comparison | None) -> str:
    """One line per profile for the terminal summary: its verdict and worst nodes."""
    if c is None:
        return f"{label}: recorded"
    if c.status is Status.MISMATCH:
        return f"{label}: mismatch ({'; '.join(c.mismatches)})"
    if c.status is Status.UNCHANGED:
        return f"{label}: unchanged since {c.reference}, its computation's fingerprint the same; not measured"
    graphs = f", graphs {c.graphs[0]} -> {c.graphs[1]}" if c.graphs_changed else ""
    changed = f"; graph changed (+{len(c.added)}/-{len(c.removed)}{graphs})" if c.graph_changed else ""
    if c.status is Status.UNDECIDED and c.noisy_reason:
        return f"{label}: undecided, too noisy to decide ({c.noisy_reason}){changed}"
    total = f"total x{round(c.total.ratio, 4):.2f}" if c.total else ""
    where = ""
    if c.blame is not None and c.blame.lead is not None:
        a = c.blame.lead
        cls = f" ({a.cls})" if a.cls and a.kind is not Kind.CLASS else ""
        where = f"; where: {'class ' if a.kind is Kind.CLASS else ''}{a.where}{cls} x{round(a.ratio, 4):.2f}"
    elif c.blame is not None and c.blame.node is not None:
        v = c.blame.node
        where = f"; where: {v.node.name} in {v.node.where} x{round(v.ratio, 4):.2f}"
    against = f"; against {c.against}, {c.pairs} pairs" if c.against else ""
    return f"{label}: {c.status.value}, {total}{where}; worst: {worst_text(c)}{changed}{against}"
