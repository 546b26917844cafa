"""What the gate decided: a verdict per node, per aggregate and for the total, each with its reason.

Owns the verdict records that ``judge.decision.compare`` returns and every view reads: ``Comparison`` and the
``NodeVerdict``, ``AggregateVerdict`` and ``TotalVerdict`` it holds, each carrying its ``Judgement`` (the
ratios, the band and what set it, the verdict and why). Plain data: the rules that make them live in
``judge.decision``.

Must not import torch, pytest or pandas.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from pytest_fxprof.records.measurement import NodeInfo


class Verdict(StrEnum):
    OK = "ok"
    SLOWER = "slower"
    FASTER = "faster"
    NOISY = "too noisy"


class Status(StrEnum):
    """How a profile of a run ended, the one vocabulary of the reports and every view. A comparison ends in one of
    the first five (``JUDGED``); the others say what came instead of a comparison."""

    PASS = "pass"  # noqa: S105 - a verdict, not a password
    REGRESSION = "regression"
    MISMATCH = "mismatch"
    UNDECIDED = "undecided"
    """No verdict: nothing failed, but an item that gates is too noisy to decide (``Comparison.noisy``), or the
    profile was measured on a busy machine every time, nothing judged (``Comparison.noisy_reason`` says why).
    Never a pass: ``--fxprof-on-undecided`` says what it does to the test."""
    UNCHANGED = "unchanged"
    """Its computation's fingerprint is the one its baseline recorded, or the old side's (``records.fingerprint``):
    the same computation, so nothing to measure; decided without timing it. A verdict of its own, never a pass."""
    MISSING = "missing"
    """Under ``--fxprof``: no baseline for it."""
    NEW = "new"
    """Against a revision: the test, or this call of its fixture, does not exist at the revision."""
    NOT_COMPARED = "not compared"
    """Against a revision: the test did not pass here, or skipped at the revision (or in a fresh process), so its
    sides were not compared."""
    ERROR = "error"
    """Against a revision: the check could not be made (a side's process failed or hung; the test's failure says
    why)."""
    RECORDED = "recorded"
    """Under ``--fxprof-update``: its baseline was written ..."""
    NOT_RECORDED = "not recorded"
    """... or was to be, and writing it failed."""
    UNMEASURED = "unmeasured"
    """A plain ``pytest`` run's profile (no fxprof mode): the model ran once, cold, and nothing was measured."""


JUDGED = (Status.PASS, Status.REGRESSION, Status.MISMATCH, Status.UNDECIDED, Status.UNCHANGED)
"""The statuses a comparison ends in."""


class BandSource(StrEnum):
    TOLERANCE = "tolerance"
    SPREAD = "spread"
    FLOOR = "floor"


class Kind(StrEnum):
    NODE = "node"
    OP = "op"
    MODULE = "module"
    """One module subtree, at any depth: ``transformer.h.2.mlp``."""
    PATTERN = "pattern"
    """The instances of one repeated block together, their indices folded: ``transformer.h.*.mlp``."""
    CLASS = "class"
    """Every instance of one module class (``LayerNorm``) where they are not the instances of one pattern."""
    TOTAL = "total"


MODULE_KINDS = (Kind.MODULE, Kind.PATTERN, Kind.CLASS)
"""The aggregates that say where in the model's code time went (an operator type says what kind of work)."""


def conservative(ratios: Sequence[float]) -> float:
    """The ratio that every measurement supports: the smallest if all are slower, the largest if all faster."""
    if min(ratios) > 1.0:
        return min(ratios)
    if max(ratios) < 1.0:
        return max(ratios)
    return ratios[-1]


