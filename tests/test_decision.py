"""Unit tests of ``pytest_fxprof.judge.decision``: every rule of the gate, with hand-built records (no torch)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from pytest_fxprof.judge.band import SPREAD_K, band_for
from pytest_fxprof.judge.decision import DRIFT_DOUBT, MACHINE_FACTOR_LIMIT, NOISY_BAND, Policy, compare, judge
from pytest_fxprof.judge.moved import align
from pytest_fxprof.judge.noise import (
    GATING_NS,
    GATING_SHARE,
    PRIOR_WEIGHT,
    Peers,
    node_noise,
    size_class,
    weighted_median,
)
from pytest_fxprof.records.measurement import BaselineEntry, Capture, Environment, NodeInfo, Run, Tolerances
from pytest_fxprof.records.verdicts import (
    AggregateVerdict,
    BandSource,
    Comparison,
    Kind,
    NodeVerdict,
    Status,
    Verdict,
    conservative,
)
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


def measured(
    *measurements: Mapping[str, float], nodes: Sequence[NodeInfo] = MODEL, base: Mapping[str, int] = BASE_NS
) -> BaselineEntry:
    """A current entry of several measurements (a first one and its confirmations), each a dict of factors."""
    return make_entry([make_run(scaled(nodes, base, m)) for m in measurements], nodes)


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


def labels(aggregates: Sequence[AggregateVerdict]) -> tuple[str, ...]:
    """Aggregates as ``"op BatchNorm2d"`` or ``"module layer1"``."""
    return tuple(f"{a.kind.value} {a.name}" for a in aggregates)


def aggregate_of(c: Comparison, label: str) -> AggregateVerdict:
    (a,) = [a for a in c.aggregates if f"{a.kind.value} {a.name}" == label]
    return a


def flagged_aggregates(c: Comparison) -> dict[str, Verdict]:
    """Every aggregate whose verdict is not OK, by label."""
    return {f"{a.kind.value} {a.name}": a.verdict for a in c.aggregates if a.verdict is not Verdict.OK}


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
    ("tolerance", "sigma", "k", "floor", "expected"),
    [
        pytest.param(0.2, None, SPREAD_K, 0.0, (0.2, BandSource.TOLERANCE), id="no-spread-known"),
        pytest.param(0.2, 0.0, SPREAD_K, 0.0, (0.2, BandSource.TOLERANCE), id="zero-spread"),
        pytest.param(0.2, 0.01, SPREAD_K, 0.0, (0.2, BandSource.TOLERANCE), id="small-spread"),
        pytest.param(0.2, 0.1, SPREAD_K, 0.0, (math.exp(SPREAD_K * 0.1) - 1, BandSource.SPREAD), id="wide-spread"),
        pytest.param(0.0, 0.05, SPREAD_K, 0.0, (math.exp(SPREAD_K * 0.05) - 1, BandSource.SPREAD), id="zero-tolerance"),
        pytest.param(0.2, 0.1, 1.0, 0.0, (0.2, BandSource.TOLERANCE), id="fewer-deviations-narrow-the-spread"),
        pytest.param(0.2, 0.1, 5.0, 0.0, (math.exp(0.5) - 1, BandSource.SPREAD), id="more-deviations-widen-it"),
        pytest.param(0.2, None, SPREAD_K, 0.5, (0.5, BandSource.FLOOR), id="floor-above-tolerance"),
        pytest.param(0.2, 0.1, SPREAD_K, 0.5, (0.5, BandSource.FLOOR), id="floor-above-spread"),
        pytest.param(0.2, 0.2, SPREAD_K, 0.5, (math.exp(0.6) - 1, BandSource.SPREAD), id="spread-above-floor"),
        pytest.param(0.2, None, SPREAD_K, 0.1, (0.2, BandSource.TOLERANCE), id="floor-below-tolerance"),
        pytest.param(0.2, None, SPREAD_K, 0.2, (0.2, BandSource.TOLERANCE), id="floor-equal-to-tolerance"),
        pytest.param(0.0, None, SPREAD_K, 2.0, (2.0, BandSource.FLOOR), id="floor-beyond-noisy-band"),
    ],
)
def test_band_for(
    tolerance: float, sigma: float | None, k: float, floor: float, expected: tuple[float, BandSource]
) -> None:
    band, source = band_for(tolerance, sigma, k=k, floor=floor)
    assert band == pytest.approx(expected[0])
    assert source is expected[1]


def test_band_for_defaults_to_spread_k_and_no_floor() -> None:
    assert band_for(0.2, 0.1) == band_for(0.2, 0.1, k=SPREAD_K, floor=0.0)


@pytest.mark.parametrize(
    ("ratios", "expected"),
    [
        pytest.param([1.5], 1.5, id="one-slower"),
        pytest.param([0.5], 0.5, id="one-faster"),
        pytest.param([1.0], 1.0, id="one-unchanged"),
        pytest.param([2.5, 2.0], 2.0, id="all-slower-the-least-slow"),
        pytest.param([2.0, 2.5, 3.0], 2.0, id="three-slower"),
        pytest.param([0.5, 0.7], 0.7, id="all-faster-the-least-fast"),
        pytest.param([2.0, 1.0], 1.0, id="mixed-the-last"),
        pytest.param([2.0, 0.5], 0.5, id="either-side-the-last"),
        pytest.param([1.0, 2.0], 2.0, id="only-the-last-slower"),
    ],
)
def test_conservative_ratio(ratios: list[float], expected: float) -> None:
    assert conservative(ratios) == expected


@dataclass(frozen=True)
class JudgeCase:
    id: str
    ratios: tuple[float, ...]
    verdict: Verdict
    reason: str
    confirmed: bool | None = None
    faster: tuple[float, ...] | None = None
    band: float = 0.25
    ratio: float | None = None  # the ratio the judgement reports, when not conservative(ratios)
    source: BandSource = BandSource.FLOOR


JUDGE_CASES = [
    JudgeCase("within", (1.2,), Verdict.OK, "x1.20 within band +25% (floor)"),
    JudgeCase("at-the-band-is-within", (1.25,), Verdict.OK, "x1.25 within band +25% (floor)"),
    JudgeCase("beyond", (1.5,), Verdict.SLOWER, "x1.50 beyond band +25% (floor), +50.0 us"),
    JudgeCase("below", (0.5,), Verdict.FASTER, "x0.50 below band +25% (floor), -50.0 us"),
    JudgeCase("at-the-lower-edge-is-within", (0.8,), Verdict.OK, "x0.80 within band +25% (floor)"),
    JudgeCase(
        "confirmed",
        (1.6, 1.5),
        Verdict.SLOWER,
        "x1.50 beyond band +25% (floor), +50.0 us in every measurement (x1.60, x1.50)",
        confirmed=True,
    ),
    JudgeCase(
        "not-confirmed",
        (1.6, 1.1),
        Verdict.OK,
        "not confirmed: x1.60, x1.10 against band +25% (floor); the first measurement was noise",
        confirmed=False,
    ),
    JudgeCase(
        "not-confirmed-by-a-faster-second",
        (1.6, 0.5),
        Verdict.OK,
        "not confirmed: x1.60, x0.50 against band +25% (floor); the first measurement was noise",
        confirmed=False,
    ),
    # only a first measurement beyond the band asks for confirmation: one within it leaves nothing to confirm
    JudgeCase("second-only", (1.0, 1.6), Verdict.OK, "x1.60 within band +25% (floor)"),
    JudgeCase("both-faster", (0.5, 0.6), Verdict.FASTER, "x0.60 below band +25% (floor), -40.0 us in every", None),
    JudgeCase("one-faster-one-not", (0.5, 0.9), Verdict.OK, "x0.90 within band +25% (floor)"),
    # the speed-up is judged on its own ratios (a node divided by its full speed factor) ...
    JudgeCase("faster-on-own-ratios", (1.0,), Verdict.FASTER, "x0.50 below", faster=(0.5,), ratio=0.5),
    # ... so a node that only kept pace with a faster machine is not faster
    JudgeCase("not-faster-on-own-ratios", (0.5,), Verdict.OK, "x0.50 within band +25% (floor)", faster=(1.0,)),
    # only a band from the measured spread can be too wide to decide ...
    JudgeCase(
        "noisy",
        (5.0,),
        Verdict.NOISY,
        "x5.00, but band +150% (spread) is too noisy to decide",
        band=1.5,
        source=BandSource.SPREAD,
    ),
    JudgeCase(
        "noisy-even-if-faster",
        (0.1,),
        Verdict.NOISY,
        "x0.10, but band +150% (spread)",
        band=1.5,
        source=BandSource.SPREAD,
    ),
    JudgeCase(
        "noisy-band-edge-decides",
        (2.5,),
        Verdict.SLOWER,
        "x2.50 beyond band +100% (spread)",
        band=NOISY_BAND,
        source=BandSource.SPREAD,
    ),
    # ... a wide floor is an absolute amount of time, and a change beyond it is real
    JudgeCase("wide-floor-decides", (5.0,), Verdict.SLOWER, "x5.00 beyond band +150% (floor)", band=1.5),
    JudgeCase(
        "wide-tolerance-decides",
        (5.0,),
        Verdict.SLOWER,
        "x5.00 beyond band +150% (tolerance)",
        band=1.5,
        source=BandSource.TOLERANCE,
    ),
]


@pytest.mark.parametrize("case", JUDGE_CASES, ids=[c.id for c in JUDGE_CASES])
def test_judge(case: JudgeCase) -> None:
    j = judge(case.ratios, case.band, case.source, scale_ns=100_000, faster=case.faster)
    assert j.verdict is case.verdict
    assert j.reason.startswith(case.reason), j.reason
    assert j.confirmed is case.confirmed
    assert j.band == case.band
    assert j.band_source is case.source
    assert j.ratio == pytest.approx(case.ratio if case.ratio is not None else conservative(case.ratios))


def test_judge_keeps_its_inputs_on_record() -> None:
    j = judge([1.5, 1.4], 0.25, BandSource.SPREAD, note=" (raw)", sigma=0.05, floor=0.1)
    assert j.ratios == (1.5, 1.4)
    assert (j.sigma, j.floor) == (0.05, 0.1)
    assert j.reason == "x1.40 beyond band +25% (spread) in every measurement (x1.50, x1.40) (raw)"
    # without scale_ns no time is claimed
    assert "us" not in j.reason


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
        ("clock", "thread-cpu"),
    ],
)
def test_environment_mismatch_claims_no_slowdown(field_name: str, value: object) -> None:
    # The current run is much slower too: still no slowdown may be claimed on another environment.
    changes: dict[str, Any] = {field_name: value}
    current = replace(current_entry(overall=3.0), environment=replace(ENV, **changes))
    c = compare(BASELINE_1, current, POLICY)
    assert_mismatch(c, f"{field_name}: baseline {getattr(ENV, field_name)!r}, this run {value!r}")
    assert len(c.mismatches) == 1
    assert c.baseline_processes == 1


@pytest.mark.parametrize(("field_name", "value"), [("python", "3.12.4"), ("platform", "Linux-6.9-x86_64")])
def test_fields_outside_match_fields_do_not_mismatch(field_name: str, value: str) -> None:
    changes: dict[str, Any] = {field_name: value}
    current = replace(current_entry(), environment=replace(ENV, **changes))
    c = compare(BASELINE_1, current, POLICY)
    assert c.status is Status.PASS
    assert c.mismatches == ()


def test_several_mismatches_are_all_listed() -> None:
    current = replace(current_entry(), environment=replace(ENV, torch="2.5.0", device="cuda:0"))
    c = compare(BASELINE_1, current, POLICY)
    assert_mismatch(c, "torch:", "device:")
    assert len(c.mismatches) == 2


def test_capture_method_mismatch() -> None:
    current = replace(current_entry(), capture=Capture(method="dynamo"))
    c = compare(BASELINE_1, current, POLICY)
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
    c = compare(BASELINE_1, current_entry(ref_factor=ref_factor), POLICY)
    assert_mismatch(c, "machine speed", shown, f"limit x{MACHINE_FACTOR_LIMIT:g}")


@pytest.mark.parametrize("ref_factor", [MACHINE_FACTOR_LIMIT, 1 / MACHINE_FACTOR_LIMIT, 1.5, 0.7])
def test_reference_workload_within_limit_is_compared(ref_factor: float) -> None:
    c = compare(BASELINE_1, current_entry(ref_factor=ref_factor), POLICY)
    assert c.status is not Status.MISMATCH
    assert c.mismatches == ()
    assert c.total is not None
    assert c.total.machine_factor == pytest.approx(ref_factor)


def test_reference_is_compared_with_the_median_of_baseline_processes() -> None:
    # Baseline references 500, 490, 510, 495, 505 us (median 500 us); this run's is 1.1 ms: x2.2.
    c = compare(BASELINE_5, current_entry(ref_factor=2.2), POLICY)
    assert_mismatch(c, "machine speed", "x2.20")
    assert c.baseline_processes == 5


# Rules 3-5: the verdict table ----------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    factors: dict[str, float] = field(default_factory=dict)
    overall: float = 1.0
    ref_factor: float = 1.0
    policy: Policy = POLICY
    status: Status = Status.PASS
    slower: tuple[str, ...] = ()
    slower_small: tuple[str, ...] = ()
    faster: tuple[str, ...] = ()
    aggregates: dict[str, Verdict] = field(default_factory=dict)
    total: Verdict = Verdict.OK
    speed: float = 1.0


# MODEL's aggregates are the module subtrees stem (conv1, relu1) and layer1 (conv2, add). Its nodes gate
# except add (2 %) and flatten (3 %); the 20 us floor sets the band of relu1, add, pool, flatten, softmax.
CASES = [
    Case("unchanged"),
    Case("within-band", factors={"conv2": 1.08}),
    Case("one-node-x2", factors={"pool": 2.0}, status=Status.REGRESSION, slower=("pool",)),
    # pool loses 160 us, relu1 150 us: worst first by time lost, not by ratio (relu1 x4, pool x3) nor graph order
    Case(
        "two-nodes-worst-first",
        factors={"pool": 3.0, "relu1": 4.0},
        status=Status.REGRESSION,
        slower=("pool", "relu1"),
        aggregates={"module stem": Verdict.SLOWER},
        total=Verdict.SLOWER,
    ),
    # add: 20 us -> 35 us is x1.75, within the band the 20 us floor gives a 20 us node (+100 %)
    Case("large-ratio-under-floor", factors={"add": 1.75}),
    # beyond it, but add is 2 % of the model: a warning, not a failure (and layer1 stays within its band)
    Case("small-node-beyond-its-floor", factors={"add": 2.5}, slower_small=("add",)),
    Case(
        "large-ratio-above-lowered-floor",
        factors={"add": 1.75},
        policy=replace(POLICY, floor_ns=10_000),
        slower_small=("add",),
    ),
    Case(
        "tighter-node-tolerance",
        factors={"conv2": 1.08},
        policy=replace(POLICY, node_tolerance=0.05),
        status=Status.REGRESSION,
        slower=("conv2",),
        aggregates={"module layer1": Verdict.SLOWER},
    ),
    Case(
        "looser-node-tolerance",
        factors={"conv2": 1.15},
        policy=replace(POLICY, node_tolerance=0.2),
    ),
    Case(
        "faster-node",
        factors={"conv2": 1 / 3},
        faster=("conv2",),
        aggregates={"module layer1": Verdict.FASTER},
        total=Verdict.FASTER,
    ),
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
        policy=replace(POLICY, total_tolerance=0.5),
        speed=1.3,
    ),
]


def assert_case(c: Comparison, case: Case) -> None:
    assert c.status is case.status
    assert c.mismatches == ()
    assert names(c.slower) == case.slower
    assert names(c.slower_small) == case.slower_small
    assert names(c.faster) == case.faster
    assert flagged_aggregates(c) == case.aggregates
    assert c.total is not None
    assert c.total.verdict is case.total
    assert c.noisy == ()
    assert c.unconfirmed == ()
    assert c.measurements == 1


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_verdicts(case: Case) -> None:
    c = compare(BASELINE_1, current_entry(case.factors, case.overall, case.ref_factor), case.policy)
    assert_case(c, case)
    assert c.speed_factor == pytest.approx(case.speed)
    assert not c.graph_changed
    assert names(c.nodes) == tuple(n.name for n in MODEL)
    assert labels(c.aggregates) == ("module layer1", "module stem")
    expected_ok = set(BASE_NS) - set(case.slower) - set(case.slower_small) - set(case.faster)
    assert {v.node.name for v in c.nodes if v.verdict is Verdict.OK} == expected_ok


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_verdicts_against_five_process_baseline(case: Case) -> None:
    """The same table against a jittery five-process baseline: +-2 % noise changes no verdict."""
    c = compare(BASELINE_5, current_entry(case.factors, case.overall, case.ref_factor), case.policy)
    assert_case(c, case)
    assert c.baseline_processes == 5


def test_unchanged_data_passes_with_ratio_one_everywhere() -> None:
    c = compare(BASELINE_1, current_entry(), POLICY)
    assert c.status is Status.PASS
    for v in c.nodes:
        assert v.ratio == pytest.approx(1.0)
        assert v.delta_ns == pytest.approx(0.0)
        assert v.baseline_ns == BASE_NS[v.node.name]
        assert v.current_ns == BASE_NS[v.node.name]
        assert v.reason == f"x1.00 within band +{v.band:.0%} ({v.band_source.value})"
        assert v.judgement.ratios == pytest.approx((1.0,))
        assert v.judgement.confirmed is None
    assert all(a.verdict is Verdict.OK and a.ratio == pytest.approx(1.0) for a in c.aggregates)
    assert c.total is not None
    assert c.total.ratio == pytest.approx(1.0)
    # the total is the plain call (make_run: the instrumented pass is 1.5 x it, the profiler's overhead)
    assert c.total.baseline_ns == 1_000_000
    assert c.total.current_ns == 1_000_000
    assert c.total.overhead[0] == pytest.approx(1.5)
    assert c.total.overhead[1] == pytest.approx(1.5)


def test_single_slow_node_is_named_with_its_reason() -> None:
    c = compare(BASELINE_1, current_entry({"pool": 2.0}), POLICY)
    (v,) = c.slower
    assert v.node == MODEL[4]
    assert v.verdict is Verdict.SLOWER
    assert v.ratio == pytest.approx(2.0)
    assert v.delta_ns == pytest.approx(80_000)
    assert v.baseline_ns == 80_000
    assert v.current_ns == 160_000
    # 20 us of an 80 us node: the floor is wider than the 10 % tolerance
    assert v.band == pytest.approx(0.25)
    assert v.band_source is BandSource.FLOOR
    assert v.floor_ns == 20_000
    assert v.gates
    assert v.reason == "x2.00 beyond band +25% (floor), +80.0 us"
    # one slow node of eight barely moves the speed factor, and the 8 % more total stays in its band
    assert c.speed_factor == pytest.approx(1.0)
    assert c.total is not None
    assert c.total.verdict is Verdict.OK
    assert c.total.ratio == pytest.approx(1.08)


def test_slower_ties_are_broken_by_key() -> None:
    # relu1 50 -> 130 us and pool 80 -> 160 us both lose 80 us.
    c = compare(BASELINE_1, current_entry({"relu1": 2.6, "pool": 2.0}), POLICY)
    assert [v.delta_ns for v in c.slower] == [pytest.approx(80_000)] * 2
    assert [v.node.key for v in c.slower] == sorted(v.node.key for v in c.slower)


def test_large_ratio_under_absolute_floor_stays_ok() -> None:
    c = compare(BASELINE_1, current_entry({"add": 1.75}), POLICY)
    v = verdict_of(c, "add")
    assert v.verdict is Verdict.OK
    assert v.ratio == pytest.approx(1.75)
    assert v.ratio > 1 + POLICY.node_tolerance  # beyond the tolerance ...
    assert v.floor_ns == 20_000
    assert v.band == pytest.approx(1.0)  # ... but the 20 us floor of a 20 us node allows +100 %
    assert v.band_source is BandSource.FLOOR
    assert v.reason == "x1.75 within band +100% (floor)"
    assert c.status is Status.PASS


def test_floor_grows_with_the_models_total_time() -> None:
    """On a 100 ms model the floor is the policy's floor share of it (200 us), above the 20 us default."""
    nodes = (
        node("matmul", "torch.matmul", "encoder"),
        node("relu", "torch.relu", "encoder"),
        node("norm", "norm", "encoder.norm", op="call_module"),
    )
    baseline = make_entry([make_run([98_700_000, 300_000, 1_000_000])], nodes)
    # relu x1.6 (+180 us): far beyond the 10 % tolerance and above 20 us, yet under 0.2 % of 100 ms.
    current = make_entry([make_run([98_700_000, 480_000, 1_000_000])], nodes)
    c = compare(baseline, current, POLICY)
    relu = verdict_of(c, "relu")
    assert relu.floor_ns == pytest.approx(POLICY.floor_share * 100_000_000)
    assert relu.ratio == pytest.approx(1.6)
    assert relu.band == pytest.approx(200_000 / 300_000)
    assert relu.band_source is BandSource.FLOOR
    assert relu.verdict is Verdict.OK
    assert c.status is Status.PASS
    # a policy floor below the share does not lower it: the floor is the larger of the two
    c = compare(baseline, current, replace(POLICY, floor_ns=50_000))
    assert c.status is Status.PASS
    assert verdict_of(c, "relu").floor_ns == pytest.approx(200_000)
    # and on a 1 ms model the same +180 us is beyond the band (the tolerance's: the floor is 7 % of relu)
    small = make_entry([make_run([650_000, 300_000, 50_000])], nodes)
    c = compare(small, make_entry([make_run([650_000, 480_000, 50_000])], nodes), POLICY)
    assert names(c.slower) == ("relu",)
    assert c.slower[0].band_source is BandSource.TOLERANCE


