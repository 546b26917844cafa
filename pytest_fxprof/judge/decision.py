"""The gate's decision: compare a profile with its baseline and say, with reasons, what got slower.

Owns the noise model and the rules; the verdict records it returns are ``records.verdicts``. Pure, so that
every rule can be tested with hand-built numbers. Must not import torch, pytest or pandas.

The rules, in order:

1. Environments must match on ``Environment.MATCH_FIELDS``, the test's setup (its inputs' signatures and the
   module's mode) must be the baseline's, and the reference workload (timed beside the
   model, sharing none of its kernels) must run within ``MACHINE_FACTOR_LIMIT`` of its baseline speed.
   Otherwise the verdict is a *mismatch*: no slowdown can be claimed on another machine or of another setup.
2. Nodes are paired by signature (op, module path, target) with a sequence alignment, so an inserted or
   removed op shows up as a structural change instead of shifting every later node.
3. Node times are divided by a *speed factor* taken from the node's peers: the time-weighted median
   ratio of the nodes of similar size (within ``PEER_SPAN`` of its baseline time, at least
   ``MIN_PEERS`` and at most ``MAX_PEERS`` of them, the nearest in size, the node itself excluded).
   Drift cancels, including contention that slows small ops more than large ones; one slow node
   barely moves its peers' median. For the slower test
   a slower factor is divided out with ``DRIFT_DOUBT`` more of it (contention is op-specific, so the
   drift is itself in doubt); a faster one is not (``FASTER_CREDIT``), so a node is never called slower
   because the rest of the model sped up more than it did (``Policy.divisor``).
4. Each node's band is the largest of the node tolerance, ``Policy.spread_k`` between-process
   deviations (estimated from the baseline's processes and shrunk toward nodes of similar size,
   ``PRIOR_WEIGHT``; with a history of recordings, the drift between recordings is added to the spread
   within them, and from ``MIN_RECORDINGS`` recordings on the smaller ``HISTORY_NODE_TOLERANCE`` applies,
   since the bands then hold the drift the runner showed) and the absolute floor (``floor_ns``, or
   ``FLOOR_SHARE`` of the model's time if larger). A node is slower when its normalised ratio exceeds
   ``1 + band``; faster when, divided by its factor only where that is below 1, it is below
   ``1 / (1 + band)`` and gained more than the floor. Only a node of ``GATING_NS`` or ``GATING_SHARE``
   of the summed node time fails a test alone; a smaller one is a warning, and its slowdown is caught by
   the aggregates it belongs to. A band set by the measured spread wider than ``NOISY_BAND`` cannot
   decide anything: the item is reported as too noisy, never passed or failed on it. A tolerance or floor
   band is applied as it is.
5. *Aggregates* sum nodes that carry less noise together than alone (``judge.aggregates``): every operator
   type (all ``BatchNorm2d``, all ``add``), every module subtree at every depth (``layer3``, ``layer3.0``,
   ``encoder.layer.3.attention.self``), every repeated block's instances together (``transformer.h.*.mlp``)
   and every module class's (``LayerNorm``). Each holds its nodes on both sides: where the graph changed, the
   nodes only one side holds count in the modules they sit in. Their matched members are divided by speed
   factors taken from peers *outside* the aggregate, so a slowdown of every BatchNorm is not mistaken for a
   machine that slows small ops. Bands as in 4, with ``spread_k`` raised where the aggregate's level tests more
   than ``aggregates.LEVEL_ITEMS`` of them.
6. The total is the plain call as the user makes it divided by the reference workload, banded by the larger of the
   total tolerance (``HISTORY_TOTAL_TOLERANCE`` from ``MIN_RECORDINGS`` recordings on) and ``spread_k``
   deviations, within and between recordings (no floor, no speed factor). It catches slowdowns spread
   over every node, which 3 and 5 cancel by design. As in 3, the slower test divides out a slower reference
   but a faster one only by ``FASTER_CREDIT``; the faster test divides out both.
7. A current entry may hold several measurements (a confirmation re-measures a flagged profile). Each
   item is slower only if *every* measurement says so, faster only if every one does; the verdict
   carries all the ratios, so whether the confirmation agreed is on record.
"""

from __future__ import annotations

import functools
import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from difflib import SequenceMatcher

