"""Lines that swapped places (``judge.moved``): time moved between them is no slowdown unless the module holding
them slowed; on injected times, both gates."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from pytest_fxprof.judge.moved import align, scopes
from pytest_fxprof.records.verdicts import Comparison, Status, Verdict
from tests.test_blame import Timed, _keyed, against, fn, stored

BLOCKS = 4


def block(i: int, *, swapped: bool = False, k_scale: float = 1.0, q_scale: float = 1.0) -> list[Timed]:
    """Block ``i``: its attention's query and key projections (500 us each; ``swapped``: the key's line first, each
    scaled as given), the attention itself, and an MLP."""
    q = (fn(f"q{i}", "aten.linear.default", f"h.{i}.attn.query", "model.py:10"), round(500_000 * q_scale))
    k = (fn(f"k{i}", "aten.linear.default", f"h.{i}.attn.key", "model.py:11"), round(500_000 * k_scale))
    return [
        *([k, q] if swapped else [q, k]),
        (fn(f"v{i}", "aten.linear.default", f"h.{i}.attn.value", "model.py:12"), 500_000),
        (fn(f"sdpa{i}", "aten.scaled_dot_product_attention.default", f"h.{i}.attn", "model.py:14"), 600_000),
        (fn(f"fc{i}", "aten.linear.default", f"h.{i}.mlp.c_fc", "model.py:20"), 1_200_000),
        (fn(f"gelu{i}", "aten.gelu.default", f"h.{i}.mlp", "model.py:21"), 150_000),
        (fn(f"down{i}", "aten.linear.default", f"h.{i}.mlp.c_proj", "model.py:22"), 1_200_000),
    ]


def model(**kwargs: float | bool) -> list[Timed]:
    nodes: list[Timed] = []
    for i in range(BLOCKS):
        nodes += block(i, **kwargs)  # type: ignore[arg-type]
    return _keyed(nodes)


def test_an_operation_that_moved_past_others_has_the_module_holding_them_as_its_scope() -> None:
    old = [n for n, _ in model()]
    new = [n for n, _ in model(swapped=True)]
    pairs, added, removed = align(old, new)
    assert len(added) == len(removed) == BLOCKS  # one projection of each block unmatched: it moved
    assert scopes(old, new, pairs) == {(f"h.{i}.attn", "") for i in range(BLOCKS)}


def test_an_operation_replaced_or_renamed_in_place_is_no_move() -> None:
    old = [n for n, _ in model()]
    # the key's projection replaced by a matmul: removed and added, no twin of the same operation
    new = [fn(n.name, "aten.matmul.default", n.module) if n.module.endswith(".key") else n for n in old]
    pairs, added, removed = align(old, new)
    assert added
    assert removed
    assert scopes(old, new, pairs) == set()
    assert scopes(old, old, [(i, i) for i in range(len(old))]) == set()


def test_time_moved_between_swapped_lines_fails_neither_gate() -> None:
    # the key's line now first: it meets colder caches and loses 12 %, the query gains as much; the attention
    # holding both is unchanged
    before, after = model(), model(swapped=True, k_scale=1.12, q_scale=0.88)
    paired = against(before, after, noise=0.005)
    assert paired.status is Status.PASS, [a.reason for a in paired.slower_aggregates]
    held = [
        a
        for a in paired.aggregates
        if a.name in ("h.*.attn.key", "h.*.attn.query") and "only swapped places" in a.reason
    ]
    assert held, "the pattern of the projection that lost time says why it passes"
    assert all(a.verdict is Verdict.OK for a in held)
    assert "pattern h.*.attn" in held[0].reason
    # against a baseline, beyond its +15 % band too
    big = model(swapped=True, k_scale=1.3, q_scale=0.7)
    assert stored(before, big, noise=0.005).status is Status.PASS


def test_swapped_lines_whose_module_slowed_still_fail_and_lead_inside_it() -> None:
    # the key's line moved and the key lost 40 % with nothing gained elsewhere: the attention is slower
    c = against(model(), model(swapped=True, k_scale=1.4), noise=0.005)
    assert c.status is Status.REGRESSION
    assert c.blame is not None
    assert c.blame.lead is not None
    assert c.blame.lead.where.startswith("h.")
    assert ".attn" in c.blame.lead.where
    assert not [a for a in c.aggregates if "only swapped places" in a.reason and a.verdict is Verdict.SLOWER]


def test_a_module_outside_the_swap_that_slowed_still_fails() -> None:
    # lines swapped in the attention at no cost; the MLP's GELU 50 % slower
    after = [(n, round(ns * 1.5) if n.target == "aten.gelu.default" else ns) for n, ns in model(swapped=True)]
    c = against(model(), after, noise=0.005)
    assert c.status is Status.REGRESSION
    assert c.blame is not None
    assert c.blame.lead is not None
    assert c.blame.lead.name == "aten.gelu.default"  # the GELUs: what slowed, in every block's MLP
    assert not [a for a in c.aggregates if "only swapped places" in a.reason]  # nothing in the attention slowed


# Code that changed trades time between its operations (``held_to_changes``) -----------------------------------------


def scaled_block(i: int, *, heads: int = 0, head_ns: int = 100_000, mul: float = 1.0, gelu: float = 1.0) -> list[Timed]:
    """Block ``i`` with a scaling ``mul`` in its attention (100 us); ``heads``: the attention's product written one head
    at a time, ``heads`` matrix products of ``head_ns`` each where one of 600 us was; ``mul`` and ``gelu`` scale those
    nodes' times."""
    out: list[Timed] = []
    for n, ns in block(i):
        if n.target == "aten.scaled_dot_product_attention.default" and heads:
            out += [
                (fn(f"head{i}_{h}", "aten.matmul.default", f"h.{i}.attn", "model.py:44"), head_ns) for h in range(heads)
            ]
        else:
            out.append((n, round(ns * gelu) if n.target == "aten.gelu.default" else ns))
        if n.target == "aten.scaled_dot_product_attention.default":
            out.append((fn(f"scale{i}", "aten.mul.Tensor", f"h.{i}.attn", "model.py:46"), round(100_000 * mul)))
    return out