def test_faster_node_verdict_and_reason() -> None:
    c = compare(BASELINE_1, current_entry({"conv2": 1 / 3}), POLICY)
    v = verdict_of(c, "conv2")
    assert v.verdict is Verdict.FASTER
    assert v.ratio == pytest.approx(1 / 3)
    assert v.delta_ns == pytest.approx(-200_000)
    assert v.reason == "x0.33 below band +10% (tolerance), -200.0 us"
    assert c.faster == (v,)
    assert c.status is Status.PASS
    assert c.total is not None
    assert c.total.verdict is Verdict.FASTER
    assert c.total.reason == "x0.80 below band +15% (tolerance)"


def test_small_speedup_is_not_an_improvement() -> None:
    # relu1 50 -> 37.5 us: x0.75, within the +40 % band its 20 us floor gives it
    c = compare(BASELINE_1, current_entry({"relu1": 0.75}), POLICY)
    assert verdict_of(c, "relu1").verdict is Verdict.OK
    assert verdict_of(c, "relu1").reason == "x0.75 within band +40% (floor)"
    assert c.faster == ()
    # add 20 -> 5 us is 2 % of the model: whatever its verdict, it is not reported as an improvement
    c = compare(BASELINE_1, current_entry({"add": 0.25}), POLICY)
    assert not verdict_of(c, "add").gates
    assert c.faster == ()


