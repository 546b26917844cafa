"""Unit tests of ``pytest_fxprof.views.trace``: Chrome trace files built from hand-made profile reports (no torch)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any, cast

import pytest

from pytest_fxprof.judge.decision import compare
from pytest_fxprof.records.disturbance import BUSY_LINE, Disturbance
from pytest_fxprof.records.measurement import NodeInfo, NodeStats, Tolerances, iqr_int, median_int, node_key
from pytest_fxprof.result import ProfileResult
from pytest_fxprof.views.report import ProfileReportJSON, profile_report
from pytest_fxprof.views.trace import TRACE_SUFFIX, trace_events, trace_file_name, write_traces
from tests.records_for_tests import CAPTURE, ENV, POLICY, PROTOCOL


def info(name: str, target: str, module: str, op: str = "call_function") -> NodeInfo:
    return NodeInfo(node_key(op, module, target, 0), name, op, target, module, source=f"model.py:{len(name)}")


# Module "a" runs, then "b", then "a" again: two separate spans of "a" per pass, with "b" between them.
# Times are odd nanosecond counts, so microsecond floats cannot hide a nesting error.
GRAPH: tuple[tuple[NodeInfo, int], ...] = (
    (info("x", "x", "", op="placeholder"), 3),
    (info("conv", "Conv2d", "a.conv", op="call_module"), 400_001),
    (info("relu", "torch.relu", "a"), 100_003),
    (info("lin", "Linear", "b.lin", op="call_module"), 300_007),
    (info("add", "operator.add", "a"), 100_009),
    (info("out", "torch.flatten", ""), 99_977),
)
PASSES = 3
TOLERANCES = Tolerances(0.1, 0.15)


def result(factors: Mapping[str, float] | None = None, passes: int = PASSES) -> ProfileResult:
    """Each node's base time, scaled by its factor, varied a little from pass to pass."""
    factors = factors or {}
    stats = []
    for i, (node, ns) in enumerate(GRAPH):
        samples = tuple(round(ns * factors.get(node.name, 1.0)) + 11 * i * p for p in range(passes))
        stats.append(
            NodeStats(
                info=node,
                median_ns=median_int(samples),
                spread_ns=iqr_int(samples),
                share=0.0,
                samples_ns=samples,
                shape=f"float32[1, {i + 1}]",
                layout="contiguous",
            )
        )
    per_pass = tuple(sum(s.samples_ns[p] for s in stats) for p in range(passes))
    return ProfileResult(
        name="Net",
        nodes=tuple(stats),
        total_samples_ns=per_pass,
        instrumented_samples_ns=tuple(t + 5_000 for t in per_pass),
        reference_samples_ns=(500_000,) * passes,
        environment=ENV,
        protocol=PROTOCOL,
        capture=CAPTURE,
        measured=passes > 1,
    )


def checked(factors: Mapping[str, float], test_id: str = "t.py::test_net", key: str = "call0") -> ProfileReportJSON:
    current = result(factors)
    c = compare(result().entry(TOLERANCES), current.entry(TOLERANCES), POLICY)
    return profile_report(test_id, key, c.status.value, current, c)


SLOWER = checked({"conv": 3.0})  # conv x3 fails alone, and its module "a" with it


def spans(trace: Mapping[str, Any], cat: str) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == cat]


def ns(event: Mapping[str, Any]) -> tuple[int, int]:
    """Start and end in whole nanoseconds, rounded as Perfetto reads microseconds."""
    start = round(event["ts"] * 1000)
    return start, start + round(event["dur"] * 1000)


def inside(child: Mapping[str, Any], parent: Mapping[str, Any]) -> bool:
    (cs, ce), (ps, pe) = ns(child), ns(parent)
    return ps <= cs and ce <= pe and parent["ts"] <= child["ts"]


def test_a_trace_file_per_profile_is_valid_json(tmp_path: Path) -> None:
    other = checked({}, key="call1")
    paths = write_traces(tmp_path / "traces", [SLOWER, other])
    assert [p.parent for p in paths] == [tmp_path / "traces"] * 2
    assert len(set(paths)) == 2
    data = json.loads(paths[0].read_text(encoding="utf-8"))
    assert set(data) == {"traceEvents", "displayTimeUnit", "otherData"}
    assert data["displayTimeUnit"] == "ns"
    assert data["otherData"]["test_id"] == "t.py::test_net"
    assert data["otherData"]["passes"] == PASSES
    names = {e["name"]: e["args"]["name"] for e in data["traceEvents"] if e["ph"] == "M"}
    assert names == {"process_name": "t.py::test_net", "thread_name": "t.py::test_net [call0]"}
    assert {(e["pid"], e["tid"]) for e in data["traceEvents"]} == {(1, 1)}
    assert len(spans(data, "node")) == len(GRAPH) * PASSES
    assert [e["name"] for e in spans(data, "pass")] == [f"pass {i}" for i in range(PASSES)]
    assert json.loads(paths[1].read_text(encoding="utf-8"))["otherData"]["key"] == "call1"