from pytest_fxprof.judge.aggregates import Group, corrected_k, plan
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
from pytest_fxprof.judge.moved import held_to_changes, held_to_scopes, scopes
from pytest_fxprof.records.measurement import BaselineEntry, NodeInfo, Recording, Run
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
"""Default smallest band of a node or aggregate (+15 %). Chosen on the measured trade-off in BENCHMARKS.md:
a baseline's processes, recorded within a minute, agree more closely than a check made later does on a
shared machine (memory-bound nodes moved +13 % between a recording and checks minutes later), so the
band must hold that drift whatever the recording's own spread."""

TOTAL_TOLERANCE = 0.10
"""Default smallest band of the model's total (+10 %)."""

SPREAD_K = 3.0
"""Default band width in between-process standard deviations (log scale): about 1 in 700 one-sided."""

PRIOR_WEIGHT = 4.0
"""Degrees of freedom given to the size-class spread when shrinking one node's own spread toward it."""

DEFAULT_FLOOR_NS = 20_000
"""Changes smaller than this (20 us) never fail a node: timer, dispatch and cache noise live there."""

FLOOR_SHARE = 0.001
"""Nor do changes smaller than this share (0.1 %) of the model's total time."""

GATING_NS = 1_000_000
"""A node of at least this baseline time (1 ms) can fail a test on its own ..."""

GATING_SHARE = 0.05
"""... as can one of at least this share of the summed node time; smaller ones warn, and aggregates gate them."""


def large_enough(centre_ns: float, busy_ns: float) -> bool:
    """Whether an item of ``centre_ns`` (a node, or an aggregate's nodes together) out of ``busy_ns`` of summed node
    time is large enough to fail a test alone (``GATING_NS``, ``GATING_SHARE``): a smaller node only warns, and a
    smaller aggregate too noisy to decide leaves the decision to the larger ones that hold it."""
    return centre_ns >= GATING_NS or centre_ns / (busy_ns or 1.0) >= GATING_SHARE


NOISY_BAND = 1.0
"""A band set by the measured spread beyond +100 % decides nothing: the item is reported as too noisy.
A tolerance (the user's choice) or a floor (an absolute amount of time) is applied however wide."""

DRIFT_DOUBT = 0.5
"""How much of the drift divided out is itself in doubt. Contention is op-specific (a neighbour's memory
traffic slows BatchNorm more than the convolutions around it), so a slower item is divided by its speed
factor to the power ``1 + DRIFT_DOUBT``: on a quiet machine (factor 1) nothing changes; under drift the
gate asks for a slowdown beyond what the drift could explain."""

FASTER_CREDIT = 0.0
"""How much of a *faster* speed factor the slower test divides out: ``factor ** FASTER_CREDIT``. None by
default: peers that got faster are as often a real speed-up elsewhere in the model (an optimised layer)
as a faster machine, and crediting it calls the unchanged nodes beside it slower. A slowdown on a check
process that runs faster than the recording is then judged raw, the safe side for a gate."""

PEER_SPAN = 4.0
"""Nodes within this factor of a node's baseline time are its peers for the speed factor."""

MIN_PEERS = 8
"""Fewer peers than this within ``PEER_SPAN``: the nearest in size are taken up to this count."""

NEAR_KEPT = 256
"""How many of each node's nearest peers are kept once listed: an aggregate that excludes more reads on."""

MAX_PEERS = 64
"""More peers than this within ``PEER_SPAN``: the nearest in size, this many. A time-weighted median of 64 ratios
moves with the drift, not with one node's noise, and a model of thousands of nodes of one size would otherwise
scan them all for every node of every aggregate it judges."""

MACHINE_FACTOR_LIMIT = 2.0
"""A reference workload this many times faster or slower than in the baseline means another machine."""

MIN_RECORDINGS = 3
"""A baseline that holds at least this many recordings (its own and its history, ``--fxprof-history``) has
bands learnt from the drift between them: ``HISTORY_NODE_TOLERANCE`` and ``HISTORY_TOTAL_TOLERANCE`` replace
the default tolerances, which exist to hold a drift that one recording cannot show."""

HISTORY_NODE_TOLERANCE = 0.05
"""Smallest band of a node or aggregate whose baseline has ``MIN_RECORDINGS`` recordings (+5 %); the spread
within and between recordings sets it wider where the runner drifts more (BENCHMARKS.md, baseline history)."""

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


