"""Plain records: what a profile measured and what a baseline holds.

Owns the frozen dataclasses that every other module passes around. Must not import torch or pytest;
pandas is imported only inside ``ProfileResult.to_dataframe``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    import pandas as pd

    from pytest_fxprof.decision import Comparison
    from pytest_fxprof.hints import Hint


@dataclass(frozen=True)
class NodeInfo:
    """One timed node of a captured graph.

    ``key`` is the node's stable identity (op, module path, target and its occurrence among nodes with
    the same three), which does not shift when an op is inserted elsewhere in the graph. ``name`` is
    the generated FX node name and ``source`` the ``file:line`` of the user's code that made the node
    (empty when the capture did not record it); both are shown to people but never used for matching.
    """

    key: str
    name: str
    op: str
    target: str
    module: str
    source: str = ""

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
    engine: str = "interpreter"

    MATCH_FIELDS = ("torch", "cpu", "threads", "device", "allocator", "clock", "engine")

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
    """How the module became a graph: the capture ``method`` (``symbolic_trace``, ``export``, ``dynamo`` or
    a user's tracer), the submodules kept whole, how many graphs it made, and in ``detail`` why an
    automatic capture chose this method (what failed before it). ``detail`` and ``graphs`` are reported,
    never compared."""

    method: str
    leaf_modules: tuple[str, ...] = ()
    graphs: int = field(default=1, compare=False)
    detail: str = field(default="", compare=False)


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
    """Timing of one node within one profile.

    ``flops`` is what torch's flop counter counted in the node (None when not counted). On CUDA,
    ``median_ns`` is device time from events, ``host_ns`` the host's time in the node (its launch
    cost), ``memory_bytes`` what the allocator held after the node and ``peak_bytes`` the most it held
    while the node ran; None on devices that do not report them.

    What the node made and from what, seen in the untimed counting pass (empty where it was not run):
    ``shape`` its output (``float32[1, 64, 56, 56]``; several outputs in parentheses), ``layout`` that
    output's memory layout (``contiguous``, ``channels_last`` or ``strided``; empty for no tensor),
    ``inputs`` the positions (in the profile's nodes) of the timed nodes whose outputs it takes, and
    ``training`` the train/eval mode of the module it calls or the ``training`` argument of a batch norm
    (None where neither applies); ``returned`` whether its output leaves its graph (the graph returns it).
    """

    info: NodeInfo
    median_ns: int
    spread_ns: int
    share: float
    samples_ns: tuple[int, ...]
    host_ns: int | None = None
    memory_bytes: int | None = None
    peak_bytes: int | None = None
    flops: int | None = None
    shape: str = ""
    layout: str = ""
    inputs: tuple[int, ...] = ()
    training: bool | None = None
    returned: bool = False

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

    @property
    def flops_per_s(self) -> float | None:
        """Achieved floating-point operations per second (None when not counted, or for no work)."""
        if not self.flops or not self.median_ns:
            return None
        return self.flops / (self.median_ns / 1e9)


def median_int(values: tuple[int, ...] | list[int]) -> int:
    """Median rounded to a whole nanosecond (0 for no values)."""
    return round(statistics.median(values)) if values else 0


def iqr_int(values: tuple[int, ...] | list[int]) -> int:
    """Interquartile range rounded to a whole nanosecond (0 for fewer than two values)."""
    if len(values) < 2:
        return 0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return round(q[2] - q[0])


ROLLUPS = ("module", "op")
ROOT = "<model>"


@dataclass(frozen=True)
class Rollup:
    """The nodes of one module subtree (``by="module"``; ``<model>`` is the whole model) or of one
    operator type (``by="op"``): their time per pass summed, then the median and spread over passes."""

    by: str
    name: str
    depth: int
    nodes: int
    median_ns: int
    spread_ns: int
    share: float
    flops: int | None

    @property
    def flops_per_s(self) -> float | None:
        if not self.flops or not self.median_ns:
            return None
        return self.flops / (self.median_ns / 1e9)


def rollups(nodes: Sequence[NodeStats], by: str) -> tuple[Rollup, ...]:
    """Every module subtree, or every operator type, of ``nodes``, slowest first (the model first)."""
    if by not in ROLLUPS:
        raise ValueError(f"by must be one of {', '.join(ROLLUPS)}, not {by!r}")
    members: dict[str, list[NodeStats]] = {}
    for n in nodes:
        if by == "op":
            names = [n.target]
        else:
            parts = n.module.split(".") if n.module else []
            names = [ROOT] + [".".join(parts[:d]) for d in range(1, len(parts) + 1)]
        for name in names:
            members.setdefault(name, []).append(n)
    passes = min((len(n.samples_ns) for n in nodes), default=0)
    whole = [sum(n.samples_ns[i] for n in nodes) for i in range(passes)]
    busy = (median_int(whole) if whole else sum(n.median_ns for n in nodes)) or 1
    out = []
    for name, group in members.items():
        passes = min(len(n.samples_ns) for n in group)
        per_pass = [sum(n.samples_ns[i] for n in group) for i in range(passes)]
        median = median_int(per_pass) if per_pass else sum(n.median_ns for n in group)
        counted = [n.flops for n in group if n.flops is not None]
        depth = 0 if name == ROOT or by == "op" else name.count(".") + 1
        out.append(
            Rollup(
                by=by,
                name=name,
                depth=depth,
                nodes=len(group),
                median_ns=median,
                spread_ns=iqr_int(per_pass),
                share=median / busy,
                flops=sum(counted) if len(counted) == len(group) else None,
            )
        )
    return tuple(sorted(out, key=lambda r: (r.name != ROOT, -r.median_ns, r.name)))


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

    def rollup(self, by: str = "module") -> tuple[Rollup, ...]:
        """Time per module subtree (``"module"``: the model, ``layer1``, ``layer1.0``, ...) or per operator
        type (``"op"``), slowest first."""
        return rollups(self.nodes, by)

    def table(self, sort: str = "time", limit: int | None = None, by: str = "node") -> str:
        """A per-node table (``by="node"``), or a roll-up table (``by="module"`` or ``"op"``); ``sort`` is
        ``"time"`` (slowest first) or ``"graph"`` (execution order; nodes only)."""
        from pytest_fxprof.render import profile_table, rollup_table

        if by == "node":
            return profile_table(self, sort=sort, limit=limit)
        if sort != "time":
            raise ValueError(f"roll-ups are sorted by time; sort={sort!r} is for the node table (by='node')")
        return rollup_table(self, by=by, limit=limit)

    @property
    def hints(self) -> tuple[Hint, ...]:
        """Where to look for speed (a convolution whose BatchNorm could be folded into it, memory-bound
        nodes with a large share, nodes far below their peers' FLOP/s, layout copies); never failures."""
        from pytest_fxprof.hints import find_hints

        return find_hints(self.nodes) if self.measured else ()  # one cold pass says little about where time goes

    def to_dataframe(self, by: str = "node") -> pd.DataFrame:
        """A table of the profile, times in microseconds.

        - ``"node"``: one row per node in execution order, with its output shape and layout, FLOP counts
          and achieved GFLOP/s where counted, on CUDA the host (launch) time and the memory allocated
          after each node and its peak while it ran, and when compared with a baseline the baseline
          time, the ratio after the speed factor, the band and the verdict;
        - ``"module"`` or ``"op"``: one row per roll-up;
        - ``"verdict"``: one row per decision of the comparison (each node, each aggregate, the total),
          with its reason; empty when the profile was not compared.
        """
        import pandas as pd

        from pytest_fxprof.frames import node_rows, rollup_rows, verdict_rows

        if by == "node":
            rows, columns = node_rows(self)
        elif by == "verdict":
            rows, columns = verdict_rows(self.comparison)
        elif by in ROLLUPS:
            rows, columns = rollup_rows(self.rollup(by))
        else:
            raise ValueError(f"by must be 'node', 'module', 'op' or 'verdict', not {by!r}")
        return pd.DataFrame(rows, columns=columns)

    def to_csv(self, path: str | Path, by: str = "node") -> None:
        """Write ``to_dataframe(by)`` as CSV (no index column), whole or not at all."""
        from pathlib import Path

        from pytest_fxprof.baseline import write_atomic

        write_atomic(Path(path), self.to_dataframe(by).to_csv(index=False))
