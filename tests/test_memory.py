"""What memory a change costs and the allocator states processes fall into (``judge.memory``), and what the paired
rule, the stored gate and blame make of them: hand-built runs, no torch."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import pytest

from pytest_fxprof.judge.blame import blame
from pytest_fxprof.judge.decision import Policy, compare
from pytest_fxprof.judge.memory import (
    FAULT_NS,
    STATE_FAULTS,
    SUBSTANTIAL_SHARE,
    item_modules,
    memory,
    memory_of,
    split_chance,
    states,
    total_memory,
    with_states,
)
from pytest_fxprof.judge.paired import CONFIDENCE, PairedPolicy, compare_pairs
from pytest_fxprof.records.measurement import (
    BaselineEntry,
    Capture,
    Environment,
    NodeInfo,
    Protocol,
    Run,
    Tolerances,
    node_key,
)
from pytest_fxprof.records.verdicts import BandSource, Judgement, Kind, Memory, Status, Verdict
from pytest_fxprof.views.render import blame_lines

ENV = Environment("2.4.0", "3.11.7", "Linux-x86_64", "cpu", 1, "cpu", "glibc (thp madvise)", "wall", "compiled")
PROTOCOL = Protocol(warmup=4, passes=12, threads=1, processes=1)
CAPTURE = Capture("symbolic_trace", classes=(("attn", "Attention"), ("mlp", "MLP")))


def info(name: str, module: str, target: str = "torch.matmul") -> NodeInfo:
    return NodeInfo(node_key("call_function", module, target, 0), name, "call_function", target, module)


NODES = (
    info("mm", "attn"),
    info("softmax", "attn", "torch.softmax"),
    info("relu", "mlp", "torch.relu"),
    info("fc", "mlp", "torch.addmm"),
)
BASE = (1_200_000, 800_000, 400_000, 600_000)


def run(
    total_ns: int,
    faults: int | None,
    *,
    node_ns: Sequence[int] = BASE,
    attn_faults: int = 0,
    instrumented: float = 1.05,
) -> Run:
    """One process: its plain call, page faults a call (those of ``attn`` among them), and the nodes' times."""
    return Run(
        total_ns=total_ns,
        instrumented_ns=round(total_ns * instrumented),
        reference_ns=500_000,
        node_ns=tuple(node_ns),
        node_spread_ns=(0,) * len(node_ns),
        faults=faults,
        module_faults=(("", faults or 0), ("attn", attn_faults), ("mlp", 0)) if faults is not None else (),
    )


def entry(runs: Sequence[Run], allocated: Sequence[int] = (600_000, 400_000, 200_000, 300_000)) -> BaselineEntry:
    return BaselineEntry(CAPTURE, ENV, PROTOCOL, Tolerances(0.05, 0.03), NODES, tuple(runs), allocated=tuple(allocated))


def runs(totals: Sequence[int], faults: Sequence[int], **kw: object) -> list[Run]:
    return [run(t, f, **kw) for t, f in zip(totals, faults, strict=True)]  # type: ignore[arg-type]


# The states ------------------------------------------------------------------------------------------------


def test_processes_in_one_state_have_no_states() -> None:
    assert states(runs([3_000_000] * 4, [200, 300, 250, 280]), runs([3_000_000] * 4, [260, 240, 300, 200])) is None
    # a process that did not read its faults says nothing of its state
    assert states([run(3_000_000, None)] * 3, runs([3_000_000] * 3, [100, 20_000, 100])) is None


def test_a_split_names_the_counts_the_faults_and_the_times() -> None:
    old = runs([3_000_000] * 6, [300] * 6)
    new = runs([3_900_000, 3_900_000, 3_900_000, 2_700_000, 2_700_000, 2_700_000], [12_000] * 3 + [300] * 3)
    found = states(old, new)
    assert found is not None
    assert (found.old_high, found.old, found.new_high, found.new) == (0, 6, 3, 6)
    assert found.high_ratio == pytest.approx(1.3)
    assert found.low_ratio == pytest.approx(0.9)
    assert found.extra_faults == pytest.approx(11_700)
    assert 300 < found.threshold < 12_000
    assert found.moved == pytest.approx(0.5)
    assert found.line() == (
        "the processes fell into two allocator states: 3 of 6 new and 0 of 6 old took over 1,897 page faults a call "
        "(the allocator handing memory back and taking it again); the new ones in that state ran x1.30 "
        "(+11,700 faults a call), x0.90 in the others"
    )


