"""What was measured and where: nodes and their identity, one process's run, the environment, the protocol,
the capture, and a baseline entry that holds them.

Owns the frozen dataclasses that every stage passes on, and the median and spread they are summarised with.
Must not import torch, pytest or pandas.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_fxprof.records.fingerprint import Fingerprint


@dataclass(frozen=True)
class NodeInfo:
    """One timed node of a captured graph.

    ``key`` is the node's stable identity (op, module path, target and its occurrence among nodes with
    the same three), which does not shift when an op is inserted elsewhere in the graph. ``name`` is
    the generated FX node name and ``source`` the ``file:line`` of the user's code that made the node
    (empty when the capture did not record it); both are shown to people but never used for matching.
    ``direction`` is ``forward``, ``backward`` or ``optimizer`` (a training step's parts); a backward node's
    ``module`` and ``source`` are those of the forward computation it differentiates, and ``forward`` names
    that forward node (empty where no single one is known, as for a gradient summed over several uses).
    """

    key: str
    name: str
    op: str
    target: str
    module: str
    source: str = ""
    direction: str = "forward"
    forward: str = ""

    @property
    def signature(self) -> tuple[str, str, str]:
        """What must be equal for two nodes of different graphs to be the same node."""
        return (self.op, self.module, directed(self.target, self.direction))

    @property
    def label(self) -> str:
        """The target as people read it: ``aten.convolution_backward.default``, with ``(backward)`` or
        ``(optimizer)`` after it outside the forward."""
        return self.target if self.direction == FORWARD else f"{self.target} ({self.direction})"

    @property
    def where(self) -> str:
        """Human-readable location: the module path, or ``<root>`` for the top-level module."""
        return self.module or "<root>"


KERNEL_OP = "call_kernel"
"""The ``op`` of a compiled model's node (``capture.inductor``): a kernel, a library call, or a graph's entry. An FX
node's is ``call_function``, ``call_module``..."""


def node_key(op: str, module: str, target: str, occurrence: int, direction: str = "forward") -> str:
    """The stable key of the ``occurrence``-th node with this op, module path and target (in ``direction``,
    which prefixes the key outside the forward, so that a forward node's key reads as it always has)."""
    key = f"{op}:{module or '<root>'}:{target}#{occurrence}"
    return key if direction == FORWARD else f"{direction}:{key}"


FORWARD = "forward"
DIRECTIONS = (FORWARD, "backward", "optimizer")
"""The parts of a training step, in the order a step runs them; a forward-only profile has only the first."""


def directed(name: str, direction: str) -> str:
    """``name`` of a node, module subtree or operator type as seen in ``direction``: ``layer3.0 backward``
    (unchanged in the forward)."""
    return name if direction == FORWARD else f"{name} {direction}"


def is_step(nodes: Sequence[NodeInfo]) -> bool:
    """Whether ``nodes`` are a training step's (any node outside the forward)."""
    return any(n.direction != FORWARD for n in nodes)


def capture_difference(
    first: Sequence[str], second: Sequence[str], names: tuple[str, str] = ("the first capture", "the second")
) -> str:
    """What differs between two captures of one call, by their nodes' keys (the first node where they part, or
    what the longer one goes on with), named as ``names`` say, and how to make the capture the same every time:
    for the error that says it must be."""
    a, b = names
    common = min(len(first), len(second))
    part = next((i for i in range(common) if first[i] != second[i]), None)
    if part is not None:
        where = f"at node {part + 1} {a} has {first[part]}, {b} {second[part]}"
    else:
        longer, which = (first, a) if len(first) > len(second) else (second, b)
        where = f"{which} goes on after node {common} with {longer[common]}"
    return f"{a} has {len(first)} node(s), {b} {len(second)}; {where}.\n  {DETERMINISM_FIX}"


DETERMINISM_FIX = (
    "Fix: make the forward take the same path on every call: seed the random generators in the test "
    "(torch.manual_seed(0), random.seed(0), numpy.random.seed(0)), branch on no random value, counter or other "
    "state the model keeps between calls (nor on a tensor's values: data-dependent control flow), and pass "
    "fixed inputs."
)
"""How a capture that differs from call to call is made the same, for the errors that say it must be."""


TUNED_ALLOCATOR = "glibc-tuned"
"""The allocator an environment records where ``--fxprof-allocator tuned`` told glibc never to map, trim or return
memory (``measure.machine.tune_allocator``): a program other than the user's where memory is a change's cost."""


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

    MATCH_FIELDS = ("warmup", "passes", "threads")
    """What must agree for two recordings to be learnt from together: how each process measured its times.
    ``processes`` need not: it says only how many runs a recording holds, and the bands pool recordings of any
    size (an update on a busy machine is told to record with more)."""


def mismatched_fields(before: Environment | Protocol, after: Environment | Protocol) -> str:
    """The ``MATCH_FIELDS`` that differ, as ``torch '2.4.1' -> '2.5.0', threads 4 -> 8`` ("" where none does)."""
    out = []
    for name in before.MATCH_FIELDS:
        old, new = getattr(before, name), getattr(after, name)
        if old != new:
            out.append(f"{name} {old} -> {new}" if isinstance(old, int) else f"{name} {old!r} -> {new!r}")
    return ", ".join(out)


def measured_unlike(before: Recording, after: Recording) -> str:
    """Why ``before`` was not measured as ``after`` was: in another environment (``Environment.MATCH_FIELDS``) or by
    another protocol (``Protocol.MATCH_FIELDS``), worded from ``before`` to ``after`` (``environment torch '2.4.0'
    -> '2.5.1'``); "" where it was measured alike."""
    changed = mismatched_fields(before.environment, after.environment)
    if changed:
        return f"environment {changed}"
    changed = mismatched_fields(before.protocol, after.protocol)
    return f"the protocol changed ({changed})" if changed else ""


@dataclass(frozen=True)
class Capture:
    """How the module became a graph: the capture ``method`` (``symbolic_trace``, ``export``, ``dynamo`` or
    a user's tracer), the submodules kept whole, how many graphs it made, and in ``detail`` why an
    automatic capture chose this method (what failed before it). ``detail``, ``graphs`` and ``classes`` are
    reported, never compared."""

    method: str
    leaf_modules: tuple[str, ...] = ()
    graphs: int = field(default=1, compare=False)
    detail: str = field(default="", compare=False)
    classes: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    """``(module path, class name)`` of every module that holds a node, and of each module above it, sorted by
    path (empty where not recorded: files and reports of earlier versions). The gate aggregates a class's
    instances together and names a module's class in a failure."""
    opaque: tuple[str, ...] = field(default=(), compare=False)
    """The submodules ``auto`` kept whole on its own (the user named none of them): each is one node, so blame
    cannot go inside it. Empty where none was, or where the capture resolved every submodule."""

    def class_map(self) -> dict[str, str]:
        """``classes`` as a mapping from module path to class name."""
        return dict(self.classes)


@dataclass(frozen=True)
class Run:
    """One process's summary of a profile: medians in nanoseconds, aligned with the graph's nodes.

    ``total_ns`` is the plain (uninstrumented) call as the user makes it, the call the total's verdict rests on (0
    in runs recorded before every process timed it: their total is the instrumented pass), ``instrumented_ns`` a
    whole profiled pass and ``reference_ns`` a fixed workload that shares no kernels with torch, timed in the same
    passes, so that the machine's speed at the time can be divided out of the total.

    Memory, as the process's allocator paid for it (None and empty where not measured: files of earlier versions,
    a CUDA device): ``faults`` the minor page faults the thread took in one plain call (median over the passes),
    ``node_faults`` each node's, from passes of their own that read the thread's fault counter at every node, and
    ``module_faults`` each submodule's ``(path, faults)`` in the call as the user makes it (the root's path "").
    """

    total_ns: int
    instrumented_ns: int
    reference_ns: int
    node_ns: tuple[int, ...]
    node_spread_ns: tuple[int, ...]
    faults: int | None = None
    node_faults: tuple[int, ...] = ()
    module_faults: tuple[tuple[str, int], ...] = ()

    @property
    def timed_ns(self) -> int:
        """What the total's verdict compares: the plain call where it was timed, else the instrumented pass."""
        return self.total_ns or self.instrumented_ns


@dataclass(frozen=True)
class Tolerances:
    """Relative tolerances: the smallest band a node, aggregate or the total gets, whatever its measured
    spread. A baseline records the ones it was taken with, for reference; a check uses its own settings."""

    node: float
    total: float


@dataclass(frozen=True)
class Setup:
    """The test's side of a measurement: what it handed to the model, in which mode and process state.

    ``inputs`` has one line per input the call took (``args[0]: float32[128, 3, 224, 224] cpu``, a Python
    value as itself), ``mode`` is ``train``, ``eval`` or how many modules were in train mode, ``state`` one line
    per global of torch that the test changed before the call (``default dtype: torch.float64``, ``replaced:
    torch.nn.functional.relu``: ``measure.signature.state_of``). Another setup measures something else: a check
    against a baseline of another setup is a mismatch, never a slowdown.
    """

    inputs: tuple[str, ...]
    mode: str
    state: tuple[str, ...] = ()

    def differences(self, other: Setup) -> list[str]:
        """Readable lines for what differs, as ``Environment.differences`` words them."""
        out = []
        if self.inputs != other.inputs:
            changed = [_changed(a, b) for a, b in zip(self.inputs, other.inputs, strict=False) if a != b]
            if len(self.inputs) != len(other.inputs):
                changed.append(f"{len(self.inputs)} input(s) in the baseline, {len(other.inputs)} in this run")
            out.append(f"inputs: {'; '.join(changed)}")
        if self.mode != other.mode:
            out.append(f"mode: {self.mode!r} in the baseline, {other.mode!r} in this run")
        if self.state != other.state:
            out.append(f"state: {_state_change(self.state, other.state)}")
        return out


def _state_change(before: tuple[str, ...], now: tuple[str, ...]) -> str:
    """What the test changes of torch's globals in one measurement and not in the other, the test named as the
    cause: ``this test sets the default dtype to torch.float64 in this run, not in the baseline``."""
    replaced = [{line.removeprefix(REPLACED) for line in lines if line.startswith(REPLACED)} for lines in (before, now)]
    was, is_now = ({k: v for k, _, v in (line.partition(": ") for line in lines)} for lines in (before, now))
    parts = []
    for name in sorted((set(was) | set(is_now)) - {REPLACED.removesuffix(": ")}):
        a, b = was.get(name), is_now.get(name)
        if a == b:
            continue
        if a is None:
            parts.append(f"this test sets the {name} to {b} in this run, not in the baseline")
        elif b is None:
            parts.append(f"this test sets the {name} to {a} in the baseline, not in this run")
        else:
            parts.append(f"this test sets the {name} to {a} in the baseline, to {b} in this run")
    for names, where in (
        (replaced[1] - replaced[0], "in this run, not in the baseline"),
        (replaced[0] - replaced[1], "in the baseline, not in this run"),
    ):
        if names:
            parts.append(f"this test replaces {', '.join(sorted(names))} {where}")
    return "; ".join(parts)


REPLACED = "replaced: "
"""How a state line names a function the test replaced (``measure.signature.state_of``)."""


def _changed(before: str, now: str) -> str:
    """One input that differs: ``args[0] was float32[128, 3] cpu in the baseline, float32[256, 3] cpu now``."""
    path, _, was = before.partition(": ")
    other_path, _, is_now = now.partition(": ")
    if path == other_path:
        return f"{path} was {was} in the baseline, {is_now} in this run"
    return f"{before} in the baseline, {now} in this run"


@dataclass(frozen=True)
class Recording:
    """One recording of a baseline entry: when (``date``, UTC ISO 8601 to the second, ``2026-11-24T22:30:05Z``;
    "" when unknown), where, how, and its runs (one per fresh process, aligned with the entry's nodes)."""

    date: str
    environment: Environment
    protocol: Protocol
    runs: tuple[Run, ...]


@dataclass(frozen=True)
class BaselineEntry:
    """Everything recorded for one ``fxprof`` call of one test.

    ``setup`` and ``shapes`` (each node's output, aligned with ``nodes``) are None and empty in files recorded
    before they were: such an entry is compared without them. ``recorded`` is the date of ``runs`` ("" when
    unknown) and ``history`` the earlier recordings of the same environment, graph, setup and capture method,
    newest first, not including the entry's own (``recordings`` gives all of them). ``revision`` is the git commit
    whose code the entry's own recording measured ("" where the working tree differed from every commit, or was
    not in git): where the model's code changed since, a check measures the change against that commit's code
    (``against.recorded``)."""

    capture: Capture
    environment: Environment
    protocol: Protocol
    tolerances: Tolerances
    nodes: tuple[NodeInfo, ...]
    runs: tuple[Run, ...]
    setup: Setup | None = None
    shapes: tuple[str, ...] = ()
    allocated: tuple[int, ...] = ()
    """Each node's bytes of new memory (its outputs that are not views of memory it was handed), aligned with
    ``nodes``; empty where not seen (files of earlier versions)."""
    recorded: str = ""
    history: tuple[Recording, ...] = ()
    revision: str = ""
    fingerprint: Fingerprint | None = field(default=None, compare=False)
    """The computation the entry's own recording measured (``records.fingerprint``; None in files of earlier
    versions): a check whose call has the same one is decided unchanged without measuring."""

    @property
    def own_recording(self) -> Recording:
        """The entry's own recording (its ``runs``), as a ``Recording``."""
        return Recording(date=self.recorded, environment=self.environment, protocol=self.protocol, runs=self.runs)

    @property
    def recordings(self) -> tuple[Recording, ...]:
        """Every recording the entry holds, newest first: its own, then ``history``."""
        return (self.own_recording, *self.history)

    def not_comparable(self, recording: Recording) -> str:
        """Why ``recording`` (one of ``recordings``) cannot be learnt from beside the entry's own: it was measured in
        another environment or by another protocol (``measured_unlike``, from it to the entry's own); "" where it
        can. The graph, setup and capture method are the entry's for every recording its file holds (a history's
        runs are aligned with the entry's nodes). Only a file edited by hand, as a merge resolved by hand, holds
        such a recording: ``--fxprof-update`` keeps none (``store.history.carry``)."""
        return measured_unlike(recording, self.own_recording)

    @property
    def comparable_recordings(self) -> tuple[Recording, ...]:
        """The recordings the bands may be learnt from, newest first: the entry's own, then each of its history
        measured alike (``not_comparable``)."""
        own = self.own_recording
        return (own, *(r for r in self.history if not measured_unlike(r, own)))


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
    allocated: int | None = None
    """Bytes of new memory its outputs hold (those that are no view of memory the node was handed), seen in the
    counting pass: what the node asks the allocator for, whichever allocator runs (None where not seen)."""
    faults: int | None = None
    """Minor page faults the thread took in the node (median over the fault passes; None where not read): the
    allocator's cost of that memory in this process, which depends on its state."""

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