def blocks(**kwargs: float) -> list[Timed]:
    nodes: list[Timed] = []
    for i in range(BLOCKS):
        nodes += scaled_block(i, **kwargs)  # type: ignore[arg-type]
    return _keyed(nodes)


GATES = pytest.mark.parametrize("gate", [against, stored], ids=["against a revision", "against a baseline"])


@GATES
def test_a_slower_operation_inside_changed_code_that_got_faster_fails_neither_gate(
    gate: Callable[..., Comparison],
) -> None:
    # the attention's product one head at a time: 4 x 100 us where 600 us was, and the scaling mul that follows them
    # 60 % slower: the attention is faster (1,760 us where 1,900 us was), its operator type mul alone slower
    c = gate(blocks(), blocks(heads=4, mul=1.6), noise=0.005)
    assert c.status is Status.PASS, [a.reason for a in c.slower_aggregates]
    mul = next(a for a in c.aggregates if a.name == "aten.mul.Tensor")
    assert mul.verdict is Verdict.OK
    assert re.search(r"inside module h\.\d\.attn, whose code changed and which is (faster|not slower)", mul.reason)


@GATES
def test_changed_code_that_got_slower_still_fails_with_its_operations(gate: Callable[..., Comparison]) -> None:
    # the same loop of 4 x 250 us: the attention is slower (2,360 us), and nothing it holds is held
    c = gate(blocks(), blocks(heads=4, head_ns=250_000, mul=1.6), noise=0.005)
    assert c.status is Status.REGRESSION
    assert not [a for a in c.aggregates if "whose code changed" in a.reason]
    assert c.blame is not None
    assert c.blame.lead is not None
    assert ".attn" in c.blame.lead.where


def test_unchanged_code_beside_changed_code_that_got_faster_is_decided_by_the_smallest_changed_module() -> None:
    # the attention faster as above, and every MLP's GELU 60 % slower, code unchanged: the MLP +3.5 % within its band,
    # the block holding both (its code changed) faster: the GELUs' operator type is the block's trade, held
    c = against(blocks(), blocks(heads=4, mul=1.6, gelu=1.6), noise=0.005)
    assert c.status is Status.PASS
    gelu = next(a for a in c.aggregates if a.name == "aten.gelu.default")
    assert re.search(r"inside module h\.\d, whose code changed and which is faster", gelu.reason), gelu.reason
    # twice as slow, the MLPs +6 % beyond their band: they fail on their own, the block faster or not
    c = against(blocks(), blocks(heads=4, mul=1.6, gelu=2.0), noise=0.005)
    assert c.status is Status.REGRESSION
    assert c.blame is not None
    assert c.blame.lead is not None
    assert re.fullmatch(r"h\.(\*|\d)\.mlp", c.blame.lead.where), c.blame.lead.where
