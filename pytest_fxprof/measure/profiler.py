"""Profile a module: open its program, then time it node by node over a schedule of passes.

Owns ``profile_module``, the protocol of one profile (the ``Schedule``: the plain call as the user makes it, the
reference workload beside it, then warm-up passes thrown away, kept passes, a pass preempted by a neighbour measured
again; the page faults read after them) and the ``Profile`` it returns; ``measure.program`` makes the program
it times, whatever its kind. The caller's module and inputs leave a profile exactly as they came in: mode,
buffers, torch's random state and its thread count are restored, inputs are cloned before every pass, a
forward runs under ``torch.no_grad`` and a module that changes its own parameters in place is refused. A
training step (``step=``) runs with grad, and its parameters, their grads and the optimizer's state are put
back after every pass as well. A profile that runs out of device memory drops what it held and empties CUDA's
cache before its error leaves (``engine.release_memory``), so that the tests after it have the memory.

Must not import pytest.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import torch

from pytest_fxprof.capture import inductor
from pytest_fxprof.capture.choose import check_module
from pytest_fxprof.capture.errors import ProfileError, one_line
from pytest_fxprof.capture.graphs import Captured, LeafSpec, Runner, prepared_inputs, run_pass
from pytest_fxprof.capture.nodes import module_classes
from pytest_fxprof.capture.step import Step
from pytest_fxprof.measure.engine import (
    Clock,
    ClockTimer,
    DeviceSide,
    Engine,
    EventTimer,
    PassTimes,
    Timer,
    out_of_memory,
    release_memory,
)
from pytest_fxprof.measure.facts import count_faults, count_flops, graph_facts, module_faults
from pytest_fxprof.measure.fingerprint import fingerprint_of
from pytest_fxprof.measure.leaves import merge_leaves
from pytest_fxprof.measure.lockstep import Barrier
from pytest_fxprof.measure.machine import (
    ReferenceWorkload,
    allocator_in_use,
    clock_for,
    device_of,
    environment,
    fault_counter,
    sync,
    tune_allocator,
)
from pytest_fxprof.measure.program import (
    CaptureRequest,
    Program,
    ProgramKind,
    eager_step,
    nothing,
    open_program,
    plain_forward,
    preserved,
    preserved_step,
)
from pytest_fxprof.measure.signature import setup_of
from pytest_fxprof.records.disturbance import OFF_CPU_LIMIT as OFF_CPU_LIMIT  # noqa: PLC0414 - re-exported
from pytest_fxprof.records.disturbance import disturbance_of
from pytest_fxprof.records.measurement import Capture, NodeInfo, NodeStats, Protocol, iqr_int, median_int
from pytest_fxprof.records.profile import Profile

if TYPE_CHECKING:
    import torch.fx

    from pytest_fxprof.records.fingerprint import Fingerprint

WALL_CLOCK: Clock = time.perf_counter_ns
"""The wall clock: the compiled engine's node stamps on the CPU, and each pass's wall time, against which its
time on the thread's CPU clock tells whether a neighbour took the core (``off_cpu_share``)."""


_P = ParamSpec("_P")
_R = TypeVar("_R")


