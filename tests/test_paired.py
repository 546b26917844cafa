"""Unit tests of ``pytest_fxprof.judge.paired``: the A/B rule, with synthetic pairs of runs (no torch)."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import replace

import pytest

from pytest_fxprof.judge.band import t_cdf, t_quantile
from pytest_fxprof.judge.outliers import out_of_line
from pytest_fxprof.judge.paired import (
    CONFIDENCE,
    MIN_DECIDING_PAIRS,
    MIN_PAIRS,
    MIN_PASSING_PAIRS,
    PAIR_SPREAD,
    RESOLVE,
    RESOLVE_CONFIDENCE,
    Interval,
    PairedPolicy,
    can_decide,
    compare_pairs,
    judge_pairs,
    needs_more,
    undecided,
)
from pytest_fxprof.records.measurement import BaselineEntry, Capture, NodeInfo, Run, Setup, Tolerances
from pytest_fxprof.records.verdicts import BandSource, Comparison, Judgement, Kind, Status, Verdict
from tests.records_for_tests import CAPTURE, CNN, CNN_NS, ENV, PROTOCOL, node, scaled

POLICY = PairedPolicy(node_tolerance=0.05, total_tolerance=0.03, floor_ns=20_000, floor_share=0.001)
AGAINST = "origin/main (1a2b3c4)"


def run_of(times: Sequence[int]) -> Run:
    total = sum(times)
    return Run(total, total, 0, tuple(times), tuple(0 for _ in times))


def entry(runs: Sequence[Run], nodes: Sequence[NodeInfo] = CNN, **kw: object) -> BaselineEntry:
    return BaselineEntry(
        capture=kw.pop("capture", CAPTURE),  # type: ignore[arg-type]
        environment=ENV,
        protocol=PROTOCOL,
        tolerances=Tolerances(0.05, 0.03),
        nodes=tuple(nodes),
        runs=tuple(runs),
        **kw,  # type: ignore[arg-type]
    )


def sides(
    pairs: int,
    *,
    slowed: Mapping[str, float] | None = None,
    noise: float = 0.02,
    drift: float = 0.3,
    seed: int = 0,
) -> tuple[BaselineEntry, BaselineEntry]:
    """``pairs`` pairs of runs of the CNN: each pair meets its own machine speed (up to ``drift`` apart between
    pairs, alike for both sides of a pair), each process its own ``noise`` (log-normal per node); the new
    side's nodes are ``slowed`` by name or kind."""
    rng = random.Random(seed)
    old: list[Run] = []
    new: list[Run] = []
    for _ in range(pairs):
        speed = 1.0 + rng.uniform(0, drift)
        for side, factors in ((old, None), (new, slowed)):
            base = scaled(CNN, CNN_NS, factors, overall=speed)
            side.append(run_of([round(t * math.exp(rng.gauss(0, noise))) for t in base]))
    return entry(old), entry(new)


@pytest.mark.parametrize(
    ("p", "df", "table"),  # one-sided quantiles, from any table of Student's t
    [
        (0.975, 1, 12.706),
        (0.975, 2, 4.303),
        (0.975, 10, 2.228),
        (0.999, 3, 10.215),
        (0.999, 4, 7.173),
        (0.999, 5, 5.893),
        (0.999, 7, 4.785),
        (0.999, 11, 4.025),
        (0.999, 30, 3.385),
        (0.95, 60, 1.671),
    ],
)
def test_t_quantile_matches_the_table(p: float, df: int, table: float) -> None:
    assert t_quantile(p, df) == pytest.approx(table, abs=6e-4)
    assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-9)


def test_t_quantile_without_degrees_of_freedom_is_infinite() -> None:
    assert t_quantile(0.999, 0) == math.inf


def test_drift_between_pairs_cancels_within_them() -> None:
    # the machine's speed moves 30 % between pairs: pooled, the sides would overlap; paired, nothing moved
    old, new = sides(8, drift=0.3, noise=0.01)
    c = compare_pairs(old, new, POLICY, against=AGAINST)
    assert c.status is Status.PASS
    assert not c.slower
    assert not c.slower_aggregates
    assert not c.noisy
    assert c.against == AGAINST
    assert c.pairs == 8
    assert all(len(v.judgement.ratios) == 8 for v in c.nodes)


