"""Pass for pass in lock-step with a twin process: the duet schedule against a revision.

Owns ``lockstep_barrier``: before each of its passes a process marks the pass as reached in a directory the
two share and waits until its twin (the other side of the pair) has reached it too, so that both sides run
each pass at the same time and meet the same neighbours. A process stops waiting, and runs the rest of that
call alone, when its twin is done with the call, ran it alone, or has ended (the parent marks a process's end:
``exited_mark``), when both wait on different calls (a call that one side's test makes and the other's does
not: the side whose call the other will never reach gives up, told by the new side's calls, which the parent
knows), or, as a last resort, after ``LOCKSTEP_TIMEOUT_S``. Where the twins serve several tests in turn, each waits
with the position of its test in the order they share (``test``): a twin waiting in a later test than this one
has left this one behind (its side skipped it, lacks it, or failed it), so this side runs the call alone; a twin
in an earlier test will still come. A barrier that ran alone says from which pass
(``Barrier.alone_from``): the pair's ratio for that call is then not a duet's, and the check leaves it out.

Where the parent gave the pair its cores (``pair_cores``), the twins also trade them pass by pass: in even
passes the old side runs on the first group and the new side on the second, in odd passes the other way
round. A core that a neighbour outside the machine's view slows (a virtual machine's core shared on its host)
then slows both sides alike, and cancels in their ratio; kept on one core each, the pair's ratio would carry
it (BENCHMARKS.md measures both). Every thread of the process moves, torch's intra-op threads included.

Must not import torch or pytest.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

LOCKSTEP_TIMEOUT_S = 600.0
"""How long a pass waits for a twin that is alive, busy in the same call, and not at the pass (stuck)."""

POLL_S = 0.0002
"""How often a waiting process looks for its twin's mark."""

DONE = -1
"""The pass number a process gives when it has no passes left."""

SIDES = ("old", "new")
"""The twins, in the order that decides which group of cores each starts on."""


def call_tag(key: str, test_id: str = "") -> str:
    """A call's name in the marks (its test and key, hashed: keys are whatever the test names its calls)."""
    return hashlib.sha256(f"{test_id}::{key}".encode()).hexdigest()[:16]


def exited_mark(directory: Path, side: str) -> Path:
    """The file the parent creates in a duet's directory when the process of ``side`` has ended."""
    return directory / f"{side}.exited"


def pair_cores(threads: int, available: Sequence[int] | None = None) -> list[int]:
    """The cores a pair of twins trades pass by pass: two groups of ``threads`` cores each from this process's
    (``available``), or none where there are too few (the twins then run where the system puts them)."""
    if available is None:
        if not hasattr(os, "sched_getaffinity"):  # not Linux: no way to place a process on a core
            return []
        available = sorted(os.sched_getaffinity(0))
    return list(available[: 2 * threads]) if len(available) >= 2 * threads else []


def _place(cores: Sequence[int]) -> None:
    """Put every thread of this process on ``cores`` (an affinity set on the process moves only one thread)."""
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, set(cores))
        except OSError:  # a thread that ended meanwhile
            continue


