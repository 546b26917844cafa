"""Fresh processes that serve many tests: one process started, its tests measured one after the other.

Owns ``Served`` (one such process: its request, its files, reading back what it wrote of each test), ``run``
(starting processes together and waiting for them, stopping one whose test hangs), ``settle`` (what each test
came to across the processes of a round: measured, failed, or to be measured again after a process ended
early), ``serve`` (one process after another until every test is settled: a recording's) and ``Spent``
(where the time went). The pairs against a revision (``against.rounds``) run two at once.

A test that fails, crashes or hangs a process fails that test alone: a process that ended while running a test,
or ran one test past ``deadline_s`` (then it is stopped), charges it to that test, and the tests after it are
measured again in a fresh process.

Must not import torch or pytest.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from pytest_fxprof.measure.sampling import Child, Process, Relaunch, Start, finish, start
from pytest_fxprof.store.files import left_by_killed, loads

POLL_S = 0.05
"""How often the parent looks whether its processes ended, or a test hangs."""
WATCH_S = 30.0
"""How long a test runs in a process before its parent says so, and then how often: what a check is doing while one
test takes its time, named on the terminal."""

Watch = Callable[[str, float], None]
"""Told the test that a process has run for a while, and for how many seconds (``WATCH_S``)."""


@dataclass
class Spent:
    """Where a run's measuring time went, in seconds: fresh processes starting (interpreter, imports,
    collection: process seconds, both sides of a duet counted), capturing (and the checks and the flop count
    before the first pass), warm-up passes, measured passes, the tests' own code in fresh processes (building
    models and inputs, the imports they make), and waiting for the machine's measuring turn."""

    processes_s: float = 0.0
    capture_s: float = 0.0
    warmup_s: float = 0.0
    measuring_s: float = 0.0
    tests_s: float = 0.0
    waiting_s: float = 0.0
    processes: int = 0
    """How many fresh processes were started."""
    forked: int = 0
    """How many of them were forked from a parent that imported the run's libraries (``measure.forking``)."""
    shared: int = 0
    """How many tests a process served ran in it, not in a process of their own (``modes.isolated``)."""

    PHASES: ClassVar[tuple[str, ...]] = ("capture_s", "warmup_s", "measuring_s")
    """What a profile's measuring reports of itself (``measure.profiler.profile_module``)."""

    def add(self, other: Spent) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def add_test(self, seconds: float, phases: Mapping[str, float]) -> None:
        """One test's time in a fresh process: ``seconds`` in all, ``phases`` of it measuring."""
        measured = 0.0
        for name in self.PHASES:
            value = float(phases.get(name, 0.0))
            setattr(self, name, getattr(self, name) + value)
            measured += value
        self.tests_s += max(0.0, seconds - measured)

    def to_json(self) -> dict[str, float]:
        return {f.name: round(getattr(self, f.name), 3) for f in fields(self)}

    def line(self) -> str:
        """The summary's line: ``fresh processes starting 40 s (12), capture 9 s, warm-up 5 s, ...``."""
        parts = [
            f"fresh processes starting {self.processes_s:.0f} s ({self.processes}{self._forked()})"
            if self.processes
            else "",
            f"capture {self.capture_s:.0f} s",
            f"warm-up {self.warmup_s:.0f} s",
            f"measuring {self.measuring_s:.0f} s",
            f"the tests' own code {self.tests_s:.0f} s" if self.processes else "",
            f"waiting for the measuring turn {self.waiting_s:.0f} s",
        ]
        shared = (
            f"; {self.shared} test(s) ran in the process that served them, not in one of their own: it could not "
            "fork them safely (off Linux, or running threads that a fork does not carry: an operator run as the "
            "tests were collected)"
            if self.shared
            else ""
        )
        return ", ".join(p for p in parts if p) + shared

    def _forked(self) -> str:
        return f", {self.forked} of them forked" if self.forked else ""


def spent_from_json(raw: Mapping[str, Any]) -> Spent:
    return Spent(**{f.name: raw[f.name] for f in fields(Spent) if isinstance(raw.get(f.name), int | float)})


