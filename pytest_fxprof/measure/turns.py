"""One measurement at a time per machine: measuring sections take turns through an inter-process lock.

Two processes that measure at once slow each other down: under ``pytest -n 2`` the gate would raise false
alarms, or call the run another machine and skip. Every measuring section (an in-process profile, its
confirmation, the fresh processes of a recording or a confirmation, the pairs against a revision) takes the
machine's turn first, across xdist workers and across pytest processes started at the same time; tests that
measure nothing go on meanwhile. A process that the turn-holder started to measure for it (a fresh process)
measures inside its parent's turn and takes none.

Owns ``Turns`` (the lock, re-entrant within a process, and the record of each turn taken) and ``Turn``.
The lock is ``filelock``'s: an OS lock on a file, released by the OS when its holder dies.

Must not import torch or pytest.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from filelock import BaseFileLock

OFF = "off"
"""The lock setting that measures without taking turns (each process on its own)."""


def default_lock_path() -> Path:
    """The machine's lock file: one per user in the temporary directory (``fxprof-measure-UID.lock``)."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"fxprof-measure-{uid}.lock"


class TurnJSON(TypedDict):
    what: str
    start: str
    end: str
    waited_s: float


@dataclass(frozen=True)
class Turn:
    """One measuring section: what it measured, when it started and ended (seconds since the epoch, after the
    wait) and how long it waited for another process's turn to end."""

    what: str
    start: float
    end: float
    waited_s: float

    def to_json(self) -> TurnJSON:
        start, end = _iso(self.start), _iso(self.end)
        return {"what": self.what, "start": start, "end": end, "waited_s": round(self.waited_s, 3)}


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class TurnError(Exception):
    """The lock file cannot be used; the message names it and the fix."""


class Turns:
    """The machine's measuring turns as seen from this process: the lock (``path``; None to measure without
    it) and, re-entrantly, the turn this process holds."""

    def __init__(
        self,
        path: Path | None,
        *,
        clock: Callable[[], float] = time.time,
        waiting_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._clock = clock
        self._waiting_clock = waiting_clock
        self._depth = 0
        self._lock: BaseFileLock | None = None

    @contextlib.contextmanager
    def turn(self, what: str, taken: list[Turn] | None = None) -> Iterator[None]:
        """Hold the machine's turn for the body (at once where this process already holds it), and append the
        ``Turn`` to ``taken`` when it ends, whether the body ended well or not."""
        waited = 0.0
        if self._depth == 0 and self.path is not None:
            began = self._waiting_clock()
            self._acquire(self.path)
            waited = self._waiting_clock() - began
        self._depth += 1
        start = self._clock()
        try:
            yield
        finally:
            end = self._clock()
            self._depth -= 1
            if self._depth == 0:
                self._release()
            if taken is not None:
                taken.append(Turn(what, start, end, waited))

    def _acquire(self, path: Path) -> None:
        from filelock import FileLock

        lock = FileLock(str(path), timeout=-1)
        try:
            lock.acquire()
        except OSError as exc:
            raise TurnError(
                f"cannot take the measuring lock {path} ({exc.strerror or exc}): make its directory writable, point "
                "--fxprof-lock (ini fxprof_lock) at a writable file, or measure without turns with --fxprof-lock=off"
            ) from None
        self._lock = lock

    def _release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()
