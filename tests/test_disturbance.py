"""Disturbance on the record: the rules that call a profile "measured on a busy machine", a weak baseline's
warning, and the gate's verdict on a busy profile.

The rules are pure functions over per-pass figures, tested with hand-built samples. The plugin's runs read the
fake clock of ``tests/test_plugin.py`` and, where a test makes them busy, a disturbance injected by a conftest
(``BUSY_ENV``), also in the fresh processes of a recording: no wall-clock figure is asserted on.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_fxprof.judge.decision import Policy, learnt_from
from pytest_fxprof.judge.weak import WEAK_BAND, recording_spread, weak_baseline, widest_band
from pytest_fxprof.modes.check import noisy
from pytest_fxprof.records.disturbance import (
    BUSY_CONSISTENCY,
    BUSY_LINE,
    BUSY_OFF_CPU,
    BUSY_SUM_CONSISTENCY,
    OFF_CPU_LIMIT,
    Disturbance,
    disturbance_from_json,
    disturbance_of,
    disturbance_to_json,
    least_disturbed,
)
from pytest_fxprof.records.measurement import NodeInfo, Recording, Run, node_key
from pytest_fxprof.records.verdicts import Status
from pytest_fxprof.views.report import busy_line
from pytest_fxprof.views.terminal import busy_counts
from tests.records_for_tests import BASE_NS, ENV, MODEL, PROTOCOL
from tests.test_decision import make_entry, make_run
from tests.test_plugin import CLOCK_CONFTEST, FAKE_CLOCK, FAST, LOOSE, QUIET, TWO_TESTS, fxprof_warnings, write_tests

QUIET_NODES = [[100, 101, 99, 100], [200, 202, 198, 200]]  # two nodes, four kept passes
QUIET_PASSES = [320, 321, 319, 320]  # the pass on the CPU clock: a little more than the nodes' sum


# The rules -------------------------------------------------------------------------------------------


def test_a_quiet_profile_is_not_busy_and_says_nothing() -> None:
    d = disturbance_of([0.0, 0.002, 0.0, 0.0], [0, 1, 2, 3], 4, QUIET_NODES, QUIET_PASSES)
    assert d.measured
    assert not d.busy
    assert d.off_cpu_mean == pytest.approx(0.0005)
    assert d.off_cpu_worst == pytest.approx(0.002)
    assert (d.remeasured, d.kept_disturbed, d.kept) == (0, 0, 4)
    assert d.consistency == pytest.approx(300 / 320)
    assert d.sum_consistency == pytest.approx(1.0)
    assert d.line == ""
    assert d.reasons == ()
    assert "thread off the CPU 0% of kept passes' time (worst pass 0%)" in d.figures


def test_off_cpu_share_beyond_the_limit_is_busy() -> None:
    shares = [0.2, 0.0, 0.1, 0.3, 0.0, 0.0]  # six passes measured for four wanted: two measured again
    d = disturbance_of(shares, [0, 1, 2, 3], 4, QUIET_NODES, QUIET_PASSES)
    assert d.remeasured == 2
    assert d.kept_disturbed == 3
    assert d.off_cpu_mean == pytest.approx(0.15)
    assert d.off_cpu_worst == pytest.approx(0.3)
    assert d.off_cpu_mean is not None
    assert d.off_cpu_mean > BUSY_OFF_CPU
    assert d.busy
    assert d.line.startswith(f"{BUSY_LINE}: thread off the CPU 15% of kept passes' time (worst pass 30%)")
    assert "2 passes measured again, 3 kept although disturbed" in d.line


def test_kept_disturbed_passes_alone_make_it_busy() -> None:
    shares = [OFF_CPU_LIMIT * 2] * 3 + [0.0]  # mean 1.5 %: under BUSY_OFF_CPU, but most passes disturbed
    d = disturbance_of(shares, [0, 1, 2, 3], 4, QUIET_NODES, QUIET_PASSES)
    assert d.off_cpu_mean is not None
    assert d.off_cpu_mean <= BUSY_OFF_CPU
    assert d.busy
    assert d.reasons == ("3 of 4 kept passes disturbed",)
    # half of them: each node's median still comes from undisturbed passes
    half = disturbance_of([OFF_CPU_LIMIT * 2] * 2 + [0.0] * 2, [0, 1, 2, 3], 4, QUIET_NODES, QUIET_PASSES)
    assert not half.busy


def test_nodes_summing_beyond_the_pass_is_busy() -> None:
    # a neighbour's time slices in the nodes' wall time, not in the pass's CPU time (1.57 seen on TinyViT)
    nodes = [[160, 170, 150, 160], [340, 330, 350, 340]]
    d = disturbance_of(None, [0, 1, 2, 3], 4, nodes, QUIET_PASSES)
    assert d.off_cpu_mean is None
    assert d.consistency == pytest.approx(500 / 320)
    assert d.consistency is not None
    assert d.consistency > BUSY_CONSISTENCY
    assert d.busy
    assert "node medians sum to x1.56 the median pass" in d.line


def test_node_medians_far_below_the_passes_node_sums_is_busy() -> None:
    # each pass has one node that jumped to another level; each node's median did not
    nodes = [[500, 100, 100, 100, 100], [100, 500, 100, 100, 100], [100, 100, 500, 100, 100]]
    d = disturbance_of(None, [0, 1, 2, 3, 4], 5, nodes, [700] * 5)
    assert d.sum_consistency == pytest.approx(300 / 700)
    assert d.sum_consistency is not None
    assert d.sum_consistency < BUSY_SUM_CONSISTENCY
    assert d.busy
    assert any("node sum" in r for r in d.reasons)


def test_nothing_measured_where_nothing_can_be_known() -> None:
    assert not Disturbance().measured
    assert not Disturbance().busy
    assert Disturbance().figures == ""
    one = disturbance_of(None, [0], 1, [[100]], [120])  # one pass: no consistency
    assert one.consistency is None
    assert not one.busy


def test_bad_figures_are_refused() -> None:
    with pytest.raises(ValueError, match="outside the 2 measured"):
        disturbance_of([0.0, 0.0], [0, 5], 2, [], [1, 1])
    with pytest.raises(ValueError, match="one time per kept pass"):
        disturbance_of(None, [0, 1], 2, [[1]], [1, 1])


def test_the_least_disturbed_is_kept() -> None:
    busy = Disturbance(0.3, 0.5, 4, 3, 4, 1.0, 1.0)
    less = Disturbance(0.1, 0.2, 4, 2, 4, 1.0, 1.0)
    quiet = Disturbance(0.0, 0.0, 0, 0, 4, 0.98, 0.99)
    assert least_disturbed([busy, less, quiet]) == 2
    assert least_disturbed([busy, less]) == 1
    assert least_disturbed([quiet, Disturbance(0.0, 0.0, 0, 0, 4, 0.98, 0.99)]) == 0
    with pytest.raises(ValueError, match="at least one"):
        least_disturbed([])


def test_json_round_trip_and_clear_errors() -> None:
    d = Disturbance(0.25, 0.41, 12, 3, 12, 1.57, 0.8)
    data = disturbance_to_json(d)
    assert data["busy"] is True
    assert disturbance_from_json(json.loads(json.dumps(data)), "x") == d
    with pytest.raises(ValueError, match=r"call0: disturbance.off_cpu_mean must be a non-negative number"):
        disturbance_from_json({**data, "off_cpu_mean": "lots"}, "call0")
    with pytest.raises(ValueError, match=r"disturbance.kept must be a non-negative integer"):
        disturbance_from_json({**data, "kept": -1}, "call0")
    with pytest.raises(ValueError, match="must be an object"):
        disturbance_from_json([1], "call0")


def test_views_say_busy_with_the_figures() -> None:
    from pytest_fxprof.views.report import disturbance_report

    busy = disturbance_report(Disturbance(0.25, 0.41, 12, 3, 12, 1.57, 0.8))
    quiet = disturbance_report(Disturbance(0.0, 0.0, 0, 0, 12, 0.97, 0.98))
    assert busy_line({"disturbance": busy}).startswith(BUSY_LINE)  # type: ignore[typeddict-item]
    assert busy_line({"disturbance": quiet}) == ""  # type: ignore[typeddict-item]
    assert quiet["consistency"] == 0.97
    assert quiet["busy"] is False
    records = [
        {"test_id": "t", "key": "a", "status": "undecided", "summary": "", "report": {"disturbance": busy}},
        {"test_id": "t", "key": "b", "status": "pass", "summary": "", "report": {"disturbance": quiet}},
    ]
    assert busy_counts(records) == (  # type: ignore[arg-type]
        f"1 profile(s) undecided, too noisy to decide; 1 profile(s) {BUSY_LINE}; measure on a quieter machine"
    )
    assert noisy(make_entry([make_run(list(BASE_NS.values()))]), "why").status is Status.UNDECIDED
    # a recording whose fresh process stayed busy, this one quiet: counted as its warning counts it
    report = {"disturbance": quiet, "busy_processes": 1}
    recorded = [{"test_id": "t", "key": "a", "status": "recorded", "summary": "", "report": report}]
    assert busy_counts(recorded) == f"1 profile(s) {BUSY_LINE}; measure on a quieter machine"  # type: ignore[arg-type]


# A weak baseline -----------------------------------------------------------------------------------


def _runs(spread: float, swinging: tuple[str, ...] = ("conv2", "fc")) -> list[Run]:
    """Five processes whose ``swinging`` nodes (by default the two largest) swing by ``spread`` (log scale) around
    their centre, and the total with them."""
    out = []
    for k in (-2, -1, 0, 1, 2):
        times = [round(BASE_NS[n.name] * (math.exp(k * spread) if n.name in swinging else 1.0)) for n in MODEL]
        out.append(make_run(times))
    return out


def test_a_wide_spread_on_a_large_node_makes_a_weak_baseline() -> None:
    entry = make_entry(_runs(0.08))
    widest = widest_band(entry, Policy())
    assert widest is not None
    band, what = widest
    assert band > WEAK_BAND
    assert what in ("conv2", "fc")  # one of the two large nodes
    text = weak_baseline("t.py::test [call0]", entry, Policy())
    share = recording_spread(entry.nodes, entry.runs, Policy()).wide_share
    assert share > 0.25
    assert text == (
        f"t.py::test [call0]: recorded on a busy machine: bands up to +{band:.0%} ({what}), over +25% on "
        f"{share:.0%} of the time of the nodes that can fail a test alone; record again on a quieter machine or "
        "with more processes (--fxprof-processes)"
    )


def test_one_node_that_varies_by_nature_is_not_a_busy_machine() -> None:
    """A machine-wide disturbance widens most nodes' bands; one small node's wide band is its own nature."""
    runs = [
        make_run([round(BASE_NS[n.name] * (math.exp(k * 0.1) if n.name == "softmax" else 1.0)) for n in MODEL])
        for k in (-2, -1, 0, 1, 2)
    ]
    spread = recording_spread(MODEL, runs, Policy())
    assert spread.widest_of == "softmax"
    assert spread.widest > WEAK_BAND
    assert spread.wide_share == pytest.approx(70 / 950)
    assert not spread.weak
    assert weak_baseline("t", make_entry(runs), Policy()) == ""


def test_one_large_node_alone_is_not_a_busy_machine() -> None:
    """A model whose one large node spreads widely: the node's nature or the machine, the recording cannot tell."""
    spread = recording_spread(MODEL, _runs(0.08, ("conv2",)), Policy())
    assert spread.widest_of == "conv2"
    assert spread.wide_nodes == 1
    assert spread.wide_share > 0.25
    assert not spread.weak