class Served:
    """One fresh process serving ``tests`` (each ``(test_id, what it is asked of the test)``), named ``name``
    (a side, or ``fresh``); ``extra``: what it is asked besides its tests; ``starter``: how it starts (a fresh
    interpreter, or forked: ``measure.forking``)."""

    def __init__(
        self,
        name: str,
        relaunch: Relaunch,
        tests: Sequence[tuple[str, Mapping[str, Any]]],
        directory: Path,
        extra: Mapping[str, Any],
        *,
        starter: Start = start,
    ) -> None:
        self.name = name
        self.relaunch = relaunch
        self.starter = starter
        self.directory = directory
        self.progress = directory / "progress"
        self.timing = directory / "timing.json"
        self.outs = {test_id: directory / f"test{k}.json" for k, (test_id, _) in enumerate(tests)}
        self.request: dict[str, Any] = {
            **extra,
            "tests": [{**asked, "test_id": test_id, "out": str(self.outs[test_id])} for test_id, asked in tests],
            "progress": str(self.progress),
            "timing": str(self.timing),
        }
        self.proc: Process | None = None
        self.began = 0.0
        self.wall_s = 0.0
        self.child: Child | None = None
        self.late = ""
        """The test it ran past the deadline, when it was stopped for that."""
        self.shared: dict[str, str] = {}
        """The tests it ran in itself, not each in a process of its own, and why (``modes.isolated``)."""
        self.out_of_time = False
        """Whether it was stopped because the time it was given ran out (``run``'s ``until``)."""
        self.stopped = False
        """Whether it was stopped (for its own lateness, or because another process of the round crashed or was
        late): what it was running then is not its own failure, unless it was late."""

    def launch(self) -> None:
        self.began = time.monotonic()
        self.proc = self.starter(self.relaunch, self.request, self.directory)

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

    def end(self, problem: str = "") -> None:
        assert self.proc is not None
        self.child = finish(self.proc, None, problem=problem)
        self.wall_s = time.monotonic() - self.began

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
            self.shared = {str(k): str(v) for k, v in timing.get("shared", {}).items()}
        except (OSError, ValueError, AttributeError, TypeError):
            pass
        return data, seconds


def usable(data: Mapping[str, Any]) -> bool:
    """Whether what a process wrote of a test can be used or ends its measuring: profiles, absent or skipped."""
    return isinstance(data.get("calls"), dict) or bool(data.get("absent")) or bool(data.get("skipped"))


def _wait(
    running: Sequence[Served],
    deadline_s: float | None,
    marks: Sequence[Path] = (),
    watch: Watch | None = None,
    until: float | None = None,
) -> None:
    """Wait until every process of ``running`` (started) ended, reading their output meanwhile. A process that
    ended without reaching its session's end (it crashed) ends the others at once; a test that runs past
    ``deadline_s`` in a process stops every process (``Served.late`` names the test), as does reaching ``until``
    (``time.monotonic``; ``Served.out_of_time``). ``marks``: the exited mark of each process, touched as it ends,
    for its twin's lock-step; ``watch``: told of a test that runs long."""
    stop = False
    told: dict[str, float] = {}
    while True:
        if until is not None and not stop and time.monotonic() > until:
            stop = True
            for r in running:
                r.out_of_time = r.proc is not None and r.proc.poll() is None
        if watch is not None:
            _watch(running, told, watch)
        alive = [r.proc for r in running if r.proc is not None and r.proc.poll() is None]
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
            for r in running:
                if r.proc is not None and r.proc.poll() is None:
                    r.stopped = True
                    r.proc.kill()
        if not alive:
            return
        time.sleep(POLL_S)


def _watch(running: Sequence[Served], told: dict[str, float], watch: Watch) -> None:
    """Tell ``watch`` of the longest-running test of ``running`` every ``WATCH_S`` it runs (``told``: when each
    test was last told of, in its seconds)."""
    now = time.monotonic()
    tests = [r.current() for r in running if r.proc is not None and r.proc.returncode is None]
    tests = [(test, now - since) for test, since in tests if test]
    if not tests:
        return
    test, seconds = max(tests, key=lambda t: t[1])
    if seconds - told.get(test, 0.0) >= WATCH_S:
        told[test] = seconds
        watch(test, seconds)


def run(
    served: Sequence[Served],
    deadline_s: float | None,
    marks: Sequence[Path] = (),
    watch: Watch | None = None,
    until: float | None = None,
) -> None:
    """Start ``served`` together, wait for them (``_wait``) and read their ends; on an interrupt, kill them."""
    try:
        for s in served:
            s.launch()
        _wait(served, deadline_s, marks, watch, until)
    except BaseException:
        for s in served:
            if s.proc is not None:
                s.proc.kill()
                s.proc.wait()
        raise
    for s in served:
        s.end(f"ran {s.late} past {deadline_s:.0f} s, so it was stopped (a test that hangs?)" if s.late else "")


