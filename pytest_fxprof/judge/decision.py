"""The gate's decision against a stored baseline: compare a profile with it and say, with reasons, what got slower
(``compare``). Pure, so that every rule can be tested with hand-built numbers; the verdicts are
``records.verdicts``. Must not import torch, pytest or pandas.

The rules, in order:

1. *Mismatch*, nothing judged, where the environments differ on ``Environment.MATCH_FIELDS``, the test's setup is
   not the baseline's, or the reference workload ran beyond ``MACHINE_FACTOR_LIMIT`` of its baseline speed.
2. Nodes pair by signature with a sequence alignment (``moved.align``): an inserted or removed op is a structural
   change, not a shift of every later node.
3. Each node's time is divided by a speed factor from its peers of similar size (``noise.Peers``): drift cancels.
   The slower test divides a slower factor with ``DRIFT_DOUBT`` more of it and a faster one only by
   ``FASTER_CREDIT`` (``Policy.divisor``).
4. Each item's band is ``band.band_for``: the tolerance (``HISTORY_NODE_TOLERANCE`` from ``MIN_RECORDINGS``
   recordings on), ``spread_k`` deviations of its spread within and between recordings (``noise.node_noise``) or
   the floor (``floor_ns``, or ``FLOOR_SHARE`` of the model's time). Slower beyond ``1 + band``; faster below
   ``1 / (1 + band)`` and by more than the floor; a spread band wider than ``NOISY_BAND`` decides nothing. Only
   a node ``noise.large_enough`` fails a test alone; a smaller one warns.
5. Aggregates (``judge.aggregates``: operator types, module subtrees, repeated blocks, classes) are judged the
   same way on their members' summed time, divided by factors from peers outside them, with ``spread_k`` raised
   for their level (``Group.strictness``).
6. The total (the plain call over the reference workload) is banded by the total tolerance and its spread, with
   no floor and no speed factor: it catches slowdowns spread over every node, which 3 and 5 cancel by design.
7. Where a confirmation measured again, an item is slower only if every measurement says so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pytest_fxprof.judge.aggregates import Group, plan
from pytest_fxprof.judge.band import SPREAD_K, band_for
from pytest_fxprof.judge.blame import blame
from pytest_fxprof.judge.memory import (
    OVERHEAD_TOLERANCE,
    held_to_memory,
    held_to_overhead,
    memory,
    overhead_note,
    overheads,
    states,
    total_memory,
    with_memory,
)
from pytest_fxprof.judge.moved import align, held_to_changes, held_to_scopes, node_times, scopes
from pytest_fxprof.judge.noise import (
    NodeNoise,
    Peers,
    RunFactors,
    centres_of,
    large_enough,
    node_noise,
    shrink,
    spread_of,
    weighted_median,
)
from pytest_fxprof.judge.weak import recording_spread
from pytest_fxprof.records.measurement import BaselineEntry, Recording, Run
from pytest_fxprof.records.verdicts import (
    LONE_REASON,
    AggregateVerdict,
    BandSource,
    Comparison,
    Judgement,
    NodeVerdict,
    Status,
    TotalVerdict,
    Verdict,
    conservative,
    settle,
)

NODE_TOLERANCE = 0.15
"""Default smallest band of a node or aggregate (+15 %): it holds the drift between a recording and a later check
that the recording's own spread cannot show (BENCHMARKS.md, "Against a baseline: false alarms, detection and the
default bands")."""

TOTAL_TOLERANCE = 0.10
"""Default smallest band of the model's total (+10 %)."""

DEFAULT_FLOOR_NS = 20_000
"""Changes smaller than this (20 us) never fail a node: timer, dispatch and cache noise live there."""

FLOOR_SHARE = 0.001
"""Nor do changes smaller than this share (0.1 %) of the model's total time."""

NOISY_BAND = 1.0
"""A band set by the measured spread beyond +100 % decides nothing (a tolerance or floor applies however wide)."""

DRIFT_DOUBT = 0.5
"""How much of the drift divided out is itself in doubt (contention is op-specific): a slower item is divided by
its speed factor to the power ``1 + DRIFT_DOUBT``."""