def node_times(entry: BaselineEntry, nodes: Sequence[NodeInfo]) -> tuple[float, ...]:
    """The median time over ``entry``'s runs of each of ``nodes`` (nodes of ``entry``): what an added or removed
    node puts at stake, for the lists that rank nodes by it."""
    index = {id(n): j for j, n in enumerate(entry.nodes)}
    out = []
    for n in nodes:
        j = index.get(id(n))
        times = [r.node_ns[j] for r in entry.runs if j is not None and j < len(r.node_ns)]
        out.append(float(statistics.median(times)) if times else 0.0)
    return tuple(out)


class Peers:
    """Each node's peers by baseline size, nearest first, walked outward from the node in size order (no table of
    every pair: a graph of thousands of nodes would hold millions)."""

    def __init__(self, centres: Sequence[float]) -> None:
        self.centres = list(centres)
        self.logs = [math.log(max(c, 1.0)) for c in centres]
        self.span = math.log(PEER_SPAN)
        self.by_size = sorted(range(len(self.logs)), key=lambda j: (self.logs[j], j))
        self.position = [0] * len(self.logs)
        for p, j in enumerate(self.by_size):
            self.position[j] = p
        self._kept: dict[int, list[tuple[float, int]]] = {}

    def nearest(self, i: int) -> Iterator[tuple[float, int]]:
        """``(distance, j)`` of every other node, nearest in size first, ties in node order."""
        logs, by_size, li = self.logs, self.by_size, self.logs[i]
        low, high = self.position[i] - 1, self.position[i] + 1
        while low >= 0 or high < len(by_size):
            d_low = li - logs[by_size[low]] if low >= 0 else math.inf
            d_high = logs[by_size[high]] - li if high < len(by_size) else math.inf
            d = min(d_low, d_high)
            tied = []
            while low >= 0 and li - logs[by_size[low]] == d:
                tied.append(by_size[low])
                low -= 1
            while high < len(by_size) and logs[by_size[high]] - li == d:
                tied.append(by_size[high])
                high += 1
            for j in sorted(tied):
                yield d, j

    def kept(self, i: int) -> list[tuple[float, int]]:
        """The first of ``nearest(i)``, kept: the most a factor reads but where an aggregate excludes many."""
        kept = self._kept.get(i)
        if kept is None:
            kept = self._kept[i] = list(itertools.islice(self.nearest(i), NEAR_KEPT))
        return kept

    def factor(self, i: int, ratios: Sequence[float], excluded: frozenset[int] = frozenset()) -> float:
        """Node ``i``'s speed factor: the time-weighted median ratio of its peers outside ``excluded``."""
        peers = self._peers(i, excluded)
        if not peers:
            return 1.0
        return weighted_median([ratios[j] for j in peers], [self.centres[j] for j in peers])

    def _peers(self, i: int, excluded: frozenset[int]) -> list[int]:
        peers: list[int] = []
        near = self.kept(i)
        walk = (
            near if len(near) < NEAR_KEPT else itertools.chain(near, itertools.islice(self.nearest(i), NEAR_KEPT, None))
        )
        for d, j in walk:  # those within the span, at least MIN_PEERS, at most MAX_PEERS
            if (d > self.span and len(peers) >= MIN_PEERS) or len(peers) >= MAX_PEERS:
                break
            if j not in excluded:
                peers.append(j)
        return peers

    def factors(self, current: Sequence[float], excluded: frozenset[int] = frozenset()) -> list[float]:
        ratios = [cur / c if c else 1.0 for cur, c in zip(current, self.centres, strict=True)]
        return [self.factor(i, ratios, excluded | {i}) for i in range(len(self.centres))]


class RunFactors:
    """One run's speed factors (``Peers.factor``) for the aggregates that exclude their own members, each worked out
    once: a factor depends on the excluded nodes only among the node's nearest peers, and the aggregates of one
    graph (a block, its pattern, its class, its operator types) share most of those."""

    def __init__(self, peers: Peers, current: Sequence[float]) -> None:
        self.peers = peers
        self.current = current
        self.ratios = [cur / c if c else 1.0 for cur, c in zip(current, peers.centres, strict=True)]
        self._near: dict[int, frozenset[int]] = {}
        self._seen: dict[tuple[int, frozenset[int]], float] = {}

    def factor(self, i: int, excluded: frozenset[int]) -> float:
        """``Peers.factor(i, ratios, excluded)``, from the cache where the same nodes near ``i`` were excluded."""
        near = self._near.get(i)
        if near is None:
            near = self._near[i] = frozenset(j for _, j in self.peers.kept(i))
        within = excluded & near
        if len(within) > NEAR_KEPT - MAX_PEERS:  # the scan could read beyond the kept peers: not cached
            return self.peers.factor(i, self.ratios, excluded)
        key = (i, within)
        found = self._seen.get(key)
        if found is None:
            found = self._seen[key] = self.peers.factor(i, self.ratios, within)
        return found


