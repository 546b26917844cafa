"""``--fxprof``: ``CheckMode`` (the run: the old sides at the revisions its baselines were recorded at) and
``CheckCalls`` (a test's calls checked against their stored baselines, and where a model's code changed since its
baseline was recorded, against that revision too)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pytest_fxprof.against.recorded import RecordedSides, baseline_revision
from pytest_fxprof.against.rounds import AgainstError, StopReason
from pytest_fxprof.judge.decision import capture_changed, compare, refuse_lone
from pytest_fxprof.judge.weak import weak_baseline
from pytest_fxprof.measure.sampling import BUSY_RETRIES, SamplingError, sample
from pytest_fxprof.measure.turns import TurnError
from pytest_fxprof.modes.base import CallPlan, Calls
from pytest_fxprof.modes.gate import Gate
from pytest_fxprof.options import against_forks
from pytest_fxprof.records.disturbance import Disturbance
from pytest_fxprof.records.fingerprint import changes_text
from pytest_fxprof.records.measurement import BaselineEntry, Run
from pytest_fxprof.records.profile import Profile
from pytest_fxprof.records.verdicts import Comparison, Status, operations_changed
from pytest_fxprof.result import ProfileResult
from pytest_fxprof.session.ending import ending
from pytest_fxprof.session.reactions import Confirm, OnCodeChange, OnUnchanged, OnUnused, Outcome
from pytest_fxprof.settings import Mode, Settings
from pytest_fxprof.store.baseline import BaselineError, BaselineFile

if TYPE_CHECKING:
    import pytest

    from pytest_fxprof.measure.sampling import Relaunch
    from pytest_fxprof.records.fingerprint import Fingerprint
    from pytest_fxprof.session.run import RunState
    from pytest_fxprof.views.report import ProfileReportJSON


def noisy(baseline: BaselineEntry, why: str, seen: Comparison | None = None) -> Comparison:
    """The verdict of a profile measured on a busy machine: undecided, nothing judged, ``why``. The nodes added and
    removed and the graphs that ``seen`` (the same profile compared) found are kept: they are facts of the code, not
    of the times."""
    c = Comparison(Status.UNDECIDED, (), 1.0, len(baseline.runs), (), None, (), (), noisy_reason=why)
    if seen is None or seen.status is Status.MISMATCH:
        return c
    return replace(c, added=seen.added, removed=seen.removed, graphs=seen.graphs)


def code_changed(c: Comparison | None) -> bool:
    """Whether the model's code changed since its baseline was recorded, as the comparison ``c`` saw it: operations
    added or removed (the same operations renamed or in another order are no change), or a capture that no longer
    works as it did (``judge.decision.capture_changed``)."""
    if capture_changed(c):
        return True
    return c is not None and c.status is not Status.MISMATCH and operations_changed(c.added, c.removed)


_STRICT = {Status.REGRESSION: 2, Status.UNDECIDED: 1}
"""Which verdict is the stricter where a call is judged twice: a slowdown, then no verdict, then a pass."""


@dataclass(frozen=True)
class RevisionCheck:
    """A call whose code changed since its baseline was recorded, measured against the revision it was recorded at:
    that commit (``sha``; "" where none is known), the pairs' comparison and the new side's profile (None where it
    was not measured: ``why``), how many pairs, and what ended them while a verdict was open."""

    sha: str
    comparison: Comparison | None = None
    profile: Profile | None = None
    pairs: int = 0
    stopped: StopReason | None = None
    why: str = ""


class CheckCalls(Calls):
    """Each call compared with its baseline entry as soon as it is measured; a regression stands only if a second
    measurement (a fresh process, or this one: ``Reactions.confirm``) shows it too."""

    mode = Mode.CHECK
    takes_turns = True

    def __init__(
        self, test_id: str, settings: Settings, *, recorded: RecordedSides | None = None, **kwargs: Any
    ) -> None:
        super().__init__(test_id, settings, **kwargs)
        self.recorded = recorded
        """The run's old sides at the revisions baselines were recorded at (None: none can be made here)."""
        self.revision_checks: dict[str, RevisionCheck] = {}
        """Per call whose code changed since its baseline was recorded, what its pairs against that revision said."""
        self._baseline: BaselineFile | None = None
        self._loaded = False
        self._confirmed_busy = Disturbance()
        """The disturbance of the last confirmation (``_confirmation``)."""
        self.changes: dict[str, list[str]] = {}
        """Per call whose baseline recorded a fingerprint: what differs from it (empty: the same computation, decided
        unchanged without measuring)."""

    def baseline(self) -> BaselineFile | None:
        """The test's baseline file, loaded once; ``BaselineError`` if it is unusable."""
        if not self._loaded:
            self._baseline = self.store.load(self.test_id)
            self._loaded = True
        return self._baseline

    def plan(self, key: str) -> CallPlan:
        """The test's baseline loaded first (to fail early where unusable); the call unchanged, not measured, where
        its fingerprint is the one its baseline recorded (unless ``--fxprof-on-unchanged measure``); what differs is
        kept in ``changes``."""
        baseline = self.baseline()
        entry = baseline.entries.get(key) if baseline is not None else None
        if self.reactions.unchanged is OnUnchanged.MEASURE or entry is None or entry.fingerprint is None:
            return CallPlan()
        recorded = entry.fingerprint

        def same(seen: Fingerprint) -> bool:
            self.changes[key] = [] if seen.same_as(recorded) else seen.differences(recorded)
            return not self.changes[key]

        return CallPlan(proof=same)

    def judged(self, key: str, result: ProfileResult, measure: Callable[[], ProfileResult]) -> ProfileResult:
        baseline = self.baseline()
        if baseline is None or key not in baseline.entries:
            return result
        entry = baseline.entries[key]
        if self.changes.get(key) == []:  # its fingerprint is the baseline's: nothing was measured, nothing to judge
            cold = "not measured: its computation is the one its baseline recorded, whose times stand"
            return replace(result, comparison=Comparison.unchanged(len(entry.runs)), cold=cold)
        policy, tolerances = self.settings.policy(), self.settings.tolerances()
        comparison = refuse_lone(compare(entry, result.entry(tolerances), policy))  # one process's baseline: undecided
        if result.busy:  # nothing judged on disturbed numbers
            why = f"{result.disturbance.line}; measured {1 + BUSY_RETRIES} times, every time busy"
            return replace(result, comparison=noisy(entry, why, comparison))
        if comparison.status is Status.REGRESSION and self.reactions.confirm is not Confirm.OFF:
            # a regression stands only if a second measurement shows it too
            with self.turns.turn("confirmation", self.taken.setdefault(key, [])):
                confirmation = self._confirmation(key, result, measure)
            result = replace(result, confirmations=(confirmation,))
            comparison = compare(entry, result.entry(tolerances, result.confirmations), policy)
            if self._confirmed_busy.line:  # a confirmation on disturbed numbers confirms nothing, either way
                comparison = noisy(entry, f"the confirmation was {self._confirmed_busy.line}", comparison)
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
        """Each call's comparison with its baseline; where the model's code changed since the recording, also its
        pairs against the revision the baseline was recorded at (``--fxprof-on-code-change``), the stricter kept."""
        outcome = Outcome(warnings=list(self.warnings))
        changed = [key for key, r in self.results.items() if code_changed(r.comparison)]
        if passed and changed and self.reactions.code_change is OnCodeChange.REVISION:
            self._against_revision(changed, outcome)
        for key, result in self.results.items():
            checked = self.revision_checks.get(key)
            shown, paired = stricter(result, checked)
            measured = checked if paired and checked is not None else RevisionCheck("")
            end = ending(
                self.label(key),
                self.test_id,
                shown.comparison,
                self.reactions,
                directory=self.store.directory,
                weak=self._weak(key),
                pairs=measured.pairs,
                stopped=measured.stopped,
                baseline=paired,
            )
            if checked is not None and checked.comparison is not None and not paired and end.outcome.failures:
                # the baseline failed it and the pairs did not: say so where the user reads the failure
                end.outcome.failures[-1] += (
                    "\n  "
                    + _revision_notice(result.comparison, checked, paired)
                    + (
                        ": what slowed is not the code that changed (a dependency, the machine, or drift since the "
                        "recording)"
                        if checked.comparison.status is Status.PASS
                        else ""
                    )
                )
            if self.changes.get(key):  # measured because its computation is not the baseline's: say what differs
                line = "measured, since its computation is not the one its baseline recorded: " + changes_text(
                    self.changes[key]
                )
                end.notices.append(line)
                if end.outcome.failures:
                    end.outcome.failures[-1] += f"\n  {line}"
            outcome.add(end.outcome)
            self.notices[key] = end.notices
            if checked is not None and checked.comparison is not None:
                self.notices[key].append(_revision_notice(result.comparison, checked, paired))
            self.keep(run, self.record_of(key, end.status, shown))
        return outcome

    def _against_revision(self, keys: list[str], outcome: Outcome) -> None:
        """Measure the calls ``keys``, whose code changed since their baseline was recorded, in pairs of fresh
        processes against the revision it was recorded at (``revision_checks``); a warning says why not where that
        revision or a fresh process is not at hand, or the pairs failed."""
        baseline = self.baseline()
        assert baseline is not None  # each call was compared with it
        tests = self.recorded.rootdir if self.recorded is not None else None
        sha, why = baseline_revision(baseline.entries[keys[0]].revision, self.store.path_for(self.test_id), tests)
        side = None
        if sha and self.recorded is not None:
            side, why = self.recorded.side(sha)
        elif sha:
            why = "this run cannot check a revision out"
        if side is not None and self.relaunch is None:
            side, why = None, "no fresh process can be started from this run"
        tested = None
        if side is not None:
            try:
                tested = self.measure_pairs(side, {key: self.results[key] for key in keys})
            except (AgainstError, TurnError) as exc:
                why = f"measuring it against {side.label} failed: {exc}"
            else:
                why = tested.skipped or (f"the test does not exist at {side.label}" if tested.absent else "")
        where = side.label if side is not None else "the baseline's revision"
        for key in keys:
            call = tested.calls.get(key) if tested is not None else None
            if call is None or call.comparison is None or call.comparison.status is Status.MISMATCH:
                reason = why or (
                    f"the call does not exist at {where}"
                    if call is None or call.comparison is None
                    else f"it hands the model another setup than at {where}"  # judged as a mismatch there
                )
                self.revision_checks[key] = RevisionCheck(sha, why=reason)
                stored = self.results[key].comparison
                outcome.warnings.append(
                    f"fxprof: {self.label(key)}: it was captured another way than its baseline "
                    f"({'; '.join(stored.mismatches)}), so the baseline could not judge it, and it was not measured "
                    f"against the baseline's revision either: {reason}"
                    if capture_changed(stored) and stored is not None
                    else f"fxprof: {self.label(key)}: its code changed since its baseline was recorded, but it was "
                    f"judged by the baseline alone, whose bands hold the drift between a recording and a check and so "
                    f"miss changes of a few percent: {reason}"
                )
                continue
            assert tested is not None
            self.revision_checks[key] = RevisionCheck(sha, call.comparison, call.profile, call.pairs, call.stopped)

    def extend_report(self, key: str, report: ProfileReportJSON) -> None:
        if key in self.changes:
            report["fingerprint"] = {"reference": "its baseline", "differences": self.changes[key]}
        checked = self.revision_checks.get(key)
        if checked is None:
            return
        c = checked.comparison
        report["code_changed"] = {
            "revision": checked.sha,
            "against": c.against if c is not None else "",
            "status": c.status.value if c is not None else "",
            "pairs": checked.pairs,
            "why": checked.why,
        }

    def _weak(self, key: str) -> str:
        """The warning of a baseline entry recorded on a busy machine ("" where it was not, or there is none)."""
        try:
            baseline = self.baseline()
        except BaselineError:
            return ""
        if baseline is None or key not in baseline.entries:
            return ""
        return weak_baseline(self.label(key), baseline.entries[key], self.settings.policy())


