"""The rounds of an A/B check: old and new sides measured in pairs of fresh processes that serve many tests.

Owns ``Side`` (how to start one side's process), ``PairedTest`` (one test of the check and when it has pairs
enough) and ``measure_pairs`` (the schedule). The caller measures the pairs in the machine's measuring turn
(``measure.turns``), so that one check measures at a time on a machine.

A pair is two fresh processes, one per side, each measuring every test still open, in the same order, so that
a process's start (interpreter, imports, collection) is paid once per pair, not once per test, while every pair
still samples the variance between processes. Pair 1 serves the tests in the run's order, each later pair in an
order of its own (``shuffled``): what a test meets in its process depends on the tests before it (where the
allocator places its tensors), and the same order in every pair would make that the same in every pair, a
difference between the sides that no pair's spread shows. A pair is a duet (both processes at once, each test's
passes in lock-step: ``measure.lockstep``) or one process after the other, in a balanced order: pair 1 runs old then
new, pair 2 new then old, and so on (ABBA...), so that a trend within a pair favours neither side.

A test's first ``pairs`` pairs are measured, then its ``undecided`` says whether an item that gates is still open,
and it stays in the pairs while it is, up to ``max_pairs``; every pair after its first only as long as its
``budget_s`` allows another (at its measured cost), so that a test slower than its budget ends undecided, saying so,
rather than running its minimum past it. A decided test leaves the later pairs. A side that
reports the test absent or skipped ends its rounds, as does its ``moot`` (nothing left that pairs could
compare). The run's ``run_budget_s`` is a limit on the whole: no pair starts that would end past it (at the
measured cost of its tests), a pair after the first that is still running when it ends is stopped there, and what
was still open then says so (``Pairs.stopped``).

A test that fails, crashes or hangs a side's process fails that test alone: a process that ended while running
a test, or ran one test past ``deadline_s`` (then it is stopped, with its twin), charges it to that test, and the
tests after it are measured again in a fresh pair (same number): ``measure.serving``.

Must not import torch or pytest.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pytest_fxprof.against.revision import PREFIX
from pytest_fxprof.measure.lockstep import call_tag, exited_mark, pair_cores
from pytest_fxprof.measure.sampling import Child, Relaunch, Start, start
from pytest_fxprof.measure.serving import Served, Spent, Watch, run, serving_dir, settle


@dataclass(frozen=True)
class Side:
    """One side of the comparison: ``old`` (the revision) or ``new`` (the working tree), and how to start it."""

    name: str
    label: str
    relaunch: Relaunch
    request: dict[str, Any] = field(default_factory=dict)
    """What every process of the side is asked besides its tests (the import check, for the old)."""
    starter: Start = start
    """How its processes start: fresh interpreters, or forked (``measure.forking``)."""


@dataclass(frozen=True)
class StopReason:
    """What ended a test's pairs while an item still needed more (``Pairs.stopped``), or kept a second set from
    being measured (``Pairs.unconfirmed``): the run's time budget, the test's, or the most pairs a test takes,
    with its value (seconds, or pairs; None where the run has no budget of its own). Said as ``str(reason)``."""

    limit: Literal["run budget", "test budget", "pairs"]
    of: float | None = None
    per_pair_s: float | None = None
    """The test's cost a pair, where its own budget ended it."""
    needed: int = 0
    """The pairs it needed at the least, where its budget ended it before them."""

    @property
    def by_run_budget(self) -> bool:
        return self.limit == "run budget"

    @property
    def option(self) -> str:
        """The option that gives the test more time."""
        return "--fxprof-run-budget-s" if self.by_run_budget else "--fxprof-budget-s"

    def __str__(self) -> str:
        if self.limit == "pairs":
            return f"the limit of {self.of:g} pairs"
        if self.by_run_budget:
            return "the run's time budget" + ("" if self.of is None else f" of {self.of:g} s")
        said = f"the time budget of {self.of:.3g} s per test"
        if self.per_pair_s is None:
            return said
        need = f", so {self.needed} pairs need {self.per_pair_s * self.needed:.3g} s" if self.needed else ""
        return f"{said} (a pair of it takes {self.per_pair_s:.3g} s{need})"


def _never(got: Pairs) -> bool:
    return False


