"""Capture a module with torch.fx and time it node by node.

Owns every use of torch (callers import this module lazily, so importing the plugin stays cheap).
Must not import pytest. The caller's module and inputs leave a profile exactly as they came in: mode,
buffers, torch's random state and its thread count are restored, inputs are cloned before every
pass, everything runs under ``torch.no_grad``, and a module that changes its own parameters in place
is refused.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import inspect
import platform
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch.utils._pytree import tree_flatten, tree_map

from pytest_fxprof.records import (
    Capture,
    Environment,
    NodeInfo,
    NodeStats,
    ProfileResult,
    Protocol,
    iqr_int,
    median_int,
    node_key,
)

LeafSpec = str | type
_TORCH_DIR = str(Path(torch.__file__).parent)
_OWN_DIR = str(Path(__file__).parent)


class CaptureError(Exception):
    """The module could not be captured as a graph. The message says what broke and what to do."""


class ProfileError(Exception):
    """Profiling would have changed the module, or the inputs do not fit it."""


# Capture ---------------------------------------------------------------------------------------------


class _LeafTracer(torch.fx.Tracer):
    """symbolic_trace's tracer, plus user-named leaf modules and a note of the submodule that broke."""

    def __init__(self, leaf_modules: Sequence[LeafSpec]) -> None:
        super().__init__()
        self.leaf_types = tuple(spec for spec in leaf_modules if isinstance(spec, type))
        self.leaf_paths = {spec for spec in leaf_modules if isinstance(spec, str)}
        self.failed_in: tuple[str, str] | None = None

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        if module_qualified_name in self.leaf_paths or isinstance(m, self.leaf_types):
            return True
        return super().is_leaf_module(m, module_qualified_name)

    def call_module(
        self, m: torch.nn.Module, forward: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        try:
            return super().call_module(m, forward, args, kwargs)
        except Exception:
            if self.failed_in is None:  # the innermost module records itself first
                self.failed_in = (self.path_of_module(m), type(m).__name__)
            raise


def _user_frame(exc: BaseException) -> str | None:
    """The innermost traceback line in the user's code (outside torch and this plugin)."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not frame.filename.startswith((_TORCH_DIR, _OWN_DIR)):
            return f"{frame.filename}:{frame.lineno}: {(frame.line or '').strip()}"
    return None


def capture(
    module: torch.nn.Module, leaf_modules: Sequence[LeafSpec] = (), tracer: torch.fx.Tracer | None = None
) -> tuple[torch.fx.GraphModule, Capture]:
    """Trace ``module`` into a GraphModule that shares its parameters, buffers and submodules."""
    active = tracer if tracer is not None else _LeafTracer(leaf_modules)
    before = set(vars(module))
    try:
        try:
            graph = active.trace(module)
        except Exception as exc:
            raise CaptureError(_capture_advice(module, exc, active)) from exc
        gm = torch.fx.GraphModule(active.root, graph, type(module).__name__)  # copies what it needs
    finally:
        for name in set(vars(module)) - before:  # tensor constants torch.fx parks on the traced module
            delattr(module, name)
    names = tuple(sorted(s if isinstance(s, str) else f"{s.__module__}.{s.__qualname__}" for s in leaf_modules))
    method = "symbolic_trace" if tracer is None else f"tracer:{type(tracer).__name__}"
    return gm, Capture(method=method, leaf_modules=names)


def _capture_advice(module: torch.nn.Module, exc: Exception, tracer: torch.fx.Tracer) -> str:
    cause = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    lines = [f"torch.fx.symbolic_trace could not capture {type(module).__name__}: {cause}"]
    failed = tracer.failed_in if isinstance(tracer, _LeafTracer) else None
    if failed and failed[0]:
        lines.append(f"  while tracing submodule {failed[0]!r} ({failed[1]})")
    where = _user_frame(exc)
    if where:
        lines.append(f"  at {where}")
    lines.append(
        "  Data-dependent control flow (if/for on tensor values), len()/int() of a traced value and "
        "submodules kept in plain lists cannot be traced symbolically."
    )
    if failed and failed[0]:
        lines.append(
            f"  Fix: keep that submodule whole as one timed node: fxprof(model, ..., leaf_modules=[{failed[0]!r}]) "
            f"or leaf_modules=[{failed[1]}]; or pass tracer= a torch.fx.Tracer that handles it."
        )
    else:
        lines.append(
            "  Fix: pass tracer= a torch.fx.Tracer that handles the construct, or make the failing code "
            "traceable (torch.fx.wrap a function to keep it as one node)."
        )
    return "\n".join(lines)


def _graph_failure(module: torch.nn.Module, exc: Exception) -> str:
    """Why the captured graph failed where the module itself ran: usually a value traced as a tensor."""
    cause = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return (
        f"the captured graph of {type(module).__name__} failed: {' '.join(cause[:1])} {' '.join(cause[-1:])}\n"
        "  Tracing treats every input as a tensor, so a branch on an input that is None or a Python value "
        "(if mask is not None: ...) is fixed at trace time.\n"
        "  Fix: pass tracer= a torch.fx.Tracer whose trace() gets concrete_args for those inputs, or keep "
        "the submodule that branches whole with leaf_modules=[...]."
    )


def _target_name(gm: torch.fx.GraphModule, node: torch.fx.Node) -> str:
    if node.op == "call_module":
        return type(gm.get_submodule(str(node.target))).__name__
    if node.op == "call_function":
        try:
            return str(torch.fx.node._get_qualified_name(node.target))  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001  # pragma: no cover - exotic callables
            return getattr(node.target, "__name__", repr(node.target))
    return str(node.target)


def _module_path(node: torch.fx.Node) -> str:
    if node.op == "call_module":
        return str(node.target)
    stack = node.meta.get("nn_module_stack")
    if stack:
        path = list(stack.values())[-1][0]
        return str(path)
    if node.op == "get_attr":
        return str(node.target).rpartition(".")[0]
    return ""


def describe_nodes(gm: torch.fx.GraphModule) -> list[tuple[torch.fx.Node, NodeInfo]]:
    """Every node that does work, with its stable identity, in execution order."""
    seen: Counter[tuple[str, str, str]] = Counter()
    out = []
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        op, module, target = node.op, _module_path(node), _target_name(gm, node)
        occurrence = seen[(op, module, target)]
        seen[(op, module, target)] += 1
        out.append((node, NodeInfo(node_key(op, module, target, occurrence), node.name, op, target, module)))
    return out


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


def environment(threads: int, device: torch.device, allocator: str, clock: str = "wall") -> Environment:
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
    """Run the body with ``threads`` intra-op threads and no grad, then put everything back."""
    modes = [(m, m.training) for m in module.modules()]
    buffers = [
        (owner, name, buf, buf.detach().clone())
        for owner in module.modules()
        for name, buf in owner._buffers.items()
        if buf is not None
    ]
    versions = {name: p._version for name, p in module.named_parameters()}
    rng = torch.random.get_rng_state()
    cuda_ready = torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    cuda_rng = torch.cuda.get_rng_state_all() if cuda_ready else None
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            yield
    finally:
        torch.set_num_threads(previous_threads)
        torch.random.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        with torch.no_grad():
            for owner, name, original, saved in buffers:
                owner._buffers[name] = original
                original.copy_(saved)
        for m, training in modes:
            m.training = training
    changed = [name for name, p in module.named_parameters() if versions.get(name) != p._version]
    if changed:
        raise ProfileError(
            f"the module changed its parameters in place during forward ({', '.join(changed[:5])}); "
            "profiling it repeatedly would alter the model. Profile a copy (copy.deepcopy(model))."
        )


def _clone(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


def fresh_copy(value: Any) -> Any:
    """A copy whose tensors are new, wherever they sit (lists, dicts, dataclasses, objects).

    ``copy.deepcopy`` reaches tensors inside any container; values it cannot copy fall back to
    cloning the tensors that torch's pytree reaches (lists, tuples, dicts, named tuples).
    """
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - an uncopyable input: clone what can be reached
        return tree_map(_clone, value)


def placeholder_args(
    gm: torch.fx.GraphModule, module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any]
) -> list[Any]:
    """The graph's positional inputs, bound from the call's args and kwargs like ``module(...)`` would."""
    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
    except TypeError as exc:
        raise ProfileError(f"the inputs do not fit {type(module).__name__}.forward: {exc}") from None
    bound.apply_defaults()
    out: list[Any] = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        target = str(node.target)
        name = target.lstrip("*")
        if target.startswith("**"):
            raise ProfileError(f"{type(module).__name__}.forward takes **{name}; pass those inputs by name")
        value = bound.arguments.get(name, node.args[0] if node.args else None)
        if target.startswith("*"):
            out.extend(value or ())
        else:
            out.append(value)
    return out


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


class _TimingInterpreter(torch.fx.Interpreter):
    """Runs the graph and notes each timed node's time on ``clock`` per pass."""

    def __init__(
        self, gm: torch.fx.GraphModule, nodes: Sequence[torch.fx.Node], clock: Clock = time.perf_counter_ns
    ) -> None:
        super().__init__(gm)
        self.index = {node: i for i, node in enumerate(nodes)}
        self.times = [0] * len(nodes)
        self.clock = clock

    def run_node(self, n: torch.fx.Node) -> Any:
        i = self.index.get(n)
        if i is None:
            return super().run_node(n)
        start = self.clock()
        out = super().run_node(n)
        self.times[i] = self.clock() - start
        return out


class _CudaTimingInterpreter(_TimingInterpreter):
    """Device time per node from CUDA events; one synchronisation per pass (``collect``)."""

    def __init__(self, gm: torch.fx.GraphModule, nodes: Sequence[torch.fx.Node]) -> None:
        super().__init__(gm, nodes)
        self.events = [
            (
                torch.cuda.Event(enable_timing=True),  # type: ignore[no-untyped-call]
                torch.cuda.Event(enable_timing=True),  # type: ignore[no-untyped-call]
            )
            for _ in nodes
        ]

    def run_node(self, n: torch.fx.Node) -> Any:
        i = self.index.get(n)
        if i is None:
            return super(_TimingInterpreter, self).run_node(n)
        begin, end = self.events[i]
        begin.record()
        out = super(_TimingInterpreter, self).run_node(n)
        end.record()
        return out

    def collect(self) -> None:
        torch.cuda.synchronize()
        self.times = [round(b.elapsed_time(e) * 1e6) for b, e in self.events]


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
) -> ProfileResult:
    """Capture ``module``, run ``protocol.warmup`` discarded and ``protocol.passes`` kept passes.

    Each pass times the reference workload and the instrumented forward, so that both see the same
    machine state; every ``PLAIN_EVERY``-th kept pass (and the last warm-up pass) also times the plain
    forward between them, for the profiler's overhead. With ``measured=False`` the module runs once,
    instrumented and cold, and nothing else is timed.
    """
    if not isinstance(module, torch.nn.Module):
        raise ProfileError(f"fxprof profiles a torch.nn.Module, got {type(module).__name__}")
    allocator = tune_allocator() if measured else "not measured"
    gm, cap = capture(module, leaf_modules, tracer)
    described = describe_nodes(gm)
    nodes = [node for node, _ in described]
    device = device_of(module, args, kwargs)
    cuda = device.type == "cuda"
    graph_inputs = placeholder_args(gm, module, args, kwargs)
    clock_name, clock = clock_for(protocol.threads, device)
    interp = _CudaTimingInterpreter(gm, nodes) if cuda else _TimingInterpreter(gm, nodes, clock)
    reference = ReferenceWorkload() if measured else None
    warmup, passes = (protocol.warmup, protocol.passes) if measured else (0, 1)
    node_samples: list[list[int]] = [[] for _ in nodes]
    totals: list[int] = []
    instrumented: list[int] = []
    references: list[int] = []
    with preserved(module, protocol.threads):
        for i in range(warmup + passes):
            keep = i >= warmup
            if measured:
                ref = reference(clock) if reference is not None else 0
                if keep:
                    references.append(ref)
            if measured and ((i - warmup) % PLAIN_EVERY == 0 if keep else i == warmup - 1):
                call_args, call_kwargs = fresh_copy((list(args), kwargs))
                _sync(device)
                start = clock()
                module(*call_args, **call_kwargs)
                _sync(device)
                plain = clock() - start
                if keep:
                    totals.append(plain)
            graph_args = fresh_copy(graph_inputs)
            _sync(device)
            start = clock()
            try:
                interp.run(*graph_args)
            except Exception as exc:
                raise ProfileError(_graph_failure(module, exc)) from exc
            if isinstance(interp, _CudaTimingInterpreter):
                interp.collect()
            whole = clock() - start
            if keep:
                instrumented.append(whole)
                for k, t in enumerate(interp.times):
                    node_samples[k].append(t)
    medians = [median_int(s) for s in node_samples]
    busy = sum(medians) or 1
    stats = tuple(
        NodeStats(info=info, median_ns=m, spread_ns=iqr_int(s), share=m / busy, samples_ns=tuple(s))
        for (_, info), m, s in zip(described, medians, node_samples, strict=True)
    )
    return ProfileResult(
        name=name,
        nodes=stats,
        total_samples_ns=tuple(totals),
        instrumented_samples_ns=tuple(instrumented),
        reference_samples_ns=tuple(references),
        environment=environment(protocol.threads, device, allocator, clock_name if measured else "not measured"),
        protocol=protocol,
        capture=cap,
        measured=measured,
    )