FASTER_CREDIT = 0.0
"""How much of a *faster* speed factor the slower test divides out (``factor ** FASTER_CREDIT``): none, since
peers that got faster are as often a real speed-up elsewhere in the model as a faster machine."""

MACHINE_FACTOR_LIMIT = 2.0
"""A reference workload this many times faster or slower than in the baseline means another machine."""

MIN_RECORDINGS = 3
"""A baseline of at least this many recordings (``--fxprof-history``) has bands learnt from the drift between them:
``HISTORY_NODE_TOLERANCE`` and ``HISTORY_TOTAL_TOLERANCE`` replace the default tolerances."""

HISTORY_NODE_TOLERANCE = 0.05
"""Smallest band of a node or aggregate whose baseline has ``MIN_RECORDINGS`` recordings (+5 %) (BENCHMARKS.md,
"Baseline history")."""

HISTORY_TOTAL_TOLERANCE = 0.03
"""Smallest band of the total whose baseline has ``MIN_RECORDINGS`` recordings (+3 %)."""


@dataclass(frozen=True)
class Policy:
    """The knobs of the decision. Tolerances are relative (0.1 means +10 %)."""

    node_tolerance: float = NODE_TOLERANCE
    total_tolerance: float = TOTAL_TOLERANCE
    floor_ns: float = DEFAULT_FLOOR_NS
    spread_k: float = SPREAD_K
    floor_share: float = FLOOR_SHARE
    drift_doubt: float = DRIFT_DOUBT
    faster_credit: float = FASTER_CREDIT
    history_node_tolerance: float = HISTORY_NODE_TOLERANCE
    """The node tolerance of a baseline with ``MIN_RECORDINGS`` recordings (a user's own tolerance replaces both)."""
    history_total_tolerance: float = HISTORY_TOTAL_TOLERANCE

    def learnt(self, recordings: int) -> Policy:
        """The policy for a baseline of ``recordings`` recordings: from ``MIN_RECORDINGS`` on, its tolerances are
        the history's, since the bands then hold the drift between recordings."""
        if recordings < MIN_RECORDINGS:
            return self
        return replace(self, node_tolerance=self.history_node_tolerance, total_tolerance=self.history_total_tolerance)

    def divisor(self, factor: float) -> float:
        """What an item's time is divided by before the slower test, given its peers' speed factor.

        On a slower machine (factor above 1) the factor and ``drift_doubt`` more of it, on the log scale;
        on a faster one, ``faster_credit`` of it; on a quiet one, nothing.
        """
        if factor >= 1.0:
            return float(factor ** (1.0 + self.drift_doubt))
        return float(max(factor, 1e-9) ** self.faster_credit)


def judge(
    ratios: Sequence[float],
    band: float,
    source: BandSource,
    *,
    scale_ns: float = 0.0,
    note: str = "",
    faster: Sequence[float] | None = None,
    sigma: float | None = None,
    floor: float = 0.0,
) -> Judgement:
    """Slower only if every measurement is beyond the band, faster only if every one is below it (testing
    ``faster``, where given: divided by speed factors below 1 only) and by more than the floor; too noisy where a
    band the spread set is wider than ``NOISY_BAND``."""
    ratios = tuple(ratios)
    quicker = tuple(faster) if faster is not None else ratios
    ratio = conservative(ratios)
    limit = f"band +{band:.0%} ({source.value})"
    lost = f", {scale_ns * (ratio - 1.0) / 1e3:+.1f} us" if scale_ns else ""
    seen = ""
    if len(ratios) > 1:
        seen = " in every measurement (" + ", ".join(f"x{r:.2f}" for r in ratios) + ")"
    if band > NOISY_BAND and source is BandSource.SPREAD:
        verdict, reason = Verdict.NOISY, f"x{ratio:.2f}, but band +{band:.0%} ({source.value}) is too noisy to decide"
    elif min(ratios) > 1.0 + band:
        verdict, reason = Verdict.SLOWER, f"x{ratio:.2f} beyond {limit}{lost}{seen}"
    elif max(quicker) < 1.0 / (1.0 + band) and 1.0 - max(quicker) > floor:
        ratio = conservative(quicker)
        lost = f", {scale_ns * (ratio - 1.0) / 1e3:+.1f} us" if scale_ns else ""
        verdict, reason = Verdict.FASTER, f"x{ratio:.2f} below {limit}{lost}{seen}"
        ratios = quicker
    elif len(ratios) > 1 and ratios[0] > 1.0 + band:
        first = ", ".join(f"x{r:.2f}" for r in ratios)
        verdict, reason = Verdict.OK, f"not confirmed: {first} against {limit}; the first measurement was noise"
    else:
        verdict, reason = Verdict.OK, f"x{ratio:.2f} within {limit}"
    return Judgement(ratios, band, source, verdict, reason + note, sigma, floor)


