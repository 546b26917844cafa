"""``ChildMode``: a fresh process that a recording, a confirmation or a pair against a revision started
(``--fxprof-sample REQUEST``). It measures the test its parent named with the parent's settings and writes
what it measured; a side against a revision also says what became of its test whatever that was (skipped as
it was collected, failed, never called the fixture), so that its parent never waits on silence.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fxprof.against.compare import SideWatch
from pytest_fxprof.measure.sampling import SampleRequest, die_with_parent, write_samples
from pytest_fxprof.modes.base import RunMode
from pytest_fxprof.session.child import ChildCalls
from pytest_fxprof.settings import Mode, Settings, from_json
from pytest_fxprof.store.files import loads

if TYPE_CHECKING:
    from pytest_fxprof.measure.sampling import Relaunch
    from pytest_fxprof.session.run import RunState


class ChildMode(RunMode):
    mode = Mode.SAMPLE
    calls_class = ChildCalls
    gated = False

    def __init__(self, config: pytest.Config, run: RunState) -> None:
        super().__init__(config, run)
        path = Path(config.getoption("fxprof_sample"))
        try:
            self.request: SampleRequest = loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise pytest.UsageError(f"--fxprof-sample {path}: cannot read the request ({exc})") from None
        die_with_parent(self.request.get("parent"))
        self.watch = SideWatch(self.request["test_id"]) if self.request.get("entry", False) else None
        """A side against a revision: what became of its test."""

    def settings(self, item: pytest.Item, marked: Settings) -> Settings:
        return from_json(self.request["settings"])  # the parent's settings, whatever the markers say here

    def follows_markers(self) -> bool:
        return False

    def call_options(self, item: pytest.Item, relaunch: Relaunch) -> dict[str, Any]:
        """Its parent's request, and where to write: for the test it named (the process's other tests run
        unjudged); it measures inside its parent's turn."""
        out = Path(self.request["out"]) if self.request["test_id"] == item.nodeid else None
        run = self.run
        return {
            "store": run.store,
            "reactions": run.reactions,
            "relaunch": relaunch,
            "out": out,
            "request": self.request,
        }

    # A side's watch over its test ---------------------------------------------------------------------------

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        if self.watch is not None and item.nodeid == self.watch.test_id:
            self.watch.collected = True

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(
        self, collector: pytest.Collector
    ) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
        report = yield
        watch = self.watch
        if watch is not None and report.skipped and watch.test_id.startswith(report.nodeid + "::"):
            # a test module (or class) that skips as it is collected: the test skipped
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
            watch.note("collect", "skipped", str(reason))
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        report = yield
        if self.watch is not None and item.nodeid == self.watch.test_id:
            reason = report.longrepr[2] if report.skipped and isinstance(report.longrepr, tuple) else ""
            self.watch.note(report.when, report.outcome, str(reason))
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.watch is None:
            return
        out = Path(self.request["out"])
        reported = self.watch.report(int(exitstatus), collection_failed=session.testsfailed > 0)
        if reported is not None and not out.exists():  # its fxprof calls wrote nothing: say what became of it
            write_samples(out, reported)