@dataclass(frozen=True)
class NodeNoise:
    """A node's baseline centre and its between-process deviation on a log scale (None if unknown)."""

    centre_ns: float
    sigma: float | None


def size_class(ns: float) -> int:
    """Nodes within a factor of two of each other share a class (used to pool spread estimates)."""
    return math.floor(math.log2(max(ns, 1.0)))


def shrink(own: float, dof: int, prior: float) -> float:
    """An estimated deviation with ``dof`` degrees of freedom pulled toward ``prior``."""
    return math.sqrt((dof * own * own + PRIOR_WEIGHT * prior * prior) / (dof + PRIOR_WEIGHT))


def centres_of(runs: Sequence[Run]) -> list[float]:
    return [float(statistics.median(run.node_ns[i] for run in runs)) for i in range(len(runs[0].node_ns))]


def node_noise(
    runs: Sequence[Run], peers: Peers | None = None, history: Sequence[Sequence[Run]] = ()
) -> list[NodeNoise]:
    """Per node: the centre across baseline processes and the shrunk deviation a new process shows from it.

    With one recording, the deviation between its processes. With ``history`` (earlier recordings of the same
    nodes, each its processes' runs), the spread within recordings (pooled) and the drift between them
    (their centres' deviation), each shrunk toward nodes of similar size, added as variances: a new check is
    a new process on another day. Every time is divided by its peers' speed factor first, as the comparison
    divides, so that the band holds what the factors leave."""
    centres = centres_of(runs)
    recordings = [list(runs), *(list(h) for h in history)]
    dof = sum(len(r) - 1 for r in recordings)
    if dof < 1 and len(recordings) < 2:
        return [NodeNoise(c, None) for c in centres]
    peers = peers or Peers(centres)
    within = _shrunk(centres, *_pooled_spread(recordings, peers)) if dof else [0.0] * len(centres)
    between = [0.0] * len(centres)
    if len(recordings) >= 2:
        kept = [centres_of(r) for r in recordings]
        factors = [peers.factors(c) for c in kept]
        own = [
            statistics.stdev(math.log(max(c[i], 1.0) / max(f[i], 1e-9)) for c, f in zip(kept, factors, strict=True))
            for i in range(len(centres))
        ]
        between = _shrunk(centres, own, len(recordings) - 1)
    return [NodeNoise(c, math.hypot(w, b)) for c, w, b in zip(centres, within, between, strict=True)]


def _pooled_spread(recordings: Sequence[Sequence[Run]], peers: Peers) -> tuple[list[float], int]:
    """Per node, the deviation between processes of one recording, pooled over the recordings; its degrees of
    freedom."""
    squares = [0.0] * len(peers.centres)
    dof = 0
    for runs in recordings:
        if len(runs) < 2:
            continue
        factors = [peers.factors([float(t) for t in run.node_ns]) for run in runs]
        for i in range(len(squares)):
            logs = [math.log(max(run.node_ns[i], 1) / max(f[i], 1e-9)) for run, f in zip(runs, factors, strict=True)]
            squares[i] += (len(logs) - 1) * statistics.variance(logs)
        dof += len(runs) - 1
    return [math.sqrt(q / dof) for q in squares], dof


def _shrunk(centres: Sequence[float], own: Sequence[float], dof: int) -> list[float]:
    """Each node's deviation (``dof`` degrees of freedom) shrunk toward the median of its size class and the
    classes beside it."""
    by_class: dict[int, list[float]] = defaultdict(list)
    for c, s in zip(centres, own, strict=True):
        by_class[size_class(c)].append(s)
    out = []
    for c, s in zip(centres, own, strict=True):
        cls = size_class(c)
        neighbours = by_class[cls] + by_class.get(cls - 1, []) + by_class.get(cls + 1, [])
        out.append(shrink(s, dof, statistics.median(neighbours)))
    return out


