"""Capture a module with torch.fx and time it node by node.

Owns every use of torch (callers import this module lazily, so importing the plugin stays cheap).
Must not import pytest. The caller's module and inputs leave a profile exactly as they came in: mode,
buffers, torch's random state and its thread count are restored, inputs are cloned before every
pass, everything runs under ``torch.no_grad``, and a module that changes its own parameters in place
is refused.
"""

from __future__ import annotations

import contextlib
import ctypes
import platform
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch.utils._pytree import tree_flatten

from pytest_fxprof.capture import (
    Captured,
    CaptureError,
    LeafSpec,
    ProfileError,
    Runner,
    _graph_failure,
    capture_module,
    describe_nodes,
    fresh_copy,
    kept_as_is,
)
from pytest_fxprof.engine import (
    ClockTimer,
    CompiledEngine,
    DeviceSide,
    Engine,
    EventTimer,
    PassTimes,
    Timer,
    make_engine,
)
from pytest_fxprof.records import (
    Environment,
    NodeStats,
    ProfileResult,
    Protocol,
    iqr_int,
    median_int,
)

__all__ = ["CaptureError", "ProfileError", "profile_module"]


# Environment -------------------------------------------------------------------------------------------


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine() or "unknown"


def device_of(module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any]) -> torch.device:
    for leaf in tree_flatten((list(args), kwargs))[0]:
        if isinstance(leaf, torch.Tensor):
            return leaf.device
    for tensor in module.parameters():
        return tensor.device
    return torch.device("cpu")


def environment(
    threads: int, device: torch.device, allocator: str, clock: str = "wall", engine: str = "compiled"
) -> Environment:
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        dev = f"cuda:{torch.cuda.get_device_name(index)} (CUDA {torch.version.cuda})"
    else:
        dev = device.type
    return Environment(
        torch=str(torch.__version__),  # a TorchVersion, which cannot cross to xdist's controller
        python=".".join(map(str, sys.version_info[:3])),
        platform=f"{platform.system()}-{platform.machine()}",
        cpu=_cpu_model(),
        threads=threads,
        device=dev,
        allocator=allocator,
        clock=clock,
        engine=engine,
    )


_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4
_allocator_state: list[str] = []


def tune_allocator() -> str:
    """Make glibc's allocator behave the same whatever the process did before; say what is in force.

    By default glibc serves large blocks (activations) with mmap/munmap until a threshold that grows
    with the process's history, and trims freed memory back to the system, so the same node is
    slower in a fresh process than after other models ran. With mmap off for allocations, no trimming
    and a 64 MiB top pad, freed memory is kept for reuse. Process-wide and applied once; the returned
    name is recorded in the environment, so tuned and untuned runs are never compared.
    """
    if not _allocator_state:
        state = "default"
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
            libc = ctypes.CDLL(None)
            ok = libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1)
            ok = ok and libc.mallopt(_M_TOP_PAD, 64 << 20)
            state = "glibc-tuned" if ok else "default"
        _allocator_state.append(state)
    return _allocator_state[0]


# Keeping the module and inputs as they were ------------------------------------------------------------


@contextlib.contextmanager
def preserved(module: torch.nn.Module, threads: int) -> Iterator[None]:
    """Run the body with ``threads`` intra-op threads and no grad, then put everything back: the thread
    count, and what ``kept_as_is`` keeps (modes, buffers, attributes, random state, parameters)."""
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with kept_as_is(module), torch.no_grad():
            yield
    finally:
        torch.set_num_threads(previous_threads)


# Timing ----------------------------------------------------------------------------------------------


Clock = Callable[[], int]


def clock_for(threads: int, device: torch.device) -> tuple[str, Clock]:
    """The clock that times a profile, and its name (recorded in the environment, so never mixed).

    On the CPU with one intra-op thread, every op runs on the calling thread, so its CPU time
    (``thread_time_ns``) is the work done: time the thread spent descheduled, because a neighbour on a
    shared runner had the core, is not counted. With more threads, or on a GPU, the wall clock.
    """
    if device.type == "cpu" and threads == 1:
        return "thread-cpu", time.thread_time_ns
    return "wall", time.perf_counter_ns


class ReferenceWorkload:
    """A fixed CPU workload that shares no kernels with torch: NumPy element-wise work and a sort in
    cache, and a streaming pass over 8 MiB (what a neighbour's memory traffic slows down).

    Timed beside every pass, it measures how fast the machine is right now, so that the model's total
    can be divided by it; a regression in torch itself does not cancel out. Both halves count: the
    model's total divided by both varies less between processes than divided by either.
    """

    def __init__(self) -> None:
        import numpy as np

        self._np = np
        rng = np.random.default_rng(0)
        self._data = rng.standard_normal(1 << 14)
        self._stream = rng.standard_normal(1 << 20)
        self._out = np.empty_like(self._stream)

    def __call__(self, clock: Clock = time.perf_counter_ns) -> int:
        np = self._np
        start = clock()
        acc = self._data
        for _ in range(4):
            acc = np.tanh(acc * 0.5) + np.sqrt(np.abs(acc))
        np.sort(acc)
        np.multiply(self._stream, 1.0001, out=self._out)
        np.add(self._out, self._stream, out=self._out)
        return clock() - start


