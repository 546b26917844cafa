"""The rounds of an A/B check: old and new sides measured in pairs of fresh processes.

Owns ``Side`` (how to start one side's process) and ``measure_pairs`` (the schedule). The caller measures the
pairs in the machine's measuring turn (``measure.turns``), so that one test measures at a time on a machine.

A pair is a duet (both processes at once, in lock-step: ``measure.lockstep``) or one process after the other.
One after the other, the order is balanced: pair 1 runs old then new, pair 2 new then old, and so on
(ABBA...), so that a trend within a pair (the machine warming up, a neighbour arriving) favours neither side.
The first ``pairs`` pairs are always measured; then the caller's ``undecided`` says whether an item that gates
is still open, and pairs are added while it is, up to ``max_pairs``, as long as the per-test ``budget_s``
allows another (at its measured cost). A pair in which a side reports the test absent or skipped ends the
rounds, as does the caller's ``moot`` (nothing left that pairs could compare). A process that runs past
``deadline_s`` is stopped: a test that hangs must not hold the machine's lock for ever.

Must not import torch or pytest.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_fxprof.against.revision import PREFIX
from pytest_fxprof.measure.lockstep import call_tag, exited_mark, pair_cores
from pytest_fxprof.measure.sampling import Child, Relaunch, finish, start

POLL_S = 0.05
"""How often the parent of a duet looks whether its processes ended."""


@dataclass(frozen=True)
class Side:
    """One side of the comparison: ``old`` (the revision) or ``new`` (the working tree), and how to start it."""

    name: str
    label: str
    relaunch: Relaunch
    request: dict[str, Any] = field(default_factory=dict)
    """What every process of the side is asked besides the test's settings (the import check, for the old)."""


@dataclass
class Pairs:
    """What the pairs measured so far: per pair, what each side's process wrote (in ``Child``)."""

    old: list[Child] = field(default_factory=list)
    new: list[Child] = field(default_factory=list)
    seconds: float = 0.0
    stopped: str = ""
    """Why no more pairs were measured though an item was undecided (the budget, the limit); empty otherwise."""
    ended: tuple[str, Child] | None = None
    """The side whose process found the test absent or skipped, and that process: the rounds ended there."""


class SideFailedError(Exception):
    """A side's process failed; carries the process and the pair it belonged to."""

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


def _usable(child: Child) -> bool:
    """Whether a process ended with something to read: profiles, or the test absent or skipped."""
    return child.ended or (child.returncode == 0 and child.data is not None)


def run_one(
    side: Side, test_id: str, request: dict[str, Any], *, number: int, deadline_s: float | None = None
) -> Child:
    with _pair_dir("pair") as tmp:
        proc, out = start(side.relaunch, test_id, {**side.request, **request}, Path(tmp))
        child = finish(proc, out, deadline_s)
    if not _usable(child):
        raise SideFailedError(side, child, number)
    return child


def run_duet(
    old: Side,
    new: Side,
    test_id: str,
    request: dict[str, Any],
    *,
    number: int,
    deadline_s: float | None = None,
    cores: Sequence[int] | None = None,
) -> tuple[Child, Child]:
    """One pair as a duet: both processes at once, their passes in lock-step, trading ``cores`` pass by pass
    (by default two groups of the test's threads of this process's cores, where it may place them:
    ``measure.lockstep``; none: each where the system puts it). A process that fails ends its twin at once; the
    side that failed first is the one reported."""
    if cores is None:
        cores = pair_cores(int(request.get("settings", {}).get("threads", 1)))
    sides = (old, new)
    with _pair_dir("duet") as tmp:
        base = Path(tmp)
        started: list[tuple[subprocess.Popen[str], Path]] = []
        try:
            for side, other in ((old, new), (new, old)):
                directory = base / side.name
                directory.mkdir()
                lockstep = {"dir": str(base), "side": side.name, "other": other.name, "cores": list(cores)}
                lockstep["new_calls"] = [call_tag(k) for k in request.get("calls", [])]
                started.append(
                    start(side.relaunch, test_id, {**side.request, **request, "lockstep": lockstep}, directory)
                )
            procs = [proc for proc, _ in started]
            first, late = _wait_both(procs, [exited_mark(base, s.name) for s in sides], deadline_s)
            problem = f"did not end within {deadline_s:.0f} s, so it was stopped (a test that hangs?)" if late else ""
            children = [finish(proc, out, problem=problem) for proc, out in started]
        except BaseException:
            for proc, _ in started:
                proc.kill()
                proc.wait()
            raise
    if first is not None and not children[first].ended:
        raise SideFailedError(sides[first], children[first], number)
    for side, child in zip(sides, children, strict=True):
        if first is None and not _usable(child):
            raise SideFailedError(side, child, number)
    return children[0], children[1]


def _wait_both(
    procs: Sequence[subprocess.Popen[str]], exited: Sequence[Path], deadline_s: float | None
) -> tuple[int | None, bool]:
    """Wait until both processes ended (``start`` reads their output meanwhile, so that neither blocks on a full
    pipe), and mark each one's end for its twin's lock-step. The first to fail on its own ends the other at once (which
    would otherwise wait for its passes' partner); both are stopped at the deadline. Returns the index of the one
    that failed first (None if neither did) and whether the deadline stopped them."""
    first: int | None = None
    late = False
    deadline = None if deadline_s is None else time.monotonic() + deadline_s
    while [p.poll() for p in procs].count(None):  # each polled every time: an ended twin is marked at once
        for k, p in enumerate(procs):
            if p.returncode is not None:
                exited[k].touch()
                if p.returncode != 0 and first is None and not late:
                    first = k
        if first is None and deadline is not None and time.monotonic() > deadline:
            late = True  # what the stopped processes' statuses say is the stop's, not a failure of their own
        if first is not None or late:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(POLL_S)
    if first is None:
        first = next((k for k, p in enumerate(procs) if p.returncode != 0 and not late), None)
    return first, late


def measure_pairs(
    old: Side,
    new: Side,
    test_id: str,
    request: dict[str, Any],
    *,
    pairs: int,
    max_pairs: int,
    budget_s: float,
    undecided: Callable[[Pairs], bool],
    moot: Callable[[Pairs], bool] = lambda got: False,
    duet: bool = False,
    deadline_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Pairs:
    """Measure ``pairs`` pairs, then more while ``undecided`` and the budget and ``max_pairs`` allow.

    A side whose process fails raises ``SideFailedError`` at once; one that reports the test absent or skipped
    ends the rounds (``Pairs.ended``), as does ``moot``.
    """
    sides = {"old": old, "new": new}
    got = Pairs()
    began = clock()
    p = 0
    while True:
        if p >= pairs:
            open_items = undecided(got)
            if not open_items:
                break
            spent = clock() - began
            limit = f"the limit of {max_pairs} pairs" if p >= max_pairs else ""
            if not limit and spent + spent / p > budget_s:
                limit = f"the time budget of {budget_s:g} s per test"
            if limit:
                got.stopped = limit
                break
        if duet:
            pair = run_duet(old, new, test_id, request, number=p + 1, deadline_s=deadline_s)
            measured = dict(zip(("old", "new"), pair, strict=True))
        else:
            measured = {
                name: run_one(sides[name], test_id, request, number=p + 1, deadline_s=deadline_s) for name in order(p)
            }
        p += 1
        ended = next(((name, child) for name, child in measured.items() if child.ended), None)
        if ended is not None:
            got.ended = ended
            break
        got.old.append(measured["old"])
        got.new.append(measured["new"])
        if moot(got):
            break
    got.seconds = clock() - began
    return got
