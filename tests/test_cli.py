"""Tests of the ``fxprof`` command (``pytest_fxprof.cli``) through ``main``, on hand-built baselines and reports.

No torch: entries and reports come from hand-built ``ProfileResult``s; ``prune`` collects a pytester-made
project in a subprocess.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from pytest_fxprof.cli import main
from pytest_fxprof.records.measurement import BaselineEntry, Environment, NodeStats, Run, Tolerances
from pytest_fxprof.result import ProfileResult
from pytest_fxprof.store.baseline import BaselineStore, as_file, file_name, read_baseline
from pytest_fxprof.store.history import carry
from pytest_fxprof.views.report import profile_report, write_report
from tests.records_for_tests import BASE_NS, CAPTURE, ENV, MODEL, PROTOCOL

TEST_ID = "tests/test_model.py::test_speed"
TOLERANCES = Tolerances(node=0.15, total=0.10)
REF_NS = 500_000
JITTER = (1.0, 1.01, 0.99, 1.02, 0.98)
"""Five baseline processes, the unchanged model at their centre."""


# Builders ------------------------------------------------------------------------------------------


def result(factors: Mapping[str, float] | None = None, overall: float = 1.0, env: Environment = ENV) -> ProfileResult:
    """A measured profile of ``MODEL``: each node's baseline time scaled by ``overall`` and its own factor."""
    factors = factors or {}
    times = [round(BASE_NS[n.name] * overall * factors.get(n.name, 1.0)) for n in MODEL]
    busy = sum(times)
    nodes = tuple(
        NodeStats(info=info, median_ns=t, spread_ns=t // 20, share=t / busy, samples_ns=(t,) * 3)
        for info, t in zip(MODEL, times, strict=True)
    )
    return ProfileResult(
        name="Net",
        nodes=nodes,
        total_samples_ns=(busy,) * 3,
        instrumented_samples_ns=(busy * 3 // 2,) * 3,
        reference_samples_ns=(REF_NS,) * 3,
        environment=env,
        protocol=PROTOCOL,
        capture=CAPTURE,
    )


def entry(factors: Mapping[str, float] | None = None, env: Environment = ENV) -> BaselineEntry:
    """A baseline entry of five processes around the model scaled by ``factors``."""
    first, *rest = (result(factors, j, env) for j in JITTER)
    return first.entry(TOLERANCES, tuple(r.run() for r in rest))


def write_baseline(directory: Path, entries: Mapping[str, BaselineEntry], test_id: str = TEST_ID) -> Path:
    return BaselineStore(directory).write(as_file(test_id, entries))


def write_profiles(path: Path, profiles: Sequence[tuple[str, str, ProfileResult]], mode: str = "check") -> Path:
    """A ``--fxprof-report`` file of the given (test id, key, profile)s, as the plugin writes it."""
    records = [
        {"test_id": t, "key": k, "status": "pass", "summary": "", "report": profile_report(t, k, "pass", r, None)}
        for t, k, r in profiles
    ]
    write_report(path, mode, records, [])  # type: ignore[arg-type]
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def table_rows(out: str, names: Sequence[str]) -> list[str]:
    """The node names of the table's rows, in the order printed (rows start with a node name)."""
    return [line.split()[0] for line in out.splitlines() if line.split() and line.split()[0] in names]


NAMES = [n.name for n in MODEL]


# fxprof show ----------------------------------------------------------------------------------------


def test_show_prints_the_entry_and_its_nodes_slowest_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_baseline(tmp_path, {"call0": entry()})
    code, out, err = run(capsys, "show", path)
    assert (code, err) == (0, "")
    assert f"{TEST_ID} [call0]" in out
    assert f"environment: torch {ENV.torch}; python {ENV.python}" in out
    assert "capture: symbolic_trace, 1 graph(s)" in out
    assert "protocol: 5 warm-up + 20 passes, 1 thread(s), 5 process(es); 5 process(es) recorded" in out
    assert table_rows(out, NAMES) == sorted(NAMES, key=lambda n: -BASE_NS[n])
    (conv2,) = [line for line in out.splitlines() if line.startswith("conv2 ")]
    # median over the processes (jitter 0.98 .. 1.02), the spread between them (IQR 1.01 - 0.99), the share
    assert conv2.split()[1:4] == ["call_module", "layer1.conv", "layer1.conv"]
    assert "300.0 us" in conv2
    assert " 2% " in conv2
    assert "30.0%" in conv2


def test_show_sorts_in_graph_order_and_limits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_baseline(tmp_path, {"call0": entry()})
    code, out, _ = run(capsys, "show", path, "--sort", "graph")
    assert code == 0
    assert table_rows(out, NAMES) == NAMES
    code, out, _ = run(capsys, "show", path, "--limit", "3")
    assert code == 0
    assert table_rows(out, NAMES) == ["conv2", "fc", "conv1"]
    assert "... 5 more nodes" in out


def test_show_writes_every_node_as_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_baseline(tmp_path, {"call0": entry()})
    csv = tmp_path / "out" / "nodes.csv"
    code, out, _ = run(capsys, "show", path, "--limit", "2", "--csv", csv)
    assert code == 0
    assert f"wrote 8 rows to {csv}" in out
    frame = pd.read_csv(csv, keep_default_na=False)
    assert list(frame["node"]) == sorted(NAMES, key=lambda n: -BASE_NS[n])  # all nodes, whatever --limit
    assert set(frame["test_id"]) == {TEST_ID}
    conv2 = frame[frame["node"] == "conv2"].iloc[0]
    assert (conv2["module"], conv2["op"], conv2["processes"]) == ("layer1.conv", "call_module", 5)
    assert conv2["median_us"] == pytest.approx(300.0)
    assert conv2["spread"] == pytest.approx(6_000 / 300_000)
    assert conv2["share"] == pytest.approx(0.3)
    assert frame["share"].sum() == pytest.approx(1.0)


def test_show_resolves_a_test_id_in_the_baseline_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_baseline(tmp_path / "perf", {"call0": entry(), "large": entry({"fc": 4.0})})
    code, out, _ = run(capsys, "show", TEST_ID, "--baseline-dir", tmp_path / "perf", "--key", "large")
    assert code == 0
    assert f"{TEST_ID} [large]" in out
    assert "[call0]" not in out
    assert table_rows(out, NAMES)[0] == "fc"  # 1 ms now, the slowest
    assert file_name(TEST_ID) in out

    code, _, err = run(capsys, "show", TEST_ID, "--baseline-dir", tmp_path / "perf", "--key", "nope")
    assert code == 2
    assert "has no entry 'nope' (its entries: call0, large)" in err

    code, _, err = run(capsys, "show", "tests/other.py::test_x", "--baseline-dir", tmp_path / "perf")
    assert code == 2
    assert err == (
        f"fxprof: error: tests/other.py::test_x: no such file, nor a baseline of a test with this id in "
        f"{tmp_path / 'perf'}. Pass a baseline file's path, or a test id with --baseline-dir set to where its "
        "baseline lives\n"
    )


def test_show_refuses_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = write_profiles(tmp_path / "report.json", [(TEST_ID, "call0", result())])
    code, out, err = run(capsys, "show", report)
    assert (code, out) == (2, "")
    assert "it is a report of a pytest run, not a baseline" in err


# fxprof diff ----------------------------------------------------------------------------------------


def test_diff_of_an_unchanged_profile_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    baseline = write_baseline(tmp_path, {"call0": entry()})
    report = write_profiles(tmp_path / "report.json", [(TEST_ID, "call0", result())])
    code, out, err = run(capsys, "diff", baseline, report)
    assert (code, err) == (0, "")
    assert f"{TEST_ID} [call0]: pass, total x1.00" in out
    assert "got slower" not in out
    assert "1 compared: 1 pass; 0 only in A, 0 only in B" in out


def test_diff_names_the_node_that_got_slower(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    baseline = write_baseline(tmp_path, {"call0": entry()})
    report = write_profiles(tmp_path / "report.json", [(TEST_ID, "call0", result({"conv2": 1.5}))])
    code, out, _ = run(capsys, "diff", baseline, report)
    assert code == 1
    assert f"fxprof: {TEST_ID} [call0] got slower than its baseline (5 process(es))" in out
    # the node leads (it holds the extra time), then the module around it on one line
    (where,) = [line for line in out.splitlines() if line.startswith("  where: ")]
    assert where == "  where: node conv2 (call_module layer1.conv in layer1.conv): x1.50, +150.0 us"
    (slower,) = [line for line in out.splitlines() if "slower node:" in line]
    assert "conv2 (call_module layer1.conv in layer1.conv): 300.0 us -> 450.0 us = x1.50" in slower
    assert "    in: layer1 x1.47" in out.splitlines()
    # the node table, worst first: conv2, judged slower beyond its +15 % band
    assert table_rows(out, NAMES)[0] == "conv2"
    (row,) = [line for line in out.splitlines() if line.startswith("conv2 ") and "x1.50" in line]
    assert row.split() == ["conv2", "layer1.conv", "300.0", "us", "450.0", "us", "x1.50", "+15%", "slower"]
    assert "1 compared: 1 regression" in out


def test_diff_of_two_baselines_judges_every_process_of_b(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main_side = write_baseline(tmp_path / "main", {"call0": entry()})
    slower = write_baseline(tmp_path / "branch", {"call0": entry({"conv2": 1.5})})
    same = write_baseline(tmp_path / "same", {"call0": entry()})
    code, out, _ = run(capsys, "diff", main_side, slower)
    assert code == 1
    assert "every one of 5 measurements agrees" in out
    assert "slower node: conv2" in out
    code, out, _ = run(capsys, "diff", main_side, same)
    assert code == 0
    assert f"{TEST_ID} [call0]: pass" in out
    # and B got faster than A the other way round: reported, not failed
    code, out, _ = run(capsys, "diff", slower, main_side)
    assert code == 0
    assert f"fxprof: {TEST_ID} [call0] got faster than its baseline" in out
    assert "faster node: conv2" in out


def test_diff_pairs_two_baselines_of_renamed_tests_by_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = write_baseline(tmp_path, {"call0": entry()}, "tests/test_a.py::test_old")
    new = write_baseline(tmp_path, {"call0": entry({"conv2": 1.5})}, "tests/test_a.py::test_new")
    code, out, _ = run(capsys, "diff", old, new)
    assert code == 1
    assert "different tests (tests/test_a.py::test_old and tests/test_a.py::test_new): paired by key" in out


def test_diff_reports_a_changed_graph(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    full = entry()
    keep = [i for i, n in enumerate(MODEL) if n.name != "softmax"]
    runs = tuple(
        replace(r, node_ns=tuple(r.node_ns[i] for i in keep), node_spread_ns=tuple(r.node_spread_ns[i] for i in keep))
        for r in full.runs
    )
    smaller = write_baseline(tmp_path / "b", {"call0": replace(full, nodes=tuple(MODEL[i] for i in keep), runs=runs)})
    csv = tmp_path / "diff.csv"
    code, out, _ = run(capsys, "diff", write_baseline(tmp_path / "a", {"call0": full}), smaller, "--csv", csv)
    assert code == 0
    assert f"fxprof: {TEST_ID} [call0]: graph changed since the baseline: 0 node(s) added, 1 removed" in out
    assert "  removed: softmax (softmax in <root>)" in out
    assert "graph changed (+0/-1)" in out
    assert sorted(table_rows(out, NAMES)) == sorted(set(NAMES) - {"softmax"})  # the matched nodes only
    frame = pd.read_csv(csv)
    removed = frame[frame["verdict"] == "removed"]
    assert list(removed["node"]) == ["softmax"]
    assert list(removed["a_us"]) == [pytest.approx(70.0)]
    assert len(frame) == len(MODEL)


def test_diff_reports_a_mismatched_environment_without_comparing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = write_baseline(tmp_path, {"call0": entry()})
    other = replace(ENV, torch="2.5.0+cpu")
    report = write_profiles(tmp_path / "report.json", [(TEST_ID, "call0", result({"conv2": 3.0}, env=other))])
    code, out, _ = run(capsys, "diff", baseline, report)
    assert code == 0  # not compared, so not failed
    assert f"{TEST_ID} [call0]: mismatch (torch: baseline '2.4.1+cpu', this run '2.5.0+cpu')" in out
    assert "were measured in different environments, so they were not compared" in out
    assert "conv2" not in out


def test_diff_lists_profiles_only_one_side_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_profiles(tmp_path / "a.json", [("t.py::test_kept", "call0", result()), ("t.py::test_old", "m", result())])
    b = write_profiles(tmp_path / "b.json", [("t.py::test_kept", "call0", result()), ("t.py::test_new", "m", result())])
    code, out, _ = run(capsys, "diff", a, b)
    assert code == 0
    assert f"only in A ({a}): t.py::test_old [m]" in out
    assert f"only in B ({b}): t.py::test_new [m]" in out
    assert "1 compared: 1 pass; 1 only in A, 1 only in B" in out
    # a baseline against a whole run's report: the report's other tests are left out, not listed
    baseline = write_baseline(tmp_path, {"call0": entry()}, "t.py::test_kept")
    code, out, _ = run(capsys, "diff", baseline, b)
    assert code == 0
    assert "1 profile(s) of other tests" in out
    assert not [line for line in out.splitlines() if line.startswith("only in")]


def test_diff_with_nothing_in_common_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_profiles(tmp_path / "a.json", [("t.py::test_a", "call0", result())])
    b = write_profiles(tmp_path / "b.json", [("t.py::test_b", "call0", result())])
    code, _, err = run(capsys, "diff", a, b)
    assert code == 2
    assert "no profile is in both (same test id and key)" in err
    code, _, err = run(capsys, "diff", a, a, "--key", "other")
    assert code == 2
    assert "key 'other'" in err


@pytest.mark.parametrize(
    ("change", "flags", "expected"),
    [
        pytest.param(({"conv2": 1.3}, 1.0), [], "slower node: conv2", id="node-default-band"),
        pytest.param(({"conv2": 1.3}, 1.0), ["--node-tolerance", "0.5"], "", id="node-wider-band"),
        pytest.param(({"conv2": 1.3}, 1.0), ["--floor-us", "200"], "", id="node-under-a-higher-floor"),
        pytest.param(({"conv2": 1.1}, 1.0), [], "", id="node-within-the-default-band"),
        pytest.param(({"conv2": 1.1}, 1.0), ["--node-tolerance", "0.05"], "slower node: conv2", id="narrower-band"),
        pytest.param(({}, 1.3), [], "band +10% (tolerance): slower", id="total-default-band"),
        pytest.param(({}, 1.3), ["--total-tolerance", "0.5"], "", id="total-wider-band"),
    ],
)
def test_diff_tolerance_flags_change_the_outcome(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: tuple[dict[str, float], float],
    flags: list[str],
    expected: str,
) -> None:
    """``expected`` is what failed the pair, empty where it passes."""
    baseline = write_baseline(tmp_path, {"call0": entry()})
    report = write_profiles(tmp_path / "report.json", [(TEST_ID, "call0", result(*change))])
    code, out, _ = run(capsys, "diff", baseline, report, *flags)
    assert code == (1 if expected else 0)
    assert f"{TEST_ID} [call0]: {'regression' if expected else 'pass'}, " in out
    assert expected in out


def test_diff_says_which_policy_it_judged_with(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    baseline = write_baseline(tmp_path, {"call0": entry()})
    code, out, _ = run(capsys, "diff", baseline, baseline, "--node-tolerance", "0.25", "--floor-us", "50")
    assert code == 0
    assert "judged with node tolerance +25%, total tolerance +10%, floor 50.0 us" in out


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--node-tolerance", "-1", "--node-tolerance: node_tolerance must be at least 0, not '-1'"),
        ("--total-tolerance", "abc", "--total-tolerance: total_tolerance must be a number, not 'abc'"),
        ("--floor-us", "nan", "--floor-us: floor_us must be a finite number, not 'nan'"),
    ],
)
def test_diff_refuses_a_bad_tolerance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    baseline = write_baseline(tmp_path, {"call0": entry()})
    code, out, err = run(capsys, "diff", baseline, baseline, flag, value)
    assert (code, out) == (2, "")
    assert err.startswith(f"fxprof: error: {message}. Pass ")
    assert err.count("\n") == 1


def test_diff_writes_the_node_comparisons_as_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    baseline = write_baseline(tmp_path, {"call0": entry(), "second": entry()})
    report = write_profiles(
        tmp_path / "report.json", [(TEST_ID, "call0", result({"conv2": 1.5})), (TEST_ID, "second", result())]
    )
    csv = tmp_path / "diff.csv"
    code, out, _ = run(capsys, "diff", baseline, report, "--csv", csv)
    assert code == 1
    assert f"wrote 16 rows to {csv}" in out
    frame = pd.read_csv(csv)
    assert list(frame.groupby("key").size().items()) == [("call0", 8), ("second", 8)]
    first = frame.iloc[0]
    assert (first["key"], first["node"], first["module"], first["verdict"]) == (
        "call0",
        "conv2",
        "layer1.conv",
        "slower",
    )
    assert (first["a_us"], first["b_us"], first["ratio"]) == (pytest.approx(300.0), pytest.approx(450.0), 1.5)
    assert set(frame[frame["key"] == "second"]["verdict"]) == {"ok"}


def test_diff_skips_profiles_that_were_not_measured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    baseline = write_baseline(tmp_path, {"call0": entry()})
    report = write_profiles(tmp_path / "report.json", [(TEST_ID, "call0", result())])
    data = json.loads(report.read_text())
    data["profiles"][0]["status"] = "unmeasured"
    report.write_text(json.dumps(data))
    code, out, err = run(capsys, "diff", baseline, report)
    assert code == 2
    assert f"not compared: {TEST_ID} [call0]" in out
    assert "no profile is in both" in err


# Inputs that cannot be read ----------------------------------------------------------------------


def _baseline_text(tmp_path: Path) -> str:
    return write_baseline(tmp_path / "good", {"call0": entry()}).read_text()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "no such file. Check the path", id="missing"),
        pytest.param("", "the file is empty", id="empty"),
        pytest.param('{"schema_version": 1, "test_id": ', "not valid JSON (Expecting value at line 1", id="truncated"),
        pytest.param(
            '{"coverage": 3}', "neither a pytest-fxprof baseline (it has no schema_version) nor a report", id="other"
        ),
        pytest.param("[1, 2]", "neither a pytest-fxprof baseline", id="a-list"),
        pytest.param("conflict", "the file contains git merge-conflict markers. Resolve the conflict", id="conflict"),
        pytest.param('{"schema_version": 7}', "it has schema version 7, newer than the 2", id="newer-baseline"),
        pytest.param(
            '{"report_version": 9, "profiles": []}', "it has report version 9, newer than the 2", id="newer-report"
        ),
        pytest.param(
            '{"report_version": 1, "profiles": {}}', "the report's 'profiles' should be a list", id="report-shape"
        ),
        pytest.param("no-runs", "the report is malformed: profiles[0].runs is missing", id="report-profile"),
        pytest.param("[" * 100_000 + "]" * 100_000, "it is nested too deeply to be a file", id="nested-too-deep"),
        pytest.param("big-int", "].total_ns holds an integer of 401 digits (100000000000...), beyond 64", id="big-int"),
    ],
)
@pytest.mark.parametrize("command", ["show", "diff-a", "diff-b"])
def test_unreadable_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str, command: str
) -> None:
    bad = tmp_path / "bad.json"
    good = write_baseline(tmp_path / "good", {"call0": entry()})
    if content == "conflict":
        content = "<<<<<<< HEAD\n" + good.read_text() + "=======\n" + good.read_text() + ">>>>>>> branch\n"
    elif content == "big-int":
        content = re.sub(r'"total_ns": \d+', '"total_ns": 1' + "0" * 400, good.read_text(), count=1)
    elif content == "no-runs":
        report = write_profiles(tmp_path / "r.json", [(TEST_ID, "call0", result())])
        data = json.loads(report.read_text())
        del data["profiles"][0]["runs"]
        content = json.dumps(data)
    if content is not None:
        bad.write_text(content)
    argvs: dict[str, list[str | Path]] = {
        "show": ["show", bad],
        "diff-a": ["diff", bad, good],
        "diff-b": ["diff", good, bad],
    }
    code, out, err = run(capsys, *argvs[command])
    assert (code, out) == (2, "")
    assert err.startswith(f"fxprof: error: {bad}: ")
    assert message in err
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "show" in capsys.readouterr().err
    assert main(["show"]) == 2
    assert "the following arguments are required: BASELINE" in capsys.readouterr().err
    assert main(["show", "x.json", "--limit", "0"]) == 2
    assert "--limit: must be at least 1" in capsys.readouterr().err
    for command, option in (("show", "--sort"), ("diff", "--node-tolerance"), ("prune", "--yes")):
        assert main([command, "--help"]) == 0
        assert option in capsys.readouterr().out


