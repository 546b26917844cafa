"""A profile: what one ``fxprof`` call measured, node by node, and its roll-ups by module and operator type.

Owns ``Profile``, the plain record the profiler returns and every later stage reads, and the roll-ups
computed from its nodes. ``ProfileResult``, what users get, adds the tables, hints and DataFrames on top
(``pytest_fxprof.result``).

Must not import torch, pytest or pandas.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pytest_fxprof.records.disturbance import Disturbance
from pytest_fxprof.records.fingerprint import Fingerprint
from pytest_fxprof.records.measurement import (
    BaselineEntry,
    Capture,
    Environment,
    NodeStats,
    Protocol,
    Run,
    Setup,
    Tolerances,
    iqr_int,
    is_step,
    median_int,
)
from pytest_fxprof.records.verdicts import Comparison

ROLLUPS = ("module", "op")
ROOT = "<model>"


@dataclass(frozen=True)
class Rollup:
    """The nodes of one module subtree (``by="module"``; ``<model>`` is the whole model) or of one
    operator type (``by="op"``): their time per pass summed, then the median and spread over passes.

    In a training step each is taken per direction and named with it (``layer3.0 backward``,
    ``aten.mm.default forward``, ``<model> backward`` the whole backward); ``<model>`` is the whole step.
    ``path`` is the module path or operator type without the direction."""

    by: str
    name: str
    depth: int
    nodes: int
    median_ns: int
    spread_ns: int
    share: float
    flops: int | None
    direction: str = ""
    path: str = ""

    @property
    def flops_per_s(self) -> float | None:
        if not self.flops or not self.median_ns:
            return None
        return self.flops / (self.median_ns / 1e9)


def rollups(nodes: Sequence[NodeStats], by: str) -> tuple[Rollup, ...]:
    """Every module subtree, or every operator type, of ``nodes``, slowest first (the model first)."""
    if by not in ROLLUPS:
        raise ValueError(f"by must be one of {', '.join(ROLLUPS)}, not {by!r}")
    members: dict[tuple[str, str], list[NodeStats]] = {}
    step = is_step([n.info for n in nodes])
    for n in nodes:
        direction = n.info.direction if step else ""
        if by == "op":
            names = [n.target]
        else:
            parts = n.module.split(".") if n.module else []
            names = [ROOT] + [".".join(parts[:d]) for d in range(1, len(parts) + 1)]
        for name in names:
            members.setdefault((name, direction), []).append(n)
        if step and by == "module":
            members.setdefault((ROOT, ""), []).append(n)  # the whole step
    passes = min((len(n.samples_ns) for n in nodes), default=0)
    whole = [sum(n.samples_ns[i] for n in nodes) for i in range(passes)]
    busy = (median_int(whole) if whole else sum(n.median_ns for n in nodes)) or 1
    out = []
    for (path, direction), group in members.items():
        name = f"{path} {direction}" if direction else path
        passes = min(len(n.samples_ns) for n in group)
        per_pass = [sum(n.samples_ns[i] for n in group) for i in range(passes)]
        median = median_int(per_pass) if per_pass else sum(n.median_ns for n in group)
        counted = [n.flops for n in group if n.flops is not None]
        depth = 0 if path == ROOT or by == "op" else path.count(".") + 1
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
                direction=direction,
                path=path,
            )
        )
    return tuple(sorted(out, key=lambda r: (r.name != ROOT, r.path != ROOT, -r.median_ns, r.name)))


@dataclass(frozen=True)
class Profile:
    """What one profile measured: the plain record. Users get it as a ``ProfileResult``.

    ``measured`` is False when the module ran once, cold, without a measurement protocol (a plain
    pytest run without ``--fxprof`` or ``--fxprof-update``): the times are then indicative only.
    ``confirmations`` are the runs of re-measurements taken because the profile looked slower (a
    regression stands only if every measurement shows it). ``comparison`` is set when the fixture
    compared the profile with a baseline. ``seconds`` is the wall time the profile took, confirmation
    included (0 when not timed). ``setup`` is what the test handed to the model and the module's mode.
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
    setup: Setup | None = None
    disturbance: Disturbance = field(default=Disturbance(), compare=False)
    """How disturbed the kept passes were (``records.disturbance``); ``disturbance.busy``: measured on a busy
    machine, ``disturbance.line`` says so with the figures."""
    cold: str = ""
    """Where a profile that holds no measurement (``measured`` False: one cold pass) is measured, or how to measure
    it, as its table says ("" for the default: run with ``--fxprof`` or ``--fxprof-update``)."""
    fault_samples: tuple[int, ...] = ()
    """The minor page faults the thread took in each timed plain call (empty where not read: a CUDA device, a
    platform without per-thread counters, an unmeasured profile)."""
    module_faults: tuple[tuple[str, int], ...] = ()
    """``(module path, minor page faults)`` of each submodule in one plain call as the user makes it (the root's
    path is ""), where they were read (``measure.facts.module_faults``): where the allocator's cost lies in the
    program the user runs."""
    fingerprint: Fingerprint | None = field(default=None, compare=False)
    """The call's computation fingerprint, read at capture (``measure.fingerprint``)."""

    @property
    def busy(self) -> bool:
        """Whether the profile was measured on a busy machine (``disturbance.busy``)."""
        return self.disturbance.busy

    @property
    def total_ns(self) -> int:
        """Median time of the plain, uninstrumented call as the user makes it (the instrumented pass if none was
        timed): what the total's verdict compares."""
        return median_int(self.total_samples_ns or self.instrumented_samples_ns)

    @property
    def faults(self) -> int | None:
        """Median minor page faults of one plain call (None where not read)."""
        return median_int(self.fault_samples) if self.fault_samples else None

    @property
    def remeasured(self) -> bool:
        return bool(self.confirmations)

    @property
    def instrumented_ns(self) -> int:
        """Median time of a whole instrumented pass."""
        return median_int(self.instrumented_samples_ns)

    @property
    def overhead(self) -> float | None:
        """Instrumented pass / plain call: the profiler's cost as a ratio (None if not timed)."""
        if not self.total_samples_ns or not self.total_ns:
            return None
        return self.instrumented_ns / self.total_ns

    def run(self) -> Run:
        """This profile as one process's summary, the unit a baseline stores."""
        node_faults = [n.faults for n in self.nodes]
        return Run(
            total_ns=median_int(self.total_samples_ns),
            instrumented_ns=self.instrumented_ns,
            reference_ns=median_int(self.reference_samples_ns),
            node_ns=tuple(n.median_ns for n in self.nodes),
            node_spread_ns=tuple(n.spread_ns for n in self.nodes),
            faults=self.faults,
            node_faults=tuple(f for f in node_faults if f is not None) if None not in node_faults else (),
            module_faults=self.module_faults,
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
            setup=self.setup,
            shapes=tuple(n.shape for n in self.nodes) if any(n.shape for n in self.nodes) else (),
            allocated=tuple(n.allocated or 0 for n in self.nodes)
            if any(n.allocated is not None for n in self.nodes)
            else (),
            fingerprint=self.fingerprint,
        )

    def rollup(self, by: str = "module") -> tuple[Rollup, ...]:
        """Time per module subtree (``"module"``: the model, ``layer1``, ``layer1.0``, ...) or per operator
        type (``"op"``), slowest first."""
        return rollups(self.nodes, by)