def test_node_that_took_no_time_in_the_baseline_is_still_judged() -> None:
    times = model_times()
    times[0] = 0
    baseline = make_entry([make_run(times)])
    times[0] = 5_000_000
    c = compare(baseline, make_entry([make_run(times)]), POLICY)
    v = c.nodes[0]
    assert v.baseline_ns == 1.0  # judged against 1 ns, not divided by zero
    assert v.ratio == pytest.approx(5_000_000)
    assert v.band_source is BandSource.FLOOR
    assert not v.gates
    # its 5 ms show in the total
    assert c.total is not None
    assert c.total.verdict is Verdict.SLOWER
    assert c.status is Status.REGRESSION


@pytest.mark.parametrize(("base_ref", "current_ref"), [(REF_NS, 0), (0, REF_NS), (0, 0)])
def test_missing_reference_workload_compares_raw_totals(base_ref: int, current_ref: int) -> None:
    baseline = make_entry([make_run(model_times(), reference_ns=base_ref)])
    unchanged = compare(baseline, make_entry([make_run(model_times(), reference_ns=current_ref)]), POLICY)
    assert unchanged.status is Status.PASS
    assert unchanged.total is not None
    assert unchanged.total.ratio == pytest.approx(1.0)
    assert "no reference workload" in unchanged.total.reason
    slower = make_entry([make_run(model_times(overall=1.5), reference_ns=current_ref)])
    total = compare(baseline, slower, POLICY).total
    assert total is not None
    assert total.verdict is Verdict.SLOWER


def test_uniform_drift_cancels_in_nodes_and_total() -> None:
    trusting = compare(BASELINE_1, current_entry(overall=1.3, ref_factor=1.3), replace(POLICY, drift_doubt=0.0))
    assert all(v.verdict is Verdict.OK and v.ratio == pytest.approx(1.0) for v in trusting.nodes)
    # with the drift in doubt, more than the drift is divided out: the nodes look no slower, and pass
    c = compare(BASELINE_1, current_entry(overall=1.3, ref_factor=1.3), POLICY)
    assert c.status is Status.PASS
    assert c.speed_factor == pytest.approx(1.3)
    assert all(v.verdict is Verdict.OK and v.ratio == pytest.approx(1.3 / 1.3**1.5) for v in c.nodes)
    assert c.total is not None
    assert c.total.ratio == pytest.approx(1.0)
    assert c.total.machine_factor == pytest.approx(1.3)
    # the raw times are kept in the verdicts, the ratio is after the speed factor
    assert verdict_of(c, "conv2").current_ns == 390_000


def test_slowdown_spread_over_all_nodes_is_caught_by_the_total_only() -> None:
    c = compare(BASELINE_1, current_entry(overall=1.3), POLICY)
    assert c.status is Status.REGRESSION
    assert all(v.verdict is Verdict.OK for v in c.nodes)
    assert c.slower == ()
    assert c.total is not None
    assert c.total.verdict is Verdict.SLOWER
    assert c.slower_small == ()
    assert all(a.verdict is Verdict.OK for a in c.aggregates)  # every subtree slowed as much as its peers
    assert c.total.ratio == pytest.approx(1.3)
    assert c.total.band == pytest.approx(0.15)
    assert c.total.band_source is BandSource.TOLERANCE
    assert c.total.machine_factor == pytest.approx(1.0)
    assert c.total.reason == "x1.30 beyond band +15% (tolerance)"


def test_total_is_judged_per_reference_workload() -> None:
    # The model is 30 % slower but so is the reference: the same per-reference time, within band.
    c = compare(BASELINE_1, current_entry(overall=1.3, ref_factor=1.3), POLICY)
    assert c.total is not None
    assert c.total.verdict is Verdict.OK
    # The model is unchanged but the reference 30 % slower: the model looks faster per reference.
    c = compare(BASELINE_1, current_entry(ref_factor=1.3), POLICY)
    assert c.total is not None
    assert c.total.ratio == pytest.approx(1 / 1.3)
    assert c.total.verdict is Verdict.FASTER
    assert c.status is Status.PASS


def test_total_baseline_is_the_median_of_processes() -> None:
    c = compare(BASELINE_5, current_entry(), POLICY)
    assert c.total is not None
    assert c.total.baseline_ns == 1_000_000  # the plain calls: 1 ms x (1.0, 1.02, 0.98, 1.01, 0.99)
    assert c.baseline_processes == 5


# Rule 4: bands from tolerance, measured spread or floor -------------------------------------------

NO_FLOOR = replace(POLICY, floor_ns=0)
"""Only FLOOR_SHARE of the model (2 us of MODEL) remains: no node's band comes from the floor."""


def test_single_run_baseline_bands_come_from_tolerances() -> None:
    noise = node_noise(BASELINE_1.runs)
    assert [n.sigma for n in noise] == [None] * len(MODEL)
    assert [n.centre_ns for n in noise] == [BASE_NS[n.name] for n in MODEL]
    c = compare(BASELINE_1, current_entry(), replace(NO_FLOOR, node_tolerance=0.25, total_tolerance=0.2))
    for v in c.nodes:
        assert v.band == 0.25
        assert v.band_source is BandSource.TOLERANCE
        assert v.judgement.sigma is None
        assert "(tolerance)" in v.reason
    for a in c.aggregates:
        assert (a.judgement.band, a.judgement.band_source) == (0.25, BandSource.TOLERANCE)
    assert c.total is not None
    assert c.total.band == 0.2
    assert c.total.band_source is BandSource.TOLERANCE


