"""The report views through the plugin: every view option in one run (in process and under xdist), the
verdicts on each test's report (junitxml), the terminal's lines, and a view that cannot be written."""

from __future__ import annotations

import itertools
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import pytest_fxprof.measure.profiler  # noqa: F401  (kept imported across in-process runs, like torch)
from tests.test_plugin import (
    FAST,
    SLOW_ENV,
    TWO_TESTS,
    XDIST,
    decide,
    fxprof_section,
    run,
    runp,
    write_tests,
)

VIEW_ARGS = (
    "--fxprof-html=out/report.html",
    "--fxprof-trace=out/traces",
    "--fxprof-markdown=out/summary.md",
    "--fxprof-benchmark-json=out/bench.json",
    "--junitxml=out/junit.xml",
)


RED, GREEN = "\x1b[31m", "\x1b[32m"


def properties(junit: Path) -> dict[str, dict[str, str]]:
    """The properties junitxml wrote, per test name."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        out[case.attrib["name"]] = {p.attrib["name"]: p.attrib["value"] for p in case.iter("property")}
    return out


@XDIST
def test_every_view_of_one_check_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, xdist: list[str]
) -> None:
    write_tests(pytester, TWO_TESTS)
    assert decide(pytester, "--fxprof-update", *xdist).ret == pytest.ExitCode.OK
    monkeypatch.setenv(SLOW_ENV, "b")
    step = pytester.path / "step-summary.md"
    step.write_text("earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    result = decide(pytester, "--fxprof", *VIEW_ARGS, *xdist)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=1)
    out = pytester.path / "out"

    html = (out / "report.html").read_text(encoding="utf-8")
    assert "test_perf.py::test_a" in html
    assert "test_perf.py::test_b" in html

    traces = sorted((out / "traces").iterdir())
    assert len(traces) == 2
    for trace in traces:
        events = json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
        assert any(e.get("args", {}).get("verdict") for e in events)

    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert "regression" in summary
    assert "test_b" in summary
    assert step.read_text(encoding="utf-8") == "earlier step\n\n" + summary  # appended after a blank line

    bench = json.loads((out / "bench.json").read_text(encoding="utf-8"))
    names = [b["fullname"] for b in bench["benchmarks"]]
    assert "test_perf.py::test_b[call0]" in names
    assert any(n.startswith("test_perf.py::test_b[call0]::") for n in names)

    props = properties(out / "junit.xml")
    a, b = props["test_a"], props["test_b"]
    assert a["fxprof[call0].status"] == "pass"
    assert b["fxprof[call0].status"] == "regression"
    assert b["fxprof[call0].worst_node"] in {"fc1", "act", "slow", "fc2"}
    assert float(b["fxprof[call0].worst_ratio"]) > 0
    failed_by = b["fxprof[call0].failed_by"].split("; ")
    assert re.fullmatch(r"total x\d+\.\d\d", failed_by[-1])  # the 30 ms more fail the total (and maybe the node)
    assert all(re.fullmatch(r"node slow x\d+\.\d\d", f) for f in failed_by[:-1])
    assert float(b["fxprof[call0].total_ratio"]) > 2
    assert "fxprof[call0].failed_by" not in a
    for path in [out / "report.html", out / "summary.md", out / "bench.json", *traces]:
        result.stdout.fnmatch_lines([f"report: {path}"])


def test_the_terminal_shows_worst_nodes_and_with_v_every_node(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tests(pytester, TWO_TESTS)
    assert decide(pytester, "--fxprof-update").ret == pytest.ExitCode.OK
    monkeypatch.setenv(SLOW_ENV, "b")
    result = decide(pytester, "--fxprof", "--color=yes")
    lines = result.outlines
    failed = next(line for line in lines if "test_perf.py::test_b [call0]: regression" in line)
    assert failed.startswith(RED)
    passed = next(line for line in lines if "test_perf.py::test_a [call0]: pass" in line)
    assert passed.startswith(GREEN)

    result = decide(pytester, "--fxprof")
    section = fxprof_section(result)
    start = next(i for i, line in enumerate(section) if line.startswith("test_perf.py::test_b [call0]: regression"))
    worst = [line.split() for line in section[start + 1 : start + 4]]
    assert {w[0] for w in worst} <= {"fc1", "act", "slow", "fc2"}
    assert all(w[-1] in {"ok", "slower", "faster", "noisy"} for w in worst)
    used = [(float(w[-3].removeprefix("x")) - 1) / (float(w[-2].strip("+%")) / 100) for w in worst]
    # furthest into their band first (up to the rounding of the printed ratio and band)
    assert all(a >= b - 0.05 for a, b in itertools.pairwise(used))
    assert len([line for line in section if line.startswith("    ")]) == 2 * 3  # three worst nodes per test

    verbose = fxprof_section(decide(pytester, "--fxprof", "-v"))
    assert any(line.split()[:3] == ["node", "target", "module"] for line in verbose)
    rows = [line.split()[0] for line in verbose if line.startswith("    ") and not line.strip().startswith("-")]
    assert {"fc1", "act", "slow", "fc2"} <= set(rows)  # every node


def test_a_recorded_run_carries_its_status(pytester: pytest.Pytester) -> None:
    write_tests(pytester, TWO_TESTS)
    result = run(pytester, "--fxprof-update", "--junitxml=junit.xml")
    assert result.ret == pytest.ExitCode.OK
    props = properties(pytester.path / "junit.xml")
    assert props["test_a"]["fxprof[call0].status"] == "recorded"
    assert "fxprof[call0].total_ratio" not in props["test_a"]


def test_a_view_that_cannot_be_written_fails_the_run_and_loses_nothing(pytester: pytest.Pytester) -> None:
    write_tests(pytester, TWO_TESTS)
    (pytester.path / "blocker").write_text("a file, not a directory\n", encoding="utf-8")
    result = run(pytester, "--fxprof-update", "--fxprof-html=blocker/report.html", "--fxprof-markdown=ok.md")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2)
    section = fxprof_section(result)
    assert any(line.startswith("could not write the html report ") for line in section)
    assert (pytester.path / "ok.md").exists()  # the other views are still written
    assert len(list((pytester.path / "baselines").glob("*.json"))) == 2  # and the baselines


def test_views_and_verdicts_come_only_from_measured_runs(pytester: pytest.Pytester) -> None:
    write_tests(pytester, TWO_TESTS)
    result = runp(pytester, *FAST, "--fxprof-html=report.html", "--junitxml=junit.xml")
    assert result.ret == pytest.ExitCode.OK
    assert not (pytester.path / "report.html").exists()
    assert properties(pytester.path / "junit.xml") == {"test_a": {}, "test_b": {}}  # one cold pass: no verdict
