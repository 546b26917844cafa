"""Plain records: what a profile measured and what a baseline holds.

Owns the frozen dataclasses that every other module passes around. Must not import torch or pytest;
pandas is imported only inside ``ProfileResult.to_dataframe``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from pytest_fxprof.decision import Comparison


@dataclass(frozen=True)
class NodeInfo:
    """One timed node of a captured graph.

    ``key`` is the node's stable identity (op, module path, target and its occurrence among nodes with
    the same three), which does not shift when an op is inserted elsewhere in the graph. ``name`` is
    the generated FX node name, shown to people but never used for matching.
    """

    key: str
    name: str
    op: str
    target: str
    module: str

    @property
    def signature(self) -> tuple[str, str, str]:
        """What must be equal for two nodes of different graphs to be the same node."""
        return (self.op, self.module, self.target)

    @property
    def where(self) -> str:
        """Human-readable location: the module path, or ``<root>`` for the top-level module."""
        return self.module or "<root>"


def node_key(op: str, module: str, target: str, occurrence: int) -> str:
    """The stable key of the ``occurrence``-th node with this op, module path and target."""
    return f"{op}:{module or '<root>'}:{target}#{occurrence}"


@dataclass(frozen=True)
class Environment:
    """Where a measurement was taken. Only ``MATCH_FIELDS`` must agree for two runs to be compared."""

    torch: str
    python: str
    platform: str
    cpu: str
    threads: int
    device: str
    allocator: str
    clock: str = "wall"

    MATCH_FIELDS = ("torch", "cpu", "threads", "device", "allocator", "clock")

    def differences(self, other: Environment) -> list[str]:
        """Readable ``field: ours != theirs`` lines for each field that must match but does not."""
        out = []
        for name in self.MATCH_FIELDS:
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                out.append(f"{name}: baseline {mine!r}, this run {theirs!r}")
        return out


@dataclass(frozen=True)
class Protocol:
    """How a profile was measured: passes thrown away, passes kept, threads, and fresh processes."""

    warmup: int
    passes: int
    threads: int
    processes: int


@dataclass(frozen=True)
class Capture:
    """How the module became a graph."""

    method: str
    leaf_modules: tuple[str, ...] = ()


@dataclass(frozen=True)
class Run:
    """One process's summary of a profile: medians in nanoseconds, aligned with the graph's nodes.

    ``total_ns`` is the plain (uninstrumented) forward, ``instrumented_ns`` a whole profiled pass and
    ``reference_ns`` a fixed workload that shares no kernels with torch, timed in the same passes, so
    that the machine's speed at the time can be divided out of the total.
    """

    total_ns: int
    instrumented_ns: int
    reference_ns: int
    node_ns: tuple[int, ...]
    node_spread_ns: tuple[int, ...]


@dataclass(frozen=True)
class Tolerances:
    """Relative tolerances: the smallest band a node, aggregate or the total gets, whatever its measured
    spread. A baseline records the ones it was taken with, for reference; a check uses its own settings."""

    node: float
    total: float


@dataclass(frozen=True)
class BaselineEntry:
    """Everything recorded for one ``fxprof`` call of one test."""

    capture: Capture
    environment: Environment
    protocol: Protocol
    tolerances: Tolerances
    nodes: tuple[NodeInfo, ...]
    runs: tuple[Run, ...]


@dataclass(frozen=True)
class NodeStats:
    """Timing of one node within one profile."""

    info: NodeInfo
    median_ns: int
    spread_ns: int
    share: float
    samples_ns: tuple[int, ...]

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def op(self) -> str:
        return self.info.op

    @property
    def target(self) -> str:
        return self.info.target

    @property
    def module(self) -> str:
        return self.info.module

    @property
    def spread(self) -> float:
        """Spread across passes relative to the median (interquartile range / median)."""
        return self.spread_ns / self.median_ns if self.median_ns else 0.0


def median_int(values: tuple[int, ...] | list[int]) -> int:
    """Median rounded to a whole nanosecond (0 for no values)."""
    return round(statistics.median(values)) if values else 0


def iqr_int(values: tuple[int, ...] | list[int]) -> int:
    """Interquartile range rounded to a whole nanosecond (0 for fewer than two values)."""
    if len(values) < 2:
        return 0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return round(q[2] - q[0])


@dataclass(frozen=True)
class ProfileResult:
    """What one profile measured. Returned by ``pytest_fxprof.profile`` and the ``fxprof`` fixture.

    ``measured`` is False when the module ran once, cold, without a measurement protocol (a plain
    pytest run without ``--fxprof`` or ``--fxprof-update``): the times are then indicative only.
    ``confirmations`` are the runs of re-measurements taken because the profile looked slower (a
    regression stands only if every measurement shows it). ``comparison`` is set when the fixture
    compared the profile with a baseline. ``seconds`` is the wall time the profile took, confirmation
    included (0 when not timed).
    """

    name: str
    nodes: tuple[NodeStats, ...]
    total_samples_ns: tuple[int, ...]
    instrumented_samples_ns: tuple[int, ...]
    reference_samples_ns: tuple[int, ...]
    environment: Environment
    protocol: Protocol
    capture: Capture
    measured: bool = True
    confirmations: tuple[Run, ...] = ()
    seconds: float = 0.0
    comparison: Comparison | None = field(default=None, compare=False)

    @property
    def total_ns(self) -> int:
        """Median time of the plain, uninstrumented forward (the instrumented pass if none was timed)."""
        return median_int(self.total_samples_ns or self.instrumented_samples_ns)

    @property
    def remeasured(self) -> bool:
        return bool(self.confirmations)

    @property
    def instrumented_ns(self) -> int:
        """Median time of a whole instrumented pass."""
        return median_int(self.instrumented_samples_ns)

    @property
    def overhead(self) -> float | None:
        """Instrumented pass / plain forward: the profiler's cost as a ratio (None if not timed)."""
        if not self.total_samples_ns or not self.total_ns:
            return None
        return self.instrumented_ns / self.total_ns

    def run(self) -> Run:
        """This profile as one process's summary, the unit a baseline stores."""
        return Run(
            total_ns=self.total_ns,
            instrumented_ns=self.instrumented_ns,
            reference_ns=median_int(self.reference_samples_ns),
            node_ns=tuple(n.median_ns for n in self.nodes),
            node_spread_ns=tuple(n.spread_ns for n in self.nodes),
        )

    def entry(self, tolerances: Tolerances, extra_runs: tuple[Run, ...] = ()) -> BaselineEntry:
        """This profile (and runs of the same graph from other processes) as a baseline entry."""
        return BaselineEntry(
            capture=self.capture,
            environment=self.environment,
            protocol=self.protocol,
            tolerances=tolerances,
            nodes=tuple(n.info for n in self.nodes),
            runs=(self.run(), *extra_runs),
        )

    def table(self, sort: str = "time", limit: int | None = None) -> str:
        """A per-node table; ``sort`` is ``"time"`` (slowest first) or ``"graph"`` (execution order)."""
        from pytest_fxprof.render import profile_table

        return profile_table(self, sort=sort, limit=limit)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per node, in execution order, with times in microseconds."""
        import pandas as pd

        rows = [
            {
                "key": n.info.key,
                "node": n.name,
                "op": n.op,
                "target": n.target,
                "module": n.module,
                "median_us": n.median_ns / 1e3,
                "spread": n.spread,
                "share": n.share,
                "samples": len(n.samples_ns),
            }
            for n in self.nodes
        ]
        columns = ["key", "node", "op", "target", "module", "median_us", "spread", "share", "samples"]
        return pd.DataFrame(rows, columns=columns)