# The band of each MODEL node from a single process: the tolerance, or the 20 us floor where it is wider.
FLOOR_BANDS = {
    "conv1": (0.1, BandSource.TOLERANCE),  # the floor is 10 % of 200 us: a tie goes to the tolerance
    "relu1": (0.4, BandSource.FLOOR),
    "conv2": (0.1, BandSource.TOLERANCE),
    "add": (1.0, BandSource.FLOOR),
    "pool": (0.25, BandSource.FLOOR),
    "flatten": (2 / 3, BandSource.FLOOR),
    "fc": (0.1, BandSource.TOLERANCE),
    "softmax": (2 / 7, BandSource.FLOOR),
}


@pytest.mark.parametrize("name", list(FLOOR_BANDS))
def test_floor_is_a_band_source(name: str) -> None:
    v = verdict_of(compare(BASELINE_1, current_entry(), POLICY), name)
    band, source = FLOOR_BANDS[name]
    assert v.band == pytest.approx(band)
    assert v.band_source is source
    assert v.judgement.floor == pytest.approx(20_000 / BASE_NS[name])
    assert f"({source.value})" in v.reason
    # without the floor every band is the tolerance
    v = verdict_of(compare(BASELINE_1, current_entry(), NO_FLOOR), name)
    assert (v.band, v.band_source) == (POLICY.node_tolerance, BandSource.TOLERANCE)


@pytest.mark.parametrize(
    ("factor", "verdict"),
    [(1.35, Verdict.OK), (1.45, Verdict.SLOWER), (0.75, Verdict.OK), (0.7, Verdict.OK), (0.55, Verdict.FASTER)],
)
def test_floor_band_decides_both_ways(factor: float, verdict: Verdict) -> None:
    """relu1 (50 us) has a +40 % band from the 20 us floor: slower beyond x1.4 (+20 us); faster only when it
    gains more than the floor too (x0.7 is below 1/1.4 but gains 15 us; x0.55 gains 22.5 us)."""
    v = verdict_of(compare(BASELINE_1, current_entry({"relu1": factor}), POLICY), "relu1")
    assert v.verdict is verdict
    assert v.band_source is BandSource.FLOOR


def test_identical_processes_have_zero_spread_and_tolerance_bands() -> None:
    baseline = make_entry([make_run(model_times())] * 3)
    assert all(n.sigma == 0.0 for n in node_noise(baseline.runs))
    c = compare(baseline, current_entry(), NO_FLOOR)
    assert {v.band_source for v in c.nodes} == {BandSource.TOLERANCE}
    assert {a.judgement.band_source for a in c.aggregates} == {BandSource.TOLERANCE}
    assert c.total is not None
    assert c.total.band_source is BandSource.TOLERANCE


def test_a_uniformly_slow_baseline_process_adds_no_spread() -> None:
    """Each baseline process's own speed factor is divided out before the spread is measured."""
    baseline = make_entry([make_run(model_times(overall=f)) for f in (1.0, 1.1, 0.95, 1.2, 1.0)])
    for n in node_noise(baseline.runs):
        assert n.sigma is not None
        assert n.sigma < 1e-6
    c = compare(baseline, current_entry(), NO_FLOOR)
    assert {v.band_source for v in c.nodes} == {BandSource.TOLERANCE}


# Per-run, per-node multipliers: every node's median is 1.0, every process is high or low on some nodes.
NOISY_ROWS = (
    ("1", "H", "L", "1", "H", "L", "1", "H"),
    ("H", "L", "1", "H", "L", "1", "H", "L"),
    ("L", "1", "H", "L", "1", "H", "L", "1"),
    ("1",) * 8,
    ("1",) * 8,
)


def noisy_baseline(high: float = 1.15, low: float = 0.87) -> BaselineEntry:
    """Five processes that scatter each node by ``high`` and ``low`` (+-15 % by default, +-30 % at most)."""
    multiplier = {"1": 1.0, "H": high, "L": low}
    runs = [
        make_run([round(BASE_NS[n.name] * multiplier[m]) for n, m in zip(MODEL, row, strict=True)], total_ns=total)
        for row, total in zip(NOISY_ROWS, (1_000_000, 1_250_000, 800_000, 1_000_000, 1_100_000), strict=True)
    ]
    return make_entry(runs)


def test_noisy_multi_run_baseline_bands_come_from_spread() -> None:
    baseline = noisy_baseline()
    noise = node_noise(baseline.runs)
    assert [n.centre_ns for n in noise] == [BASE_NS[n.name] for n in MODEL]
    c = compare(baseline, current_entry(), NO_FLOOR)
    assert c.status is Status.PASS
    for v, n in zip(c.nodes, noise, strict=True):
        assert n.sigma is not None
        assert v.judgement.sigma == n.sigma
        assert v.band_source is BandSource.SPREAD
        assert v.band == pytest.approx(math.exp(SPREAD_K * n.sigma) - 1)
        assert 0.3 < v.band <= NOISY_BAND
        assert "(spread)" in v.reason
    for a in c.aggregates:
        assert a.judgement.band_source is BandSource.SPREAD
    assert c.total is not None
    assert c.total.band_source is BandSource.SPREAD
    assert c.total.band > 0.15


def test_spread_k_scales_the_spread_band() -> None:
    baseline = noisy_baseline()
    wide = verdict_of(compare(baseline, current_entry(), NO_FLOOR), "conv2")
    narrow = verdict_of(compare(baseline, current_entry(), replace(NO_FLOOR, spread_k=1.5)), "conv2")
    assert wide.judgement.sigma == narrow.judgement.sigma
    assert wide.judgement.sigma is not None
    assert narrow.band == pytest.approx(math.exp(1.5 * wide.judgement.sigma) - 1)
    assert narrow.band < wide.band


def test_wide_spread_band_absorbs_a_slowdown_the_tolerance_would_flag() -> None:
    current = current_entry({"conv2": 1.4})
    # against a single quiet process: x1.4 on a 300 us node fails
    c = compare(BASELINE_1, current, POLICY)
    assert names(c.slower) == ("conv2",)
    # against processes that scatter +-15 %: within the measured spread
    c = compare(noisy_baseline(), current, POLICY)
    v = verdict_of(c, "conv2")
    assert v.verdict is Verdict.OK
    assert v.ratio == pytest.approx(1.4)
    assert v.band_source is BandSource.SPREAD
    assert "within band" in v.reason
    assert "(spread)" in v.reason
    # but not beyond it
    c = compare(noisy_baseline(), current_entry({"conv2": 4.0}), POLICY)
    v = verdict_of(c, "conv2")
    assert v.verdict is Verdict.SLOWER
    assert v.band_source is BandSource.SPREAD
    assert "(spread)" in v.reason