def released_on_oom(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """``fn``, which gives back the device memory it held when it fails for the lack of it (``release_memory``,
    called once ``fn``'s frames have finished, so that all of them are cleared), then raises the same error."""

    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if out_of_memory(exc):
                release_memory(exc)
            raise

    return run


@released_on_oom
def profile_module(  # noqa: PLR0915 - one protocol, read top to bottom
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
    reference: bool = True,
    plain: bool = True,
    barrier: Barrier | None = None,
    step: Step | None = None,
    spent: dict[str, float] | None = None,
    known: Capture | None = None,
    allocator: str = "as-is",
    unchanged: Callable[[Fingerprint], bool] | None = None,
    opened: tuple[Program, Fingerprint] | None = None,
    fingerprinted: bool = True,
) -> Profile:
    """Capture ``module``, run ``protocol.warmup`` discarded and ``protocol.passes`` kept passes.

    The passes follow a ``Schedule``: the plain call as the user makes it (``module(*args)``), called again and again
    as a program that built the model calls it, warm-up calls thrown away, each timed one beside the reference
    workload, before the capture and the instrumented passes touch the process's heap (a training step's plain call is
    the step as written: forward, loss, ``backward()``, ``optimizer.step()``); then the instrumented passes (warm-up,
    then kept). A compiled module's plain call comes after the instrumented passes, since the capture compiles it.
    The plain calls make the total the verdict rests on, the instrumented passes attribute it to nodes, and their
    ratio is the profiler's overhead. The thread's page faults are read around each plain call, and after the kept
    passes each node's in passes of their own
    (``facts.count_faults``) and each submodule's in plain calls of their own (``facts.module_faults``), on the CPU.
    Cyclic garbage collection is off while passes run, as ``timeit`` has it: a collection would land on whichever
    node happens to allocate when it falls due. The allocator is the process's as it is (``allocator="as-is"``)
    unless ``allocator="tuned"`` (``machine.tune_allocator``); the environment records which. Where nodes are stamped
    on the wall clock and passes on the thread's CPU clock, a kept pass whose thread was preempted is measured again
    (``chosen_passes``). With ``measured=False`` the module runs once,
    instrumented and cold, and nothing else is timed. ``flops`` counts each node's floating-point
    operations in one more, untimed pass under torch's flop counter (not in an unmeasured profile): a
    warm-up pass of its own would leave the engine's code cold in the first kept pass. ``reference=False`` leaves
    the reference workload out of a measured profile (its total is then not divided by it); ``plain=False`` the
    plain call (the profile then has no plain total and no overhead: ``total_samples_ns`` is empty, and its total
    is the instrumented pass).
    ``barrier(i)`` is called before pass ``i`` and ``barrier(-1)`` after the last (a twin process in lock-step,
    ``measure.lockstep``); the passes measured again for preemption end when both twins have theirs
    (``Barrier.stop``).

    A module compiled with ``torch.compile`` (or any module with ``capture="inductor"``) is compiled by Inductor and
    timed kernel by kernel (``capture.inductor``): its nodes are the kernels and library calls of the compiled code
    and each graph call's entry; no flop count.

    With ``step``, a pass is a training step (``capture.step``): the forward and the loss, the backward and the
    optimizer step, timed node by node, and the plain step is the step as written (the module's forward, the loss,
    ``backward()``, ``optimizer.step()``). Parameters, grads, the optimizer's state, buffers and the random state are
    put back after every step.

    ``spent``, where given, gets the seconds this took added to its ``capture_s`` (the capture, its checks and the
    flop count: all before the first pass), ``warmup_s`` and ``measuring_s`` (the kept passes and those measured
    again). ``known``: how an earlier process captured this forward (``capture.choose.capture_module``).

    A profile carries the call's computation fingerprint (``measure.fingerprint``) unless ``fingerprinted=False``.
    Where ``unchanged`` is given, a measured profile is first captured alone and fingerprinted; where
    ``unchanged(fingerprint)`` says the computation is one already measured, nothing is timed: the profile is an
    unmeasured one, of the program that capture opened (``opened``: the program and its fingerprint, open until
    this returns).
    """
    began = time.perf_counter()
    check_module(module, args, kwargs)
    if unchanged is not None and measured:  # captured alone first: where its computation is known, nothing is timed
        device = device_of(module, args, kwargs)
        clock_name, clock = clock_for(protocol.threads, device)
        with contextlib.ExitStack() as probe:
            program = open_program(
                module,
                args,
                kwargs,
                probe,
                request=CaptureRequest(capture, tuple(leaf_modules), tracer, step, known),
                threads=protocol.threads,
                timer=_node_timer(engine, device, clock_name, clock, memory=step is None)[1],
                engine=engine,
            )
            how = f"{capture}, {engine}, allocator {allocator}"
            probed = fingerprint_of(program, module, args, kwargs, protocol=protocol, how=how, step=step)
            if unchanged(probed):  # the unmeasured profile runs the program this capture opened
                return profile_module(
                    module,
                    args,
                    kwargs,
                    name=name,
                    protocol=protocol,
                    measured=False,
                    leaf_modules=leaf_modules,
                    tracer=tracer,
                    capture=capture,
                    engine=engine,
                    flops=False,
                    step=step,
                    spent=spent,
                    known=known,
                    opened=(program, probed),
                )
    setup = setup_of(module, args, kwargs)
    allocator_name = (tune_allocator() if allocator == "tuned" else allocator_in_use()) if measured else "not measured"
    device = device_of(module, args, kwargs)
    faults = fault_counter() if measured and device.type == "cpu" else None
    clock_name, clock = clock_for(protocol.threads, device)
    # the allocator's counters cost about ten times an event: read in a pass of their own, never in a timed one
    memory = step is None
    node_clock_name, timer = _node_timer(engine, device, clock_name, clock, memory=memory and not measured)
    workload = ReferenceWorkload() if measured and reference else None
    warmup, passes = (protocol.warmup, protocol.passes) if measured else (0, 1)
    watch = measured and node_clock_name == "wall" and clock_name == "thread-cpu"
    first = not inductor.wanted(module, capture)  # a forward's, or a step's as written, needs no capture
    schedule = Schedule.of(warmup, passes, plain=measured and plain, remeasure=watch, plain_first=first)
    phases = {"capture_s": time.perf_counter() - began, "warmup_s": 0.0, "measuring_s": 0.0}
    plain_times: list[tuple[int, int | None, int | None]] = []
    # the plain call's passes, before the capture (a forward, a step) or after it (a compiled module): one phase
    plain_phase = functools.partial(
        _plain_phase, schedule=schedule, barrier=barrier, workload=workload, clock=clock, out=plain_times, phases=phases
    )
    collecting = gc.isenabled()
    gc.disable()
    try:
        with contextlib.ExitStack() as stack:
            i = 0
            failed: Exception | None = None
            if schedule.plain_first:  # as a program that built the model calls it, before anything else runs it
                try:
                    with _plain_first(module, args, kwargs, step, protocol.threads) as (plain_call, reset):
                        call = functools.partial(
                            _plain_call, plain_call, reset, clock=clock, device=device, faults=faults
                        )
                        i = plain_phase(call, start=i)
                except Exception as exc:
                    if out_of_memory(exc):  # no capture would run it either: the memory goes back now
                        raise
                    failed = exc  # the capture's checks say first why a module cannot run
            if collecting:  # on while the capture and the counting pass make and drop their garbage
                gc.enable()
            mark = time.perf_counter()
            program = (
                opened[0]
                if opened is not None
                else open_program(
                    module,
                    args,
                    kwargs,
                    stack,
                    request=CaptureRequest(
                        mode=capture, leaf_modules=tuple(leaf_modules), tracer=tracer, step=step, known=known
                    ),
                    threads=protocol.threads,
                    timer=timer,
                    engine=engine,
                )
            )
            if failed is not None:
                raise ProfileError(
                    f"{type(module).__name__} failed when called as the test calls it ({one_line(failed)}), though "
                    "its capture ran it: it fails only on some calls.\n  Fix: make the forward deterministic (no state "
                    "kept between calls, no randomness that can fail), or pass inputs it always accepts"
                ) from failed
            how = f"{capture}, {engine}, allocator {allocator}"
            fingerprint = (
                opened[1]
                if opened is not None
                else fingerprint_of(program, module, args, kwargs, protocol=protocol, how=how, step=step)
                if fingerprinted
                else None
            )
            captured, nodes, infos, timing = program.captured, program.nodes, program.infos, program.engine
            after, plain_pass, checked = program.after, program.plain, program.checked
            graphs = (
                program.kind is not ProgramKind.KERNELS
            )  # a compiled module's kernels have no graph nodes to count or read
            runners = timing.runners()
            samples = _Samples(len(infos))
            # one untimed pass under torch's flop counter, before the warm-up passes that the engine runs
            seen = (
                count_flops(module, captured, nodes, args, kwargs, infos=infos, ran_before=checked)
                if flops and measured and graphs
                else None
            )
            after()
            counted = seen.flops if seen is not None else None
            facts = graph_facts(captured.graphs, nodes) if graphs else [((), None, False)] * len(infos)
            one_pass = functools.partial(
                _timed_pass,
                module,
                captured=captured,
                timing=timing,
                runners=runners,
                args=args,
                kwargs=kwargs,
                clock=clock,
                device=device,
                nodes=infos,
            )
            start = i
            phases["capture_s"] += time.perf_counter() - mark
            gc.disable()
            mark = time.perf_counter()
            # the instrumented passes: warm-up, then kept (a preempted one measured again, up to schedule.remeasure)
            while i - start < schedule.instrumented and not (
                i - start >= warmup + passes and _stop(barrier, i, samples.enough(passes))
            ):
                keep = i - start >= warmup
                if barrier is not None:
                    barrier(i)
                    if keep and i - start < warmup + passes:
                        barrier.counted_until = i
                if workload is not None and not schedule.plain:
                    ref = workload(clock)
                    if keep:
                        samples.references.append(ref)
                whole, wall, times = one_pass(ran_before=checked or i > start or seen is not None)
                after()
                if keep:
                    samples.keep(whole, times, off_cpu=off_cpu_share(whole, wall) if watch else 0.0)
                now = time.perf_counter()
                phases["measuring_s" if keep else "warmup_s"] += now - mark
                mark = now
                i += 1
            if schedule.plain and not schedule.plain_first:  # a compiled module's call, which the capture compiles
                call = functools.partial(_plain_call, plain_pass, after, clock=clock, device=device, faults=faults)
                i = plain_phase(call, start=i)
            if barrier is not None:
                barrier(-1)
            mark = time.perf_counter()
            if memory and measured and isinstance(timer, EventTimer):
                samples.memory, samples.peaks = _memory_pass(timer, lambda: one_pass(ran_before=True))
                after()
            if faults is not None and graphs:
                fault_pass = functools.partial(_fault_pass, module, captured, args, kwargs, infos=infos, after=after)
                samples.faults = count_faults(captured, nodes, fault_pass, faults)
                if program.kind is ProgramKind.FORWARD:  # the call as the user makes it runs the module's own forwards
                    samples.module_faults = module_faults(module, plain_pass, after, faults)
            for plain_ns, plain_faults, plain_ref in plain_times:
                samples.plain(plain_ns, plain_faults, plain_ref)
            measured_off_cpu = list(samples.off_cpu)
            picked = samples.choose(passes)
            phases["measuring_s"] += time.perf_counter() - mark
    finally:
        if collecting:
            gc.enable()
    if spent is not None:
        for phase, seconds in phases.items():
            spent[phase] = spent.get(phase, 0.0) + seconds
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
            allocated=seen.allocated[k] if seen is not None else None,
            faults=samples.faults[k] if samples.faults is not None else None,
            shape=seen.shapes[k] if seen is not None else "",
            layout=seen.layouts[k] if seen is not None else "",
            inputs=facts[k][0],
            training=facts[k][1],
            returned=facts[k][2],
        )
        for k, (info, m, s, h) in enumerate(zip(infos, medians, samples.nodes, samples.host, strict=True))
    )
    if step is not None and leaf_modules:
        stats = tuple(merge_leaves(stats, module, leaf_modules))
    eager = inductor.eager_module(module)  # a compiled module's paths are its eager module's
    used_clock = clock_name if node_clock_name == clock_name else f"{node_clock_name} nodes, {clock_name} passes"
    return Profile(
        name=name,
        nodes=stats,
        total_samples_ns=tuple(samples.totals),
        instrumented_samples_ns=tuple(samples.instrumented),
        reference_samples_ns=tuple(samples.references),
        environment=environment(
            protocol.threads, device, allocator_name, used_clock if measured else "not measured", engine=engine
        ),
        protocol=protocol,
        capture=replace(captured.capture, classes=module_classes(eager, [s.info for s in stats])),
        measured=measured,
        setup=setup,
        disturbance=disturbance_of(
            measured_off_cpu if watch else None,
            picked if measured else [],
            passes,
            # the nodes' sum against the pass tells a neighbour's time slices only where the clocks differ, on the CPU
            samples.nodes if measured and device.type != "cuda" else [],
            samples.instrumented,
        ),
        fault_samples=tuple(samples.plain_faults),
        module_faults=tuple(sorted(samples.module_faults.items())),
        fingerprint=fingerprint,
    )


