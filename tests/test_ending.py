"""How a comparison ends a test (``session.ending``): one row per way, on hand-built comparisons."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from pytest_fxprof.against.rounds import StopReason
from pytest_fxprof.judge.decision import Policy, compare
from pytest_fxprof.modes.check import noisy
from pytest_fxprof.records.verdicts import Comparison, Status
from pytest_fxprof.session.ending import ending
from pytest_fxprof.session.reactions import OnFaster, OnMismatch, OnMissing, OnUndecided, Reactions
from tests.records_for_tests import ENV
from tests.test_decision import BASELINE_5, current_entry, make_entry, make_run, model_times

TEST = "tests/test_m.py::test_it[a b]"
LABEL = f"{TEST} [call0]"


def checked(factors: dict[str, float] | None = None) -> Comparison:
    return compare(BASELINE_5, current_entry(factors), Policy())


ELSEWHERE = make_entry([make_run(model_times())], environment=replace(ENV, torch="9.9.9"))


@dataclass(frozen=True)
class Row:
    name: str
    comparison: Comparison | None
    reactions: Reactions
    status: Status
    failures: tuple[str, ...] = ()
    """Text each failure holds, in order."""
    skips: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


ROWS = [
    Row("missing fails", None, Reactions(), Status.MISSING, failures=("no baseline for", "--fxprof-update '")),
    Row("missing skips", None, Reactions(missing=OnMissing.SKIP), Status.MISSING, skips=("no baseline for",)),
    Row("passes", checked(), Reactions(), Status.PASS),
    Row(
        "slower fails, with advice that accepts nothing",
        checked({"conv1": 2.0}),
        Reactions(),
        Status.REGRESSION,
        failures=("if this change is intended, refresh the baseline with: pytest --fxprof-update",),
    ),
    Row(
        "slower against a revision: no baseline to refresh",
        replace(checked({"conv1": 2.0}), against="main (1a2b3c4)"),
        Reactions(),
        Status.REGRESSION,
        failures=("conv1",),
    ),
    Row(
        "faster, its code unchanged: a notice, the runner's drift as likely",
        checked({"conv1": 0.5}),
        Reactions(),
        Status.PASS,
    ),
    Row("faster ignored", checked({"conv1": 0.5}), Reactions(faster=OnFaster.IGNORE), Status.PASS),
    Row("faster fails", checked({"conv1": 0.5}), Reactions(faster=OnFaster.FAIL), Status.PASS, failures=("faster",)),
    Row(
        "busy machine: undecided fails",
        noisy(BASELINE_5, "busy: 40 % off the CPU"),
        Reactions(),
        Status.UNDECIDED,
        failures=("busy: 40 % off the CPU", "quieter machine"),
    ),
    Row(
        "busy machine: undecided skips",
        noisy(BASELINE_5, "busy"),
        Reactions(undecided=OnUndecided.SKIP),
        Status.UNDECIDED,
        skips=("busy",),
    ),
    Row(
        "busy machine: undecided passes with a warning",
        noisy(BASELINE_5, "busy"),
        Reactions(undecided=OnUndecided.PASS_WITH_WARNING),
        Status.UNDECIDED,
        warnings=("busy",),
    ),
    Row(
        "another environment skips",
        compare(ELSEWHERE, current_entry(), Policy()),
        Reactions(),
        Status.MISMATCH,
        skips=("recorded in another environment", "9.9.9"),
    ),
    Row(
        "another environment fails",
        compare(ELSEWHERE, current_entry(), Policy()),
        Reactions(mismatch=OnMismatch.FAIL),
        Status.MISMATCH,
        failures=("same runner class",),
    ),
]


def _holds(texts: list[str], expected: tuple[str, ...]) -> bool:
    return len(texts) == (1 if expected else 0) and all(e in "".join(texts) for e in expected)


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_ending(row: Row) -> None:
    end = ending(LABEL, TEST, row.comparison, row.reactions, directory=Path("baselines"))
    assert end.status is row.status
    assert _holds(end.outcome.failures, row.failures), end.outcome.failures
    assert _holds(end.outcome.skips, row.skips), end.outcome.skips
    assert _holds(end.outcome.warnings, row.warnings), end.outcome.warnings


def test_a_weak_baseline_is_said_in_a_check_against_baselines_only() -> None:
    weak = "its baseline's bands are too wide"
    stored = ending(LABEL, TEST, checked(), Reactions(), directory=Path("b"), weak=weak)
    assert stored.outcome.warnings == [f"fxprof: {weak}"]
    paired = replace(checked(), against="main (1a2b3c4)")
    assert ending(LABEL, TEST, paired, Reactions(), directory=Path("b"), weak=weak).outcome.warnings == []


def test_an_undecided_check_says_how_it_could_be_decided() -> None:
    """Against a revision: more pairs; against a baseline: a baseline recorded again (its history restarted)."""
    undecided = replace(checked(), status=Status.UNDECIDED)
    against = replace(undecided, against="main")
    stopped = StopReason("test budget", 30.0, 10.0)
    paired = ending(LABEL, TEST, against, Reactions(), directory=Path("b"), pairs=6, stopped=stopped)
    said = "6 pairs measured, when the time budget of 30 s per test (a pair of it takes 10 s) ended them"
    assert said in paired.outcome.failures[0]
    assert "--fxprof-budget-s" in paired.outcome.failures[0]
    by_run_budget = StopReason("run budget", 60)
    by_run = ending(LABEL, TEST, against, Reactions(), directory=Path("b"), pairs=4, stopped=by_run_budget)
    assert "4 pairs measured, when the run's time budget of 60 s ended them" in by_run.outcome.failures[0]
    assert "--fxprof-run-budget-s" in by_run.outcome.failures[0]
    stored = ending(LABEL, TEST, replace(undecided, recordings=3), Reactions(), directory=Path("b"))
    assert "fxprof prune --history 1 --yes" in stored.outcome.failures[0]


def test_faster_than_a_baseline_warns_only_where_the_speed_up_is_established() -> None:
    # the same code, faster than a recording made earlier: the runner's drift as likely as a speed-up: a notice
    same = checked({"conv1": 0.5})
    end = ending("t [call0]", "t.py::test", same, Reactions(), directory=Path("baselines"))
    assert end.outcome.warnings == []
    (notice,) = [n for n in end.notices if n.startswith("faster than its baseline, its code unchanged")]
    assert "the machine may have drifted since the recording" in notice
    assert "faster node: conv1" in notice
    # code that changed since the recording: established, and the baseline should keep guarding the new speed
    added = replace(same.nodes[0].node, key="call_function:x:aten.mul.Tensor#0", target="aten.mul.Tensor")
    end = ending("t [call0]", "t.py::test", replace(same, added=(added,)), Reactions(), directory=Path("baselines"))
    (warning,) = [w for w in end.outcome.warnings if "got faster" in w]  # beside the changed graph's
    assert warning.startswith("fxprof: t [call0] got faster than its baseline")
    assert "refresh the baseline so that it keeps guarding the new speed" in warning


def test_the_steps_a_verdict_takes_are_named_as_the_code_names_them() -> None:
    """The ending module's list of the steps from the rule to the test names functions and classes that exist: a
    step renamed, moved or removed fails here until the list says so."""
    import importlib
    import re

    import pytest_fxprof.session.ending as module

    doc = module.__doc__ or ""
    steps = doc[doc.index("1. the rule") :]
    names = re.findall(r"``((?:[a-z_]+\.)+[A-Za-z_]+)``", steps)
    assert len(names) >= 10, names
    missing = []
    for name in names:
        parts = name.split(".")
        for cut in range(len(parts) - 1, 0, -1):  # the longest importable prefix, then attributes
            try:
                found: object = importlib.import_module("pytest_fxprof." + ".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                found = getattr(found, attr, None)
            if found is None:
                missing.append(name)
            break
        else:
            missing.append(name)
    assert missing == []
