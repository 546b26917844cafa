"""``XdistController``: registered only in an xdist controller, so that its hooks exist only where xdist does.

Gathers what each test profiled as its teardown report arrives, and what each worker collected when it
finishes; hands each worker the revision a run against a revision exported, so that all of them share one tree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_fxprof.modes.base import RunMode
from pytest_fxprof.session.run import WORKER_KEY, FinishedTest, WorkerPayload

if TYPE_CHECKING:
    import pytest


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