def test_quiet_node_among_noisy_peers_is_shrunk_toward_them() -> None:
    """A node with zero spread of its own, among same-size nodes that scatter, gets a band above tolerance."""
    nodes = tuple(node(f"lin{i}", "lin", f"blocks.{i}.lin", op="call_module") for i in range(5))
    # node 0 never moves; the others scatter +-15 % around 100 us, balanced so every process's factor is 1
    rows = (
        (100_000, 115_000, 85_000, 115_000, 85_000),
        (100_000, 100_000, 100_000, 100_000, 100_000),
        (100_000, 85_000, 115_000, 85_000, 115_000),
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
    band, source = band_for(POLICY.node_tolerance, quiet, floor=0.2)  # the floor: 20 us of 100 us
    assert source is BandSource.SPREAD
    assert band > 0.2
    c = compare(baseline, make_entry([make_run([100_000] * 5)], nodes), POLICY)
    v = c.nodes[0]
    assert v.band_source is BandSource.SPREAD
    assert v.band == pytest.approx(band)
    # x1.4 on the quiet node is within the shrunk band; a single-process baseline would have flagged it
    slow = make_entry([make_run([140_000, 100_000, 100_000, 100_000, 100_000])], nodes)
    assert compare(baseline, slow, POLICY).nodes[0].verdict is Verdict.OK
    assert compare(make_entry([make_run(rows[1])], nodes), slow, POLICY).nodes[0].verdict is Verdict.SLOWER


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
    c = compare(baseline, make_entry([make_run(times, total_ns=sum(BLOCK_NS))], current_nodes), POLICY)
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
    c = compare(baseline, make_entry([make_run(times, total_ns=sum(BLOCK_NS))], current_nodes), POLICY)
    assert c.status is Status.PASS
    assert c.graph_changed
    assert c.added == ()
    assert c.removed == (BLOCKS[3],)
    assert names(c.nodes) == tuple(n.name for n in current_nodes)
    assert all(v.verdict is Verdict.OK and v.ratio == pytest.approx(1.0) for v in c.nodes)


def test_a_modules_new_nodes_count_in_its_aggregate() -> None:
    """Work a changed graph adds inside a module (activation checkpointing's recomputed forward, an op swapped for
    a slower one) is the module's time: its aggregate compares everything it holds on each side."""
    baseline = make_entry([make_run(BLOCK_NS)], BLOCKS)
    recompute = (node("linear_r", "linear", "blocks.1.linear", op="call_module", occurrence=1),)
    current_nodes = (*BLOCKS[:4], *recompute, *BLOCKS[4:])
    times = [*BLOCK_NS[:4], 210_000, *BLOCK_NS[4:]]  # blocks.1's linear runs twice now
    c = compare(baseline, make_entry([make_run(times, total_ns=sum(BLOCK_NS))], current_nodes), POLICY)
    assert c.added == recompute
    assert all(v.verdict is Verdict.OK for v in c.nodes)  # every matched node kept its time
    block = aggregate_of(c, "module blocks.1")
    assert block.baseline_ns == pytest.approx(210_000 + 42_000)
    assert block.current_ns == pytest.approx(2 * 210_000 + 42_000)
    assert block.verdict is Verdict.SLOWER
    assert c.status is Status.REGRESSION
    assert aggregate_of(c, "module blocks.0").verdict is Verdict.OK


def test_graph_change_alone_is_not_a_regression() -> None:
    baseline = make_entry([make_run(BLOCK_NS)], BLOCKS)
    other = (node("a", "torch.sin"), node("b", "torch.cos"))
    c = compare(baseline, make_entry([make_run([500_000, 500_000])], other), POLICY)
    assert c.status is Status.PASS
    assert c.nodes == ()
    assert c.graph_changed
    assert c.speed_factor == 1.0
    assert c.total is not None
    assert c.total.verdict is Verdict.OK


def test_a_faster_run_is_not_divided_out() -> None:
    """Only a slower run's speed factor is divided out: a node that kept its time while the rest of the
    model (and the machine) got twice as fast is not called slower."""
    c = compare(BASELINE_1, current_entry({"pool": 2.0}, overall=0.5, ref_factor=0.5), POLICY)
    assert c.speed_factor == pytest.approx(0.5)
    pool = verdict_of(c, "pool")
    assert pool.verdict is Verdict.OK
    assert pool.ratio == pytest.approx(1.0)
    assert c.slower == ()
    assert c.status is Status.PASS


# Rule 4: which nodes gate ------------------------------------------------------------------------------


def sized(sizes: Sequence[int]) -> tuple[NodeInfo, ...]:
    """A graph of top-level nodes of distinct types (so no aggregates), one per size."""
    return tuple(node(f"n{i}", f"op{i}") for i in range(len(sizes)))


@pytest.mark.parametrize(
    ("sizes", "total_ns", "gates"),
    [
        pytest.param([GATING_NS, 30_000_000], None, [True, True], id="1ms-gates-whatever-its-share"),
        pytest.param([GATING_NS - 1, 30_000_000], None, [False, True], id="just-under-1ms-and-3pc"),
        pytest.param([50_000, 950_000], None, [True, True], id="5pc-share-gates"),
        pytest.param([49_999, 950_001], None, [False, True], id="just-under-5pc"),
        # the share is of the summed node times, not of the plain forward
        pytest.param([50_000, 950_000], 10_000_000, [True, True], id="share-of-the-nodes-not-the-forward"),
    ],
)
def test_gating_threshold(sizes: list[int], total_ns: int | None, gates: list[bool]) -> None:
    assert GATING_SHARE == 0.05
    nodes = sized(sizes)
    baseline = make_entry([make_run(sizes, total_ns=total_ns)], nodes)
    unchanged = compare(baseline, baseline, POLICY)
    assert [v.gates for v in unchanged.nodes] == gates
    assert unchanged.aggregates == ()
    # node 0 three times slower: beyond any band; it fails the test only if it gates, else it warns
    slowed = [sizes[0] * 3, *sizes[1:]]
    c = compare(baseline, make_entry([make_run(slowed, total_ns=total_ns)], nodes), POLICY)
    assert c.total is not None
    assert c.total.verdict is Verdict.OK  # +2 ms of 31 ms, +100 us of 1 ms: within the total's band
    assert c.nodes[0].verdict is Verdict.SLOWER
    if gates[0]:
        assert (c.status, names(c.slower), names(c.slower_small)) == (Status.REGRESSION, ("n0",), ())
    else:
        assert (c.status, names(c.slower), names(c.slower_small)) == (Status.PASS, (), ("n0",))


def test_small_slowed_nodes_are_listed_worst_first() -> None:
    # flatten 30 -> 90 us (+60 us) and add 20 -> 52 us (+32 us): each beyond its floor band, neither gates
    c = compare(BASELINE_1, current_entry({"add": 2.6, "flatten": 3.0}), POLICY)
    assert names(c.slower_small) == ("flatten", "add")
    assert c.slower == ()
    assert all(not v.gates for v in c.slower_small)
    assert c.status is Status.PASS


# Rule 4: bands too wide to decide ---------------------------------------------------------------------


@dataclass(frozen=True)
class NoisyCase:
    id: str
    baseline: BaselineEntry
    policy: Policy
    status: Status
    noisy: tuple[str, ...]  # the item each warning is about, before its colon
    pool: Verdict  # pool slowed x10: decided, or not
    total: Verdict


NOISY_CASES = [
    # a tolerance is the user's choice, however wide: it decides (only a measured spread can be too noisy)
    NoisyCase(
        "tolerances-beyond-the-noisy-band-decide",
        BASELINE_1,
        replace(POLICY, node_tolerance=1.5, total_tolerance=1.5),
        Status.REGRESSION,
        (),
        Verdict.SLOWER,
        Verdict.OK,
    ),
    NoisyCase(
        "tolerances-at-the-noisy-band-decide",
        BASELINE_1,
        replace(POLICY, node_tolerance=NOISY_BAND, total_tolerance=NOISY_BAND),
        Status.REGRESSION,
        (),
        Verdict.SLOWER,
        Verdict.OK,  # pool's +720 us is x1.72 of the total
    ),
    # the nodes' bands are too wide, the total's (+62 %) is not: the test still fails, on the total
    NoisyCase(
        "spread-of-processes-scattering-30pc",
        noisy_baseline(1.3, 0.75),
        NO_FLOOR,
        Status.REGRESSION,
        # relu1 (with add and flatten, the rows' 1.0 columns) scatters less: its band stays under +100 %
        ("node conv1", "node conv2", "node pool", "node fc", "node softmax", "module layer1"),
        Verdict.NOISY,
        Verdict.SLOWER,
    ),
    NoisyCase(
        "spread-of-processes-scattering-15pc",
        noisy_baseline(),
        NO_FLOOR,
        Status.REGRESSION,
        (),
        Verdict.SLOWER,
        Verdict.SLOWER,
    ),
]


@pytest.mark.parametrize("case", NOISY_CASES, ids=[c.id for c in NOISY_CASES])
def test_too_noisy_bands_decide_nothing(case: NoisyCase) -> None:
    c = compare(case.baseline, current_entry({"pool": 10.0}), case.policy)
    assert c.status is case.status
    assert tuple(t.split(":")[0] for t in c.noisy) == case.noisy
    assert all("too noisy to decide" in t for t in c.noisy)
    pool = verdict_of(c, "pool")
    assert pool.verdict is case.pool
    if case.pool is Verdict.NOISY:
        assert pool.band > NOISY_BAND
        assert pool.band_source is BandSource.SPREAD
    assert c.total is not None
    assert c.total.verdict is case.total
    if case.pool is Verdict.NOISY:  # however slow: neither a failure nor a small-node warning
        assert c.slower == ()
        assert c.slower_small == ()
        assert pool.reason.startswith("x10.00, but band +")


def test_a_check_that_fails_nothing_but_could_not_decide_what_gates_is_undecided_never_passed() -> None:
    c = compare(noisy_baseline(1.3, 0.75), current_entry(), NO_FLOOR)
    assert c.noisy  # items that gate, too noisy to decide
    assert not c.slower
    assert not c.slower_aggregates
    assert c.total is not None
    assert c.total.verdict is Verdict.OK
    assert c.status is Status.UNDECIDED
    assert compare(BASELINE_1, current_entry(), POLICY).status is Status.PASS  # decided throughout: a pass


def test_noisy_small_nodes_are_not_warned_about() -> None:
    # processes scattering +-30 %: add and flatten (which do not gate) scatter too, yet neither is listed
    c = compare(noisy_baseline(1.3, 0.75), current_entry(), NO_FLOOR)
    noisy = {v.node.name for v in c.nodes if v.verdict is Verdict.NOISY}
    assert noisy
    assert all(not v.gates for v in c.nodes if v.node.name in noisy and f"node {v.node.name}" not in str(c.noisy))
    assert not any(line.startswith(("node add:", "node flatten:")) for line in c.noisy)


# A quiet encoder (two blocks and a head projection) and a 20 us gate in the head whose time scatters x0.4..x3
# between the baseline's processes: its module's band is far too wide to decide anything.
GATED: tuple[NodeInfo, ...] = (
    node("fc1", "Linear", "enc.0.fc", op="call_module"),
    node("act1", "torch.relu", "enc.0.act"),
    node("fc2", "Linear", "enc.1.fc", op="call_module", occurrence=1),
    node("act2", "torch.relu", "enc.1.act", occurrence=1),
    node("proj", "Linear", "head.proj", op="call_module", occurrence=2),
    node("gate", "torch.sigmoid", "head.gate"),
    node("gate_add", "operator.add", "head.gate"),
)
GATED_SCATTER = (1.0, 3.0, 0.4, 2.5, 0.5)


def gated_baseline(gate_ns: int) -> BaselineEntry:
    times = [450_000, 30_000, 450_000, 30_000, 400_000, gate_ns, gate_ns]
    return make_entry(
        [
            make_run([t if n.module != "head.gate" else round(t * s) for n, t in zip(GATED, times, strict=True)])
            for s in GATED_SCATTER
        ],
        GATED,
    )


def test_an_aggregate_too_small_to_fail_a_test_alone_leaves_no_check_undecided() -> None:
    baseline = gated_baseline(10_000)
    c = compare(
        baseline, make_entry([make_run([450_000, 30_000, 450_000, 30_000, 400_000, 10_000, 10_000])], GATED), NO_FLOOR
    )
    (gate,) = [a for a in c.aggregates if a.name == "head.gate"]
    assert gate.verdict is Verdict.NOISY  # its band: far beyond NOISY_BAND
    assert not gate.gates  # 20 us of 1.38 ms: the head (with its projection) decides for it
    (head,) = [a for a in c.aggregates if a.name == "head"]
    assert head.gates
    assert head.verdict is Verdict.OK
    assert c.noisy == ()
    assert c.status is Status.PASS
    # the same scatter on a gate large enough to fail a test alone leaves the check undecided
    big = compare(
        gated_baseline(200_000),
        make_entry([make_run([450_000, 30_000, 450_000, 30_000, 400_000, 200_000, 200_000])], GATED),
        NO_FLOOR,
    )
    (gate,) = [a for a in big.aggregates if a.name == "head.gate"]
    assert gate.gates
    assert gate.verdict is Verdict.NOISY
    assert "module head.gate" in [t.split(":")[0] for t in big.noisy]
    assert big.status is Status.UNDECIDED


def test_wide_floor_bands_still_decide() -> None:
    # a 40 us floor: flatten's band is +133 %, and x3 loses 60 us, beyond it: slower, a small-node warning
    c = compare(BASELINE_1, current_entry({"flatten": 3.0}), replace(POLICY, floor_ns=40_000))
    flatten = verdict_of(c, "flatten")
    assert flatten.band_source is BandSource.FLOOR
    assert flatten.band > NOISY_BAND
    assert flatten.verdict is Verdict.SLOWER
    assert c.slower_small == (flatten,)
    assert c.noisy == ()


# Rule 5: aggregates -----------------------------------------------------------------------------------


CNN_BASELINE = make_entry([make_run(scaled(CNN, CNN_NS))], CNN)
ENCODER_BASELINE = make_entry([make_run(scaled(ENCODER, ENCODER_NS))], ENCODER)


@dataclass(frozen=True)
class AggregateCase:
    id: str
    factors: dict[str, float] = field(default_factory=dict)
    overall: float = 1.0
    status: Status = Status.PASS
    aggregates: dict[str, Verdict] = field(default_factory=dict)
    slower_small: tuple[str, ...] = ()


CNN_CASES = [
    AggregateCase("unchanged"),
    # every BatchNorm +30 %: each within its +50 % floor band and too small to gate; their sum is not
    AggregateCase(
        "every-batchnorm", {"bn": 1.3}, status=Status.REGRESSION, aggregates={"op BatchNorm2d": Verdict.SLOWER}
    ),
    # contention that slows every small op alike: the BatchNorms' peers outside them slowed as much
    AggregateCase("every-small-op", {"bn": 1.3, "relu": 1.3, "add": 1.3, "mul": 1.3}),
    AggregateCase("slower-machine", overall=1.3),
    AggregateCase(
        "every-batchnorm-on-a-slower-machine",
        {"bn": 1.3},
        overall=1.3,
        status=Status.REGRESSION,
        aggregates={"op BatchNorm2d": Verdict.SLOWER},
    ),
    AggregateCase("every-batchnorm-within-band", {"bn": 1.08}),
]

ENCODER_CASES = [
    AggregateCase("unchanged"),
    # six ops of six types, each +50 % (within its +67 % floor band, too small to gate): the head is slower
    AggregateCase(
        "whole-head", dict.fromkeys(HEAD, 1.5), status=Status.REGRESSION, aggregates={"module head": Verdict.SLOWER}
    ),
    AggregateCase(
        "whole-head-on-a-slower-machine",
        dict.fromkeys(HEAD, 1.5),
        overall=1.3,
        status=Status.REGRESSION,
        aggregates={"module head": Verdict.SLOWER},
    ),
    # one head op x3 is beyond its own band, but only its subtree can fail the test
    AggregateCase(
        "one-head-op",
        {"tanh": 3.0},
        status=Status.REGRESSION,
        aggregates={"module head": Verdict.SLOWER},
        slower_small=("tanh",),
    ),
    AggregateCase("slower-machine", overall=1.3),
]


def aggregate_comparison(
    baseline: BaselineEntry, base_ns: Mapping[str, int], case: AggregateCase, *, policy: Policy = POLICY
) -> Comparison:
    current = make_run(
        scaled(baseline.nodes, base_ns, case.factors, case.overall), reference_ns=round(REF_NS * case.overall)
    )
    return compare(baseline, make_entry([current], baseline.nodes), policy)


@pytest.mark.parametrize(
    ("baseline", "base_ns", "case"),
    [
        *(pytest.param(CNN_BASELINE, CNN_NS, c, id=f"cnn-{c.id}") for c in CNN_CASES),
        *(pytest.param(ENCODER_BASELINE, ENCODER_NS, c, id=f"encoder-{c.id}") for c in ENCODER_CASES),
    ],
)
def test_aggregate_verdicts(baseline: BaselineEntry, base_ns: Mapping[str, int], case: AggregateCase) -> None:
    c = aggregate_comparison(baseline, base_ns, case)
    assert c.status is case.status
    assert flagged_aggregates(c) == case.aggregates
    assert names(c.slower) == ()  # no node fails the test alone
    assert names(c.slower_small) == case.slower_small
    assert c.faster == ()
    assert c.total is not None
    assert c.total.verdict is Verdict.OK
    assert c.noisy == ()
    assert labels(c.slower_aggregates) == tuple(case.aggregates)


def test_op_aggregate_divides_by_peers_outside_its_type() -> None:
    """Each BatchNorm's nearest peers are the other BatchNorms: alone, each is divided by their slowdown."""
    c = aggregate_comparison(CNN_BASELINE, CNN_NS, CNN_CASES[1])
    for i in range(8):
        bn = verdict_of(c, f"bn{i}")
        assert bn.speed_factor == pytest.approx(1.3)  # its own peers: mostly BatchNorms, all +30 %
        assert bn.ratio == pytest.approx(1.3 / POLICY.divisor(1.3))
        assert bn.divisor == pytest.approx(POLICY.divisor(1.3))
        assert bn.verdict is Verdict.OK
        assert not bn.gates
        assert bn.band == pytest.approx(0.5)
        assert bn.band_source is BandSource.FLOOR
    a = aggregate_of(c, "op BatchNorm2d")
    assert [m.name for m in a.members] == [f"bn{i}" for i in range(8)]
    assert a.speed_factor == pytest.approx(1.0)  # its peers exclude every BatchNorm
    assert (a.baseline_ns, a.current_ns) == (320_000, 416_000)
    assert a.ratio == pytest.approx(1.3)
    assert a.delta_ns == pytest.approx(96_000)
    assert a.judgement.band == pytest.approx(0.1)
    assert a.judgement.band_source is BandSource.TOLERANCE
    assert a.judgement.reason == "x1.30 beyond band +10% (tolerance), +96.0 us"
    # the same with Peers directly: excluding the node alone or its whole type
    centres = [float(t) for t in scaled(CNN, CNN_NS)]
    current = scaled(CNN, CNN_NS, {"bn": 1.3})
    ratios = [t / c for t, c in zip(current, centres, strict=True)]
    peers = Peers(centres)
    bn3 = [n.name for n in CNN].index("bn3")
    batchnorms = frozenset(i for i, n in enumerate(CNN) if n.target == "BatchNorm2d")
    assert peers.factor(bn3, ratios, frozenset({bn3})) == pytest.approx(1.3)
    assert peers.factor(bn3, ratios, batchnorms) == pytest.approx(1.0)
    assert peers.factors(current)[bn3] == pytest.approx(1.3)


def test_module_aggregate_of_small_ops_of_many_types() -> None:
    c = aggregate_comparison(ENCODER_BASELINE, ENCODER_NS, ENCODER_CASES[1])
    for name in HEAD:
        v = verdict_of(c, name)
        assert v.ratio == pytest.approx(1.5)
        assert v.verdict is Verdict.OK  # within +67 %: 20 us of 30 us
        assert v.band_source is BandSource.FLOOR
        assert not v.gates
    head = aggregate_of(c, "module head")
    assert head.kind is Kind.MODULE
    assert tuple(m.name for m in head.members) == HEAD
    assert head.ratio == pytest.approx(1.5)
    assert head.speed_factor == pytest.approx(1.0)
    assert head.judgement.band == pytest.approx(20 / 180)  # the 20 us floor of a 180 us subtree
    assert head.judgement.band_source is BandSource.FLOOR
    assert labels(c.aggregates) == (
        "op Linear",
        "op MultiheadAttention",
        "module encoder",  # and the pattern encoder.*: the same nodes
        "module encoder.0",
        "module encoder.1",
        "module encoder.2",
        "module head",
    )


def test_slower_aggregates_worst_first() -> None:
    c = aggregate_comparison(CNN_BASELINE, CNN_NS, AggregateCase("two", {"bn": 1.3, "relu": 3.0}))
    # BatchNorms lose 96 us, the relus 144 us; each block loses 30 us (and stays within its band)
    assert labels(c.slower_aggregates) == ("op torch.relu", "op BatchNorm2d")
    assert [round(a.delta_ns) for a in c.slower_aggregates] == [144_000, 96_000]


# Rule 6: the total ---------------------------------------------------------------------------------------


def totals_run(total_ns: int, instrumented_ns: int, reference_ns: int = REF_NS) -> Run:
    times = tuple(model_times())
    return Run(total_ns, instrumented_ns, reference_ns, times, (0,) * len(times))


@dataclass(frozen=True)
class TotalCase:
    id: str
    baseline: Run
    current: Run
    ratio: float
    verdict: Verdict
    baseline_ns: int = 1_500_000
    machine: float = 1.0


TOTAL_CASES = [
    TotalCase(
        "instrumented-pass-slower-is-not-judged",
        totals_run(1_500_000, 1_000_000),
        totals_run(1_500_000, 2_000_000),
        1.0,
        Verdict.OK,
    ),
    TotalCase(
        "plain-call-slower",
        totals_run(1_500_000, 1_000_000),
        totals_run(1_950_000, 1_000_000),
        1.3,
        Verdict.SLOWER,
    ),
    TotalCase(
        "plain-call-and-reference-slower",
        totals_run(1_500_000, 1_000_000),
        totals_run(1_950_000, 1_000_000, 650_000),
        1.0,
        Verdict.OK,
        machine=1.3,
    ),
    TotalCase(
        "reference-slower",
        totals_run(1_500_000, 1_000_000),
        totals_run(1_500_000, 1_000_000, 650_000),
        1 / 1.3,
        Verdict.FASTER,
        machine=1.3,
    ),
    TotalCase(
        # a reference workload that sped up more than the model is not credited: the unchanged model would read
        # x1.22 per reference (make demo's ViT, a passing check that failed); the faster test still credits it
        "reference-faster-is-not-credited",
        totals_run(1_500_000, 1_000_000),
        totals_run(1_450_000, 1_000_000, 395_000),
        1.45 / 1.5,
        Verdict.OK,
        machine=0.79,
    ),
    TotalCase(
        "slower-on-a-faster-machine-is-judged-raw",
        totals_run(1_500_000, 1_000_000),
        totals_run(1_800_000, 1_000_000, 395_000),
        1.2,
        Verdict.SLOWER,
        machine=0.79,
    ),
    TotalCase(
        "faster-per-reference-on-a-faster-machine",
        totals_run(1_500_000, 1_000_000),
        totals_run(750_000, 1_000_000, 400_000),
        (0.75 / 0.4) / (1.5 / 0.5),
        Verdict.FASTER,
        machine=0.8,
    ),
    TotalCase(
        "no-plain-call-falls-back-to-the-instrumented-pass",
        totals_run(0, 1_000_000),
        totals_run(0, 1_300_000),
        1.3,
        Verdict.SLOWER,
        baseline_ns=1_000_000,
    ),
]


@pytest.mark.parametrize("case", TOTAL_CASES, ids=[c.id for c in TOTAL_CASES])
def test_total_is_the_plain_call_per_reference(case: TotalCase) -> None:
    c = compare(make_entry([case.baseline]), make_entry([case.current]), POLICY)
    assert c.total is not None
    assert c.total.ratio == pytest.approx(case.ratio)
    assert c.total.verdict is case.verdict
    assert c.total.baseline_ns == case.baseline_ns
    assert c.total.current_ns == (case.current.total_ns or case.current.instrumented_ns)
    assert c.total.machine_factor == pytest.approx(case.machine)
    assert all(v.verdict is Verdict.OK for v in c.nodes)
    assert c.status is (Status.REGRESSION if case.verdict is Verdict.SLOWER else Status.PASS)


# Rule 7: several measurements ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MeasuredCase:
    id: str
    measurements: tuple[dict[str, float], ...]
    status: Status
    confirmed: dict[str, bool | None]  # by "node NAME", "op NAME", "module NAME" or "total"
    unconfirmed: tuple[str, ...] = ()
    graph: str = "model"


MEASURED_CASES = [
    MeasuredCase("confirmed", ({"pool": 2.0}, {"pool": 2.0}), Status.REGRESSION, {"node pool": True}),
    MeasuredCase("confirmed-smaller", ({"pool": 2.5}, {"pool": 2.0}), Status.REGRESSION, {"node pool": True}),
    MeasuredCase(
        "not-confirmed",
        ({"pool": 2.0}, {}),
        Status.PASS,
        {"node pool": False},
        ("node pool: not confirmed: x2.00, x1.00 against band +25% (floor); the first measurement was noise",),
    ),
    MeasuredCase("flagged-second-only", ({}, {"pool": 2.0}), Status.PASS, {"node pool": None}),
    MeasuredCase("unchanged-twice", ({}, {}), Status.PASS, {"node pool": None, "total": None}),
    # a small node's flag is not a warning either way: it never failed anything
    MeasuredCase("small-node-not-confirmed", ({"flatten": 3.0}, {}), Status.PASS, {"node flatten": False}),
    MeasuredCase(
        "total-not-confirmed",
        (dict.fromkeys(BASE_NS, 1.3), {}),
        Status.PASS,
        {"total": False},
        ("total: not confirmed: x1.30, x1.00 against band +15% (tolerance); the first measurement was noise",),
    ),
    MeasuredCase("total-confirmed", (dict.fromkeys(BASE_NS, 1.3),) * 2, Status.REGRESSION, {"total": True}),
    MeasuredCase(
        "aggregate-confirmed", ({"bn": 1.3}, {"bn": 1.3}), Status.REGRESSION, {"op BatchNorm2d": True}, graph="cnn"
    ),
    MeasuredCase(
        "aggregate-not-confirmed",
        ({"bn": 1.3}, {}),
        Status.PASS,
        {"op BatchNorm2d": False},
        ("op BatchNorm2d: not confirmed: x1.30, x1.00 against band +10% (tolerance); the first measurement was noise",),
        graph="cnn",
    ),
    MeasuredCase("three-measurements", ({"pool": 2.0},) * 3, Status.REGRESSION, {"node pool": True}),
    MeasuredCase(
        "three-measurements-the-last-disagrees",
        ({"pool": 2.0}, {"pool": 2.0}, {}),
        Status.PASS,
        {"node pool": False},
        ("node pool: not confirmed: x2.00, x2.00, x1.00 against band +25% (floor); the first measurement was noise",),
    ),
]


def confirmations(c: Comparison) -> dict[str, bool | None]:
    out: dict[str, bool | None] = {f"node {v.node.name}": v.judgement.confirmed for v in c.nodes}
    out.update({f"{a.kind.value} {a.name}": a.judgement.confirmed for a in c.aggregates})
    assert c.total is not None
    out["total"] = c.total.judgement.confirmed
    return out


@pytest.mark.parametrize("case", MEASURED_CASES, ids=[c.id for c in MEASURED_CASES])
def test_every_measurement_must_agree(case: MeasuredCase) -> None:
    baseline, nodes, base = (BASELINE_1, MODEL, BASE_NS) if case.graph == "model" else (CNN_BASELINE, CNN, CNN_NS)
    c = compare(baseline, measured(*case.measurements, nodes=nodes, base=base), POLICY)
    assert c.status is case.status
    assert c.measurements == len(case.measurements)
    got = confirmations(c)
    assert {k: got[k] for k in case.confirmed} == case.confirmed
    # nothing else was flagged by the first measurement
    assert {k for k, v in got.items() if v is not None} == {k for k, v in case.confirmed.items() if v is not None}
    assert c.unconfirmed == case.unconfirmed
    for v in c.nodes:
        assert len(v.judgement.ratios) == len(case.measurements)
    assert all(len(a.judgement.ratios) == len(case.measurements) for a in c.aggregates)


def test_a_confirmed_node_reports_every_ratio_and_the_smallest() -> None:
    c = compare(BASELINE_1, measured({"pool": 3.0}, {"pool": 2.0}), POLICY)
    (pool,) = c.slower
    assert pool.judgement.ratios == pytest.approx((3.0, 2.0))
    assert pool.ratio == pytest.approx(2.0)
    assert pool.delta_ns == pytest.approx(80_000)
    assert pool.current_ns == 240_000  # the first measurement's time
    assert pool.reason == "x2.00 beyond band +25% (floor), +80.0 us in every measurement (x3.00, x2.00)"


def test_speed_factors_are_taken_per_measurement() -> None:
    """The confirmation ran on a 30 % slower machine: its own speed factor divides that out."""
    first = make_run(model_times({"pool": 2.0}))
    second = make_run(model_times({"pool": 2.0}, overall=1.3), reference_ns=round(REF_NS * 1.3))
    c = compare(BASELINE_1, make_entry([first, second]), POLICY)
    pool = verdict_of(c, "pool")
    # each measurement divided by its own factor (x1 and x1.3), the second with the drift in doubt
    assert pool.judgement.ratios == pytest.approx((2.0, 2.0 * 1.3 / POLICY.divisor(1.3)))
    assert pool.judgement.confirmed is True
    assert {v.verdict for v in c.nodes if v.node.name != "pool"} == {Verdict.OK}


# FASTER: judged with the full speed factor ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("factors", "overall", "faster", "aggregates", "total"),
    [
        # everything 40 % faster, the reference too: nothing got faster but the machine
        pytest.param({}, 0.6, (), {}, Verdict.OK, id="faster-machine"),
        # conv2 at x0.57 on that machine: slightly faster than the machine (x0.95), within its band
        pytest.param({"conv2": 0.95}, 0.6, (), {}, Verdict.OK, id="node-keeping-pace-with-a-faster-machine"),
        # conv2 a third of its time on that machine: faster by x1/3 after dividing the machine out
        pytest.param(
            {"conv2": 1 / 3},
            0.6,
            ("conv2",),
            {"module layer1": Verdict.FASTER},
            Verdict.FASTER,  # per reference, conv2's 200 us (20 % of the nodes) went
            id="node-faster-on-a-faster-machine",
        ),
        pytest.param(
            {"conv2": 1 / 3}, 1.0, ("conv2",), {"module layer1": Verdict.FASTER}, Verdict.FASTER, id="node-faster"
        ),
        # pool kept its time on the faster machine: x2 against the machine, but only slower counts as slower
        pytest.param({"pool": 1 / 0.6}, 0.6, (), {}, Verdict.OK, id="node-unchanged-on-a-faster-machine"),
    ],
)
def test_faster_is_judged_after_the_full_speed_factor(
    factors: dict[str, float],
    overall: float,
    faster: tuple[str, ...],
    aggregates: dict[str, Verdict],
    total: Verdict,
) -> None:
    c = compare(BASELINE_1, current_entry(factors, overall, ref_factor=overall), POLICY)
    assert c.status is Status.PASS
    assert names(c.faster) == faster
    assert {v.node.name for v in c.nodes if v.verdict is Verdict.FASTER} == set(faster)
    assert flagged_aggregates(c) == aggregates
    assert c.total is not None
    assert c.total.verdict is total
    for v in c.faster:
        assert v.ratio == pytest.approx(1 / 3)  # against the machine, not against the raw baseline
        assert v.speed_factor == pytest.approx(overall)