def _plain_call(
    plain_pass: Callable[[], Callable[[], Any]],
    after: Callable[[], None],
    *,
    clock: Clock,
    device: torch.device,
    faults: Clock | None,
) -> tuple[int, int | None]:
    """One plain call, its inputs made outside the time: its time on ``clock`` and the thread's page faults in it
    (None where they are not read), read outside the time."""
    go = plain_pass()
    sync(device)
    before = faults() if faults is not None else 0
    start = clock()
    go()
    sync(device)
    took = clock() - start
    taken = faults() - before if faults is not None else None
    after()
    return took, taken


@contextlib.contextmanager
def _plain_first(
    module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any], step: Step | None, threads: int
) -> Iterator[tuple[Callable[[], Callable[[], Any]], Callable[[], None]]]:
    """The plain call before any capture (the module's forward, or the training step as written) and what puts the
    module back after each, the module kept as it was meanwhile (``measure.program``)."""
    if step is None:
        with preserved(module, threads):
            yield plain_forward(module, args, kwargs), nothing
    else:
        with preserved_step(module, threads, step) as kept:
            yield eager_step(module, args, kwargs, step), kept.reset


def _plain_phase(
    call: Callable[[], tuple[int, int | None]],
    schedule: Schedule,
    *,
    barrier: Barrier | None,
    workload: ReferenceWorkload | None,
    clock: Clock,
    out: list[tuple[int, int | None, int | None]],
    phases: dict[str, float],
    start: int,
) -> int:
    """The plain calls of ``schedule`` (``call`` times one), numbered from ``start`` for the twin's lock-step: each
    timed one's time, faults and the reference workload timed before it appended to ``out``; the next pass's number."""
    i = start
    mark = time.perf_counter()
    for j in range(schedule.plain_warmup + schedule.plain):
        if barrier is not None:
            barrier(i)
            if j >= schedule.plain_warmup:
                barrier.counted_until = max(i, barrier.counted_until or 0)
        i += 1
        ref = workload(clock) if workload is not None else None
        took, taken = call()
        if j >= schedule.plain_warmup:
            out.append((took, taken, ref))
        now = time.perf_counter()
        phases["measuring_s" if j >= schedule.plain_warmup else "warmup_s"] += now - mark
        mark = now
    return i


