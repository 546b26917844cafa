"""The A/B decision against a revision: old and new code measured in pairs of fresh processes, judged by their
ratios per pair (``compare_pairs``). Each pair runs one old and one new process back to back (``against.rounds``),
so drift hits both alike and cancels in the ratio: no speed factor, no reference workload. Pure.
Must not import torch, pytest or pandas.

For each node both sides hold, each aggregate (``aggregates.plan``) and the total:

1. per pair, ``x = log(new / old)`` of each side's median over its passes (an aggregate sums its members'; the
   total is the plain call, whose memory and allocator states ``judge.memory`` reads);
2. the estimate is ``exp(mean(x))``, its one-sided interval Student's t at ``CONFIDENCE`` over the pairs;
3. *slower* when the interval lies above 1 and the estimate beyond ``1 + band`` (``band.band_for``: the node or
   total tolerance, ``CHANGED_TOLERANCE`` for a module whose code changed, or the floor where larger); a module
   whose code changed is also slower where the operations it brought in are slower than those they replaced
   (``replaced``); *faster* mirrors it and must gain more than the floor;
4. *too noisy to decide* when neither holds and the estimate lies beyond the band, and the total also when its
   interval at ``RESOLVE_CONFIDENCE`` is wider than ``RESOLVE`` bands; more pairs are measured while an item that
   gates is undecided (``needs_more``); an item within its band is within it however wide its interval;
5. a test passes from ``MIN_PASSING_PAIRS`` pairs and fails from ``MIN_DECIDING_PAIRS``; only a node large enough
   (``noise.large_enough``) fails a test alone.

BENCHMARKS.md, "Against a revision: how many pairs, at what confidence" holds the figures behind the defaults.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pytest_fxprof.judge.aggregates import Group, plan
from pytest_fxprof.judge.band import band_for, corrected_confidence, t_quantile
from pytest_fxprof.judge.blame import blame
from pytest_fxprof.judge.decision import regressed
from pytest_fxprof.judge.memory import (
    OVERHEAD_TOLERANCE,
    held_to_memory,
    held_to_overhead,
    held_to_the_median,
    memory,
    overhead_note,
    overheads,
    states,
    total_memory,
    with_memory,
    with_states,
)
from pytest_fxprof.judge.moved import align, held_to_changes, held_to_scopes, node_times, scopes
from pytest_fxprof.judge.noise import large_enough
from pytest_fxprof.records.measurement import BaselineEntry, Run
from pytest_fxprof.records.verdicts import (
    REPLACED,
    AggregateVerdict,
    BandSource,
    Comparison,
    Judgement,
    Kind,
    NodeVerdict,
    Status,
    TotalVerdict,
    Verdict,
    settle,
)

PAIRED_NODE_TOLERANCE = 0.05
"""Default band of a node or aggregate against a revision (+5 %): the smallest slowdown that fails."""

PAIRED_TOTAL_TOLERANCE = 0.03
"""Default band of the model's total against a revision (+3 %)."""

CHANGED_TOLERANCE = 0.01
"""Default band of a module, pattern or class whose code changed against a revision (+1 %; never wider than the
node band): a slowdown where operations came or went is the change's (BENCHMARKS.md, "The band where the code
changed")."""

CONFIDENCE = 0.999
"""One-sided confidence that a change is real before it counts; the band cuts false alarms further."""

MIN_PAIRS = 2
"""Fewer pairs than this carry no spread: every item is too noisy to decide."""

RESOLVE = 2.0
"""The slowdown of the whole model, in bands, that the pairs must be able to tell from none: a total whose interval
at ``RESOLVE_CONFIDENCE`` is wider than that on either side is too noisy to decide."""

RESOLVE_CONFIDENCE = 0.99
"""The confidence of the total's interval that ``RESOLVE`` bounds: how sure the pairs must be that they could see
a slowdown, not that one is real (BENCHMARKS.md, "The total's resolve at 99 %")."""


PAIR_SPREAD = 0.01
"""The usual spread of the total's log ratio between pairs of an unchanged check (sample standard deviation),
the median over the checks of ``bench/pair_spread.py`` (BENCHMARKS.md, "The fewest pairs"). Sets
``MIN_DECIDING_PAIRS``."""


def can_decide(
    pairs: int, spread: float = PAIR_SPREAD, band: float = PAIRED_TOTAL_TOLERANCE, confidence: float = CONFIDENCE
) -> bool:
    """Whether ``pairs`` pairs whose log ratios spread by ``spread`` can decide a total of ``band``: its interval
    at ``confidence`` is then no wider than ``RESOLVE`` bands (``judge_pairs``)."""
    if pairs < MIN_PAIRS:
        return False
    return t_quantile(confidence, pairs - 1) * spread / math.sqrt(pairs) <= math.log1p(RESOLVE * band)


