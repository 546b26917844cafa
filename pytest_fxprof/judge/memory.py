"""What memory a change costs, the allocator states processes fall into, and what the profiler's own cost means for
the nodes: facts a verdict shows, and the rules that follow from them.

Owns the memory facts of an item (bytes its nodes' outputs hold, page faults its code takes in the call as the user
makes it); what the profiler's overhead and the allocator's faults mean for the nodes' times (``held_to_overhead``,
``held_to_memory``: the nodes are timed in the graphs, the total in the call as the user makes it); and the states:
glibc's allocator maps, trims and hands back memory by thresholds that follow a process's history, so the same
program lands in one of two steady states, one of which pays page faults on every call (BENCHMARKS.md, "The
allocator: the program users run"). A change can move some processes, not all, into the slow one: its cost is then
real for a share of the processes users run, and a mean over pairs would call it noise.

Pure. Must not import torch, pytest or pandas.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from pytest_fxprof.judge.aggregates import Group
from pytest_fxprof.records.measurement import BaselineEntry, NodeInfo, Run
from pytest_fxprof.records.verdicts import (
    FAULTS_SHOWN,
    AggregateVerdict,
    Judgement,
    Kind,
    Memory,
    NodeVerdict,
    TotalVerdict,
    Verdict,
)

STATE_GAP = 4.0
"""Two groups of processes are in different allocator states where the page faults of their plain calls lie this
many times apart (a process that reuses its heap takes few faults a call, one that hands memory back and takes it
again thousands: x15-x50 apart in the talking-heads change of BENCHMARKS.md) ..."""

STATE_FAULTS = FAULTS_SHOWN
"""... and at least this many faults a call apart (``records.verdicts.FAULTS_SHOWN``, 1 MiB of 4 KiB pages): fewer are
the allocator's own bookkeeping, not a state."""

FAULT_NS = 2_000
"""The most time one page fault costs a call, with the mapping, the zeroing and the cold cache it brings: what extra
faults can explain of an item's extra time (``faults_pay``; BENCHMARKS.md, "The allocator: the program users
run")."""

SUBSTANTIAL_SHARE = 1 / 3
"""A change that puts this share of the new side's processes more than the old side's into the slow state, and makes
them slower beyond the band, fails the total, though the pairs' mean may lie within it: a third of the processes
users run being slower is a regression, not noise."""


@dataclass(frozen=True)
class States:
    """How the pairs' processes fell between two allocator states: ``threshold`` faults a call separates them;
    ``old_high`` of ``old`` old processes and ``new_high`` of ``new`` new ones are in the state above it; the new
    processes in it ran ``high_ratio`` times the old side's processes in the state below it (``low_ratio`` for the
    new processes below it), and took ``extra_faults`` more faults a call; ``p``: how likely as uneven a split
    between the sides is where the change does not decide the state (one-sided, hypergeometric)."""

    threshold: float
    old_high: int
    old: int
    new_high: int
    new: int
    high_ratio: float
    low_ratio: float | None
    extra_faults: float
    p: float

    @property
    def moved(self) -> float:
        """The share of the new side's processes in the slow state beyond the old side's share."""
        return self.new_high / self.new - self.old_high / self.old

    def line(self) -> str:
        """The states in words, with the counts and the memory facts that explain them."""
        rest = f", x{self.low_ratio:.2f} in the others" if self.low_ratio is not None else ""
        return (
            f"the processes fell into two allocator states: {self.new_high} of {self.new} new and {self.old_high} "
            f"of {self.old} old took over {faults_text(self.threshold)} page faults a call (the allocator handing "
            f"memory back and taking it again); the new ones in that state ran x{self.high_ratio:.2f} "
            f"({self.extra_faults:+,.0f} faults a call){rest}"
        )


