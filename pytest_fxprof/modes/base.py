"""What every mode shares: ``RunMode`` (what a mode offers the fixture and the plugin's hooks), ``Calls`` (the
``fxprof`` calls of one test, each captured and profiled as its mode's ``CallPlan`` says, kept until the test
ends: ``finish`` when its call phase ends, ``settle`` after its teardown), and the run without the gate
(``OffMode``, ``OffCalls``: calls captured and run, nothing timed or judged).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from pytest_fxprof.against.campaign import check_test
from pytest_fxprof.against.compare import Against, TestOutcome
from pytest_fxprof.measure.sampling import BUSY_RETRIES, Relaunch, SamplingError, plugin_args
from pytest_fxprof.measure.serving import Spent
from pytest_fxprof.measure.turns import Turn, Turns
from pytest_fxprof.records.disturbance import least_disturbed
from pytest_fxprof.records.measurement import Capture, capture_difference
from pytest_fxprof.records.profile import Profile
from pytest_fxprof.records.verdicts import JUDGED, Status
from pytest_fxprof.result import ProfileResult
from pytest_fxprof.session.reactions import Confirm, Outcome, Reactions, UsageError
from pytest_fxprof.session.run import RunState
from pytest_fxprof.settings import Mode, Settings
from pytest_fxprof.store.baseline import BaselineStore
from pytest_fxprof.views.render import capture_notices, coarse_line, summary_line
from pytest_fxprof.views.report import ProfileRecord, ProfileReportJSON, profile_report

if TYPE_CHECKING:
    from pytest_fxprof.capture.step import Step
    from pytest_fxprof.measure.lockstep import Barrier
    from pytest_fxprof.records.fingerprint import Fingerprint


CALLS_KEY = pytest.StashKey["Calls"]()
"""Where a test's item holds its ``Calls`` (set by the fixture)."""


class RunMode:
    """One pytest run's mode. Registered with pytest as a plugin, so that a mode's own hooks run only in its
    runs; the plugin's hooks hand each test over to ``calls``."""

    mode: ClassVar[Mode]
    calls_class: ClassVar[type[Calls]]
    """What a test's ``fxprof`` calls are in this mode."""
    gated: ClassVar[bool] = True
    """Whether the run judges or records (its tests carry their verdicts on their reports, its end writes)."""

    def __init__(self, config: pytest.Config, run: RunState) -> None:
        self.config = config
        self.run = run
        self.worker = hasattr(config, "workerinput")
        """An xdist worker: the controller gathers what its tests left and writes."""

    def settings(self, item: pytest.Item, marked: Settings) -> Settings:
        """The settings a test is measured with: its markers' over the run's (``marked``)."""
        return marked

    def follows_markers(self) -> bool:
        """Whether a marker added while the test runs changes its settings."""
        return True

    def calls(self, item: pytest.Item, settings: Settings, relaunch: Relaunch) -> Calls:
        """The ``fxprof`` calls of the test ``item``, made by this mode's rules."""
        return self.calls_class(item.nodeid, settings, **self.call_options(item, relaunch))

    def call_options(self, item: pytest.Item, relaunch: Relaunch) -> dict[str, Any]:
        """What every call of a test takes from the run (a mode adds its own)."""
        run = self.run
        return {"store": run.store, "reactions": run.reactions, "relaunch": relaunch, "turns": run.measuring_turns()}


@dataclass(frozen=True)
class CallPlan:
    """How a mode has one call profiled: what ``profile_module`` is told beyond the test's settings."""

    measured: bool = True
    """Whether the nodes are timed (against a revision the pairs' processes measure instead; off, nothing is)."""
    fingerprinted: bool = False
    """Whether a measured profile carries its computation's fingerprint (what a recording stores)."""
    flops: bool = True
    """Whether each node's floating-point operations are counted."""
    reference: bool = True
    """Whether the reference workload is timed (what a stored baseline's speed factor divides by)."""
    barrier: Barrier | None = None
    """The call's lock-step with a twin process (a duet's side)."""
    known: Capture | None = None
    """How an earlier process captured the call's forward (``capture_module``'s ``known``)."""
    proof: Callable[[Fingerprint], bool] | None = None
    """What tells, from the fingerprint read at capture, that the call needs no measuring (None: it is measured)."""
    earlier: Profile | None = None
    """The call as a process that ran this test before measured it, standing for this process's own profile."""
    cold: str = ""
    """What the table of a call that is not timed says of it (``Profile.cold``; "": the default)."""