def test_states_must_lie_apart_in_ratio_and_in_count() -> None:
    # x4 apart but only 150 faults: the allocator's bookkeeping, not a state
    assert states(runs([1_000_000] * 3, [50] * 3), runs([1_000_000] * 3, [200] * 3)) is None
    # 400 apart but not x4: one state
    assert states(runs([1_000_000] * 3, [1_000] * 3), runs([1_000_000] * 3, [1_400] * 3)) is None
    assert STATE_FAULTS == 256


def test_split_chance_is_fishers_one_sided_tail() -> None:
    assert split_chance(6, 6, 0, 6) == pytest.approx(1 / math.comb(12, 6))
    assert split_chance(0, 6, 0, 6) == pytest.approx(1.0)
    # as uneven as 3 of 6 against 3 of 6 or more: half the ways or more
    assert split_chance(3, 6, 3, 6) > 0.5
    assert split_chance(9, 18, 0, 18) < 1 - CONFIDENCE


def judgement(verdict: Verdict = Verdict.OK, band: float = 0.03) -> Judgement:
    return Judgement((1.0,), band, BandSource.TOLERANCE, verdict, "x1.02 within band", estimate=1.02)


def test_a_substantial_share_slower_in_the_slow_state_fails_the_total() -> None:
    old = runs([3_000_000] * 18, [300] * 18)
    new = runs([3_900_000] * 9 + [2_700_000] * 9, [12_000] * 9 + [300] * 9)
    j = with_states(judgement(Verdict.NOISY), states(old, new), confidence=CONFIDENCE)
    assert j.verdict is Verdict.SLOWER
    assert j.ratio == pytest.approx(1.3)
    assert j.reason.startswith("x1.30 in 9 of 18 new processes, beyond band +3% (tolerance): a substantial share")
    assert "9 of 18 new and 0 of 18 old" in j.reason


def test_a_split_that_could_be_chance_is_too_noisy_to_decide_until_more_pairs() -> None:
    old = runs([3_000_000] * 6, [300] * 6)
    new = runs([3_900_000] * 3 + [2_700_000] * 3, [12_000] * 3 + [300] * 3)
    j = with_states(judgement(), states(old, new), confidence=CONFIDENCE)
    assert j.verdict is Verdict.NOISY
    assert "could still be chance (p 0.091); more pairs (--fxprof-pairs) decide it" in j.reason


@pytest.mark.parametrize(
    ("new_totals", "new_faults", "old_faults"),
    [
        pytest.param([3_900_000] * 2 + [3_000_000] * 16, [12_000] * 2 + [300] * 16, [300] * 18, id="too-few-moved"),
        pytest.param([3_030_000] * 9 + [3_000_000] * 9, [12_000] * 9 + [300] * 9, [300] * 18, id="within-the-band"),
        # unchanged code whose processes land in either state alike: both sides split, no side moved
        pytest.param(
            [3_900_000] * 9 + [3_000_000] * 9, [12_000] * 9 + [300] * 9, [12_000] * 9 + [300] * 9, id="both-sides"
        ),
    ],
)
def test_a_split_the_change_did_not_make_leaves_the_verdict(
    new_totals: list[int], new_faults: list[int], old_faults: list[int]
) -> None:
    old = runs([3_000_000] * 9 + ([3_900_000] * 9 if old_faults[0] > 1000 else [3_000_000] * 9), old_faults)
    found = states(old, runs(new_totals, new_faults))
    assert found is not None
    assert found.moved < SUBSTANTIAL_SHARE or found.high_ratio <= 1.03
    before = judgement()
    assert with_states(before, found, confidence=CONFIDENCE) == before


# Memory facts ----------------------------------------------------------------------------------------------


def test_memory_of_an_item_sums_its_nodes_bytes_and_its_modules_faults() -> None:
    rs = [run(3_000_000, 5_000, attn_faults=4_000), run(3_000_000, 5_200, attn_faults=4_200)]
    held = (1_000, 500, 200, 300)
    assert memory_of(NODES, held, rs, [0, 1], ["attn"]) == (1_500, 4_100)
    assert memory_of(NODES, held, rs, [0, 2], []) == (1_200, None)  # an operator type: no module
    assert memory_of(NODES, (), rs, [0], ["attn"]) == (None, 4_100)  # bytes not seen
    assert total_memory(NODES, held, rs) == (2_000, 5_100)
    assert item_modules("pattern", "h.*", ["h.0", "h.1"]) == ["h.0", "h.1"]
    assert item_modules("module", "h.0", []) == ["h.0"]
    assert item_modules("op", "torch.relu", []) == []
    assert memory((None, None), (None, None)) is None


