"""The run's records: one per fixture call, however often its test ran (no torch, no pytest run)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from pytest_fxprof.session.reactions import Reactions
from pytest_fxprof.session.run import FinishedTest, RunState
from pytest_fxprof.settings import Mode
from pytest_fxprof.store.baseline import BaselineStore
from pytest_fxprof.views.report import ProfileRecord, ProfileReportJSON


def record(test_id: str, key: str, status: str) -> ProfileRecord:
    summary, report = f"{test_id} [{key}]: {status}", cast("ProfileReportJSON", {})  # no view reads its report
    return {"test_id": test_id, "key": key, "status": status, "summary": summary, "report": report}


def test_a_test_run_again_keeps_only_its_last_record_of_each_call(tmp_path: Path) -> None:
    run = RunState(Mode.CHECK, BaselineStore(tmp_path), Reactions())
    run.add_record(record("t.py::a", "call0", "regression"))
    run.add_record(record("t.py::a", "call1", "pass"))
    run.add_record(record("t.py::b", "call0", "pass"))
    run.add_record(record("t.py::a", "call0", "pass"))  # the rerun of t.py::a passed
    assert [(r["test_id"], r["key"], r["status"]) for r in run.records] == [
        ("t.py::a", "call1", "pass"),
        ("t.py::b", "call0", "pass"),
        ("t.py::a", "call0", "pass"),
    ]


def finished(test_id: str, *records: ProfileRecord) -> FinishedTest:
    return {
        "test_id": test_id,
        "records": list(records),
        "writes": None,
        "dropped": None,
        "notes": [],
        "errors": [],
        "failed_calls": 0,
        "turns": 1,
        "waited_s": 0.5,
        "spent": {"capture_s": 1.5, "measuring_s": 2.0},
        "processes_spent": {"processes": 2, "processes_s": 6.0, "tests_s": 1.0},
    }


def test_where_a_workers_tests_spent_their_time_adds_up_in_the_controller(tmp_path: Path) -> None:
    controller = RunState(Mode.AGAINST, BaselineStore(tmp_path), Reactions())
    controller.merge_test(finished("t.py::a"))
    controller.merge_test(finished("t.py::b"))
    spent = controller.spent.to_json()
    assert (spent["capture_s"], spent["measuring_s"], spent["warmup_s"]) == (3.0, 4.0, 0.0)
    assert (spent["processes"], spent["processes_s"], spent["tests_s"]) == (4, 12.0, 2.0)
    assert spent["waiting_s"] == 1.0


def test_records_from_workers_merge_the_same_way(tmp_path: Path) -> None:
    controller = RunState(Mode.CHECK, BaselineStore(tmp_path), Reactions())
    controller.merge_test(finished("t.py::a", record("t.py::a", "call0", "regression")))
    controller.merge_test(finished("t.py::a", record("t.py::a", "call0", "pass")))  # run again
    controller.merge_test(finished("t.py::b", record("t.py::b", "call0", "pass")))
    assert [(r["test_id"], r["status"]) for r in controller.records] == [("t.py::a", "pass"), ("t.py::b", "pass")]
    assert (controller.turns, controller.waited_s) == (3, 1.5)  # every test's measuring turns and their waits


def test_a_worker_that_crashed_makes_the_run_partial_and_says_what_was_kept(tmp_path: Path) -> None:
    controller = RunState(Mode.UPDATE, BaselineStore(tmp_path), Reactions())
    controller.merge_test(finished("t.py::a", record("t.py::a", "call0", "recorded")))
    controller.lost_worker("gw0", "Not properly terminated")
    assert controller.partial  # what it collected is unknown: nothing may be called unused
    assert [r["test_id"] for r in controller.records] == ["t.py::a"]
    (note,) = controller.notes
    assert note.startswith("pytest-xdist worker gw0 crashed (Not properly terminated): the results of the tests")