def states(old: Sequence[Run], new: Sequence[Run]) -> States | None:
    """The allocator states of the pairs' processes, by the page faults of their plain calls (``Run.faults``): two
    groups ``STATE_GAP`` times and ``STATE_FAULTS`` apart, the slow state above; None where every process is in one
    state, or a process did not read its faults."""
    if not old or not new or any(r.faults is None for r in (*old, *new)):
        return None
    pooled = sorted(float(r.faults or 0) for r in (*old, *new))
    gaps = [
        (math.log(b + STATE_FAULTS) - math.log(a + STATE_FAULTS), a, b)
        for a, b in itertools.pairwise(pooled)
        if b >= STATE_GAP * a and b - a >= STATE_FAULTS
    ]
    if not gaps:
        return None
    _, below, above = max(gaps)
    threshold = math.sqrt(max(below, 1.0) * above)
    high_new = [r for r in new if (r.faults or 0) > threshold]
    low_new = [r for r in new if (r.faults or 0) <= threshold]
    low_old = [r for r in old if (r.faults or 0) <= threshold] or list(old)
    if not high_new:
        return None
    base = statistics.median(r.timed_ns for r in low_old) or 1.0
    old_high = len(old) - sum((r.faults or 0) <= threshold for r in old)
    return States(
        threshold=threshold,
        old_high=old_high,
        old=len(old),
        new_high=len(high_new),
        new=len(new),
        high_ratio=statistics.median(r.timed_ns for r in high_new) / base,
        low_ratio=statistics.median(r.timed_ns for r in low_new) / base if low_new else None,
        extra_faults=statistics.median(r.faults or 0 for r in high_new)
        - statistics.median(r.faults or 0 for r in low_old),
        p=split_chance(len(high_new), len(new), old_high, len(old)),
    )


def split_chance(new_high: int, new: int, old_high: int, old: int) -> float:
    """How likely ``new_high`` or more of ``new`` processes are in the slow state where ``new_high + old_high`` of all
    ``new + old`` are and the side does not matter: the upper tail of the hypergeometric distribution (Fisher's
    exact test, one-sided)."""
    high, total = new_high + old_high, new + old
    ways = math.comb(total, high)
    return sum(math.comb(new, k) * math.comb(old, high - k) for k in range(new_high, min(new, high) + 1)) / ways


def with_states(j: Judgement, found: States | None, *, confidence: float, min_pairs: int = 2) -> Judgement:
    """The total's judgement ``j`` (by the paired rule, or the stored baseline's), decided again where the processes
    split between allocator states: slower where the new side put ``SUBSTANTIAL_SHARE`` more of its processes into
    the slow state than the old side (``min_pairs`` of them at least), the split could not be chance at
    ``confidence``, and those processes ran beyond the band; too noisy to decide where only the chance is not yet
    ruled out (more pairs decide it). Otherwise ``j`` as it is (the total's ``states`` says what it saw)."""
    if found is None:
        return j
    line = found.line()
    beyond = found.high_ratio > 1.0 + j.band and found.new_high >= min_pairs and found.moved >= SUBSTANTIAL_SHARE
    if beyond and found.p <= 1.0 - confidence:
        reason = (
            f"x{found.high_ratio:.2f} in {found.new_high} of {found.new} new processes, beyond band "
            f"+{j.band:.0%} ({j.band_source.value}): a substantial share of the processes users run got slower; "
            f"{line}"
        )
        return replace(j, verdict=Verdict.SLOWER, reason=reason, estimate=found.high_ratio)
    if beyond and j.verdict is not Verdict.SLOWER:
        reason = (
            f"x{found.high_ratio:.2f} in {found.new_high} of {found.new} new processes, beyond band "
            f"+{j.band:.0%} ({j.band_source.value}), but so uneven a split between the sides could still be chance "
            f"(p {found.p:.3f}); more pairs (--fxprof-pairs) decide it; {line}"
        )
        return replace(j, verdict=Verdict.NOISY, reason=reason)
    return j


def memory_of(
    nodes: Sequence[NodeInfo],
    allocated: Sequence[int],
    runs: Sequence[Run],
    members: Iterable[int],
    modules: Iterable[str] = (),
) -> tuple[int | None, float | None]:
    """One side's memory of an item: the bytes its ``members`` (node positions) hold a call (None where the side has
    no bytes), and the page faults its ``modules`` took in the plain call, summed, the median over ``runs`` (None
    where no run read them, or there is no module: an operator type)."""
    idx = list(members)
    held = sum(allocated[i] for i in idx) if allocated and len(allocated) == len(nodes) else None
    paths = list(modules)
    read = [dict(r.module_faults) for r in runs if r.module_faults]
    taken = statistics.median(sum(f.get(p, 0) for p in paths) for f in read) if read and paths else None
    return held, taken