def test_a_slowed_large_node_fails_and_is_named() -> None:
    old, new = sides(8, slowed={"conv3": 1.10}, noise=0.01)
    c = compare_pairs(old, new, POLICY, against=AGAINST)
    assert c.status is Status.REGRESSION
    assert [v.node.name for v in c.slower] == ["conv3"]
    v = c.slower[0]
    assert v.ratio == pytest.approx(1.10, rel=0.02)
    assert "8 pairs" in v.reason
    assert "beyond band +5% (tolerance)" in v.reason


def test_a_slowdown_below_the_band_passes_though_it_is_real() -> None:
    old, new = sides(8, slowed={"conv3": 1.03}, noise=0.002)
    c = compare_pairs(old, new, POLICY, against=AGAINST)
    conv3 = next(v for v in c.nodes if v.node.name == "conv3")
    assert conv3.verdict is Verdict.OK
    assert c.status is Status.PASS


def test_small_nodes_warn_alone_and_their_type_fails_together() -> None:
    old, new = sides(8, slowed={"bn": 1.3}, noise=0.01)
    c = compare_pairs(old, new, PairedPolicy(floor_ns=5_000), against=AGAINST)  # +12 us each is above the floor
    assert {v.node.name for v in c.slower_small} == {f"bn{i}" for i in range(8)}
    assert not c.slower  # none gates alone
    assert any(a.kind is Kind.OP and a.name == "BatchNorm2d" for a in c.slower_aggregates)
    assert c.status is Status.REGRESSION


def test_the_whole_model_slower_fails_on_the_total() -> None:
    old, new = sides(8, slowed=dict.fromkeys(("conv", "bn", "relu", "add", "mul", "lin"), 1.06), noise=0.005)
    c = compare_pairs(old, new, POLICY, against=AGAINST)
    assert c.total is not None
    assert c.total.verdict is Verdict.SLOWER
    assert c.status is Status.REGRESSION


def test_pairs_that_disagree_are_too_noisy_never_passed_or_failed() -> None:
    old, new = sides(3, slowed={"conv3": 1.10}, noise=0.25, seed=3)
    c = compare_pairs(old, new, POLICY, against=AGAINST)
    assert not c.slower
    assert c.total is not None
    assert c.total.verdict is Verdict.NOISY  # the whole check could not see the model +6 % slower
    assert "disagree too much" in c.total.judgement.reason
    assert any(t.startswith("total:") for t in c.noisy)
    assert needs_more(c)
    assert c.status is Status.UNDECIDED  # neither failed nor passed: no verdict


def test_no_more_pairs_once_a_node_or_aggregate_failed_the_test() -> None:
    def conv2(c: Comparison) -> Verdict:
        return next(v.verdict for v in c.nodes if v.node.name == "conv2")

    open_ = compare_pairs(*sides(6, slowed={"conv2": 1.07}, noise=0.03, seed=1), POLICY, against=AGAINST)
    assert conv2(open_) is Verdict.NOISY  # x1.07 beyond the band, not yet confirmed: more pairs decide it
    assert open_.status is Status.UNDECIDED
    assert needs_more(open_)
    failed = compare_pairs(*sides(6, slowed={"conv2": 1.07, "conv3": 1.4}, noise=0.03, seed=1), POLICY, against=AGAINST)
    assert conv2(failed) is Verdict.NOISY
    assert [v.node.name for v in failed.slower] == ["conv3"]
    assert not needs_more(failed)  # the test fails on conv3 whatever conv2 turns out to be
    assert failed.status is Status.REGRESSION


