"""Pairs out of line against a revision: a pair whose processes met two machines (a burst of other work hit one
side), told by its typical node's ratio lying far from the median pair's, and left out of every item of the call
(``out_of_line``).

Pure. Must not import torch, pytest or pandas.
"""

from __future__ import annotations

import math
import statistics

from pytest_fxprof.judge.moved import align
from pytest_fxprof.judge.paired import MIN_PAIRS
from pytest_fxprof.records.measurement import BaselineEntry

OUT_OF_LINE = 0.10
"""A pair whose typical node (the median of its ratios over the nodes that weigh, ``LINE_SHARE`` of the old
side's node time or more) lies more than this from the median pair's met two machines, not one: a burst of
other work hit one of its processes, and nodes of every kind moved together. A change of code moves every pair
alike, so the median pair moves with it. Such a pair is left out of every item of the call (``out_of_line``),
where it would hide a slowdown the other pairs agree on; undisturbed pairs lie well within this of their median
pair (BENCHMARKS.md, "A pair disturbed on one side")."""

LINE_SHARE = 0.005
"""The nodes whose ratios say how a pair's machine went: those of at least this share of the old side's summed
node time (smaller ones spread too much between processes to speak for the pair)."""

MIN_LINE_NODES = 5
"""Fewer weighty nodes than this cannot tell a disturbed pair from a slowed node: no pair is left out."""


def pair_shifts(old: BaselineEntry, new: BaselineEntry) -> list[float] | None:
    """Per pair, the median log ratio (new over old) of the nodes both sides hold that weigh ``LINE_SHARE`` of
    the old side's node time or more; None where fewer than ``MIN_LINE_NODES`` do."""
    if len(old.runs) != len(new.runs):
        raise ValueError(f"paired runs: {len(old.runs)} old and {len(new.runs)} new; each pair needs one of each")
    matched, _, _ = align(old.nodes, new.nodes)
    centres = [statistics.median(r.node_ns[i] for r in old.runs) for i in range(len(old.nodes))]
    busy = sum(centres) or 1
    weighty = [(i, j) for i, j in matched if centres[i] >= LINE_SHARE * busy]
    if len(weighty) < MIN_LINE_NODES:
        return None
    return [
        statistics.median(math.log(max(b.node_ns[j], 1) / max(a.node_ns[i], 1)) for i, j in weighty)
        for a, b in zip(old.runs, new.runs, strict=True)
    ]


def out_of_line(old: BaselineEntry, new: BaselineEntry, limit: float = OUT_OF_LINE) -> tuple[int, ...]:
    """The pairs (by position) whose typical node lies beyond ``limit`` from the median pair's (``OUT_OF_LINE``),
    to be left out. None are where the pairs are too few to have a median pair (3), where fewer than
    ``MIN_LINE_NODES`` nodes weigh, or where they are not a minority that leaves ``MIN_PAIRS`` behind."""
    shifts = pair_shifts(old, new)
    if shifts is None or len(shifts) < 3:
        return ()
    centre = statistics.median(shifts)
    out = tuple(p for p, shift in enumerate(shifts) if abs(shift - centre) > math.log1p(limit))
    if 2 * len(out) >= len(shifts) or len(shifts) - len(out) < MIN_PAIRS:
        return ()
    return out