def test_node_spans_last_their_samples_back_to_back_in_graph_order() -> None:
    trace = trace_events(SLOWER)
    nodes = spans(trace, "node")
    passes = spans(trace, "pass")
    for i, whole in enumerate(passes):
        in_pass = [n for n in nodes if n["args"]["pass_index"] == i]
        assert [n["name"] for n in in_pass] == [row["name"] for row in SLOWER["nodes"]]
        assert [ns(n)[1] - ns(n)[0] for n in in_pass] == [row["samples_ns"][i] for row in SLOWER["nodes"]]
        assert [n["args"]["time_ns"] for n in in_pass] == [row["samples_ns"][i] for row in SLOWER["nodes"]]
        assert ns(in_pass[0])[0] == ns(whole)[0]
        assert all(ns(a)[1] == ns(b)[0] for a, b in pairwise(in_pass))  # no gap invented
        assert ns(in_pass[-1])[1] == ns(whole)[1]
        assert whole["args"]["nodes_ns"] == sum(row["samples_ns"][i] for row in SLOWER["nodes"])
        assert whole["args"]["instrumented_ns"] == SLOWER["total"]["samples_ns"][i]
    assert ns(passes[0])[0] == 0
    assert all(ns(a)[1] == ns(b)[0] for a, b in pairwise(passes))


def test_every_node_span_lies_in_its_pass_and_every_ancestor_module() -> None:
    trace = trace_events(SLOWER)
    passes, modules = spans(trace, "pass"), spans(trace, "module")
    for node in spans(trace, "node"):
        assert inside(node, passes[node["args"]["pass_index"]])
        path = node["args"]["module"]
        ancestors = [".".join(path.split(".")[: d + 1]) for d in range(path.count(".") + 1)] if path else []
        for name in ancestors:
            (parent,) = [m for m in modules if m["name"] == name and inside(node, m)]
            assert inside(parent, passes[node["args"]["pass_index"]])
        # no module span that is not an ancestor holds it
        assert {m["name"] for m in modules if inside(node, m) and ns(m)[1] > ns(m)[0]} <= set(ancestors)


def test_spans_on_the_track_nest_or_are_disjoint() -> None:
    # what Perfetto needs from complete events on one track: no two partly overlap
    events = [e for e in trace_events(SLOWER)["traceEvents"] if e["ph"] == "X"]
    for i, a in enumerate(events):
        (a0, a1) = ns(a)
        for b in events[i + 1 :]:
            (b0, b1) = ns(b)
            assert a1 <= b0 or b1 <= a0 or (a0 <= b0 and b1 <= a1) or (b0 <= a0 and a1 <= b1), (a, b)
    # parents come first, so a reader that sorts by start keeps them in order
    starts = [e["ts"] for e in events]
    assert starts == sorted(starts)


def test_a_module_called_twice_with_another_between_gets_two_spans() -> None:
    trace = trace_events(SLOWER)
    for i in range(PASSES):
        in_pass = [m for m in spans(trace, "module") if inside(m, spans(trace, "pass")[i])]
        order = [m["name"] for m in in_pass]
        assert order == ["a", "a.conv", "b", "b.lin", "a"]
        first, b, second = in_pass[0], in_pass[2], in_pass[4]
        assert ns(first)[1] == ns(b)[0]
        assert ns(b)[1] == ns(second)[0]
        relu_and_conv = SLOWER["nodes"][1]["samples_ns"][i] + SLOWER["nodes"][2]["samples_ns"][i]
        assert ns(first)[1] - ns(first)[0] == relu_and_conv


def test_args_carry_the_node_and_its_verdict() -> None:
    trace = trace_events(SLOWER)
    conv = next(e for e in spans(trace, "node") if e["name"] == "conv")
    row = next(r for r in SLOWER["nodes"] if r["name"] == "conv")
    assert conv["args"]["shape"] == "float32[1, 2]"
    assert conv["args"]["layout"] == "contiguous"
    assert conv["args"]["source"] == "model.py:4"
    assert (conv["args"]["key"], conv["args"]["target"], conv["args"]["op"]) == (row["key"], "Conv2d", "call_module")
    assert conv["args"]["verdict"] == "slower"
    assert conv["args"]["ratio"] == row["ratio"] > 2.5
    assert (conv["args"]["baseline_ns"], conv["args"]["band"]) == (row["baseline_ns"], row["band"])
    assert conv["args"]["reason"] == row["reason"]
    assert conv["cname"] == "terrible"
    relu = next(e for e in spans(trace, "node") if e["name"] == "relu")
    assert relu["args"]["verdict"] == "ok"
    assert "cname" not in relu
    # the module aggregate's verdict is on each span of that module
    aggregates = {a["name"]: a for a in SLOWER["aggregates"] if a["kind"] == "module"}
    assert aggregates["a"]["verdict"] == "slower"
    for span in spans(trace, "module"):
        if span["name"] in aggregates:
            assert span["args"]["verdict"] == aggregates[span["name"]]["verdict"]
            assert span["args"]["ratio"] == aggregates[span["name"]]["ratio"]
        else:
            assert "verdict" not in span["args"]
    assert any(s["name"] == "a" and s["cname"] == "terrible" for s in spans(trace, "module"))