class CheckMode(Gate):
    """Each test's calls checked against their stored baselines; where a model's code changed since its baseline
    was recorded, against the revision it was recorded at too, whose tree is checked out once per run when first
    needed and removed when the run ends."""

    mode = Mode.CHECK
    calls_class = CheckCalls

    def __init__(self, config: pytest.Config, run: RunState) -> None:
        super().__init__(config, run)
        roots = tuple(str(r) for r in config.getini("fxprof_against_roots"))
        self.recorded = RecordedSides(config.rootpath, roots, fork=against_forks(config))
        config.add_cleanup(self.recorded.close)

    def call_options(self, item: pytest.Item, relaunch: Relaunch) -> dict[str, Any]:
        return {**super().call_options(item, relaunch), "recorded": self.recorded}

    def unused_fails(self) -> bool:
        return self.run.reactions.unused is OnUnused.FAIL


def stricter(result: ProfileResult, checked: RevisionCheck | None) -> tuple[ProfileResult, bool]:
    """What a call shows: its pairs' comparison against the baseline's revision (then True), unless the comparison
    with the baseline is the stricter verdict: the pairs measured the change itself, where the baseline's speed
    factors had to guess the machine's drift since the recording, so their figures are the change's (BENCHMARKS.md,
    "The allocator: the program users run"). A baseline of one process judged nothing (``Comparison.refused``): the
    pairs' verdict stands."""
    paired = checked.comparison if checked is not None else None
    stored = result.comparison
    if checked is None or paired is None or checked.profile is None or stored is None:
        return result, False
    if paired.status is Status.MISMATCH:
        return result, False  # the pairs judged nothing
    stricter = _STRICT.get(paired.status, 0) < _STRICT.get(stored.status, 0)
    if not stored.refused and not capture_changed(stored) and stricter:  # one process's baseline decided nothing
        return result, False
    seconds = result.seconds + checked.profile.seconds
    return ProfileResult.of(replace(checked.profile, comparison=paired, seconds=seconds)), True


def _revision_notice(stored: Comparison | None, checked: RevisionCheck, paired: bool) -> str:
    """The line that says what the pairs against the baseline's revision measured of a call whose code changed."""
    c = checked.comparison
    assert c is not None
    added = len(stored.added) if stored is not None else 0
    removed = len(stored.removed) if stored is not None else 0
    total = f", total x{c.total.ratio:.3f}" if c.total is not None else ""
    if capture_changed(stored) and stored is not None:
        return (
            f"it was captured another way than its baseline ({'; '.join(stored.mismatches)}), so its code changed "
            f"since the recording: measured against {c.against} in {checked.pairs} pairs of fresh processes instead: "
            f"{c.status.value}{total}"
        )
    kept = (
        "; this verdict kept"
        if paired
        else f"; its baseline's verdict ({stored.status.value}) kept, the stricter"
        if stored is not None and stored.status is not c.status
        else ""
    )
    return (
        f"its code changed since its baseline was recorded ({added} node(s) added, {removed} removed): measured "
        f"against {c.against} in {checked.pairs} pairs of fresh processes as well: {c.status.value}{total}{kept}"
    )
