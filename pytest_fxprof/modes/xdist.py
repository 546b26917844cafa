"""pytest-xdist's two sides: ``XdistController``, registered only in a controller, and ``XdistWorker``, only in a
worker, so that their hooks exist only where xdist does.

A worker sends what each test profiled on the test's teardown report, and what it collected when it finishes;
the controller gathers both, hands each worker the revision a run against a revision exported (so that all of
them share one tree), and writes.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

import pytest

from pytest_fxprof.modes.base import CALLS_KEY, RunMode
from pytest_fxprof.session.run import WORKER_KEY, FinishedTest, WorkerPayload


class XdistController:
    def __init__(self, mode: RunMode) -> None:
        self.mode = mode

    def pytest_configure_node(self, node: Any) -> None:
        against = getattr(self.mode, "against", None)
        if against is not None and against.revision is not None:
            node.workerinput["fxprof_against"] = against.revision.to_json()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        payload: FinishedTest | None = getattr(report, "fxprof", None)
        if payload is not None:
            self.mode.run.merge_test(payload)

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        payload: WorkerPayload | None = getattr(node, "workeroutput", {}).get(WORKER_KEY)
        if payload is not None:
            self.mode.run.merge(payload)
        else:
            worker = str(getattr(getattr(node, "gateway", None), "id", "?"))
            self.mode.run.lost_worker(worker, error)


class XdistWorker:
    def __init__(self, mode: RunMode) -> None:
        self.mode = mode

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        """On the teardown report, what the test left here (its records, its baselines to write, the notes and
        errors its end added), as the plugin's own hook settled it: the one report xdist sends on at once."""
        run = self.mode.run
        notes, errors = len(run.notes), len(run.errors)
        report = yield
        calls = item.stash.get(CALLS_KEY, None)
        if report.when == "teardown" and calls is not None:
            payload = run.test_payload(calls, run.notes[notes:], run.errors[errors:])
            report.fxprof = json.loads(json.dumps(payload))  # plain JSON data only: execnet refuses the rest
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """What this worker collected, for the controller, which writes."""
        config, run = session.config, self.mode.run
        if config.getoption("keyword") or config.getoption("markexpr"):
            run.partial = True
        config.workeroutput[WORKER_KEY] = run.payload()  # type: ignore[attr-defined]