def test_an_aggregate_too_small_to_fail_alone_asks_for_no_more_pairs_and_leaves_no_check_undecided() -> None:
    # bn0 (40 us) alone slowed x1..x3 from pair to pair: the BatchNorms together (320 us, 4.9 % of the model)
    # look slower but their pairs disagree; too small to fail a test alone, they leave it to the blocks and the total
    scatter = (2.0, 1.0, 3.0, 1.1, 2.5, 1.0)
    old = entry([run_of(scaled(CNN, CNN_NS)) for _ in scatter])
    new = entry([run_of(scaled(CNN, CNN_NS, {"bn0": f})) for f in scatter])
    c = compare_pairs(old, new, POLICY, against=AGAINST)
    (bn,) = [a for a in c.aggregates if a.kind is Kind.OP and a.name == "BatchNorm2d"]
    assert bn.verdict is Verdict.NOISY
    assert not bn.gates
    assert all(a.verdict is not Verdict.NOISY for a in c.aggregates if a.gates)
    assert c.noisy == ()
    assert not needs_more(c)
    assert c.status is Status.PASS


def test_one_pair_decides_nothing() -> None:
    old, new = sides(MIN_PAIRS - 1, slowed={"conv3": 2.0}, noise=0.0)
    c = compare_pairs(old, new, POLICY, against=AGAINST)
    assert c.total is not None
    assert c.total.verdict is Verdict.NOISY
    assert not c.slower


def test_faster_mirrors_slower() -> None:
    old, new = sides(8, slowed={"lin": 0.8}, noise=0.01)
    c = compare_pairs(old, new, POLICY, against=AGAINST)
    assert {v.node.name for v in c.faster} == {f"lin{i}" for i in range(8)}
    assert c.status is Status.PASS


def test_a_faster_item_the_pairs_do_not_confirm_passes_and_says_so() -> None:
    j = judge_pairs([100.0, 100.0, 100.0], [60.0, 105.0, 70.0], 0.05, BandSource.TOLERANCE)
    assert j.verdict is Verdict.OK
    assert not undecided(j)  # more pairs could only confirm that it is faster: nothing to decide
    assert "faster than band +5% (tolerance) but not confirmed" in j.reason
    assert "within" not in j.reason


def test_undecided_is_a_slowdown_beyond_the_band_not_yet_sure() -> None:
    j = judge_pairs([100.0, 100.0, 100.0], [150.0, 95.0, 140.0], 0.05, BandSource.TOLERANCE)
    assert j.verdict is Verdict.NOISY
    assert undecided(j)
    sure = judge_pairs([100.0] * 4, [120.0, 121.0, 119.0, 120.0], 0.05, BandSource.TOLERANCE)
    assert sure.verdict is Verdict.SLOWER
    assert not undecided(sure)
    quiet = judge_pairs([100.0] * 4, [100.0, 101.0, 99.0, 100.0], 0.05, BandSource.TOLERANCE)
    assert quiet.verdict is Verdict.OK
    assert not undecided(quiet)


def test_a_slowdown_from_fewer_pairs_than_decide_a_check_is_undecided_not_a_failure() -> None:
    # three pairs left after one was left out, agreeing by chance: the interval clears 1, but a failure needs more
    few = judge_pairs([100.0] * 3, [105.9, 105.9, 106.4], 0.05, BandSource.TOLERANCE)
    assert MIN_DECIDING_PAIRS == 4
    assert few.verdict is Verdict.NOISY
    assert undecided(few)  # more pairs are measured
    assert "a slowdown needs 4 pairs to fail a test" in few.reason
    enough = judge_pairs([100.0] * 4, [105.9, 105.9, 106.4, 106.1], 0.05, BandSource.TOLERANCE)
    assert enough.verdict is Verdict.SLOWER


