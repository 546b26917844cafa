"""``--fxprof-update``: ``UpdateMode`` (the run: refused where the baselines cannot be written; every test's fresh
processes measured before the tests run) and ``UpdateCalls`` (a test's calls recorded as its baseline)."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fxprof.against.recorded import working_revision
from pytest_fxprof.judge.weak import weak_baseline
from pytest_fxprof.measure.sampling import BUSY_RETRIES, busy, sample
from pytest_fxprof.measure.serving import serve
from pytest_fxprof.measure.turns import TurnError
from pytest_fxprof.modes.base import CallPlan, Calls, relaunch_of
from pytest_fxprof.modes.gate import Gate, ahead_of_tests, fixture_tests, say
from pytest_fxprof.records.disturbance import BUSY_LINE, Disturbance
from pytest_fxprof.records.measurement import BaselineEntry
from pytest_fxprof.records.verdicts import Status
from pytest_fxprof.session.reactions import Outcome
from pytest_fxprof.settings import Mode, Settings
from pytest_fxprof.store import history
from pytest_fxprof.store.baseline import BaselineError, BaselineFile, NewerSchemaError
from pytest_fxprof.store.files import unwritable

if TYPE_CHECKING:
    from pytest_fxprof.measure.sampling import Child, Relaunch
    from pytest_fxprof.measure.turns import Turn
    from pytest_fxprof.session.run import RunState
    from pytest_fxprof.views.report import ProfileReportJSON


class UpdateCalls(Calls):
    """Each call measured here and in ``processes - 1`` fresh processes when the call phase passed; the entries
    are queued for writing only once the whole test (teardown included) passed."""

    mode = Mode.UPDATE
    takes_turns = True

    def __init__(
        self, test_id: str, settings: Settings, *, ahead: Sequence[Sequence[Child]] = (), **kwargs: Any
    ) -> None:
        super().__init__(test_id, settings, **kwargs)
        self.ahead = ahead
        """Per fresh process, its tries, measured before the tests ran by processes that served them all."""
        self.pending: dict[str, BaselineEntry] | None = None
        self.busy_recorded: dict[str, list[Disturbance]] = {}
        """Per call, the disturbance of each process that stayed busy (this one's first)."""

    def plan(self, key: str) -> CallPlan:
        return CallPlan(fingerprinted=True)

    def finish(self, run: RunState, passed: bool) -> Outcome:
        """Profile the extra processes and hold the entries until ``settle`` knows every phase passed."""
        if not self.results or not passed:
            return Outcome()
        extra: dict[str, list[Any]] = {key: [] for key in self.results}
        seen: dict[str, list[Disturbance]] = {}
        count = self.settings.processes - 1
        if count > 0 and self.relaunch is not None:
            expected = {key: [n.info.key for n in r.nodes] for key, r in self.results.items()}
            # measured ahead, they need no turn; what is left to measure takes one
            needed = len(self.ahead) < count
            with self.turns.turn("fresh processes", self.taken.setdefault("", [])) if needed else nullcontext():
                extra = sample(
                    self.relaunch,
                    self.test_id,
                    self.settings.to_json(),
                    count,
                    expected,
                    retries=BUSY_RETRIES,
                    disturbances=seen,
                    ahead=self.ahead,
                )
        self.pending = {key: r.entry(self.settings.tolerances(), tuple(extra[key])) for key, r in self.results.items()}
        return Outcome(warnings=self._recording_notes(seen))

    def _recording_notes(self, seen: dict[str, list[Disturbance]]) -> list[str]:
        """A warning per call whose processes stayed busy (kept, and noted in ``busy_recorded``), and per entry
        whose bands came out too wide to catch a large node's slowdown (``weak_baseline``)."""
        out = []
        for key, result in self.results.items():
            busy = [d for d in (result.disturbance, *seen.get(key, [])) if d.busy]
            processes = 1 + len(seen.get(key, []))
            if busy:
                self.busy_recorded[key] = busy
                worst = max(busy, key=lambda d: d.off_cpu_mean or 0.0)
                out.append(
                    f"fxprof: {self.label(key)}: {len(busy)} of {processes} processes were {BUSY_LINE} though each "
                    f"was measured up to {BUSY_RETRIES} more times, and were kept (the worst: {worst.figures})"
                )
            if self.pending is not None and key in self.pending:
                weak = weak_baseline(self.label(key), self.pending[key], self.settings.policy())
                if weak:
                    out.append(f"fxprof: {weak}")
        return out

    def extend_report(self, key: str, report: ProfileReportJSON) -> None:
        if key in self.busy_recorded:  # how many of its processes stayed busy, as its warning says
            report["busy_processes"] = len(self.busy_recorded[key])

    def settle(self, run: RunState, passed: bool) -> None:
        """Queue the recorded baseline, or say why not."""
        super().settle(run, passed)
        if not self.results:
            return
        if self.pending is None or not passed:
            run.notes.append(f"{self.test_id}: not recorded, the test did not pass")
            for key, result in self.results.items():
                self.keep(run, self.record_of(key, Status.NOT_RECORDED, result))
            return
        try:
            previous = self.store.load(self.test_id)
        except NewerSchemaError:  # write nothing over a file that a newer pytest-fxprof wrote, and fail the run
            run.errors.append(f"{self.test_id}: not recorded, its baseline has a newer schema; upgrade pytest-fxprof")
            return
        except BaselineError as exc:
            run.notes.append(f"{self.test_id}: replacing an unreadable baseline ({exc.problem})")
            previous = None
        if previous is not None:
            dropped = sorted(set(previous.entries) - set(self.pending))
            if dropped:
                run.dropped[self.test_id] = dropped
        run.queue_write(self.test_id, self._with_history(run, previous, self.pending))
        for key, result in self.results.items():
            self.keep(run, self.record_of(key, Status.RECORDED, result))

    def _with_history(
        self, run: RunState, previous: BaselineFile | None, pending: dict[str, BaselineEntry]
    ) -> dict[str, BaselineEntry]:
        """The new entries, dated now, each keeping the earlier recordings of its previous entry where they are
        comparable (``store.history.carry``); a note says where a history restarted or set recordings aside, and why."""
        date, keep = history.now(), self.settings.history
        out = {}
        for key, entry in pending.items():
            before = previous.entries.get(key) if previous is not None else None
            out[key], said = history.carry(before, replace(entry, revision=run.revision), keep, date)
            if said:
                run.notes.append(f"{self.label(key)}: {said}")
        return out


class UpdateMode(Gate):
    """Each test's calls recorded as its baseline. Refused before anything is measured
    where the baselines' directory cannot be written. Before the tests run, fresh processes that serve every
    selected test that uses the fixture measure them (each test's ``processes - 1``, the least disturbed of up to
    ``BUSY_RETRIES`` more where one was busy); each test then runs here, is measured here too, and takes its
    fresh processes' runs as it ends. An xdist worker, which does not know its tests ahead, starts each test's
    fresh processes as the test ends."""

    mode = Mode.UPDATE
    calls_class = UpdateCalls

    def __init__(self, config: pytest.Config, run: RunState) -> None:
        super().__init__(config, run)
        self.ahead: dict[str, list[list[Child]]] = {}
        """Per test, per fresh process, its tries, measured before the tests ran."""
        self.ahead_turns: list[Turn] = []
        problem = None if self.worker else unwritable(run.store.directory)
        if problem:
            raise pytest.UsageError(
                f"--fxprof-update cannot write baselines to {run.store.directory}: {problem}. Make it writable, or "
                "record them elsewhere with --fxprof-baseline-dir (or the fxprof_baseline_dir ini key)"
            )
        run.revision, why = working_revision(config.rootpath, run.store.directory)
        if why and not self.worker:
            run.notes.append(
                f"the baselines name no git revision ({why}): a check of code changed since then will measure it "
                "against the commit that writes them; commit the baselines with the code they measured"
            )

    def write(self) -> tuple[list[Path], list[str]]:
        return self.run.write_baselines()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        if ahead_of_tests(session, self.worker):
            try:
                self.record_ahead(session.items)
            except TurnError as exc:  # each test then starts its own processes, and fails on the lock with it
                self.run.notes.append(f"fxprof: the fresh processes could not be started ahead of the tests: {exc}")
        return (yield)

    def record_ahead(self, items: Sequence[pytest.Item]) -> None:
        """Measure every test of ``items`` that uses the fixture in fresh processes that serve them all, one after
        the other: process ``i`` serves the tests that ask for more than ``i`` processes; a test measured on a
        busy machine is measured again, up to ``BUSY_RETRIES`` times, in a process of its own round."""
        tests = fixture_tests(self, items)
        counts = {item.nodeid: s.processes - 1 for item, s in tests if s.processes > 1}
        settings = {item.nodeid: s.to_json() for item, s in tests}
        if not counts:
            return
        relaunch = relaunch_of(self.config)
        say(self.config, f"recording {len(counts)} test(s) in fresh processes that serve them all")
        with self.run.measuring_turns().turn("fresh processes", self.ahead_turns):
            for i in range(1, max(counts.values()) + 1):
                pending = [t for t, n in counts.items() if n >= i]
                for _ in range(BUSY_RETRIES + 1):
                    if not pending:
                        break
                    got = serve(
                        relaunch, [(t, {"settings": settings[t]}) for t in pending], extra={}, spent=self.run.spent
                    )
                    for t in pending:
                        tries = self.ahead.setdefault(t, [])
                        if len(tries) < i:
                            tries.append([])
                        failed = got.failed.get(t)
                        tries[i - 1].append(failed[1] if failed is not None else got.measured[t]["fresh"])
                    pending = [t for t in pending if t not in got.failed and busy(self.ahead[t][i - 1][-1])]
                say(self.config, f"fresh process {i}: {len([t for t, n in counts.items() if n >= i])} test(s)")
        self.run.spent.waiting_s += sum(t.waited_s for t in self.ahead_turns)

    def call_options(self, item: pytest.Item, relaunch: Relaunch) -> dict[str, Any]:
        return {**super().call_options(item, relaunch), "ahead": self.ahead.get(item.nodeid, [])}
