"""Unit tests of ``pytest_fxprof.decision``: every rule of the gate, with hand-built records (no torch)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from pytest_fxprof.decision import (
    FLOOR_SHARE,
    MACHINE_FACTOR_LIMIT,
    PRIOR_WEIGHT,
    SPREAD_K,
    BandSource,
    Comparison,
    NodeVerdict,
    Policy,
    Status,
    Verdict,
    align,
    band_for,
    compare,
    node_noise,
    size_class,
    weighted_median,
)
from pytest_fxprof.records import (
    BaselineEntry,
    Capture,
    Environment,
    NodeInfo,
    Run,
    Tolerances,
)
from tests.records_for_tests import BASE_NS, CAPTURE, ENV, MODEL, PROTOCOL, node

# Builders ------------------------------------------------------------------------------------------

TOLERANCES = Tolerances(node=0.20, total=0.10)
REF_NS = 500_000


def make_run(node_ns: Sequence[int], *, total_ns: int | None = None, reference_ns: int = REF_NS) -> Run:
    """One process's summary; the plain forward defaults to the sum of the nodes."""
    total = sum(node_ns) if total_ns is None else total_ns
    return Run(
        total_ns=total,
        instrumented_ns=total * 3 // 2,
        reference_ns=reference_ns,
        node_ns=tuple(node_ns),
        node_spread_ns=tuple(t // 20 for t in node_ns),
    )


def make_entry(
    runs: Sequence[Run],
    nodes: Sequence[NodeInfo] = MODEL,
    *,
    environment: Environment = ENV,
    capture: Capture = CAPTURE,
) -> BaselineEntry:
    return BaselineEntry(
        capture=capture,
        environment=environment,
        protocol=PROTOCOL,
        tolerances=TOLERANCES,
        nodes=tuple(nodes),
        runs=tuple(runs),
    )


def model_times(factors: Mapping[str, float] | None = None, overall: float = 1.0) -> list[int]:
    """The model's node times, each scaled by ``overall`` and by its own factor (by node name)."""
    factors = factors or {}
    return [round(BASE_NS[n.name] * overall * factors.get(n.name, 1.0)) for n in MODEL]


def current_entry(
    factors: Mapping[str, float] | None = None, overall: float = 1.0, ref_factor: float = 1.0
) -> BaselineEntry:
    return make_entry([make_run(model_times(factors, overall), reference_ns=round(REF_NS * ref_factor))])


BASELINE_1 = make_entry([make_run(model_times())])

# Five baseline processes with a little (+-2 %) jitter, the unchanged model at their centre.
JITTER = (1.0, 1.02, 0.98, 1.01, 0.99)
BASELINE_5 = make_entry(
    [
        make_run(model_times(overall=j), total_ns=round(1_000_000 * j), reference_ns=round(REF_NS * (2 - j)))
        for j in JITTER
    ]
)


def verdict_of(c: Comparison, name: str) -> NodeVerdict:
    (v,) = [v for v in c.nodes if v.node.name == name]
    return v


def names(verdicts: Sequence[NodeVerdict]) -> tuple[str, ...]:
    return tuple(v.node.name for v in verdicts)


# weighted_median, size_class, band_for -------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "weights", "expected"),
    [
        pytest.param([], [], 1.0, id="empty"),
        pytest.param([3.0], [1.0], 3.0, id="single"),
        pytest.param([3.0], [0.0], 1.0, id="single-zero-weight"),
        pytest.param([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], 1.0, id="all-zero-weights"),
        pytest.param([5.0, 2.0], [-1.0, 1.0], 2.0, id="negative-weight-ignored"),
        pytest.param([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], 2.0, id="odd-equal-weights"),
        pytest.param([1.0, 2.0], [1.0, 1.0], 1.5, id="exact-half-averages-the-middle-two"),
        pytest.param([0.7, 0.7, 1.3, 1.3], [1.0, 1.0, 1.0, 1.0], 1.0, id="even-symmetric"),
        pytest.param([3.0, 1.0, 2.0], [1.0, 1.0, 10.0], 2.0, id="unsorted-heavy-middle"),
        pytest.param([1.0, 100.0], [3.0, 1.0], 1.0, id="outlier-light"),
        pytest.param([1.0, 100.0], [1.0, 3.0], 100.0, id="outlier-heavy"),
        pytest.param([2.0, 2.0, 2.0], [1.0, 5.0, 2.0], 2.0, id="all-equal"),
        pytest.param([0.5, 1.0, 4.0], [1.0, 0.0, 1.0], 2.25, id="zero-weight-middle-skipped"),
    ],
)
def test_weighted_median(values: list[float], weights: list[float], expected: float) -> None:
    assert weighted_median(values, weights) == expected