def test_an_item_is_undecided_only_if_it_looks_slower_and_the_total_also_if_it_cannot_see_twice_its_band() -> None:
    # 6 pairs, band +5 %: the pairs spread so that the interval is about +-9 %
    spread = [1.03, 0.97, 1.02, 0.98, 1.035, 0.965]
    within = judge_pairs([100.0] * 6, [100.0 * r for r in spread], 0.05, BandSource.TOLERANCE)
    assert within.verdict is Verdict.OK  # estimate x1.00: the noise the band allows, no reason for more pairs
    assert not undecided(within)
    looks_slower = judge_pairs([100.0] * 6, [106.5 * r for r in spread], 0.05, BandSource.TOLERANCE)
    assert looks_slower.verdict is Verdict.NOISY  # beyond the band, but the interval reaches 1
    assert "beyond band +5% (tolerance)" in looks_slower.reason
    assert "disagree too much to confirm it" in looks_slower.reason
    assert undecided(looks_slower)
    blind = [1.08, 0.93, 1.07, 0.92, 1.09, 0.92]  # interval about +-20 %: a +10 % slowdown would not show
    wide = judge_pairs([100.0] * 6, [100.0 * r for r in blind], 0.05, BandSource.TOLERANCE)
    assert wide.verdict is Verdict.OK  # a node or aggregate: its reason shows the interval
    assert "interval x0.8" in wide.reason
    total = judge_pairs([100.0] * 6, [100.0 * r for r in blind], 0.05, BandSource.TOLERANCE, resolve=True)
    assert total.verdict is Verdict.NOISY
    assert "to tell a slowdown of +10% from none" in total.reason
    assert undecided(total)


def test_one_pair_hit_by_other_work_never_fails_an_item_and_more_pairs_decide() -> None:
    hit = [100.5, 99.0, 101.0, 100.0, 99.5, 100.2, 125.0, 100.1]
    node = judge_pairs([100.0] * 8, hit, 0.05, BandSource.TOLERANCE)
    assert node.verdict is Verdict.OK  # x1.03, within the band: the burst widened its interval, failed nothing
    total = judge_pairs([100.0] * 8, hit, 0.03, BandSource.TOLERANCE, resolve=True)
    assert total.verdict is Verdict.NOISY  # the whole check cannot tell +6 % from none
    assert undecided(total)
    more = judge_pairs(  # as many as a test may grow to: 3 times its 6
        [100.0] * 18,
        [*hit, 100.3, 99.6, 100.4, 99.9, 100.0, 100.2, 99.7, 100.1, 99.8, 100.2],
        0.03,
        BandSource.TOLERANCE,
        resolve=True,
    )
    assert more.verdict is Verdict.OK
    slowed = judge_pairs([100.0] * 6, [110.5, 109.0, 111.0, 110.0, 109.5, 110.1], 0.05, BandSource.TOLERANCE)
    assert slowed.verdict is Verdict.SLOWER
    assert slowed.ratio == pytest.approx(1.10, abs=5e-3)


def test_the_estimate_is_the_geometric_mean_and_ratios_are_per_pair() -> None:
    j = judge_pairs([100.0, 200.0], [110.0, 242.0], 0.05, BandSource.TOLERANCE, confidence=CONFIDENCE)
    assert j.ratios == pytest.approx((1.10, 1.21))
    assert j.ratio == pytest.approx(math.sqrt(1.10 * 1.21))
    assert j.paired
    assert j.confirmed is None


def test_the_floor_widens_the_band_of_a_tiny_item() -> None:
    old, new = sides(8, slowed={"relu": 1.5}, noise=0.0)
    c = compare_pairs(old, new, PairedPolicy(floor_ns=50_000), against=AGAINST)
    relu = next(v for v in c.nodes if v.node.name == "relu0")
    assert relu.band_source is BandSource.FLOOR
    assert relu.verdict is Verdict.OK  # +4.5 us is under the 50 us floor


def test_another_setup_is_a_mismatch_naming_the_revision() -> None:
    old, new = sides(4)
    old = entry(old.runs, setup=Setup(("args[0]: float32[4, 8] cpu",), "eval"))
    new = entry(new.runs, setup=Setup(("args[0]: float32[8, 8] cpu",), "eval"))
    c = compare_pairs(old, new, POLICY, against=AGAINST)
    assert c.status is Status.MISMATCH
    assert c.mismatches == (f"inputs: args[0] was float32[4, 8] cpu at {AGAINST}, float32[8, 8] cpu in this run",)
    assert not needs_more(c)


