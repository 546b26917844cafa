"""Time each node of captured graphs: the compiled engine (the default) and the interpreter engine.

Owns how a pass of the graphs is turned into one time per node, on the CPU (a clock) and on CUDA
(events).

- ``compiled``: each graph is regenerated with a timestamp call before every node and one at the end,
  compiled into the graph's own Python code; a node's time is the difference of its two stamps. On the
  CPU a stamp is the bare clock call (about 50 ns with ``perf_counter_ns``), so the instrumented forward
  runs at the speed of the plain graph.
- ``interpreter``: ``torch.fx.Interpreter`` runs the graph node by node and stamps around each node;
  several microseconds of Python per node that are not counted in a node but slow the pass. It is the
  reference the compiled engine is tested against.

On CUDA a stamp records an event from a pool and the host's clock, and the pass synchronises once, when its
times are collected; host time per node (the launch cost) is reported beside the device time. A timer with
``memory`` also reads the allocator's counters at each stamp (the memory allocated after each node and the peak
while it ran): the profiler turns that on only in a pass whose times it does not keep.
A graph that runs several times in one pass (a loop across graph breaks) adds its times up per node.
A profile that runs out of device memory gives the cached memory back (``release_memory``) before it fails.

Must not import pytest.
"""

from __future__ import annotations

import gc
import itertools
import operator
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.fx

from pytest_fxprof.capture.errors import NodeError
from pytest_fxprof.capture.graphs import Runner

Clock = Callable[[], int]


class Timer(Protocol):
    """Where stamps come from and how two of them become a duration."""

    def stamp(self) -> Any: ...

    def begin_pass(self) -> None: ...

    def durations(self, pairs: Sequence[tuple[Any, Any]]) -> list[int]: ...


class ClockTimer:
    """Stamps from a clock in nanoseconds; a duration is the difference."""

    def __init__(self, clock: Clock) -> None:
        self.stamp = clock

    def begin_pass(self) -> None:
        pass

    def durations(self, pairs: Sequence[tuple[Any, Any]]) -> list[int]:
        return [end - start for start, end in pairs]


@dataclass
class DeviceSide:
    """A CUDA device's timing and memory functions (injectable, so the logic is testable on the CPU)."""

    event: Callable[[], Any]
    synchronize: Callable[[], None]
    allocated: Callable[[], int]
    peak: Callable[[], int]
    reset_peak: Callable[[], None]

    @classmethod
    def cuda(cls, device: torch.device) -> DeviceSide:
        return cls(
            event=lambda: torch.cuda.Event(enable_timing=True),  # type: ignore[no-untyped-call]
            synchronize=lambda: torch.cuda.synchronize(device),
            allocated=lambda: torch.cuda.memory_allocated(device),
            peak=lambda: torch.cuda.max_memory_allocated(device),
            reset_peak=lambda: torch.cuda.reset_peak_memory_stats(device),
        )