def _fault_pass(
    module: torch.nn.Module,
    captured: Captured,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    runners: Sequence[Runner],
    *,
    infos: Sequence[NodeInfo],
    after: Callable[[], None],
) -> None:
    """One untimed pass of the graphs with ``runners`` (the fault counter's), then what follows every pass."""
    run_pass(module, captured, runners, prepared_inputs(captured, args, kwargs), nodes=infos, ran_before=True)
    after()


def _memory_pass(
    timer: EventTimer, run: Callable[[], tuple[int, int, PassTimes]]
) -> tuple[list[int] | None, list[int] | None]:
    """Each node's bytes in use after it and the peak while it ran, from one more pass that reads the allocator
    at every stamp (``run``): its times are left out, as the three reads per stamp would show in them."""
    timer.memory_on = True
    try:
        times = run()[2]
    finally:
        timer.memory_on = False
    return times.memory_bytes, times.peak_bytes


CUDA_NODE_CLOCK = "cuda-events-only"
"""The node clock on CUDA: an event per stamp and nothing else in a timed pass (the allocator is read in a pass of
its own). Baselines whose clock says ``cuda-events`` read the allocator at every stamp of a forward profile, which
put the host's cost of three calls into every node's device time; they are not compared with these."""


def _node_timer(
    engine: str, device: torch.device, clock_name: str, clock: Clock, *, memory: bool = True
) -> tuple[str, Timer]:
    """The timer of each node, and its clock's name.

    CUDA: device events (and, with ``memory``, the allocator's counters per node: an unmeasured profile's one pass,
    or the memory pass of a measured one). CPU, compiled engine:
    ``perf_counter_ns``, whose call costs about 50 ns where the thread's CPU clock costs several hundred (a
    system call), which would slow a graph of small ops by more than it measures; the passes keep ``clock``.
    CPU, interpreter: ``clock``, which its per-node Python overhead dwarfs anyway.
    """
    if device.type == "cuda":
        return CUDA_NODE_CLOCK, EventTimer(DeviceSide.cuda(device), memory=memory)
    if engine == "compiled":
        return "wall", ClockTimer(WALL_CLOCK)
    return clock_name, ClockTimer(clock)