def test_weighted_median_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="zip"):
        weighted_median([1.0, 2.0], [1.0])


@pytest.mark.parametrize(
    ("ns", "expected"),
    [(0.0, 0), (0.5, 0), (1.0, 0), (2.0, 1), (1023.0, 9), (1024.0, 10), (1_000_000.0, 19)],
)
def test_size_class(ns: float, expected: int) -> None:
    assert size_class(ns) == expected


@pytest.mark.parametrize(
    ("tolerance", "sigma", "expected_band", "expected_source"),
    [
        pytest.param(0.2, None, 0.2, BandSource.TOLERANCE, id="no-spread-known"),
        pytest.param(0.2, 0.0, 0.2, BandSource.TOLERANCE, id="zero-spread"),
        pytest.param(0.2, 0.01, 0.2, BandSource.TOLERANCE, id="small-spread"),
        pytest.param(0.2, 0.1, math.exp(SPREAD_K * 0.1) - 1, BandSource.SPREAD, id="wide-spread"),
        pytest.param(0.0, 0.05, math.exp(SPREAD_K * 0.05) - 1, BandSource.SPREAD, id="zero-tolerance"),
    ],
)
def test_band_for(tolerance: float, sigma: float | None, expected_band: float, expected_source: BandSource) -> None:
    band, source = band_for(tolerance, sigma)
    assert band == pytest.approx(expected_band)
    assert source is expected_source


# Rule 1: mismatches --------------------------------------------------------------------------------


def assert_mismatch(c: Comparison, *fragments: str) -> None:
    """A mismatch claims nothing about speed: no verdicts, no total, no slowed nodes."""
    assert c.status is Status.MISMATCH
    assert c.nodes == ()
    assert c.total is None
    assert c.slower == ()
    assert c.faster == ()
    assert c.speed_factor == 1.0
    assert not c.graph_changed
    text = "\n".join(c.mismatches)
    for fragment in fragments:
        assert fragment in text


@pytest.mark.parametrize(
    ("field_name", "value"),
    [
        ("torch", "2.5.0+cpu"),
        ("cpu", "AMD EPYC 9654"),
        ("threads", 8),
        ("device", "cuda:0"),
        ("allocator", "default"),
    ],
)
def test_environment_mismatch_claims_no_slowdown(field_name: str, value: object) -> None:
    # The current run is much slower too: still no slowdown may be claimed on another environment.
    changes: dict[str, Any] = {field_name: value}
    current = replace(current_entry(overall=3.0), environment=replace(ENV, **changes))
    c = compare(BASELINE_1, current, Policy())
    assert_mismatch(c, f"{field_name}: baseline {getattr(ENV, field_name)!r}, this run {value!r}")
    assert len(c.mismatches) == 1
    assert c.baseline_processes == 1


@pytest.mark.parametrize(("field_name", "value"), [("python", "3.12.4"), ("platform", "Linux-6.9-x86_64")])
def test_fields_outside_match_fields_do_not_mismatch(field_name: str, value: str) -> None:
    changes: dict[str, Any] = {field_name: value}
    current = replace(current_entry(), environment=replace(ENV, **changes))
    c = compare(BASELINE_1, current, Policy())
    assert c.status is Status.PASS
    assert c.mismatches == ()


def test_several_mismatches_are_all_listed() -> None:
    current = replace(current_entry(), environment=replace(ENV, torch="2.5.0", device="cuda:0"))
    c = compare(BASELINE_1, current, Policy())
    assert_mismatch(c, "torch:", "device:")
    assert len(c.mismatches) == 2


def test_capture_method_mismatch() -> None:
    current = replace(current_entry(), capture=Capture(method="dynamo"))
    c = compare(BASELINE_1, current, Policy())
    assert_mismatch(c, "capture: baseline 'symbolic_trace', this run 'dynamo'")


@pytest.mark.parametrize(
    ("ref_factor", "shown"),
    [
        pytest.param(2.5, "x2.50", id="reference-much-slower"),
        pytest.param(0.3, "x0.30", id="reference-much-faster"),
        pytest.param(MACHINE_FACTOR_LIMIT * 1.01, "x2.02", id="just-beyond-slow-limit"),
        pytest.param(0.99 / MACHINE_FACTOR_LIMIT, "x0.49", id="just-beyond-fast-limit"),
    ],
)
def test_reference_workload_far_off_is_a_machine_mismatch(ref_factor: float, shown: str) -> None:
    c = compare(BASELINE_1, current_entry(ref_factor=ref_factor), Policy())
    assert_mismatch(c, "machine speed", shown, f"limit x{MACHINE_FACTOR_LIMIT:g}")