@dataclass(frozen=True)
class PairedPolicy:
    """The knobs of the paired rule. Tolerances are relative (0.05 means +5 %)."""

    node_tolerance: float = PAIRED_NODE_TOLERANCE
    total_tolerance: float = PAIRED_TOTAL_TOLERANCE
    changed_tolerance: float = CHANGED_TOLERANCE
    floor_ns: float = 20_000.0
    floor_share: float = 0.001
    confidence: float = CONFIDENCE


MIN_DECIDING_PAIRS = next(n for n in range(MIN_PAIRS, 100) if can_decide(n))
"""The fewest pairs a slowdown fails a test on: the fewest that decide the total of a check whose pairs spread as
usual (``PAIR_SPREAD``) at ``CONFIDENCE``. Fewer can never decide it there: with 2 pairs, t is 318 and
the pairs would have to agree within 0.03 %."""

MIN_PASSING_PAIRS = next(n for n in range(MIN_PAIRS, 100) if can_decide(n, confidence=RESOLVE_CONFIDENCE))
"""The fewest pairs a test passes on, and where a check starts (``--fxprof-pairs``): the fewest that resolve the
total of a check whose pairs spread as usual at ``RESOLVE_CONFIDENCE``. A total so resolved whose estimate is within
its band is within it; failing still takes ``MIN_DECIDING_PAIRS`` (BENCHMARKS.md, "A start at 3 pairs")."""


@dataclass(frozen=True)
class Interval:
    """The log ratios of one item, pair by pair, and what they say."""

    logs: tuple[float, ...]
    confidence: float

    @functools.cached_property
    def mean(self) -> float:
        return math.fsum(self.logs) / len(self.logs) if self.logs else 0.0

    @functools.cached_property
    def half_width(self) -> float:
        n = len(self.logs)
        if n < MIN_PAIRS:
            return math.inf
        spread = math.sqrt(math.fsum((x - self.mean) ** 2 for x in self.logs) / (n - 1))
        return t_quantile(self.confidence, n - 1) * spread / math.sqrt(n)

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width


def judge_pairs(
    old: Sequence[float],
    new: Sequence[float],
    band: float,
    source: BandSource,
    *,
    confidence: float = CONFIDENCE,
    scale_ns: float = 0.0,
    floor: float = 0.0,
    resolve: bool = False,
) -> Judgement:
    """The verdict on one item from its old and new times, pair by pair (see the module's rule); ``resolve``
    also holds the item too noisy when its pairs could not tell a slowdown of ``RESOLVE`` bands from none."""
    ratios = tuple(max(b, 1.0) / max(a, 1.0) for a, b in zip(old, new, strict=True))
    interval = Interval(tuple(math.log(r) for r in ratios), confidence)
    estimate = math.exp(interval.mean)
    limit = f"band +{band:.0%} ({source.value})"
    level = f"{confidence:.1%}".rstrip("0").rstrip(".")
    span = f"{len(ratios)} pairs, interval x{_shown(interval.low)}..x{_shown(interval.high)} at {level}"
    lost = f", {scale_ns * (estimate - 1.0) / 1e3:+.1f} us" if scale_ns else ""
    edge = math.log1p(band)
    # one pair shows no spread to disagree with: the words say what is missing, as its unbounded interval does
    doubt = "the pairs disagree too much" if len(ratios) > 1 else "a single pair is too few"
    if interval.low > 0 and interval.mean > edge and len(ratios) < MIN_DECIDING_PAIRS:
        verdict, reason = (
            Verdict.NOISY,
            f"x{estimate:.2f} beyond {limit}{lost} ({span}), but a slowdown needs {MIN_DECIDING_PAIRS} pairs to "
            "fail a test: more pairs decide it",
        )
    elif interval.low > 0 and interval.mean > edge:
        verdict, reason = Verdict.SLOWER, f"x{estimate:.2f} beyond {limit}{lost} ({span})"
    elif interval.high < 0 and interval.mean < -edge and 1.0 - estimate > floor:
        verdict, reason = Verdict.FASTER, f"x{estimate:.2f} below {limit}{lost} ({span})"
    elif interval.mean > edge and min(ratios) > 1.0 + band:
        # no pair disagrees: they are too few for the confidence asked, which is what the words must say
        verdict, reason = (
            Verdict.NOISY,
            f"x{estimate:.2f} beyond {limit}{lost}, every pair beyond it (x{min(ratios):.2f} to "
            f"x{max(ratios):.2f}), but {len(ratios)} pairs are too few to confirm it at {level} ({span}); more "
            "pairs (--fxprof-pairs) decide it",
        )
    elif interval.mean > edge:
        verdict, reason = (
            Verdict.NOISY,
            f"x{estimate:.2f} beyond {limit}{lost}, but {doubt} to confirm it ({span}); "
            "more pairs (--fxprof-pairs) or a quieter machine decide it",
        )
    elif resolve and Interval(interval.logs, min(confidence, RESOLVE_CONFIDENCE)).half_width > math.log1p(
        RESOLVE * band
    ):
        verdict, reason = (
            Verdict.NOISY,
            f"x{estimate:.2f}, but {doubt} to tell a slowdown of +{RESOLVE * band:.0%} "
            f"from none against {limit} ({span}); more pairs (--fxprof-pairs) or a quieter machine decide it",
        )
    elif resolve and len(ratios) < MIN_PASSING_PAIRS:
        verdict, reason = (
            Verdict.NOISY,
            f"x{estimate:.2f}, but the total needs {MIN_PASSING_PAIRS} pairs to be decided ({span}): more pairs "
            "decide it",
        )
    elif interval.mean < -edge:
        verdict, reason = Verdict.OK, f"x{estimate:.2f}, faster than {limit} but not confirmed ({span})"
    else:
        verdict, reason = Verdict.OK, f"x{estimate:.2f} within {limit} ({span})"
    return Judgement(ratios, band, source, verdict, reason, None, floor, estimate=estimate)