@dataclass(frozen=True)
class Judgement:
    """Ratio against the baseline (one per measurement), the band and what set it, and the verdict."""

    ratios: tuple[float, ...]
    band: float
    band_source: BandSource
    verdict: Verdict
    reason: str
    sigma: float | None = None
    """The between-process deviation (log scale) the band was derived from; None if not estimated."""
    floor: float = 0.0
    """The absolute floor as a share of the item's baseline time."""
    estimate: float | None = None
    """Against a revision: the geometric mean of ``ratios``, which are then one per pair of processes (old and
    new side), not one per measurement. None against a baseline."""
    replaced: str = ""
    """Against a revision, where the operations its changed code brought in made it slower (``judge.paired``): their
    verdict against those they replaced, which the failure's ``where:`` shows on a line of its own; "" otherwise."""

    @property
    def ratio(self) -> float:
        return self.estimate if self.estimate is not None else conservative(self.ratios)

    @property
    def paired(self) -> bool:
        """Whether the ratios are per pair of old and new processes (against a revision)."""
        return self.estimate is not None

    @property
    def confirmed(self) -> bool | None:
        """Whether every measurement agreed with the first one's flag; None when measured once, when the
        first measurement flagged nothing, or when the band was too noisy to decide anything."""
        if self.paired or len(self.ratios) < 2 or not self.ratios[0] > 1.0 + self.band or self.verdict is Verdict.NOISY:
            return None
        return self.verdict is Verdict.SLOWER


class _Judged:
    """What every verdict record reads off its judgement."""

    judgement: Judgement
    baseline_ns: float

    @property
    def ratio(self) -> float:
        return self.judgement.ratio

    @property
    def band(self) -> float:
        return self.judgement.band

    @property
    def band_source(self) -> BandSource:
        return self.judgement.band_source

    @property
    def verdict(self) -> Verdict:
        return self.judgement.verdict

    @property
    def reason(self) -> str:
        return self.judgement.reason

    @property
    def delta_ns(self) -> float:
        """Time lost (positive) or won, after dividing out what the verdict's test divided out."""
        return self.baseline_ns * (self.ratio - 1.0)


FAULTS_SHOWN = 256
"""Page faults a call that say something of a program's memory: fewer (1 MiB of 4 KiB pages) are the allocator's own
bookkeeping, and a change of that size is not said (``Memory.text``) nor read as an allocator state
(``judge.memory.STATE_FAULTS``)."""


@dataclass(frozen=True)
class Memory:
    """What an item costs in memory a call, on each side: ``bytes_*`` the new memory its nodes' outputs hold (what
    it asks the allocator for, whichever allocator runs), ``faults_*`` the page faults its code took in the plain
    call (what that memory cost this allocator in its state). None where a side did not measure it."""

    bytes_before: int | None
    bytes_after: int | None
    faults_before: float | None
    faults_after: float | None

    MB = 1e6
    """Bytes in a megabyte, as the memory lines count them."""

    @property
    def bytes_delta(self) -> int | None:
        if self.bytes_before is None or self.bytes_after is None:
            return None
        return self.bytes_after - self.bytes_before

    @property
    def faults_delta(self) -> float | None:
        if self.faults_before is None or self.faults_after is None:
            return None
        return self.faults_after - self.faults_before

    def text(self, *, faults_from: int = FAULTS_SHOWN) -> str:
        """``+5.3 MB a call (12.1 -> 17.4 MB), +1,300 page faults a call (40 -> 1,340)``: the bytes where they
        changed, the faults where they changed by ``faults_from`` or more ("" where neither did)."""
        parts = []
        delta = self.bytes_delta
        if delta and self.bytes_before is not None and self.bytes_after is not None:
            parts.append(
                f"{delta / self.MB:+.1f} MB a call ({self.bytes_before / self.MB:.1f} -> "
                f"{self.bytes_after / self.MB:.1f} MB)"
            )
        faults = self.faults_delta
        if faults is not None and abs(faults) >= faults_from:
            parts.append(f"{faults:+,.0f} page faults a call ({self.faults_before:,.0f} -> {self.faults_after:,.0f})")
        return ", ".join(parts)