class Calls:
    """The ``fxprof`` calls of one test."""

    mode: ClassVar[Mode]
    takes_turns: ClassVar[bool] = False
    """Whether a call's profile is measured in a measuring turn of the machine (``measure.turns``)."""

    def __init__(
        self,
        test_id: str,
        settings: Settings,
        *,
        store: BaselineStore,
        reactions: Reactions,
        relaunch: Relaunch | None = None,
        turns: Turns | None = None,
    ) -> None:
        self.test_id = test_id
        self.settings = settings
        self.store = store
        self.reactions = reactions
        self.relaunch = relaunch
        """How to start a fresh process of this test (None: none can be started)."""
        self.turns = turns or Turns(None)
        """The machine's measuring turns: every measuring section of this test takes one (``measure.turns``)."""
        self.taken: dict[str, list[Turn]] = {}
        """Each call's turns (its profile, its confirmation), and under ``""`` the test's own (the fresh processes
        of a recording, the pairs against a revision)."""
        self.results: dict[str, ProfileResult] = {}
        self._unnamed = 0
        self._unnamed_steps = 0
        self.warnings: list[str] = []
        self.records: list[ProfileRecord] = []  # also handed to the run; what this test's pytest report carries
        self.failed_calls = 0  # counted by the caller, which sees every way a call can fail
        self.notices: dict[str, list[str]] = {}
        """Per call, what the gate saw but does not fail on or ask anything about (``notice_lines``)."""
        self.spent: dict[str, float] = {}
        """Seconds this test's profiles spent capturing, warming up and measuring (``Spent.PHASES``)."""
        self.processes_spent = Spent()
        """Where the time of the fresh processes that measured this test alone went."""

    # A call ---------------------------------------------------------------------------------------------------

    def key(self, name: str | None, *, step: bool = False) -> str:
        """The call's key in the baseline: ``name``, else ``call0``, ``call1``, ... (``step0``, ... for steps)."""
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
        """Capture and profile one call of the fixture as the mode's ``plan`` says, judged as the mode judges it."""
        from pytest_fxprof.measure.profiler import profile_module

        key = self.key(name, step=step is not None)
        plan = self.plan(key)

        def cold(profile: Profile) -> ProfileResult:
            return ProfileResult.of(profile if profile.measured else replace(profile, cold=plan.cold))

        def measure() -> ProfileResult:
            if plan.earlier is not None:
                return cold(plan.earlier)
            return cold(
                profile_module(
                    module,
                    args,
                    kwargs,
                    name=key,
                    protocol=self.settings.protocol(),
                    measured=plan.measured,
                    flops=plan.flops,
                    reference=plan.reference,
                    barrier=plan.barrier,
                    leaf_modules=leaf_modules,
                    tracer=tracer,
                    capture=self.settings.capture,
                    engine=self.settings.engine,
                    step=step,
                    spent=self.spent,
                    known=plan.known,
                    allocator=self.settings.allocator,
                    unchanged=plan.proof,
                    fingerprinted=plan.fingerprinted,
                )
            )

        started = time.perf_counter()
        taken = self.taken.setdefault(key, [])
        with self.turns.turn("profile", taken) if self.takes_turns else contextlib.nullcontext():
            result = measure()
            if self.takes_turns:  # a profile measured on a busy machine is measured again, the least disturbed kept
                result = self.calmer(key, result, measure)
        result = self.judged(key, result, measure)
        result = replace(result, seconds=time.perf_counter() - started)
        self.results[key] = result
        return result

    def plan(self, key: str) -> CallPlan:
        """How this mode has the call ``key`` profiled (every mode but ``OffMode`` says its own)."""
        return CallPlan()

    def judged(self, key: str, result: ProfileResult, measure: Callable[[], ProfileResult]) -> ProfileResult:
        """``result`` with the mode's comparison, where the mode compares a call as soon as it is measured (a check
        against stored baselines; ``measure`` takes the call's profile again, to confirm)."""
        return result

    def calmer(self, key: str, result: ProfileResult, measure: Callable[[], ProfileResult]) -> ProfileResult:
        """``result``, or where it was measured on a busy machine, the least disturbed of it and up to
        ``BUSY_RETRIES`` more profiles taken in this process."""
        tries = [result]
        while tries[-1].busy and len(tries) <= BUSY_RETRIES:
            again = measure()
            self.same_capture(key, result, again, "(the first profile was measured on a busy machine)")
            tries.append(again)
        return tries[least_disturbed([t.disturbance for t in tries])]

    def same_capture(self, key: str, first: ProfileResult, again: ProfileResult, why: str) -> None:
        """Refuse a call measured again in this process (``why``) whose model captured another graph."""
        keys, again_keys = [n.info.key for n in first.nodes], [n.info.key for n in again.nodes]
        if keys != again_keys:
            raise SamplingError(
                f"fxprof: {self.label(key)}: measured again in this process {why}, the model captured a different "
                "graph; the capture must be deterministic (a model whose graph depends on state cannot be gated): "
                + capture_difference(keys, again_keys, ("the first profile's capture", "the one measured again"))
            )

    def label(self, key: str) -> str:
        return f"{self.test_id} [{key}]"

    # The end of the test ------------------------------------------------------------------------------------

    def finish(self, run: RunState, passed: bool) -> Outcome:
        """Decide how the test ends, when its call phase has, and hand its records to ``run``."""
        raise NotImplementedError

    def settle(self, run: RunState, passed: bool) -> None:
        """At the end of the test (teardown included): count its failed calls and measuring turns."""
        run.failed_calls += self.failed_calls
        turns, waited = self.waited()
        run.turns += turns
        run.waited_s += waited
        run.spent.add_test(0.0, self.spent)
        run.spent.add(self.processes_spent)
        run.spent.waiting_s += waited

    def keep(self, run: RunState, record: ProfileRecord) -> None:
        self.records.append(record)
        run.add_record(record)

    def record_of(self, key: str, status: Status, result: ProfileResult, why: str = "") -> ProfileRecord:
        """The plain-data record of one call, as every view and xdist's controller read it."""
        c = result.comparison
        text = (
            summary_line(self.label(key), c)
            if status in JUDGED
            else f"{self.label(key)}: {status}" + (f" ({why})" if why else "")
        )
        if result.capture.method != "symbolic_trace":  # how blame can see into the model: said where not the default
            text += f"; captured with {result.capture.method}"
        # a plain string: a record crosses to xdist's controller, which cannot take an enum member
        report = profile_report(self.test_id, key, status.value, result, c)
        # when this call's measuring (and the test's, shared by its calls) held the machine: never overlapping another's
        report["measuring"] = [t.to_json() for t in (*self.taken.get(key, ()), *self.taken.get("", ()))]
        report["notices"] = [*capture_notices(result.capture), *self.notices.get(key, [])]
        coarse = coarse_line(result.capture, result.nodes)
        if coarse:
            report["coarse"] = coarse
        self.extend_report(key, report)
        return {"test_id": self.test_id, "key": key, "status": status.value, "summary": text, "report": report}

    def extend_report(self, key: str, report: ProfileReportJSON) -> None:
        """What the mode adds to a call's JSON report."""

    def measure_pairs(self, against: Against, profiles: dict[str, Profile], *, prove: bool = False) -> TestOutcome:
        """The test measured alone in pairs of old and new processes against ``against`` (at this test's pairs,
        budget and schedule, in the machine's measuring turn), each call of ``profiles`` judged by the paired
        rule (``against.campaign.check_test``); a call slower or undecided is confirmed by a second set of pairs
        unless ``--fxprof-confirm off``; ``prove``: where both sides' fingerprints agree, no pairs
        (``against.proof``)."""
        assert self.relaunch is not None
        return check_test(
            against,
            self.relaunch,
            self.test_id,
            settings=self.settings.to_json(),
            profiles=profiles,
            policy=self.settings.paired_policy(),
            pairs=self.settings.pairs,
            max_pairs=self.settings.max_pairs,
            budget_s=self.settings.budget_s,
            schedule=self.settings.schedule,
            turn=lambda: self.turns.turn("pairs", self.taken.setdefault("", [])),
            spent=self.processes_spent,
            confirm=self.reactions.confirm is not Confirm.OFF,
            prove=prove,
        )

    def waited(self) -> tuple[int, float]:
        """The turns this test took and the seconds it waited for them."""
        turns = [t for taken in self.taken.values() for t in taken]
        return len(turns), sum(t.waited_s for t in turns)


class OffCalls(Calls):
    """Without ``--fxprof``: each call is captured and run, nothing timed, nothing judged."""

    mode = Mode.OFF

    def plan(self, key: str) -> CallPlan:
        return CallPlan(measured=False)

    def finish(self, run: RunState, passed: bool) -> Outcome:
        for key, result in self.results.items():
            self.keep(run, self.record_of(key, Status.UNMEASURED, result))
        return Outcome(warnings=list(self.warnings))


class OffMode(RunMode):
    """Without ``--fxprof``, ``--fxprof-update`` or ``--fxprof-against``: calls are captured and run, untimed."""

    mode = Mode.OFF
    calls_class = OffCalls
    gated = False


def relaunch_of(config: pytest.Config) -> Relaunch:
    """How to start pytest again as this run was started (``measure.sampling.Relaunch``)."""
    return Relaunch(
        invocation_dir=config.invocation_params.dir,
        rootdir=config.rootpath,
        inifile=config.inipath,
        extra_args=plugin_args(config.invocation_params.args),
    )