def spread_of(groups: Sequence[Sequence[float]]) -> tuple[float | None, int]:
    """The deviation (log scale) of a new value from groups of positive values taken at different times (a
    baseline's recordings, newest first): the spread within groups (pooled) and between their medians, added as
    variances; and the degrees of freedom within. None when there is only one value."""
    logs = [[math.log(max(v, 1e-12)) for v in g] for g in groups if g]
    dof = sum(len(g) - 1 for g in logs)
    within = math.sqrt(sum((len(g) - 1) * statistics.variance(g) for g in logs if len(g) > 1) / dof) if dof else 0.0
    if len(logs) < 2:
        return (within if dof else None), dof
    between = statistics.stdev(statistics.median(g) for g in logs)
    return math.hypot(within, between), dof


def band_for(
    tolerance: float, sigma: float | None, *, k: float = SPREAD_K, floor: float = 0.0
) -> tuple[float, BandSource]:
    """The relative band: the largest of the tolerance, ``k`` deviations and the relative floor."""
    band, source = tolerance, BandSource.TOLERANCE
    if sigma is not None and math.exp(k * sigma) - 1.0 > band:
        band, source = math.exp(k * sigma) - 1.0, BandSource.SPREAD
    if floor > band:
        band, source = floor, BandSource.FLOOR
    return band, source


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
    """Slower only if every measurement is beyond the band, faster only if every one is below it.

    ``faster`` are the ratios to test for a speed-up when they differ from ``ratios``: a node divided by
    its speed factor only where that is below 1 (a faster machine is not a faster node), mirroring the
    slower test, which divides only where it is above 1. A speed-up must also gain more than the floor.
    Only a band set by the measured spread can be too wide to decide: the tolerance is the user's
    choice and the floor an absolute amount, both judged as they are.
    """
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
    its matched nodes; its band's deviations raised for its level (``aggregates.corrected_k``)."""
    idx = list(group.matched)
    members = frozenset(idx)
    gone = sum(float(statistics.median(r.node_ns[i] for r in baseline.runs)) for i in group.only_old)
    new = [float(sum(r.node_ns[j] for j in group.only_new)) for r in current.runs]
    centre = max(sum(noise[i].centre_ns for i in idx) + gone, 1.0)
    sigma = _aggregate_sigma(recordings, idx, noise, members) if idx else None
    k = corrected_k(policy.spread_k, group.strictness)
    band, source = band_for(policy.node_tolerance, sigma, k=k, floor=floor_ns / centre)
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

WEAK_BAND = 0.25
"""A band set by a recording's spread beyond +25 % cannot catch the +25 % slowdown of a large node the gate must
catch (a baseline recorded beside two other jobs gave its largest node +27 %, and +25 % on it was missed 5 times
in 5) ..."""

WEAK_SHARE = 0.25
"""... and where bands that wide cover more than this share of the time of the nodes that can fail a test alone,
the recording was made on a busy machine: a machine-wide disturbance widens most nodes' bands, a node that varies
by nature only its own (BENCHMARKS.md, baseline history). The total is left out: divided by the reference
workload, its spread between fresh processes set bands of +21 % to +24 % on a quiet machine here (``make demo``,
step 1), so it would call quiet recordings busy."""

MIN_WIDE_NODES = 2
"""... on at least this many nodes: MobileNetV3-small at batch 1 has one node that can fail a test alone, whose
band came out +20 % and +54 % in two recordings on a quiet machine (``make demo``, step 1)."""


@dataclass(frozen=True)
class RecordingSpread:
    """What one recording's own processes say of the machine they ran on: the widest band their spread sets among
    the nodes that can fail a test alone (0 and "" where none is set by the spread), the share of those nodes' time
    whose spread-set band exceeds ``WEAK_BAND``, and the total's spread-set band (None where not set by the
    spread; shown, not judged)."""

    widest: float
    widest_of: str
    wide_share: float
    total_band: float | None
    wide_nodes: int = 0
    """How many of the nodes that can fail a test alone have a spread-set band beyond ``WEAK_BAND``."""

    @property
    def weak(self) -> bool:
        """Whether the recording was made on a busy machine: its bands are wide over much of the model, on more
        than one node (one node alone may vary by nature: that says nothing of the machine)."""
        return self.wide_nodes >= MIN_WIDE_NODES and self.wide_share > WEAK_SHARE


