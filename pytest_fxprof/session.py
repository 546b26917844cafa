"""The gate's workflow for one pytest run: per test, profile and judge; per session, collect and write.

``TestState`` profiles each ``fxprof`` call of one test and, when the test ends, turns the comparisons
into an ``Outcome`` (failures, skips, warnings) and plain-data records. ``RunState`` gathers those
records (from this process or from xdist workers), queues baseline writes, writes them once at the end,
and finds baselines whose test no longer exists.

Must not import pytest: the plugin turns outcomes into pytest calls. Must not import torch at module level: it
is reached only through ``measure.profiler``, imported when a profile is taken.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Sequence, Set
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from pytest_fxprof.against.check import Against, AgainstError, check_test
from pytest_fxprof.against.origin import foreign_modules
from pytest_fxprof.judge.decision import compare, weak_baseline
from pytest_fxprof.measure.lockstep import Barrier, lockstep_barrier
from pytest_fxprof.measure.sampling import BUSY_RETRIES, Relaunch, SampleJSON, SamplingError, sample, write_samples
from pytest_fxprof.measure.turns import Turn, Turns
from pytest_fxprof.records.disturbance import BUSY_LINE, Disturbance, disturbance_to_json, least_disturbed
from pytest_fxprof.records.measurement import BaselineEntry, Run, capture_difference
from pytest_fxprof.records.verdicts import JUDGED, Comparison, Status
from pytest_fxprof.result import ProfileResult
from pytest_fxprof.settings import Mode, Settings
from pytest_fxprof.store import history
from pytest_fxprof.store.baseline import (
    BaselineError,
    BaselineFile,
    BaselineStore,
    EntryJSON,
    NewerSchemaError,
    as_file,
    entry_from_json,
    entry_to_json,
    run_to_json,
)
from pytest_fxprof.views.render import (
    capture_notices,
    improvement_lines,
    notice_lines,
    regression_message,
    structural_lines,
    summary_line,
    undecided_message,
)
from pytest_fxprof.views.report import ProfileRecord, profile_report

if TYPE_CHECKING:
    from pytest_fxprof.capture.step import Step


class OnMissing(StrEnum):
    FAIL = "fail"
    SKIP = "skip"


class OnMismatch(StrEnum):
    SKIP = "skip"
    FAIL = "fail"


class OnUndecided(StrEnum):
    FAIL = "fail"
    SKIP = "skip"
    PASS_WITH_WARNING = "pass-with-warning"  # noqa: S105 - a reaction, not a password


class OnGraphChange(StrEnum):
    WARN = "warn"
    FAIL = "fail"


class OnUnused(StrEnum):
    WARN = "warn"
    FAIL = "fail"


class OnFaster(StrEnum):
    IGNORE = "ignore"
    WARN = "warn"
    FAIL = "fail"


class Confirm(StrEnum):
    FRESH = "fresh"
    SAME = "same"
    OFF = "off"


@dataclass(frozen=True)
class Reactions:
    """What the gate does with a missing baseline, another environment, a changed graph, a stale file,
    a profile that got faster, and how it confirms one that looks slower before failing it."""

    missing: OnMissing = OnMissing.FAIL
    mismatch: OnMismatch = OnMismatch.SKIP
    graph_change: OnGraphChange = OnGraphChange.WARN
    unused: OnUnused = OnUnused.WARN
    faster: OnFaster = OnFaster.WARN
    confirm: Confirm = Confirm.FRESH
    undecided: OnUndecided = OnUndecided.FAIL
    """A check that reached no verdict (``Status.UNDECIDED``: an item that gates too noisy to decide, or a profile
    measured on a busy machine every time): failed, skipped, or passed with a warning. Failed by default: a gate
    that did not judge must not look green in CI, and an undecided check says so, never "slower"."""


@dataclass
class Outcome:
    """How a test ends because of fxprof, beyond what its own code did."""

    failures: list[str] = field(default_factory=list)
    skips: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class UsageError(Exception):
    """The fixture was called in a way it cannot serve; the message says how to call it."""


class FinishedTest(TypedDict):
    """What one test left in an xdist worker, sent to the controller on the test's teardown report as plain
    data, so that it arrives as soon as the test ends, whatever happens to the worker later."""

    test_id: str
    records: list[ProfileRecord]
    writes: dict[str, EntryJSON] | None
    dropped: list[str] | None
    notes: list[str]
    errors: list[str]
    failed_calls: int
    turns: int
    waited_s: float


class WorkerPayload(TypedDict):
    """What an xdist worker sends to the controller when it finishes: what it collected."""

    collected: list[str]
    partial: bool


SETUP_FIELDS = ("inputs:", "mode:")
"""How a mismatch of the test's setup (``Setup.differences``) begins."""