# Aggregates ---------------------------------------------------------------------------------------------


def regressed(total: TotalVerdict, nodes: Sequence[NodeVerdict], aggregates: Sequence[AggregateVerdict]) -> bool:
    """Whether a comparison fails the test: the total slower, a node that gates alone slower (a smaller one only
    warns), or an aggregate slower. Against a baseline and against a revision alike."""
    return (
        total.verdict is Verdict.SLOWER
        or any(v.verdict is Verdict.SLOWER and v.gates for v in nodes)
        or any(a.verdict is Verdict.SLOWER for a in aggregates)
    )


def _aggregate_sigma(
    recordings: Sequence[Sequence[RunFactors]],
    idx: Sequence[int],
    noise: Sequence[NodeNoise],
    members: frozenset[int],
) -> float | None:
    """An aggregate's deviation across the baseline's processes, within and between its ``recordings`` (each
    process's factors), shrunk toward what its members' own deviations give together."""
    centre = sum(noise[i].centre_ns for i in idx) or 1.0

    def value(run: RunFactors) -> float:
        # divided by the full factors, as node_noise does: the spread that drift leaves
        return _aggregate_ns(run, idx, members, Policy())[2] / centre

    own, dof = spread_of([[value(run) for run in runs] for runs in recordings])
    if own is None:
        return None
    # the members' own deviations, as if independent: what the sum would carry at the least
    prior = math.sqrt(sum((noise[i].centre_ns * (noise[i].sigma or 0.0)) ** 2 for i in idx)) / centre
    return shrink(own, max(dof, len(recordings) - 1), prior)


def _aggregate_ns(
    run: RunFactors, idx: Sequence[int], members: frozenset[int], policy: Policy
) -> tuple[float, float, float, float]:
    """The members' time in ``run`` divided by each one's factor from non-members, three ways, and that factor.

    For the slower test (``policy.divisor(f)``), for the faster test (``min(f, 1)``: a faster machine
    is not a faster aggregate) and in full (for the baseline's spread).
    """
    current, centres = run.current, run.peers.centres
    slow = quick = full = weighted = 0.0
    for i in idx:
        f = run.factor(i, members)
        slow += current[i] / policy.divisor(f)
        quick += current[i] / max(min(f, 1.0), 1e-9)
        full += current[i] / max(f, 1e-9)
        weighted += f * centres[i]
    base = sum(centres[i] for i in idx)
    return slow, quick, full, weighted / base if base else 1.0


# Comparing ----------------------------------------------------------------------------------------------


