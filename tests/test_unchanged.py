"""Tests decided unchanged by their computation's fingerprint, through pytest's command line: against a stored
baseline and against a revision, with what every view says of them, and the option that measures them anyway.

The inner runs read the fake clock of ``tests/test_plugin.py``: every time is fixed, so a test measured here is
told apart from one decided without measuring by what the reports say, not by how long anything took.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.test_against import against, base, commit, model  # noqa: F401 - base is a fixture
from tests.test_plugin import TWO_TESTS, fxprof_section, run, snapshot, write_tests

PROVE = "--fxprof-on-unchanged=decide"
"""The default, given again after the helpers' own ``measure`` (which their fake clock's tests need)."""

pytest.importorskip("torch")


def profiles(path: Path) -> dict[str, dict[str, Any]]:
    """The JSON report's profiles, by test id."""
    return {p["test_id"]: p for p in json.loads(path.read_text())["profiles"]}


def test_a_check_of_an_unchanged_test_decides_it_without_measuring(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tests(pytester, TWO_TESTS)
    assert run(pytester, "--fxprof-update").ret == pytest.ExitCode.OK
    directory = pytester.path / "baselines"
    stored = [json.loads(p.read_text())["entries"]["call0"] for p in sorted(directory.glob("*.json"))]
    assert all(e["fingerprint"]["unreadable"] == [] for e in stored)
    before = snapshot(directory)

    result = run(
        pytester, "--fxprof", PROVE, "--fxprof-report=report.json", "--junitxml=junit.xml", "--fxprof-markdown=out.md"
    )
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=2)
    section = fxprof_section(result)
    for test in ("test_a", "test_b"):
        line = f"test_perf.py::{test} [call0]: unchanged since its baseline, its computation's fingerprint the same"
        assert any(s.startswith(line) for s in section), section
    report = profiles(pytester.path / "report.json")
    assert {p["status"] for p in report.values()} == {"unchanged"}
    for p in report.values():
        assert p["environment"]["clock"] == "not measured"  # nothing was timed
        assert p["fingerprint"] == {"reference": "its baseline", "differences": []}
        assert len(p["runs"]) == 1  # no confirmation either
    properties = {
        prop.get("name"): prop.get("value") for prop in ET.parse(pytester.path / "junit.xml").getroot().iter("property")
    }
    assert properties["fxprof[call0].status"] == "unchanged"
    markdown = (pytester.path / "out.md").read_text()
    assert "2 unchanged, not measured" in markdown
    assert markdown.count("| unchanged |  |  |") == 2  # a cold pass's times are no measurement: left out
    assert snapshot(directory) == before

    # the same computation in another environment: measured, and the difference named
    monkeypatch.setenv("OMP_SCHEDULE", "static")
    result = run(pytester, "--fxprof", PROVE, "--fxprof-report=report.json", "-v")
    assert result.ret == pytest.ExitCode.OK
    report = profiles(pytester.path / "report.json")
    assert {p["status"] for p in report.values()} == {"pass"}
    for p in report.values():
        assert p["environment"]["clock"] != "not measured"
        assert p["fingerprint"]["differences"] == ["environment: $OMP_SCHEDULE is new"]
    assert (
        "notice: measured, since its computation is not the one its baseline recorded: environment: $OMP_SCHEDULE "
        "is new"
    ) in result.stdout.str()


def test_on_unchanged_measure_measures_every_test(pytester: pytest.Pytester) -> None:
    write_tests(pytester, TWO_TESTS)
    assert run(pytester, "--fxprof-update").ret == pytest.ExitCode.OK
    result = run(pytester, "--fxprof", "--fxprof-on-unchanged=measure", "--fxprof-report=report.json")
    assert result.ret == pytest.ExitCode.OK
    report = profiles(pytester.path / "report.json")
    assert {p["status"] for p in report.values()} == {"pass"}
    assert all("fingerprint" not in p for p in report.values())


def test_a_slowed_leaf_changes_the_fingerprint_and_is_measured(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fake model's slow leaf reads its slowness into an attribute: the fingerprint sees the attribute, so the
    slowed test is measured (and fails), the other decided unchanged."""
    write_tests(pytester, TWO_TESTS)
    assert run(pytester, "--fxprof-update", "--fxprof-node-tolerance=1", "--fxprof-total-tolerance=1").ret == 0
    monkeypatch.setenv("FXPROF_TEST_SLOW", "b")
    result = run(
        pytester,
        "--fxprof",
        PROVE,
        "--fxprof-report=report.json",
        "--fxprof-node-tolerance=1",
        "--fxprof-total-tolerance=1",
        "--fxprof-confirm=same",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=1)
    report = profiles(pytester.path / "report.json")
    assert report["test_perf.py::test_a"]["status"] == "unchanged"
    slowed = report["test_perf.py::test_b"]
    assert slowed["status"] == "regression"
    assert slowed["fingerprint"]["differences"] == ["module slow: graph changed"]
    assert "measured, since its computation is not the one its baseline recorded: module slow" in result.stdout.str()


def test_against_a_revision_an_unchanged_test_takes_no_pairs_and_a_changed_one_names_its_module(
    pytester: pytest.Pytester,
    base: str,  # noqa: F811 - the fixture
) -> None:
    (pytester.path / "test_other.py").write_text(
        "from model import profile\n\n\ndef test_other(fxprof):\n    profile(fxprof)\n"
    )
    commit(pytester, {}, "a second test")
    commit(pytester, {"model.py": model("20_000_000")}, "slower")
    result = against(pytester, "HEAD~1", PROVE, "--fxprof-report=report.json", "-v")
    text = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, text
    report = profiles(pytester.path / "report.json")
    # the slower leaf reads a module constant: its code's fingerprint changed, on both tests that use it
    for test in ("test_net.py::test_net", "test_other.py::test_other"):
        assert report[test]["status"] == "regression", report[test]["status"]
        assert "module slow: graph changed" in report[test]["fingerprint"]["differences"]

    result = against(pytester, "HEAD", PROVE, "--fxprof-report=report.json")
    text = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, text
    assert "2 of 2 test(s) unchanged: the same computation at HEAD" in text
    report = profiles(pytester.path / "report.json")
    assert {p["status"] for p in report.values()} == {"unchanged"}
    assert all(p.get("pairs", 0) == 0 for p in report.values())
    assert "pair 1:" not in text  # no pair was measured

    result = against(pytester, "HEAD", "--fxprof-on-unchanged=measure", "--fxprof-report=report.json")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert {p["status"] for p in profiles(pytester.path / "report.json").values()} == {"pass"}
