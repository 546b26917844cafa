"""Unit tests of ``pytest_fxprof.views.benchjson``: pytest-benchmark's JSON from hand-made profile reports, read back
by pytest-benchmark's own ``compare`` command (no torch)."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_fxprof.judge.decision import compare
from pytest_fxprof.records.measurement import NodeInfo, NodeStats, Tolerances, iqr_int, median_int, node_key
from pytest_fxprof.result import ProfileResult
from pytest_fxprof.views.benchjson import benchmark_json, write_benchmark_json
from pytest_fxprof.views.judged_json import NodeJSON
from pytest_fxprof.views.report import ProfileReportJSON, profile_report
from tests.records_for_tests import CAPTURE, ENV, POLICY, PROTOCOL

TOLERANCES = Tolerances(0.1, 0.15)
MACHINE = {"node": "test-machine", "machine": "x86_64", "cpu": {"brand_raw": "Test CPU"}}
COMMIT = {"id": "0" * 40, "time": None, "author_time": None, "dirty": False, "project": "p", "branch": "main"}


def info(name: str, target: str, module: str, op: str) -> NodeInfo:
    return NodeInfo(node_key(op, module, target, 0), name, op, target, module)


GRAPH: tuple[tuple[NodeInfo, int], ...] = (
    (info("conv", "Conv2d", "stem.conv", "call_module"), 400_000),
    (info("relu", "torch.relu", "stem", "call_function"), 90_000),
    (info("fc", "Linear", "fc", "call_module"), 450_000),
)
PASSES = 5


def result(factors: Mapping[str, float] | None = None, passes: int = PASSES) -> ProfileResult:
    factors = factors or {}
    stats = []
    for i, (info, ns) in enumerate(GRAPH):
        samples = tuple(
            round(ns * factors.get(info.name, 1.0)) + 1_000 * ((p * (i + 3)) % passes) for p in range(passes)
        )
        stats.append(NodeStats(info, median_int(samples), iqr_int(samples), 0.3, samples, shape=f"float32[{i + 1}, 8]"))
    per_pass = tuple(sum(s.samples_ns[p] for s in stats) + 7_000 * p for p in range(passes))
    return ProfileResult(
        name="Net",
        nodes=tuple(stats),
        total_samples_ns=per_pass,
        instrumented_samples_ns=per_pass,
        reference_samples_ns=(500_000,) * passes,
        environment=ENV,
        protocol=PROTOCOL,
        capture=CAPTURE,
    )


def checked(factors: Mapping[str, float], test_id: str = "t.py::test_net", key: str = "call0") -> ProfileReportJSON:
    current = result(factors)
    c = compare(result().entry(TOLERANCES), current.entry(TOLERANCES), POLICY)
    return profile_report(test_id, key, c.status.value, current, c)


SLOWER = checked({"conv": 3.0})
OTHER = checked({}, test_id="t.py::test_other[a-b]", key="encoder")


def by_fullname(document: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["fullname"]: b for b in document["benchmarks"]}


def test_one_benchmark_per_profile_and_per_node(tmp_path: Path) -> None:
    document = benchmark_json([SLOWER, OTHER], MACHINE, COMMIT)
    assert len(document["benchmarks"]) == 2 + 2 * len(GRAPH)
    assert (document["machine_info"], document["commit_info"]) == (MACHINE, COMMIT)
    assert {"datetime", "version"} <= set(document)
    names = by_fullname(document)
    assert len(names) == len(document["benchmarks"])  # fullnames are unique
    profile = names["t.py::test_net[call0]"]
    assert (profile["name"], profile["group"]) == ("test_net[call0]", "t.py::test_net")
    node = names["t.py::test_other[a-b][encoder]::relu"]
    assert (node["name"], node["group"]) == ("relu", "t.py::test_other[a-b][encoder]")
    assert node["extra_info"] == {
        "key": GRAPH[1][0].key,
        "direction": "forward",
        "forward": "",
        "module": "stem",
        "target": "torch.relu",
        "op": "call_function",
        "shape": "float32[2, 8]",
        "layout": "",
        "source": "",
        "verdict": "ok",
        "ratio": OTHER["nodes"][1]["ratio"],
    }


def test_a_benchmark_holds_its_samples_in_seconds() -> None:
    names = by_fullname(benchmark_json([SLOWER], MACHINE, COMMIT))
    for row in SLOWER["nodes"]:
        stats = names[f"t.py::test_net[call0]::{row['name']}"]["stats"]
        seconds = [s / 1e9 for s in row["samples_ns"]]
        assert stats["data"] == seconds
        assert (stats["rounds"], stats["iterations"]) == (PASSES, 1)
        assert stats["min"] == min(seconds)
        assert stats["max"] == max(seconds)
        assert stats["median"] == pytest.approx(statistics.median(seconds))
        assert stats["median"] == pytest.approx(row["current_ns"] / 1e9)
    total = names["t.py::test_net[call0]"]["stats"]
    assert total["data"] == [s / 1e9 for s in SLOWER["total"]["samples_ns"]]
    assert len(set(total["data"])) == PASSES  # the per-pass samples, not a median repeated


def test_verdicts_ride_in_extra_info() -> None:
    names = by_fullname(benchmark_json([SLOWER], MACHINE, COMMIT))
    conv = names["t.py::test_net[call0]::conv"]["extra_info"]
    assert (conv["verdict"], conv["ratio"]) == ("slower", SLOWER["nodes"][0]["ratio"])
    profile = names["t.py::test_net[call0]"]
    assert profile["extra_info"]["status"] == "regression"
    assert profile["extra_info"]["verdict"] == SLOWER["total"]["verdict"]
    assert (profile["extra_info"]["passes"], profile["extra_info"]["warmup"]) == (PROTOCOL.passes, PROTOCOL.warmup)
    assert profile["options"]["min_rounds"] == PROTOCOL.passes


def test_an_unmeasured_profile_has_one_round_and_no_verdict() -> None:
    report = profile_report("t.py::test_net", "call0", "unmeasured", result(passes=1), None)
    document = benchmark_json([report], MACHINE, COMMIT)
    assert len(document["benchmarks"]) == 1 + len(GRAPH)
    for bench in document["benchmarks"]:
        assert bench["stats"]["rounds"] == 1
        assert bench["stats"]["min"] == bench["stats"]["max"] == bench["stats"]["median"]
        assert bench["extra_info"]["verdict"] is None
        assert bench["extra_info"]["ratio"] is None


def test_nodes_that_share_a_name_keep_unique_fullnames() -> None:
    twin: NodeJSON = {**SLOWER["nodes"][2], "key": "call_module:fc:Linear#1"}
    report: ProfileReportJSON = {**SLOWER, "nodes": [*SLOWER["nodes"], twin]}
    fullnames = [b["fullname"] for b in benchmark_json([report], MACHINE, COMMIT)["benchmarks"]]
    assert len(set(fullnames)) == len(fullnames) == 2 + len(GRAPH)
    assert "t.py::test_net[call0]::call_module:fc:Linear#1" in fullnames


def test_bad_input_is_refused() -> None:
    no_samples: ProfileReportJSON = {**SLOWER, "nodes": [{**SLOWER["nodes"][0], "samples_ns": []}]}
    with pytest.raises(ValueError, match="node 'conv' has no samples"):
        benchmark_json([no_samples], MACHINE, COMMIT)
    with pytest.raises(ValueError, match=re.escape("two benchmarks named t.py::test_net[call0]")):
        benchmark_json([SLOWER, SLOWER], MACHINE, COMMIT)
    with pytest.raises(ValueError, match="no test_id or key"):
        benchmark_json([{**SLOWER, "key": ""}], MACHINE, COMMIT)


def test_pytest_benchmark_compare_reads_our_files(tmp_path: Path) -> None:
    before, after = tmp_path / "0001_before.json", tmp_path / "0002_after.json"
    write_benchmark_json(before, [checked({}), OTHER])
    write_benchmark_json(after, [SLOWER, OTHER])
    document = json.loads(after.read_text(encoding="utf-8"))
    assert document["machine_info"]["python_version"]  # pytest-benchmark's own machine information
    assert "id" in document["commit_info"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [before.name, after.name]  # no temporary file left
    # the histogram needs pygal, which pytest-benchmark does not require; the table and CSV need nothing more
    command = [sys.executable, "-m", "pytest_benchmark", "compare", str(before), str(after), "--csv", "both"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    assert "Failed to load" not in output
    for name in ("test_net[call0]", "test_other[a-b][encoder]", "conv", "relu", "fc"):
        for source in ("0001_before", "0002_after"):  # a row per benchmark and file, the file's path shortened
            assert re.search(rf"^{re.escape(name)} \(\S*{source}\) ", output, re.MULTILINE), (name, source)
    assert "benchmark 't.py::test_net[call0]': 6 tests" in output  # the nodes grouped by profile
    csv = (tmp_path / "both.csv").read_text(encoding="utf-8")
    assert csv.count("\n") == 1 + 2 * (2 + 2 * len(GRAPH))


def test_importing_the_module_does_not_import_pytest_benchmark() -> None:
    code = "import sys, pytest_fxprof.views.benchjson; print('pytest_benchmark' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"
