"""Profile a module: open its program, then time it node by node over a schedule of passes.

Owns ``profile_module``, the protocol of one profile; ``measure.schedule`` holds the passes' order and samples,
``measure.program`` the program timed. The caller's module and inputs leave a profile as they came in (mode,
buffers, random state, thread count; inputs cloned before every pass; a forward under ``torch.no_grad``; a step's
parameters, grads and optimizer state put back). A profile that runs out of device memory empties CUDA's cache
before its error leaves (``engine.release_memory``).

Must not import pytest.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import torch

from pytest_fxprof.capture import inductor
from pytest_fxprof.capture.choose import check_module
from pytest_fxprof.capture.compiled import eager_module
from pytest_fxprof.capture.errors import ProfileError, one_line
from pytest_fxprof.capture.graphs import LeafSpec, Runner, prepared_inputs, run_pass
from pytest_fxprof.capture.nodes import module_classes
from pytest_fxprof.capture.step import Step
from pytest_fxprof.measure.engine import (
    Clock,
    ClockTimer,
    DeviceSide,
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
from pytest_fxprof.measure.program import CaptureRequest, Program, ProgramKind, open_program
from pytest_fxprof.measure.schedule import (
    Samples,
    Schedule,
    off_cpu_share,
    plain_first,
    plain_phase,
    stop,
)
from pytest_fxprof.measure.signature import setup_of
from pytest_fxprof.records.disturbance import disturbance_of
from pytest_fxprof.records.measurement import Capture, NodeStats, Protocol, iqr_int, median_int
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
    """Capture ``module``, run ``protocol.warmup`` discarded and ``protocol.passes`` kept passes (a ``Schedule``).

    The plain call as the user makes it (a training step's: forward, loss, ``backward()``, ``optimizer.step()``) is
    timed beside the reference workload before the capture touches the heap (after the instrumented passes for a
    compiled module, which the capture compiles); it makes the total, the instrumented passes attribute it to nodes.
    On the CPU page faults are read around each plain call, then per node and per submodule (``facts``). Cyclic
    garbage collection is off while passes run. A kept pass a neighbour preempted is measured again where nodes are
    stamped on the wall clock and passes on the thread's CPU clock (``chosen_passes``).

    ``measured=False``: one cold instrumented pass, nothing else timed. ``flops``: each node's floating-point
    operations, counted in one more untimed pass (not for kernels). ``reference=False``/``plain=False`` leave the
    reference workload/the plain call out. ``allocator="tuned"``: ``machine.tune_allocator``. ``barrier(i)`` is called
    before pass ``i`` and ``barrier(-1)`` after the last (``measure.lockstep``). A compiled module (or
    ``capture="inductor"``) is timed kernel by kernel (``capture.inductor``); with ``step`` a pass is a training step
    (``capture.step``), its state put back after every step. ``spent`` gets each phase's seconds added (``capture_s``,
    ``warmup_s``, ``measuring_s``); ``known``: how an earlier process captured this forward. The profile carries the
    call's fingerprint (``measure.fingerprint``) unless ``fingerprinted=False``; where ``unchanged(fingerprint)`` says
    its computation was measured already, nothing is timed: the profile is an unmeasured one of the program that
    capture opened (``opened``: the program and its fingerprint).
    """
    began = time.perf_counter()
    check_module(module, args, kwargs)
    device = device_of(module, args, kwargs)
    clock_name, clock = clock_for(protocol.threads, device)
    request = CaptureRequest(capture, tuple(leaf_modules), tracer, step, known)
    how = f"{capture}, {engine}, allocator {allocator}"

    def program_of(stack: contextlib.ExitStack, timer: Timer) -> Program:
        return open_program(
            module, args, kwargs, stack, request=request, threads=protocol.threads, timer=timer, engine=engine
        )

    def fingerprinting(program: Program) -> Fingerprint:
        return fingerprint_of(program, module, args, kwargs, protocol=protocol, how=how, step=step)

    if unchanged is not None and measured:  # captured alone first: where its computation is known, nothing is timed
        with contextlib.ExitStack() as probe:
            program = program_of(probe, _node_timer(engine, device, clock_name, clock, memory=step is None)[1])
            probed = fingerprinting(program)
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
    faults = fault_counter() if measured and device.type == "cpu" else None
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
    plain_calls = functools.partial(
        plain_phase,
        schedule=schedule,
        barrier=barrier,
        workload=workload,
        clock=clock,
        device=device,
        faults=faults,
        out=plain_times,
        phases=phases,
    )
    collecting = gc.isenabled()
    gc.disable()
    try:
        with contextlib.ExitStack() as stack:
            i = 0
            failed: Exception | None = None
            if schedule.plain_first:  # as a program that built the model calls it, before anything else runs it
                try:
                    with plain_first(module, args, kwargs, step, protocol.threads) as (plain_call, reset):
                        i = plain_calls(plain_call, reset, start=i)
                except Exception as exc:
                    if out_of_memory(exc):  # no capture would run it either: the memory goes back now
                        raise
                    failed = exc  # the capture's checks say first why a module cannot run
            if collecting:  # on while the capture and the counting pass make and drop their garbage
                gc.enable()
            mark = time.perf_counter()
            program = opened[0] if opened is not None else program_of(stack, timer)
            if failed is not None:
                raise ProfileError(
                    f"{type(module).__name__} failed when called as the test calls it ({one_line(failed)}), though "
                    "its capture ran it: it fails only on some calls.\n  Fix: make the forward deterministic (no state "
                    "kept between calls, no randomness that can fail), or pass inputs it always accepts"
                ) from failed
            fingerprint = opened[1] if opened is not None else fingerprinting(program) if fingerprinted else None
            captured, nodes, infos, timing = program.captured, program.nodes, program.infos, program.engine
            after, plain_pass, checked = program.after, program.plain, program.checked
            # a compiled module's kernels have no graph nodes to count or read
            graphs = program.kind is not ProgramKind.KERNELS
            runners = timing.runners()
            samples = Samples(len(infos))
            # one untimed pass under torch's flop counter, before the warm-up passes that the engine runs
            seen = (
                count_flops(module, captured, nodes, args, kwargs, infos=infos, ran_before=checked)
                if flops and measured and graphs
                else None
            )
            after()
            counted = seen.flops if seen is not None else None
            facts = graph_facts(captured.graphs, nodes) if graphs else [((), None, False)] * len(infos)

            def one_pass(ran_before: bool) -> tuple[int, int, PassTimes]:
                """One instrumented pass on fresh inputs: its time on ``clock`` and on the wall clock, and per node."""
                prepared = prepared_inputs(captured, args, kwargs)
                sync(device)
                timing.begin_pass()
                wall, began_ns = WALL_CLOCK(), clock()
                run_pass(module, captured, runners, prepared, nodes=infos, ran_before=ran_before)
                sync(device)
                whole = clock() - began_ns
                return whole, WALL_CLOCK() - wall, timing.end_pass()

            start = i
            phases["capture_s"] += time.perf_counter() - mark
            gc.disable()
            mark = time.perf_counter()
            # the instrumented passes: warm-up, then kept (a preempted one measured again, up to schedule.remeasure)
            while i - start < schedule.instrumented and not (
                i - start >= warmup + passes and stop(barrier, i, samples.enough(passes))
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
                i = plain_calls(plain_pass, after, start=i)
            if barrier is not None:
                barrier(-1)
            mark = time.perf_counter()
            if memory and measured and isinstance(timer, EventTimer):
                timer.memory_on = True  # one more pass reads the allocator at every stamp; its times are left out
                try:
                    read = one_pass(ran_before=True)[2]
                finally:
                    timer.memory_on = False
                samples.memory, samples.peaks = read.memory_bytes, read.peak_bytes
                after()
            if faults is not None and graphs:

                def fault_pass(runs: Sequence[Runner]) -> None:  # untimed, with the fault counter's runners
                    run_pass(
                        module, captured, runs, prepared_inputs(captured, args, kwargs), nodes=infos, ran_before=True
                    )
                    after()

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
    eager = eager_module(module)  # a compiled module's paths are its eager module's
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


CUDA_NODE_CLOCK = "cuda-events-only"
"""The node clock on CUDA: an event per stamp and nothing else in a timed pass (the allocator is read in a pass of
its own); baselines of the ``cuda-events`` clock, which read it at every stamp, are not compared with these."""


def _node_timer(
    engine: str, device: torch.device, clock_name: str, clock: Clock, *, memory: bool = True
) -> tuple[str, Timer]:
    """The timer of each node, and its clock's name: on CUDA device events (and, with ``memory``, the allocator's
    counters per node); on the CPU with the compiled engine ``WALL_CLOCK``, whose call costs a fraction of the thread's
    CPU clock's (a system call), while the passes keep ``clock``; with the interpreter ``clock``."""
    if device.type == "cuda":
        return CUDA_NODE_CLOCK, EventTimer(DeviceSide.cuda(device), memory=memory)
    if engine == "compiled":
        return "wall", ClockTimer(WALL_CLOCK)
    return clock_name, ClockTimer(clock)