PLAIN_EVERY = 4
"""The plain forward is timed in one kept pass of this many: it serves the overhead figure and the model's
time that the absolute floor takes its share of, not the compared total."""


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def profile_module(
    module: torch.nn.Module,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    name: str,
    protocol: Protocol,
    measured: bool = True,
    leaf_modules: Sequence[LeafSpec] = (),
    tracer: torch.fx.Tracer | None = None,
    capture: str = "auto",
    engine: str = "compiled",
    flops: bool = True,
) -> ProfileResult:
    """Capture ``module``, run ``protocol.warmup`` discarded and ``protocol.passes`` kept passes.

    Each pass times the reference workload and the instrumented forward, so that both see the same
    machine state; every ``PLAIN_EVERY``-th kept pass (and the last warm-up pass) also times the plain
    forward between them, for the profiler's overhead. Where nodes are stamped on the wall clock and
    passes on the thread's CPU clock, a kept pass whose thread was preempted is measured again
    (``chosen_passes``). With ``measured=False`` the module runs once,
    instrumented and cold, and nothing else is timed. ``flops`` counts each node's floating-point
    operations in one more, untimed pass under torch's flop counter (not in an unmeasured profile): a
    warm-up pass of its own would leave the engine's code cold in the first kept pass.
    """
    if not isinstance(module, torch.nn.Module):
        raise ProfileError(f"fxprof profiles a torch.nn.Module, got {type(module).__name__}")
    allocator = tune_allocator() if measured else "not measured"
    device = device_of(module, args, kwargs)
    clock_name, clock = clock_for(protocol.threads, device)
    node_clock_name, timer = _node_timer(engine, device, clock_name, clock)
    reference = ReferenceWorkload() if measured else None
    warmup, passes = (protocol.warmup, protocol.passes) if measured else (0, 1)
    with preserved(module, protocol.threads):
        captured = capture_module(module, args, kwargs, mode=capture, leaf_modules=leaf_modules, tracer=tracer)
        described = describe_nodes(captured.graphs)
        nodes = [node for node, _ in described]
        timing = make_engine(engine, captured.graphs, nodes, timer)
        runners = timing.runners()
        samples = _Samples(len(nodes))
        # one untimed pass under torch's flop counter, before the warm-up passes that the engine runs
        seen = count_flops(module, captured, nodes, args, kwargs) if flops and measured else None
        counted = seen.flops if seen is not None else None
        facts = graph_facts(captured.graphs, nodes)
        watch = measured and node_clock_name == "wall" and clock_name == "thread-cpu"
        budget = warmup + passes * (2 if watch else 1)  # a preempted pass is measured again, up to passes more
        i = 0
        while i < budget and not (i >= warmup + passes and samples.enough(passes)):
            keep = i >= warmup
            if measured:
                ref = reference(clock) if reference is not None else 0
                if keep:
                    samples.references.append(ref)
            if measured and ((i - warmup) % PLAIN_EVERY == 0 if keep else i == warmup - 1):
                call_args, call_kwargs = fresh_copy((list(args), kwargs))
                _sync(device)
                start = clock()
                module(*call_args, **call_kwargs)
                _sync(device)
                if keep:
                    samples.totals.append(clock() - start)
            whole, wall, times = _timed_pass(
                module,
                captured=captured,
                timing=timing,
                runners=runners,
                args=args,
                kwargs=kwargs,
                clock=clock,
                device=device,
            )
            if keep:
                samples.keep(whole, times, off_cpu=off_cpu_share(whole, wall) if watch else 0.0)
            i += 1
        samples.choose(passes)
    medians = [median_int(s) for s in samples.nodes]
    busy = sum(medians) or 1
    stats = tuple(
        NodeStats(
            info=info,
            median_ns=m,
            spread_ns=iqr_int(s),
            share=m / busy,
            samples_ns=tuple(s),
            host_ns=median_int(h) if h else None,
            memory_bytes=samples.memory[k] if samples.memory is not None else None,
            peak_bytes=samples.peaks[k] if samples.peaks is not None else None,
            flops=counted[k] if counted is not None else None,
            shape=seen.shapes[k] if seen is not None else "",
            layout=seen.layouts[k] if seen is not None else "",
            inputs=facts[k][0],
            training=facts[k][1],
            returned=facts[k][2],
        )
        for k, ((_, info), m, s, h) in enumerate(zip(described, medians, samples.nodes, samples.host, strict=True))
    )
    used_clock = clock_name if node_clock_name == clock_name else f"{node_clock_name} nodes, {clock_name} passes"
    return ProfileResult(
        name=name,
        nodes=stats,
        total_samples_ns=tuple(samples.totals),
        instrumented_samples_ns=tuple(samples.instrumented),
        reference_samples_ns=tuple(samples.references),
        environment=environment(
            protocol.threads, device, allocator, used_clock if measured else "not measured", engine=engine
        ),
        protocol=protocol,
        capture=captured.capture,
        measured=measured,
    )