def _shown(log_ratio: float) -> str:
    """A bound of an interval as a ratio, ``inf`` where it lies beyond any ratio a float holds (a few pairs that
    disagree by orders of magnitude: an item one side measured at next to nothing)."""
    if log_ratio >= LOG_MAX:
        return "inf"
    ratio = math.exp(log_ratio)
    return f"{ratio:.2f}" if ratio < 1000 else f"{ratio:.3g}"


LOG_MAX = math.log(1e300)
"""The largest log ratio shown as a number."""


def undecided(j: Judgement) -> bool:
    """Whether more pairs could change the verdict that matters: the item is too noisy to decide."""
    return j.verdict is Verdict.NOISY


def replaced(module: Judgement, swap: Judgement) -> Judgement:
    """A module whose code changed, judged also by the operations its change brought in against those it took out
    (``swap``, each side's nodes that the other lacks, pair by pair): slower where they are, at the module's band and
    its absolute floor, and the module holding them did not come out faster (``module``, not slower on its own).

    Where the code changed, its module's ratio dilutes what the change costs with the spread of the operations that
    did not change: a ``Linear`` unfused into ``matmul`` and ``add`` costs its operations 5 % and its attention module
    1 %, which the module's pairs cannot tell from none. The operations that replaced others are measured in the same
    pairs, so drift cancels in their ratio as in any item's; a neutral edit replaces no operation, and an unchanged
    graph has none, so neither is judged by this."""
    if swap.verdict is not Verdict.SLOWER:
        return module
    return replace(module, verdict=Verdict.SLOWER, reason=module.reason + REPLACED + swap.reason, replaced=swap.reason)


def _homes(groups: Sequence[Group]) -> set[int]:
    """The ids of the aggregates that ``replaced`` judges, among those holding operations that replaced others: a
    module subtree where some of them sit (it is the smallest module holding them: the attention whose ``Linear`` was
    unfused), a pattern or class where it is the smallest aggregate holding the same ones (the attentions' pattern).
    Not the block, the list of blocks or the model around them, whose own ratio would then count as found slower
    where only the operations inside them were."""
    replacing = [g for g in groups if g.only_old and g.only_new and g.kind is not Kind.OP]

    def size(g: Group) -> int:
        return len(g.matched) + len(g.only_old) + len(g.only_new)

    owner: dict[tuple[str, int], Group] = {}
    smallest: dict[tuple[frozenset[int], frozenset[int]], int] = {}
    for g in replacing:
        key = (frozenset(g.only_old), frozenset(g.only_new))
        smallest[key] = min(smallest.get(key, size(g)), size(g))
        if g.kind is Kind.MODULE:
            for node in [("old", i) for i in g.only_old] + [("new", j) for j in g.only_new]:
                if node not in owner or size(g) < size(owner[node]):
                    owner[node] = g
    owners = {id(g) for g in owner.values()}
    return {
        id(g)
        for g in replacing
        if id(g) in owners
        or (g.kind is not Kind.MODULE and smallest[(frozenset(g.only_old), frozenset(g.only_new))] == size(g))
    }