# fxprof prune ---------------------------------------------------------------------------------------


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project whose ``baselines/`` holds baselines of existing, removed and module-skipped tests."""
    pytester.makepyfile(
        test_kept="def test_a():\n    pass\n\ndef test_b():\n    pass\n",
        test_skipped="import pytest\npytest.skip('no GPU', allow_module_level=True)\n\ndef test_gpu():\n    pass\n",
    )
    directory = pytester.path / "baselines"
    for test_id in (
        "test_kept.py::test_a",
        "test_kept.py::test_removed",
        "test_gone.py::test_x",
        "test_skipped.py::test_gpu",
    ):
        write_baseline(directory, {"call0": entry()}, test_id)
    (directory / "broken.json").write_text("{")
    (directory / ".test_kept.py_test_a-0123.abc.tmp").write_text("half")
    pytester.chdir()
    return pytester


def _files(pytester: pytest.Pytester) -> set[str]:
    return {p.name for p in (pytester.path / "baselines").iterdir()}


def test_prune_lists_and_keeps_without_yes(project: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    before = _files(project)
    code, out, err = run(capsys, "prune")
    assert code == 2  # it found an unreadable file: listed, never removed, and the exit status says so
    assert err.startswith("fxprof: error: baselines: 1 file(s) in it cannot be read as baselines (listed above). ")
    assert _files(project) == before
    assert "2 baseline(s) in baselines belong to tests that exist" in out  # test_a, and the skipped file's
    assert f"{file_name('test_kept.py::test_removed')}  (test_kept.py::test_removed: not collected" in out
    assert f"{file_name('test_gone.py::test_x')}  (test_gone.py::test_x: its test file test_gone.py is gone)" in out
    assert ".test_kept.py_test_a-0123.abc.tmp" in out
    assert "1 unreadable (fix or delete by hand; never removed here):" in out
    assert "broken.json: not valid JSON" in out
    assert "nothing was removed; to remove these 3 file(s): fxprof prune --yes" in out


def test_prune_lists_a_file_nested_too_deeply_as_unreadable(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    (project.path / "baselines" / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    code, out, err = run(capsys, "prune", "--yes")
    assert code == 2
    assert "2 file(s) in it cannot be read as baselines (listed above)" in err
    assert err.count("\n") == 1
    assert "deep.json: the file is not a pytest-fxprof baseline: it is nested too deeply" in out
    assert "deep.json" in _files(project)  # never removed here


def test_the_prune_command_it_prints_is_quoted_for_the_shell(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    (project.path / "baselines" / "broken.json").unlink()
    odd = "--junit-prefix=it's $HOME `x`"  # any argument for pytest's collection, as the shell must pass it
    code, out, _ = run(capsys, "prune", "--", "-p", "no:randomly", odd)
    assert code == 0
    command = out.rsplit("file(s): ", 1)[1].strip()
    assert shlex.split(command)[-3:] == ["-p", "no:randomly", odd]


def test_prune_with_yes_removes_only_what_it_listed(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "prune", "--yes", "--", "-p", "no:randomly")
    assert code == 2  # broken.json stays, and says so
    assert "removed 3 file(s)" in out
    assert _files(project) == {
        file_name("test_kept.py::test_a"),
        file_name("test_skipped.py::test_gpu"),
        "broken.json",
    }


def test_prune_refuses_when_collection_fails(project: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    project.makepyfile(test_broken="import no_such_module\n\ndef test_c():\n    pass\n")
    before = _files(project)
    code, out, err = run(capsys, "prune", "--yes")
    assert code == 2
    assert _files(project) == before
    assert "no_such_module" in err  # the tail of pytest's output
    assert "fxprof: error: the collection failed (pytest exit code 2)" in err
    assert err.rstrip().endswith("no baseline was removed")
    assert "removed" not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-k", "test_a"], "the collection deselected tests"),
        (["test_kept.py::test_a"], "select single tests"),
    ],
)
def test_prune_refuses_a_partial_collection(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    before = _files(project)
    code, _, err = run(capsys, "prune", "--yes", "--", *args)
    assert code == 2
    assert message in err
    assert _files(project) == before


def test_prune_from_another_rootdir_removes_nothing(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """From a subdirectory with tests of its own (its own rootdir), no baseline's test is collected: every
    test file would look gone, so the command refuses rather than remove live baselines."""
    sub = project.mkdir("sub")
    (sub / "pytest.ini").write_text("[pytest]\n")
    (sub / "test_other.py").write_text("def test_o():\n    pass\n")
    before = _files(project)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(sub)
        code, out, err = run(capsys, "prune", "--yes", "--baseline-dir", "../baselines")
    assert code == 2
    assert "none of its 4 baseline(s) belongs to a test collected here" in err
    assert "removed" not in out
    assert _files(project) == before


def test_prune_where_nothing_is_collected_removes_nothing(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = project.mkdir("empty")
    (empty / "pytest.ini").write_text("[pytest]\n")
    before = _files(project)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(empty)
        code, _, err = run(capsys, "prune", "--yes", "--baseline-dir", "../baselines")
    assert code == 2
    assert "pytest collected no test here" in err
    assert _files(project) == before


def test_a_closed_pipe_is_not_reported_as_a_regression(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_baseline(tmp_path, {"call0": entry()})

    def broken(*args: object, **kwargs: object) -> None:
        raise BrokenPipeError

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("builtins.print", broken)
        code = main(["show", str(path)])
    assert code == 141


def test_prune_of_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "prune", "--baseline-dir", tmp_path / "nope")
    assert (code, out) == (2, "")
    assert (
        err
        == f"fxprof: error: {tmp_path / 'nope'}: no such directory. Pass the baseline directory with --baseline-dir\n"
    )


# merge -------------------------------------------------------------------------------------------------


def test_merge_joins_the_shards_reports_and_writes_their_views(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_profiles(tmp_path / "a.json", [("t.py::test_a", "call0", result())])
    b = write_profiles(tmp_path / "b.json", [("t.py::test_b", "call0", result({"conv2": 1.5}))])
    out, md, html = tmp_path / "all.json", tmp_path / "all.md", tmp_path / "all.html"
    code, stdout, _ = run(capsys, "merge", out, a, b, "--markdown", md, "--html", html)
    assert code == 0
    assert "merged 2 report(s), 2 profile(s)" in stdout
    merged = json.loads(out.read_text())
    assert [p["test_id"] for p in merged["profiles"]] == ["t.py::test_a", "t.py::test_b"]
    assert merged["mode"] == "check"
    assert "t.py::test_b" in md.read_text()
    assert html.read_text().startswith("<!DOCTYPE html>")


def test_merge_adds_up_where_the_shards_time_went(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_profiles(tmp_path / "a.json", [("t.py::test_a", "call0", result())])
    b = write_profiles(tmp_path / "b.json", [("t.py::test_b", "call0", result())])
    c = write_profiles(tmp_path / "c.json", [("t.py::test_c", "call0", result())])
    for path, seconds in ((a, 10.0), (b, 2.5)):
        raw = json.loads(path.read_text())
        raw["time"] = {"processes_s": seconds, "measuring_s": 1.0, "processes": 2}
        path.write_text(json.dumps(raw))
    out = tmp_path / "all.json"
    code, _, _ = run(capsys, "merge", out, a, b, c)  # c records none
    assert code == 0
    assert json.loads(out.read_text())["time"] == {"processes_s": 12.5, "measuring_s": 2.0, "processes": 4}
    code, _, _ = run(capsys, "merge", tmp_path / "none.json", c)
    assert "time" not in json.loads((tmp_path / "none.json").read_text())


def test_merge_refuses_overlapping_shards_and_mixed_modes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_profiles(tmp_path / "a.json", [("t.py::test_a", "call0", result())])
    again = write_profiles(tmp_path / "again.json", [("t.py::test_a", "call0", result())])
    code, _, err = run(capsys, "merge", tmp_path / "out.json", a, again)
    assert code == 2
    assert "t.py::test_a [call0] is also in" in err
    update = write_profiles(tmp_path / "u.json", [("t.py::test_c", "call0", result())], mode="update")
    code, _, err = run(capsys, "merge", tmp_path / "out.json", a, update)
    assert code == 2
    assert "different modes" in err
    assert not (tmp_path / "out.json").exists()
    shards = []
    for name, revision in (("b", "main (1a2b3c4)"), ("c", "main (5d6e7f8)")):
        path = write_profiles(tmp_path / f"{name}.json", [(f"t.py::test_{name}", "call0", result())])
        data = json.loads(path.read_text())
        data["profiles"][0]["against"] = revision
        path.write_text(json.dumps(data))
        shards.append(path)
    code, _, err = run(capsys, "merge", tmp_path / "out.json", *shards)
    assert code == 2
    assert "checked against different revisions: main (1a2b3c4)" in err
    assert not (tmp_path / "out.json").exists()
    # a shard written before the total was the plain call: its totals mean something else
    old = write_profiles(tmp_path / "old.json", [("t.py::test_d", "call0", result())])
    data = json.loads(old.read_text())
    data["report_version"] = 1
    old.write_text(json.dumps(data))
    code, _, err = run(capsys, "merge", tmp_path / "out.json", a, old)
    assert code == 2
    assert "versions of pytest-fxprof whose reports differ: version 1" in err
    assert not (tmp_path / "out.json").exists()


# History: fxprof show, fxprof prune --history, fxprof migrate ---------------------------------------

DAYS = [f"2026-11-{d:02d}T12:00:00Z" for d in range(1, 8)]


def with_history(dates: Sequence[str], env: Environment = ENV) -> BaselineEntry:
    """An entry refreshed once per date (oldest first), every recording kept; the n-th is ``n`` percent slower."""
    out: BaselineEntry | None = None
    for i, date in enumerate(dates):
        out, why = carry(out, entry(env=env) if i == 0 else replace(entry(env=env), runs=slower(i)), 99, date)
        assert why == ""
    assert out is not None
    return out


def slower(percent: int) -> tuple[Run, ...]:
    return tuple(replace(r, total_ns=r.total_ns * (100 + percent) // 100) for r in entry().runs)


def test_show_lists_the_recordings_newest_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_baseline(tmp_path, {"call0": with_history(DAYS[:3])})
    code, out, err = run(capsys, "show", path)
    assert (code, err) == (0, "")
    assert "recordings: 3, newest first" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("2026-11-")]
    assert [(r[0], r[1], r[2]) for r in rows] == [(DAYS[2], "latest", "5"), (DAYS[1], "-1", "5"), (DAYS[0], "-2", "5")]
    # the totals' medians: 1 ms, 1 % and 2 % slower
    assert [" ".join(r[3:5]) for r in rows] == ["1.02 ms", "1.01 ms", "1.00 ms"]
    assert all(
        f"torch {ENV.torch}; python {ENV.python}; cpu {ENV.cpu}; 1 thread(s); cpu" in line
        for line in out.splitlines()
        if line.startswith("2026-11-")
    )


def test_show_of_a_version_1_entry_lists_its_one_undated_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "show", Path(__file__).parent / "data" / "baseline_v1.json")
    assert code == 0
    assert "recordings: 1, newest first" in out
    assert any(line.startswith("unknown  latest") for line in out.splitlines()), out


def test_prune_history_lists_then_trims_with_yes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "perf"
    long = write_baseline(directory, {"call0": with_history(DAYS[:5]), "short": with_history(DAYS[:2])})
    short = write_baseline(directory, {"call0": with_history(DAYS[:2])}, test_id="tests/test_other.py::test_x")
    before = {p: p.read_bytes() for p in (long, short)}

    code, out, err = run(capsys, "prune", "--history", "2", "--baseline-dir", directory)
    assert (code, err) == (0, "")
    assert f"1 entry in 1 file(s) hold more than 2 recording(s):\n  {long}\n" in out
    assert f"{TEST_ID} [call0]: 5 -> 2 recording(s), dropping {DAYS[2]}, {DAYS[1]}, {DAYS[0]}" in out
    assert f"to trim these 1 file(s): fxprof prune --history 2 --yes --baseline-dir {directory}" in out
    assert {p: p.read_bytes() for p in (long, short)} == before  # without --yes, nothing is written

    code, out, _ = run(capsys, "prune", "--history", "2", "--yes", "--baseline-dir", directory)
    assert code == 0
    assert "trimmed 1 entry in 1 file(s)" in out
    trimmed = BaselineStore(directory).load(TEST_ID)
    assert trimmed is not None
    assert [r.date for r in trimmed.entries["call0"].recordings] == [DAYS[4], DAYS[3]]
    assert [r.date for r in trimmed.entries["short"].recordings] == [DAYS[1], DAYS[0]]
    assert trimmed.entries["call0"].runs == with_history(DAYS[:5]).runs  # the latest recording is untouched
    assert short.read_bytes() == before[short]
    assert not list(directory.glob(".*.tmp"))

    code, out, _ = run(capsys, "prune", "--history", "1", "--yes", "--baseline-dir", directory)
    assert code == 0
    assert "trimmed 3 entries in 2 file(s)" in out
    assert all(e.history == () for p in (long, short) for e in read_baseline(p).entries.values())
    code, out, _ = run(capsys, "prune", "--history", "1", "--baseline-dir", directory)
    assert "nothing to trim" in out


def test_prune_history_never_rewrites_an_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_baseline(tmp_path, {"call0": with_history(DAYS[:3])})
    newer = tmp_path / "newer.json"
    newer.write_text('{"schema_version": 99}', encoding="utf-8")
    code, out, err = run(capsys, "prune", "--history", "1", "--yes", "--baseline-dir", tmp_path)
    assert code == 2
    assert f"{newer}: it has schema version 99" in out
    assert "cannot be read as baselines (listed above). Fix them, or delete them by hand" in err
    assert newer.read_text(encoding="utf-8") == '{"schema_version": 99}'
    assert read_baseline(path).entries["call0"].history == ()  # the readable file was trimmed


def test_prune_history_takes_no_collection_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "prune", "--history", "2", "--baseline-dir", tmp_path, "--", "-k", "x")
    assert code == 2
    assert "--history trims the baselines' histories without collecting tests" in err
    code, _, err = run(capsys, "prune", "--history", "0", "--baseline-dir", tmp_path)
    assert code == 2
    assert "--history: must be at least 1, not 0" in err


def test_migrate_rewrites_version_1_files_keeping_every_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    golden = Path(__file__).parent / "data" / "baseline_v1.json"
    old = tmp_path / golden.name
    old.write_bytes(golden.read_bytes())
    current = write_baseline(tmp_path, {"call0": with_history(DAYS[:2])})
    current_bytes = current.read_bytes()
    unknown = tmp_path / "unknown.json"
    raw = json.loads(golden.read_text(encoding="utf-8"))
    raw["entries"]["forward"]["note"] = "hand-written"
    unknown.write_text(json.dumps(raw), encoding="utf-8")

    code, out, _ = run(capsys, "migrate", tmp_path, "--dry-run")
    assert code == 2
    assert f"would rewrite 1 file(s) in schema version 2:\n  {old} (version 1)" in out
    assert old.read_bytes() == golden.read_bytes()

    code, out, err = run(capsys, "migrate", tmp_path)
    assert code == 2  # the file with a field this version does not know is refused, and said so
    assert f"{unknown}: rewriting it would lose entries['forward']['note']" in out
    assert "1 file(s) in it could not be migrated" in err
    assert f"1 baseline file(s) in {tmp_path} are in schema version 2 already" in out
    assert json.loads(unknown.read_text(encoding="utf-8")) == raw
    assert current.read_bytes() == current_bytes
    migrated = old.read_text(encoding="utf-8")
    assert migrated == golden.read_text(encoding="utf-8").replace('"schema_version": 1,', '"schema_version": 2,')
    assert read_baseline(old) == read_baseline(golden)
