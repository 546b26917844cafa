"""The rounds of an A/B check: old and new sides measured in pairs of fresh processes that serve many tests.

Owns ``Side`` (how to start one side's process), ``PairedTest`` (one test of the check and when it has pairs
enough) and ``measure_pairs`` (the schedule). The caller measures the pairs in the machine's measuring turn
(``measure.turns``), so that one check measures at a time on a machine.

A pair is two fresh processes, one per side, each measuring every test still open, in the same order, so that
a process's start (interpreter, imports, collection) is paid once per pair, not once per test, while every pair
still samples the variance between processes. A pair is a duet (both processes at once, each test's passes in
lock-step: ``measure.lockstep``) or one process after the other, in a balanced order: pair 1 runs old then
new, pair 2 new then old, and so on (ABBA...), so that a trend within a pair favours neither side.

A test's first ``pairs`` pairs are always measured (within the run's budget); then its ``undecided`` says
whether an item that gates is still open, and it stays in the pairs while it is, up to ``max_pairs``, as long as
its ``budget_s`` allows another pair (at its measured cost). A decided test leaves the later pairs. A side that
reports the test absent or skipped ends its rounds, as does its ``moot`` (nothing left that pairs could
compare). The run's ``run_budget_s`` is a limit on the whole: no pair starts that would end past it (at the
measured cost of its tests), and what was still open then says so (``Pairs.stopped``).

A test that fails, crashes or hangs a side's process fails that test alone: a process that ended while running
a test, or ran one test past ``deadline_s`` (then it is stopped, with its twin), charges it to that test, and the
tests after it are measured again in a fresh pair (same number).

Must not import torch or pytest.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_fxprof.against.revision import PREFIX
from pytest_fxprof.measure.lockstep import call_tag, exited_mark, pair_cores
from pytest_fxprof.measure.sampling import Child, Relaunch, Spent, finish, start
from pytest_fxprof.store.files import loads

POLL_S = 0.05
"""How often the parent of a pair looks whether its processes ended, or a test hangs."""


@dataclass(frozen=True)
class Side:
    """One side of the comparison: ``old`` (the revision) or ``new`` (the working tree), and how to start it."""

    name: str
    label: str
    relaunch: Relaunch
    request: dict[str, Any] = field(default_factory=dict)
    """What every process of the side is asked besides its tests (the import check, for the old)."""


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


@dataclass
class Pairs:
    """What the pairs measured of one test so far: per pair, what each side's process wrote of it (in ``Child``)."""

    old: list[Child] = field(default_factory=list)
    new: list[Child] = field(default_factory=list)
    seconds: float = 0.0
    """Its share of the pairs' time: its own time in each pair (the slower side's) and its part of the processes'
    start."""
    stopped: str = ""
    """Why no more pairs were measured though an item was undecided (a budget, the limit); empty otherwise."""
    ended: tuple[str, Child] | None = None
    """The side whose process found the test absent or skipped, and that process: the rounds ended there."""
    failed: SideFailedError | None = None
    """A side that could not measure the test (it failed, crashed or hung there): its rounds ended there."""
    error: str = ""
    """Why the caller's ``moot`` ended its rounds with an error (the old side ran the working tree's code)."""


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


def _pair_dir(kind: str) -> tempfile.TemporaryDirectory[str]:
    """A pair's directory, named for this process so that the next run removes it if this one is killed."""
    return tempfile.TemporaryDirectory(prefix=f"{PREFIX}{os.getpid()}-{kind}-")