def with_memory(
    a: AggregateVerdict, group: Group, old: BaselineEntry, new: BaselineEntry, pairs: Sequence[tuple[int, int]]
) -> AggregateVerdict:
    """``a`` (the verdict of ``group``, over the nodes ``pairs`` matched) with its memory on each side: its nodes'
    bytes, its modules' page faults."""
    old_idx = [pairs[k][0] for k in group.matched] + list(group.only_old)
    new_idx = [pairs[k][1] for k in group.matched] + list(group.only_new)
    modules = item_modules(a.kind.value, a.where, a.instances)
    before = memory_of(old.nodes, old.allocated, old.runs, old_idx, modules)
    return replace(a, memory=memory(before, memory_of(new.nodes, new.allocated, new.runs, new_idx, modules)))


def memory(before: tuple[int | None, float | None], after: tuple[int | None, float | None]) -> Memory | None:
    """The memory facts of one item from its two sides' ``memory_of`` (None where neither side holds any)."""
    if before == (None, None) and after == (None, None):
        return None
    return Memory(before[0], after[0], before[1], after[1])


def total_memory(
    nodes: Sequence[NodeInfo], allocated: Sequence[int], runs: Sequence[Run]
) -> tuple[int | None, float | None]:
    """One side's memory of the whole call: the bytes every node's outputs hold, and the page faults of its plain
    calls (``Run.faults``, the median over ``runs``; None where none read them)."""
    held = sum(allocated) if allocated and len(allocated) == len(nodes) else None
    read = [r.faults for r in runs if r.faults is not None]
    return held, statistics.median(read) if read else None


def item_modules(kind: str, where: str, instances: Sequence[str]) -> list[str]:
    """The module paths whose page faults an aggregate's memory sums: a module's own path, a pattern's or class's
    instances; none for an operator type."""
    if instances:
        return list(instances)
    return [where] if kind == "module" else []


def node_faults(entry: BaselineEntry) -> dict[str, float]:
    """Each node's page faults in the graphs (``Run.node_faults``), the median over the entry's runs that read them,
    by node key (empty where none did)."""
    read = [r.node_faults for r in entry.runs if len(r.node_faults) == len(entry.nodes)]
    if not read:
        return {}
    return {n.key: statistics.median(f[i] for f in read) for i, n in enumerate(entry.nodes)}


def changed_places(aggregates: Sequence[AggregateVerdict]) -> list[str]:
    """The module subtrees whose code changed (other operations added than removed)."""
    return [a.where for a in aggregates if a.changed and a.kind is Kind.MODULE]


def inside_any(module: str, places: Sequence[str]) -> bool:
    """Whether ``module`` lies in one of ``places`` (module paths; "" the whole model)."""
    return any(not p or module == p or module.startswith(p + ".") for p in places)


HELD = (Verdict.SLOWER, Verdict.NOISY)
"""The verdicts of unchanged items that the faults they took can explain (``held_to_memory``)."""