def changed_sides(*, added: str, module: str, call: float = 1.0) -> tuple[BaselineEntry, BaselineEntry]:
    """Six pairs of the CNN, each process +-0.2 % apart; the new side holds one more node (``added`` as its
    target, in ``module``, 17 us: 2 % of ``blocks.0``) and, where ``added`` is a target the old side also has
    in that module, lacks one of those (the same operations: a renamed or reordered line, not a change). ``call``
    scales the new side's plain call (the total)."""
    rng = random.Random(7)
    extra = node("extra", added, module)
    dropped = next((i for i, n in enumerate(CNN) if n.target == added and n.module == module), None)
    new_nodes = [n for i, n in enumerate(CNN) if i != dropped]
    new_nodes.insert(6, extra)
    old_runs, new_runs = [], []
    for _ in range(6):
        base = scaled(CNN, CNN_NS)
        old_runs.append(run_of([round(t * (1 + rng.uniform(-0.002, 0.002))) for t in base]))
        times = [round(t * (1 + rng.uniform(-0.002, 0.002))) for i, t in enumerate(base) if i != dropped]
        kept = 9_000 if dropped is not None else 0  # a renamed node keeps its time, the 17 us come on top
        times.insert(6, kept + 17_000)
        made = run_of(times)
        new_runs.append(replace(made, total_ns=round(made.total_ns * call)))
    return entry(old_runs), entry(new_runs, new_nodes)


LOW_FLOOR = replace(POLICY, floor_ns=5_000)  # 0.6 % of blocks.0: below both bands


def test_a_module_whose_code_changed_is_held_to_the_narrower_changed_band() -> None:
    # blocks.0 gains a clone: +17 us of its 817 us, x1.02: beyond +1 %, inside the +5 % node band; the user's call
    # 2 % slower with it, beyond half the total's band
    sides_ = changed_sides(added="aten.clone", module="blocks.0", call=1.02)
    c = compare_pairs(*sides_, LOW_FLOOR, against=AGAINST)
    (block,) = [a for a in c.aggregates if a.kind is Kind.MODULE and a.name == "blocks.0"]
    assert block.changed
    assert block.band == pytest.approx(0.01)
    assert block.verdict is Verdict.SLOWER
    assert c.status is Status.REGRESSION
    assert c.blame is not None
    assert c.blame.lead is not None
    assert c.blame.lead.name == "blocks.0"
    # the same change where the user's call moved 0.4 %, the block's 17 us alone: its code costs the block, not the
    # program by as much as the gate can see, so it passes and says why
    c = compare_pairs(*changed_sides(added="aten.clone", module="blocks.0"), LOW_FLOOR, against=AGAINST)
    (block,) = [a for a in c.aggregates if a.kind is Kind.MODULE and a.name == "blocks.0"]
    assert block.verdict is Verdict.OK
    assert block.judgement.ratio > 1.01
    assert "but the call as the user makes it is x1.00" in block.reason
    assert c.status is Status.PASS
    # the same time added to a node the old side also had there (renamed: relu0 -> extra): no code changed
    same = compare_pairs(*changed_sides(added="torch.relu", module="blocks.0"), LOW_FLOOR, against=AGAINST)
    (block,) = [a for a in same.aggregates if a.kind is Kind.MODULE and a.name == "blocks.0"]
    assert not block.changed
    assert block.band == pytest.approx(POLICY.node_tolerance)
    assert block.verdict is Verdict.OK
    assert same.status is Status.PASS
    # an operator type says what kind of work, not whose code: its band stays the node band
    assert all(a.band >= POLICY.node_tolerance for a in c.aggregates if a.kind is Kind.OP)
    # never wider than the node band
    tight = replace(LOW_FLOOR, floor_ns=1_000, floor_share=0.0, node_tolerance=0.005, changed_tolerance=0.01)
    c = compare_pairs(*changed_sides(added="aten.clone", module="blocks.0"), tight, against=AGAINST)
    (block,) = [a for a in c.aggregates if a.kind is Kind.MODULE and a.name == "blocks.0"]
    assert block.band == pytest.approx(0.005)


def test_a_changed_graph_judges_the_matched_nodes() -> None:
    old, new = sides(6, slowed={"conv3": 1.2}, noise=0.005)
    extra = node("extra", "torch.sigmoid", "blocks.3")
    nodes = (*CNN[:20], extra, *CNN[20:])
    runs = [run_of([*r.node_ns[:20], 5_000, *r.node_ns[20:]]) for r in new.runs]
    c = compare_pairs(old, entry(runs, nodes, capture=Capture("symbolic_trace", graphs=2)), POLICY, against=AGAINST)
    assert [n.name for n in c.added] == ["extra"]
    assert c.graphs == (1, 2)
    assert c.graph_changed
    assert [v.node.name for v in c.slower] == ["conv3"]


