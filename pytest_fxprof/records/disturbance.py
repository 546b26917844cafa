"""How disturbed a profile was: what its kept passes say about the machine they ran on.

Owns ``Disturbance``, carried by every ``Profile`` (and by a fresh process's sample), the rules that call a
profile "measured on a busy machine" (``BUSY_OFF_CPU``, ``BUSY_KEPT_DISTURBED``, ``BUSY_CONSISTENCY``,
``BUSY_SUM_CONSISTENCY``) and
its JSON form. Pure: the figures come in as lists of per-pass numbers, so that every rule can be tested with
hand-built samples.

Must not import torch, pytest or pandas.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

OFF_CPU_LIMIT = 0.01
"""A pass whose thread was off the CPU (preempted by a neighbour) for more than this share of its wall time
is disturbed: the profiler measures it again (``measure.schedule.chosen_passes``), and one kept all the same
counts in ``Disturbance.kept_disturbed``."""

BUSY_OFF_CPU = 0.10
"""A profile whose kept passes' thread was off the CPU for more than this share of their wall time, on average,
was measured on a busy machine: a tenth of its time went to other processes. A profile measured alone stays far
below it and one whose node medians a neighbour visibly moved far above; a few percent is no alarm on its own,
since a neighbour's time slice lands in one node of a pass and a node's median is robust to a few preempted
passes (BENCHMARKS.md, "What the disturbance figures read"; ``bench/disturbance.py``)."""

BUSY_KEPT_DISTURBED = 0.5
"""A profile that had to keep more than this share of its passes although their thread was off the CPU above
``OFF_CPU_LIMIT`` (too few clean passes within the budget of ``passes`` more) was measured on a busy machine:
its node medians then come from disturbed passes. A quiet profile keeps none such; one whose medians a neighbour
moved keeps most (BENCHMARKS.md, "What the disturbance figures read")."""

BUSY_CONSISTENCY = 1.10
"""A profile whose node medians sum to more than this many times its median instrumented pass was measured on a
busy machine. Nodes are stamped on the wall clock and the pass on the thread's CPU clock, so a neighbour's time
slices land in the nodes' time and not in the pass's. A quiet profile stays a little under 1 (the pass also holds
the stamps' own cost). The pass's CPU clock runs on while the scheduler shares a core, so this rule catches only a
heavy disturbance; ``BUSY_SUM_CONSISTENCY`` catches others (BENCHMARKS.md, "What the disturbance figures read")."""

BUSY_SUM_CONSISTENCY = 0.90
"""A profile whose node medians sum to less than this share of the median of its per-pass node sums was measured
on a busy machine: each pass carries a neighbour's time slice in some node, each node's median does not. A quiet
profile stays a little under 1 (BENCHMARKS.md, "What the disturbance figures read")."""

MIN_PASSES = 2
"""Fewer kept passes than this tell nothing about the spread of a pass: no consistency figure."""


class DisturbanceJSON(TypedDict):
    off_cpu_mean: float | None
    off_cpu_worst: float | None
    remeasured: int
    kept_disturbed: int
    kept: int
    consistency: float | None
    sum_consistency: float | None
    busy: NotRequired[bool]
    """Written for readers outside (a report); recomputed from the figures when read."""


@dataclass(frozen=True)
class Disturbance:
    """What the kept passes of one profile say about the machine: none measured by default.

    ``off_cpu_mean`` and ``off_cpu_worst`` are the share of a kept pass's wall time its thread spent off the
    CPU, on average and in the worst kept pass; None where it cannot be known (several intra-op threads, CUDA,
    the interpreter engine, whose nodes and passes share one clock). ``remeasured`` counts the passes measured
    again because a neighbour preempted them, ``kept_disturbed`` the kept passes disturbed all the same (off
    the CPU above ``OFF_CPU_LIMIT``), of ``kept``. ``consistency`` is the sum of the node medians over the
    median instrumented pass, ``sum_consistency`` the same sum over the median of the per-pass node sums (None
    where not measured: an unmeasured profile, CUDA)."""

    off_cpu_mean: float | None = None
    off_cpu_worst: float | None = None
    remeasured: int = 0
    kept_disturbed: int = 0
    kept: int = 0
    consistency: float | None = None
    sum_consistency: float | None = None

    @property
    def measured(self) -> bool:
        """Whether any figure was measured."""
        return self.kept > 0

    @property
    def reasons(self) -> tuple[str, ...]:
        """Each rule this profile breaks, with its figure and limit (empty on a quiet machine)."""
        out = []
        if self.off_cpu_mean is not None and self.off_cpu_mean > BUSY_OFF_CPU:
            out.append(f"thread off the CPU {self.off_cpu_mean:.0%} of kept passes' time (limit {BUSY_OFF_CPU:.0%})")
        if self.kept and self.kept_disturbed / self.kept > BUSY_KEPT_DISTURBED:
            out.append(f"{self.kept_disturbed} of {self.kept} kept passes disturbed")
        if self.consistency is not None and self.consistency > BUSY_CONSISTENCY:
            out.append(f"node medians sum to x{self.consistency:.2f} the median pass (limit x{BUSY_CONSISTENCY:.2f})")
        if self.sum_consistency is not None and self.sum_consistency < BUSY_SUM_CONSISTENCY:
            out.append(
                f"node medians sum to x{self.sum_consistency:.2f} the median pass's node sum "
                f"(limit x{BUSY_SUM_CONSISTENCY:.2f})"
            )
        return tuple(out)

    @property
    def busy(self) -> bool:
        """Whether the profile was measured on a busy machine (any of the rules in ``reasons``)."""
        return bool(self.reasons)

    @property
    def figures(self) -> str:
        """Every figure measured, in words ("" when none was)."""
        if not self.measured:
            return ""
        parts = []
        if self.off_cpu_mean is not None and self.off_cpu_worst is not None:
            parts.append(
                f"thread off the CPU {self.off_cpu_mean:.0%} of kept passes' time (worst pass {self.off_cpu_worst:.0%})"
            )
        parts.append(f"{self.remeasured} passes measured again")
        parts.append(f"{self.kept_disturbed} kept although disturbed")
        if self.consistency is not None:
            parts.append(f"node medians sum to x{self.consistency:.2f} the median pass")
        if self.sum_consistency is not None:
            parts.append(f"x{self.sum_consistency:.2f} its node sum")
        return ", ".join(parts)

    @property
    def line(self) -> str:
        """``measured on a busy machine: <figures>`` when busy, else "" (no alarm below the thresholds)."""
        return f"{BUSY_LINE}: {self.figures}" if self.busy else ""

    def worse_than(self, other: Disturbance) -> bool:
        """Whether this profile was more disturbed than ``other``: busy where it is not, else by its off-CPU share
        and its consistency (the least disturbed of several profiles is kept)."""
        return _rank(self) > _rank(other)


BUSY_LINE = "measured on a busy machine"
"""What every view says of a busy profile, before its figures."""


def _rank(d: Disturbance) -> tuple[int, float, float]:
    def off(ratio: float | None) -> float:
        return abs(math.log(max(ratio or 1.0, 1e-9)))

    return (int(d.busy), d.off_cpu_mean or 0.0, off(d.consistency) + off(d.sum_consistency))


def least_disturbed(candidates: Sequence[Disturbance]) -> int:
    """The index of the least disturbed of ``candidates`` (the first among equals)."""
    if not candidates:
        raise ValueError("least_disturbed needs at least one disturbance")
    best = 0
    for i, d in enumerate(candidates):
        if candidates[best].worse_than(d):
            best = i
    return best


def disturbance_of(
    off_cpu: Sequence[float] | None,
    picked: Sequence[int],
    wanted: int,
    node_samples: Sequence[Sequence[int]],
    instrumented: Sequence[int],
) -> Disturbance:
    """The disturbance of a profile from its per-pass figures.

    ``off_cpu`` is every kept-phase pass's off-CPU share, in order (None where unknowable), ``picked`` the passes
    kept of them, ``wanted`` the passes the protocol asked for; ``node_samples`` (per node, one time per kept
    pass) and ``instrumented`` (one whole pass per kept pass) give the consistency, or None with ``[]``.
    """
    kept = len(picked)
    if off_cpu is not None and any(not 0 <= i < len(off_cpu) for i in picked):
        raise ValueError(f"picked passes {list(picked)} outside the {len(off_cpu)} measured")
    if any(len(s) != len(instrumented) for s in node_samples):
        raise ValueError("every node needs one time per kept pass")
    mean = worst = None
    disturbed = 0
    remeasured = 0
    if off_cpu is not None and kept:
        shares = [off_cpu[i] for i in picked]
        mean, worst = statistics.fmean(shares), max(shares)
        disturbed = sum(f > OFF_CPU_LIMIT for f in shares)
        remeasured = max(len(off_cpu) - wanted, 0)
    consistency = sums = None
    if node_samples and len(instrumented) >= MIN_PASSES and statistics.median(instrumented) > 0:
        medians = sum(statistics.median(s) for s in node_samples)
        consistency = medians / statistics.median(instrumented)
        per_pass = statistics.median(sum(s[i] for s in node_samples) for i in range(len(instrumented)))
        sums = medians / per_pass if per_pass > 0 else None
    return Disturbance(mean, worst, remeasured, disturbed, kept, consistency, sums)


def disturbance_to_json(d: Disturbance) -> DisturbanceJSON:
    return {
        "off_cpu_mean": d.off_cpu_mean,
        "off_cpu_worst": d.off_cpu_worst,
        "remeasured": d.remeasured,
        "kept_disturbed": d.kept_disturbed,
        "kept": d.kept,
        "consistency": d.consistency,
        "sum_consistency": d.sum_consistency,
        "busy": d.busy,
    }


def disturbance_from_json(data: Mapping[str, Any] | Any, where: str) -> Disturbance:
    """A ``Disturbance`` from its JSON form; ``ValueError`` naming ``where`` and the field when malformed."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: disturbance must be an object, not {type(data).__name__}")

    def share(name: str) -> float | None:
        value = data.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{where}: disturbance.{name} must be a non-negative number or null, not {value!r}")
        return float(value)

    def count(name: str) -> int:
        value = data.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{where}: disturbance.{name} must be a non-negative integer, not {value!r}")
        return value

    return Disturbance(
        share("off_cpu_mean"),
        share("off_cpu_worst"),
        count("remeasured"),
        count("kept_disturbed"),
        count("kept"),
        share("consistency"),
        share("sum_consistency"),
    )