PREEMPTED_NS = 50_000
"""Less time than this off the CPU in a pass is the clocks' own cost, not a neighbour's time slice."""


def off_cpu_share(cpu_ns: int, wall_ns: int) -> float:
    """The share of a pass's wall time its thread spent off the CPU (0 when under ``PREEMPTED_NS``)."""
    off = wall_ns - cpu_ns
    return off / wall_ns if off > PREEMPTED_NS and wall_ns > 0 else 0.0


def _stop(barrier: Barrier | None, i: int, enough: bool) -> bool:
    """Whether to stop before pass ``i``, with the passes needed (``enough``) or not: at once alone, with the twin
    in lock-step (``Barrier.stop``)."""
    return enough if barrier is None else barrier.stop(i, enough=enough)


def chosen_passes(off_cpu: Sequence[float], wanted: int) -> list[int]:
    """The passes whose node times count: the first ``wanted`` that ran with the thread on the CPU (off it
    at most ``OFF_CPU_LIMIT`` of the time), or, where too few did, the ``wanted`` least disturbed, in order."""
    clean = [i for i, f in enumerate(off_cpu) if f <= OFF_CPU_LIMIT]
    if len(clean) >= wanted:
        return clean[:wanted]
    return sorted(sorted(range(len(off_cpu)), key=lambda i: (off_cpu[i], i))[:wanted])


