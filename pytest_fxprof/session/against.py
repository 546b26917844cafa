"""``AgainstCalls``: a test's calls judged against a git revision, in pairs of fresh processes
(``--fxprof-against``)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pytest_fxprof.against.answers import first_profile
from pytest_fxprof.against.compare import Against, TestOutcome, judge_test
from pytest_fxprof.against.rounds import AgainstError
from pytest_fxprof.judge.paired import OUT_OF_LINE
from pytest_fxprof.measure.turns import TurnError
from pytest_fxprof.records.fingerprint import changes_text
from pytest_fxprof.records.verdicts import Status
from pytest_fxprof.result import ProfileResult
from pytest_fxprof.session.calls import Calls
from pytest_fxprof.session.ending import ending
from pytest_fxprof.session.reactions import OnUnchanged, Outcome
from pytest_fxprof.settings import Mode, Settings

if TYPE_CHECKING:
    from pytest_fxprof.against.rounds import Pairs
    from pytest_fxprof.measure.turns import Turn
    from pytest_fxprof.records.profile import Profile
    from pytest_fxprof.session.run import RunState
    from pytest_fxprof.views.report import ProfileReportJSON


class AgainstCalls(Calls):
    """Each call as the new side's first process profiled it, where the run's pairs measured the test before the
    tests ran (``ahead``), else captured here (and not timed); when the test passed, each call is judged by the
    paired rule on the test's pairs of old and new processes: those ``ahead``, else pairs measured now for this
    test alone (an xdist worker's)."""

    mode = Mode.AGAINST
    measured = False
    cold = (
        "the pairs against the revision measure this test in processes of their own; their times and verdict are "
        "in the fxprof summary and its reports"
    )

    def __init__(
        self,
        test_id: str,
        settings: Settings,
        *,
        against: Against,
        ahead: Pairs | None = None,
        ahead_error: str = "",
        ahead_turns: list[Turn] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(test_id, settings, **kwargs)
        self.against = against
        self.ahead = ahead
        """What the run's pairs measured of this test before the tests ran (None: it is measured as it ends)."""
        self.ahead_error = ahead_error
        self.changes: dict[str, list[str]] = {}
        """Per call whose sides' fingerprints were compared: what differs (empty: the same, decided unchanged)."""
        self.sets: dict[str, tuple[tuple[str, int], ...]] = {}
        """Per call confirmed by a second set of pairs: each set's verdict and pairs (``CallOutcome.sets``)."""
        if ahead is not None and ahead_turns:
            self.taken[""] = list(ahead_turns)  # the turn its pairs measured in, shared with the run's other tests

    def measured_before(self, key: str) -> Profile | None:
        """The call as the new side's first process profiled it (``first_profile``), where the run's pairs measured
        the test before it ran here: the same code's capture, so this process need not capture it again."""
        if self.ahead is None or self.ahead_error:
            return None
        return first_profile(self.ahead, key)

    def extend_report(self, key: str, report: ProfileReportJSON) -> None:
        """Where a second set of pairs confirmed the call: each set's verdict and pairs; where the sides'
        fingerprints were compared: what differs."""
        if key in self.changes:
            report["fingerprint"] = {"reference": self.against.label, "differences": self.changes[key]}
        if key in self.sets:
            report["sets"] = [{"status": status, "pairs": pairs} for status, pairs in self.sets[key]]

    def waited(self) -> tuple[int, float]:
        """The turns this test took and waited for: not the one its pairs measured in before the tests ran, which
        the run's other tests shared (the run counts it once)."""
        if self.ahead is None:
            return super().waited()
        turns = [t for key, taken in self.taken.items() if key for t in taken]
        return len(turns), sum(t.waited_s for t in turns)

    def _measured(self) -> TestOutcome:
        """The test's pairs (measured before the tests ran, else now, alone) judged call by call."""
        policy = self.settings.paired_policy()
        if self.ahead_error:
            raise AgainstError(self.ahead_error)
        if self.ahead is not None:
            return judge_test(self.against, self.test_id, self.ahead, dict(self.results), policy)
        return self.measure_pairs(
            self.against, dict(self.results), prove=self.reactions.unchanged is OnUnchanged.DECIDE
        )

    def finish(self, run: RunState, passed: bool) -> Outcome:
        """Judge each call against the old side on the test's pairs."""
        outcome = Outcome(warnings=list(self.warnings))
        if not self.results:
            return outcome
        label = self.against.label
        if not passed:  # the test failed or skipped on its own: nothing to compare
            for key, result in self.results.items():
                self.keep(run, self.record_of(key, Status.NOT_COMPARED, result, "the test did not pass"))
            return outcome
        try:
            tested = self._measured()
        except (AgainstError, TurnError) as exc:
            outcome.failures.append(f"fxprof: {self.test_id} against {label}: {exc}")
            for key, result in self.results.items():
                self.keep(run, self.record_of(key, Status.ERROR, result, "see the test's failure"))
            return outcome
        if tested.skipped:
            outcome.warnings.append(f"fxprof: {self.test_id} was not compared: {tested.skipped}")
            for key, result in self.results.items():
                self.keep(run, self.record_of(key, Status.NOT_COMPARED, result, tested.skipped))
            return outcome
        for key, result in self.results.items():
            call = tested.calls.get(key)
            measured = call.profile if call is not None and call.profile is not None else None
            if tested.absent or call is None or call.comparison is None:
                where = "the test" if tested.absent else "this fxprof call"
                shown = ProfileResult.of(replace(measured, seconds=tested.seconds)) if measured is not None else result
                self.results[key] = shown
                self.keep(
                    run, self.record_of(key, Status.NEW, shown, f"{where} does not exist at {label}: not compared")
                )
                continue
            assert measured is not None  # both sides made the call
            judged = ProfileResult.of(replace(measured, comparison=call.comparison, seconds=tested.seconds))
            self.results[key] = judged
            end = ending(
                self.label(key),
                self.test_id,
                judged.comparison,
                self.reactions,
                directory=self.store.directory,
                pairs=call.pairs,
                stopped=call.stopped,
                confirmation=call.confirmation,
            )
            if call.sets:
                self.sets[key] = call.sets
            if call.changes is not None:
                self.changes[key] = call.changes
                if call.changes:  # measured in pairs because its computation differs: say where
                    line = f"measured in pairs, since its computation differs from {label}'s: " + changes_text(
                        call.changes
                    )
                    end.notices.append(line)
                    if end.outcome.failures:
                        end.outcome.failures[-1] += f"\n  {line}"
            outcome.add(end.outcome)
            self.notices[key] = end.notices
            if call.out_of_line:  # asks nothing of the user: the pairs that met one machine decided
                self.notices[key].append(
                    f"{call.out_of_line} of {call.pairs} pairs left out: in each, the typical node's ratio lay more "
                    f"than {OUT_OF_LINE:.0%} from the other pairs' (other work on the machine hit one of its processes)"
                )
            if call.left_out:
                outcome.warnings.append(
                    f"fxprof: {self.label(key)}: {call.left_out} of {call.pairs} pairs left out, their processes "
                    "out of lock-step in this call (one side's test makes calls the other's does not, or a process "
                    "ended early)"
                )
            if call.kept_out_of_step:
                outcome.warnings.append(
                    f"fxprof: {self.label(key)}: {call.kept_out_of_step} of {call.pairs} pairs ran out of "
                    "lock-step in this call and were kept, as fewer than two held it (one side's test makes calls "
                    "the other's does not, or a process ended early): their ratios carry more of the machine's noise"
                )
            self.keep(run, self.record_of(key, end.status, judged))
        return outcome
