"""``--fxprof-sample REQUEST``: a fresh process that a recording, a confirmation or a pair against a revision
started: ``SampleMode`` (the process) and ``SampleCalls`` (a test's calls, measured and written to the file its
parent reads, never judged here). It measures the tests its parent named, in its parent's order, each with the
parent's settings, and writes what it measured of each; a side against a revision also says what became of each
test whatever that was (skipped or failed as it was collected, failed, never called the fixture, absent), which
test it is running (so that its parent sees one that hangs) and how long each took.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fxprof.against.answers import node_facts
from pytest_fxprof.against.compare import NOT_FOUND, SideWatch
from pytest_fxprof.against.origin import foreign_modules
from pytest_fxprof.measure.lockstep import Barrier, lockstep_barrier
from pytest_fxprof.measure.sampling import (
    SampleJSON,
    SampleRequest,
    ServedTiming,
    capture_from_request,
    tail,
    write_samples,
)
from pytest_fxprof.measure.zygote import die_with_parent
from pytest_fxprof.modes.base import CallPlan, Calls, RunMode
from pytest_fxprof.modes.isolated import isolating
from pytest_fxprof.records.disturbance import disturbance_to_json
from pytest_fxprof.records.measurement import BaselineEntry, Tolerances
from pytest_fxprof.session.reactions import Outcome
from pytest_fxprof.settings import Mode, Settings, from_json
from pytest_fxprof.store.baseline import entry_to_json, run_to_json
from pytest_fxprof.store.files import loads

if TYPE_CHECKING:
    from pytest_fxprof.measure.sampling import Relaunch
    from pytest_fxprof.result import ProfileResult
    from pytest_fxprof.session.run import RunState


class SampleCalls(Calls):
    """The calls of the test its parent asked for (``out``: where their samples go; None for the other tests of
    the process, which run unjudged). ``request``: what the parent asked (``entry``: send whole entries, a side
    against a revision; ``against``: check that this, the old side, imported no module of the working tree;
    ``lockstep``: pass for pass with a twin)."""

    mode = Mode.SAMPLE

    def __init__(
        self, test_id: str, settings: Settings, *, out: Path | None, request: SampleRequest, **kwargs: Any
    ) -> None:
        super().__init__(test_id, settings, **kwargs)
        self.out = out
        self.request = request
        self.side = request.get("entry", False)
        """A side against a revision (else one of a recording's processes, or a confirmation)."""
        self._barriers: dict[str, Barrier] = {}
        """In a duet's process: each call's lock-step with its twin (whether it held, ``Barrier.alone_from``)."""
        self.proving = request.get("fingerprint", False)
        """A side before any pair (``against.proof``): each call captured and fingerprinted, nothing timed."""

    def plan(self, key: str) -> CallPlan:
        """Where the side only fingerprints its calls: every call unmeasured, its fingerprint kept. In a duet: the
        call's lock-step with its twin. A side counts FLOPs (unless its parent said not) and times no reference
        workload (the paired rule divides by nothing: both sides of a pair meet one machine); it captures the
        forward as its first pair did, where it was told (``TestRequest.captured``)."""
        barrier = lockstep_barrier(self.request.get("lockstep"), key, test_id=self.test_id)
        if barrier is not None:
            self._barriers[key] = barrier
        captured = self.request.get("captured")
        return CallPlan(
            flops=self.side and self.request.get("flops", True),
            reference=not self.side,
            barrier=barrier,
            known=capture_from_request(captured.get(key) if isinstance(captured, dict) else None),
            proof=(lambda seen: True) if self.proving else None,
        )

    def _alone_from(self, key: str) -> int | None:
        barrier = self._barriers.get(key)
        return barrier.alone_in_counted if barrier is not None else None

    def finish(self, run: RunState, passed: bool) -> Outcome:
        """Write the samples (or, for a side, whole entries) the parent asked for."""
        if self.out is None or not passed:
            return Outcome()
        if self.proving:  # before any pair: each call's fingerprint, its unmeasured profile, where the code came from
            tolerances = self.settings.tolerances()
            proved: dict[str, Any] = {
                "calls": {
                    key: {
                        "fingerprint": r.fingerprint.to_json() if r.fingerprint is not None else None,
                        # what the run's own process reads instead of capturing an unchanged test's call again
                        "entry": entry_to_json(_side_entry(r, tolerances)),
                        "facts": node_facts(r.nodes),
                    }
                    for key, r in self.results.items()
                },
                "spent": dict(self.spent),
            }
            self._foreign(proved)
            write_samples(self.out, proved)
            return Outcome()
        if self.side:  # against a revision: whole entries, and where the code came from
            tolerances = self.settings.tolerances()
            data: dict[str, Any] = {
                "calls": {
                    key: {
                        "entry": entry_to_json(_side_entry(r, tolerances)),
                        "alone_from": self._alone_from(key),
                        # the first pair's: what the run's own process reads instead of capturing the call again
                        **({} if self.request.get("captured") else {"facts": node_facts(r.nodes)}),
                    }
                    for key, r in self.results.items()
                },
                "spent": dict(self.spent),
            }
            self._foreign(data)
            write_samples(self.out, data)
            return Outcome()
        samples: dict[str, SampleJSON] = {
            key: {
                "nodes": [n.info.key for n in r.nodes],
                "run": run_to_json(r.run()),
                "disturbance": disturbance_to_json(r.disturbance),
            }
            for key, r in self.results.items()
        }
        write_samples(self.out, {"calls": samples, "spent": dict(self.spent)})
        return Outcome()

    def _foreign(self, data: dict[str, Any]) -> None:
        """The old side's import check: the modules it imported from the working tree, in ``data``."""
        roots = self.request.get("against")
        if roots:
            data["foreign"] = foreign_modules(
                Path(roots["new_root"]), Path(roots["old_root"]), extra=[Path(p) for p in roots["extra"]]
            )


def _side_entry(result: ProfileResult, tolerances: Tolerances) -> BaselineEntry:
    """A side's entry of one call (its run's ``total_ns`` is 0 where the process timed no plain call, which
    ``against.answers.side_profile`` leaves out of the plain total)."""
    return result.entry(tolerances)


class SampleMode(RunMode):
    mode = Mode.SAMPLE
    calls_class = SampleCalls
    gated = False

    def __init__(self, config: pytest.Config, run: RunState) -> None:
        super().__init__(config, run)
        path = Path(config.getoption("fxprof_sample"))
        try:
            self.request: SampleRequest = loads(path.read_text(encoding="utf-8"))
            self.tests = {t["test_id"]: (k, t) for k, t in enumerate(self.request["tests"])}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise pytest.UsageError(f"--fxprof-sample {path}: cannot read the request ({exc})") from None
        die_with_parent(self.request.get("parent"))
        self.watches = {t: SideWatch(t) for t in self.tests}
        """What became of each of its tests."""
        self.began = time.monotonic()
        import pytest_fxprof.measure.profiler  # noqa: F401 (its imports are the process's start, not its first test's)

        self.started: dict[str, float] = {}
        self.seconds: dict[str, float] = {}
        self.shared: dict[str, str] = {}
        """Per test that ran in this process, not one of its own (``modes.isolated``): why."""

    def settings(self, item: pytest.Item, marked: Settings) -> Settings:
        asked = self.tests.get(item.nodeid)
        # the parent's settings, whatever the markers say here
        return from_json(asked[1]["settings"]) if asked is not None else marked

    def follows_markers(self) -> bool:
        return False

    def call_options(self, item: pytest.Item, relaunch: Relaunch) -> dict[str, Any]:
        """Its parent's request for the test, and where to write (the process's other tests run unjudged); it
        measures inside its parent's turn."""
        asked = self.tests.get(item.nodeid)
        request: dict[str, Any] = dict(self.request)
        if asked is not None:
            index, test = asked
            request["calls"] = list(test.get("calls", []))
            request["captured"] = dict(test.get("captured", {}))
            if "lockstep" in self.request:
                request["lockstep"] = {**self.request["lockstep"], "test": index}
        run = self.run
        return {
            "store": run.store,
            "reactions": run.reactions,
            "relaunch": relaunch,
            "out": Path(asked[1]["out"]) if asked is not None else None,
            "request": request,
        }

    # The tests it serves, in its parent's order -------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        wanted = [item for item in items if item.nodeid in self.tests]
        others = [item for item in items if item.nodeid not in self.tests]
        if others:
            config.hook.pytest_deselected(items=others)
        items[:] = sorted(wanted, key=lambda item: self.tests[item.nodeid][0])

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.started[nodeid] = time.monotonic()
        progress = self.request.get("progress")
        if progress and nodeid in self.tests:
            Path(progress).write_text(nodeid, encoding="utf-8")

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        if nodeid in self.started:
            self.seconds[nodeid] = time.monotonic() - self.started[nodeid]

    # A side's watch over its tests --------------------------------------------------------------------------

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        watch = self.watches.get(item.nodeid)
        if watch is not None:
            watch.collected = True

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(
        self, collector: pytest.Collector
    ) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
        report = yield
        if report.skipped or report.failed:
            # a test module (or class) that skips or fails as it is collected: so do its tests
            reason = report.longrepr[2] if report.skipped and isinstance(report.longrepr, tuple) else ""
            for watch in self.watches.values():
                if watch.test_id.startswith((report.nodeid + "::", report.nodeid + "/")):
                    watch.note("collect", report.outcome, str(reason) or tail(report.longreprtext))
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        """Each test it was asked for in a process of its own (``modes.isolated``), where it can fork; not where it
        only fingerprints them (``against.proof``): nothing is timed, and what a test leaks into the tests after it
        changes their fingerprints, which then measures them in pairs, each in a process of its own."""
        if item.nodeid not in self.tests or self.request.get("fingerprint"):
            return None
        return isolating(item, self.shared) or None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        watch = self.watches.get(report.nodeid)
        if watch is not None:
            if report.skipped and isinstance(report.longrepr, (tuple, list)):
                reason = str(report.longrepr[2])
            else:
                reason = tail(report.longreprtext) if report.failed else ""
            watch.note(report.when, report.outcome, reason)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        single = len(self.tests) == 1
        for test_id, watch in self.watches.items():
            out = Path(self.tests[test_id][1]["out"])
            # one test named on the command line: pytest says whether it was there; several: each file collected
            # without an error says it of its tests
            absent = int(exitstatus) in NOT_FOUND and not session.testsfailed if single else not watch.failed
            if not out.exists():  # its fxprof calls wrote nothing: say what became of it
                write_samples(out, watch.report(absent=absent))
        timing = self.request.get("timing")
        if timing:
            served: ServedTiming = {"tests": self.seconds, "session_s": time.monotonic() - self.began}
            if self.shared:
                served["shared"] = self.shared
            write_samples(Path(timing), served)
