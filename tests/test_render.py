"""Unit tests of ``pytest_fxprof.render`` and ``ProfileResult``'s views, with hand-built records (no torch)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import pytest

from pytest_fxprof.decision import Comparison, Policy, Status, compare
from pytest_fxprof.records import (
    BaselineEntry,
    Environment,
    NodeInfo,
    NodeStats,
    ProfileResult,
    Run,
    Tolerances,
    node_key,
)
from pytest_fxprof.render import WORST_SHOWN, fmt_ns, profile_table, regression_message, summary_line
from tests.records_for_tests import BASE_NS, CAPTURE, ENV, MODEL, PROTOCOL, node

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
    with pytest.raises(ValueError, match="sort must be 'time' or 'graph', not 'name'"):
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
    times = tuple(
        extra[n.name] if n.name in extra else round(BASE_NS[n.name] * factors.get(n.name, 1.0)) for n in nodes
    )
    run = Run(
        total_ns=sum(times),
        instrumented_ns=sum(times) * 3 // 2,
        reference_ns=500_000,
        node_ns=times,
        node_spread_ns=(0,) * len(times),
    )
    return BaselineEntry(CAPTURE, environment, PROTOCOL, Tolerances(0.2, 0.1), tuple(nodes), (run,))


BASELINE = entry()


def regression() -> Comparison:
    c = compare(BASELINE, entry({"pool": 3.0, "relu1": 4.0}), Policy())
    assert c.status is Status.REGRESSION
    return c


def test_regression_message_names_each_slowed_node_worst_first() -> None:
    lines = regression_message("tests/test_net.py::test_net[forward]", regression()).splitlines()
    assert lines[0] == "fxprof: tests/test_net.py::test_net[forward] got slower than its baseline (1 process(es))"
    slower = [line for line in lines if line.startswith("  slower: ")]
    assert len(slower) == 2
    # pool lost 160 us, relu1 150 us: pool first although it comes later in the graph and has the lower ratio
    pool, relu = slower
    for part in (
        "relu1 (call_function torch.relu in stem)",
        "50.0 us -> 200.0 us",
        "x4.00",
        "band +20% (tolerance)",
        "+150.0 us",
    ):
        assert part in relu
    for part in (
        "pool (call_module pool in pool)",
        "80.0 us -> 240.0 us",
        "x3.00",
        "band +20% (tolerance)",
        "+160.0 us",
    ):
        assert part in pool
    assert lines.index(pool) < lines.index(relu)


def test_regression_message_has_the_total_and_speed_factor() -> None:
    text = regression_message("t", regression())
    (total,) = [line for line in text.splitlines() if line.startswith("  total: ")]
    assert total == "  total: 1.00 ms -> 1.31 ms, x1.31 against the reference workload, band +10% (tolerance): slower"
    assert "speed factor" in text
    assert "x1.00" in text
    assert "graph changed" not in text


def test_regression_message_when_only_the_total_is_slower() -> None:
    c = compare(BASELINE, entry(dict.fromkeys(BASE_NS, 1.3)), Policy())
    text = regression_message("t", c)
    assert "slower:" not in text
    assert "x1.30 against the reference workload, band +10% (tolerance): slower" in text


def test_regression_message_root_module_and_structure() -> None:
    dropout = node("dropout", "torch.nn.functional.dropout", "layer1")
    nodes = (*MODEL[:3], dropout, *MODEL[3:])
    c = compare(BASELINE, entry({"softmax": 4.0}, nodes=nodes, extra={"dropout": 10_000}), Policy())
    assert c.status is Status.REGRESSION
    lines = regression_message("t", c).splitlines()
    assert any("softmax (call_method softmax in <root>)" in line for line in lines)
    assert "  graph changed since the baseline: 1 node(s) added, 0 removed" in lines
    assert "    added: dropout (torch.nn.functional.dropout in layer1)" in lines


def test_summary_line_recorded() -> None:
    assert summary_line("t::x", None) == "t::x: recorded"


def test_summary_line_pass() -> None:
    c = compare(BASELINE, entry({"conv2": 1.1}), Policy())
    assert c.status is Status.PASS
    line = summary_line("t::x", c)
    assert line.startswith("t::x: pass, total x1.03; worst: conv2 x1.10, ")
    assert line.count(" x1.00") == WORST_SHOWN - 1
    assert "graph changed" not in line


def test_summary_line_regression() -> None:
    line = summary_line("t::x", regression())
    assert line == "t::x: regression, total x1.31; worst: relu1 x4.00, pool x3.00, conv1 x1.00"


def test_summary_line_mismatch() -> None:
    current = entry(environment=replace(ENV, torch="2.5.0", threads=4))
    c = compare(BASELINE, current, Policy())
    line = summary_line("t::x", c)
    assert line == "t::x: mismatch (torch: baseline '2.4.1+cpu', this run '2.5.0'; threads: baseline 1, this run 4)"


def test_summary_line_graph_changed() -> None:
    c = compare(BASELINE, entry(nodes=MODEL[:-1]), Policy())
    line = summary_line("t::x", c)
    assert line.startswith("t::x: pass, ")
    assert line.endswith("; graph changed (+0/-1)")


# ProfileResult -------------------------------------------------------------------------------------


def test_to_dataframe() -> None:
    df = make_result().to_dataframe()
    assert list(df.columns) == ["key", "node", "op", "target", "module", "median_us", "spread", "share", "samples"]
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
    assert list(df.columns) == ["key", "node", "op", "target", "module", "median_us", "spread", "share", "samples"]


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


# ProfileResult.faster_of: the confirmation's merge ------------------------------------------------


def test_faster_of_keeps_each_nodes_faster_measurement_and_the_faster_total() -> None:
    first = make_result(total_samples_ns=(2_000_000,) * 3)
    slowed = [(info, m * 3 if info.name == "conv1" else m, s) for info, m, s in TABLE_NODES]
    second = make_result(slowed, total_samples_ns=(1_000_000,) * 3)
    merged = first.faster_of(second)
    assert merged.remeasured
    assert [n.median_ns for n in merged.nodes] == [m for _, m, _ in TABLE_NODES]  # conv1 from the first
    assert merged.total_ns == 1_000_000  # the total from the second, the faster run
    assert sum(n.share for n in merged.nodes) == pytest.approx(1.0)
    assert merged.comparison is None
    # symmetric: a node slow only in the first measurement takes the second's time
    assert [n.median_ns for n in second.faster_of(first).nodes] == [n.median_ns for n in merged.nodes]


def test_faster_of_refuses_another_graph() -> None:
    with pytest.raises(ValueError, match="same graph"):
        make_result().faster_of(make_result(TABLE_NODES[:-1]))