# Floor bands, the faster test's factor, and the aggregate spread ------------------------------------------


def test_a_floor_band_is_judged_never_too_noisy() -> None:
    # two 3 us size calls next to the model: their floor band is +667 % each (+333 % together), an absolute
    # threshold rather than noise, so an unchanged run says nothing and a 30 us loss is a slowdown
    nodes = (*MODEL, node("size0", "size", op="call_method"), node("size1", "size", op="call_method", occurrence=1))
    base = [*model_times(), 3_000, 3_000]
    baseline = make_entry([make_run(base)], nodes)
    unchanged = compare(baseline, baseline, POLICY)
    assert unchanged.noisy == ()
    size = aggregate_of(unchanged, "op size")
    assert (size.judgement.band_source, size.verdict) == (BandSource.FLOOR, Verdict.OK)
    assert size.judgement.band > NOISY_BAND
    slowed = compare(baseline, make_entry([make_run([*model_times(), 18_000, 18_000])], nodes), POLICY)
    assert aggregate_of(slowed, "op size").verdict is Verdict.SLOWER
    assert slowed.status is Status.REGRESSION


def test_a_wide_tolerance_is_judged_never_too_noisy() -> None:
    wide = replace(POLICY, node_tolerance=1.5)
    c = compare(BASELINE_1, current_entry({"conv2": 3.0}), wide)
    assert c.noisy == ()
    assert verdict_of(c, "conv2").verdict is Verdict.SLOWER  # x3 beyond +150 %
    assert verdict_of(c, "conv1").verdict is Verdict.OK