def test_memory_text_says_what_changed() -> None:
    m = Memory(12_100_000, 17_400_000, 40, 1_340)
    assert m.text() == "+5.3 MB a call (12.1 -> 17.4 MB), +1,300 page faults a call (40 -> 1,340)"
    assert Memory(1_000_000, 1_000_000, 40, 100).text() == ""  # the same bytes, a few faults: nothing to say
    assert Memory(None, None, 0, 4_064).text() == "+4,064 page faults a call (0 -> 4,064)"


# In the paired rule and the stored gate -------------------------------------------------------------------


def test_the_paired_total_is_the_plain_call_and_says_the_memory_and_overhead() -> None:
    old = entry(runs([3_000_000] * 6, [300] * 6, attn_faults=0))
    new = entry(
        runs([3_900_000] * 6, [12_300] * 6, attn_faults=12_000), allocated=(8_600_000, 400_000, 200_000, 300_000)
    )
    c = compare_pairs(old, new, PairedPolicy(), against="main")
    assert c.status is Status.REGRESSION
    assert c.total is not None
    assert c.total.ratio == pytest.approx(1.3)
    assert c.total.memory == Memory(1_500_000, 9_500_000, 300, 12_300)
    assert c.total.overhead[0] == pytest.approx(1.05)
    assert c.total.overhead[1] == pytest.approx(1.05)
    assert c.total.overhead_note == ""
    assert "6 of 6 new and 0 of 6 old" in c.total.states
    # the node times did not move: the allocator's cost is the plain call's alone, and its faults name the module
    assert c.blame is not None
    assert c.blame.by_memory
    assert c.blame.lead is not None
    assert c.blame.lead.where == "attn"
    assert c.blame.share == pytest.approx(12_000 / 12_000)
    attn = next(a for a in c.aggregates if a.kind is Kind.MODULE and a.where == "attn")
    assert attn.memory == Memory(1_000_000, 9_000_000, 0, 12_000)


def test_unchanged_nodes_slower_only_in_the_instrumented_pass_are_held_to_the_profilers_overhead() -> None:
    # the plain call unchanged; the instrumented pass 25 % slower on the new side, each node with it
    old = entry(runs([3_000_000] * 6, [300] * 6, instrumented=1.04))
    new = entry(runs([3_000_000] * 6, [300] * 6, instrumented=1.30, node_ns=[round(t * 1.25) for t in BASE]))
    c = compare_pairs(old, new, PairedPolicy(), against="main")
    assert c.total is not None
    assert c.total.overhead_note.startswith("the profiler's overhead grew from x1.04 to x1.30 of the plain call")
    assert c.status is Status.PASS
    slower_nodes = [v for v in c.nodes if v.judgement.ratio > 1.2]
    assert slower_nodes
    assert all(v.verdict is Verdict.OK for v in slower_nodes)
    assert all("the profiler's overhead grew x1.25 on the new side" in v.reason for v in slower_nodes)


def test_nodes_slower_beyond_the_overhead_still_fail() -> None:
    old = entry(runs([3_000_000] * 6, [300] * 6, instrumented=1.04))
    new = entry(runs([3_000_000] * 6, [300] * 6, instrumented=1.30, node_ns=(2_400_000, *BASE[1:])))
    c = compare_pairs(old, new, PairedPolicy(), against="main")
    assert c.status is Status.REGRESSION
    mm = next(v for v in c.nodes if v.node.name == "mm")
    assert mm.verdict is Verdict.SLOWER


def test_the_stored_gate_says_the_states_and_memory_of_the_plain_call() -> None:
    baseline = entry(runs([3_000_000] * 5, [300] * 5))
    current = entry([run(3_900_000, 12_300, attn_faults=12_000)], allocated=(8_600_000, 400_000, 200_000, 300_000))
    c = compare(baseline, current, Policy())
    assert c.total is not None
    assert c.total.verdict is Verdict.SLOWER
    assert "1 of 1 new and 0 of 5 old" in c.total.states
    assert c.total.memory == Memory(1_500_000, 9_500_000, 300, 12_300)
    assert c.blame is not None
    assert c.blame.lead is not None
    assert c.blame.lead.where == "attn"