def recording_spread(nodes: Sequence[NodeInfo], runs: Sequence[Run], policy: Policy) -> RecordingSpread:
    """The spread of one recording (``runs``, one per process, aligned with ``nodes``), by the noise model
    ``compare`` uses (``node_noise``, ``band_for``, ``spread_of``) on that recording alone. Kept for the stored
    recordings a run compares with again and again (every check and confirmation of a test)."""
    return _recording_spread(tuple(nodes), tuple(runs), policy)


@functools.lru_cache(maxsize=64)
def _recording_spread(nodes: tuple[NodeInfo, ...], runs: tuple[Run, ...], policy: Policy) -> RecordingSpread:
    if not runs:
        raise ValueError("a recording holds at least one run")
    noise = node_noise(runs)
    busy = sum(n.centre_ns for n in noise) or 1.0
    model_ns = float(statistics.median(r.timed_ns for r in runs))
    floor_ns = max(policy.floor_ns, policy.floor_share * model_ns)
    widest, widest_of, gating_ns, wide_ns, wide = 0.0, "", 0.0, 0.0, 0
    for info, n in zip(nodes, noise, strict=True):
        c = max(n.centre_ns, 1.0)
        if not large_enough(c, busy):
            continue
        band, source = band_for(policy.node_tolerance, n.sigma, k=policy.spread_k, floor=floor_ns / c)
        gating_ns += c
        if source is BandSource.SPREAD:
            wide_ns += c if band > WEAK_BAND else 0.0
            wide += band > WEAK_BAND
            if band > widest:
                widest, widest_of = band, info.name
    use_ref = all(r.reference_ns > 0 for r in runs)
    totals = [max(float(r.timed_ns) / (r.reference_ns if use_ref else 1), 1e-12) for r in runs]
    sigma, _ = spread_of([totals])
    total_band = None
    if sigma is not None:
        band, source = band_for(policy.total_tolerance, sigma, k=policy.spread_k)
        total_band = band if source is BandSource.SPREAD else None
    return RecordingSpread(widest, widest_of, wide_ns / gating_ns if gating_ns else 0.0, total_band, wide)


def widest_band(entry: BaselineEntry, policy: Policy) -> tuple[float, str] | None:
    """The widest band that the measured spread of ``entry``'s own processes (its newest recording: what a busy
    machine disturbed when it was recorded, not the drift its history shows) sets, among the nodes that can fail a
    test alone (``GATING_NS``, ``GATING_SHARE``), with the node's name; None where no band is set by the spread
    (one process, or every band a tolerance or floor)."""
    spread = recording_spread(entry.nodes, entry.runs, policy)
    return (spread.widest, spread.widest_of) if spread.widest_of else None


def refuse_lone(c: Comparison) -> Comparison:
    """A comparison whose bands a baseline of one process set (``Comparison.lone``) made undecided, nothing judged
    (``LONE_REASON``): its figures stay on record, its verdict does not count. Any other comparison as it is."""
    if not c.lone or c.status is Status.MISMATCH:
        return c
    return replace(c, status=Status.UNDECIDED, noisy_reason=LONE_REASON, blame=None)


def weak_baseline(label: str, entry: BaselineEntry, policy: Policy) -> str:
    """The warning of a baseline that holds one process's measurement (its comparable recordings hold one run:
    nothing shows how an unchanged model varies between processes, and a check cannot judge against it), or
    whose newest recording was made on a busy machine (``RecordingSpread.weak``): "<label>: recorded on a busy
    machine: bands up to +27 % (maxpool), over 80 % of the time of the nodes that can fail a test alone; record
    again ...", else "": the one wording of the recording's warning, ``fxprof show`` and every check that uses the
    baseline."""
    if sum(len(r.runs) for r in entry.comparable_recordings) < 2:
        return (
            f"{label}: the baseline holds one process's measurement, which cannot show how much the model's times "
            "vary between processes: a check against it ends undecided, nothing judged, until it is recorded from 2 "
            "or more processes (--fxprof-processes; the default is 5) or holds a second recording in its history "
            "(--fxprof-update again)"
        )
    spread = recording_spread(entry.nodes, entry.runs, policy)
    if not spread.weak:
        return ""
    over = f"over +{WEAK_BAND:.0%} on {spread.wide_share:.0%} of the time of the nodes that can fail a test alone"
    return (
        f"{label}: recorded on a busy machine: bands up to +{spread.widest:.0%} ({spread.widest_of}), {over}; "
        "record again on a quieter machine or with more processes (--fxprof-processes)"
    )