def held_to_memory(
    nodes: Sequence[NodeVerdict],
    aggregates: Sequence[AggregateVerdict],
    old: BaselineEntry,
    new: BaselineEntry,
    total: TotalVerdict | None = None,
) -> tuple[list[NodeVerdict], list[AggregateVerdict]]:
    """Every node, module, pattern or class slower or too noisy to decide whose own code did not change and whose nodes
    took ``STATE_FAULTS`` or more page faults a call more in the graphs than on the old side, held within its band,
    where some module's code changed or, where none did, the call as the user makes it (``total``) was found not
    slower (then operator types too, which hold no changed code) and, for an item found slower, either its own extra
    time would have shown in that call (``shows_in_call``) or the faults it gained can pay for that time
    (``faults_pay``): memory the changed code holds or frees, or the allocator's state in a process, makes the
    allocator fault in whichever node allocates next, and that node's code is not what changed (BENCHMARKS.md, "The
    allocator: the program users run"). Said in its reason, with the faults."""
    changed = [a for a in aggregates if a.changed]
    before, after = node_faults(old), node_faults(new)
    user_call_kept = total is not None and total.verdict in (Verdict.OK, Verdict.FASTER)
    if not before or not after or not (changed or user_call_kept):
        return list(nodes), list(aggregates)
    places = changed_places(aggregates)

    def extra(keys: Iterable[str]) -> float:
        keys = list(keys)
        return sum(after.get(k, 0.0) for k in keys) - sum(before.get(k, 0.0) for k in keys)

    def held(j: Judgement, faults: float) -> Judgement:
        where = (
            f"where the code of {_named(changed)} changed: the allocator's cost of memory held or freed there"
            if changed
            else f"while the call as the user makes it is x{total.ratio:.3f}, not slower: the allocator's state in "
            "these processes"
            if total is not None
            else ""
        )
        why = f"; but its nodes took {faults:+,.0f} page faults a call in the graphs, {where}, not this code's"
        return replace(j, verdict=Verdict.OK, reason=j.reason + why)

    def kept_by_call(j: Judgement, baseline_ns: float, gained: float) -> bool:
        slower = j.verdict is Verdict.SLOWER
        return not slower or shows_in_call(j, baseline_ns, total) or faults_pay(j, baseline_ns, gained)

    out_nodes = []
    for v in nodes:
        gained = extra([v.node.key])
        hold = v.verdict in HELD and not inside_any(v.node.module, places) and gained >= STATE_FAULTS
        hold = hold and (bool(changed) or kept_by_call(v.judgement, v.baseline_ns, gained))
        out_nodes.append(replace(v, judgement=held(v.judgement, gained)) if hold else v)
    out_aggregates = []
    for a in aggregates:
        gained = extra(m.key for m in a.members)
        hold = a.verdict in HELD and not a.changed and (a.kind is not Kind.OP or not changed) and gained >= STATE_FAULTS
        hold = hold and not (a.kind is Kind.MODULE and inside_any(a.where, places))
        hold = hold and (bool(changed) or kept_by_call(a.judgement, a.baseline_ns, gained))
        out_aggregates.append(replace(a, judgement=held(a.judgement, gained)) if hold else a)
    return out_nodes, out_aggregates


def shows_in_call(j: Judgement, baseline_ns: float, total: TotalVerdict | None) -> bool:
    """Whether an item's extra time (``j``'s ratio over its ``baseline_ns``) is more than the call's band
    (``total``) can hide: only then does the call as the user makes it, found not slower, say by itself that the
    item's code is not slower. A small node's extra falls inside the call's band whether it is the code's or the
    allocator's."""
    if total is None or not total.baseline_ns:
        return False
    return (j.ratio - 1.0) * baseline_ns > total.judgement.band * total.baseline_ns


def faults_pay(j: Judgement, baseline_ns: float, gained: float) -> bool:
    """Whether ``gained`` more page faults a call, at ``FAULT_NS`` each, can pay for an item's extra time (``j``'s
    ratio over its ``baseline_ns``): a slowdown they cannot pay for is more than the allocator's."""
    return (j.ratio - 1.0) * baseline_ns <= gained * FAULT_NS


def _named(changed: Sequence[AggregateVerdict]) -> str:
    names = sorted({f"{a.kind.value} {a.where}" for a in changed})
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


OVERHEAD_TOLERANCE = 0.05
"""The profiler's overhead (the instrumented pass over the plain call) may differ this much between the sides before
the nodes' times are read as carrying a cost of the profiler's own: the node times come from the instrumented pass,
the total from the plain call, and where the instrumented pass alone slowed, an unchanged node that looks slower by
no more than that is the profiler's, not the code's."""


def overheads(runs: Sequence[Run]) -> list[float]:
    """Each run's profiler overhead (its instrumented pass over its plain call; runs that timed none left out)."""
    return [r.instrumented_ns / r.total_ns for r in runs if r.total_ns and r.instrumented_ns]