PLAIN_WARMUP = 1
"""Untimed plain calls before the timed ones where they follow the instrumented passes (a compiled module's): those
free memory at other points than the plain call, so the first plain call after them meets a heap left as they left
it; the next ones meet the heap the plain call's own calls leave, as in the user's program, which calls the model
again and again. A forward's and a training step's plain calls come first, before anything else runs the model
(the capture and the instrumented passes touch the process's heap, and can move it into another allocator state:
BENCHMARKS.md, "The allocator: the program users run"), warmed up as the instrumented passes are."""


@dataclass(frozen=True)
class Schedule:
    """The passes of a measured profile, in the order it runs them, as plain data the loop follows: where
    ``plain_first`` (a forward, a training step), ``plain_warmup`` plain calls thrown away and ``plain`` timed, before
    the capture, as a program that built the model calls it; then ``warmup`` instrumented passes thrown away,
    ``passes`` kept (and up to ``remeasure`` more where a kept one was preempted: its thread off the CPU); then, where
    not ``plain_first`` (a compiled module's call, which the capture compiles), the plain calls (0: none)."""

    warmup: int
    passes: int
    plain: int
    plain_warmup: int = PLAIN_WARMUP
    remeasure: int = 0
    plain_first: bool = False

    @classmethod
    def of(cls, warmup: int, passes: int, *, plain: bool, remeasure: bool, plain_first: bool = False) -> Schedule:
        """The schedule of ``warmup`` and ``passes`` passes: the plain call timed as often as the instrumented pass
        where ``plain``, first (before the capture, warmed up as the instrumented passes are) where ``plain_first``,
        else after the instrumented passes (one call thrown away); a preempted pass measured again where
        ``remeasure``."""
        first = plain and plain_first
        return cls(
            warmup=warmup,
            passes=passes,
            plain=passes if plain else 0,
            plain_warmup=(max(warmup, PLAIN_WARMUP) if first else PLAIN_WARMUP) if plain else 0,
            remeasure=passes if remeasure else 0,
            plain_first=first,
        )

    @property
    def instrumented(self) -> int:
        """The most instrumented passes it runs."""
        return self.warmup + self.passes + self.remeasure


