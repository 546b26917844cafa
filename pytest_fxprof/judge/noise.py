"""The gate's noise model against a stored baseline: each node's speed factor from its peers (``Peers``,
``RunFactors``) and its spread between processes and recordings, shrunk toward nodes of similar size
(``node_noise``); and which items are large enough to fail a test alone (``large_enough``).

Pure. Must not import torch, pytest or pandas.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pytest_fxprof.records.measurement import Run

PRIOR_WEIGHT = 4.0
"""Degrees of freedom given to the size-class spread when shrinking one node's own spread toward it."""


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


GATING_NS = 1_000_000
"""A node of at least this baseline time (1 ms) can fail a test on its own ..."""


GATING_SHARE = 0.05
"""... as can one of at least this share of the summed node time; smaller ones warn, and aggregates gate them."""


def large_enough(centre_ns: float, busy_ns: float) -> bool:
    """Whether an item of ``centre_ns`` (a node, or an aggregate's nodes together) out of ``busy_ns`` of summed node
    time is large enough to fail a test alone (``GATING_NS``, ``GATING_SHARE``): a smaller node only warns, and a
    smaller aggregate too noisy to decide leaves the decision to the larger ones that hold it."""
    return centre_ns >= GATING_NS or centre_ns / (busy_ns or 1.0) >= GATING_SHARE


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