def overhead_note(before: float | None, after: float | None, tolerance: float = OVERHEAD_TOLERANCE) -> str:
    """What a change of the profiler's overhead between the sides (``before`` and ``after``: instrumented pass over
    plain call) means for the nodes' times; "" where it stayed within ``tolerance`` or a side has none."""
    if not before or not after:
        return ""
    if after > before * (1.0 + tolerance):
        return (
            f"the profiler's overhead grew from x{before:.2f} to x{after:.2f} of the plain call "
            f"(x{after / before:.2f}): the nodes' times on the new side carry that much of the profiler's own, so no "
            "node, module or class whose code did not change fails on it"
        )
    if after * (1.0 + tolerance) < before:
        return (
            f"the plain call slowed more than the instrumented pass (the profiler's overhead x{before:.2f} -> "
            f"x{after:.2f}): part of the extra time is paid where the graphs, which free memory at other points than "
            "eager code, do not pay it, so the nodes' times cannot show it; the memory lines say where it goes"
        )
    return ""


def held_to_overhead(
    nodes: Sequence[NodeVerdict], aggregates: Sequence[AggregateVerdict], total: TotalVerdict
) -> tuple[list[NodeVerdict], list[AggregateVerdict]]:
    """Where the profiler's overhead grew between the sides (``TotalVerdict.overhead_note``; not where it shrank),
    every slower node and aggregate whose code did not change and whose ratio that growth explains (within its band
    once divided by it) held within its band: the instrumented pass alone slowed there, not the code."""
    before, after = total.overhead
    if not total.overhead_note or not before or not after or after <= before:
        return list(nodes), list(aggregates)
    growth = after / before
    places = changed_places(aggregates)

    def explained(j: Judgement) -> bool:
        return j.verdict is Verdict.SLOWER and j.ratio / growth <= 1.0 + j.band

    def held(j: Judgement) -> Judgement:
        why = f"; but the profiler's overhead grew x{growth:.2f} on the new side, which explains it: not the code's"
        return replace(j, verdict=Verdict.OK, reason=j.reason + why)

    out_nodes = [
        replace(v, judgement=held(v.judgement))
        if explained(v.judgement) and not inside_any(v.node.module, places)
        else v
        for v in nodes
    ]
    out_aggregates = [
        replace(a, judgement=held(a.judgement)) if explained(a.judgement) and not a.changed else a for a in aggregates
    ]
    return out_nodes, out_aggregates


ROBUST_PAIRS = 8
"""From this many pairs on, an item whose code did not change and that its pairs leave too noisy to decide is within
its band where the median of its pair ratios is (``held_to_the_median``) ..."""


def held_to_the_median(
    nodes: Sequence[NodeVerdict], aggregates: Sequence[AggregateVerdict]
) -> tuple[list[NodeVerdict], list[AggregateVerdict]]:
    """... : the processes of an unchanged model fall into allocator states that make one node or another pay page
    faults in a few of them (x2 to x5 in a pair, the others within a few percent), which widens the interval of the
    geometric mean past any band however many pairs are added; the median is the ratio most pairs agree on, and a
    minority of processes' allocator state is not the code's (BENCHMARKS.md, "The allocator: the program users run").
    An item whose code changed keeps the mean's verdict: a change can move a share of the processes for real
    (``with_states``)."""

    def hold(j: Judgement) -> Judgement:
        if j.verdict is not Verdict.NOISY or len(j.ratios) < ROBUST_PAIRS:
            return j
        middle = statistics.median(j.ratios)
        if middle > 1.0 + j.band:
            return j
        why = (
            f"; but the median of its pairs, x{middle:.2f}, lies within the band: a minority of processes pay what "
            "the allocator's state costs them, not its code, which did not change"
        )
        return replace(j, verdict=Verdict.OK, reason=j.reason + why)

    places = changed_places(aggregates)
    out_nodes = [v if inside_any(v.node.module, places) else replace(v, judgement=hold(v.judgement)) for v in nodes]
    out_aggregates = [a if a.changed else replace(a, judgement=hold(a.judgement)) for a in aggregates]
    return out_nodes, out_aggregates


def faults_text(value: float) -> str:
    """A count of page faults as people read it: ``1,300``."""
    return f"{value:,.0f}"