@dataclass
class Settled:
    """What the processes of one round came to, per test: each process's ``Child`` as the test saw it (all of
    them: the test is measured), or the process that failed it, or nothing yet (``retry``)."""

    measured: dict[str, dict[str, Child]] = field(default_factory=dict)
    failed: dict[str, tuple[str, Child]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    """Each measured test's seconds in the slowest of its processes."""
    retry: list[str] = field(default_factory=list)


def _test_child(served: Served, data: Mapping[str, Any]) -> Child:
    """A process as one of its tests saw it: its command and status, what it wrote of the test."""
    child = served.child
    assert child is not None
    if data.get("failed"):
        return Child(child.command, child.returncode, None, str(data["failed"]), "the test failed there")
    return Child(child.command, child.returncode, dict(data), child.output, child.problem)


def settle(served: Sequence[Served], test_ids: Sequence[str], spent: Spent | None = None) -> Settled:
    """Read a round of processes that served ``test_ids`` (and add their time to ``spent``). A test that a
    process ended early before reaching (it crashed or hung in an earlier test) is to be measured again."""
    read = {s.name: s.read() for s in served}
    broken = {s.name: s.late or s.current()[0] for s in served if not s.completed and (s.late or not s.stopped)}
    """Per process that ended early of itself (or ran a test past the deadline): the test it ended in ("" where it
    ran none: it could not start). One stopped because another process of the round ended early charges nothing:
    the test it was running is measured again."""
    if spent is not None:
        for s in served:
            wrote, seconds = read[s.name]
            spent.processes += 1
            spent.shared += len(s.shared)
            spent.processes_s += max(0.0, s.wall_s - sum(seconds.values()))
            for test_id, of_test in wrote.items():
                spent.add_test(seconds.get(test_id, 0.0), of_test.get("spent") or {})
    out = Settled()
    for test_id in test_ids:
        got: dict[str, Child] = {}
        for s in served:
            data = read[s.name][0].get(test_id)
            if data is not None and (data.get("failed") or usable(data)):
                got[s.name] = _test_child(s, data)
        failed = next((s for s in served if s.name in got and got[s.name].data is None), None)
        if failed is None:
            failed = next((s for s in served if broken.get(s.name) in (test_id, "")), None)
        if failed is not None and failed.name not in got:
            assert failed.child is not None
            child = failed.child
            what = "before running any test" if broken[failed.name] == "" else "while running the test"
            problem = child.problem or f"ended (exit status {child.returncode}) {what}"
            got[failed.name] = Child(child.command, child.returncode, None, child.output, problem)
        if failed is not None:
            out.failed[test_id] = (failed.name, got[failed.name])
        elif len(got) == len(served):
            out.measured[test_id] = got
            out.seconds[test_id] = max(read[name][1].get(test_id, 0.0) for name in read)
        else:
            out.retry.append(test_id)
    return out


def serving_dir(prefix: str, kind: str) -> tempfile.TemporaryDirectory[str]:
    """A round's directory, named ``prefix``, this process and ``kind``. The directories of this name that a run
    killed before it could remove them left behind (their process gone) are removed first: a recording stopped
    by a signal leaves its fresh processes' directory, which no end of the run removes."""
    own = re.compile(rf"^{re.escape(prefix)}(?P<pid>\d+)-{re.escape(kind)}-")
    for path in left_by_killed(Path(tempfile.gettempdir()), f"{prefix}*", own):
        shutil.rmtree(path, ignore_errors=True)
    return tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-{kind}-")


def serve(
    relaunch: Relaunch,
    tests: Sequence[tuple[str, Mapping[str, Any]]],
    *,
    extra: Mapping[str, Any],
    deadline_s: float | None = None,
    spent: Spent | None = None,
    prefix: str = "fxprof-",
) -> Settled:
    """One fresh process measures ``tests`` in turn, then another the tests after one that crashed or hung it,
    until every test is measured or failed (``Settled.measured`` holds one ``Child`` per test, under ``fresh``)."""
    out = Settled()
    asked = dict(tests)
    remaining = [test_id for test_id, _ in tests]
    while remaining:
        with serving_dir(prefix, "fresh") as tmp:
            served = Served("fresh", relaunch, [(t, asked[t]) for t in remaining], Path(tmp), extra)
            run([served], deadline_s)
            got = settle([served], remaining, spent)
        out.measured.update(got.measured)
        out.failed.update(got.failed)
        out.seconds.update(got.seconds)
        if len(got.retry) == len(remaining):  # nothing settled: never loop for ever
            for test_id in got.retry:
                out.failed[test_id] = ("fresh", Child((), -1, None, "", "no process measured it to the end"))
            break
        remaining = got.retry
    return out