@dataclass(frozen=True)
class NodeVerdict(_Judged):
    """The decision for one node present in both baseline and run."""

    node: NodeInfo
    baseline_ns: float
    current_ns: float
    speed_factor: float
    floor_ns: float
    gates: bool
    judgement: Judgement
    divisor: float = 1.0
    """What the slower test divided the node's time by (``Policy.divisor`` of its speed factor)."""
    shapes: tuple[str, str] | None = None
    """The node's output in the baseline and in this run, where the model's code changed it (None where it
    did not, or where either side did not see it): judged as usual, and named beside the verdict."""


@dataclass(frozen=True)
class AggregateVerdict(_Judged):
    """The decision for a group of nodes: one operator type or one module subtree."""

    kind: Kind
    name: str
    members: tuple[NodeInfo, ...]
    baseline_ns: float
    current_ns: float
    speed_factor: float
    judgement: Judgement
    divisor: float = 1.0
    """What the slower test divided the members' time by, for their time-weighted speed factor."""
    member_index: tuple[int, ...] = ()
    """Where the members' own verdicts stand in ``Comparison.nodes``."""
    cls: str = ""
    """The module class: of a module or of every instance of a pattern (``MLP``; "" where unknown or mixed), or the
    class a ``Kind.CLASS`` aggregate gathers."""
    instances: tuple[str, ...] = ()
    """A pattern's or a class's module paths (``transformer.h.0.mlp``, ...); empty for a module or an operator type."""
    added: tuple[NodeInfo, ...] = ()
    """Its nodes that only this run holds (the code in it changed): charged to it, with their source lines."""
    removed: tuple[NodeInfo, ...] = ()
    """Its nodes that only the baseline (or the old side) held."""
    family: str = ""
    """The level it is tested with (``op``, ``depth 3``, ``class``) ..."""
    tested: int = 1
    """... and how many aggregates that level tests: the more, the stricter each one's test (``judge.aggregates``)."""

    path: str = ""
    """The name without a training step's direction: ``layer3.0`` of ``layer3.0 backward`` ("": the name)."""
    direction: str = ""
    """A training step's direction the aggregate lies in ("" outside a training step)."""
    gates: bool = True
    """Whether its nodes together are large enough to fail a test alone (``judge.noise.large_enough``): where
    not, a band too noisy to decide leaves the decision to the larger aggregates that hold it (a slower verdict
    still fails the test: the floor already keeps small items from failing on noise)."""
    memory: Memory | None = None
    """What it costs in memory a call on each side (``judge.memory``; None where not measured, or an operator type's
    faults, which no module hook can read)."""

    @property
    def where(self) -> str:
        """The module path, pattern or class without the direction."""
        return self.path or self.name

    @property
    def changed(self) -> bool:
        """Whether its code changed: other operations added than removed (``operations_changed``)."""
        return operations_changed(self.added, self.removed)


REPLACED = "; but its new operations, against those they replaced: "
"""How a module's reason goes on where the operations its changed code brought in failed it (``judge.paired``): what
follows is their verdict (``Judgement.replaced``)."""


def operations_changed(added: Iterable[NodeInfo], removed: Iterable[NodeInfo]) -> bool:
    """Whether the nodes only the new side holds (``added``) are other operations than those only the old side
    holds (``removed``): the same operations in another order, or renamed, are no change."""
    return Counter(n.label for n in added) != Counter(n.label for n in removed)


@dataclass(frozen=True)
class TotalVerdict(_Judged):
    """The decision for the model's total: the plain call as the user makes it (the instrumented pass where none was
    timed), against a stored baseline divided by the reference workload."""

    baseline_ns: float
    current_ns: float
    machine_factor: float
    judgement: Judgement
    memory: Memory | None = None
    """The whole call's memory: the bytes every node's outputs hold, the page faults of the plain call."""
    overhead: tuple[float | None, float | None] = (None, None)
    """The profiler's overhead on each side (the instrumented pass over the plain call, median over processes; None
    where a side timed no plain call): per-node times are the instrumented pass's, the total the plain call's."""
    overhead_note: str = ""
    """Where the instrumented pass's change disagrees with the plain call's beyond the overhead's spread: what it
    means for the nodes' times ("" where it agrees)."""
    states: str = ""
    """Where the processes fell into different allocator states, the counts and the memory facts that explain them
    (``judge.memory.States.line``; "" where they did not)."""


