"""The gate's decision: compare a profile with its baseline and say, with reasons, what got slower.

Owns the noise model and the verdict records. Pure: must not import torch, pytest or pandas, so that
every rule can be tested with hand-built numbers.

The rules, in order:

1. Environments must match on ``Environment.MATCH_FIELDS``, and the reference workload (timed beside the
   model, sharing none of its kernels) must run within ``MACHINE_FACTOR_LIMIT`` of its baseline speed.
   Otherwise the verdict is a *mismatch*: no slowdown can be claimed on another machine.
2. Nodes are paired by signature (op, module path, target) with a sequence alignment, so an inserted or
   removed op shows up as a structural change instead of shifting every later node.
3. Node times are divided by a *speed factor* taken from the node's peers: the time-weighted median
   ratio of the nodes of similar size (within ``PEER_SPAN`` of its baseline time, at least
   ``MIN_PEERS`` of them, the node itself excluded). Drift cancels, including contention that slows
   small ops more than large ones; one slow node barely moves its peers' median. Only a slower run is
   divided out (``max(factor, 1)``): on a faster run a node is compared raw, so it is never called
   slower merely because the rest of the model sped up more than it did.
4. Each node's band is the larger of the node tolerance and ``SPREAD_K`` between-process deviations,
   the deviation estimated from the baseline's processes and shrunk toward nodes of similar size
   (``PRIOR_WEIGHT``). A node is slower only if its normalised ratio exceeds ``1 + band`` *and* it lost
   more than the absolute floor (``floor_ns``, or ``FLOOR_SHARE`` of the model's time if larger).
5. The total is the plain forward divided by the reference workload, banded the same way with the
   total tolerance. It catches slowdowns spread over every node, which step 3 cancels by design.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from enum import StrEnum

from pytest_fxprof.records import BaselineEntry, NodeInfo, Run

SPREAD_K = 3.0
"""Band width in between-process standard deviations (log scale): about 1 in 700 one-sided."""

PRIOR_WEIGHT = 4.0
"""Degrees of freedom given to the size-class spread when shrinking one node's own spread toward it."""

DEFAULT_FLOOR_NS = 20_000
"""Changes smaller than this (20 us) never fail a node: timer, dispatch and cache noise live there."""

FLOOR_SHARE = 0.002
"""Nor do changes smaller than this share (0.2 %) of the model's total time."""

PEER_SPAN = 4.0
"""Nodes within this factor of a node's baseline time are its peers for the speed factor."""

MIN_PEERS = 8
"""Fewer peers than this within ``PEER_SPAN``: the nearest in size are taken up to this count."""

MACHINE_FACTOR_LIMIT = 2.0
"""A reference workload this many times faster or slower than in the baseline means another machine."""


class Verdict(StrEnum):
    OK = "ok"
    SLOWER = "slower"
    FASTER = "faster"


class Status(StrEnum):
    PASS = "pass"  # noqa: S105 - a verdict, not a password
    REGRESSION = "regression"
    MISMATCH = "mismatch"


class BandSource(StrEnum):
    TOLERANCE = "tolerance"
    SPREAD = "spread"


@dataclass(frozen=True)
class Policy:
    """The knobs of the decision. Tolerances are relative (0.2 means +20 %)."""

    node_tolerance: float = 0.20
    total_tolerance: float = 0.10
    floor_ns: float = DEFAULT_FLOOR_NS


@dataclass(frozen=True)
class NodeVerdict:
    """The decision for one node present in both baseline and run."""

    node: NodeInfo
    baseline_ns: float
    current_ns: float
    speed_factor: float
    ratio: float
    band: float
    band_source: BandSource
    floor_ns: float
    verdict: Verdict
    reason: str

    @property
    def delta_ns(self) -> float:
        """Time lost (positive) or won after dividing out the (slower-only) speed factor."""
        return self.baseline_ns * (self.ratio - 1.0)


@dataclass(frozen=True)
class TotalVerdict:
    """The decision for the whole model's plain forward, divided by the reference workload."""

    baseline_ns: float
    current_ns: float
    ratio: float
    band: float
    band_source: BandSource
    machine_factor: float
    verdict: Verdict
    reason: str


@dataclass(frozen=True)
class Comparison:
    """Everything the gate decided about one profile."""

    status: Status
    mismatches: tuple[str, ...]
    speed_factor: float
    baseline_processes: int
    nodes: tuple[NodeVerdict, ...]
    total: TotalVerdict | None
    added: tuple[NodeInfo, ...]
    removed: tuple[NodeInfo, ...]

    @property
    def slower(self) -> tuple[NodeVerdict, ...]:
        """Slowed nodes, the most time lost first."""
        hits = [v for v in self.nodes if v.verdict is Verdict.SLOWER]
        return tuple(sorted(hits, key=lambda v: (-v.delta_ns, v.node.key)))

    @property
    def faster(self) -> tuple[NodeVerdict, ...]:
        hits = [v for v in self.nodes if v.verdict is Verdict.FASTER]
        return tuple(sorted(hits, key=lambda v: (v.delta_ns, v.node.key)))

    @property
    def graph_changed(self) -> bool:
        return bool(self.added or self.removed)