@pytest.mark.parametrize("ref_factor", [MACHINE_FACTOR_LIMIT, 1 / MACHINE_FACTOR_LIMIT, 1.5, 0.7])
def test_reference_workload_within_limit_is_compared(ref_factor: float) -> None:
    c = compare(BASELINE_1, current_entry(ref_factor=ref_factor), Policy())
    assert c.status is not Status.MISMATCH
    assert c.mismatches == ()
    assert c.total is not None
    assert c.total.machine_factor == pytest.approx(ref_factor)


def test_reference_is_compared_with_the_median_of_baseline_processes() -> None:
    # Baseline references 500, 490, 510, 495, 505 us (median 500 us); this run's is 1.1 ms: x2.2.
    c = compare(BASELINE_5, current_entry(ref_factor=2.2), Policy())
    assert_mismatch(c, "machine speed", "x2.20")
    assert c.baseline_processes == 5


# Rules 3-5: the verdict table ----------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    factors: dict[str, float] = field(default_factory=dict)
    overall: float = 1.0
    ref_factor: float = 1.0
    policy: Policy = field(default_factory=Policy)
    status: Status = Status.PASS
    slower: tuple[str, ...] = ()
    faster: tuple[str, ...] = ()
    total: Verdict = Verdict.OK
    speed: float = 1.0