def noisy(baseline: BaselineEntry, why: str) -> Comparison:
    """The verdict of a profile measured on a busy machine: undecided, nothing judged, ``why``."""
    return Comparison(Status.UNDECIDED, (), 1.0, len(baseline.runs), (), None, (), (), noisy_reason=why)


def rerecord_hint(test_id: str) -> str:
    """The command that records the test's baseline again, its id quoted for a POSIX shell whatever it holds."""
    return f"record it with: {update_command(test_id)}"


def update_command(test_id: str) -> str:
    """``pytest --fxprof-update 'TEST_ID'``, the id quoted for a POSIX shell whatever it holds."""
    quoted = "'" + test_id.replace("'", "'\"'\"'") + "'"
    return f"pytest --fxprof-update {quoted}"


def if_intended(test_id: str) -> str:
    """The advice a failure or a changed graph gives: never a fix, since refreshing accepts the slowdown."""
    return f"if this change is intended, refresh the baseline with: {update_command(test_id)}"


class TestState:
    """The ``fxprof`` calls of one test."""

    __test__ = False  # not a test class, whatever pytest's python_classes says

    def __init__(
        self,
        test_id: str,
        mode: Mode,
        settings: Settings,
        *,
        store: BaselineStore,
        reactions: Reactions,
        relaunch: Relaunch | None = None,
        sample_out: Path | None = None,
        sample_request: dict[str, Any] | None = None,
        against: Against | None = None,
        turns: Turns | None = None,
    ) -> None:
        self.test_id = test_id
        self.mode = mode
        self.settings = settings
        self.store = store
        self.reactions = reactions
        self.relaunch = relaunch
        self.sample_out = sample_out
        self.sample_request = sample_request or {}
        """In a fresh process: what its parent asked (``entry``: send whole entries; ``against``: check that
        this, the old side, imported no module of the working tree; ``lockstep``: pass for pass with a twin)."""
        self.against = against
        self.turns = turns or Turns(None)
        """The machine's measuring turns: every measuring section of this test takes one (``measure.turns``)."""
        self.taken: dict[str, list[Turn]] = {}
        """Each call's turns (its profile, its confirmation), and under ``""`` the test's own (the fresh processes
        of a recording, the pairs against a revision)."""
        self._barriers: dict[str, Barrier] = {}
        """In a duet's process: each call's lock-step with its twin (whether it held, ``Barrier.alone_from``)."""
        self.results: dict[str, ProfileResult] = {}
        self._unnamed = 0
        self._unnamed_steps = 0
        self._baseline: BaselineFile | None = None
        self._loaded = False
        self.pending: dict[str, BaselineEntry] | None = None
        self.warnings: list[str] = []
        self.records: list[ProfileRecord] = []  # also handed to the run; what this test's pytest report carries
        self.failed_calls = 0  # counted by the caller, which sees every way a call can fail
        self.notices: dict[str, list[str]] = {}
        """Per call, what the gate saw but does not fail on or ask anything about (``notice_lines``)."""
        self._confirmed_busy = Disturbance()
        """The disturbance of the last confirmation (``_confirmation``)."""
        self.busy_recorded: dict[str, list[Disturbance]] = {}
        """When recording: per call, the disturbance of each process that stayed busy (this one's first)."""

    def _key(self, name: str | None, *, step: bool = False) -> str:
        if name is None and step:
            key = f"step{self._unnamed_steps}"
            self._unnamed_steps += 1
        elif name is None:
            key = f"call{self._unnamed}"
            self._unnamed += 1
        elif not isinstance(name, str) or not name.strip():
            raise UsageError(f"fxprof(name=...) must be a non-empty string, not {name!r}")
        else:
            key = name
        if key in self.results:
            raise UsageError(
                f"fxprof was called twice with the key {key!r} in one test; give each call its own name= "
                "so that each has its own baseline"
            )
        return key

    def baseline(self) -> BaselineFile | None:
        """The test's baseline file, loaded once; ``BaselineError`` if it is unusable."""
        if not self._loaded:
            self._baseline = self.store.load(self.test_id)
            self._loaded = True
        return self._baseline

    def profile(
        self,
        module: Any,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        *,
        name: str | None,
        leaf_modules: Sequence[Any],
        tracer: Any,
        step: Step | None = None,
    ) -> ProfileResult:
        from pytest_fxprof.measure.profiler import profile_module

        key = self._key(name, step=step is not None)
        baseline = self.baseline() if self.mode is Mode.CHECK else None
        barrier = lockstep_barrier(self.sample_request.get("lockstep"), key) if self.mode is Mode.SAMPLE else None
        if barrier is not None:
            self._barriers[key] = barrier
        side = self.mode is Mode.SAMPLE and bool(self.sample_request.get("entry"))  # a side against a revision

        def measure() -> ProfileResult:
            profiled = profile_module(
                module,
                args,
                kwargs,
                name=key,
                protocol=self.settings.protocol(),
                measured=self.mode not in (Mode.OFF, Mode.AGAINST),
                flops=self.mode is not Mode.SAMPLE or side,
                reference=not side,  # the paired rule divides by nothing: both sides of a pair meet one machine
                barrier=barrier,
                leaf_modules=leaf_modules,
                tracer=tracer,
                capture=self.settings.capture,
                engine=self.settings.engine,
                step=step,
            )
            return ProfileResult.of(profiled)

        started = time.perf_counter()
        taken = self.taken.setdefault(key, [])
        measuring = self.mode in (Mode.CHECK, Mode.UPDATE)
        with self.turns.turn("profile", taken) if measuring else contextlib.nullcontext():
            result = measure()
            if measuring:  # a profile measured on a busy machine is measured again, the least disturbed kept
                result = self._calmer(key, result, measure)
        if baseline is not None and key in baseline.entries and result.busy:  # nothing judged on disturbed numbers
            why = f"{result.disturbance.line}; measured {1 + BUSY_RETRIES} times, every time busy"
            result = replace(result, comparison=noisy(baseline.entries[key], why))
        elif baseline is not None and key in baseline.entries:
            entry, policy, tolerances = baseline.entries[key], self.settings.policy(), self.settings.tolerances()
            comparison = compare(entry, result.entry(tolerances), policy)
            if comparison.status is Status.REGRESSION and self.reactions.confirm is not Confirm.OFF:
                # a regression stands only if a second measurement shows it too
                with self.turns.turn("confirmation", taken):
                    confirmation = self._confirmation(key, result, measure)
                result = replace(result, confirmations=(confirmation,))
                comparison = compare(entry, result.entry(tolerances, result.confirmations), policy)
                if self._confirmed_busy.line:  # a confirmation on disturbed numbers confirms nothing, either way
                    comparison = noisy(entry, f"the confirmation was {self._confirmed_busy.line}")
            result = replace(result, comparison=comparison)
        result = replace(result, seconds=time.perf_counter() - started)
        self.results[key] = result
        return result

    def _calmer(self, key: str, result: ProfileResult, measure: Callable[[], ProfileResult]) -> ProfileResult:
        """``result``, or where it was measured on a busy machine, the least disturbed of it and up to
        ``BUSY_RETRIES`` more profiles taken in this process."""
        tries = [result]
        while tries[-1].busy and len(tries) <= BUSY_RETRIES:
            again = measure()
            first, second = [n.info.key for n in result.nodes], [n.info.key for n in again.nodes]
            if first != second:
                raise SamplingError(
                    f"fxprof: {self.label(key)}: measured again in this process (the first profile was measured on "
                    "a busy machine), the model captured a different graph; the capture must be deterministic: "
                    + capture_difference(first, second, ("the first profile's capture", "the one measured again"))
                )
            tries.append(again)
        return tries[least_disturbed([t.disturbance for t in tries])]

    def _confirmation(self, key: str, result: ProfileResult, measure: Callable[[], ProfileResult]) -> Run:
        """One more measurement: from a fresh process where the run can start one, else from this one. Its
        disturbance is left in ``_confirmed_busy``: a fresh process is started again up to ``BUSY_RETRIES`` times
        where it was measured on a busy machine, one in this process measured again (``_calmer``)."""
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
        first, second = [n.info.key for n in result.nodes], [n.info.key for n in again.nodes]
        if first != second:
            raise SamplingError(
                f"fxprof: {self.label(key)}: measured again in this process, the model captured a different graph; "
                "the capture must be deterministic (a model whose graph depends on state cannot be gated): "
                + capture_difference(first, second, ("the first profile's capture", "the one measured again"))
            )
        again = self._calmer(key, again, measure)
        self._confirmed_busy = again.disturbance
        return again.run()

    def label(self, key: str) -> str:
        return f"{self.test_id} [{key}]"

    # The end of the test --------------------------------------------------------------------------

    def finish(self, run: RunState, passed: bool) -> Outcome:
        """Decide how the test ends and hand its records (and, when recording, its baseline) to ``run``."""
        if self.mode is Mode.SAMPLE:
            return self._write_samples(passed)
        if self.mode is Mode.UPDATE:
            return self._record(run, passed)
        if self.mode is Mode.AGAINST:
            return self._against(run, passed)
        outcome = Outcome(warnings=list(self.warnings))
        for key, result in self.results.items():
            status = self._judge(key, result, outcome) if self.mode is Mode.CHECK else Status.UNMEASURED
            self._keep(run, self._record_of(key, status, result))
        return outcome

    def _keep(self, run: RunState, record: ProfileRecord) -> None:
        self.records.append(record)
        run.add_record(record)

    def _against(self, run: RunState, passed: bool) -> Outcome:
        """Measure the test in pairs of old and new processes and judge each call against the old side."""
        outcome = Outcome(warnings=list(self.warnings))
        if not self.results:
            return outcome
        assert self.against is not None
        assert self.relaunch is not None
        label = self.against.label
        if not passed:  # the test failed or skipped on its own: nothing to compare
            for key, result in self.results.items():
                self._keep(run, self._record_of(key, Status.NOT_COMPARED, result, "the test did not pass"))
            return outcome
        try:
            tested = check_test(
                self.against,
                self.relaunch,
                self.test_id,
                settings=self.settings.to_json(),
                profiles=dict(self.results),
                policy=self.settings.paired_policy(),
                pairs=self.settings.pairs,
                max_pairs=self.settings.max_pairs,
                budget_s=self.settings.budget_s,
                schedule=self.settings.schedule,
                turn=lambda: self.turns.turn("pairs", self.taken.setdefault("", [])),
            )
        except AgainstError as exc:
            outcome.failures.append(f"fxprof: {self.test_id} against {label}: {exc}")
            for key, result in self.results.items():
                self._keep(run, self._record_of(key, Status.ERROR, result, "see the test's failure"))
            return outcome
        if tested.skipped:
            outcome.warnings.append(f"fxprof: {self.test_id} was not compared: {tested.skipped}")
            for key, result in self.results.items():
                self._keep(run, self._record_of(key, Status.NOT_COMPARED, result, tested.skipped))
            return outcome
        for key, result in self.results.items():
            call = tested.calls.get(key)
            measured = call.profile if call is not None and call.profile is not None else None
            if tested.absent or call is None or call.comparison is None:
                where = "the test" if tested.absent else "this fxprof call"
                shown = ProfileResult.of(replace(measured, seconds=tested.seconds)) if measured is not None else result
                self.results[key] = shown
                self._keep(
                    run, self._record_of(key, Status.NEW, shown, f"{where} does not exist at {label}: not compared")
                )
                continue
            assert measured is not None  # both sides made the call
            judged = ProfileResult.of(replace(measured, comparison=call.comparison, seconds=tested.seconds))
            self.results[key] = judged
            ended = f"{tested.pairs} pairs measured" + (f", when {call.stopped} ended them" if call.stopped else "")
            status = self._judge(key, judged, outcome, ended)
            if call.left_out:
                outcome.warnings.append(
                    f"fxprof: {self.label(key)}: {call.left_out} of {tested.pairs} pairs left out, their processes "
                    "out of lock-step in this call (one side's test makes calls the other's does not, or a process "
                    "ended early)"
                )
            if call.kept_out_of_step:
                outcome.warnings.append(
                    f"fxprof: {self.label(key)}: {call.kept_out_of_step} of {tested.pairs} pairs ran out of "
                    "lock-step in this call and were kept, as fewer than two held it (one side's test makes calls "
                    "the other's does not, or a process ended early): their ratios carry more of the machine's noise"
                )
            self._keep(run, self._record_of(key, status, judged))
        return outcome

    def _record_of(self, key: str, status: Status, result: ProfileResult, why: str = "") -> ProfileRecord:
        c = result.comparison
        text = (
            summary_line(self.label(key), c)
            if status in JUDGED
            else f"{self.label(key)}: {status}" + (f" ({why})" if why else "")
        )
        # a plain string: a record crosses to xdist's controller, which cannot take an enum member
        report = profile_report(self.test_id, key, status.value, result, c)
        # when this call's measuring (and the test's, shared by its calls) held the machine: never overlapping another's
        report["measuring"] = [t.to_json() for t in (*self.taken.get(key, ()), *self.taken.get("", ()))]
        report["notices"] = [*capture_notices(result.capture), *self.notices.get(key, [])]
        if key in self.busy_recorded:  # recorded: how many of its processes stayed busy, as its warning says
            report["busy_processes"] = len(self.busy_recorded[key])
        return {"test_id": self.test_id, "key": key, "status": status.value, "summary": text, "report": report}

    def waited(self) -> tuple[int, float]:
        """The turns this test took and the seconds it waited for them."""
        turns = [t for taken in self.taken.values() for t in taken]
        return len(turns), sum(t.waited_s for t in turns)

    def _judge(self, key: str, result: ProfileResult, outcome: Outcome, stopped: str = "") -> Status:
        """How the profile's comparison ends the test (added to ``outcome``), and its status; ``stopped`` says
        how a revision's pairs ended."""
        label, c = self.label(key), result.comparison
        if c is not None and not c.against:  # a baseline recorded on a busy machine says so in every check
            weak = self._weak(key)
            if weak:
                outcome.warnings.append(f"fxprof: {weak}")
        if c is not None and c.status is Status.UNDECIDED and c.noisy_reason:  # nothing judged
            self._undecided(outcome, undecided_message(label, c, "run the check on a quieter machine"))
            return c.status
        if c is None:
            msg = f"fxprof: no baseline for {label} in {self.store.directory}; {rerecord_hint(self.test_id)}"
            (outcome.failures if self.reactions.missing is OnMissing.FAIL else outcome.skips).append(msg)
            return Status.MISSING
        if c.status is Status.MISMATCH and c.against:
            msg = (
                f"fxprof: {label} hands the model other inputs or another mode than at {c.against}, so it was "
                f"not compared (another setup measures something else, not a slowdown): {'; '.join(c.mismatches)}"
            )
            (outcome.failures if self.reactions.mismatch is OnMismatch.FAIL else outcome.skips).append(msg)
            return Status.MISMATCH
        if c.status is Status.MISMATCH and any(m.startswith(SETUP_FIELDS) for m in c.mismatches):
            msg = (
                f"fxprof: {label} hands the model other inputs or another mode than its baseline was recorded with, "
                f"so it was not compared (another setup measures something else, not a slowdown): "
                f"{'; '.join(c.mismatches)}. If the change is meant, {rerecord_hint(self.test_id)}"
            )
            (outcome.failures if self.reactions.mismatch is OnMismatch.FAIL else outcome.skips).append(msg)
            return Status.MISMATCH
        if c.status is Status.MISMATCH:
            msg = (
                f"fxprof: the baseline of {label} was recorded in another environment, so it was not compared: "
                f"{'; '.join(c.mismatches)}. Record and check on the same runner class ({rerecord_hint(self.test_id)})"
            )
            (outcome.failures if self.reactions.mismatch is OnMismatch.FAIL else outcome.skips).append(msg)
            return Status.MISMATCH
        if c.graph_changed:
            msg = "\n".join([f"fxprof: {label}: " + structural_lines(c)[0], *structural_lines(c)[1:]])
            msg += "\nstill compared: matched nodes, each module over both graphs' nodes, and the total"
            msg += "" if c.against else f"; {if_intended(self.test_id)}"
            (outcome.failures if self.reactions.graph_change is OnGraphChange.FAIL else outcome.warnings).append(msg)
        if c.status is Status.REGRESSION:
            advice = "" if c.against else f"\n  {if_intended(self.test_id)}"
            outcome.failures.append(regression_message(label, c) + advice)
        if c.status is Status.UNDECIDED:
            fix = (
                f"{stopped}; more pairs decide it (raise --fxprof-budget-s or --fxprof-pairs), or a quieter runner"
                if c.against
                else self._wide_bands(c)
            )
            self._undecided(outcome, undecided_message(label, c, fix))
        # what asks nothing of the user (a flag its confirmation cleared, a small node its aggregates gate, an item
        # too noisy to decide beside a failure) is no warning: the summary counts it, -v and the reports list it
        self.notices[key] = notice_lines(c)
        improved = improvement_lines(c)
        if improved and self.reactions.faster is not OnFaster.IGNORE:
            msg = "\n".join([f"fxprof: {label} got faster than {c.reference}", *improved])
            if not c.against:
                msg += f"\nrefresh the baseline so that it keeps guarding the new speed; {rerecord_hint(self.test_id)}"
            (outcome.failures if self.reactions.faster is OnFaster.FAIL else outcome.warnings).append(msg)
        return c.status

    def _wide_bands(self, c: Comparison) -> str:
        """What makes the bands of a baseline too wide to decide, and how to narrow them."""
        again = "record it again on a quieter machine, or from more processes (--fxprof-processes): "
        again += update_command(self.test_id)
        if c.recordings > 1:  # the drift between its recordings counts too, and a new recording keeps them
            return (
                f"its {c.recordings} recordings (or the processes of one) disagreed too much on these: start its "
                f"history afresh with `fxprof prune --history 1 --yes`, then {again}"
            )
        return f"its baseline's processes disagreed too much on these: {again}"

    def _undecided(self, outcome: Outcome, msg: str) -> None:
        """A check without a verdict fails, skips or passes with a warning, as ``--fxprof-on-undecided`` says."""
        reaction = self.reactions.undecided
        if reaction is OnUndecided.FAIL:
            outcome.failures.append(msg)
        elif reaction is OnUndecided.SKIP:
            outcome.skips.append(msg)
        else:
            outcome.warnings.append(msg)

    def _record(self, run: RunState, passed: bool) -> Outcome:
        """Profile the extra processes and hold the entries until ``settle`` knows every phase passed."""
        if not self.results or not passed:
            return Outcome()
        extra: dict[str, list[Any]] = {key: [] for key in self.results}
        seen: dict[str, list[Disturbance]] = {}
        count = self.settings.processes - 1
        if count > 0 and self.relaunch is not None:
            expected = {key: [n.info.key for n in r.nodes] for key, r in self.results.items()}
            with self.turns.turn("fresh processes", self.taken.setdefault("", [])):
                extra = sample(
                    self.relaunch,
                    self.test_id,
                    self.settings.to_json(),
                    count,
                    expected,
                    retries=BUSY_RETRIES,
                    disturbances=seen,
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

    def _weak(self, key: str) -> str:
        """The warning of a baseline entry recorded on a busy machine ("" where it was not, or there is none)."""
        try:
            baseline = self.baseline()
        except BaselineError:
            return ""
        if baseline is None or key not in baseline.entries:
            return ""
        return weak_baseline(self.label(key), baseline.entries[key], self.settings.policy())

    def settle(self, run: RunState, passed: bool) -> None:
        """At the end of the test (teardown included): count its failed calls, and queue the recorded baseline,
        or say why not."""
        run.failed_calls += self.failed_calls
        turns, waited = self.waited()
        run.turns += turns
        run.waited_s += waited
        if self.mode is not Mode.UPDATE or not self.results:
            return
        if self.pending is None or not passed:
            run.notes.append(f"{self.test_id}: not recorded, the test did not pass")
            for key, result in self.results.items():
                self._keep(run, self._record_of(key, Status.NOT_RECORDED, result))
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
            self._keep(run, self._record_of(key, Status.RECORDED, result))

    def _with_history(
        self, run: RunState, previous: BaselineFile | None, pending: dict[str, BaselineEntry]
    ) -> dict[str, BaselineEntry]:
        """The new entries, dated now, each keeping the earlier recordings of its previous entry where they are
        comparable (``store.history.carry``); a note says where a history restarted and why."""
        date, keep = history.now(), self.settings.history
        out = {}
        for key, entry in pending.items():
            before = previous.entries.get(key) if previous is not None else None
            out[key], why = history.carry(before, entry, keep, date)
            if why and before is not None:
                kept = len(before.recordings)
                run.notes.append(
                    f"{self.label(key)}: history restarted, {why}; its {kept} earlier recording(s) were not kept"
                )
        return out

    def _alone_from(self, key: str) -> int | None:
        barrier = self._barriers.get(key)
        return barrier.alone_from if barrier is not None else None

    def _write_samples(self, passed: bool) -> Outcome:
        if self.sample_out is None or not passed:
            return Outcome()
        if self.sample_request.get("entry"):  # against a revision: whole entries, and where the code came from
            tolerances = self.settings.tolerances()
            data: dict[str, Any] = {
                "calls": {
                    key: {"entry": entry_to_json(r.entry(tolerances)), "alone_from": self._alone_from(key)}
                    for key, r in self.results.items()
                }
            }
            roots = self.sample_request.get("against")
            if roots:
                data["foreign"] = foreign_modules(
                    Path(roots["new_root"]), Path(roots["old_root"]), extra=[Path(p) for p in roots["extra"]]
                )
            write_samples(self.sample_out, data)
            return Outcome()
        samples: dict[str, SampleJSON] = {
            key: {
                "nodes": [n.info.key for n in r.nodes],
                "run": run_to_json(r.run()),
                "disturbance": disturbance_to_json(r.disturbance),
            }
            for key, r in self.results.items()
        }
        write_samples(self.sample_out, samples)
        return Outcome()


class RunState:
    """Everything fxprof gathered in this pytest run (in the controller, also from xdist workers)."""

    def __init__(self, mode: Mode, store: BaselineStore, reactions: Reactions) -> None:
        self.mode = mode
        self.against = ""
        """Against a revision: the old side's label (``origin/main (1a2b3c4)``)."""
        self.store = store
        self.reactions = reactions
        self.records: list[ProfileRecord] = []
        self.writes: dict[str, dict[str, EntryJSON]] = {}
        self.dropped: dict[str, list[str]] = {}
        self.notes: list[str] = []
        self.errors: list[str] = []
        """What the run could not do and must fail for, though every test passed."""
        self.failed_calls = 0
        """Calls of the fixture that failed (and failed their tests)."""
        self.collected: set[str] = set()
        self.partial = False
        self.turns = 0
        """Measuring turns the run's tests took (``measure.turns``) ..."""
        self.waited_s = 0.0
        """... and the seconds they waited for other processes' turns to end."""
        self.lock_path: Path | None = None
        """The measuring lock's file (None: measured without turns)."""
        self._turns: Turns | None = None

    def measuring_turns(self) -> Turns:
        """The machine's measuring turns, one for the whole run (re-entrant within this process)."""
        if self._turns is None or self._turns.path != self.lock_path:
            self._turns = Turns(self.lock_path)
        return self._turns

    def add_record(self, record: ProfileRecord) -> None:
        """Keep ``record``; one of the same test and key from an earlier attempt at the test (a rerun plugin ran
        it again) is replaced, so that every view shows each fixture call once, as it ended."""
        same = (record["test_id"], record["key"])
        self.records = [r for r in self.records if (r["test_id"], r["key"]) != same]
        self.records.append(record)

    def queue_write(self, test_id: str, entries: dict[str, BaselineEntry]) -> None:
        self.writes[test_id] = {key: entry_to_json(e) for key, e in entries.items()}

    def test_payload(self, test: TestState, notes: Sequence[str], errors: Sequence[str]) -> FinishedTest:
        """What ``test`` left here (its records, its queued baseline, the entries it dropped, ``notes`` and
        ``errors``, its failed calls)."""
        return {
            "test_id": test.test_id,
            "records": list(test.records),
            "writes": self.writes.get(test.test_id),
            "dropped": self.dropped.get(test.test_id),
            "notes": list(notes),
            "errors": list(errors),
            "failed_calls": test.failed_calls,
            "turns": test.waited()[0],
            "waited_s": test.waited()[1],
        }

    def merge_test(self, payload: FinishedTest) -> None:
        """Take what a test left in a worker."""
        for record in payload["records"]:
            self.add_record(record)
        test_id = payload["test_id"]
        if payload["writes"] is not None:
            self.writes[test_id] = payload["writes"]
        if payload["dropped"] is not None:
            self.dropped[test_id] = payload["dropped"]
        self.notes.extend(payload["notes"])
        self.errors.extend(payload["errors"])
        self.failed_calls += payload["failed_calls"]
        self.turns += payload.get("turns", 0)
        self.waited_s += payload.get("waited_s", 0.0)

    def payload(self) -> WorkerPayload:
        return {"collected": sorted(self.collected), "partial": self.partial}

    def merge(self, payload: WorkerPayload) -> None:
        self.collected.update(payload["collected"])
        self.partial = self.partial or payload["partial"]

    def lost_worker(self, worker: str, error: object) -> None:
        """A worker ended without saying what it collected (it crashed): the tests it finished were received
        one by one, the one it was running left nothing, and no baseline can be called unused."""
        self.partial = True
        self.notes.append(
            f"pytest-xdist worker {worker} crashed ({' '.join(str(error).split())[:200] or 'no reason given'}): "
            "the results of the tests it had finished were kept, the test it was running left none, and "
            "baselines were not checked for tests that no longer exist (what it collected is unknown)"
        )

    def write_baselines(self) -> tuple[list[Path], list[str]]:
        """Write every queued baseline (each file atomically); return the files and any errors. Temporary files
        that a killed update left in the directory go first."""
        written, errors = [], []
        try:
            stale = self.store.remove_stale_temporaries()
        except OSError as exc:
            errors.append(f"could not remove temporary files a killed update left in {self.store.directory}: {exc}")
        else:
            if stale:
                names = ", ".join(p.name for p in stale)
                self.notes.append(f"removed {len(stale)} temporary file(s) a killed update left: {names}")
        for test_id, raw_entries in sorted(self.writes.items()):
            try:
                entries = {k: entry_from_json(v, f"{test_id} [{k}]") for k, v in raw_entries.items()}
                written.append(self.store.write(as_file(test_id, entries)))
            except (OSError, ValueError) as exc:
                errors.append(f"could not write the baseline of {test_id}: {exc}")
                for record in self.records:  # every view then says what became of it
                    if record["test_id"] == test_id and record["status"] == Status.RECORDED:
                        record["status"] = record["report"]["status"] = Status.NOT_RECORDED.value
                        label = f"{test_id} [{record['key']}]"
                        record["summary"] = f"{label}: not recorded (its baseline could not be written)"
        return written, errors

    def unused(self, selected_paths: Iterable[Path] | None, rootdir: Path) -> list[str]:
        """Baseline files whose test no longer exists, judged only where the run can know.

        A baseline is unused when its test file collected tests in this run but not this one, or when its
        test file is gone from a selected directory. A file that collected nothing (skipped at module
        level, ignored, left out by ``--lf``) says nothing about its tests. ``selected_paths`` is None
        when the run selected tests by anything finer than whole files or directories (``-k``, ``-m``,
        node ids, deselection): then nothing can be called unused.
        """
        if selected_paths is None or self.partial:
            return []
        roots = [p.resolve() for p in selected_paths]
        collected_files = {test_id.partition("::")[0] for test_id in self.collected}
        collected_names = {self.store.path_for(test_id).name for test_id in self.collected}
        out = []
        for path, test_id in self.store.recorded_tests():
            if test_id is None:
                if path.name not in collected_names:  # a collected test's own file: that test reports it
                    out.append(f"{path.name} (unreadable: {self.store.problem_of(path)})")
                continue
            if why_unused(test_id, self.collected, collected_files, rootdir, roots) is not None:
                out.append(f"{path.name} ({test_id})")
        return out


def why_unused(
    test_id: str, collected: Set[str], collected_files: Set[str], rootdir: Path, roots: Sequence[Path] | None
) -> str | None:
    """Why a baseline's test no longer exists, or None when it exists or the collection cannot tell.

    Its test was not collected, and either its test file collected other tests, or the file is gone (from
    one of the selected paths ``roots``, resolved; None: from anywhere under ``rootdir``). A file that
    collected nothing (skipped at module level, ignored) says nothing about its tests. Shared by the
    plugin's unused baselines and ``fxprof prune``.
    """
    if test_id in collected:
        return None
    file_part = test_id.partition("::")[0]
    if file_part in collected_files:
        return f"not collected, though its file {file_part} collected other tests"
    test_file = (rootdir / file_part).resolve()
    if not test_file.exists() and (roots is None or any(r == test_file or r in test_file.parents for r in roots)):
        return f"its test file {file_part} is gone"
    return None