def _twins() -> tuple[tuple[NodeInfo, ...], dict[str, int]]:
    nodes = tuple(node(f"{kind}{i}", kind.upper(), occurrence=i) for kind in ("a", "b") for i in range(8))
    return nodes, {n.name: 100_000 for n in nodes}


def test_unchanged_nodes_are_not_faster_when_their_peers_got_slower() -> None:
    # every B x1.5: the A nodes' peers moved, the A nodes did not; they must not read as x0.67 faster
    nodes, times = _twins()
    baseline = make_entry([make_run(scaled(nodes, times))], nodes)
    c = compare(baseline, make_entry([make_run(scaled(nodes, times, {"b": 1.5}))], nodes), POLICY)
    assert all(v.verdict is not Verdict.FASTER for v in c.nodes)
    assert all(a.verdict is not Verdict.FASTER for a in c.aggregates)
    assert aggregate_of(c, "op B").verdict is Verdict.SLOWER  # divided by the A nodes' factor, x1.0


def test_a_speedup_must_gain_more_than_the_floor() -> None:
    # relu1 50 -> 35 us (x0.70) gains 15 us, under the 20 us floor; 50 -> 25 us (x0.50) gains 25 us
    small = compare(BASELINE_1, current_entry({"relu1": 0.7}), POLICY)
    assert verdict_of(small, "relu1").verdict is Verdict.OK
    large = compare(BASELINE_1, current_entry({"relu1": 0.5}), POLICY)
    assert verdict_of(large, "relu1").verdict is Verdict.FASTER