def test_a_modules_new_nodes_count_in_its_aggregate_on_the_new_side() -> None:
    old, new = sides(6, noise=0.005)
    block = [k for k, n in enumerate(CNN) if n.module.startswith("blocks.3")]
    recompute = tuple(node(f"again_{k}", CNN[k].target, CNN[k].module, CNN[k].op, occurrence=1) for k in block)
    nodes = (*CNN, *recompute)  # its forward again (activation checkpointing): new nodes, every old one unchanged
    runs = [run_of([*r.node_ns, *(r.node_ns[k] for k in block)]) for r in new.runs]
    c = compare_pairs(old, entry(runs, nodes), POLICY, against=AGAINST)
    assert c.added == recompute
    assert c.slower == ()  # no matched node changed
    (module,) = [a for a in c.aggregates if (a.kind, a.name) == (Kind.MODULE, "blocks.3")]
    assert module.verdict is Verdict.SLOWER
    assert module.ratio == pytest.approx(2.0, rel=0.02)
    assert c.status is Status.REGRESSION


def test_sides_of_different_sizes_are_refused() -> None:
    old, new = sides(3)
    with pytest.raises(ValueError, match="each pair needs one of each"):
        compare_pairs(old, entry(new.runs[:2]), POLICY, against=AGAINST)


def test_pairs_out_of_lock_step_are_left_out_or_kept_and_counted() -> None:
    from pytest_fxprof.against.answers import paired_entries
    from pytest_fxprof.against.rounds import Pairs
    from pytest_fxprof.measure.sampling import Child
    from pytest_fxprof.store.baseline import entry_to_json

    def children(e: BaselineEntry, alone: Sequence[int | None]) -> list[Child]:
        return [
            Child((), 0, {"calls": {"call0": {"entry": entry_to_json(entry([run])), "alone_from": a}}}, "")
            for run, a in zip(e.runs, alone, strict=True)
        ]

    old, new = sides(4)
    # a process says where it went alone only where that was within the passes whose times count
    # (``Barrier.alone_in_counted``): pair 2 did, the others held
    got = Pairs(children(old, [None, 3, None, None]), children(new, [None, None, None, None]))
    found = paired_entries(got, "call0")
    assert found is not None
    assert [e.runs[0] for e in found.old] == [old.runs[0], old.runs[2], old.runs[3]]
    assert [e.runs[0] for e in found.new] == [new.runs[0], new.runs[2], new.runs[3]]
    assert (found.left_out, found.kept_out_of_step, found.out_of_line) == (1, 0, 0)

    got = Pairs(children(old, [1, 2, None, None]), children(new, [None, None, 0, None]))
    found = paired_entries(got, "call0")
    assert found is not None
    assert (len(found.old), found.left_out, found.kept_out_of_step) == (4, 0, 3)  # one held: all kept, 3 counted
    assert paired_entries(Pairs(children(old, [None] * 4), [Child((), 0, {"calls": {}}, "")] * 4), "call0") is None


def disturbed(e: BaselineEntry, pair: int, factor: float) -> BaselineEntry:
    """``e`` with every node of the process of ``pair`` ``factor`` times as slow (other work hit it)."""
    runs = list(e.runs)
    runs[pair] = run_of([round(t * factor) for t in runs[pair].node_ns])
    return entry(runs)


def test_a_pair_whose_process_met_another_machine_is_left_out() -> None:
    """One pair's old process ran 2.4 times as slow at every node: in it a slowed node read x0.46 and pulled the
    estimate of six pairs into the band; the pairs that met one machine find it."""
    old, new = sides(6, slowed={"conv3": 1.1}, noise=0.005)
    old = disturbed(old, 4, 2.4)
    assert out_of_line(old, new) == (4,)
    loose = replace(POLICY, node_tolerance=0.05)
    (before,) = [v for v in compare_pairs(old, new, loose, against=AGAINST).nodes if v.node.name == "conv3"]
    assert before.verdict is Verdict.OK
    kept = [p for p in range(6) if p != 4]
    old5, new5 = entry([old.runs[p] for p in kept]), entry([new.runs[p] for p in kept])
    (after,) = [v for v in compare_pairs(old5, new5, loose, against=AGAINST).nodes if v.node.name == "conv3"]
    assert after.verdict is Verdict.SLOWER