def weighted_median(values: Sequence[float], weights: Sequence[float]) -> float:
    """The value at which half the total weight lies on either side (1.0 for no weight)."""
    pairs = sorted((v, w) for v, w in zip(values, weights, strict=True) if w > 0)
    total = sum(w for _, w in pairs)
    if not pairs or total <= 0:
        return 1.0
    half = total / 2
    acc = 0.0
    for k, (value, weight) in enumerate(pairs):
        acc += weight
        if math.isclose(acc, half, rel_tol=1e-12) and k + 1 < len(pairs):
            return (value + pairs[k + 1][0]) / 2  # the weight splits exactly here: the middle of the two
        if acc > half:
            return value
    return pairs[-1][0]  # pragma: no cover - float rounding only


def align(
    baseline: Sequence[NodeInfo], current: Sequence[NodeInfo]
) -> tuple[list[tuple[int, int]], list[NodeInfo], list[NodeInfo]]:
    """Pair nodes by signature in graph order; return (pairs of indices, added, removed)."""
    a = [n.signature for n in baseline]
    b = [n.signature for n in current]
    pairs: list[tuple[int, int]] = []
    added: list[NodeInfo] = []
    removed: list[NodeInfo] = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            pairs.extend(zip(range(i1, i2), range(j1, j2), strict=True))
        else:
            removed.extend(baseline[i1:i2])
            added.extend(current[j1:j2])
    return pairs, added, removed


@dataclass(frozen=True)
class NodeNoise:
    """A node's baseline centre and its between-process deviation on a log scale (None if unknown)."""

    centre_ns: float
    sigma: float | None


def size_class(ns: float) -> int:
    """Nodes within a factor of two of each other share a class (used to pool spread estimates)."""
    return math.floor(math.log2(max(ns, 1.0)))


def node_noise(runs: Sequence[Run]) -> list[NodeNoise]:
    """Per node: the centre across baseline processes and the shrunk between-process deviation."""
    count = len(runs[0].node_ns)
    centres = [float(statistics.median(run.node_ns[i] for run in runs)) for i in range(count)]
    if len(runs) < 2:
        return [NodeNoise(c, None) for c in centres]
    # the same peer factors the comparison divides by, so that the band holds what they leave
    factors = [peer_factors(centres, [float(t) for t in run.node_ns]) for run in runs]
    own: list[float] = []
    for i in range(count):
        logs = [math.log(max(run.node_ns[i], 1) / max(f[i], 1e-9)) for run, f in zip(runs, factors, strict=True)]
        own.append(statistics.stdev(logs))
    by_class: dict[int, list[float]] = defaultdict(list)
    for c, s in zip(centres, own, strict=True):
        by_class[size_class(c)].append(s)
    dof = len(runs) - 1
    out = []
    for c, s in zip(centres, own, strict=True):
        cls = size_class(c)
        neighbours = by_class[cls] + by_class.get(cls - 1, []) + by_class.get(cls + 1, [])
        prior = statistics.median(neighbours)
        shrunk = math.sqrt((dof * s * s + PRIOR_WEIGHT * prior * prior) / (dof + PRIOR_WEIGHT))
        out.append(NodeNoise(c, shrunk))
    return out


def band_for(tolerance: float, sigma: float | None) -> tuple[float, BandSource]:
    """The relative band: the tolerance, or ``SPREAD_K`` deviations where the spread is wider."""
    if sigma is None:
        return tolerance, BandSource.TOLERANCE
    from_spread = math.exp(SPREAD_K * sigma) - 1.0
    if from_spread > tolerance:
        return from_spread, BandSource.SPREAD
    return tolerance, BandSource.TOLERANCE


def peer_factors(centres: Sequence[float], current: Sequence[float]) -> list[float]:
    """Each node's speed factor: the time-weighted median ratio of its peers (see module docstring)."""
    ratios = [cur / c if c else 1.0 for cur, c in zip(current, centres, strict=True)]
    logs = [math.log(max(c, 1.0)) for c in centres]
    span = math.log(PEER_SPAN)
    out = []
    for i, li in enumerate(logs):
        others = sorted((abs(lj - li), j) for j, lj in enumerate(logs) if j != i)
        if not others:
            out.append(1.0)
            continue
        peers = [j for d, j in others if d <= span]
        if len(peers) < MIN_PEERS:
            peers = [j for _, j in others[:MIN_PEERS]]
        out.append(weighted_median([ratios[j] for j in peers], [centres[j] for j in peers]))
    return out