class Served:
    """One side's process serving a list of tests: started by ``launch``, read back by ``read``."""

    def __init__(
        self,
        side: Side,
        tests: Sequence[PairedTest],
        directory: Path,
        lockstep: dict[str, Any] | None,
        *,
        flops: bool = True,
    ) -> None:
        self.side = side
        self.directory = directory
        self.progress = directory / "progress"
        self.timing = directory / "timing.json"
        self.outs = {t.test_id: directory / f"test{k}.json" for k, t in enumerate(tests)}
        request: dict[str, Any] = {
            **side.request,
            "entry": True,
            "tests": [{**t.request, "test_id": t.test_id, "out": str(self.outs[t.test_id])} for t in tests],
            "flops": flops,
            "progress": str(self.progress),
            "timing": str(self.timing),
        }
        if lockstep is not None:
            request["lockstep"] = lockstep
        self.request = request
        self.proc: subprocess.Popen[str] | None = None
        self.began = 0.0
        self.wall_s = 0.0
        self.child: Child | None = None
        self.late = ""
        """The test it ran past the deadline, when it was stopped for that."""

    def launch(self) -> subprocess.Popen[str]:
        self.began = time.monotonic()
        self.proc = start(self.side.relaunch, self.request, self.directory)
        return self.proc

    def current(self) -> tuple[str, float]:
        """The test the process runs now (as it last said) and since when (monotonic), or ``("", 0)``."""
        try:
            text = self.progress.read_text(encoding="utf-8").strip()
            age = time.time() - self.progress.stat().st_mtime
        except OSError:
            return "", 0.0
        return text, time.monotonic() - age

    @property
    def completed(self) -> bool:
        """Whether the process reached its session's end (and wrote its timing): it served every test it could."""
        return self.timing.is_file()

    def end(self, problem: str = "") -> Child:
        assert self.proc is not None
        self.child = finish(self.proc, None, problem=problem)
        self.wall_s = time.monotonic() - self.began
        return self.child

    def read(self) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
        """What it wrote of each test it served, and each test's seconds in it."""
        data: dict[str, dict[str, Any]] = {}
        for test_id, out in self.outs.items():
            try:
                got = loads(out.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(got, dict):
                data[test_id] = got
        seconds: dict[str, float] = {}
        try:
            timing = loads(self.timing.read_text(encoding="utf-8"))
            seconds = {str(k): float(v) for k, v in timing.get("tests", {}).items()}
        except (OSError, ValueError, AttributeError, TypeError):
            pass
        return data, seconds


def _usable(data: Mapping[str, Any]) -> bool:
    """Whether what a process wrote of a test can be compared or ends its rounds: profiles, absent or skipped."""
    return isinstance(data.get("calls"), dict) or bool(data.get("absent")) or bool(data.get("skipped"))


def _wait(running: Sequence[Served], deadline_s: float | None, marks: Sequence[Path] = ()) -> None:
    """Wait until every process of ``running`` (started) ended, reading their output meanwhile. A process that
    ended without reaching its session's end (it crashed) ends its twin at once; a test that runs past
    ``deadline_s`` in a process stops every process (``Served.late`` names the test). ``marks``: the exited mark
    of each process, touched as it ends, for its twin's lock-step."""
    procs = [r.proc for r in running]
    assert all(p is not None for p in procs)
    stop = False
    while True:
        alive = [p for p in procs if p is not None and p.poll() is None]
        for k, r in enumerate(running):
            if r.proc is not None and r.proc.returncode is not None:
                if k < len(marks):
                    marks[k].touch()
                if not r.completed:
                    stop = True
        if deadline_s is not None and not stop:
            now = time.monotonic()
            for r in running:
                test, since = r.current()
                if r.proc is not None and r.proc.returncode is None and test and now - since > deadline_s:
                    r.late = test
                    stop = True
        if stop:
            for p in alive:
                p.kill()
        if not alive:
            return
        time.sleep(POLL_S)


def _launch_all(served: Sequence[Served]) -> None:
    try:
        for s in served:
            s.launch()
    except BaseException:
        for s in served:
            if s.proc is not None:
                s.proc.kill()
                s.proc.wait()
        raise


def _run(served: Sequence[Served], deadline_s: float | None, marks: Sequence[Path] = ()) -> None:
    """Start ``served`` together, wait for them (``_wait``) and read their ends; on an interrupt, kill them."""
    _launch_all(served)
    try:
        _wait(served, deadline_s, marks)
    except BaseException:
        for s in served:
            if s.proc is not None:
                s.proc.kill()
                s.proc.wait()
        raise
    for s in served:
        s.end(f"ran {s.late} past {deadline_s:.0f} s, so it was stopped (a test that hangs?)" if s.late else "")


@dataclass
class PairResult:
    """One pair over a list of tests: per test, both sides' ``Child`` (or the side that failed it), and how long
    each test took in it."""

    measured: dict[str, tuple[Child, Child]] = field(default_factory=dict)
    failed: dict[str, SideFailedError] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def _test_child(served: Served, data: dict[str, Any]) -> Child:
    """A process as one of its tests saw it: its command and status, what it wrote of the test."""
    child = served.child
    assert child is not None
    if data.get("failed"):
        return Child(child.command, child.returncode, None, str(data["failed"]), "the test failed there")
    return Child(child.command, child.returncode, data, child.output, child.problem)


def _settle(
    served: Sequence[Served], tests: Sequence[PairedTest], number: int, result: PairResult, spent: Spent | None
) -> list[PairedTest]:
    """Read a round of the pair's processes into ``result``; return the tests to measure again: those that a
    process ended early before reaching (it crashed or hung in an earlier test)."""
    read = {s.side.name: s.read() for s in served}
    broken = {s.side.name: s.late or s.current()[0] for s in served if not s.completed}
    """Per side whose process ended early: the test it ended in ("" where it ran none: it could not start)."""
    if spent is not None:
        for s in served:
            wrote, seconds = read[s.side.name]
            spent.processes += 1
            spent.processes_s += max(0.0, s.wall_s - sum(seconds.values()))
            for test_id, of_test in wrote.items():
                spent.add_test(seconds.get(test_id, 0.0), of_test.get("spent") or {})
    retry: list[PairedTest] = []
    for t in tests:
        got: dict[str, Child] = {}
        for s in served:
            data = read[s.side.name][0].get(t.test_id)
            if data is not None and (data.get("failed") or _usable(data)):
                got[s.side.name] = _test_child(s, data)
        failed = next((s for s in served if s.side.name in got and got[s.side.name].data is None), None)
        if failed is None:
            failed = next((s for s in served if broken.get(s.side.name) in (t.test_id, "")), None)
        if failed is not None and failed.side.name not in got:
            assert failed.child is not None
            what = "before running any test" if broken[failed.side.name] == "" else "while running the test"
            problem = failed.child.problem or f"ended (exit status {failed.child.returncode}) {what}"
            child = failed.child
            got[failed.side.name] = Child(child.command, child.returncode, None, child.output, problem)
        if failed is not None:
            result.failed[t.test_id] = SideFailedError(failed.side, got[failed.side.name], number)
        elif len(got) == len(served):
            result.measured[t.test_id] = (got["old"], got["new"])
            result.seconds[t.test_id] = max(read[name][1].get(t.test_id, 0.0) for name in read)
        else:
            retry.append(t)
    return retry


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
) -> PairResult:
    """Pair ``number`` (from 1) over ``tests``: a duet (both processes at once, trading ``cores`` pass by pass: by
    default two groups of the tests' threads of this process's cores, where it may place them) or one process
    after the other in the pair's order. Tests after one that crashed or hung a process run again in fresh
    processes."""
    result = PairResult()
    remaining = list(tests)
    if cores is None and duet:
        threads = max((int(t.request.get("settings", {}).get("threads", 1)) for t in tests), default=1)
        cores = pair_cores(threads)
    while remaining:
        with _pair_dir("duet" if duet else "pair") as tmp:
            base = Path(tmp)
            served = []
            for side, other in ((old, new), (new, old)):
                directory = base / side.name
                directory.mkdir()
                lockstep = None
                if duet:
                    lockstep = {"dir": str(base), "side": side.name, "other": other.name, "cores": list(cores or [])}
                    lockstep["new_calls"] = _sides_request(remaining)
                # what the untimed counting pass finds (flops, shapes) is the same in every pair: the first counts it
                served.append(Served(side, remaining, directory, lockstep, flops=number == 1))
            if duet:
                _run(served, deadline_s, [exited_mark(base, s.side.name) for s in served])
            else:
                first = {"old": 0, "new": 1}[order(number - 1)[0]]
                for s in (served[first], served[1 - first]):
                    _run([s], deadline_s)
            again = _settle(served, remaining, number, result, spent)
        if len(again) == len(remaining):  # nothing settled: never loop for ever
            for t in again:
                result.failed.setdefault(
                    t.test_id,
                    SideFailedError(old, Child((), -1, None, "", "no process measured it to the end"), number),
                )
            break
        remaining = again
    return result