def test_aggregate_spread_is_what_the_full_speed_factor_leaves() -> None:
    # baseline processes that differ only in machine speed: no node and no aggregate has any spread left
    scales = (1.0, 1.1, 0.95, 1.2, 1.0)
    baseline = make_entry([make_run(model_times(overall=s)) for s in scales])
    c = compare(baseline, current_entry(), POLICY)
    assert all(v.judgement.sigma == pytest.approx(0.0, abs=1e-9) for v in c.nodes)
    assert c.aggregates
    assert all(a.judgement.sigma == pytest.approx(0.0, abs=1e-9) for a in c.aggregates)


@pytest.mark.parametrize(
    ("small_ops", "bn", "verdict"),
    [
        # small ops x1.2 (a neighbour's memory traffic), BatchNorm x1.4: within what that drift could explain
        pytest.param(1.2, 1.4, Verdict.OK, id="op-specific-contention-within-doubt"),
        # BatchNorm x1.3 on top of that drift: beyond it
        pytest.param(1.2, 1.2 * 1.3, Verdict.SLOWER, id="slowdown-beyond-the-drift"),
        pytest.param(1.0, 1.3, Verdict.SLOWER, id="slowdown-on-a-quiet-machine"),
    ],
)
def test_drift_divided_out_is_in_doubt(small_ops: float, bn: float, verdict: Verdict) -> None:
    assert DRIFT_DOUBT == 0.5
    baseline = make_entry([make_run(scaled(CNN, CNN_NS))], CNN)
    factors = {"relu": small_ops, "add": small_ops, "mul": small_ops, "bn": bn}
    c = compare(baseline, make_entry([make_run(scaled(CNN, CNN_NS, factors))], CNN), POLICY)
    agg = aggregate_of(c, "op BatchNorm2d")
    assert agg.speed_factor == pytest.approx(small_ops)
    assert agg.ratio == pytest.approx(bn / Policy().divisor(small_ops))
    assert Policy().divisor(small_ops) == pytest.approx(small_ops**1.5)
    assert agg.verdict is verdict


@pytest.mark.parametrize(
    ("doubt", "credit", "factor", "divisor"),
    [
        pytest.param(0.5, 0.0, 1.0, 1.0, id="quiet-machine"),
        pytest.param(0.5, 0.0, 1.44, 1.728, id="slower-machine-in-doubt"),
        pytest.param(0.0, 0.0, 1.44, 1.44, id="slower-machine-trusted"),
        pytest.param(0.5, 0.0, 0.81, 1.0, id="faster-machine-no-credit"),
        pytest.param(0.5, 0.5, 0.81, 0.9, id="faster-machine-half-credit"),
        pytest.param(0.5, 1.0, 0.81, 0.81, id="faster-machine-full-credit"),
    ],
)
def test_policy_divisor(doubt: float, credit: float, factor: float, divisor: float) -> None:
    policy = replace(POLICY, drift_doubt=doubt, faster_credit=credit)
    assert policy.divisor(factor) == pytest.approx(divisor)


def test_faster_credit_lets_a_slowdown_on_a_faster_machine_show() -> None:
    # the machine x0.8 (every node), conv2 back at its baseline time: x1.25 against the machine
    factors = {"conv2": 1 / 0.8}
    no_credit = compare(
        BASELINE_1, current_entry(factors, overall=0.8, ref_factor=0.8), replace(POLICY, faster_credit=0)
    )
    assert verdict_of(no_credit, "conv2").ratio == pytest.approx(1.0)
    credit = compare(BASELINE_1, current_entry(factors, overall=0.8, ref_factor=0.8), replace(POLICY, faster_credit=1))
    assert verdict_of(credit, "conv2").ratio == pytest.approx(1.25)
    assert verdict_of(credit, "conv2").verdict is Verdict.SLOWER


def test_floor_share_sets_the_floor_of_a_large_model() -> None:
    # the model's plain forward 100 ms: a 0.2 % share floor is 200 us, a 0.1 % one 100 us
    baseline = make_entry([make_run(model_times(), total_ns=100_000_000)])
    for share, floor_ns in ((0.002, 200_000), (0.001, 100_000)):
        c = compare(baseline, current_entry(), replace(POLICY, floor_share=share))
        assert all(v.floor_ns == floor_ns for v in c.nodes)


def test_a_speed_up_elsewhere_never_makes_unchanged_nodes_slower() -> None:
    """The three largest layers 10x faster (optimised) drag their peers' speed factors down; the defaults
    credit none of it, so the unchanged nodes beside them stay unchanged."""
    factors = {"conv1": 0.1, "conv2": 0.1, "fc": 0.1}
    c = compare(BASELINE_1, current_entry(factors), Policy())
    assert c.status is Status.PASS
    assert c.slower == ()
    assert c.slower_small == ()
    assert c.slower_aggregates == ()
    assert {verdict_of(c, n).verdict for n in BASE_NS if n not in factors} == {Verdict.OK}
    # crediting the peers' speed-up would call unchanged nodes slower
    credited = compare(BASELINE_1, current_entry(factors), replace(Policy(), faster_credit=1.0))
    assert credited.slower or credited.slower_small or credited.slower_aggregates


def test_a_too_noisy_item_is_never_called_unconfirmed() -> None:
    noisy = judge([5.0, 1.0], 1.5, BandSource.SPREAD)
    assert noisy.verdict is Verdict.NOISY
    assert noisy.confirmed is None
    assert judge([5.0, 1.0], 0.5, BandSource.SPREAD).confirmed is False