@dataclass(frozen=True)
class Blame:
    """What a failure leads with: the smallest module, pattern or class that is slower and holds most of the extra
    time (``judge.blame``), or where none does, the slower node that lost the most.

    ``chain`` are the lead's enclosing modules that were judged, outermost first; ``share`` is the lead's part of
    the extra time it was chosen against (``extra_ns``)."""

    lead: AggregateVerdict | None
    node: NodeVerdict | None
    chain: tuple[AggregateVerdict, ...]
    share: float
    extra_ns: float
    by_memory: bool = False
    """Whether the lead was named by the page faults it gained, not the time (``judge.blame``, rule 6): ``share`` is
    then its part of the faults the whole call gained."""
    by_change: bool = False
    """Whether the lead was named as the only code that changed, where neither the times nor the page faults name a
    place and the total failed (``judge.blame``, rule 7)."""

    @property
    def name(self) -> str:
        """What the lead names: a module path, a pattern, a class, or a node's module."""
        if self.lead is not None:
            return self.lead.where
        return self.node.node.module if self.node is not None else ""


LONE_REASON = (
    "its baseline holds one process's measurement, which cannot show how much the model's times vary between "
    "processes, so no band it sets can tell a slowdown from that spread"
)
"""Why a check against a baseline of one process decides nothing (``judge.decision.refuse_lone``): in another process a
node can take two or three times as long with nothing changed, as the allocator's state differs, and no band that
holds that catches the slowdowns the gate must (BENCHMARKS.md, "Baselines of one process")."""


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
    aggregates: tuple[AggregateVerdict, ...] = ()
    measurements: int = 1
    graphs: tuple[int, int] = (1, 1)
    """How many graphs the capture made: in the baseline, in this run (a new graph break adds one)."""
    against: str = ""
    """Against a revision: the old side, as ``REF (short sha)``; empty against a baseline."""
    pairs: int = 0
    """Against a revision: how many pairs of old and new processes were measured."""
    noisy_reason: str = ""
    """With ``Status.UNDECIDED`` and nothing judged: why (the busy machine's figures)."""
    recordings: int = 1
    """How many recordings of the baseline set the bands (``--fxprof-history``): from ``MIN_RECORDINGS`` on, they
    are learnt from the drift between recordings (``judge.decision``)."""
    blame: Blame | None = None
    """Where the extra time went, when the comparison failed (``judge.blame``): what a failure leads with."""
    added_ns: tuple[float, ...] = ()
    """Each added node's median time in this run (aligned with ``added``; empty where unknown)."""
    removed_ns: tuple[float, ...] = ()
    """Each removed node's median time in the baseline or on the old side (aligned with ``removed``)."""

    @property
    def reference(self) -> str:
        """What the profile was compared with, for the lines that say so: ``its baseline`` or the revision."""
        return self.against or "its baseline"

    @classmethod
    def unchanged(cls, baseline_processes: int = 0, against: str = "") -> Comparison:
        """The verdict of a call whose computation is its reference's (``Status.UNCHANGED``): nothing measured."""
        return cls(Status.UNCHANGED, (), 1.0, baseline_processes, (), None, (), (), against=against)

    @property
    def lone(self) -> bool:
        """Whether a baseline of one process's measurement set the bands: one recording (no comparable earlier one
        learnt from) of one process, which cannot show how the model's times vary between processes."""
        return not self.against and self.baseline_processes < 2 and self.recordings < 2

    @property
    def refused(self) -> bool:
        """Whether the comparison decided nothing because its baseline is ``lone`` (``LONE_REASON``)."""
        return self.status is Status.UNDECIDED and self.noisy_reason == LONE_REASON

    @property
    def slower(self) -> tuple[NodeVerdict, ...]:
        """Slowed nodes that fail the test, the most time lost first."""
        hits = [v for v in self.nodes if v.verdict is Verdict.SLOWER and v.gates]
        return tuple(sorted(hits, key=lambda v: (-v.delta_ns, v.node.key)))

    @property
    def slower_small(self) -> tuple[NodeVerdict, ...]:
        """Slowed nodes too small to fail a test alone (their aggregates gate them)."""
        hits = [v for v in self.nodes if v.verdict is Verdict.SLOWER and not v.gates]
        return tuple(sorted(hits, key=lambda v: (-v.delta_ns, v.node.key)))

    @property
    def slower_aggregates(self) -> tuple[AggregateVerdict, ...]:
        hits = [a for a in self.aggregates if a.verdict is Verdict.SLOWER]
        return tuple(sorted(hits, key=lambda a: (-a.delta_ns, a.kind.value, a.name)))

    @property
    def faster(self) -> tuple[NodeVerdict, ...]:
        hits = [v for v in self.nodes if v.verdict is Verdict.FASTER and v.gates]
        return tuple(sorted(hits, key=lambda v: (v.delta_ns, v.node.key)))

    @property
    def noisy(self) -> tuple[str, ...]:
        """Items that gate and are too noisy to decide: where nothing failed, they leave the check undecided
        (``settle``), never a pass or a failure in disguise."""
        out = [f"node {v.node.name}: {v.reason}" for v in self.nodes if v.verdict is Verdict.NOISY and v.gates]
        out += [
            f"{a.kind.value} {a.name}: {a.judgement.reason}"
            for a in self.aggregates
            if a.verdict is Verdict.NOISY and a.gates
        ]
        if self.total is not None and self.total.verdict is Verdict.NOISY:
            out.append(f"total: {self.total.reason}")
        return tuple(out)

    @property
    def unconfirmed(self) -> tuple[str, ...]:
        """Items the first measurement flagged that a re-measurement did not: warnings, not failures."""
        out = [f"node {v.node.name}: {v.reason}" for v in self.nodes if v.judgement.confirmed is False and v.gates]
        out += [
            f"{a.kind.value} {a.name}: {a.judgement.reason}" for a in self.aggregates if a.judgement.confirmed is False
        ]
        if self.total is not None and self.total.judgement.confirmed is False:
            out.append(f"total: {self.total.reason}")
        return tuple(out)

    @property
    def graphs_changed(self) -> bool:
        """The capture made another number of graphs than the baseline's (graph breaks came or went)."""
        return self.graphs[0] != self.graphs[1]

    @property
    def graph_changed(self) -> bool:
        return bool(self.added or self.removed or self.graphs_changed)

    def leaders(self, aggregate: AggregateVerdict, limit: int = 3) -> tuple[NodeVerdict, ...]:
        """The members that point at the cause: those that took the most time beyond their baseline in
        the first measurement, worst first. Raw times, as the aggregate divides its members by factors
        from outside it: a slowdown shared by every member shows here though no member's own ratio does."""
        members = [self.nodes[i] for i in aggregate.member_index]
        lost = [v for v in members if v.current_ns > v.baseline_ns]
        return tuple(sorted(lost, key=lambda v: (v.baseline_ns - v.current_ns, v.node.key))[:limit])


def settle(c: Comparison) -> Comparison:
    """``c`` with its status ``UNDECIDED`` where it passed while an item that gates is too noisy to decide: a
    check that could not judge everything it gates is not a pass."""
    if c.status is Status.PASS and c.noisy:
        return replace(c, status=Status.UNDECIDED)
    return c