def measure_pairs(
    old: Side,
    new: Side,
    tests: Sequence[PairedTest],
    *,
    duet: bool = False,
    deadline_s: float | None = None,
    run_budget_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    progress: Callable[[int, int, float], None] | None = None,
    spent: Spent | None = None,
) -> dict[str, Pairs]:
    """Measure the pairs of ``tests`` (each to its ``pairs``, then more while its ``undecided`` and its budget and
    ``max_pairs`` allow, within ``run_budget_s`` in all); per test what they measured. ``progress(pair, tests,
    seconds)`` is told of each pair as it ends."""
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
            if clock() - began + ahead > run_budget_s:
                for t in chosen:
                    got[t.test_id].stopped = f"the run's time budget of {run_budget_s:g} s"
                break
        started = clock()
        result = run_pair(old, new, chosen, number=number + 1, duet=duet, deadline_s=deadline_s, spent=spent)
        number += 1
        took = clock() - started
        own = sum(result.seconds.values())
        share = max(0.0, took - own) / len(chosen)  # the processes' start, shared by the tests they served
        for t in chosen:
            g = got[t.test_id]
            g.seconds += result.seconds.get(t.test_id, 0.0) + share
            if t.test_id in result.failed:
                g.failed = result.failed[t.test_id]
                done.add(t.test_id)
                continue
            pair = result.measured.get(t.test_id)
            if pair is None:
                continue
            ended = next(((name, c) for name, c in zip(("old", "new"), pair, strict=True) if c.ended), None)
            if ended is not None:
                g.ended = ended
                done.add(t.test_id)
                continue
            g.old.append(pair[0])
            g.new.append(pair[1])
            if "calls" not in t.request:  # the new side's calls, for the lock-step of the next pairs
                t.request["calls"] = sorted((pair[1].data or {}).get("calls", {}))
            if t.moot(g):
                done.add(t.test_id)
        if progress is not None:
            progress(number, len(chosen), took)
    return got


def _open(t: PairedTest, g: Pairs, done: set[str]) -> bool:
    """Whether test ``t`` takes the next pair: under its ``pairs``, or undecided within its limit and budget (else
    it is done, and ``g.stopped`` says what ended it while undecided)."""
    n = len(g.old)
    if n < t.pairs:
        return True
    if not t.undecided(g):
        done.add(t.test_id)
        return False
    if n >= t.max_pairs:
        g.stopped = f"the limit of {t.max_pairs} pairs"
    elif g.seconds + g.seconds / n > t.budget_s:
        g.stopped = f"the time budget of {t.budget_s:g} s per test"
    if g.stopped:
        done.add(t.test_id)
        return False
    return True