def test_a_change_that_moves_every_pair_alike_leaves_no_pair_out() -> None:
    """A slowdown of every node, the machine's drift (alike for both sides of a pair) and a slowed node: the
    median pair moves with them."""
    everything = {n.name: 1.3 for n in CNN}
    assert out_of_line(*sides(6, slowed=everything, noise=0.01)) == ()
    assert out_of_line(*sides(8, drift=0.5, noise=0.02)) == ()
    assert out_of_line(*sides(6, slowed={"conv3": 2.0}, noise=0.01)) == ()


def test_no_pair_is_left_out_without_a_majority_or_a_median_pair() -> None:
    old, new = sides(6, noise=0.005)
    half = disturbed(disturbed(disturbed(old, 0, 2.0), 1, 2.0), 2, 2.0)
    assert out_of_line(half, new) == ()  # which half met the other machine?
    two_old, two_new = entry(old.runs[:2]), entry(new.runs[:2])
    assert out_of_line(disturbed(two_old, 0, 2.0), two_new) == ()
    assert out_of_line(disturbed(old, 0, 2.0), new) == (0,)
    assert out_of_line(disturbed(old, 0, 2.0), new, limit=1.5) == ()


def test_a_pair_out_of_line_is_left_out_of_the_call_and_counted() -> None:
    from pytest_fxprof.against.answers import paired_entries
    from pytest_fxprof.against.rounds import Pairs
    from pytest_fxprof.measure.sampling import Child
    from pytest_fxprof.store.baseline import entry_to_json

    def children(e: BaselineEntry) -> list[Child]:
        return [Child((), 0, {"calls": {"call0": {"entry": entry_to_json(entry([run]))}}}, "") for run in e.runs]

    old, new = sides(6, noise=0.005)
    found = paired_entries(Pairs(children(disturbed(old, 2, 0.5)), children(new)), "call0")
    assert found is not None
    assert (len(found.old), len(found.new), found.out_of_line, found.left_out) == (5, 5, 1, 0)
    assert [e.runs[0] for e in found.new] == [r for p, r in enumerate(new.runs) if p != 2]


def test_the_totals_resolve_asks_99_percent_not_the_false_alarms_999() -> None:
    """A total is too noisy when the pairs could not tell +2 bands from none, judged at 99 %: four pairs spread
    2 % decide an unchanged model (at 99.9 %, t = 10.2, they would not), four spread 3.5 % do not."""
    band = 0.03
    assert RESOLVE_CONFIDENCE == 0.99
    old = [1_000_000.0] * 4

    def total(step: float) -> Judgement:
        new = [o * math.exp(step * z) for o, z in zip(old, (1.0, -1.0, 1.0, -1.0), strict=True)]
        return judge_pairs(old, new, band, BandSource.TOLERANCE, resolve=True)

    usual = total(0.017)  # log ratios spread 2.0 % (sample standard deviation)
    assert usual.verdict is Verdict.OK
    assert not undecided(usual)
    logs = tuple(math.log(r) for r in usual.ratios)
    assert Interval(logs, CONFIDENCE).half_width > math.log1p(RESOLVE * band)  # at 99.9 %: undecided
    assert Interval(logs, RESOLVE_CONFIDENCE).half_width <= math.log1p(RESOLVE * band)
    wide = total(0.03)  # 3.5 %
    assert wide.verdict is Verdict.NOISY
    assert "to tell a slowdown of +6% from none" in wide.reason
    assert undecided(wide)