def _node_timer(engine: str, device: torch.device, clock_name: str, clock: Clock) -> tuple[str, Timer]:
    """The timer of each node, and its clock's name.

    CUDA: device events. CPU, compiled engine: ``perf_counter_ns``, whose call costs about 50 ns where the
    thread's CPU clock costs several hundred (a system call), which would slow a graph of small ops by
    more than it measures; the passes keep ``clock``. CPU, interpreter: ``clock``, which its per-node
    Python overhead dwarfs anyway.
    """
    if device.type == "cuda":
        return "cuda-events", EventTimer(DeviceSide.cuda(device))
    if engine == "compiled":
        return "wall", ClockTimer(time.perf_counter_ns)
    return clock_name, ClockTimer(clock)


OFF_CPU_LIMIT = 0.01
"""A pass whose thread was off the CPU (preempted by a neighbour) for more than this share of its wall time
is measured again, where nodes are stamped on the wall clock and passes on the thread's CPU clock."""


PREEMPTED_NS = 50_000
"""Less time than this off the CPU in a pass is the clocks' own cost, not a neighbour's time slice."""


def off_cpu_share(cpu_ns: int, wall_ns: int) -> float:
    """The share of a pass's wall time its thread spent off the CPU (0 when under ``PREEMPTED_NS``)."""
    off = wall_ns - cpu_ns
    return off / wall_ns if off > PREEMPTED_NS and wall_ns > 0 else 0.0


def chosen_passes(off_cpu: Sequence[float], wanted: int) -> list[int]:
    """The passes whose node times count: the first ``wanted`` that ran with the thread on the CPU (off it
    at most ``OFF_CPU_LIMIT`` of the time), or, where too few did, the ``wanted`` least disturbed, in order."""
    clean = [i for i, f in enumerate(off_cpu) if f <= OFF_CPU_LIMIT]
    if len(clean) >= wanted:
        return clean[:wanted]
    return sorted(sorted(range(len(off_cpu)), key=lambda i: (off_cpu[i], i))[:wanted])


class _Samples:
    """What the kept passes measured, per node and per pass."""

    def __init__(self, count: int) -> None:
        self.nodes: list[list[int]] = [[] for _ in range(count)]
        self.host: list[list[int]] = [[] for _ in range(count)]
        self.memory: list[int] | None = None
        self.peaks: list[int] | None = None
        self.totals: list[int] = []
        self.instrumented: list[int] = []
        self.references: list[int] = []
        self.off_cpu: list[float] = []

    def enough(self, wanted: int) -> bool:
        """Whether ``wanted`` kept passes ran with the thread on the CPU throughout."""
        return sum(f <= OFF_CPU_LIMIT for f in self.off_cpu) >= wanted

    def choose(self, wanted: int) -> None:
        """Keep the node times, instrumented totals and reference times of the passes ``chosen_passes`` picks."""
        picked = chosen_passes(self.off_cpu, wanted)
        self.nodes = [[s[i] for i in picked] for s in self.nodes]
        self.host = [[s[i] for i in picked] if s else s for s in self.host]
        self.instrumented = [self.instrumented[i] for i in picked]
        if self.references:  # none in an unmeasured profile
            self.references = [self.references[i] for i in picked]

    def keep(self, whole: int, times: PassTimes, off_cpu: float = 0.0) -> None:
        self.instrumented.append(whole)
        self.off_cpu.append(off_cpu)
        for k, t in enumerate(times.node_ns):
            self.nodes[k].append(t)
        if times.host_ns is not None:
            for k, t in enumerate(times.host_ns):
                self.host[k].append(t)
        self.memory = times.memory_bytes if times.memory_bytes is not None else self.memory
        self.peaks = times.peak_bytes if times.peak_bytes is not None else self.peaks