def test_a_total_that_spreads_alone_is_not_a_busy_machine() -> None:
    """The total against the reference workload spreads between fresh processes even on a quiet machine."""
    times = [BASE_NS[n.name] for n in MODEL]
    runs = [make_run(times, reference_ns=round(500_000 * math.exp(k * 0.1))) for k in (-2, -1, 0, 1, 2)]
    spread = recording_spread(MODEL, runs, Policy())
    assert spread.total_band is not None
    assert spread.total_band > WEAK_BAND
    assert not spread.weak


def test_a_history_recording_made_on_a_busy_machine_is_kept_but_not_learnt_from() -> None:
    quiet = _runs(0.001)
    entry = replace(
        make_entry(quiet),
        history=(
            Recording("2026-11-23T10:00:00Z", ENV, PROTOCOL, tuple(_runs(0.08))),
            Recording("2026-11-22T10:00:00Z", ENV, PROTOCOL, tuple(quiet)),
        ),
    )
    learnt = learnt_from(entry, Policy())
    assert [r.date for r in learnt] == ["", "2026-11-22T10:00:00Z"]
    assert len(entry.recordings) == 3


def test_a_tight_baseline_is_not_weak() -> None:
    assert weak_baseline("t", make_entry(_runs(0.001)), Policy()) == ""
    assert widest_band(make_entry(_runs(0.0)[:1]), Policy()) is None  # one process: no spread measured