class _Samples:
    """What the kept passes measured, per node and per pass."""

    def __init__(self, count: int) -> None:
        self.nodes: list[list[int]] = [[] for _ in range(count)]
        self.host: list[list[int]] = [[] for _ in range(count)]
        self.memory: list[int] | None = None
        self.peaks: list[int] | None = None
        self.faults: list[int] | None = None
        self.module_faults: dict[str, int] = {}
        self.totals: list[int] = []
        self.plain_faults: list[int] = []
        self.plain_references: list[int] = []
        self.instrumented: list[int] = []
        self.references: list[int] = []
        self.off_cpu: list[float] = []

    def enough(self, wanted: int) -> bool:
        """Whether ``wanted`` kept passes ran with the thread on the CPU throughout."""
        return sum(f <= OFF_CPU_LIMIT for f in self.off_cpu) >= wanted

    def choose(self, wanted: int) -> list[int]:
        """Keep the node times, instrumented totals and reference times of the instrumented passes
        ``chosen_passes`` picks (the plain calls are timed on the thread's CPU clock, which a neighbour's time
        slice does not reach, and keep the reference timed beside them); return the passes picked."""
        picked = chosen_passes(self.off_cpu, wanted)
        self.nodes = [[s[i] for i in picked] for s in self.nodes]
        self.host = [[s[i] for i in picked] if s else s for s in self.host]
        self.instrumented = [self.instrumented[i] for i in picked]
        if self.references:  # none in an unmeasured profile
            self.references = [self.references[i] for i in picked]
        if self.plain_references:  # the reference beside the plain calls, where they were timed
            self.references = self.plain_references
        return picked

    def plain(self, took_ns: int, faults: int | None, reference_ns: int | None) -> None:
        """A timed plain call: its time, its page faults and the reference workload timed before it, where read."""
        self.totals.append(took_ns)
        if faults is not None:
            self.plain_faults.append(faults)
        if reference_ns is not None:
            self.plain_references.append(reference_ns)

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
    nodes: Sequence[NodeInfo],
    ran_before: bool,
) -> tuple[int, int, PassTimes]:
    """One instrumented pass on fresh copies of the inputs: its whole time on ``clock`` and on the wall
    clock, and its times per node. ``nodes`` name the node that fails, if one does; ``ran_before`` says whether
    the graphs ran before (a capture checked against the module, or an earlier pass)."""
    prepared = prepared_inputs(captured, args, kwargs)
    sync(device)
    timing.begin_pass()
    wall = WALL_CLOCK()
    start = clock()
    run_pass(module, captured, runners, prepared, nodes=nodes, ran_before=ran_before)
    sync(device)
    whole = clock() - start
    wall = WALL_CLOCK() - wall
    return whole, wall, timing.end_pass()
