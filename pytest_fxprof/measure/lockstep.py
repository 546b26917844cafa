"""Pass for pass in lock-step with a twin process: the duet schedule against a revision.

Owns ``lockstep_barrier``: before each of its passes a process marks the pass as reached in a directory the
two share and waits until its twin (the other side of the pair) has reached it too, so that both sides run
each pass at the same time and meet the same neighbours. A twin that finished (or died) releases the other:
it marks itself done, and a wait gives up after ``LOCKSTEP_TIMEOUT_S`` and runs on alone.

Where the parent gave the pair its cores (``pair_cores``), the twins also trade them pass by pass: in even
passes the old side runs on the first group and the new side on the second, in odd passes the other way
round. A core that a neighbour outside the machine's view slows (a virtual machine's core shared on its host)
then slows both sides alike, and cancels in their ratio; kept on one core each, the pair's ratio would carry
it (BENCHMARKS.md measures both).

Must not import torch or pytest.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

LOCKSTEP_TIMEOUT_S = 30.0
"""How long a pass waits for its twin before the process goes on alone (the twin is gone or stuck)."""

POLL_S = 0.0002
"""How often a waiting process looks for its twin's mark."""

DONE = -1
"""The pass number a process gives when it has no passes left."""

SIDES = ("old", "new")
"""The twins, in the order that decides which group of cores each starts on."""


def pair_cores(threads: int, available: Sequence[int] | None = None) -> list[int]:
    """The cores a pair of twins trades pass by pass: two groups of ``threads`` cores each from this process's
    (``available``), or none where there are too few (the twins then run where the system puts them)."""
    if available is None:
        if not hasattr(os, "sched_getaffinity"):  # not Linux: no way to place a process on a core
            return []
        available = sorted(os.sched_getaffinity(0))
    return list(available[: 2 * threads]) if len(available) >= 2 * threads else []


def _place(cores: Sequence[int]) -> None:
    os.sched_setaffinity(0, set(cores))


def lockstep_barrier(
    spec: Mapping[str, Any] | None, key: str, place: Callable[[Sequence[int]], None] = _place
) -> Callable[[int], None] | None:
    """A barrier for the passes of the ``fxprof`` call ``key`` (``barrier(i)`` before pass ``i``,
    ``barrier(DONE)`` at the end), or None without a ``spec`` (``dir``, ``side``, ``other``, and ``cores``:
    the two groups of cores to trade, empty for none). ``place`` puts this process on cores."""
    if not spec:
        return None
    directory = Path(str(spec["dir"]))
    me, other = str(spec["side"]), str(spec["other"])
    tag = hashlib.sha256(key.encode()).hexdigest()[:16]
    cores = [int(c) for c in spec.get("cores", [])]
    half = len(cores) // 2
    groups = (cores[:half], cores[half:]) if half else ()
    first = SIDES.index(me) if me in SIDES else 0
    alone = False

    def mark(side: str, what: str) -> Path:
        return directory / f"{tag}.{side}.{what}"

    def barrier(i: int) -> None:
        nonlocal alone
        if i == DONE:
            mark(me, "done").touch()
            if groups:
                place(cores)
            return
        if groups:
            place(groups[(i + first) % 2])
        mark(me, str(i)).touch()
        if alone:
            return
        deadline = time.monotonic() + LOCKSTEP_TIMEOUT_S
        while not mark(other, str(i)).exists():
            if mark(other, "done").exists() or time.monotonic() > deadline:
                alone = True
                return
            time.sleep(POLL_S)

    return barrier
