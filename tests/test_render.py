"""Unit tests of ``pytest_fxprof.views.render`` and ``ProfileResult``'s views, with hand-built records (no torch)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

import pytest

from pytest_fxprof.judge.decision import compare
from pytest_fxprof.records.measurement import (
    BaselineEntry,
    Environment,
    NodeInfo,
    NodeStats,
    Run,
    Setup,
    Tolerances,
    node_key,
)
from pytest_fxprof.records.units import fmt_ns
from pytest_fxprof.records.verdicts import Comparison, Kind, Status, Verdict
from pytest_fxprof.result import ProfileResult
from pytest_fxprof.views.item_lines import aggregate_line, node_line, op_name, total_line
from pytest_fxprof.views.judged_json import NodeJSON
from pytest_fxprof.views.render import (
    AGGREGATES_SHOWN,
    WORST_SHOWN,
    at_stake,
    improvement_lines,
    notice_lines,
    profile_table,
    regression_message,
    structural_lines,
    summary_line,
    worst_text,
)
from pytest_fxprof.views.report import profile_report, worst_label, worst_nodes
from tests.records_for_tests import (
    BASE_NS,
    CAPTURE,
    CNN,
    CNN_NS,
    ENCODER,
    ENCODER_NS,
    ENV,
    HEAD,
    MODEL,
    POLICY,
    PROTOCOL,
    node,
    scaled,
)

# fmt_ns -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0 ns"),
        (0.4, "0 ns"),
        (1, "1 ns"),
        (999, "999 ns"),
        (1_000, "1.0 us"),
        (1_234, "1.2 us"),
        (1_250.0, "1.2 us"),  # round half to even
        (20_000, "20.0 us"),
        (999_000, "999.0 us"),
        (1_000_000, "1.00 ms"),
        (1_500_000, "1.50 ms"),
        (12_345_678, "12.35 ms"),
        (999_000_000, "999.00 ms"),
        (1_000_000_000, "1.00 s"),
        (2_500_000_000, "2.50 s"),
        (3_600_000_000_000, "3600.00 s"),
    ],
)
def test_fmt_ns(ns: float, text: str) -> None:
    assert fmt_ns(ns) == text


# profile_table ------------------------------------------------------------------------------------

TABLE_NODES = (
    # (info, median ns, spread ns)
    (node("x", "x", op="placeholder"), 0, 0),
    (node("conv1", "stem.conv", "stem.conv", op="call_module"), 400_000, 8_000),
    (node("relu", "torch.relu", "stem"), 50_000, 5_000),
    (node("fc", "fc", "head.fc", op="call_module"), 500_000, 50_000),
    (node("softmax", "softmax", op="call_method"), 50_000, 0),
)


def make_result(
    nodes: Sequence[tuple[NodeInfo, int, int]] = TABLE_NODES,
    *,
    total_samples_ns: tuple[int, ...] = (1_010_000, 1_000_000, 990_000),
    instrumented_samples_ns: tuple[int, ...] = (1_500_000, 1_490_000, 1_510_000),
    measured: bool = True,
) -> ProfileResult:
    total = sum(m for _, m, _ in nodes) or 1
    stats = tuple(
        NodeStats(info=info, median_ns=m, spread_ns=s, share=m / total, samples_ns=(m,) * 4) for info, m, s in nodes
    )
    return ProfileResult(
        name="TinyNet",
        nodes=stats,
        total_samples_ns=total_samples_ns,
        instrumented_samples_ns=instrumented_samples_ns,
        reference_samples_ns=(500_000, 501_000, 499_000),
        environment=ENV,
        protocol=PROTOCOL,
        capture=CAPTURE,
        measured=measured,
    )


def row_names(table: str) -> list[str]:
    """The node column of the table's rows (after header and rule, before the footer lines)."""
    lines = table.splitlines()
    assert lines[0].split() == ["node", "op", "target", "module", "median", "spread", "share"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    return [line.split()[0] for line in lines[2:] if not line.startswith(("...", "total "))]


def test_table_sorted_by_time() -> None:
    table = profile_table(make_result(), sort="time")
    # slowest first; equal times (relu, softmax) in key order
    assert row_names(table) == ["fc", "conv1", "relu", "softmax", "x"]
    assert node_key("call_function", "stem", "torch.relu", 0) < node_key("call_method", "", "softmax", 0)


def test_table_in_graph_order() -> None:
    table = profile_table(make_result(), sort="graph")
    assert row_names(table) == ["x", "conv1", "relu", "fc", "softmax"]


def test_table_default_is_time_and_method_delegates() -> None:
    result = make_result()
    assert profile_table(result) == profile_table(result, sort="time")
    assert result.table() == profile_table(result)
    assert result.table(sort="graph", limit=2) == profile_table(result, sort="graph", limit=2)


def test_table_rejects_unknown_sort() -> None:
    with pytest.raises(ValueError, match="sort must be one of 'time', 'graph', 'stake', not 'name'"):
        profile_table(make_result(), sort="name")


@pytest.mark.parametrize(
    ("limit", "shown", "more"),
    [
        (None, 5, None),
        (10, 5, None),
        (5, 5, None),
        (4, 4, "... 1 more nodes"),
        (2, 2, "... 3 more nodes"),
        (0, 0, "... 5 more nodes"),
    ],
)
def test_table_limit(limit: int | None, shown: int, more: str | None) -> None:
    table = profile_table(make_result(), sort="time", limit=limit)
    assert row_names(table) == ["fc", "conv1", "relu", "softmax", "x"][:shown]
    lines = table.splitlines()
    if more is None:
        assert not any(line.startswith("...") for line in lines)
    else:
        assert lines[-2] == more
    assert lines[-1].startswith("total ")


def test_table_limit_applies_after_sorting() -> None:
    table = profile_table(make_result(), sort="graph", limit=2)
    assert row_names(table) == ["x", "conv1"]


def test_table_cells() -> None:
    lines = profile_table(make_result(), sort="graph").splitlines()
    rows = {line.split()[0]: line.split() for line in lines[2:-1]}
    assert rows["conv1"] == ["conv1", "call_module", "stem.conv", "stem.conv", "400.0", "us", "2%", "40.0%"]
    assert rows["relu"] == ["relu", "call_function", "torch.relu", "stem", "50.0", "us", "10%", "5.0%"]
    assert rows["fc"] == ["fc", "call_module", "fc", "head.fc", "500.0", "us", "10%", "50.0%"]
    # the top-level module is shown as <root>; a zero median has zero spread
    assert rows["softmax"][3] == "<root>"
    assert rows["x"] == ["x", "placeholder", "x", "<root>", "0", "ns", "0%", "0.0%"]


def test_table_columns_line_up() -> None:
    lines = profile_table(make_result()).splitlines()
    grid = lines[:-1]
    # the last column is right-aligned, so every line of the grid has the same length
    assert len({len(line) for line in grid}) == 1
    # the time column is right-aligned: units line up at the column's right edge
    ends = {line.index(" us") + 3 for line in grid[2:] if " us" in line}
    assert len(ends) == 1


def test_totals_line_mentions_overhead_and_protocol() -> None:
    footer = profile_table(make_result()).splitlines()[-1]
    assert footer == "total 1.00 ms over 5 nodes; profiler overhead x1.50; 20 passes after 5 warm-up, 1 thread(s)"


def test_totals_line_without_a_plain_forward() -> None:
    result = make_result(total_samples_ns=())
    assert result.overhead is None
    assert result.total_ns == 1_500_000  # falls back to the instrumented pass
    footer = profile_table(result).splitlines()[-1]
    assert footer == "total 1.50 ms over 5 nodes; 20 passes after 5 warm-up, 1 thread(s)"


def test_totals_line_for_a_cold_unmeasured_pass() -> None:
    footer = profile_table(make_result(measured=False)).splitlines()[-1]
    assert footer.startswith("total 1.00 ms over 5 nodes; profiler overhead x1.50; single cold pass")
    assert "--fxprof" in footer
    assert "passes after" not in footer


def test_table_of_an_empty_graph() -> None:
    result = make_result(nodes=())
    lines = profile_table(result).splitlines()
    assert lines[0].split() == ["node", "op", "target", "module", "median", "spread", "share"]
    assert lines[-1].startswith("total 1.00 ms over 0 nodes")
    assert len(lines) == 3


# Comparisons to render ----------------------------------------------------------------------------


def run_of(times: Sequence[int]) -> Run:
    """One measurement: the plain forward is the nodes' sum, the instrumented pass 1.5 times it."""
    return Run(
        total_ns=sum(times),
        instrumented_ns=sum(times) * 3 // 2,
        reference_ns=500_000,
        node_ns=tuple(times),
        node_spread_ns=(0,) * len(times),
    )


def entry(
    factors: Mapping[str, float] | None = None,
    *,
    nodes: Sequence[NodeInfo] = MODEL,
    extra: Mapping[str, int] | None = None,
    environment: Environment = ENV,
) -> BaselineEntry:
    """A one-run entry of the model, each node's time scaled by its factor; ``extra`` nodes are new."""
    factors = factors or {}
    extra = extra or {}
    times = [extra[n.name] if n.name in extra else round(BASE_NS[n.name] * factors.get(n.name, 1.0)) for n in nodes]
    return BaselineEntry(CAPTURE, environment, PROTOCOL, Tolerances(0.2, 0.1), tuple(nodes), (run_of(times),))


BASELINE = entry()


def measured(*factors: Mapping[str, float]) -> BaselineEntry:
    """An entry of the model with one run per measurement (a first one and its confirmations)."""
    return replace(BASELINE, runs=tuple(run_of(scaled(MODEL, BASE_NS, f)) for f in factors))


CNN_BASELINE = replace(BASELINE, nodes=CNN, runs=(run_of(scaled(CNN, CNN_NS)),))


def cnn_entry(factors: Mapping[str, float], overall: float = 1.0) -> BaselineEntry:
    return replace(CNN_BASELINE, runs=(run_of(scaled(CNN, CNN_NS, factors, overall)),))


def regression() -> Comparison:
    c = compare(BASELINE, entry({"pool": 3.0, "relu1": 4.0}), POLICY)
    assert c.status is Status.REGRESSION
    return c


def test_regression_message_names_each_slowed_node_worst_first() -> None:
    lines = regression_message("tests/test_net.py::test_net[forward]", regression()).splitlines()
    assert lines[0] == "fxprof: tests/test_net.py::test_net[forward] got slower than its baseline (1 process(es))"
    slower = [line for line in lines if line.startswith("  slower node: ")]
    assert len(slower) == 2
    # pool lost 160 us, relu1 150 us: pool first although it comes later in the graph and has the lower ratio
    pool, relu = slower
    assert relu == (
        "  slower node: relu1 (call_function torch.relu in stem): 50.0 us -> 200.0 us = x4.00 after speed factor "
        "x1.00, band +40% (floor), +150.0 us"
    )
    assert pool == (
        "  slower node: pool (call_module pool in pool): 80.0 us -> 240.0 us = x3.00 after speed factor x1.00, "
        "band +25% (floor), +160.0 us"
    )
    assert lines.index(pool) < lines.index(relu)


def test_regression_message_leads_with_where_the_time_went_then_the_modules_around_it() -> None:
    lines = regression_message("t", compare(BASELINE, entry({"relu1": 6.0}), POLICY)).splitlines()
    assert lines[1] == "  where: node relu1 (call_function torch.relu in stem): x6.00, +250.0 us"
    assert lines[2] == "    in: stem x2.00"  # the module around it, once: not again among the slower aggregates
    assert not any(line.startswith("  slower: module stem") for line in lines)
    # then every slowed node, worst first, before the total
    assert lines[3].startswith("  slower node: relu1 (call_function torch.relu in stem): 50.0 us -> 300.0 us")
    assert next(i for i, line in enumerate(lines) if line.startswith("  total: ")) > 3


def test_two_slowdowns_of_a_size_in_two_places_lead_with_neither() -> None:
    # pool +160 us and relu1 +150 us: neither holds most of the extra time, and the failure names both
    lines = regression_message("t", regression()).splitlines()
    assert not any(line.startswith("  where: ") for line in lines)
    assert [line.split(" (")[0] for line in lines[1:3]] == ["  slower node: pool", "  slower node: relu1"]
    assert regression().blame is None


def test_regression_message_names_the_slowed_aggregates_apart_from_the_lead() -> None:
    # bn3 (40 us) x4, too small to fail alone, holds the extra time: it leads, in its block; every BatchNorm is
    # slower too, an operator type: named apart
    lines = regression_message("t", compare(CNN_BASELINE, cnn_entry({"bn3": 4.0}), POLICY)).splitlines()
    assert lines[1:3] == [
        "  where: node bn3 (call_module BatchNorm2d in blocks.3.bn): x4.00, +120.0 us",
        "    in: blocks.3 x1.15",
    ]
    (bn,) = [line for line in lines if line.startswith("  slower: ")]
    assert bn.startswith("  slower: every BatchNorm2d node (8 nodes): 320.0 us -> 440.0 us = x1.38")
    assert lines.index(bn) < next(i for i, line in enumerate(lines) if line.startswith("  total: "))


def test_regression_message_has_the_total_and_speed_factor() -> None:
    text = regression_message("t", regression())
    (total,) = [line for line in text.splitlines() if line.startswith("  total: ")]
    # the plain call (the instrumented pass is 1.5 x it in these records), per reference workload
    assert total == (
        "  total: 1.00 ms -> 1.31 ms (the plain call), x1.31 against the reference workload (machine x1.00), "
        "band +15% (tolerance): slower"
    )
    # the profiler's overhead on each side, under it
    assert "    the profiler's overhead (instrumented pass over the plain call): x1.50 baseline, x1.50 this run" in text
    assert "speed factor of the whole run: x1.00" in text
    assert "graph changed" not in text
    assert "measurements" not in text


def test_regression_message_when_only_the_total_is_slower() -> None:
    c = compare(BASELINE, entry(dict.fromkeys(BASE_NS, 1.3)), POLICY)
    lines = regression_message("t", c).splitlines()
    assert not any(line.startswith("  slower") for line in lines)
    assert any(
        line.endswith("x1.30 against the reference workload (machine x1.00), band +15% (tolerance): slower")
        for line in lines
    )


def test_regression_message_of_a_confirmed_regression() -> None:
    c = compare(BASELINE, measured({"pool": 3.0, "relu1": 4.0}, {"pool": 2.5, "relu1": 4.0}), POLICY)
    assert c.status is Status.REGRESSION
    lines = regression_message("t", c).splitlines()
    assert lines[0] == (
        "fxprof: t got slower than its baseline (1 process(es)); every one of 2 measurements agrees "
        "(a second one confirmed the first)"
    )
    pool = next(line for line in lines if line.startswith("  slower node: pool "))
    assert pool.endswith("= x2.50 after speed factor x1.00, band +25% (floor), +120.0 us (measurements x3.00, x2.50)")
    total = next(line for line in lines if line.startswith("  total: "))
    assert total.endswith("band +15% (tolerance): slower (measurements x1.31, x1.27)")


def test_regression_message_caps_the_aggregates() -> None:
    # every BatchNorm and every Linear +30 %: both types and all eight blocks are slower
    c = compare(CNN_BASELINE, cnn_entry({"bn": 1.3, "lin": 1.3}), POLICY)
    assert len(c.slower_aggregates) == 10
    lines = regression_message("t", c).splitlines()
    # no module holds most of the extra time: every Linear does, an operator type slowed across the model
    assert lines[1].startswith("  where: every Linear node (8 nodes): 2.80 ms -> 3.64 ms = x1.30")
    assert lines[2].startswith("    most of it: lin0 ")
    aggregates = [line for line in lines if line.startswith("  slower: ")]
    assert len(aggregates) == AGGREGATES_SHOWN
    # each aggregate is followed by the members that lost the most; then the count of those cut
    assert lines[lines.index(aggregates[-1]) + 1].startswith("    most of it: ")
    assert lines[lines.index(aggregates[-1]) + 2] == "  ... 3 more"
    # the most time lost first: each block's 100 us; the BatchNorms' 96 us are cut
    assert [line.split(" (")[0] for line in aggregates] == [f"  slower: module blocks.{i}" for i in range(6)]
    assert not any(line.startswith("  slower: every BatchNorm2d") for line in lines)


def test_an_aggregate_names_the_small_node_that_slowed_it() -> None:
    # bn3 (40 us) x4: too small to fail alone, it fails its block and every BatchNorm, and both say so
    c = compare(CNN_BASELINE, cnn_entry({"bn3": 4.0}), POLICY)
    assert c.slower == ()
    assert [f"{a.kind.value} {a.name}" for a in c.slower_aggregates] == ["op BatchNorm2d", "module blocks.3"]
    lines = regression_message("t", c).splitlines()
    led = "    most of it: bn3 (BatchNorm2d in blocks.3.bn) 40.0 us -> 160.0 us"
    assert [lines[i + 1] for i, line in enumerate(lines) if line.startswith("  slower: ")] == [led]
    # every BatchNorm +30 %: no member's own ratio shows it (its peers are BatchNorms), its raw time does
    spread = compare(CNN_BASELINE, cnn_entry({"bn": 1.3, "bn5": 1.4}), POLICY)
    (bn,) = spread.slower_aggregates
    assert {v.verdict for v in spread.nodes if v.node.target == "BatchNorm2d"} == {Verdict.OK}
    assert [v.node.name for v in spread.leaders(bn)] == ["bn5", "bn0", "bn1"]


def test_regression_message_root_module_and_structure() -> None:
    dropout = node("dropout", "torch.nn.functional.dropout", "layer1")
    nodes = (*MODEL[:3], dropout, *MODEL[3:])
    c = compare(BASELINE, entry({"softmax": 4.0}, nodes=nodes, extra={"dropout": 10_000}), POLICY)
    assert c.status is Status.REGRESSION
    lines = regression_message("t", c).splitlines()
    assert any("softmax (call_method softmax in <root>)" in line for line in lines)
    assert "  graph changed since the baseline: 1 node(s) added, 0 removed" in lines
    assert "    added: dropout (torch.nn.functional.dropout in layer1)" in lines


def test_node_line_of_a_faster_node() -> None:
    c = compare(BASELINE, entry({"conv2": 1 / 3}), POLICY)
    (v,) = c.faster
    assert node_line(v) == (
        "conv2 (call_module layer1.conv in layer1.conv): 300.0 us -> 100.0 us = x0.33 after speed factor x1.00, "
        "band +10% (tolerance), -200.0 us"
    )


def test_node_and_notice_lines_name_the_source_line() -> None:
    """Where the capture recorded the user's source line, every line that names a node says it after its
    module path, as in the failure a real model gives."""

    def sourced(e: BaselineEntry) -> BaselineEntry:
        return replace(e, nodes=tuple(replace(n, source=f"net.py:{10 + i}") for i, n in enumerate(e.nodes)))

    c = compare(sourced(BASELINE), sourced(entry({"conv2": 3.0, "flatten": 3.0})), POLICY)
    (v,) = c.slower
    line = node_line(v)
    assert line.startswith("conv2 (call_module layer1.conv in layer1.conv, net.py:")
    assert f"in layer1.conv, {v.node.source}): 300.0 us -> 900.0 us = x3.00" in line
    assert f"  slower node: {line}" in regression_message("t", c).splitlines()
    (small,) = notice_lines(c)
    assert "flatten (call_function torch.flatten in <root>, net.py:" in small


def test_node_line_shows_only_a_slower_speed_factor() -> None:
    slower = compare(BASELINE, entry({"pool": 2.0 * 1.3, **{n: 1.3 for n in BASE_NS if n != "pool"}}), POLICY)
    ratio = 2.6 / 1.3**1.5
    assert f"x{ratio:.2f} after speed factor x1.30 (divided by x1.48, the drift in doubt)" in node_line(
        slower.slower[0]
    )
    # on a faster machine with no credit for it nothing is divided out
    faster = compare(BASELINE, entry({"pool": 1.2, **{n: 0.6 for n in BASE_NS if n != "pool"}}), POLICY)
    pool = next(v for v in faster.nodes if v.node.name == "pool")
    assert pool.speed_factor == pytest.approx(0.6)
    assert "x1.20 after speed factor x0.60," in node_line(pool)
    # with half of it credited, its square root is
    credited = compare(
        BASELINE,
        entry({"pool": 1.2, **{n: 0.6 for n in BASE_NS if n != "pool"}}),
        replace(POLICY, faster_credit=0.5),
    )
    pool = next(v for v in credited.nodes if v.node.name == "pool")
    assert f"x{1.2 / 0.6**0.5:.2f} after speed factor x0.60 (divided by x0.77, part of the speed-up credited)" in (
        node_line(pool)
    )


@pytest.mark.parametrize(
    ("baseline", "current", "label", "line"),
    [
        pytest.param(
            CNN_BASELINE,
            cnn_entry({"bn": 1.3}),
            "op BatchNorm2d",
            "every BatchNorm2d node (8 nodes): 320.0 us -> 416.0 us = x1.30 after speed factor x1.00 from nodes "
            "outside it, band +10% (tolerance), +96.0 us",
            id="op-type",
        ),
        pytest.param(
            replace(BASELINE, nodes=ENCODER, runs=(run_of(scaled(ENCODER, ENCODER_NS)),)),
            replace(BASELINE, nodes=ENCODER, runs=(run_of(scaled(ENCODER, ENCODER_NS, dict.fromkeys(HEAD, 1.5))),)),
            "module head",
            "module head (6 nodes): 180.0 us -> 270.0 us = x1.50 after speed factor x1.00 from nodes outside it, "
            "band +11% (floor), +90.0 us",
            id="module-subtree",
        ),
        pytest.param(
            CNN_BASELINE,
            cnn_entry({"bn": 1.3}, overall=1.2),
            "op BatchNorm2d",
            "every BatchNorm2d node (8 nodes): 320.0 us -> 499.2 us = x1.19 after speed factor x1.20 (divided by "
            "x1.31, the drift in doubt) from nodes outside it, band +10% (tolerance), +59.8 us",
            id="on-a-slower-machine",
        ),
        pytest.param(
            CNN_BASELINE,
            cnn_entry({"bn": 0.5}),
            "op BatchNorm2d",
            "every BatchNorm2d node (8 nodes): 320.0 us -> 160.0 us = x0.50 after speed factor x1.00 from nodes "
            "outside it, band +10% (tolerance), -160.0 us",
            id="faster",
        ),
    ],
)
def test_aggregate_line(baseline: BaselineEntry, current: BaselineEntry, label: str, line: str) -> None:
    c = compare(baseline, current, POLICY)
    (a,) = [a for a in c.aggregates if f"{a.kind.value} {a.name}" == label]
    assert a.kind is (Kind.OP if label.startswith("op ") else Kind.MODULE)
    assert aggregate_line(a) == line


def test_aggregate_line_of_several_measurements() -> None:
    c = compare(
        CNN_BASELINE, replace(CNN_BASELINE, runs=(*cnn_entry({"bn": 1.4}).runs, *cnn_entry({"bn": 1.3}).runs)), POLICY
    )
    (a,) = c.slower_aggregates
    assert aggregate_line(a).endswith(
        "x1.30 after speed factor x1.00 from nodes outside it, band +10% (tolerance), "
        "+96.0 us (measurements x1.40, x1.30)"
    )


@pytest.mark.parametrize(
    ("current", "line"),
    [
        pytest.param(
            entry(),
            "total: 1.00 ms -> 1.00 ms (the plain call), x1.00 against the reference workload (machine x1.00), "
            "band +15% (tolerance): ok",
            id="unchanged",
        ),
        pytest.param(
            replace(BASELINE, runs=(replace(BASELINE.runs[0], total_ns=1_200_000, reference_ns=600_000),)),
            "total: 1.00 ms -> 1.20 ms (the plain call), x1.00 against the reference workload (machine x1.20), "
            "band +15% (tolerance): ok",
            id="slower-machine",
        ),
        pytest.param(
            replace(BASELINE, runs=(replace(BASELINE.runs[0], total_ns=970_000, reference_ns=400_000),)),
            "total: 1.00 ms -> 970.0 us (the plain call), x0.97 against the reference workload (machine x0.80; faster, "
            "not credited), band +15% (tolerance): ok",
            id="faster-machine",
        ),
        pytest.param(
            entry(dict.fromkeys(BASE_NS, 0.5)),
            "total: 1.00 ms -> 500.0 us (the plain call), x0.50 against the reference workload (machine x1.00), "
            "band +15% (tolerance): faster",
            id="faster",
        ),
        pytest.param(
            measured(dict.fromkeys(BASE_NS, 1.3), {}),
            "total: 1.00 ms -> 1.30 ms (the plain call), x1.00 against the reference workload (machine x1.00), "
            "band +15% (tolerance): ok (measurements x1.30, x1.00)",
            id="not-confirmed",
        ),
    ],
)
def test_total_line(current: BaselineEntry, line: str) -> None:
    c = compare(BASELINE, current, POLICY)
    assert c.total is not None
    assert total_line(c.total) == line


# Warnings and improvements ---------------------------------------------------------------------------


def test_notice_lines_name_small_slowed_nodes_worst_first() -> None:
    # flatten (+60 us) and add (+32 us) are beyond their bands but too small to fail the test
    c = compare(BASELINE, entry({"flatten": 3.0, "add": 2.6}), POLICY)
    assert c.status is Status.PASS
    assert notice_lines(c) == [
        "slower small node (its aggregates gate it): flatten (call_function torch.flatten in <root>): 30.0 us -> "
        "90.0 us = x3.00 after speed factor x1.00, band +67% (floor), +60.0 us",
        "slower small node (its aggregates gate it): add (call_function operator.add in layer1): 20.0 us -> "
        "52.0 us = x2.60 after speed factor x1.00, band +100% (floor), +32.0 us",
    ]


def test_notice_lines_cap_the_small_nodes() -> None:
    # four BatchNorms of eight twice as slow: beyond their +50 % bands; each is 0.6 % of the model
    c = compare(CNN_BASELINE, cnn_entry({f"bn{i}": 2.0 for i in range(4)}), POLICY)
    assert len(c.slower_small) == 4
    lines = notice_lines(c)
    small = [line for line in lines if line.startswith("slower small node")]
    assert len(small) == WORST_SHOWN
    assert lines[len(small)] == "... 1 more small nodes slower"


def test_notice_lines_of_an_unconfirmed_flag() -> None:
    c = compare(BASELINE, measured({"pool": 2.0}, {}), POLICY)
    assert c.status is Status.PASS
    assert notice_lines(c) == [
        "not confirmed by the second measurement, so not failed: node pool: not confirmed: x2.00, x1.00 against "
        "band +25% (floor); the first measurement was noise"
    ]


def test_notice_lines_of_bands_too_wide_to_decide() -> None:
    # three processes that disagree by a factor of two on pool: its band from the spread is far beyond +100 %
    scatter = (1.0, 2.0, 0.5)
    runs = tuple(run_of(scaled(MODEL, BASE_NS, {"pool": f})) for f in scatter)
    c = compare(replace(BASELINE, runs=runs), entry({"pool": 10.0}), replace(POLICY, floor_ns=0, floor_share=0))
    lines = notice_lines(c)
    assert lines
    assert all(line.startswith("too noisy to decide (record the baseline with more processes): ") for line in lines)
    (pool,) = [line for line in lines if ": node pool: " in line]
    assert pool.startswith(
        "too noisy to decide (record the baseline with more processes): node pool: x10.00, but band +"
    )
    assert pool.endswith("(spread) is too noisy to decide")


def test_no_notices_for_an_unchanged_profile() -> None:
    assert notice_lines(compare(BASELINE, entry(), POLICY)) == []
    assert improvement_lines(compare(BASELINE, entry(), POLICY)) == []


def test_improvement_lines() -> None:
    c = compare(BASELINE, entry({"conv2": 1 / 3}), POLICY)
    assert improvement_lines(c) == [
        "  faster node: conv2 (call_module layer1.conv in layer1.conv): 300.0 us -> 100.0 us = x0.33 after speed "
        "factor x1.00, band +10% (tolerance), -200.0 us",
        "  faster: module layer1 (2 nodes): 320.0 us -> 120.0 us = x0.38 after speed factor x1.00 from nodes outside "
        "it, band +10% (tolerance), -200.0 us",
        "  total: 1.00 ms -> 800.0 us (the plain call), x0.80 against the reference workload (machine x1.00), "
        "band +15% (tolerance): faster",
    ]


def test_improvement_lines_leave_out_small_nodes() -> None:
    # softmax is 7 % of the model, add 2 %: only softmax is an improvement worth a refreshed baseline
    c = compare(BASELINE, entry({"softmax": 0.25, "add": 0.25}), POLICY)
    assert [line.split(" (")[0] for line in improvement_lines(c)] == ["  faster node: softmax"]
    assert [v.node.name for v in c.faster] == ["softmax"]


def test_summary_line_recorded() -> None:
    assert summary_line("t::x", None) == "t::x: recorded"


def test_summary_line_pass() -> None:
    c = compare(BASELINE, entry({"conv2": 1.06}), POLICY)
    assert c.status is Status.PASS
    line = summary_line("t::x", c)
    assert line.startswith("t::x: pass, total x1.02; worst: conv2 x1.06, ")
    assert line.count(" x1.00") == WORST_SHOWN - 1
    assert "graph changed" not in line


def test_summary_line_regression() -> None:
    line = summary_line("t::x", regression())
    # pool lost 160 us, relu1 150 us: pool first, though relu1's ratio is the larger
    assert line == "t::x: regression, total x1.31; worst: pool x3.00, relu1 x4.00, conv1 x1.00"
    bands = {v.node.name: v.band for v in regression().nodes}
    assert (3.0 - 1) / bands["pool"] > (4.0 - 1) / bands["relu1"]


def test_summary_line_mismatch() -> None:
    current = entry(environment=replace(ENV, torch="2.5.0", threads=4))
    c = compare(BASELINE, current, POLICY)
    line = summary_line("t::x", c)
    assert line == "t::x: mismatch (torch: baseline '2.4.1+cpu', this run '2.5.0'; threads: baseline 1, this run 4)"


def test_summary_line_graph_changed() -> None:
    c = compare(BASELINE, entry(nodes=MODEL[:-1]), POLICY)
    line = summary_line("t::x", c)
    assert line.startswith("t::x: pass, ")
    assert line.endswith("; graph changed (+0/-1)")


@pytest.mark.parametrize(
    ("graphs", "said"), [((1, 2), "1 -> 2 (1 new graph break(s))"), ((3, 2), "3 -> 2 (1 graph break(s) fewer)")]
)
def test_a_changed_number_of_graphs_is_a_changed_graph_and_named_as_graph_breaks(
    graphs: tuple[int, int], said: str
) -> None:
    """Same nodes, another number of graphs: a graph break that came (or went) is a performance change of its
    own, never only a total that moved."""
    baseline = replace(BASELINE, capture=replace(BASELINE.capture, method="dynamo", graphs=graphs[0]))
    current = replace(entry(), capture=replace(BASELINE.capture, method="dynamo", graphs=graphs[1]))
    c = compare(baseline, current, POLICY)
    assert (c.graphs, c.graphs_changed, c.graph_changed) == (graphs, True, True)
    assert (c.added, c.removed) == ((), ())
    assert structural_lines(c) == [
        "graph changed since the baseline: 0 node(s) added, 0 removed",
        f"  captured graphs: {said}",
    ]
    assert summary_line("t::x", c).endswith(f"; graph changed (+0/-0, graphs {graphs[0]} -> {graphs[1]})")
    report = profile_report("t::x", "call0", c.status.value, make_result(), c)
    assert report["graphs"] == {"baseline": graphs[0], "current": graphs[1]}


SETUP = Setup(inputs=("args[0]: float32[128, 3, 224, 224] cpu", "kwargs['flag']: True"), mode="eval")


@pytest.mark.parametrize(
    ("setup", "said"),
    [
        pytest.param(
            replace(SETUP, inputs=("args[0]: float32[256, 3, 224, 224] cpu", "kwargs['flag']: True")),
            "inputs: args[0] was float32[128, 3, 224, 224] cpu in the baseline, float32[256, 3, 224, 224] cpu in "
            "this run",
            id="batch",
        ),
        pytest.param(replace(SETUP, mode="train"), "mode: 'eval' in the baseline, 'train' in this run", id="mode"),
        pytest.param(
            replace(SETUP, inputs=SETUP.inputs[:1]), "inputs: 2 input(s) in the baseline, 1 in this run", id="count"
        ),
    ],
)
def test_another_test_setup_is_a_mismatch_that_names_it_never_a_slowdown(setup: Setup, said: str) -> None:
    """Twice the batch (and twice the time in every node): the test measures something else."""
    baseline = replace(BASELINE, setup=SETUP)
    current = replace(entry({n.name: 2.0 for n in MODEL}), setup=setup)
    c = compare(baseline, current, POLICY)
    assert c.status is Status.MISMATCH
    assert c.mismatches == (said,)
    assert c.nodes == ()
    assert compare(baseline, replace(current, setup=SETUP), POLICY).status is Status.REGRESSION  # same setup
    assert compare(replace(baseline, setup=None), current, POLICY).status is Status.REGRESSION  # older baseline


def test_a_node_whose_output_changed_is_judged_and_the_change_named() -> None:
    shapes = tuple(f"float32[1, {8 * (i + 1)}]" for i in range(len(MODEL)))
    wider = tuple(s.replace("[1, 8]", "[1, 16]") for s in shapes)
    c = compare(replace(BASELINE, shapes=shapes), replace(entry({MODEL[0].name: 3.0}), shapes=wider), POLICY)
    first = next(v for v in c.nodes if v.node == MODEL[0])
    assert first.verdict is Verdict.SLOWER  # the model's code changed: judged as any node
    assert first.shapes == ("float32[1, 8]", "float32[1, 16]")
    assert node_line(first).endswith("; output changed since the baseline: float32[1, 8] -> float32[1, 16]")
    assert all(v.shapes is None for v in c.nodes if v is not first)


# ProfileResult -------------------------------------------------------------------------------------


def test_to_dataframe() -> None:
    df = make_result().to_dataframe()
    assert list(df.columns) == [*NODE_COLUMNS]
    assert len(df) == len(TABLE_NODES)
    assert list(df["node"]) == ["x", "conv1", "relu", "fc", "softmax"]  # execution order
    assert list(df["median_us"]) == [0.0, 400.0, 50.0, 500.0, 50.0]
    assert list(df["spread"]) == pytest.approx([0.0, 0.02, 0.1, 0.1, 0.0])
    assert df["share"].sum() == pytest.approx(1.0)
    assert list(df["samples"]) == [4] * 5
    assert list(df["module"]) == ["", "stem.conv", "stem", "head.fc", ""]
    assert df["key"].is_unique


def test_to_dataframe_of_an_empty_graph() -> None:
    df = make_result(nodes=()).to_dataframe()
    assert len(df) == 0
    assert list(df.columns) == [*NODE_COLUMNS]


NODE_COLUMNS = (
    "key", "node", "direction", "forward", "op", "target", "module", "source", "shape", "layout", "median_us", "spread",
    "share",
    "samples", "flops", "gflops_per_s", "host_us", "memory_bytes", "peak_bytes",
    "baseline_us", "ratio", "band", "verdict", "gates",
)  # fmt: skip


def test_profile_result_summaries() -> None:
    result = make_result()
    assert result.total_ns == 1_000_000
    assert result.instrumented_ns == 1_500_000
    assert result.overhead == pytest.approx(1.5)
    run = result.run()
    assert run == Run(
        total_ns=1_000_000,
        instrumented_ns=1_500_000,
        reference_ns=500_000,
        node_ns=(0, 400_000, 50_000, 500_000, 50_000),
        node_spread_ns=(0, 8_000, 5_000, 50_000, 0),
    )
    entry = result.entry(Tolerances(0.2, 0.1), extra_runs=(run,))
    assert entry.runs == (run, run)
    assert entry.nodes == tuple(info for info, _, _ in TABLE_NODES)


# ProfileResult.confirmations: the runs of a re-measurement ----------------------------------------


def test_confirmations_join_the_entry_as_further_measurements() -> None:
    first = make_result()
    assert not first.remeasured
    assert first.confirmations == ()
    assert first.seconds == 0.0
    slowed = [(info, m * 3 if info.name == "conv1" else m, s) for info, m, s in TABLE_NODES]
    confirmation = make_result(slowed).run()
    confirmed = replace(first, confirmations=(confirmation,), seconds=2.5)
    assert confirmed.remeasured
    assert confirmed.seconds == 2.5
    # the profile itself stays the first measurement: its nodes, its run
    assert confirmed.nodes == first.nodes
    assert confirmed.run() == first.run()
    entry = confirmed.entry(Tolerances(0.2, 0.1), confirmed.confirmations)
    assert entry.runs == (first.run(), confirmation)
    assert entry.runs[1].node_ns[1] == 1_200_000


def _stats(key: str, module: str, target: str, samples: tuple[int, ...], flops: int | None = None) -> NodeStats:
    info = node(key, target, module, op="call_function")
    return NodeStats(info, sorted(samples)[len(samples) // 2], 0, 0.0, samples, flops=flops)


ROLL_NODES = (
    _stats("a", "layer1.0.conv", "conv", (100, 100, 100), flops=1000),
    _stats("b", "layer1.0", "relu", (10, 50, 10), flops=0),
    _stats("c", "layer1.1", "conv", (200, 200, 200), flops=3000),
    _stats("d", "", "add", (5, 5, 5)),
)


def test_module_rollups_sum_each_pass_then_take_the_median() -> None:
    result = replace(make_result(), nodes=ROLL_NODES)
    rows = {r.name: r for r in result.rollup("module")}
    assert list(rows) == ["<model>", "layer1", "layer1.1", "layer1.0", "layer1.0.conv"]  # the model, then slowest
    assert rows["<model>"].median_ns == 315  # passes 315, 355, 315
    assert rows["<model>"].share == pytest.approx(1.0)
    assert (rows["layer1"].nodes, rows["layer1"].median_ns, rows["layer1"].depth) == (3, 310, 1)
    assert (rows["layer1.0"].median_ns, rows["layer1.0"].spread_ns) == (110, 20)  # passes 110, 150, 110
    assert rows["layer1.0.conv"].depth == 3
    assert rows["layer1"].flops == 4000
    assert rows["<model>"].flops is None  # "add" was not counted, so the model's total is unknown
    assert rows["layer1.0.conv"].flops_per_s == pytest.approx(1000 / 100e-9)


def test_operator_rollups_and_their_views() -> None:
    result = replace(make_result(), nodes=ROLL_NODES)
    ops = {r.name: (r.nodes, r.median_ns) for r in result.rollup("op")}
    assert ops == {"conv": (2, 300), "relu": (1, 10), "add": (1, 5)}
    table = result.table(by="op").splitlines()
    assert table[0].split() == ["operator", "nodes", "median", "share", "GFLOP/s"]
    assert [line.split()[0] for line in table[2:]] == ["conv", "relu", "add"]
    modules = result.table(by="module", limit=2).splitlines()
    assert [line.split()[:2] for line in modules[2:4]] == [["<model>", "4"], ["layer1", "3"]]
    assert modules[4:] == ["... 3 more"]
    assert modules[3].startswith("  layer1 ")  # indented by depth
    with pytest.raises(ValueError, match="roll-ups are sorted by time"):
        result.table(sort="graph", by="module")
    frame = result.to_dataframe(by="module")
    assert list(frame["name"]) == ["<model>", "layer1", "layer1.1", "layer1.0", "layer1.0.conv"]
    assert list(frame["median_us"]) == [0.315, 0.31, 0.2, 0.11, 0.1]
    with pytest.raises(ValueError, match="by must be one of module, op"):
        result.rollup("layer")


def test_the_node_table_shows_flops_and_source_lines_when_known() -> None:
    result = replace(make_result(), nodes=ROLL_NODES)
    assert "GFLOP/s" in result.table().splitlines()[0]
    sourced = replace(ROLL_NODES[0], info=replace(ROLL_NODES[0].info, source="model.py:12"))
    lines = replace(make_result(), nodes=(sourced,)).table().splitlines()
    assert lines[0].split()[-1] == "source"
    assert lines[2].split()[-1] == "model.py:12"


def test_a_node_with_a_recorded_source_line_names_it_in_the_failure() -> None:
    c = compare(BASELINE, entry({"conv2": 1 / 3}), POLICY)
    (v,) = c.faster
    sourced = replace(v, node=replace(v.node, source="model.py:42"))
    assert node_line(sourced).startswith("conv2 (call_module layer1.conv in layer1.conv, model.py:42): ")


def test_the_node_table_shows_host_time_and_peak_memory_on_cuda() -> None:
    node = replace(ROLL_NODES[0], host_ns=12_000, memory_bytes=4096, peak_bytes=3 * 1024 * 1024)
    lines = replace(make_result(), nodes=(node,)).table().splitlines()
    assert lines[0].split()[-4:] == ["GFLOP/s", "host", "peak", "mem"]
    assert lines[2].split()[-4:] == ["12.0", "us", "3", "MiB"]


@pytest.mark.parametrize(
    ("worse", "better"),
    [
        pytest.param((True, 10.0, "slower"), (False, 1e6, "slower"), id="what-failed-first"),
        pytest.param((False, 2e5, "ok"), (False, 1e5, "slower"), id="then-the-most-time-lost"),
        pytest.param((False, 1e3, "ok"), (False, -5e5, "faster"), id="time-won-ranks-last"),
        pytest.param((False, 1e3, "ok"), (False, 9e9, "too noisy"), id="noisy-counts-no-loss"),
    ],
)
def test_at_stake_ranks_what_failed_then_by_time_lost(
    worse: tuple[bool, float, str], better: tuple[bool, float, str]
) -> None:
    assert at_stake(*worse[1:], failed=worse[0]) < at_stake(*better[1:], failed=better[0])


def test_a_noisy_tiny_node_does_not_outrank_a_large_node_that_lost_more_time() -> None:
    report = [
        {"key": "a", "name": "getitem", "ratio": 1.58, "band": 166.67, "baseline_ns": 200, "gates": False},
        {"key": "b", "name": "classifier", "ratio": 1.13, "band": 0.16, "baseline_ns": 1_000_000, "gates": True},
        {"key": "c", "name": "conv", "ratio": 0.95, "band": 0.15, "baseline_ns": 2_000_000, "gates": True},
    ]
    assert [n["name"] for n in worst_nodes(cast("list[NodeJSON]", report))] == ["classifier", "getitem", "conv"]


def test_the_stake_table_ranks_what_failed_then_time_lost_and_folds_small_nodes_into_their_module() -> None:
    # bn3 (40 us) x4 fails nothing alone: folded with the other small nodes of its block; conv0 lost 40 us
    c = compare(CNN_BASELINE, cnn_entry({"bn3": 4.0, "conv0": 1.1, "lin5": 1.5}), POLICY)
    result = replace(make_result(), comparison=c)
    lines = result.table(sort="stake").splitlines()
    assert lines[0].split() == ["node", "module", "baseline", "now", "ratio", "lost", "verdict"]
    rows = lines[2:]
    # lin5 failed the test: first; then the most time lost: bn3's block's small nodes (+120 us), conv0 (+40 us)
    assert rows[0].split()[:2] == ["lin5", "blocks.5.lin"]
    assert rows[0].endswith("slower (failed)")
    assert rows[1].split()[:6] == ["4", "small", "node(s)", "blocks.3", "67.0", "us"]
    assert "1 slower" in rows[1]
    assert rows[2].split()[:2] == ["conv0", "blocks.0.conv"]
    assert len(rows) == 8 + 8 + 8  # every conv and lin on its row, each block's small nodes on one
    assert result.table(sort="stake", limit=2).splitlines()[-1] == "... 22 more rows"
    with pytest.raises(ValueError, match="this profile was not compared"):
        make_result().table(sort="stake")


@pytest.mark.parametrize(
    ("target", "short"),
    [
        ("aten.tanh.default", "tanh"),
        ("operator.add", "add"),
        ("Linear", "Linear"),
        ("torch.nn.functional.relu", "relu"),
        ("mylib.layer_norm.default", "layer_norm"),
        ("mkldnn._linear_pointwise.default", "_linear_pointwise"),
        ("extern_kernels.addmm", "addmm"),
        ("cpp_fused_gelu", "cpp_fused_gelu"),
    ],
)
def test_a_targets_short_name_drops_namespace_and_overload(target: str, short: str) -> None:
    assert op_name(target) == short


def test_the_capture_says_where_blame_stays_coarse() -> None:
    """Submodules the automatic capture kept whole on its own that hold much of the time are said with their share
    and the fix; a small one, or none, says nothing."""
    from pytest_fxprof.records.measurement import NodeStats
    from pytest_fxprof.views.render import coarse_line

    def stat(name: str, op: str, module: str, share: float) -> NodeStats:
        node = NodeInfo(f"{op}:{module}:{name}#0", name, op, name, module)
        return NodeStats(node, median_ns=1, spread_ns=0, share=share, samples_ns=(1,))

    nodes = [stat("Tokenizer", "call_module", "tokenizer", 0.54), stat("Classifier", "call_module", "classifier", 0.46)]
    kept = replace(CAPTURE, opaque=("tokenizer", "classifier"))
    line = coarse_line(kept, nodes)
    assert line.startswith(
        "blame stays coarse: symbolic_trace kept tokenizer (54%), classifier (46%) of the time whole"
    )
    assert line.endswith("or make torch.export take the model and set capture='export'")
    assert coarse_line(CAPTURE, nodes) == ""  # nothing kept whole
    small = [stat("Dropout", "call_module", "drop", 0.02), stat("mm", "call_function", "", 0.98)]
    assert coarse_line(replace(CAPTURE, opaque=("drop",)), small) == ""


def test_the_worst_lists_rank_the_operations_a_change_added_and_removed_by_their_time() -> None:
    """A change that adds an operation carries its time there: the summary's worst list, like every view that
    ranks nodes, ranks it by the time it put at stake, beside the compared nodes' losses."""
    extra = node("extra", "torch.nn.functional.gelu", "layer1")
    nodes = (*MODEL[:3], extra, *MODEL[3:])
    c = compare(BASELINE, entry({"conv2": 1.02}, nodes=nodes, extra={"extra": 120_000}), POLICY)
    assert c.added_ns == (120_000.0,)
    line = summary_line("t::x", c)
    assert "; worst: extra +120.0 us (added), conv2 x1.02, " in line  # 120 us added; conv2 lost 6 us
    without_softmax = tuple(n for n in MODEL if n.name != "softmax")
    gone = compare(BASELINE, entry({"conv2": 1.02}, nodes=without_softmax), POLICY)
    assert gone.removed_ns == (70_000.0,)
    assert summary_line("t::x", gone).split("; worst: ")[1].startswith("conv2 x1.02, ")  # a saving ranks last
    assert "softmax -70.0 us (removed)" in worst_text(gone, limit=len(MODEL))


def test_a_reports_worst_node_may_be_one_the_change_added() -> None:
    """``worst_nodes`` (the Markdown table's "Worst node", junit's ``worst_node``) ranks an added node by its whole
    time; a profile never compared has no worst node."""
    compared: list[Any] = [
        {"name": "fc", "current_ns": 1_050_000, "baseline_ns": 1_000_000, "ratio": 1.05, "verdict": "ok"},
        {"name": "add_2", "current_ns": 400_000},  # added: no ratio
        {"name": "relu", "current_ns": 10_000, "baseline_ns": 5_000, "ratio": 2.0, "verdict": "ok"},
    ]
    assert [n["name"] for n in worst_nodes(compared)] == ["add_2", "fc", "relu"]
    assert worst_label(compared[1]) == "+400.0 us (added)"
    assert worst_label(compared[0]) == "x1.05"
    assert worst_nodes([{"name": "fc", "current_ns": 1_000_000}]) == []  # type: ignore[typeddict-item]
