"""``UpdateCalls``: a test's calls recorded as its baseline (``--fxprof-update``)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pytest_fxprof.judge.decision import weak_baseline
from pytest_fxprof.measure.sampling import BUSY_RETRIES, sample
from pytest_fxprof.records.disturbance import BUSY_LINE, Disturbance
from pytest_fxprof.records.measurement import BaselineEntry
from pytest_fxprof.records.verdicts import Status
from pytest_fxprof.session.calls import Calls
from pytest_fxprof.session.reactions import Outcome
from pytest_fxprof.settings import Mode, Settings
from pytest_fxprof.store import history
from pytest_fxprof.store.baseline import BaselineError, BaselineFile, NewerSchemaError

if TYPE_CHECKING:
    from pytest_fxprof.measure.sampling import Child
    from pytest_fxprof.session.run import RunState
    from pytest_fxprof.views.report import ProfileReportJSON


class UpdateCalls(Calls):
    """Each call measured here and in ``processes - 1`` fresh processes when the call phase passed; the entries
    are queued for writing only once the whole test (teardown included) passed."""

    mode = Mode.UPDATE
    takes_turns = True
    fingerprinted = True

    def __init__(
        self, test_id: str, settings: Settings, *, ahead: Sequence[Sequence[Child]] = (), **kwargs: Any
    ) -> None:
        super().__init__(test_id, settings, **kwargs)
        self.ahead = ahead
        """Per fresh process, its tries, measured before the tests ran by processes that served them all."""
        self.pending: dict[str, BaselineEntry] | None = None
        self.busy_recorded: dict[str, list[Disturbance]] = {}
        """Per call, the disturbance of each process that stayed busy (this one's first)."""

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