class Barrier:
    """The lock-step of one ``fxprof`` call (``barrier(i)`` before pass ``i``, ``barrier(DONE)`` at the end)."""

    def __init__(
        self, spec: Mapping[str, Any], key: str, place: Callable[[Sequence[int]], None] = _place, test_id: str = ""
    ) -> None:
        self.directory = Path(str(spec["dir"]))
        self.me, self.other = str(spec["side"]), str(spec["other"])
        self.tag = call_tag(key, test_id)
        self.test = int(spec.get("test", 0))
        """The position of this call's test among those the twins serve in turn."""
        self.new_calls = frozenset(str(t) for t in spec.get("new_calls", ()))
        self.cores = [int(c) for c in spec.get("cores", [])]
        half = len(self.cores) // 2
        self.groups = (self.cores[:half], self.cores[half:]) if half else ()
        self.first = SIDES.index(self.me) if self.me in SIDES else 0
        self.place = place
        self.alone_from: int | None = None
        """The pass from which this call ran without its twin (None: in lock-step throughout)."""
        self.counted_until: int | None = None
        """The last pass whose times count (the profile says, once measured; None: every pass counts): a call that
        went alone only after it, in passes measured again for preemption, still ran its counted passes in
        lock-step."""

    @property
    def alone_in_counted(self) -> int | None:
        """``alone_from`` where the call went alone within the passes whose times count, else None."""
        if self.alone_from is None or (self.counted_until is not None and self.alone_from > self.counted_until):
            return None
        return self.alone_from

    def _mark(self, side: str, what: str) -> Path:
        return self.directory / f"{self.tag}.{side}.{what}"

    def _waiting(self, side: str) -> Path:
        return self.directory / f"{side}.waiting"

    def _give_way(self) -> bool:
        """Whether the twin waits on another call than this one and this side must give up its own: neither
        would ever reach the other's pass. The old side gives way when its call is not one the new side makes
        (the pull request removed it); the new side when the old one waits on a call they both make (it added
        this one)."""
        try:
            test, _, theirs = self._waiting(self.other).read_text().partition(" ")
        except OSError:
            return False
        if theirs in ("", self.tag):
            return False
        if test.isdigit() and int(test) != self.test:
            return int(test) > self.test  # a twin in a later test left this one behind; one in an earlier will come
        if self.me == "old":
            return self.tag not in self.new_calls
        return theirs in self.new_calls or not self.new_calls

    def __call__(self, i: int) -> None:
        if i == DONE:
            self._mark(self.me, "done").touch()
            if self.groups:
                self.place(self.cores)
            return
        met = self._meet(i, str(i))
        if self.groups:
            # each moves once both reached the pass, and neither times it before both moved: a twin that waited on
            # the core it ran the last pass on, and moved before the other arrived, would wait on the other's core
            self.place(self.groups[(i + self.first) % 2])
            if met:
                self._meet(i, f"{i}.placed")

    def stop(self, i: int, *, enough: bool) -> bool:
        """Whether to stop before pass ``i``, this side having the passes it needs (``enough``) or not. Twins in
        lock-step stop together, once both have them: a side that measures a pass again (it was preempted) does so
        beside its twin, as its other passes ran, not beside a twin gone on to its next test's capture."""
        if self.alone_from is not None:
            return enough
        self._mark(self.me, f"{i}.{'enough' if enough else 'more'}").touch()
        theirs = self._await(i, (f"{i}.enough", f"{i}.more"))
        return enough if theirs is None else enough and theirs == f"{i}.enough"

    def _meet(self, i: int, what: str) -> bool:
        """Mark ``what`` reached (in pass ``i``) and wait until the twin reached it too; False where it never will."""
        self._mark(self.me, what).touch()
        return self._await(i, (what,)) is not None

    def _await(self, i: int, theirs: Sequence[str]) -> str | None:
        """Which of the marks ``theirs`` the twin made first seen, waiting for one; None where the twin will make
        none (it is done, ended, runs the call alone or waits on another: this side then runs the call alone from
        pass ``i`` on)."""
        if self.alone_from is not None:
            return None
        waiting = self._waiting(self.me)
        waiting.write_text(f"{self.test} {self.tag}")
        deadline = time.monotonic() + LOCKSTEP_TIMEOUT_S
        try:
            while not self._mark(self.other, "alone").exists():
                made = next((what for what in theirs if self._mark(self.other, what).exists()), None)
                if made is not None:
                    return made
                gone = self._mark(self.other, "done").exists() or exited_mark(self.directory, self.other).exists()
                if gone or self._give_way() or time.monotonic() > deadline:
                    break
                time.sleep(POLL_S)
            self.alone_from = i
            self._mark(self.me, "alone").touch()
            return None
        finally:
            waiting.write_text("")


def lockstep_barrier(
    spec: Mapping[str, Any] | None, key: str, place: Callable[[Sequence[int]], None] = _place, test_id: str = ""
) -> Barrier | None:
    """The barrier of the ``fxprof`` call ``key`` of ``test_id`` in a duet described by ``spec`` (``dir``, ``side``,
    ``other``, ``cores``: the two groups of cores to trade, empty for none; ``test``: the test's position among
    those the twins serve), or None outside a duet. ``place`` puts this process on cores."""
    if not spec:
        return None
    return Barrier(spec, key, place, test_id)