def test_a_slowdown_takes_the_fewest_pairs_that_decide_a_usual_total_at_the_gates_confidence() -> None:
    """The fewest pairs a slowdown fails a test on: the fewest whose interval, at the gate's confidence, can decide
    the total of a check whose pairs spread as usual; one fewer cannot, however the pairs fall."""
    assert can_decide(MIN_DECIDING_PAIRS)
    assert not can_decide(MIN_DECIDING_PAIRS - 1)
    assert not can_decide(2, spread=0.001)  # with 2 pairs (t = 318), even pairs agreeing within 0.1 % decide nothing


def _total(ratios: Sequence[float]) -> Judgement:
    old = [1_000_000.0] * len(ratios)
    return judge_pairs(old, [o * r for o, r in zip(old, ratios, strict=True)], 0.03, BandSource.TOLERANCE, resolve=True)


def test_a_test_passes_from_the_fewest_pairs_that_resolve_a_usual_total() -> None:
    """The minimum of --fxprof-pairs, where a check starts: the fewest pairs whose interval at the total's resolve
    confidence can tell a usual check's total from one twice its band slower; one fewer cannot. A total so resolved
    and within its band passes there; one that looks slower takes more pairs, since failing takes more."""
    assert MIN_PASSING_PAIRS == 3 < MIN_DECIDING_PAIRS
    assert can_decide(MIN_PASSING_PAIRS, confidence=RESOLVE_CONFIDENCE)
    assert not can_decide(MIN_PASSING_PAIRS - 1, confidence=RESOLVE_CONFIDENCE)
    usual = [math.exp(PAIR_SPREAD * z) for z in (1.0, -1.0, 0.0)]
    assert _total(usual).verdict is Verdict.OK
    assert "within band +3% (tolerance) (3 pairs" in _total(usual).reason
    assert _total(usual[:2]).verdict is Verdict.NOISY  # two pairs spread as usual cannot resolve it
    alike = _total([1.001, 1.001])  # two that agree within a hair still do not decide it
    assert alike.verdict is Verdict.NOISY
    assert "the total needs 3 pairs to be decided" in alike.reason
    slower = _total([1.08, 1.081, 1.079])  # three that agree on +8 %: a failure takes a fourth
    assert slower.verdict is Verdict.NOISY
    assert "a slowdown needs 4 pairs to fail a test" in slower.reason
    wide = _total([1.05, 0.96, 1.0])  # within its band, but too wide to tell +6 % from none: more pairs
    assert wide.verdict is Verdict.NOISY
    assert "disagree too much to tell a slowdown of +6%" in wide.reason


def test_pairs_that_disagree_by_orders_of_magnitude_are_too_noisy_not_an_error() -> None:
    """An item one process measured at next to nothing (0 ns) and the others at a millisecond: its interval reaches
    past any ratio a float holds, and it is too noisy to decide, said with the bound as ``inf``."""
    from pytest_fxprof.judge.paired import judge_pairs

    j = judge_pairs([0.0, 1_000_000.0], [1_000_000.0, 1_000_000.0], 0.05, BandSource.TOLERANCE)
    assert j.verdict is Verdict.NOISY
    assert "..xinf at 99.9%" in j.reason
    j = judge_pairs([0.0, 1_000_000.0, 1_000_000.0], [1_000_000.0] * 3, 0.05, BandSource.TOLERANCE)
    assert "interval x0.00..x4.51e+46 at 99.9%" in j.reason


def test_pairs_that_all_lie_beyond_the_band_are_too_few_not_in_disagreement() -> None:
    # 4 pairs, every one x1.07 to x1.16 against +3 %: the 99.9 % interval still reaches x0.99, and the words say why
    agreed = judge_pairs([100.0] * 4, [114.0, 107.0, 111.0, 116.0], 0.03, BandSource.TOLERANCE)
    assert agreed.verdict is Verdict.NOISY
    assert "every pair beyond it (x1.07 to x1.16), but 4 pairs are too few to confirm it at 99.9%" in agreed.reason
    assert "disagree" not in agreed.reason
    # one pair within the band: they do disagree
    split = judge_pairs([100.0] * 4, [113.0, 101.0, 111.0, 114.0], 0.03, BandSource.TOLERANCE)
    assert split.verdict is Verdict.NOISY
    assert "disagree too much to confirm it" in split.reason