def _judge_total(recordings: Sequence[Sequence[Run]], runs: Sequence[Run], policy: Policy) -> TotalVerdict:
    """The total against the baseline's newest recording (``recordings[0]``), banded by the spread within and
    between ``recordings``."""
    baseline = recordings[0]
    # Divide by the reference workload only when every run has one; otherwise compare raw passes.
    use_ref = all(r.reference_ns > 0 for r in (*(r for rs in recordings for r in rs), *runs))

    def timed(run: Run) -> float:
        return float(run.timed_ns)

    def per_ref(run: Run) -> float:
        return max(timed(run) / run.reference_ns if use_ref else timed(run), 1e-12)

    centre = float(statistics.median(per_ref(r) for r in baseline))
    sigma, _ = spread_of([[per_ref(r) for r in rs] for rs in recordings])
    band, source = band_for(policy.total_tolerance, sigma, k=policy.spread_k)
    ref_centre = statistics.median(r.reference_ns for r in baseline)

    def uncredited(run: Run) -> float:
        """The run's total over the reference workload, a faster one credited only by ``faster_credit``."""
        if not use_ref:
            return per_ref(run)
        machine = run.reference_ns / ref_centre
        return max(timed(run) / (ref_centre * max(machine, float(machine**policy.faster_credit))), 1e-12)

    # as for the nodes: the slower test divides out a slower machine, never a faster one (a reference workload
    # that sped up more than the model would call an unchanged model slower); the faster test divides out both
    ratios = [uncredited(r) / centre for r in runs]
    faster = [per_ref(r) / centre for r in runs]
    machine = runs[0].reference_ns / ref_centre if use_ref else 1.0
    note = "" if use_ref else " (raw: no reference workload timed)"
    base_total = float(statistics.median(timed(r) for r in baseline))
    verdict = judge(ratios, band, source, note=note, sigma=sigma, faster=faster)
    return TotalVerdict(base_total, timed(runs[0]), machine, verdict)


CAPTURE_CHANGED = "capture: "
"""How the mismatch of a call captured another way than its baseline begins (``capture_changed``)."""


def capture_changed(c: Comparison | None) -> bool:
    """Whether ``c`` could not be judged only because the call was captured another way than its baseline (code
    that symbolic tracing or export no longer captures, a data-dependent branch say): the same setup and machine,
    the model's code changed; its nodes cannot be matched, but the call can be measured against the baseline's
    revision."""
    return (
        c is not None
        and c.status is Status.MISMATCH
        and bool(c.mismatches)
        and all(m.startswith(CAPTURE_CHANGED) for m in c.mismatches)
    )


def mismatches_of(baseline: BaselineEntry, current: BaselineEntry) -> list[str]:
    """Why the two entries cannot be compared (empty when they can)."""
    out = baseline.environment.differences(current.environment)
    if baseline.setup is not None and current.setup is not None:  # a test that measures something else
        out += baseline.setup.differences(current.setup)
    if baseline.capture.method != current.capture.method:
        out.append(f"{CAPTURE_CHANGED}baseline {baseline.capture.method!r}, this run {current.capture.method!r}")
    ref_centre = statistics.median(r.reference_ns for r in baseline.runs)
    run = current.runs[0]
    if ref_centre and run.reference_ns:
        machine = run.reference_ns / ref_centre
        if not 1.0 / MACHINE_FACTOR_LIMIT <= machine <= MACHINE_FACTOR_LIMIT:
            out.append(
                f"machine speed: the reference workload took x{machine:.2f} its baseline time "
                f"(limit x{MACHINE_FACTOR_LIMIT:g}); another or a heavily loaded machine"
            )
    return out