# The gate on a busy machine (pytester) ----------------------------------------------------------------

BUSY_ENV = "FXPROF_TEST_BUSY"
PREEMPTED_ENV = "FXPROF_TEST_PREEMPTED"
BUSY_CONFTEST = (
    CLOCK_CONFTEST
    + f'''

import os

from pytest_fxprof.records.disturbance import Disturbance


@pytest.fixture(autouse=True)
def _busy(monkeypatch):
    """Every profile measured on a busy machine where {BUSY_ENV} is set (the fresh processes inherit it)."""
    if os.environ.get("{BUSY_ENV}"):
        busy = Disturbance(0.23, 0.41, 12, 3, 12, 1.57, 0.8)
        monkeypatch.setattr(profiler, "disturbance_of", lambda *a, **k: busy)


@pytest.fixture(autouse=True)
def _preempted(monkeypatch):
    """Where {PREEMPTED_ENV} is set, the wall clock runs 1.5 times as fast as the thread's CPU clock: a neighbour
    holds the core a third of the time, in every pass."""
    if os.environ.get("{PREEMPTED_ENV}"):
        monkeypatch.setattr(profiler, "WALL_CLOCK", lambda: CLOCK.now * 3 // 2)
'''
)


def busy_run(pytester: pytest.Pytester, *args: str, busy: bool) -> pytest.RunResult:
    pytester.makepyfile(fakeclock=FAKE_CLOCK)
    pytester.makeconftest(BUSY_CONFTEST)
    if busy:
        os.environ[BUSY_ENV] = "1"
    try:
        return pytester.runpytest(*QUIET, *FAST, *LOOSE, *args)
    finally:
        os.environ.pop(BUSY_ENV, None)