@dataclass
class PairedTest:
    """One test of a check: what its processes are asked of it (``settings``, and ``calls``, the new side's call
    keys where known) and how many pairs it takes."""

    test_id: str
    request: dict[str, Any]
    pairs: int
    max_pairs: int
    budget_s: float
    undecided: Callable[[Pairs], bool] = _never
    moot: Callable[[Pairs], bool] = _never
    captured: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per side, how the side's first pair captured each call (``captured_by``): its later pairs capture the same way
    straight away, without the tries that failed before it (``capture.choose.capture_module``'s ``known``)."""

    def asked(self, side: str) -> dict[str, Any]:
        """What ``side``'s process is asked of this test."""
        known = self.captured.get(side)
        return {**self.request, "captured": known} if known else self.request


@dataclass
class Pairs:
    """What the pairs measured of one test so far: per pair, what each side's process wrote of it (in ``Child``)."""

    old: list[Child] = field(default_factory=list)
    new: list[Child] = field(default_factory=list)
    seconds: float = 0.0
    """Its share of the pairs' time: its own time in each pair (the slower side's) and its part of the processes'
    start."""
    stopped: StopReason | None = None
    """Why no more pairs were measured though an item was undecided (a budget, the limit)."""
    ended: tuple[str, Child] | None = None
    """The side whose process found the test absent or skipped, and that process: the rounds ended there."""
    failed: SideFailedError | None = None
    """A side that could not measure the test (it failed, crashed or hung there): its rounds ended there."""
    error: str = ""
    """Why the caller's ``moot`` ended its rounds with an error (the old side ran the working tree's code)."""
    confirmed: Pairs | None = None
    """A second, independent set of pairs of the test, measured after these where they ended with a call slower or
    undecided (``against.campaign.measure_tests``): what its verdict must agree with."""
    unconfirmed: StopReason | None = None
    """Why these pairs' verdict was to be confirmed but was not (a budget spent)."""
    verdicts: dict[tuple[Any, ...], Any] = field(default_factory=dict, repr=False, compare=False)
    """The verdict of each call over the pairs so far, as ``against.compare.judged_calls`` judged it once: asked
    again (after a pair, whether to confirm, the test's outcome), the same pairs are not judged again."""
    unchanged: bool = False
    """Every call of the test is the same computation on both sides (``against.proof``): no pair was measured, and
    ``new`` holds only the new side's process that fingerprinted it (its unmeasured profiles)."""
    changes: dict[str, list[str]] = field(default_factory=dict)
    """Per call, what differs between the sides' computation fingerprints, where they were read before the pairs
    (empty for a call that is the same)."""


class AgainstError(Exception):
    """A side could not be measured; the message names the side, the cause and the fix."""


class SideFailedError(Exception):
    """A side's process failed a test; carries the process (as the test saw it) and the pair it belonged to."""

    def __init__(self, side: Side, child: Child, number: int) -> None:
        super().__init__(side.name)
        self.side = side
        self.child = child
        self.number = number


def order(pair: int) -> tuple[str, str]:
    """Which side runs first in pair ``pair`` (from 0): old, new; new, old; old, new; ..."""
    return ("old", "new") if pair % 2 == 0 else ("new", "old")


@dataclass
class PairResult:
    """One pair over a list of tests: per test, both sides' ``Child`` (or the side that failed it), and how long
    each test took in it."""

    measured: dict[str, tuple[Child, Child]] = field(default_factory=dict)
    failed: dict[str, SideFailedError] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    cut: list[str] = field(default_factory=list)
    """The tests it had not measured when the time it was given ran out (``until``)."""


TestOrder = Callable[[int, Sequence["PairedTest"]], list["PairedTest"]]
"""The order in which pair ``number`` (from 1) serves its tests, given in the run's order."""


def shuffled(seed: int | None = None) -> TestOrder:
    """Pair 1 in the run's order, each later pair in a random order (from ``seed``; fresh entropy by default).

    A test's time depends on what ran before it in its process: where the allocator places its tensors turns on
    every allocation before, and a memory-bound operation (a concatenation, a pooling) runs faster or slower by
    where its input and output lie. Both sides of a pair run the same tests in the same order, but their
    processes differ a little (each imports its own code, from its own directory), so the same order in every
    pair can leave one side's placement worse in every pair, and an unchanged model's memory-bound operations
    read slower in nearly every pair: no interval drawn from those pairs can tell that from a slowdown. An order
    per pair makes
    it part of the spread between pairs, which the verdict weighs (BENCHMARKS.md, "Each pair in its own order")."""
    rng = random.Random(seed)  # noqa: S311 (an order, not a secret)

    def arrange(number: int, tests: Sequence[PairedTest]) -> list[PairedTest]:
        out = list(tests)
        if number > 1:
            rng.shuffle(out)
        return out

    return arrange


def in_turn(number: int, tests: Sequence[PairedTest]) -> list[PairedTest]:
    """Every pair in the run's order."""
    return list(tests)


def _sides_request(tests: Sequence[PairedTest]) -> list[str]:
    """The lock-step's tags of the calls the new side makes, in every test where they are known."""
    return [call_tag(k, t.test_id) for t in tests for k in t.request.get("calls", [])]


def run_pair(
    old: Side,
    new: Side,
    tests: Sequence[PairedTest],
    *,
    number: int,
    duet: bool,
    deadline_s: float | None = None,
    cores: Sequence[int] | None = None,
    spent: Spent | None = None,
    watch: Watch | None = None,
    until: float | None = None,
) -> PairResult:
    """Pair ``number`` (from 1) over ``tests``: a duet (both processes at once, trading ``cores`` pass by pass: by
    default two groups of the tests' threads of this process's cores, where it may place them) or one process
    after the other in the pair's order. Tests after one that crashed or hung a process run again in fresh
    processes. At ``until`` (``time.monotonic``) its processes are stopped, and the tests they had not measured
    are ``PairResult.cut``."""
    result = PairResult()
    remaining = list(tests)
    if cores is None and duet:
        threads = max((int(t.request.get("settings", {}).get("threads", 1)) for t in tests), default=1)
        cores = pair_cores(threads)
    sides = {"old": old, "new": new}
    while remaining:
        with serving_dir(PREFIX, "duet" if duet else "pair") as tmp:
            base = Path(tmp)
            served = []
            for side, other in ((old, new), (new, old)):
                directory = base / side.name
                directory.mkdir()
                # what the untimed counting pass finds (flops, shapes, bytes) is the same in every pair: the first
                # counts it; every pair times the plain call, which the total's verdict rests on
                once = number == 1
                extra: dict[str, Any] = {**side.request, "entry": True, "flops": once}
                if duet:
                    extra["lockstep"] = {
                        "dir": str(base),
                        "side": side.name,
                        "other": other.name,
                        "cores": list(cores or []),
                    }
                    extra["lockstep"]["new_calls"] = _sides_request(remaining)
                asked = [(t.test_id, t.asked(side.name)) for t in remaining]
                served.append(Served(side.name, side.relaunch, asked, directory, extra, starter=side.starter))
            if duet:
                run(served, deadline_s, [exited_mark(base, s.name) for s in served], watch, until)
            else:
                first = {"old": 0, "new": 1}[order(number - 1)[0]]
                for s in (served[first], served[1 - first]):
                    run([s], deadline_s, watch=watch, until=until)
            got = settle(served, [t.test_id for t in remaining], spent)
        for test_id, children in got.measured.items():
            result.measured[test_id] = (children["old"], children["new"])
            result.seconds[test_id] = got.seconds[test_id]
        for test_id, (name, child) in got.failed.items():
            result.failed[test_id] = SideFailedError(sides[name], child, number)
        if any(s.out_of_time for s in served):
            result.cut = list(got.retry)
            break
        if len(got.retry) == len(remaining):  # nothing settled: never loop for ever
            for test_id in got.retry:
                child = Child((), -1, None, "", "no process measured it to the end")
                result.failed[test_id] = SideFailedError(old, child, number)
            break
        remaining = [t for t in remaining if t.test_id in got.retry]
    return result


def measure_pairs(
    old: Side,
    new: Side,
    tests: Sequence[PairedTest],
    *,
    duet: bool = False,
    deadline_s: float | None = None,
    run_budget_s: float | None = None,
    already_s: float = 0.0,
    clock: Callable[[], float] = time.monotonic,
    progress: Callable[[int, int, float], None] | None = None,
    spent: Spent | None = None,
    test_order: TestOrder | None = None,
    watch: Callable[[int, str, float], None] | None = None,
) -> dict[str, Pairs]:
    """Measure the pairs of ``tests`` (each to its ``pairs``, then more while its ``undecided`` and its budget and
    ``max_pairs`` allow, within ``run_budget_s`` in all, of which the run spent ``already_s`` before); per test
    what they measured. Each pair serves its tests in ``test_order`` (``shuffled()`` by default).
    ``progress(pair, tests, seconds)`` is told of each pair as it ends, ``watch(pair, test, seconds)`` of a test that
    runs long in it (``measure.serving.WATCH_S``)."""
    arrange = test_order or shuffled()
    cut = StopReason("run budget", run_budget_s)
    got = {t.test_id: Pairs() for t in tests}
    done: set[str] = set()
    began = clock()
    number = 0
    while True:
        chosen = [t for t in tests if t.test_id not in done and _open(t, got[t.test_id], done)]
        if not chosen:
            break
        if number and run_budget_s is not None:
            ahead = sum(got[t.test_id].seconds / max(1, len(got[t.test_id].old)) for t in chosen)
            if already_s + clock() - began + ahead > run_budget_s:
                for t in chosen:
                    got[t.test_id].stopped = cut
                break
        started = clock()
        served = arrange(number + 1, chosen)
        told = None if watch is None else functools.partial(watch, number + 1)
        # the first pair runs whatever the budget (what a pair costs is known only after it); a later one stops at it
        left = None if not number or run_budget_s is None else run_budget_s - already_s - (clock() - began)
        result = run_pair(
            old,
            new,
            served,
            number=number + 1,
            duet=duet,
            deadline_s=deadline_s,
            spent=spent,
            watch=told,
            until=None if left is None else time.monotonic() + left,
        )
        number += 1
        took = clock() - started
        own = sum(result.seconds.values())
        share = max(0.0, took - own) / len(chosen)  # the processes' start, shared by the tests they served
        for t in chosen:
            got[t.test_id].seconds += result.seconds.get(t.test_id, 0.0) + share
            if _take(t, got[t.test_id], result, cut):
                done.add(t.test_id)
        if progress is not None:
            progress(number, len(chosen), took)
    return got


def _take(t: PairedTest, g: Pairs, result: PairResult, cut: StopReason) -> bool:
    """Add what pair ``result`` measured of test ``t`` to ``g``; whether that ends its pairs (a side failed, lacked
    or skipped it, the pair was ``cut`` short before it, or nothing is left to compare)."""
    if t.test_id in result.failed:
        g.failed = result.failed[t.test_id]
        return True
    if t.test_id in result.cut:
        g.stopped = cut
        return True
    pair = result.measured.get(t.test_id)
    if pair is None:
        return False
    ended = next(((name, c) for name, c in zip(("old", "new"), pair, strict=True) if c.ended), None)
    if ended is not None:
        g.ended = ended
        return True
    g.old.append(pair[0])
    g.new.append(pair[1])
    if "calls" not in t.request:  # the new side's calls, for the lock-step of the next pairs
        t.request["calls"] = sorted((pair[1].data or {}).get("calls", {}))
    if not t.captured:
        t.captured = {"old": captured_by(pair[0]), "new": captured_by(pair[1])}
    return t.moot(g)


def captured_by(child: Child) -> dict[str, dict[str, Any]]:
    """How a side's process captured each call of its test: each entry's capture record as the entry holds it
    (method, the submodules kept whole, why auto chose the method, ...)."""
    calls = (child.data or {}).get("calls")
    out: dict[str, dict[str, Any]] = {}
    for key, call in (calls if isinstance(calls, dict) else {}).items():
        entry = call.get("entry") if isinstance(call, dict) else None
        capture = entry.get("capture") if isinstance(entry, dict) else None
        if isinstance(capture, dict):
            out[key] = capture
    return out


def _open(t: PairedTest, g: Pairs, done: set[str]) -> bool:
    """Whether test ``t`` takes the next pair: under its ``pairs``, or undecided within its limit, and in either
    case within its budget at what a pair of it has cost (else it is done, and ``g.stopped`` says what ended it
    while it still needed pairs)."""
    n = len(g.old)
    if n >= t.pairs and not t.undecided(g):
        done.add(t.test_id)
        return False
    if n >= t.max_pairs:
        g.stopped = StopReason("pairs", t.max_pairs)
    elif n and g.seconds + g.seconds / n > t.budget_s:
        g.stopped = StopReason("test budget", t.budget_s, g.seconds / n, t.pairs if n < t.pairs else 0)
    if g.stopped is not None:
        done.add(t.test_id)
        return False
    return True