def _prepared(captured: Captured, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """What the capture's forward takes, from fresh copies of the inputs (outside any timing)."""
    return captured.prepare(*fresh_copy((list(args), kwargs)))


def _run(module: torch.nn.Module, captured: Captured, runners: Sequence[Runner], prepared: Any) -> None:
    """One pass of the graphs; a graph that fails where the module runs becomes a ``ProfileError`` with a hint."""
    try:
        captured.forward(runners, prepared)
    except ProfileError:  # the capture's own account (dynamo would recompile, another path ran)
        raise
    except Exception as exc:
        raise ProfileError(_graph_failure(module, exc)) from exc


def _timed_pass(
    module: torch.nn.Module,
    *,
    captured: Captured,
    timing: Engine,
    runners: Sequence[Runner],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    clock: Clock,
    device: torch.device,
) -> tuple[int, int, PassTimes]:
    """One instrumented pass on fresh copies of the inputs: its whole time on ``clock`` and on the wall
    clock, and its times per node."""
    prepared = _prepared(captured, args, kwargs)
    _sync(device)
    timing.begin_pass()
    wall = time.perf_counter_ns()
    start = clock()
    _run(module, captured, runners, prepared)
    _sync(device)
    whole = clock() - start
    wall = time.perf_counter_ns() - wall
    return whole, wall, timing.end_pass()


@dataclass
class Seen:
    """What the untimed counting pass saw of each node: its floating-point operations, output and layout."""

    flops: list[int]
    shapes: list[str]
    layouts: list[str]


def count_flops(
    module: torch.nn.Module,
    captured: Captured,
    nodes: Sequence[torch.fx.Node],
    args: Sequence[Any],
    kwargs: dict[str, Any],
) -> Seen:
    """Floating-point operations per node, in one pass of the graphs under torch's flop counter, and the
    shape and layout of what each node made.

    The compiled engine runs the pass with the counter's running total as its clock, so a node's count
    is the difference of two readings, and the graphs run as their own generated code (an Interpreter
    would hand nodes immutable argument lists, which some models mutate).
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    shapes, layouts = [""] * len(nodes), [""] * len(nodes)

    def flops_so_far() -> int:
        return int(counter.get_total_flops())

    def observe(k: int, value: Any) -> None:
        shapes[k], layouts[k] = shape_of(value), layout_of(value)

    engine = CompiledEngine(captured.graphs, nodes, ClockTimer(flops_so_far), observe)

    def counted(runner: Runner) -> Runner:
        def run(*inputs: Any) -> Any:
            with counter:  # entered per graph call: dynamo runs the Python between graphs outside it
                return runner(*inputs)

        return run

    engine.begin_pass()
    _run(module, captured, [counted(r) for r in engine.runners()], _prepared(captured, args, kwargs))
    return Seen(engine.end_pass().node_ns, shapes, layouts)


SHAPES_SHOWN = 4
"""Outputs described per node; a node that returns more is described as the first ones and a count."""


def shape_of(value: Any) -> str:
    """A node's output as text: ``float32[1, 64, 56, 56]``, several in parentheses, empty for no tensor."""
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}[{', '.join(str(d) for d in value.shape)}]"
    if isinstance(value, list | tuple):
        parts = [shape_of(v) for v in value]
        parts = [p for p in parts if p]
        if not parts:
            return ""
        more = f", ... {len(parts) - SHAPES_SHOWN} more" if len(parts) > SHAPES_SHOWN else ""
        return f"({', '.join(parts[:SHAPES_SHOWN])}{more})"
    return ""


def layout_of(value: Any) -> str:
    """The memory layout of a node's (first) output tensor: contiguous, channels_last or strided."""
    if isinstance(value, list | tuple):
        return next((lay for lay in (layout_of(v) for v in value) if lay), "")
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        return ""
    try:
        if value.is_contiguous():
            return "contiguous"
        formats = {4: torch.channels_last, 5: torch.channels_last_3d}
        if value.dim() in formats and value.is_contiguous(memory_format=formats[value.dim()]):
            return "channels_last"
    except RuntimeError:  # tensors that cannot say (some subclasses)
        return ""
    return "strided"


def graph_facts(
    graphs: Sequence[torch.fx.GraphModule], nodes: Sequence[torch.fx.Node]
) -> list[tuple[tuple[int, ...], bool | None, bool]]:
    """Per node: the positions of the timed nodes it takes outputs of, the training flag that applies to it
    (its module's mode, or a batch norm's ``training`` argument), and whether its graph returns its output."""
    index = {node: k for k, node in enumerate(nodes)}
    owner = {node: gm for gm in graphs for node in gm.graph.nodes}
    out = []
    for node in nodes:
        inputs = tuple(sorted({index[n] for n in node.all_input_nodes if n in index}))
        returned = any(user.op == "output" for user in node.users)
        out.append((inputs, _training(owner[node], node), returned))
    return out


def _training(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool | None:
    if node.op == "call_module":
        return bool(gm.get_submodule(str(node.target)).training)
    name = str(getattr(node.target, "__name__", node.target))
    if "batch_norm" not in name:
        return None
    if "no_training" in name:  # aten._native_batch_norm_legit_no_training
        return False
    flag = node.kwargs.get("training", node.args[5] if len(node.args) > 5 else None)
    return flag if isinstance(flag, bool) else None