def _medians(runs: Sequence[Run], idx: Sequence[int]) -> list[float]:
    """Each run's summed medians of the nodes ``idx``."""
    return [float(sum(run.node_ns[i] for i in idx)) for run in runs]


def _judge_total(old: BaselineEntry, new: BaselineEntry, policy: PairedPolicy) -> TotalVerdict:
    """The total, the plain call pair by pair (``Run.timed_ns``), decided again where the processes split between
    allocator states (``judge.memory.with_states``), with the memory of the whole call and the profiler's overhead on
    each side; where the overhead grew beyond ``OVERHEAD_TOLERANCE`` (the instrumented pass slowed more than the
    plain call), a note that the nodes' times carry it."""
    old_runs, new_runs = old.runs, new.runs
    before_total = [float(r.timed_ns) for r in old_runs]
    after_total = [float(r.timed_ns) for r in new_runs]
    band, source = policy.total_tolerance, BandSource.TOLERANCE
    judgement = judge_pairs(before_total, after_total, band, source, confidence=policy.confidence, resolve=True)
    found = states(old_runs, new_runs)
    judgement = with_states(judgement, found, confidence=policy.confidence)
    facts = memory(total_memory(old.nodes, old.allocated, old_runs), total_memory(new.nodes, new.allocated, new_runs))
    before_o, after_o = overheads(old_runs), overheads(new_runs)
    shown = (statistics.median(before_o) if before_o else None, statistics.median(after_o) if after_o else None)
    note = ""
    if len(before_o) == len(after_o) == len(old_runs) >= MIN_PAIRS:
        # judged as times are (scaled up: judge_pairs reads values under 1 as 1, a time of 0 ns)
        scaled = [o * 1e6 for o in before_o], [o * 1e6 for o in after_o]
        grown = judge_pairs(*scaled, OVERHEAD_TOLERANCE, BandSource.TOLERANCE, confidence=policy.confidence)
        if grown.verdict in (Verdict.SLOWER, Verdict.FASTER):
            note = overhead_note(shown[0], shown[1])
    return TotalVerdict(
        statistics.median(before_total),
        statistics.median(after_total),
        1.0,
        judgement,
        memory=facts,
        overhead=shown,
        overhead_note=note,
        states=found.line() if found is not None else "",
    )


CORROBORATE = 0.5
"""A module whose code changed is found slower at the narrow ``CHANGED_TOLERANCE``, or by the operations that replaced
others (``replaced``), where its pairs show that much; within the band unchanged code gets, that fails the test only
where the call as the user makes it got slower by this share of the total's band too (+1.5 % at +3 %). Such a change
can cost its module a few percent in the pairs and the user's program nothing it can measure (BENCHMARKS.md,
"The allocator: the program users run")."""


def held_to_the_call(
    aggregates: Sequence[AggregateVerdict], total: TotalVerdict, policy: PairedPolicy
) -> list[AggregateVerdict]:
    """``aggregates`` with every slower one whose code changed, and whose ratio lies within the node band, held within
    its band where the total (the plain call) got slower by less than ``CORROBORATE`` of its band: said in its
    reason."""
    if total.ratio >= 1.0 + CORROBORATE * total.band:
        return list(aggregates)

    def held(a: AggregateVerdict) -> AggregateVerdict:
        why = (
            f"; but the call as the user makes it is x{total.ratio:.3f}, within {CORROBORATE:.0%} of the total's band: "
            "the change costs this code, not the user's program by as much as the gate can see"
        )
        return replace(a, judgement=replace(a.judgement, verdict=Verdict.OK, reason=a.judgement.reason + why))

    narrow = 1.0 + policy.node_tolerance
    return [held(a) if a.verdict is Verdict.SLOWER and a.changed and a.ratio <= narrow else a for a in aggregates]


