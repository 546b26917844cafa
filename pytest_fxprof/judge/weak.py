"""A weak baseline: one whose processes spread so widely that its bands cannot catch a large node's slowdown
(``recording_spread``), the warning it gets (``weak_baseline``), and the recordings bands are not learnt from.

Pure. Must not import torch, pytest or pandas.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_fxprof.judge.band import band_for
from pytest_fxprof.judge.noise import large_enough, node_noise, spread_of
from pytest_fxprof.records.measurement import BaselineEntry, NodeInfo, Run
from pytest_fxprof.records.verdicts import BandSource

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pytest_fxprof.judge.decision import Policy


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
