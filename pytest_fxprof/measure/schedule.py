"""The passes of one profile: their order (``Schedule``), the plain calls as the user makes them (``plain_phase``),
and what the kept passes measured (``Samples``), of which those a neighbour did not preempt count
(``chosen_passes``). ``measure.profiler`` runs them.

Must not import pytest.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_fxprof.capture.step import Step
from pytest_fxprof.measure.engine import Clock, PassTimes
from pytest_fxprof.measure.lockstep import Barrier
from pytest_fxprof.measure.machine import ReferenceWorkload, sync
from pytest_fxprof.measure.program import eager_step, nothing, plain_forward, preserved, preserved_step
from pytest_fxprof.records.disturbance import OFF_CPU_LIMIT

if TYPE_CHECKING:
    import torch

PLAIN_WARMUP = 1
"""Untimed plain calls before the timed ones where they follow the instrumented passes (a compiled module's); a
forward's and a step's come first, before the capture touches the heap (BENCHMARKS.md, "The allocator: the program
users run"), warmed up as the instrumented passes are."""


@dataclass(frozen=True)
class Schedule:
    """The passes of a measured profile, in the order it runs them: where ``plain_first`` (a forward, a training
    step), ``plain_warmup`` plain calls thrown away and ``plain`` timed, before the capture; then ``warmup``
    instrumented passes thrown away, ``passes`` kept (and up to ``remeasure`` more where a kept one was preempted);
    then, where not ``plain_first`` (a compiled module's call, which the capture compiles), the plain calls."""

    warmup: int
    passes: int
    plain: int
    plain_warmup: int = PLAIN_WARMUP
    remeasure: int = 0
    plain_first: bool = False

    @classmethod
    def of(cls, warmup: int, passes: int, *, plain: bool, remeasure: bool, plain_first: bool = False) -> Schedule:
        """The schedule of ``warmup`` and ``passes`` passes: as many plain calls where ``plain``, first where
        ``plain_first``; a preempted pass measured again where ``remeasure``."""
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


def stop(barrier: Barrier | None, i: int, enough: bool) -> bool:
    """Whether to stop before pass ``i``, with the passes needed (``enough``) or not: at once alone, with the twin
    in lock-step (``Barrier.stop``)."""
    return enough if barrier is None else barrier.stop(i, enough=enough)


class Samples:
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
        """Keep the node times, instrumented totals and references of the passes ``chosen_passes`` picks (timed plain
        calls keep the reference timed beside them); return the passes picked."""
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


@contextlib.contextmanager
def plain_first(
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


def plain_phase(
    plain_pass: Callable[[], Callable[[], Any]],
    after: Callable[[], None],
    *,
    schedule: Schedule,
    barrier: Barrier | None,
    workload: ReferenceWorkload | None,
    clock: Clock,
    device: torch.device,
    faults: Clock | None,
    out: list[tuple[int, int | None, int | None]],
    phases: dict[str, float],
    start: int,
) -> int:
    """The plain calls of ``schedule`` (``plain_pass`` makes one on fresh inputs), numbered from ``start`` for the
    twin's lock-step: each timed one's time, page faults (read outside the time) and the reference workload timed
    before it appended to ``out``; the next pass's number."""
    i = start
    mark = time.perf_counter()
    for j in range(schedule.plain_warmup + schedule.plain):
        if barrier is not None:
            barrier(i)
            if j >= schedule.plain_warmup:
                barrier.counted_until = max(i, barrier.counted_until or 0)
        i += 1
        ref = workload(clock) if workload is not None else None
        go = plain_pass()
        sync(device)
        before = faults() if faults is not None else 0
        began = clock()
        go()
        sync(device)
        took = clock() - began
        taken = faults() - before if faults is not None else None
        after()
        if j >= schedule.plain_warmup:
            out.append((took, taken, ref))
        now = time.perf_counter()
        phases["measuring_s" if j >= schedule.plain_warmup else "warmup_s"] += now - mark
        mark = now
    return i