def test_blame_by_memory_needs_a_slower_total_and_a_module_that_holds_the_faults() -> None:
    old = entry(runs([3_000_000] * 6, [300] * 6))
    new = entry(runs([3_900_000] * 6, [12_300] * 6, attn_faults=4_000))  # attn holds a third: no lead
    c = compare_pairs(old, new, PairedPolicy(), against="main")
    assert c.status is Status.REGRESSION
    assert c.blame is None
    assert c.total is not None
    assert blame(c.nodes, c.aggregates, total=replace(c.total, memory=None)) is None


def with_node_faults(r: Run, faults: Sequence[int]) -> Run:
    return replace(r, node_faults=tuple(faults))


def changed_attention_entry(runs_: Sequence[Run]) -> BaselineEntry:
    """The new side of a change to ``attn``'s code: one node added there (a float64 round trip)."""
    added = info("to", "attn", "torch.Tensor.double")
    nodes = (*NODES[:2], added, *NODES[2:])
    widened = [replace(r, node_ns=(*r.node_ns[:2], 50_000, *r.node_ns[2:]), node_spread_ns=(0,) * 5) for r in runs_]
    return BaselineEntry(
        CAPTURE, ENV, PROTOCOL, Tolerances(0.05, 0.03), nodes, tuple(widened), allocated=(600_000,) * 5
    )


def test_an_unchanged_node_slower_by_the_page_faults_of_memory_freed_elsewhere_is_held() -> None:
    # attn's code changed; mlp's relu, unchanged, now takes 3,000 page faults a call in the graphs and x1.6 the time
    old = entry([with_node_faults(r, (0, 0, 0, 0)) for r in runs([3_000_000] * 6, [300] * 6)])
    slow_relu = (*BASE[:2], 640_000, BASE[3])
    new_runs = [with_node_faults(r, (0, 0, 0, 3_000, 0)) for r in runs([3_300_000] * 6, [3_300] * 6, node_ns=slow_relu)]
    c = compare_pairs(old, changed_attention_entry(new_runs), PairedPolicy(), against="main")
    relu = next(v for v in c.nodes if v.node.name == "relu")
    assert relu.judgement.ratio == pytest.approx(1.6)
    assert relu.verdict is Verdict.OK
    assert (
        "its nodes took +3,000 page faults a call in the graphs, where the code of module attn changed" in relu.reason
    )
    mlp = next(a for a in c.aggregates if a.kind is Kind.MODULE and a.where == "mlp")
    assert mlp.verdict is Verdict.OK
    # without the faults, the same slowdown of unchanged code stands
    quiet = [with_node_faults(r, (0, 0, 0, 0, 0)) for r in new_runs]
    c = compare_pairs(old, changed_attention_entry(quiet), PairedPolicy(), against="main")
    assert next(v for v in c.nodes if v.node.name == "relu").verdict is Verdict.SLOWER