def compare_pairs(old: BaselineEntry, new: BaselineEntry, policy: PairedPolicy, *, against: str) -> Comparison:
    """Decide whether ``new`` got slower than ``old``: their runs are paired by position (run ``i`` of each side
    made one pair). ``against`` names the old side (``origin/main (1a2b3c4)``) in every line that says slower."""
    if len(old.runs) != len(new.runs) or not old.runs:
        raise ValueError(f"paired runs: {len(old.runs)} old and {len(new.runs)} new; each pair needs one of each")
    mismatches = old.setup.differences(new.setup) if old.setup is not None and new.setup is not None else []
    if mismatches:
        mismatches = [m.replace("in the baseline", f"at {against}") for m in mismatches]
        return Comparison(
            Status.MISMATCH,
            tuple(mismatches),
            1.0,
            len(old.runs),
            (),
            None,
            (),
            (),
            against=against,
            pairs=len(old.runs),
        )
    pairs, added, removed = align(old.nodes, new.nodes)
    old_runs, new_runs = old.runs, new.runs
    model_ns = statistics.median(float(r.timed_ns) for r in old_runs)
    floor_ns = max(policy.floor_ns, policy.floor_share * model_ns)
    centres = [statistics.median(float(r.node_ns[i]) for r in old_runs) for i, _ in pairs]
    busy = sum(centres) or 1.0

    def item(
        old_idx: Sequence[int], new_idx: Sequence[int], tolerance: float, strictness: float = 1.0
    ) -> tuple[Judgement, float, float]:
        before, after = _medians(old_runs, old_idx), _medians(new_runs, new_idx)
        centre = max(statistics.median(before), 1.0)
        band, source = band_for(tolerance, None, floor=floor_ns / centre)
        confidence = corrected_confidence(policy.confidence, strictness)
        j = judge_pairs(before, after, band, source, confidence=confidence, scale_ns=centre, floor=floor_ns / centre)
        return j, centre, statistics.median(after)

    verdicts = []
    for k, (i, j_new) in enumerate(pairs):
        judgement, centre, now = item([i], [j_new], policy.node_tolerance)
        gates = large_enough(centres[k], busy)
        before_shape = old.shapes[i] if old.shapes else ""
        after_shape = new.shapes[j_new] if new.shapes else ""
        shapes = (before_shape, after_shape) if before_shape and after_shape and before_shape != after_shape else None
        verdicts.append(NodeVerdict(new.nodes[j_new], centre, now, 1.0, floor_ns, gates, judgement, 1.0, shapes))
    aggregates = []
    groups = plan(old.nodes, new.nodes, pairs, old.capture.class_map(), new.capture.class_map())
    homes = _homes(groups)
    for g in groups:
        # a module's time on each side: its matched nodes and those only one side holds (a changed graph)
        old_idx = [pairs[k][0] for k in g.matched] + list(g.only_old)
        new_idx = [pairs[k][1] for k in g.matched] + list(g.only_new)
        tolerance = policy.node_tolerance
        changed = g.code_changed(old.nodes, new.nodes)
        if changed:
            tolerance = min(tolerance, policy.changed_tolerance)
        judgement, centre, now = item(old_idx, new_idx, tolerance, g.strictness)
        if changed and id(g) in homes and judgement.verdict is not Verdict.SLOWER and judgement.ratio > 1.0:
            judgement = replaced(judgement, item(g.only_old, g.only_new, tolerance, g.strictness)[0])
        a = g.verdict(
            old.nodes,
            new.nodes,
            pairs,
            baseline_ns=centre,
            current_ns=now,
            speed_factor=1.0,
            judgement=judgement,
            divisor=1.0,
            gates=large_enough(centre, busy),
        )
        aggregates.append(with_memory(a, g, old, new, pairs))
    total = _judge_total(old, new, policy)
    verdicts, aggregates = held_to_overhead(verdicts, aggregates, total)
    verdicts, aggregates = held_to_memory(verdicts, aggregates, old, new, total)
    verdicts, aggregates = held_to_the_median(verdicts, aggregates)
    aggregates = held_to_the_call(aggregates, total, policy)
    held_nodes, held = held_to_scopes(scopes(old.nodes, new.nodes, pairs), verdicts, aggregates, total)
    held_nodes, held = held_to_changes(held_nodes, held)
    failed = regressed(total, held_nodes, held)
    comparison = Comparison(
        status=Status.REGRESSION if failed else Status.PASS,
        mismatches=(),
        speed_factor=1.0,
        baseline_processes=len(old_runs),
        nodes=held_nodes,
        total=total,
        added=tuple(added),
        removed=tuple(removed),
        added_ns=node_times(new, added),
        removed_ns=node_times(old, removed),
        aggregates=held,
        measurements=1,
        graphs=(old.capture.graphs, new.capture.graphs),
        against=against,
        pairs=len(old_runs),
        blame=blame(held_nodes, held, total=total) if failed else None,
    )
    return settle(comparison)


def needs_more(c: Comparison) -> bool:
    """Whether another pair could still change how the test ends, or what its failure names: an item that gates
    is undecided, and no node or aggregate has failed the test yet (a test that fails on its total alone goes on
    until the pairs name what got slower, or are done)."""
    if c.status is Status.MISMATCH or c.slower or c.slower_aggregates:
        return False
    items = [v.judgement for v in c.nodes if v.gates] + [a.judgement for a in c.aggregates if a.gates]
    if c.total is not None:
        items.append(c.total.judgement)
    return any(undecided(j) for j in items)