def test_busy_check_is_undecided_and_fails_unless_told_otherwise(pytester: pytest.Pytester) -> None:
    write_tests(pytester, TWO_TESTS)
    recorded = busy_run(pytester, "--fxprof-update", "--fxprof-processes=2", busy=True)
    recorded.assert_outcomes(passed=2)
    warnings = fxprof_warnings(recorded)
    assert any("2 of 2 processes were measured on a busy machine" in w for w in warnings), warnings

    checked = busy_run(pytester, "--fxprof", "--fxprof-report=report.json", busy=True)
    checked.assert_outcomes(failed=2)  # no verdict is never green
    checked.stdout.fnmatch_lines(["*undecided against its baseline, no verdict (neither a pass nor a slowdown)*"])
    checked.stdout.fnmatch_lines(["*too noisy to decide: measured on a busy machine: thread off the CPU 23%*"])
    checked.stdout.fnmatch_lines(["*2 profile(s) undecided, too noisy to decide; 2 profile(s) measured on a busy*"])
    report = json.loads(Path(pytester.path / "report.json").read_text())
    profile = report["profiles"][0]
    assert profile["status"] == "undecided"
    assert profile["noisy"].startswith(BUSY_LINE)
    assert profile["disturbance"]["busy"] is True
    assert profile["disturbance"]["off_cpu_mean"] == 0.23

    skipped = busy_run(pytester, "--fxprof", "--fxprof-on-undecided=skip", "-rs", busy=True)
    skipped.assert_outcomes(skipped=2)
    skipped.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_perf.py:*: fxprof: test_perf.py::test_* undecided against*"])
    warned = busy_run(pytester, "--fxprof", "--fxprof-on-undecided=pass-with-warning", busy=True)
    warned.assert_outcomes(passed=2)
    assert sum("undecided against its baseline" in w for w in fxprof_warnings(warned)) == 2
    busy_run(pytester, "--fxprof", "--fxprof-on-busy=skip", busy=True).assert_outcomes(skipped=2)  # its earlier name
    busy_run(pytester, "--fxprof", "-o", "fxprof_on_busy=skip", busy=True).assert_outcomes(skipped=2)  # in the ini

    quiet = busy_run(pytester, "--fxprof", "--fxprof-report=quiet.json", busy=False)
    quiet.assert_outcomes(passed=2)
    assert "busy machine" not in quiet.stdout.str()
    data = json.loads(Path(pytester.path / "quiet.json").read_text())["profiles"][0]["disturbance"]
    assert data["busy"] is False
    assert data["line"] == ""
    assert data["kept"] == 3