def compare(baseline: BaselineEntry, current: BaselineEntry, policy: Policy) -> Comparison:
    """Decide whether ``current`` (one entry, one run per measurement) is slower than ``baseline``."""
    mismatches = mismatches_of(baseline, current)
    if mismatches:
        return Comparison(Status.MISMATCH, tuple(mismatches), 1.0, len(baseline.runs), (), None, (), ())

    pairs, added, removed = align(baseline.nodes, current.nodes)
    base_idx = [i for i, _ in pairs]
    recordings = [
        [Run(r.total_ns, r.instrumented_ns, r.reference_ns, *_pick(r, base_idx)) for r in rec.runs]
        for rec in learnt_from(baseline, policy)
    ]
    sub_runs = recordings[0]
    policy = policy.learnt(len(recordings))
    centres = centres_of(sub_runs) if pairs else []
    peers = Peers(centres)
    noise = node_noise(sub_runs, peers, recordings[1:]) if pairs else []
    measured = [[float(run.node_ns[j]) for _, j in pairs] for run in current.runs]
    speed = weighted_median([n / c if c else 1.0 for n, c in zip(measured[0], centres, strict=True)], centres)
    factors = [peers.factors(m) for m in measured]
    model_ns = float(statistics.median(r.timed_ns for r in baseline.runs))
    floor_ns = max(policy.floor_ns, policy.floor_share * model_ns)
    busy = sum(centres) or 1.0

    def node_verdict(k: int) -> NodeVerdict:
        c = max(noise[k].centre_ns, 1.0)  # a node that took 0 ns in the baseline is still judged
        ratios = [m[k] / policy.divisor(f[k]) / c for m, f in zip(measured, factors, strict=True)]
        quick = [m[k] / max(min(f[k], 1.0), 1e-9) / c for m, f in zip(measured, factors, strict=True)]
        band, source = band_for(policy.node_tolerance, noise[k].sigma, k=policy.spread_k, floor=floor_ns / c)
        gates = large_enough(c, busy)
        info = current.nodes[pairs[k][1]]
        verdict = judge(ratios, band, source, scale_ns=c, faster=quick, sigma=noise[k].sigma, floor=floor_ns / c)
        divisor = policy.divisor(factors[0][k])
        before = baseline.shapes[pairs[k][0]] if baseline.shapes else ""
        after = current.shapes[pairs[k][1]] if current.shapes else ""
        shapes = (before, after) if before and after and before != after else None
        return NodeVerdict(info, c, measured[0][k], factors[0][k], floor_ns, gates, verdict, divisor, shapes)

    verdicts = tuple(node_verdict(k) for k in range(len(pairs)))
    # each process's factors, shared by every aggregate
    recorded = [[RunFactors(peers, [float(t) for t in run.node_ns]) for run in runs] for runs in recordings]
    now = [RunFactors(peers, m) for m in measured]
    groups = plan(baseline.nodes, current.nodes, pairs, baseline.capture.class_map(), current.capture.class_map())
    aggregates = tuple(
        with_memory(
            _judge_aggregate(
                group,
                recordings=recorded,
                measured=now,
                noise=noise,
                floor_ns=floor_ns,
                policy=policy,
                baseline=baseline,
                current=current,
                pairs=pairs,
                busy=busy,
            ),
            group,
            baseline,
            current,
            pairs,
        )
        for group in groups
    )
    total = _judge_total([rec.runs for rec in learnt_from(baseline, policy)], current.runs, policy)
    found = states(baseline.runs, current.runs)  # said, not decided on: one or two measurements never could be
    total = replace(
        total,
        states=found.line() if found is not None else "",
        memory=memory(
            total_memory(baseline.nodes, baseline.allocated, baseline.runs),
            total_memory(current.nodes, current.allocated, current.runs),
        ),
        overhead=(_median_overhead(baseline.runs), _median_overhead(current.runs)),
    )
    total = replace(total, overhead_note=overhead_note(*total.overhead, tolerance=_overhead_band(baseline.runs)))
    held_verdicts, held_aggregates = held_to_overhead(verdicts, aggregates, total)
    verdicts, aggregates = tuple(held_verdicts), tuple(held_aggregates)
    held_nodes, held = held_to_memory(verdicts, aggregates, baseline, current, total)
    verdicts, aggregates = held_to_scopes(
        scopes(baseline.nodes, current.nodes, pairs), tuple(held_nodes), tuple(held), total
    )
    verdicts, aggregates = held_to_changes(verdicts, aggregates)
    failed = regressed(total, verdicts, aggregates)
    comparison = Comparison(
        status=Status.REGRESSION if failed else Status.PASS,
        mismatches=(),
        speed_factor=speed,
        baseline_processes=len(baseline.runs),
        nodes=verdicts,
        total=total,
        added=tuple(added),
        removed=tuple(removed),
        added_ns=node_times(current, added),
        removed_ns=node_times(baseline, removed),
        aggregates=aggregates,
        measurements=len(current.runs),
        graphs=(baseline.capture.graphs, current.capture.graphs),
        recordings=len(recordings),
        blame=blame(verdicts, aggregates, speed, total) if failed else None,
    )
    return settle(comparison)


