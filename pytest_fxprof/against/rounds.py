"""The rounds of an A/B check: old and new sides measured in alternating pairs of fresh processes.

Owns ``Side`` (how to start one side's process), ``measure_pairs`` (the schedule) and ``machine_lock`` (one
test measures at a time on a machine, whatever runs beside it).

The schedule is balanced: pair 1 runs old then new, pair 2 new then old, and so on (ABBA...), so that a
trend within a pair (the machine warming up, a neighbour arriving) favours neither side. After ``pairs`` pairs
the caller's ``undecided`` says whether an item that gates is still open; then pairs are added, up to
``max_pairs``, while the per-test ``budget_s`` allows another (at its measured cost).

Must not import torch or pytest.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_fxprof.measure.lockstep import pair_cores
from pytest_fxprof.measure.sampling import Child, Relaunch, finish, start


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


class SideFailedError(Exception):
    """A side's process failed; carries the process, so the caller can tell a test absent at the revision."""

    def __init__(self, side: Side, child: Child, number: int) -> None:
        super().__init__(side.name)
        self.side = side
        self.child = child
        self.number = number


def order(pair: int) -> tuple[str, str]:
    """Which side runs first in pair ``pair`` (from 0): old, new; new, old; old, new; ..."""
    return ("old", "new") if pair % 2 == 0 else ("new", "old")


def run_one(side: Side, test_id: str, request: dict[str, Any], number: int) -> Child:
    with tempfile.TemporaryDirectory(prefix="fxprof-pair-") as tmp:
        proc, out = start(side.relaunch, test_id, {**side.request, **request}, Path(tmp))
        child = finish(proc, out)
    if child.returncode != 0 or child.data is None:
        raise SideFailedError(side, child, number)
    return child


def run_duet(old: Side, new: Side, test_id: str, request: dict[str, Any], number: int) -> tuple[Child, Child]:
    """One pair as a duet: both processes at once, their passes in lock-step, trading their cores pass by pass
    where this process may place them (``measure.lockstep``)."""
    cores = pair_cores(int(request.get("settings", {}).get("threads", 1)))
    with tempfile.TemporaryDirectory(prefix="fxprof-duet-") as tmp:
        base = Path(tmp)
        started: list[tuple[subprocess.Popen[str], Path]] = []
        try:
            for side, other in ((old, new), (new, old)):
                directory = base / side.name
                directory.mkdir()
                lockstep = {"dir": str(base), "side": side.name, "other": other.name, "cores": cores}
                started.append(
                    start(side.relaunch, test_id, {**side.request, **request, "lockstep": lockstep}, directory)
                )
            _first_failure_stops_both([proc for proc, _ in started])
            children = [finish(proc, out) for proc, out in started]
        except BaseException:
            for proc, _ in started:
                proc.kill()
                proc.wait()
            raise
    for side, child in zip((old, new), children, strict=True):
        if child.returncode != 0 or child.data is None:
            raise SideFailedError(side, child, number)
    return children[0], children[1]


def _first_failure_stops_both(procs: Sequence[subprocess.Popen[str]], poll_s: float = 0.05) -> None:
    """Wait until both processes ended; one that fails ends its twin at once (which would otherwise wait for
    its passes' partner until the lock-step gives up). Their output is read meanwhile, so that neither blocks on
    a full pipe."""
    readers = [threading.Thread(target=_drain, args=(p,), daemon=True) for p in procs]
    for r in readers:
        r.start()
    while any(p.poll() is None for p in procs):
        if any(p.returncode not in (None, 0) for p in procs):
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(poll_s)
    for r in readers:
        r.join()


def _drain(proc: subprocess.Popen[str]) -> None:
    """Read a process's whole output into ``proc.drained`` (``finish`` returns it)."""
    assert proc.stdout is not None
    proc.drained = proc.stdout.read()  # type: ignore[attr-defined]


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
    duet: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> Pairs:
    """Measure ``pairs`` pairs, then more while ``undecided`` and the budget and ``max_pairs`` allow.

    The budget bounds the added pairs, never the first two (fewer than two pairs have no spread). A side whose
    process fails raises ``SideFailedError`` at once.
    """
    sides = {"old": old, "new": new}
    got = Pairs()
    began = clock()
    p = 0
    while True:
        if p >= 2:
            spent = clock() - began
            open_items = undecided(got)
            if p >= pairs and not open_items:
                break
            limit = f"the limit of {max_pairs} pairs" if p >= max_pairs else ""
            if not limit and spent + spent / p > budget_s:
                limit = f"the time budget of {budget_s:g} s per test"
            if limit:
                got.stopped = limit if open_items else ""
                break
        if duet:
            old_child, new_child = run_duet(old, new, test_id, request, p + 1)
            got.old.append(old_child)
            got.new.append(new_child)
        else:
            for name in order(p):
                child = run_one(sides[name], test_id, request, p + 1)
                (got.old if name == "old" else got.new).append(child)
        p += 1
    got.seconds = clock() - began
    return got


@contextlib.contextmanager
def machine_lock(timeout_s: float | None = None) -> Iterator[None]:
    """Hold the machine's A/B lock: one test's pairs at a time, across xdist workers and concurrent runs, so
    that no two tests' processes slow each other down."""
    from filelock import FileLock

    path = Path(tempfile.gettempdir()) / f"fxprof-against-{os.getuid() if hasattr(os, 'getuid') else 0}.lock"
    with FileLock(str(path), timeout=-1 if timeout_s is None else timeout_s):
        yield


def first_failure(children: Sequence[Child]) -> Child | None:
    return next((c for c in children if c.returncode != 0), None)