def test_a_suite_that_makes_warnings_errors_lets_fxprofs_through_by_name(pytester: pytest.Pytester) -> None:
    write_tests(pytester, TWO_TESTS)
    busy_run(pytester, "--fxprof-update", "--fxprof-processes=1", busy=False).assert_outcomes(passed=2)
    errors = ("-W", "error", "-W", "ignore::pytest.PytestAssertRewriteWarning")  # this in-process run's own
    told = (*errors, "-W", "default::pytest_fxprof.FxprofWarning", "--fxprof-on-undecided=pass-with-warning")
    # each test warns twice: its undecided verdict, and that its baseline holds one process's measurement
    busy_run(pytester, "--fxprof", *told, busy=True).assert_outcomes(passed=2, warnings=4)
    busy_run(pytester, "--fxprof", *errors, "--fxprof-on-undecided=pass-with-warning", busy=True).assert_outcomes(
        failed=2  # without the filter, the same warnings are errors
    )


def test_bad_on_busy_is_refused(pytester: pytest.Pytester) -> None:
    write_tests(pytester, TWO_TESTS)
    result = busy_run(pytester, "--fxprof", "--fxprof-on-undecided=maybe", busy=False)
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--fxprof-on-undecided*invalid choice*"])


def test_a_baseline_recorded_on_a_busy_machine_is_named_in_every_check_and_by_show(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_fxprof.cli import main

    write_tests(pytester, TWO_TESTS)
    busy_run(pytester, "--fxprof-update", "--fxprof-processes=3", busy=False).assert_outcomes(passed=2)
    (path,) = (p for p in (pytester.path / "baselines").glob("*.json") if "test_a" in p.name)
    data = json.loads(path.read_text(encoding="utf-8"))
    entry = data["entries"]["call0"]
    slow, fc1 = (next(i for i, n in enumerate(entry["nodes"]) if n["name"] == name) for name in ("slow", "fc1"))
    for run, factor in zip(entry["runs"], (1.0, 3.0, 0.3), strict=True):  # far apart, beyond even a +300 % tolerance
        run["node_ns"][slow] = round(run["node_ns"][slow] * factor)
        run["node_ns"][fc1] = round(1_000_000 / factor)  # a second large node, as wide (not in step with the first,
        # which the speed factors would divide out): the machine, not one node
    path.write_text(json.dumps(data), encoding="utf-8")

    checked = busy_run(pytester, "--fxprof", "--fxprof-on-undecided=pass-with-warning", busy=False)
    warnings = fxprof_warnings(checked)
    undecided = [w for w in warnings if "undecided against its baseline" in w]
    assert len(undecided) == 1, warnings  # test_a: its large nodes' bands are too wide to decide, nothing failed
    checked.stdout.fnmatch_lines(
        [
            "*too noisy to decide: node slow: x1.00, but band +*",
            "*its baseline's processes "
            "disagreed too much on these: record it again on a quieter machine, or from more processes*",
        ]
    )
    weak = [w for w in warnings if "recorded on a busy machine: bands up to +" in w]
    assert len(weak) == 1, warnings  # test_a's baseline only
    assert weak[0].startswith("fxprof: test_perf.py::test_a [call0]: recorded on a busy machine")
    assert "), over +25% on 100% of the time of the nodes that can fail a test alone; record again" in weak[0]

    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "warning: test_perf.py::test_a [call0]: recorded on a busy machine: bands up to +" in out
    assert "bands: from 1 recording(s) and the default tolerances; 2 more recording(s)" in out


def test_a_check_whose_thread_is_preempted_in_every_pass_is_too_noisy_to_decide(pytester: pytest.Pytester) -> None:
    """Through the profiler's own figures, on injected clocks: every pass off the CPU a third of its time is
    measured again up to the budget, the profile taken twice more, and the verdict is too noisy to decide."""
    write_tests(pytester, TWO_TESTS)
    pytester.makepyfile(fakeclock=FAKE_CLOCK)
    pytester.makeconftest(BUSY_CONFTEST)
    args = (*QUIET, *FAST, "--fxprof-engine=compiled", *LOOSE, "--fxprof-report=report.json", "-rs")
    pytester.runpytest(*args, "--fxprof-update").assert_outcomes(passed=2)
    os.environ[PREEMPTED_ENV] = "1"
    try:
        checked = pytester.runpytest(*args, "--fxprof")
    finally:
        os.environ.pop(PREEMPTED_ENV, None)
    checked.assert_outcomes(failed=2)
    checked.stdout.fnmatch_lines(["*too noisy to decide: measured on a busy machine: thread off the CPU 33%*"])
    profile = json.loads((pytester.path / "report.json").read_text())["profiles"][0]
    assert profile["status"] == "undecided"
    figures = profile["disturbance"]
    assert figures["off_cpu_mean"] == pytest.approx(1 / 3, abs=0.01)
    assert figures["kept"] == 3
    assert figures["kept_disturbed"] == 3  # too few clean passes: the least disturbed were kept all the same
    assert figures["remeasured"] == 3  # the budget: as many passes again
    assert "measured 3 times, every time busy" in profile["noisy"]


def test_a_busy_verdict_keeps_the_graph_changes_the_comparison_saw() -> None:
    """Busy numbers decide nothing, but the nodes a changed graph added and the graph breaks it made are facts of the
    code: the undecided verdict keeps them, and its summary line says so; a mismatch's comparison lends none."""
    from pytest_fxprof.judge.decision import compare
    from pytest_fxprof.views.render import summary_line

    baseline = make_entry([make_run(list(BASE_NS.values()))])
    extra = NodeInfo(
        node_key("call_function", "layer1", "torch.relu", 9), "relu_9", "call_function", "torch.relu", "layer1"
    )
    seen = replace(compare(baseline, baseline, Policy()), added=(extra,), graphs=(1, 3))
    busy = noisy(baseline, "busy: 40 % off the CPU", seen)
    assert busy.status is Status.UNDECIDED
    assert busy.nodes == ()
    assert busy.total is None
    assert busy.added == (extra,)
    assert busy.graphs == (1, 3)
    assert summary_line("t", busy) == (
        "t: undecided, too noisy to decide (busy: 40 % off the CPU); graph changed (+1/-0, graphs 1 -> 3)"
    )
    mismatched = noisy(baseline, "busy", replace(seen, status=Status.MISMATCH))
    assert mismatched.added == ()
    assert mismatched.graphs == (1, 1)
    assert summary_line("t", noisy(baseline, "busy")) == "t: undecided, too noisy to decide (busy)"