CASES = [
    Case("unchanged"),
    Case("within-band", factors={"conv2": 1.15}),
    Case("one-node-x2", factors={"pool": 2.0}, status=Status.REGRESSION, slower=("pool",)),
    # pool loses 160 us, relu1 150 us: worst first by time lost, not by ratio (relu1 x4, pool x3) nor graph order
    Case(
        "two-nodes-worst-first",
        factors={"pool": 3.0, "relu1": 4.0},
        status=Status.REGRESSION,
        slower=("pool", "relu1"),
        total=Verdict.SLOWER,
    ),
    # add: 20 us -> 35 us is x1.75 but only 15 us, under the 20 us floor
    Case("large-ratio-under-floor", factors={"add": 1.75}),
    Case(
        "large-ratio-above-lowered-floor",
        factors={"add": 1.75},
        policy=Policy(floor_ns=10_000),
        status=Status.REGRESSION,
        slower=("add",),
    ),
    Case(
        "tighter-node-tolerance",
        factors={"conv2": 1.15},
        policy=Policy(node_tolerance=0.1),
        status=Status.REGRESSION,
        slower=("conv2",),
    ),
    Case("faster-node", factors={"conv2": 1 / 3}, faster=("conv2",), total=Verdict.FASTER),
    Case("uniform-drift-cancels", overall=1.3, ref_factor=1.3, speed=1.3),
    Case("spread-slowdown-caught-by-total", overall=1.3, status=Status.REGRESSION, total=Verdict.SLOWER, speed=1.3),
    Case(
        "drift-plus-one-slow-node",
        factors={"pool": 2.0},
        overall=1.3,
        ref_factor=1.3,
        status=Status.REGRESSION,
        slower=("pool",),
        speed=1.3,
    ),
    Case(
        "total-tolerance-loosened",
        overall=1.3,
        policy=Policy(total_tolerance=0.5),
        speed=1.3,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_verdicts(case: Case) -> None:
    c = compare(BASELINE_1, current_entry(case.factors, case.overall, case.ref_factor), case.policy)
    assert c.status is case.status
    assert c.mismatches == ()
    assert names(c.slower) == case.slower
    assert names(c.faster) == case.faster
    assert c.total is not None
    assert c.total.verdict is case.total
    assert c.speed_factor == pytest.approx(case.speed)
    assert not c.graph_changed
    assert names(c.nodes) == tuple(n.name for n in MODEL)
    expected_ok = set(BASE_NS) - set(case.slower) - set(case.faster)
    assert {v.node.name for v in c.nodes if v.verdict is Verdict.OK} == expected_ok


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_verdicts_against_five_process_baseline(case: Case) -> None:
    """The same table against a jittery five-process baseline: +-2 % noise changes no verdict."""
    c = compare(BASELINE_5, current_entry(case.factors, case.overall, case.ref_factor), case.policy)
    assert c.status is case.status
    assert names(c.slower) == case.slower
    assert names(c.faster) == case.faster
    assert c.total is not None
    assert c.total.verdict is case.total
    assert c.baseline_processes == 5


def test_unchanged_data_passes_with_ratio_one_everywhere() -> None:
    c = compare(BASELINE_1, current_entry(), Policy())
    assert c.status is Status.PASS
    for v in c.nodes:
        assert v.ratio == pytest.approx(1.0)
        assert v.delta_ns == pytest.approx(0.0)
        assert v.baseline_ns == BASE_NS[v.node.name]
        assert v.current_ns == BASE_NS[v.node.name]
        assert "within band +20% (tolerance)" in v.reason
    assert c.total is not None
    assert c.total.ratio == pytest.approx(1.0)
    assert c.total.baseline_ns == 1_000_000
    assert c.total.current_ns == 1_000_000


def test_single_slow_node_is_named_with_its_reason() -> None:
    c = compare(BASELINE_1, current_entry({"pool": 2.0}), Policy())
    (v,) = c.slower
    assert v.node == MODEL[4]
    assert v.verdict is Verdict.SLOWER
    assert v.ratio == pytest.approx(2.0)
    assert v.delta_ns == pytest.approx(80_000)
    assert v.baseline_ns == 80_000
    assert v.current_ns == 160_000
    assert v.band == pytest.approx(0.2)
    assert v.band_source is BandSource.TOLERANCE
    assert v.floor_ns == 20_000
    assert v.reason.startswith("x2.00 beyond band +20% (tolerance)")
    assert "+80.0 us > floor" in v.reason
    # one slow node of eight barely moves the speed factor, and the 8 % more total stays in its band
    assert c.speed_factor == pytest.approx(1.0)
    assert c.total is not None
    assert c.total.verdict is Verdict.OK
    assert c.total.ratio == pytest.approx(1.08)


def test_slower_ties_are_broken_by_key() -> None:
    # relu1 50 -> 130 us and pool 80 -> 160 us both lose 80 us.
    c = compare(BASELINE_1, current_entry({"relu1": 2.6, "pool": 2.0}), Policy())
    assert [v.delta_ns for v in c.slower] == [pytest.approx(80_000)] * 2
    assert [v.node.key for v in c.slower] == sorted(v.node.key for v in c.slower)


def test_large_ratio_under_absolute_floor_stays_ok() -> None:
    c = compare(BASELINE_1, current_entry({"add": 1.75}), Policy())
    v = verdict_of(c, "add")
    assert v.verdict is Verdict.OK
    assert v.ratio == pytest.approx(1.75)
    assert v.ratio > 1 + v.band
    assert v.floor_ns == 20_000
    assert "beyond band +20%" in v.reason
    assert "+15.0 us is under the floor" in v.reason
    assert c.status is Status.PASS


def test_floor_grows_with_the_models_total_time() -> None:
    """On a 100 ms model the floor is FLOOR_SHARE of it (200 us), above the 20 us default."""
    nodes = (
        node("matmul", "torch.matmul", "encoder"),
        node("relu", "torch.relu", "encoder"),
        node("norm", "norm", "encoder.norm", op="call_module"),
    )
    base = [98_950_000, 50_000, 1_000_000]
    baseline = make_entry([make_run(base)], nodes)
    # relu x3 (+100 us): far beyond its band and above 20 us, yet under 0.2 % of 100 ms.
    current = make_entry([make_run([98_950_000, 150_000, 1_000_000])], nodes)
    c = compare(baseline, current, Policy())
    (relu,) = [v for v in c.nodes if v.node.name == "relu"]
    assert relu.floor_ns == pytest.approx(FLOOR_SHARE * 100_000_000)
    assert relu.ratio == pytest.approx(3.0)
    assert relu.verdict is Verdict.OK
    assert "under the floor" in relu.reason
    assert c.status is Status.PASS
    # a policy floor below the share does not lower it: the floor is the larger of the two
    c = compare(baseline, current, Policy(floor_ns=50_000))
    assert c.status is Status.PASS
    assert c.nodes[1].floor_ns == pytest.approx(200_000)
    # and on a 1 ms model the same +100 us is well above the floor
    small = make_entry([make_run([900_000, 50_000, 50_000])], nodes)
    c = compare(small, make_entry([make_run([900_000, 150_000, 50_000])], nodes), Policy())
    assert names(c.slower) == ("relu",)


def test_faster_node_verdict_and_reason() -> None:
    c = compare(BASELINE_1, current_entry({"conv2": 1 / 3}), Policy())
    v = verdict_of(c, "conv2")
    assert v.verdict is Verdict.FASTER
    assert v.ratio == pytest.approx(1 / 3)
    assert v.delta_ns == pytest.approx(-200_000)
    assert v.reason.startswith("x0.33 below band +20% (tolerance)")
    assert c.faster == (v,)
    assert c.status is Status.PASS
    assert c.total is not None
    assert c.total.verdict is Verdict.FASTER
    assert "below band +10% (tolerance)" in c.total.reason


def test_small_speedup_under_floor_is_ok() -> None:
    # add 20 -> 5 us: x0.25 but only 15 us won
    c = compare(BASELINE_1, current_entry({"add": 0.25}), Policy())
    assert verdict_of(c, "add").verdict is Verdict.OK
    assert "below band" in verdict_of(c, "add").reason
    assert "under the floor" in verdict_of(c, "add").reason
    assert c.faster == ()


def test_node_that_took_no_time_in_the_baseline_is_still_judged() -> None:
    times = model_times()
    times[0] = 0
    baseline = make_entry([make_run(times)])
    times[0] = 5_000_000
    c = compare(baseline, make_entry([make_run(times)]), Policy())
    assert names(c.slower) == (MODEL[0].name,)


@pytest.mark.parametrize(("base_ref", "current_ref"), [(REF_NS, 0), (0, REF_NS), (0, 0)])
def test_missing_reference_workload_compares_raw_totals(base_ref: int, current_ref: int) -> None:
    baseline = make_entry([make_run(model_times(), reference_ns=base_ref)])
    unchanged = compare(baseline, make_entry([make_run(model_times(), reference_ns=current_ref)]), Policy())
    assert unchanged.status is Status.PASS
    assert unchanged.total is not None
    assert unchanged.total.ratio == pytest.approx(1.0)
    assert "no reference workload" in unchanged.total.reason
    slower = make_entry([make_run(model_times(overall=1.5), reference_ns=current_ref)])
    total = compare(baseline, slower, Policy()).total
    assert total is not None
    assert total.verdict is Verdict.SLOWER


def test_uniform_drift_cancels_in_nodes_and_total() -> None:
    c = compare(BASELINE_1, current_entry(overall=1.3, ref_factor=1.3), Policy())
    assert c.status is Status.PASS
    assert c.speed_factor == pytest.approx(1.3)
    assert all(v.verdict is Verdict.OK and v.ratio == pytest.approx(1.0) for v in c.nodes)
    assert c.total is not None
    assert c.total.ratio == pytest.approx(1.0)
    assert c.total.machine_factor == pytest.approx(1.3)
    # the raw times are kept in the verdicts, the ratio is after the speed factor
    assert verdict_of(c, "conv2").current_ns == 390_000


def test_slowdown_spread_over_all_nodes_is_caught_by_the_total_only() -> None:
    c = compare(BASELINE_1, current_entry(overall=1.3), Policy())
    assert c.status is Status.REGRESSION
    assert all(v.verdict is Verdict.OK for v in c.nodes)
    assert c.slower == ()
    assert c.total is not None
    assert c.total.verdict is Verdict.SLOWER
    assert c.total.ratio == pytest.approx(1.3)
    assert c.total.band == pytest.approx(0.1)
    assert c.total.band_source is BandSource.TOLERANCE
    assert c.total.machine_factor == pytest.approx(1.0)
    assert c.total.reason == "x1.30 beyond band +10% (tolerance)"


def test_total_is_judged_per_reference_workload() -> None:
    # The model is 30 % slower but so is the reference: the same per-reference time, within band.
    c = compare(BASELINE_1, current_entry(overall=1.3, ref_factor=1.3), Policy())
    assert c.total is not None
    assert c.total.verdict is Verdict.OK
    # The model is unchanged but the reference 30 % slower: the model looks faster per reference.
    c = compare(BASELINE_1, current_entry(ref_factor=1.3), Policy())
    assert c.total is not None
    assert c.total.ratio == pytest.approx(1 / 1.3)
    assert c.total.verdict is Verdict.FASTER
    assert c.status is Status.PASS


def test_total_baseline_is_the_median_of_processes() -> None:
    c = compare(BASELINE_5, current_entry(), Policy())
    assert c.total is not None
    assert c.total.baseline_ns == 1_000_000
    assert c.baseline_processes == 5


# Rule 4: bands from tolerance or measured spread ---------------------------------------------------


def test_single_run_baseline_bands_come_from_tolerances() -> None:
    noise = node_noise(BASELINE_1.runs)
    assert [n.sigma for n in noise] == [None] * len(MODEL)
    assert [n.centre_ns for n in noise] == [BASE_NS[n.name] for n in MODEL]
    c = compare(BASELINE_1, current_entry(), Policy(node_tolerance=0.25, total_tolerance=0.15))
    for v in c.nodes:
        assert v.band == 0.25
        assert v.band_source is BandSource.TOLERANCE
        assert "(tolerance)" in v.reason
    assert c.total is not None
    assert c.total.band == 0.15
    assert c.total.band_source is BandSource.TOLERANCE


def test_identical_processes_have_zero_spread_and_tolerance_bands() -> None:
    baseline = make_entry([make_run(model_times())] * 3)
    assert all(n.sigma == 0.0 for n in node_noise(baseline.runs))
    c = compare(baseline, current_entry(), Policy())
    assert {v.band_source for v in c.nodes} == {BandSource.TOLERANCE}
    assert c.total is not None
    assert c.total.band_source is BandSource.TOLERANCE


def test_a_uniformly_slow_baseline_process_adds_no_spread() -> None:
    """Each baseline process's own speed factor is divided out before the spread is measured."""
    baseline = make_entry([make_run(model_times(overall=f)) for f in (1.0, 1.1, 0.95, 1.2, 1.0)])
    for n in node_noise(baseline.runs):
        assert n.sigma is not None
        assert n.sigma < 1e-6
    c = compare(baseline, current_entry(), Policy())
    assert {v.band_source for v in c.nodes} == {BandSource.TOLERANCE}


# Per-run, per-node multipliers: every node's median is 1.0, every process is +-30 % on some nodes.
NOISY = (
    (1.0, 1.3, 0.75, 1.0, 1.3, 0.75, 1.0, 1.3),
    (1.3, 0.75, 1.0, 1.3, 0.75, 1.0, 1.3, 0.75),
    (0.75, 1.0, 1.3, 0.75, 1.0, 1.3, 0.75, 1.0),
    (1.0,) * 8,
    (1.0,) * 8,
)


def noisy_baseline() -> BaselineEntry:
    runs = [
        make_run([round(BASE_NS[n.name] * m) for n, m in zip(MODEL, row, strict=True)], total_ns=total)
        for row, total in zip(NOISY, (1_000_000, 1_250_000, 800_000, 1_000_000, 1_100_000), strict=True)
    ]
    return make_entry(runs)


def test_noisy_multi_run_baseline_bands_come_from_spread() -> None:
    baseline = noisy_baseline()
    noise = node_noise(baseline.runs)
    assert [n.centre_ns for n in noise] == [BASE_NS[n.name] for n in MODEL]
    c = compare(baseline, current_entry(), Policy())
    assert c.status is Status.PASS
    for v, n in zip(c.nodes, noise, strict=True):
        assert n.sigma is not None
        assert v.band_source is BandSource.SPREAD
        assert v.band == pytest.approx(math.exp(SPREAD_K * n.sigma) - 1)
        assert v.band > 0.5
        assert "(spread)" in v.reason
    assert c.total is not None
    assert c.total.band_source is BandSource.SPREAD
    assert c.total.band > 0.1


def test_wide_spread_band_absorbs_a_slowdown_the_tolerance_would_flag() -> None:
    current = current_entry({"conv2": 1.4})
    # against a single quiet process: x1.4 on a 300 us node fails
    c = compare(BASELINE_1, current, Policy())
    assert names(c.slower) == ("conv2",)
    # against processes that scatter +-30 %: within the measured spread
    c = compare(noisy_baseline(), current, Policy())
    v = verdict_of(c, "conv2")
    assert v.verdict is Verdict.OK
    assert v.ratio == pytest.approx(1.4)
    assert v.band_source is BandSource.SPREAD
    assert "within band" in v.reason
    assert "(spread)" in v.reason
    # but not beyond it
    c = compare(noisy_baseline(), current_entry({"conv2": 4.0}), Policy())
    v = verdict_of(c, "conv2")
    assert v.verdict is Verdict.SLOWER
    assert v.band_source is BandSource.SPREAD
    assert "(spread)" in v.reason


def test_quiet_node_among_noisy_peers_is_shrunk_toward_them() -> None:
    """A node with zero spread of its own, among same-size nodes that scatter, gets a band above tolerance."""
    nodes = tuple(node(f"lin{i}", "lin", f"blocks.{i}.lin", op="call_module") for i in range(5))
    # node 0 never moves; the others scatter +-30 % around 100 us, balanced so every process's factor is 1
    rows = (
        (100_000, 130_000, 70_000, 130_000, 70_000),
        (100_000, 100_000, 100_000, 100_000, 100_000),
        (100_000, 70_000, 130_000, 70_000, 130_000),
    )
    baseline = make_entry([make_run(r) for r in rows], nodes)
    noise = node_noise(baseline.runs)
    assert [n.centre_ns for n in noise] == [100_000.0] * 5
    quiet, noisy = noise[0].sigma, noise[1].sigma
    assert quiet is not None
    assert noisy is not None
    assert 0 < quiet < noisy
    # the quiet node's peers balance out (factor 1 in every process), so its own spread is zero; the four
    # noisy nodes share one spread by symmetry, which is the class prior and enters with PRIOR_WEIGHT
    # against the quiet node's own zero with 2 degrees of freedom
    assert quiet == pytest.approx(math.sqrt(PRIOR_WEIGHT / (2 + PRIOR_WEIGHT)) * noisy)
    assert noise[2].sigma == pytest.approx(noisy)
    band, source = band_for(0.2, quiet)
    assert source is BandSource.SPREAD
    assert band > 0.2
    c = compare(baseline, make_entry([make_run([100_000] * 5)], nodes), Policy())
    v = c.nodes[0]
    assert v.band_source is BandSource.SPREAD
    assert v.band == pytest.approx(band)
    # x1.4 on the quiet node is within the shrunk band; a single-process baseline would have flagged it
    slow = make_entry([make_run([140_000, 100_000, 100_000, 100_000, 100_000])], nodes)
    assert compare(baseline, slow, Policy()).nodes[0].verdict is Verdict.OK
    assert compare(make_entry([make_run(rows[1])], nodes), slow, Policy()).nodes[0].verdict is Verdict.SLOWER


def _stdev_log(multipliers: Sequence[float]) -> float:
    return statistics.stdev(math.log(m) for m in multipliers)


def test_spread_is_pooled_by_size_class_only() -> None:
    """A quiet node far smaller than the noisy ones is not widened by them."""
    nodes = (
        *(node(f"lin{i}", "lin", f"blocks.{i}.lin", op="call_module") for i in range(4)),
        node("tiny", "operator.getitem", "blocks"),
    )
    # balanced so that the tiny node's peers (all the others: none lies within PEER_SPAN) keep factor 1
    rows = (
        (130_000, 70_000, 130_000, 70_000, 1_000),
        (100_000, 100_000, 100_000, 100_000, 1_000),
        (70_000, 130_000, 70_000, 130_000, 1_000),
    )
    noise = node_noise(make_entry([make_run(r) for r in rows], nodes).runs)
    assert size_class(1_000) < size_class(100_000) - 1
    assert noise[4].sigma == pytest.approx(0.0, abs=1e-9)
    assert all(n.sigma is not None and n.sigma > 0.2 for n in noise[:4])


# Rule 2: structural changes ------------------------------------------------------------------------

BLOCKS: tuple[NodeInfo, ...] = (
    node("linear", "linear", "blocks.0.linear", op="call_module"),
    node("relu", "torch.relu", "blocks.0"),
    node("linear_1", "linear", "blocks.1.linear", op="call_module"),
    node("relu_1", "torch.relu", "blocks.1"),
    node("linear_2", "linear", "blocks.2.linear", op="call_module"),
    node("relu_2", "torch.relu", "blocks.2"),
    node("head", "head", "head", op="call_module"),
)
BLOCK_NS = (200_000, 40_000, 210_000, 42_000, 190_000, 38_000, 280_000)
DROPOUT = node("dropout", "torch.nn.functional.dropout", "blocks.0")


def test_align_identical_graphs() -> None:
    pairs, added, removed = align(BLOCKS, BLOCKS)
    assert pairs == [(i, i) for i in range(len(BLOCKS))]
    assert added == []
    assert removed == []


def test_align_insertion_early_does_not_shift_later_pairs() -> None:
    current = (BLOCKS[0], DROPOUT, *BLOCKS[1:])
    pairs, added, removed = align(BLOCKS, current)
    assert pairs == [(0, 0), *((i, i + 1) for i in range(1, len(BLOCKS)))]
    assert all(BLOCKS[i] == current[j] for i, j in pairs)
    assert added == [DROPOUT]
    assert removed == []


def test_align_removal() -> None:
    current = BLOCKS[:3] + BLOCKS[4:]
    pairs, added, removed = align(BLOCKS, current)
    assert [BLOCKS[i].name for i, _ in pairs] == ["linear", "relu", "linear_1", "linear_2", "relu_2", "head"]
    assert all(BLOCKS[i] == current[j] for i, j in pairs)
    assert added == []
    assert removed == [BLOCKS[3]]


def test_align_replacement_is_one_removed_and_one_added() -> None:
    gelu = node("gelu", "torch.nn.functional.gelu", "blocks.1")
    current = (*BLOCKS[:3], gelu, *BLOCKS[4:])
    pairs, added, removed = align(BLOCKS, current)
    assert len(pairs) == len(BLOCKS) - 1
    assert added == [gelu]
    assert removed == [BLOCKS[3]]


def test_align_matches_by_signature_not_key_or_name() -> None:
    # Renamed FX nodes and renumbered keys still pair when op, module path and target agree.
    renamed = tuple(replace(n, name=f"n{i}", key=f"other#{i}") for i, n in enumerate(BLOCKS))
    pairs, added, removed = align(BLOCKS, renamed)
    assert pairs == [(i, i) for i in range(len(BLOCKS))]
    assert (added, removed) == ([], [])
    # the same target in another module is another node
    moved = (*BLOCKS[:-1], replace(BLOCKS[-1], module="classifier"))
    _, added, removed = align(BLOCKS, moved)
    assert added == [moved[-1]]
    assert removed == [BLOCKS[-1]]


def test_align_repeated_signatures() -> None:
    relus = tuple(node(f"relu_{i}", "torch.relu", "act", occurrence=i) for i in range(3))
    pairs, added, removed = align(relus, relus[:2])
    assert len(pairs) == 2
    assert added == []
    assert len(removed) == 1


def test_align_completely_different_graphs() -> None:
    other = (node("a", "torch.sin"), node("b", "torch.cos"))
    pairs, added, removed = align(BLOCKS, other)
    assert pairs == []
    assert added == list(other)
    assert removed == list(BLOCKS)


def test_compare_with_inserted_node_keeps_pairing_and_still_finds_slowdowns() -> None:
    baseline = make_entry([make_run(BLOCK_NS)], BLOCKS)
    current_nodes = (BLOCKS[0], DROPOUT, *BLOCKS[1:])
    # dropout is new (30 us); the later linear_2 got 2x slower; all others unchanged
    times = [BLOCK_NS[0], 30_000, *BLOCK_NS[1:]]
    times[current_nodes.index(BLOCKS[4])] *= 2
    c = compare(baseline, make_entry([make_run(times, total_ns=sum(BLOCK_NS))], current_nodes), Policy())
    assert c.graph_changed
    assert c.added == (DROPOUT,)
    assert c.removed == ()
    assert names(c.nodes) == tuple(n.name for n in BLOCKS)
    assert [v.baseline_ns for v in c.nodes] == list(BLOCK_NS)
    assert names(c.slower) == ("linear_2",)
    assert c.slower[0].ratio == pytest.approx(2.0)
    assert c.status is Status.REGRESSION


def test_compare_with_removed_node_compares_the_rest() -> None:
    baseline = make_entry([make_run(BLOCK_NS)], BLOCKS)
    current_nodes = BLOCKS[:3] + BLOCKS[4:]
    times = BLOCK_NS[:3] + BLOCK_NS[4:]
    c = compare(baseline, make_entry([make_run(times, total_ns=sum(BLOCK_NS))], current_nodes), Policy())
    assert c.status is Status.PASS
    assert c.graph_changed
    assert c.added == ()
    assert c.removed == (BLOCKS[3],)
    assert names(c.nodes) == tuple(n.name for n in current_nodes)
    assert all(v.verdict is Verdict.OK and v.ratio == pytest.approx(1.0) for v in c.nodes)


def test_graph_change_alone_is_not_a_regression() -> None:
    baseline = make_entry([make_run(BLOCK_NS)], BLOCKS)
    other = (node("a", "torch.sin"), node("b", "torch.cos"))
    c = compare(baseline, make_entry([make_run([500_000, 500_000])], other), Policy())
    assert c.status is Status.PASS
    assert c.nodes == ()
    assert c.graph_changed
    assert c.speed_factor == 1.0
    assert c.total is not None
    assert c.total.verdict is Verdict.OK


def test_a_faster_run_is_not_divided_out() -> None:
    """Only a slower run's speed factor is divided out: a node that kept its time while the rest of the
    model (and the machine) got twice as fast is not called slower."""
    c = compare(BASELINE_1, current_entry({"pool": 2.0}, overall=0.5, ref_factor=0.5), Policy())
    assert c.speed_factor == pytest.approx(0.5)
    pool = verdict_of(c, "pool")
    assert pool.verdict is Verdict.OK
    assert pool.ratio == pytest.approx(1.0)
    assert c.slower == ()
    assert c.status is Status.PASS
