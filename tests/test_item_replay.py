"""Unit tests of ``bench/item_replay.py``'s replay of one test's pairs (``sequential``): where a test ends, after
how many pairs and on which items, with hand-made ratios (nothing measured, no model)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_fxprof.judge import paired
from pytest_fxprof.judge.paired import CONFIDENCE, MIN_DECIDING_PAIRS, MIN_PASSING_PAIRS


def _load() -> object:
    """The bench script as a module of its own name (its dataclasses look it up in ``sys.modules``), without putting
    ``bench/`` on the path of the whole test session."""
    path = Path(__file__).resolve().parents[1] / "bench" / "item_replay.py"
    spec = importlib.util.spec_from_file_location("item_replay", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["item_replay"] = module
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    import item_replay
else:
    item_replay = sys.modules.get("item_replay") or _load()

Item = item_replay.Item
IN_ORDER = list(range(8))


@pytest.fixture(autouse=True)
def _kept_cleared() -> None:
    item_replay.KEPT.clear()


def total(ratios: list[float]) -> item_replay.Item:
    return Item("total", "total", 0.03, 0.0, CONFIDENCE, ratios, 0.0, total=True)


def node(name: str, ratios: list[float], gates: bool = True) -> item_replay.Item:
    return Item(name, "node", 0.05, 0.0, CONFIDENCE, ratios, 2e6, gates=gates)


STEADY = [1.001, 0.999, 1.000, 1.002, 0.998, 1.001, 0.999, 1.000]
"""Pairs that agree within a fraction of a percent."""
WIDE = [0.80, 1.25, 0.85, 1.20, 0.82, 1.22, 0.84, 1.18]
"""Pairs that cannot tell a slowdown of two bands from none, however many."""
SPREAD = [1.00, 1.03, 0.97, 1.02, 0.98, 1.01, 0.99, 1.00]
"""Pairs that spread by a few percent: the total takes more than the pairs a test starts with."""
RULE = item_replay.VARIANTS["mean"]


def test_steady_pairs_pass_at_the_start() -> None:
    status, pairs, slower = item_replay.sequential([total(STEADY), node("conv", STEADY)], IN_ORDER, RULE)
    assert (status, pairs, slower) == ("pass", MIN_PASSING_PAIRS, [])
    assert dict(item_replay.KEPT) == {}


def test_a_slower_node_fails_once_a_slowdown_can_be_decided() -> None:
    slow = [r * 1.20 for r in STEADY]
    status, pairs, slower = item_replay.sequential([total(STEADY), node("conv", slow)], IN_ORDER, RULE)
    assert (status, pairs, slower) == ("regression", MIN_DECIDING_PAIRS, ["conv"])
    # the pairs before it: the node looked slower beyond its band, too few pairs to say so
    assert dict(item_replay.KEPT) == {"node:beyond": MIN_DECIDING_PAIRS - MIN_PASSING_PAIRS}


def test_a_total_that_spreads_ends_undecided_at_the_limit_or_the_last_pair() -> None:
    items = [total(WIDE), node("conv", STEADY)]
    assert item_replay.sequential(items, IN_ORDER, RULE) == ("undecided", len(WIDE), [])
    assert dict(item_replay.KEPT) == {"total:resolve": len(WIDE) - MIN_PASSING_PAIRS + 1}
    assert item_replay.sequential(items, IN_ORDER, RULE, limit=5) == ("undecided", 5, [])


def test_the_order_chooses_which_pairs_come_first() -> None:
    ratios = [1.000, 1.001, 0.999, 1.000, 0.80, 1.25]
    items = [total(ratios)]
    assert item_replay.sequential(items, [0, 1, 2, 3, 4, 5], RULE)[:2] == ("pass", MIN_PASSING_PAIRS)
    # the two that disagree first: the total cannot be decided from the six
    assert item_replay.sequential(items, [4, 5, 0, 1, 2, 3], RULE)[:2] == ("undecided", 6)


def test_an_item_that_does_not_gate_keeps_no_test_going_but_fails_one_still_going() -> None:
    noisy = node("dropout", WIDE, gates=False)
    assert item_replay.sequential([total(STEADY), noisy], IN_ORDER, RULE)[:2] == ("pass", MIN_PASSING_PAIRS)
    slow = node("dropout", [r * 1.20 for r in STEADY], gates=False)
    # the total decides at the start: too few pairs then to call the item slower, and it keeps nothing going
    assert item_replay.sequential([total(STEADY), slow], IN_ORDER, RULE) == ("pass", MIN_PASSING_PAIRS, [])
    # a total that takes more pairs: the item is slower once a slowdown can be decided
    assert item_replay.sequential([total(SPREAD), slow], IN_ORDER, RULE) == (
        "regression",
        MIN_DECIDING_PAIRS,
        ["dropout"],
    )


def test_a_total_resolved_at_more_bands_decides_sooner_and_the_rule_is_restored() -> None:
    at_two = item_replay.sequential([total(SPREAD)], IN_ORDER, RULE)
    at_three = item_replay.sequential([total(SPREAD)], IN_ORDER, item_replay.VARIANTS["resolve3"])
    assert at_three[0] == "pass"
    assert at_three[1] < at_two[1]
    assert paired.RESOLVE == 2.0
