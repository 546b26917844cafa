"""``CheckCalls``: a test's calls checked against their stored baselines (``--fxprof``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pytest_fxprof.judge.decision import compare, weak_baseline
from pytest_fxprof.measure.sampling import BUSY_RETRIES, SamplingError, sample
from pytest_fxprof.records.disturbance import Disturbance
from pytest_fxprof.records.measurement import BaselineEntry, Run
from pytest_fxprof.records.verdicts import Comparison, Status
from pytest_fxprof.result import ProfileResult
from pytest_fxprof.session.calls import Calls
from pytest_fxprof.session.ending import ending
from pytest_fxprof.session.reactions import Confirm, Outcome
from pytest_fxprof.settings import Mode, Settings
from pytest_fxprof.store.baseline import BaselineError, BaselineFile

if TYPE_CHECKING:
    from pytest_fxprof.session.run import RunState


def noisy(baseline: BaselineEntry, why: str) -> Comparison:
    """The verdict of a profile measured on a busy machine: undecided, nothing judged, ``why``."""
    return Comparison(Status.UNDECIDED, (), 1.0, len(baseline.runs), (), None, (), (), noisy_reason=why)


class CheckCalls(Calls):
    """Each call compared with its baseline entry as soon as it is measured; a regression stands only if a second
    measurement (a fresh process, or this one: ``Reactions.confirm``) shows it too."""

    mode = Mode.CHECK
    takes_turns = True

    def __init__(self, test_id: str, settings: Settings, **kwargs: Any) -> None:
        super().__init__(test_id, settings, **kwargs)
        self._baseline: BaselineFile | None = None
        self._loaded = False
        self._confirmed_busy = Disturbance()
        """The disturbance of the last confirmation (``_confirmation``)."""

    def baseline(self) -> BaselineFile | None:
        """The test's baseline file, loaded once; ``BaselineError`` if it is unusable."""
        if not self._loaded:
            self._baseline = self.store.load(self.test_id)
            self._loaded = True
        return self._baseline

    def before(self, key: str) -> None:
        self.baseline()

    def judged(self, key: str, result: ProfileResult, measure: Callable[[], ProfileResult]) -> ProfileResult:
        baseline = self.baseline()
        if baseline is None or key not in baseline.entries:
            return result
        entry = baseline.entries[key]
        if result.busy:  # nothing judged on disturbed numbers
            why = f"{result.disturbance.line}; measured {1 + BUSY_RETRIES} times, every time busy"
            return replace(result, comparison=noisy(entry, why))
        policy, tolerances = self.settings.policy(), self.settings.tolerances()
        comparison = compare(entry, result.entry(tolerances), policy)
        if comparison.status is Status.REGRESSION and self.reactions.confirm is not Confirm.OFF:
            # a regression stands only if a second measurement shows it too
            with self.turns.turn("confirmation", self.taken.setdefault(key, [])):
                confirmation = self._confirmation(key, result, measure)
            result = replace(result, confirmations=(confirmation,))
            comparison = compare(entry, result.entry(tolerances, result.confirmations), policy)
            if self._confirmed_busy.line:  # a confirmation on disturbed numbers confirms nothing, either way
                comparison = noisy(entry, f"the confirmation was {self._confirmed_busy.line}")
        return replace(result, comparison=comparison)

    def _confirmation(self, key: str, result: ProfileResult, measure: Callable[[], ProfileResult]) -> Run:
        """One more measurement: from a fresh process where the run can start one, else from this one. Its
        disturbance is left in ``_confirmed_busy``: a fresh process is started again up to ``BUSY_RETRIES`` times
        where it was measured on a busy machine, one in this process measured again (``calmer``)."""
        self._confirmed_busy = Disturbance()
        if self.reactions.confirm is Confirm.FRESH and self.relaunch is not None:
            expected = {key: [n.info.key for n in result.nodes]}
            seen: dict[str, list[Disturbance]] = {}
            try:
                got = sample(
                    self.relaunch,
                    self.test_id,
                    self.settings.to_json(),
                    1,
                    expected,
                    retries=BUSY_RETRIES,
                    disturbances=seen,
                )[key][0]
                self._confirmed_busy = seen[key][0]
                return got
            except SamplingError as exc:
                self.warnings.append(
                    f"fxprof: {self.label(key)}: the confirmation in a fresh process failed, so it was measured "
                    f"again in this process instead: {exc}"
                )
        again = measure()
        self.same_capture(key, result, again, "(to confirm a slowdown)")
        again = self.calmer(key, again, measure)
        self._confirmed_busy = again.disturbance
        return again.run()

    def finish(self, run: RunState, passed: bool) -> Outcome:
        outcome = Outcome(warnings=list(self.warnings))
        for key, result in self.results.items():
            end = ending(
                self.label(key),
                self.test_id,
                result.comparison,
                self.reactions,
                directory=self.store.directory,
                weak=self._weak(key),
            )
            outcome.add(end.outcome)
            self.notices[key] = end.notices
            self.keep(run, self.record_of(key, end.status, result))
        return outcome

    def _weak(self, key: str) -> str:
        """The warning of a baseline entry recorded on a busy machine ("" where it was not, or there is none)."""
        try:
            baseline = self.baseline()
        except BaselineError:
            return ""
        if baseline is None or key not in baseline.entries:
            return ""
        return weak_baseline(self.label(key), baseline.entries[key], self.settings.policy())