def test_where_no_code_changed_a_node_slower_by_its_page_faults_is_held_while_the_users_call_is_not_slower() -> None:
    """No code changed; in these processes the allocator makes relu, not the others, take 3,000 page faults a call
    in the graphs and x1.6 the time: where the plain call is as fast as before that is the processes' allocator
    state, not relu's code; where the plain call is slower too, or relu took no more faults, the node stands."""
    old = entry([with_node_faults(r, (0, 0, 0, 0)) for r in runs([3_000_000] * 6, [300] * 6)])
    slow_relu = (*BASE[:2], 640_000, BASE[3])

    def new(total_ns: int, relu_faults: int) -> BaselineEntry:
        kept = runs([total_ns] * 6, [300] * 6, node_ns=slow_relu)
        return entry([with_node_faults(r, (0, 0, relu_faults, 0)) for r in kept])

    c = compare_pairs(old, new(3_000_000, 3_000), PairedPolicy(), against="main")
    relu = next(v for v in c.nodes if v.node.name == "relu")
    assert relu.judgement.ratio == pytest.approx(1.6)
    assert relu.verdict is Verdict.OK
    assert "its nodes took +3,000 page faults a call in the graphs, while the call as the user makes it is x1.000" in (
        relu.reason
    )
    assert c.status is Status.PASS
    # the stored gate holds it too, and fails it without the faults
    for faults, verdict in ((3_000, Verdict.OK), (0, Verdict.SLOWER)):
        stored = compare(old, replace(new(3_000_000, faults), runs=new(3_000_000, faults).runs[:1]), Policy())
        assert next(v for v in stored.nodes if v.node.name == "relu").verdict is verdict
    # too noisy to decide (x1.0 in some pairs, x2.5 in others), with the faults: held as well, not left undecided
    spiky = [
        with_node_faults(run(3_000_000, 300, node_ns=(*BASE[:2], ns, BASE[3])), (0, 0, 3_000, 0))
        for ns in (400_000, 1_000_000, 400_000, 1_000_000, 420_000, 980_000)
    ]
    c = compare_pairs(old, entry(spiky), PairedPolicy(), against="main")
    assert next(v for v in c.nodes if v.node.name == "relu").verdict is Verdict.OK
    assert c.status is Status.PASS
    quiet = [with_node_faults(r, (0, 0, 0, 0)) for r in spiky]
    assert (
        next(
            v for v in compare_pairs(old, entry(quiet), PairedPolicy(), against="main").nodes if v.node.name == "relu"
        ).verdict
        is Verdict.NOISY
    )
    # the user's call slower too: the node is part of what slowed it
    c = compare_pairs(old, new(3_600_000, 3_000), PairedPolicy(), against="main")
    assert next(v for v in c.nodes if v.node.name == "relu").verdict is Verdict.SLOWER
    # no more faults: the same slowdown stands
    c = compare_pairs(old, new(3_000_000, 0), PairedPolicy(), against="main")
    assert next(v for v in c.nodes if v.node.name == "relu").verdict is Verdict.SLOWER


def test_where_no_code_changed_the_users_call_holds_only_a_slowdown_it_would_show_or_the_faults_can_pay_for() -> None:
    """No code changed; relu is x3 slower (+800 us) with more page faults a call, and the user's call is not slower.
    In a 60 ms call that extra is inside the call's band, so the call says nothing of relu; 300 faults (at
    ``FAULT_NS`` each) cannot pay for it, and relu fails (a slower layer in a training step is such a node); 3,000
    can, and relu is held. In a 6 ms call the extra would have shown, and relu is held whatever its faults. A relu
    too noisy to decide claims no slowdown, and its faults hold it as before."""

    def compared(call_ns: int, faults: int, relu_ns: Sequence[int] = (1_200_000,) * 6) -> tuple[Verdict, str]:
        old = entry([with_node_faults(r, (0, 0, 0, 0)) for r in runs([call_ns] * 6, [300] * 6)])
        kept = [run(call_ns, 300, node_ns=(*BASE[:2], ns, BASE[3])) for ns in relu_ns]
        new = entry([with_node_faults(r, (0, 0, faults, 0)) for r in kept])
        c = compare_pairs(old, new, PairedPolicy(), against="main")
        assert c.total is not None
        assert c.total.verdict is Verdict.OK
        relu = next(v for v in c.nodes if v.node.name == "relu")
        return relu.verdict, relu.reason

    assert 300 * FAULT_NS < 800_000 <= 3_000 * FAULT_NS
    verdict, reason = compared(60_000_000, 300)
    assert verdict is Verdict.SLOWER
    assert "page faults" not in reason
    verdict, reason = compared(60_000_000, 3_000)
    assert verdict is Verdict.OK
    assert "its nodes took +3,000 page faults a call in the graphs" in reason
    assert compared(6_000_000, 300)[0] is Verdict.OK
    spiky = (400_000, 2_400_000) * 3  # x1 and x6 in turn: too noisy to decide, and more than 256 faults can pay for
    assert compared(60_000_000, 0, spiky)[0] is Verdict.NOISY
    verdict, reason = compared(60_000_000, 256, spiky)
    assert verdict is Verdict.OK
    assert "its nodes took +256 page faults a call in the graphs" in reason


def test_a_plain_call_that_slowed_more_than_the_instrumented_pass_is_said() -> None:
    # the user's call 30 % slower, the instrumented pass as before: the extra time is where the graphs do not pay it
    old = entry(runs([3_000_000] * 6, [300] * 6, instrumented=1.0))
    new = entry(runs([3_900_000] * 6, [12_300] * 6, instrumented=3_000_000 / 3_900_000, attn_faults=12_000))
    c = compare_pairs(old, new, PairedPolicy(), against="main")
    assert c.total is not None
    assert c.total.overhead_note.startswith("the plain call slowed more than the instrumented pass")
    assert c.total.overhead[1] == pytest.approx(3_000_000 / 3_900_000)
    assert c.status is Status.REGRESSION  # the total, the plain call, fails; no node is held for it