def _classify(
    ratio: float,
    band: float,
    source: BandSource,
    *,
    delta_ns: float | None = None,
    floor_ns: float = 0.0,
    note: str = "",
) -> tuple[Verdict, str]:
    """Slower, faster or within the band; with ``delta_ns``, a change under the floor is always OK."""
    limit = f"band +{band:.0%} ({source.value})"
    beyond, below = ratio > 1.0 + band, ratio < 1.0 / (1.0 + band)
    if delta_ns is not None and (beyond or below) and abs(delta_ns) <= floor_ns:
        side = "beyond" if beyond else "below"
        return Verdict.OK, f"x{ratio:.2f} {side} {limit} but {delta_ns / 1e3:+.1f} us is under the floor{note}"
    if beyond:
        lost = f", {delta_ns / 1e3:+.1f} us > floor" if delta_ns is not None else ""
        return Verdict.SLOWER, f"x{ratio:.2f} beyond {limit}{lost}{note}"
    if below:
        return Verdict.FASTER, f"x{ratio:.2f} below {limit}{note}"
    return Verdict.OK, f"x{ratio:.2f} within {limit}{note}"


def _judge_node(
    info: NodeInfo, noise: NodeNoise, current_ns: float, *, speed: float, floor_ns: float, policy: Policy
) -> NodeVerdict:
    divisor = max(speed, 1.0)
    normalised = current_ns / divisor
    ratio = normalised / max(noise.centre_ns, 1.0)  # a node that took 0 ns in the baseline is still judged
    band, source = band_for(policy.node_tolerance, noise.sigma)
    verdict, reason = _classify(ratio, band, source, delta_ns=normalised - noise.centre_ns, floor_ns=floor_ns)
    return NodeVerdict(info, noise.centre_ns, current_ns, speed, ratio, band, source, floor_ns, verdict, reason)


def _judge_total(baseline: Sequence[Run], current: Run, policy: Policy) -> TotalVerdict:
    # Divide by the reference workload only when every run has one; otherwise compare raw totals.
    use_ref = current.reference_ns > 0 and all(r.reference_ns > 0 for r in baseline)

    def per_ref(run: Run) -> float:
        return run.total_ns / run.reference_ns if use_ref else float(run.total_ns)

    base_norm = [max(per_ref(r), 1e-12) for r in baseline]
    centre = float(statistics.median(base_norm))
    sigma = statistics.stdev(math.log(v) for v in base_norm) if len(base_norm) > 1 else None
    band, source = band_for(policy.total_tolerance, sigma)
    ratio = per_ref(current) / centre
    ref_centre = statistics.median(r.reference_ns for r in baseline)
    machine = current.reference_ns / ref_centre if use_ref else 1.0
    base_total = float(statistics.median(r.total_ns for r in baseline))
    note = "" if use_ref else " (raw: no reference workload timed)"
    verdict, reason = _classify(ratio, band, source, note=note)
    return TotalVerdict(base_total, float(current.total_ns), ratio, band, source, machine, verdict, reason)


def compare(baseline: BaselineEntry, current: BaselineEntry, policy: Policy) -> Comparison:
    """Decide whether ``current`` (a one-run entry) is slower than ``baseline``."""
    run = current.runs[0]
    mismatches = baseline.environment.differences(current.environment)
    if baseline.capture.method != current.capture.method:
        mismatches.append(f"capture: baseline {baseline.capture.method!r}, this run {current.capture.method!r}")
    ref_centre = statistics.median(r.reference_ns for r in baseline.runs)
    if ref_centre and run.reference_ns:
        machine = run.reference_ns / ref_centre
        if not 1.0 / MACHINE_FACTOR_LIMIT <= machine <= MACHINE_FACTOR_LIMIT:
            mismatches.append(
                f"machine speed: the reference workload took x{machine:.2f} its baseline time "
                f"(limit x{MACHINE_FACTOR_LIMIT:g}); another or a heavily loaded machine"
            )
    if mismatches:
        return Comparison(Status.MISMATCH, tuple(mismatches), 1.0, len(baseline.runs), (), None, (), ())

    pairs, added, removed = align(baseline.nodes, current.nodes)
    noise = node_noise(baseline.runs)
    centres = [noise[i].centre_ns for i, _ in pairs]
    now = [float(run.node_ns[j]) for _, j in pairs]
    speed = weighted_median([n / c if c else 1.0 for n, c in zip(now, centres, strict=True)], centres)
    factors = peer_factors(centres, now)
    model_ns = float(statistics.median(r.total_ns for r in baseline.runs))
    floor_ns = max(policy.floor_ns, FLOOR_SHARE * model_ns)
    verdicts = tuple(
        _judge_node(current.nodes[j], noise[i], n, speed=f, floor_ns=floor_ns, policy=policy)
        for (i, j), n, f in zip(pairs, now, factors, strict=True)
    )
    total = _judge_total(baseline.runs, run, policy)
    failed = total.verdict is Verdict.SLOWER or any(v.verdict is Verdict.SLOWER for v in verdicts)
    return Comparison(
        status=Status.REGRESSION if failed else Status.PASS,
        mismatches=(),
        speed_factor=speed,
        baseline_processes=len(baseline.runs),
        nodes=verdicts,
        total=total,
        added=tuple(added),
        removed=tuple(removed),
    )
