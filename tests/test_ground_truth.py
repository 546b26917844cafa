"""Unit tests of ``bench/ground_truth.py``'s pure parts: the must-fail rule, the direction the processes agree on,
a total within 5 % of the truth's range, the summary's aggregation and the comparison with the gate's checks, on
hand-made lines (nothing measured, no process started, no model)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load() -> object:
    """The bench script as a module of its own name, without leaving ``bench/`` on the path of the whole test
    session: it imports ``code_changes`` (and that ``ab_quality``, ``ab_tradeoff``, ``gate_quality``) by plain
    import, so ``bench/`` is on the path while it loads, and the sibling modules it brought in are taken out of
    ``sys.modules`` again (the script keeps its own references to them)."""
    path = BENCH / "ground_truth.py"
    before_path, before_modules = list(sys.path), set(sys.modules)
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("ground_truth", path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["ground_truth"] = module
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = before_path
        for name in set(sys.modules) - before_modules - {"ground_truth"}:
            file = getattr(sys.modules[name], "__file__", None) or ""
            if Path(file).resolve().parent == BENCH:
                del sys.modules[name]
    return module


if TYPE_CHECKING:
    import ground_truth
else:
    ground_truth = sys.modules.get("ground_truth") or _load()


def truth(change: str, ratios: list[float], **extra: Any) -> dict[str, Any]:
    """A hand-made truth line of ``ground_truth.py``."""
    n = len(ratios)
    return {
        "type": "truth",
        "family": "vit-pytorch",
        "model": "cait",
        "change": change,
        "kind": "change",
        "module": "patch_transformer.layers.*.*.fn",
        "class": "Attention",
        "design": "interleaved",
        "allocator": "glibc",
        "ratios": ratios,
        "old_ms": [60.0] * n,
        "new_ms": [60.0 * r for r in ratios],
        "old_faults": [1000] * n,
        "new_faults": [9000] * n,
    } | extra


def check(change: str, status: str, total: float | None, **extra: Any) -> dict[str, Any]:
    """A hand-made check line of ``code_changes.py``."""
    return {
        "type": "check",
        "mode": "against",
        "family": "vit-pytorch",
        "model": "cait",
        "change": change,
        "kind": "change",
        "status": status,
        "exit": 1 if status == "regression" else 0,
        "total_ratio": total,
    } | extra


# The must-fail rule ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratios", "expected"),
    [
        ([1.05, 1.05, 1.05], True),  # the median process slower by 5 %
        ([1.00, 1.06, 1.07, 1.00, 1.08], True),  # median x1.06
        ([1.04, 1.04, 1.04, 1.04, 1.04], False),  # 4 % everywhere: neither
        ([0.90, 1.00, 1.00, 1.10, 1.12], True),  # 2 of 5 slower by 10 %: at least a third, whatever the median
        ([1.00, 1.00, 1.00, 1.00, 1.00, 1.10], False),  # 1 of 6 slower by 10 %: under a third
        ([1.00, 1.00, 1.00, 1.00, 1.10, 1.10], True),  # 2 of 6: exactly a third
        ([1.00, 1.00, 1.10], True),  # 1 of 3: a third
        ([], False),
    ],
)
def test_must_fail(ratios: list[float], expected: bool) -> None:
    assert ground_truth.must_fail(ratios) is expected


def test_must_fail_for_a_bimodal_change_slow_in_a_third_of_the_processes() -> None:
    # slower by 40 % in 2 processes of 5, faster in the others: the median says nothing, the third does
    ratios = [0.84, 0.95, 0.97, 1.42, 1.49]
    assert ground_truth.must_fail(ratios)
    assert ground_truth.share_slower(ratios) == pytest.approx(0.4)
    assert ground_truth.direction(ratios) == "mixed"


# Agreement in direction ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratios", "expected"),
    [
        ([1.03, 1.30, 1.021], "slower"),
        ([0.97, 0.90, 0.979], "faster"),
        ([0.98, 1.00, 1.02], "unchanged"),  # the edges count as within
        ([1.03, 1.01], "mixed"),
        ([0.97, 1.03], "mixed"),
        ([1.02, 1.03], "mixed"),  # x1.02 is not above x1.02
        ([], "mixed"),
    ],
)
def test_direction(ratios: list[float], expected: str) -> None:
    assert ground_truth.direction(ratios) == expected


@pytest.mark.parametrize(
    ("direction", "status", "expected"),
    [
        ("slower", "regression", True),
        ("slower", "pass", False),
        ("faster", "pass", True),
        ("faster", "regression", False),
        ("unchanged", "pass", True),
        ("unchanged", "regression", False),
        ("mixed", "regression", None),  # the truth's processes disagree: no verdict can agree or not
        ("slower", "undecided", None),
    ],
)
def test_agrees(direction: str, status: str, expected: bool | None) -> None:
    assert ground_truth.agrees(direction, status) is expected


# Within 5 % of the range -----------------------------------------------------------------------------


def test_within_five_percent_of_the_range() -> None:
    low, high = 1.30, 1.40
    assert ground_truth.within(1.35, low, high)
    assert ground_truth.within(low / 1.05, low, high)  # the edges count
    assert ground_truth.within(high * 1.05, low, high)
    assert not ground_truth.within(low / 1.05 - 1e-6, low, high)
    assert not ground_truth.within(high * 1.05 + 1e-6, low, high)
    assert not ground_truth.within(1.00, low, high)  # the gate saw nothing of a 30 % slowdown
    assert ground_truth.within(1.0, 1.0, 1.0)


# The summary -----------------------------------------------------------------------------------------


def test_truth_of() -> None:
    t = ground_truth.truth_of([1.10, 1.30, 1.20, 1.40, 1.02])
    assert (t["n"], t["min"], t["median"], t["max"]) == (5, 1.02, 1.20, 1.40)
    assert t["direction"] == "mixed"  # x1.02 is not above x1.02
    assert t["share_10"] == pytest.approx(0.8)
    assert t["must_fail"]
    empty = ground_truth.truth_of([])
    assert (empty["n"], empty["must_fail"], empty["direction"]) == (0, False, "mixed")


def test_summary_merges_the_lines_of_one_change_design_and_allocator() -> None:
    lines = [
        truth("cait-talking-heads-broadcast", [1.30, 1.40]),
        truth("cait-talking-heads-broadcast", [1.35], new_faults=[12000]),  # a resumed run's line
        truth("cait-talking-heads-broadcast", [1.00, 1.03], allocator="glibc-tuned", new_faults=[0, 0]),
        truth("cait-talking-heads-broadcast", [1.25, 1.28], design="separate"),
        truth("cait-comment", [0.99, 1.01], kind="neutral", module="", **{"class": ""}),
        {"type": "header"},  # not a truth line
    ]
    rows = {(r["allocator"], r["design"], r["change"]): r for r in ground_truth.summarise(lines)}
    assert len(rows) == 4
    merged = rows[("glibc", "interleaved", "cait-talking-heads-broadcast")]
    assert merged["ratios"] == [1.30, 1.40, 1.35]
    assert (merged["n"], merged["min"], merged["median"], merged["max"]) == (3, 1.30, 1.35, 1.40)
    assert merged["direction"] == "slower"
    assert merged["must_fail"]
    assert merged["share_10"] == 1.0
    assert merged["old_faults"] == 1000
    assert merged["new_faults"] == 9000  # the median of 9000, 9000, 12000
    assert merged["faults"] == [(1000, 9000), (1000, 9000), (1000, 12000)]
    assert merged["old_ms"] == 60.0
    assert merged["new_ms"] == pytest.approx(60.0 * 1.35)
    tuned = rows[("glibc-tuned", "interleaved", "cait-talking-heads-broadcast")]
    assert (tuned["direction"], tuned["must_fail"], tuned["new_faults"]) == ("mixed", False, 0)
    neutral = rows[("glibc", "interleaved", "cait-comment")]
    assert (neutral["kind"], neutral["direction"], neutral["must_fail"]) == ("neutral", "unchanged", False)
    assert rows[("glibc", "separate", "cait-talking-heads-broadcast")]["median"] == pytest.approx(1.265)


# The gate against the truth --------------------------------------------------------------------------


def test_a_check_total_from_the_line_or_its_pairs() -> None:
    assert ground_truth.check_total(check("c", "pass", 1.07)) == 1.07
    pairs = check("c", "pass", None, items=[{"kind": "total", "name": "total", "ratios": [1.0, 1.21]}])
    assert ground_truth.check_total(pairs) == pytest.approx(math.sqrt(1.21))  # the geometric mean, as the gate's
    assert ground_truth.check_total_ratios(pairs) == [1.0, 1.21]
    flagged = check("c", "regression", None, flagged=[{"kind": "total", "name": "total", "ratio": 1.3}])
    assert ground_truth.check_total(flagged) == 1.3
    assert ground_truth.check_total(check("c", "pass", None)) is None


def test_compare_figures() -> None:
    truths = [
        truth("slow", [1.30, 1.40, 1.35]),  # slower, must fail
        truth("bimodal", [0.90, 1.00, 1.45]),  # mixed, must fail (a third slower by 10 %)
        truth("free", [0.99, 1.00, 1.01]),  # unchanged, need not fail
        truth("comment", [1.00, 1.01, 0.99], kind="neutral"),
        truth("slow", [1.00, 1.00, 1.00], allocator="glibc-tuned"),  # another allocator: not joined
    ]
    checks = [
        check("slow", "regression", 1.33, states="the processes fell into two allocator states: ..."),  # agrees
        check("slow", "pass", 1.02),  # wrong, out
        check("slow", "regression", 1.30, mode="baseline"),  # another mode: its own figures
        check("bimodal", "regression", 1.10),  # mixed truth: no direction; within 0.90/1.05..1.45*1.05
        check("free", "pass", None),  # agrees; no total
        check("comment", "regression", 1.04, kind="neutral"),  # wrong (a false alarm), within
        check("comment", "pass", 1.00, kind="neutral"),  # agrees, within
        check("comment", "undecided", 1.00, kind="neutral"),  # no direction, within: undecided on unchanged code
        check("elsewhere", "pass", 1.00),  # no truth: not joined
        {"type": "header"},
    ]
    result = ground_truth.compare(truths, checks, "glibc")
    rows = {(r["mode"], r["change"]): r for r in result["rows"]}
    assert set(rows) == {
        ("against", "slow"),
        ("baseline", "slow"),
        ("against", "bimodal"),
        ("against", "free"),
        ("against", "comment"),
    }
    slow = rows[("against", "slow")]
    assert slow["agrees"] == [True, False]
    assert slow["within"] == [True, False]
    assert slow["states"] == [True, False]
    assert slow["truth"]["must_fail"]
    assert rows[("against", "bimodal")]["agrees"] == [None]
    assert rows[("against", "free")]["within"] == [None]
    against = result["figures"]["interleaved / against"]
    assert against["checks"] == 7
    assert against["direction"] == [3, 5]  # slow 1 of 2, free 1, comment 1 of 2; bimodal, undecided left out
    assert against["within"] == [5, 6]  # slow 1 of 2, bimodal, comment 3
    assert against["must_fail"] == [2, 3]  # slow 1 of 2, bimodal 1
    assert against["must_fail_changes"] == [1, 2]  # bimodal failed every check, slow not
    assert against["neutral_failed"] == [1, 3]
    assert against["neutral_undecided"] == [1, 3]
    baseline = result["figures"]["interleaved / baseline"]
    assert (baseline["checks"], baseline["must_fail"], baseline["must_fail_changes"]) == (1, [1, 1], [1, 1])


def test_compare_keeps_each_design_and_compiled_checks_apart() -> None:
    truths = [truth("slow", [1.30, 1.40]), truth("slow", [0.99, 1.01], design="separate")]
    checks = [check("slow", "regression", 1.35), check("slow", "pass", 1.00, compiled=True)]
    result = ground_truth.compare(truths, checks, "glibc")
    assert set(result["figures"]) == {
        "interleaved / against",
        "interleaved / against compiled",
        "separate / against",
        "separate / against compiled",
    }
    assert result["figures"]["interleaved / against"]["direction"] == [1, 1]
    assert result["figures"]["separate / against"]["direction"] == [0, 1]  # unchanged by this design's truth
    assert result["figures"]["separate / against compiled"]["within"] == [1, 1]


# The environment of a measuring process --------------------------------------------------------------


def test_child_env_clears_the_allocators_variables() -> None:
    user = {"PATH": "/bin", "MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_MAX_": "0", "GLIBC_TUNABLES": "x", "LD_PRELOAD": "y"}
    assert ground_truth.child_env("glibc", user) == {"PATH": "/bin"}
    assert ground_truth.child_env("glibc-tuned", user) == {"PATH": "/bin"} | ground_truth.TUNED
    preload = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
    assert ground_truth.child_env("jemalloc", user, preload) == {"PATH": "/bin", "LD_PRELOAD": preload}
    with pytest.raises(ValueError, match="preload"):
        ground_truth.child_env("tcmalloc", user)
    with pytest.raises(ValueError, match="unknown"):
        ground_truth.child_env("mimalloc", user)