class EventTimer:
    """Stamps are indices into a pool of device events recorded in stream order, one sync per pass.

    Each stamp also notes the host clock (as it starts and as it ends, so that a node's host time leaves
    the stamps' own work out) and the allocator's bytes in use and peak since the previous stamp, then
    resets the peak: a node's memory is what was allocated after it and the most that was allocated
    while it ran. The reset means that ``torch.cuda.max_memory_allocated`` no longer holds the peak of
    what ran before the profile. With ``memory`` off the allocator is not read: its three calls cost
    about ten times what the event does, which a graph of small kernels, its device waiting on the launches,
    would show as time in every node. ``memory_on`` may be switched between passes.
    """

    def __init__(self, side: DeviceSide, host_clock: Clock = time.perf_counter_ns, *, memory: bool = True) -> None:
        self.side = side
        self.host_clock = host_clock
        self.memory_on = memory
        self.pool: list[Any] = []
        self.host: list[int] = []  # on entering each stamp: where the node before it ended
        self.host_out: list[int] = []  # on leaving it: where the node after it starts
        self.allocated: list[int] = []
        self.peaks: list[int] = []

    def begin_pass(self) -> None:
        self.host.clear()
        self.host_out.clear()
        self.allocated.clear()
        self.peaks.clear()
        if self.memory_on:
            self.side.reset_peak()

    def stamp(self) -> int:
        self.host.append(self.host_clock())
        i = len(self.host) - 1
        if i == len(self.pool):
            self.pool.append(self.side.event())
        self.pool[i].record()
        if self.memory_on:
            self.allocated.append(self.side.allocated())
            self.peaks.append(self.side.peak())
            self.side.reset_peak()
        self.host_out.append(self.host_clock())
        return i

    def durations(self, pairs: Sequence[tuple[Any, Any]]) -> list[int]:
        self.side.synchronize()
        return [round(self.pool[a].elapsed_time(self.pool[b]) * 1e6) for a, b in pairs]

    def host_durations(self, pairs: Sequence[tuple[int, int]]) -> list[int]:
        """The host's time between the stamps, the stamps' own work (events, allocator counters) left out."""
        return [self.host[b] - self.host_out[a] for a, b in pairs]

    def memory(self, pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """Per pair: bytes allocated at its end, and the peak between its two stamps."""
        return [(self.allocated[b], self.peaks[b]) for _, b in pairs]


@dataclass
class PassTimes:
    """One pass's per-node figures, aligned with the engine's nodes (None where the device has none)."""

    node_ns: list[int]
    host_ns: list[int] | None = None
    memory_bytes: list[int] | None = None
    peak_bytes: list[int] | None = None


class Engine:
    """Runners that time the nodes of ``graphs``; ``nodes`` lists, in order, the nodes to report."""

    def __init__(self, graphs: Sequence[torch.fx.GraphModule], nodes: Sequence[torch.fx.Node], timer: Timer) -> None:
        self.timer = timer
        self.index = {node: i for i, node in enumerate(nodes)}
        self.count = len(nodes)
        self.calls: list[tuple[list[int], Sequence[Any]]] = []

    def runners(self) -> list[Runner]:
        raise NotImplementedError

    def begin_pass(self) -> None:
        self.calls.clear()
        self.timer.begin_pass()

    def end_pass(self) -> PassTimes:
        """The pass's times per node (summed over the calls of a graph that ran more than once)."""
        targets = [k for idx, _ in self.calls for k in idx]
        pairs = [p for _, stamps in self.calls for p in self.pairs(stamps)]
        out = PassTimes(node_ns=self._per_node(targets, self.timer.durations(pairs)))
        if isinstance(self.timer, EventTimer):
            out.host_ns = self._per_node(targets, self.timer.host_durations(pairs))
        if isinstance(self.timer, EventTimer) and self.timer.memory_on:
            memory = self.timer.memory(pairs)
            out.memory_bytes = self._per_node(targets, [m for m, _ in memory], lambda _, last: last)
            out.peak_bytes = self._per_node(targets, [p for _, p in memory], max)
        return out

    def pairs(self, stamps: Sequence[Any]) -> Sequence[tuple[Any, Any]]:
        """One call's (start, end) stamps per timed node, from what the call kept."""
        raise NotImplementedError

    def _per_node(
        self, targets: Sequence[int], values: Sequence[int], combine: Callable[[int, int], int] = operator.add
    ) -> list[int]:
        """``values`` folded per node with ``combine`` (added up by default: a graph run twice counts twice)."""
        out = [0] * self.count
        for k, v in zip(targets, values, strict=True):
            out[k] = combine(out[k], v)
        return out


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every error it was raised from or while handling (a ``NodeError``'s, a ``ProfileError``'s)."""
    out: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is not None and all(e is not seen for seen in out):
            out.append(e)
            todo += [e.__cause__, e.__context__]
    return out


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was raised from, the device's allocator running out of memory
    (``torch.cuda.OutOfMemoryError``, which torch 2.5 and later also name ``torch.OutOfMemoryError``)."""
    return any(isinstance(e, torch.cuda.OutOfMemoryError) for e in _chain(exc))


def release_memory(exc: BaseException) -> None:
    """Give back what a profile that failed with ``exc`` held on the device, so that the next test has it.

    The error's traceback keeps every frame it passed through alive, and with them their locals: the inputs
    copied for the pass and each node's output (the interpreter's values, the generated forward's variables),
    until the next failure replaces pytest's ``sys.last_traceback``. The frames that finished are cleared (the
    traceback keeps its lines, and the message already names the node), cycles collected, then CUDA's caching
    allocator empties its cache: only where CUDA was initialised, so that nothing starts it here.
    """
    for e in _chain(exc):
        traceback.clear_frames(e.__traceback__)  # the frames still running (the caller's) stay as they are
    gc.collect()
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        torch.cuda.empty_cache()


Observer = Callable[[int, Any], None]


def failing_node(program: torch.fx.GraphModule, exc: BaseException) -> torch.fx.Node | None:
    """The node of ``program``'s graph whose line of the generated forward was running when ``exc`` was raised
    (None where the traceback does not pass through that code)."""
    code = type(program).forward.__code__
    lines: dict[int, int | None] = getattr(program, "_lineno_map", None) or {}
    tb = exc.__traceback__
    found = None
    while tb is not None:
        if tb.tb_frame.f_code is code:
            found = lines.get(tb.tb_lineno - code.co_firstlineno)
        tb = tb.tb_next
    nodes: list[torch.fx.Node] = list(program.graph.nodes)
    return nodes[found] if found is not None and 0 <= found < len(nodes) else None


def instrument(
    gm: torch.fx.GraphModule,
    timed: Sequence[torch.fx.Node],
    stamp: Callable[[], Any],
    observe: tuple[Observer, Sequence[int]] | None = None,
) -> torch.fx.GraphModule:
    """``gm`` regenerated with ``stamp()`` before each node of ``timed`` and once at the end.

    The new module takes the graph's placeholders as flat positional inputs (whatever codegen ``gm``
    had) and returns ``(output, stamps)``; it shares ``gm``'s parameters, buffers and submodules.
    ``observe``, a function and the index of each timed node, is also called with that index and the
    node's output right after each timed node (for an untimed pass that looks at what nodes make).
    """
    stamp = _named(stamp)
    watch = dict(zip(timed, observe[1], strict=True)) if observe else {}
    look = _named(observe[0]) if observe else None
    wanted = set(timed)
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    stamps: list[torch.fx.Node] = []
    for node in gm.graph.nodes:
        if node.op == "output":
            stamps.append(graph.create_node("call_function", stamp, (), {}, name="stamp"))
            result = torch.fx.map_arg(node.args[0], lambda n: env[n])
            graph.output((result, tuple(stamps)))
            break
        if node in wanted:
            stamps.append(graph.create_node("call_function", stamp, (), {}, name="stamp"))
        env[node] = graph.node_copy(node, lambda n: env[n])
        if look is not None and node in watch:
            graph.create_node("call_function", look, (watch[node], env[node]), {}, name="observe")
    return torch.fx.GraphModule(gm, graph, f"{type(gm).__name__}Timed")


def _named(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, or its bound ``__call__``: generated code names what it calls, and a callable object has no name."""
    if getattr(fn, "__name__", None) is None:
        return getattr(fn, "__call__")  # type: ignore[no-any-return]  # noqa: B004, B009
    return fn


class CompiledEngine(Engine):
    """Timestamps compiled into each graph's generated code; a node's time runs from its stamp to the next."""

    def __init__(
        self,
        graphs: Sequence[torch.fx.GraphModule],
        nodes: Sequence[torch.fx.Node],
        timer: Timer,
        observe: Observer | None = None,
    ) -> None:
        super().__init__(graphs, nodes, timer)
        self.programs = []
        for gm in graphs:
            timed = [n for n in gm.graph.nodes if n in self.index]
            idx = [self.index[n] for n in timed]
            program = instrument(gm, timed, timer.stamp, (observe, idx) if observe else None)
            # the program's copies of the timed nodes, by name (a copy keeps its node's name)
            copies = {n.name: self.index[n] for n in timed}
            self.programs.append((program, idx, copies))

    def runners(self) -> list[Runner]:
        return [self._runner(program, idx, copies) for program, idx, copies in self.programs]

    def _runner(self, program: torch.fx.GraphModule, idx: list[int], copies: dict[str, int]) -> Runner:
        calls = self.calls
        forward = program.forward  # not program(): its call wrapper prints the code and drops the traceback

        def run(*inputs: Any) -> Any:
            try:
                out, stamps = forward(*inputs)
            except Exception as exc:
                node = failing_node(program, exc)
                raise NodeError(copies.get(node.name) if node is not None else None, exc) from exc
            calls.append((idx, stamps))  # paired up after the pass, not while it is timed
            return out

        return run

    def pairs(self, stamps: Sequence[Any]) -> Sequence[tuple[Any, Any]]:
        return list(itertools.pairwise(stamps))


class KernelEngine(Engine):
    """The kernels of a module compiled by Inductor (``capture.inductor``): its rewritten wrappers stamp ``timer``
    after every kernel and hand each call's stamps to ``calls``; a kernel's time runs from the stamp before it to
    its own."""

    def __init__(self, count: int, timer: Timer, calls: list[tuple[list[int], Sequence[Any]]]) -> None:
        super().__init__((), (), timer)
        self.count = count
        self.calls = calls

    def runners(self) -> list[Runner]:
        return []

    def pairs(self, stamps: Sequence[Any]) -> Sequence[tuple[Any, Any]]:
        return list(itertools.pairwise(stamps))


def last_uses(graph: torch.fx.Graph) -> dict[torch.fx.Node, list[torch.fx.Node]]:
    """Per node, the values whose last use it is (as ``torch.fx.Interpreter`` and generated code free them)."""
    seen: set[torch.fx.Node] = set()
    out: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for node in reversed(graph.nodes):
        if node.op == "output":  # what the graph returns is never freed
            seen.update(node.all_input_nodes)
            continue
        for used in node.all_input_nodes:
            if used not in seen:
                seen.add(used)
                out.setdefault(node, []).append(used)
    return out


class _StampingInterpreter(torch.fx.Interpreter):
    """Each timed node stamped around fetching its arguments, running it and freeing the values whose last use it is:
    where the generated code, and eager code, pay for that memory (``torch.fx.Interpreter`` frees them after the node
    returns, outside any stamp, and what that costs the allocator would land on the next node that allocates)."""

    def __init__(self, gm: torch.fx.GraphModule, engine: InterpreterEngine) -> None:
        super().__init__(gm, garbage_collect_values=False)
        self.extra_traceback = False  # the node is named by the NodeError, not in the message of what it raised
        self.engine = engine
        self.idx: list[int] = []
        self.pairs: list[tuple[Any, Any]] = []
        self.last_uses = last_uses(gm.graph)

    def run_node(self, n: torch.fx.Node) -> Any:
        k = self.engine.index.get(n)
        if k is None:
            out = super().run_node(n)
            self._free(n)
            return out
        stamp = self.engine.timer.stamp
        start = stamp()
        try:
            out = super().run_node(n)
        except Exception as exc:
            raise NodeError(k, exc) from exc
        self._free(n)
        self.pairs.append((start, stamp()))
        self.idx.append(k)
        return out

    def _free(self, n: torch.fx.Node) -> None:
        for gone in self.last_uses.get(n, ()):
            self.env.pop(gone, None)


class InterpreterEngine(Engine):
    """``torch.fx.Interpreter`` runs each graph; each node is stamped on its own."""

    def __init__(self, graphs: Sequence[torch.fx.GraphModule], nodes: Sequence[torch.fx.Node], timer: Timer) -> None:
        super().__init__(graphs, nodes, timer)
        self.graphs = list(graphs)

    def runners(self) -> list[Runner]:
        return [self._runner(_StampingInterpreter(gm, self)) for gm in self.graphs]

    def _runner(self, interp: _StampingInterpreter) -> Runner:
        calls = self.calls

        def run(*inputs: Any) -> Any:
            interp.idx, interp.pairs = [], []
            try:
                out = interp.run(*inputs, enable_io_processing=False)  # the capture's forward packs the output
            except Exception:
                # the failed run's values (the nodes' outputs, the inputs): the error's frames keep this runner,
                # and with it the interpreter, alive while the error is kept
                interp.env, interp.args_iter = {}, iter(())
                raise
            calls.append((interp.idx, interp.pairs))
            return out

        return run

    def pairs(self, stamps: Sequence[Any]) -> Sequence[tuple[Any, Any]]:
        return stamps


def make_engine(
    name: str, graphs: Sequence[torch.fx.GraphModule], nodes: Sequence[torch.fx.Node], timer: Timer
) -> Engine:
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")
    return ENGINES[name](graphs, nodes, timer)


ENGINES: dict[str, type[CompiledEngine] | type[InterpreterEngine]] = {
    "compiled": CompiledEngine,
    "interpreter": InterpreterEngine,
}
"""The engines by the name a setting gives (``settings.ENGINES`` offers the same names)."""