def test_a_faster_node_is_coloured_good() -> None:
    trace = trace_events(checked({"lin": 0.3}))
    lin = next(e for e in spans(trace, "node") if e["name"] == "lin")
    assert (lin["args"]["verdict"], lin["cname"]) == ("faster", "yellow")  # a warning, as in every view


def test_an_unmeasured_profile_has_one_pass_and_no_verdicts() -> None:
    report = profile_report("t.py::test_net", "call0", "unmeasured", result(passes=1), None)
    trace = trace_events(report)
    assert len(spans(trace, "node")) == len(GRAPH)
    assert len(spans(trace, "pass")) == 1
    assert all("verdict" not in e["args"] and "cname" not in e for e in trace["traceEvents"] if e["ph"] == "X")
    assert trace["otherData"]["status"] == "unmeasured"


def test_a_profile_without_nodes_has_only_its_names() -> None:
    report: ProfileReportJSON = {**SLOWER, "nodes": []}
    trace = trace_events(report)
    assert [e["ph"] for e in trace["traceEvents"]] == ["M", "M"]
    assert trace["otherData"]["passes"] == 0


@pytest.mark.parametrize(
    ("test_id", "key"),
    [
        ("tests/test_x.py::test_net[a|b-../../etc]", "call0"),
        ("../../outside.py::test", "name with spaces/and slashes"),
        ("t.py::test_ünïcode[\n]", "k"),
        (".hidden.py::" + "x" * 300, "k"),
    ],
)
def test_file_names_are_safe(tmp_path: Path, test_id: str, key: str) -> None:
    name = trace_file_name(test_id, key)
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*\.trace\.json", name)
    assert name.endswith(TRACE_SUFFIX)
    (path,) = write_traces(tmp_path, [checked({}, test_id=test_id, key=key)])
    assert path.parent == tmp_path
    assert path.name == name
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temporary file left behind
    assert json.loads(path.read_text(encoding="utf-8"))["otherData"]["test_id"] == test_id


def test_ids_that_read_alike_get_different_files() -> None:
    assert trace_file_name("t.py::test[a/b]", "k") != trace_file_name("t.py::test[a_b]", "k")
    assert trace_file_name("t.py::test", "a") != trace_file_name("t.py::test", "b")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"samples_ns": None}, "samples_ns"),
        ({"samples_ns": [1.5, 2.0]}, "samples_ns"),
        ({"samples_ns": [-1, 2]}, "samples_ns"),
    ],
)
def test_a_node_without_whole_nanosecond_samples_is_refused(change: dict[str, Any], message: str) -> None:
    report: Any = {**SLOWER, "nodes": [{**SLOWER["nodes"][0], **change}, *SLOWER["nodes"][1:]]}
    with pytest.raises(ValueError, match=message):
        trace_events(report)


def test_bad_profiles_and_targets_are_refused_before_any_file_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'test_id'"):
        trace_events(cast("ProfileReportJSON", {k: v for k, v in SLOWER.items() if k != "test_id"}))
    broken: Sequence[Any] = [SLOWER, {**SLOWER, "key": "other", "nodes": "not a list"}]
    with pytest.raises(ValueError, match="'nodes' must be a list"):
        write_traces(tmp_path / "out", broken)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="two profiles named"):
        write_traces(tmp_path / "out", [SLOWER, SLOWER])
    (tmp_path / "file").write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="needs a directory"):
        write_traces(tmp_path / "file", [SLOWER])


@pytest.mark.parametrize("read", [math.trunc, round], ids=["truncating", "rounding"])
def test_spans_read_back_to_the_exact_nanoseconds(read: Any) -> None:
    """Whether a viewer truncates microseconds times 1000 (Perfetto's importer) or rounds them, and whether it
    takes an end as start plus duration or from their sum, every span reads back as written."""
    events = [e for e in trace_events(SLOWER)["traceEvents"] if e["ph"] == "X"]
    for e in events:
        start, end = ns(e)
        assert read(e["ts"] * 1000) == start
        assert read(e["ts"] * 1000) + read(e["dur"] * 1000) == end
        assert read((e["ts"] + e["dur"]) * 1000) == end


def test_a_profile_measured_on_a_busy_machine_says_so_in_its_trace() -> None:
    busy = replace(result(), disturbance=Disturbance(0.23, 0.41, 12, 3, 12, 1.57, 0.8))
    trace = trace_events(profile_report("t.py::test_net", "call0", "recorded", busy, None))
    assert trace["otherData"]["busy_machine"].startswith(f"{BUSY_LINE}: thread off the CPU 23%")
    assert trace["traceEvents"][0]["args"]["name"] == f"t.py::test_net ({BUSY_LINE})"
    quiet = trace_events(profile_report("t.py::test_net", "call0", "recorded", result(), None))
    assert "busy_machine" not in quiet["otherData"]