def _median_overhead(runs: Sequence[Run]) -> float | None:
    """The profiler's overhead of a side: the median over its runs that timed the plain call too."""
    got = overheads(runs)
    return float(statistics.median(got)) if got else None


def _overhead_band(runs: Sequence[Run]) -> float:
    """How far one measurement's overhead may lie from the baseline's before it says anything: ``OVERHEAD_TOLERANCE``,
    or ``SPREAD_K`` of the baseline processes' spread of it where wider (one process is noisier than a pair's mean)."""
    logs = [math.log(o) for o in overheads(runs)]
    sigma = statistics.stdev(logs) if len(logs) > 1 else 0.0
    return max(OVERHEAD_TOLERANCE, math.exp(SPREAD_K * sigma) - 1.0)


def learnt_from(baseline: BaselineEntry, policy: Policy) -> list[Recording]:
    """The recordings the bands are learnt from: the newest (the centre, whatever its spread), then each earlier one
    measured as it was (``BaselineEntry.comparable_recordings``: the same environment and protocol) and not made on
    a busy machine (``RecordingSpread.weak``), whose spread is a neighbour's, not the runner's drift."""
    newest, *older = baseline.comparable_recordings
    return [newest, *(r for r in older if not recording_spread(baseline.nodes, r.runs, policy).weak)]


def _pick(run: Run, idx: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(run.node_ns[i] for i in idx), tuple(run.node_spread_ns[i] for i in idx)


def _judge_aggregate(
    group: Group,
    *,
    recordings: Sequence[Sequence[RunFactors]],
    measured: Sequence[RunFactors],
    noise: Sequence[NodeNoise],
    floor_ns: float,
    policy: Policy,
    baseline: BaselineEntry,
    current: BaselineEntry,
    pairs: Sequence[tuple[int, int]],
    busy: float,
) -> AggregateVerdict:
    """An aggregate judged on its matched nodes and, where the graph changed, on the time of its nodes that only
    one side holds (the baseline's median, and the current per measurement), divided by the same speed factor as
    its matched nodes; its band's deviations raised for its level (``band.corrected_k``)."""
    idx = list(group.matched)
    members = frozenset(idx)
    gone = sum(float(statistics.median(r.node_ns[i] for r in baseline.runs)) for i in group.only_old)
    new = [float(sum(r.node_ns[j] for j in group.only_new)) for r in current.runs]
    centre = max(sum(noise[i].centre_ns for i in idx) + gone, 1.0)
    sigma = _aggregate_sigma(recordings, idx, noise, members) if idx else None
    band, source = band_for(
        policy.node_tolerance, sigma, k=policy.spread_k, floor=floor_ns / centre, strictness=group.strictness
    )
    sums = [_aggregate_ns(m, idx, members, policy) for m in measured]
    ratios = [(s[0] + extra / policy.divisor(s[3])) / centre for s, extra in zip(sums, new, strict=True)]
    quick = [(s[1] + extra / max(min(s[3], 1.0), 1e-9)) / centre for s, extra in zip(sums, new, strict=True)]
    raw = sum(measured[0].current[i] for i in idx) + new[0]
    verdict = judge(ratios, band, source, scale_ns=centre, faster=quick, sigma=sigma, floor=floor_ns / centre)
    return group.verdict(
        baseline.nodes,
        current.nodes,
        pairs,
        baseline_ns=centre,
        current_ns=raw,
        speed_factor=sums[0][3],
        judgement=verdict,
        divisor=policy.divisor(sums[0][3]),
        gates=large_enough(centre, busy),
    )


# A weak baseline ----------------------------------------------------------------------------------------


def refuse_lone(c: Comparison) -> Comparison:
    """A comparison whose bands a baseline of one process set (``Comparison.lone``) made undecided, nothing judged
    (``LONE_REASON``): its figures stay on record, its verdict does not count. Any other comparison as it is."""
    if not c.lone or c.status is Status.MISMATCH:
        return c
    return replace(c, status=Status.UNDECIDED, noisy_reason=LONE_REASON, blame=None)