def test_the_stored_gate_holds_unchanged_nodes_to_the_profilers_overhead_too() -> None:
    # this run's instrumented pass 25 % slower than the baseline's, its plain call as fast: no node is slower
    baseline = entry(runs([3_000_000] * 5, [300] * 5, instrumented=1.04))
    current = entry(runs([3_000_000], [300], instrumented=1.30, node_ns=[round(t * 1.25) for t in BASE]))
    c = compare(baseline, current, Policy(node_tolerance=0.1))
    assert c.total is not None
    assert c.total.overhead_note.startswith("the profiler's overhead grew from x1.04 to x1.30 of the plain call")
    assert c.status is Status.PASS
    assert all(v.verdict is not Verdict.SLOWER for v in c.nodes)


def test_an_unchanged_item_that_a_few_processes_made_noisy_is_held_to_its_median() -> None:
    """A node whose code did not change, x2 and x1.6 in two pairs of eighteen (the allocator's state in those
    processes), within a few percent in the others: the mean leaves it too noisy to decide, the median within its
    band; a node whose pairs mostly lie beyond its band stays too noisy, and so does one with too few pairs."""
    from pytest_fxprof.judge.memory import ROBUST_PAIRS, held_to_the_median
    from pytest_fxprof.judge.paired import judge_pairs
    from pytest_fxprof.records.verdicts import NodeVerdict

    def verdict(ratios: Sequence[float]) -> NodeVerdict:
        j = judge_pairs([1_000_000.0] * len(ratios), [1_000_000.0 * r for r in ratios], 0.05, BandSource.TOLERANCE)
        return NodeVerdict(NODES[0], 1e6, 1e6, 1.0, 0.0, gates=True, judgement=j)

    spiky = [0.99, 2.01, 1.0, 1.02, 0.97, 1.03, 0.95, 0.98, 0.96, 0.99, 1.59, 0.94, 1.04, 1.01, 1.03, 1.0, 0.99, 0.97]
    assert verdict(spiky).verdict is Verdict.NOISY
    (held,), _ = held_to_the_median([verdict(spiky)], [])
    assert held.verdict is Verdict.OK
    assert "the median of its pairs, x0.99, lies within the band" in held.reason
    mostly = [1.2, 1.3, 0.9, 1.25, 1.1, 1.4, 0.95, 1.15, 1.3, 1.2]  # most pairs slower: the mean's verdict stands
    (kept,), _ = held_to_the_median([verdict(mostly)], [])
    assert kept.verdict is verdict(mostly).verdict
    few = spiky[: ROBUST_PAIRS - 1]
    (kept,), _ = held_to_the_median([verdict(few)], [])
    assert kept.verdict is verdict(few).verdict


def test_a_failed_total_that_neither_times_nor_faults_place_leads_with_the_only_code_that_changed() -> None:
    # attn's code changed (a small node added, its matmul faster by more); the plain call 30 % slower, its faults
    # unchanged: no module's time and no module's faults hold the slowdown, the changed attention is all that differs
    old = entry(runs([3_000_000] * 6, [300] * 6))
    faster_mm = (1_150_000, *BASE[1:])
    new = changed_attention_entry(runs([3_900_000] * 6, [300] * 6, node_ns=faster_mm))
    new = replace(new, runs=tuple(replace(r, node_ns=(*r.node_ns[:2], 5_000, *r.node_ns[3:])) for r in new.runs))
    c = compare_pairs(old, new, PairedPolicy(), against="main")
    assert c.status is Status.REGRESSION
    assert c.blame is not None
    assert c.blame.by_change
    assert not c.blame.by_memory
    assert c.blame.lead is not None
    assert c.blame.lead.where == "attn"
    lines = blame_lines(c)
    assert "the only code that changed: the plain call lost +" in lines[0], lines
    # nothing changed in the code: no lead, as before
    same = entry(runs([3_900_000] * 6, [300] * 6))
    assert compare_pairs(old, same, PairedPolicy(), against="main").blame is None
