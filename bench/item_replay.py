"""Replays every item of recorded checks against a revision through the paired rule, pair by pair, to compare
variants of the rule on the same pairs: how many pairs a test takes, how many end undecided or fail with nothing
changed, and how often a planned slowdown is caught.

    .venv/bin/python bench/item_replay.py REPORTS [REPORTS ...] --orders 30 --out bench/item_replay.json

The reports are the JSON reports (``--fxprof-report``) of checks whose tests were measured in many pairs
(``bench/suite_cost.py --keep DIR -- --fxprof-pairs 12``): each node that gates, each aggregate and the total hold
their ratio pair by pair. Each test is replayed in ``--orders`` random orders of its pairs, the same order for
all its items: from 3 pairs (the plugin's start) one pair at a time, judging each item on the pairs so far with
``judge.paired.judge_pairs`` at the item's band, floor and corrected confidence, until the test fails (an item
is slower: a node that gates, any aggregate, the total), no item that gates is too noisy to decide (it passes),
or the pairs run out (undecided). The plugin's other
rules (pairs left out, a module held by its scope, code changed) do not apply to unchanged code and are left out.
``--limits 4,5,6`` replays each variant again with at most that many pairs a test (a test not decided by then ends
undecided): what a check capped at fewer pairs than the plugin's limit of 18 would save and lose.

``--slow node+10`` multiplies, in turn, each gating node of 1 ms or more by 1.10 (and each aggregate holding it,
and the total, by its share of them); ``total+5`` multiplies every item by 1.05. A slowed test is *caught* where it
fails, and *named* (``node+10``) where the slowed node or an aggregate of which it is a fifth or more is slower.

Variants (``VARIANTS``): ``mean``, the rule as it is; ``median``, an item whose mean lies beyond its band but
whose median pair lies within it is within it, not too noisy to decide; ``moderated`` and ``trend``, each node's
and aggregate's spread pooled with a prior fitted to the test's items (empirical Bayes, flat or as a function of
the item's time); ``wider1.25`` and ``wider1.5``, a node's or aggregate's interval that much wider to confirm a
slowdown; ``resolve2.5`` and ``resolve3``, a total decided once its pairs tell a slowdown of 2.5 or 3 bands from none
(the plugin's 2).

    .venv/bin/python bench/item_replay.py /tmp/reports --condense bench/pairs12_20.json.gz
    .venv/bin/python bench/item_replay.py bench/pairs12_20.json.gz --orders 30 --slow none node+10 total+5 \
        --variants mean,median,moderated,trend,wider1.25,wider1.5 --out bench/item_replay_20.json
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import itertools
import json
import math
import random
import statistics
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_fxprof.judge import paired
from pytest_fxprof.judge.aggregates import LEVEL_ITEMS
from pytest_fxprof.judge.band import corrected_confidence, t_quantile
from pytest_fxprof.judge.paired import CONFIDENCE, MIN_PASSING_PAIRS, Interval, judge_pairs
from pytest_fxprof.records.verdicts import BandSource, Judgement, Verdict

START = MIN_PASSING_PAIRS
"""The pairs a test starts with in the plugin (``--start`` replays another start: ``--start 4``, the start before
a total resolved and within its band passed from 3 pairs, which the variant ``pass3`` replayed then)."""
MIN_PAIRS_KEPT = 4
"""A test measured in fewer pairs than this is left out: its pairs could not be reordered."""
SCALE = 1e9


@dataclass
class Item:
    name: str
    kind: str
    band: float
    floor: float
    confidence: float
    ratios: list[float]
    baseline_ns: float
    members: tuple[str, ...] = ()
    total: bool = False
    gates: bool = True


@dataclass
class Test:
    source: str
    test_id: str
    items: list[Item]
    nodes: dict[str, float] = field(default_factory=dict)
    """Each gating node's key and baseline time (ns)."""


def load(paths: list[Path]) -> list[Test]:
    """The tests of reports (files, or folders of them) and of condensed files (``.json.gz``, ``--condense``)."""
    tests = []
    files = [f for p in paths for f in (sorted(p.glob("*.json*")) if p.is_dir() else [p])]
    for f in files:
        if f.name.endswith(".json.gz"):
            for t in json.loads(gzip.decompress(f.read_bytes())):
                kept = [Item(**{**i, "members": tuple(i["members"])}) for i in t["items"]]
                tests.append(Test(t["source"], t["test_id"], kept, t["nodes"]))
            continue
        data = json.loads(f.read_text())
        for p in data.get("profiles", []):
            if "against" not in p:
                continue
            items: list[Item] = []
            nodes: dict[str, float] = {}
            for n in p.get("nodes", []):
                if n.get("gates") and n.get("ratios"):
                    items.append(
                        Item(
                            n["key"], "node", n["band"], n.get("floor", 0.0), CONFIDENCE, n["ratios"], n["baseline_ns"]
                        )
                    )
                    nodes[n["key"]] = n["baseline_ns"]
            for a in p.get("aggregates", []):
                if a.get("ratios"):  # a small aggregate fails a test when slower; only one that gates keeps it going
                    level = a.get("level_items") or 0
                    strictness = min(1.0, LEVEL_ITEMS / level) if level else 1.0  # as ``Group.strictness``
                    items.append(
                        Item(
                            f"{a['kind']}:{a.get('name', '')}",
                            a["kind"],
                            a["band"],
                            a.get("floor", 0.0),
                            corrected_confidence(CONFIDENCE, strictness),
                            a["ratios"],
                            a["baseline_ns"],
                            tuple(a.get("members", ())),
                            gates=bool(a.get("gates")),
                        )
                    )
            total = p.get("total") or {}
            if total.get("ratios"):
                items.append(Item("total", "total", total["band"], 0.0, CONFIDENCE, total["ratios"], 0.0, total=True))
            lengths = {len(i.ratios) for i in items}
            if items and min(lengths) > MIN_PAIRS_KEPT:
                tests.append(Test(f.name, p.get("test_id", "?"), items, nodes))
    return tests


def judged(item: Item, ratios: list[float]) -> Judgement:
    old = [SCALE] * len(ratios)
    new = [SCALE * r for r in ratios]
    return judge_pairs(
        old,
        new,
        item.band,
        BandSource.TOLERANCE,
        confidence=item.confidence,
        floor=item.floor,
        resolve=item.total,
    )


def rule_mean(item: Item, ratios: list[float]) -> Verdict:
    return judged(item, ratios).verdict


def rule_median(item: Item, ratios: list[float]) -> Verdict:
    j = judged(item, ratios)
    edge = math.log1p(item.band)
    if (
        j.verdict is Verdict.NOISY
        and math.log(j.estimate or 1.0) > edge
        and statistics.median(math.log(r) for r in ratios) <= edge
    ):
        return Verdict.OK
    return j.verdict


# Moderated spreads (empirical Bayes, Smyth 2004, as limma's ``fitFDist``): each item's variance is pooled with a
# prior fitted to the variances of all the test's items, so that an item whose few pairs agree by chance is not
# trusted alone. Tried here and not taken (BENCHMARKS.md, "Each pair in its own order").


def _digamma(x: float) -> float:
    r = 0.0
    while x < 6:
        r -= 1 / x
        x += 1
    f = 1 / (x * x)
    return r + math.log(x) - 0.5 / x - f * (1 / 12 - f * (1 / 120 - f * (1 / 252 - f * (1 / 240 - f / 132))))


def _trigamma(x: float) -> float:
    r = 0.0
    while x < 6:
        r += 1 / (x * x)
        x += 1
    f = 1 / (x * x)
    return r + 1 / x + f / 2 + (1 / x) * f * (1 / 6 - f * (1 / 30 - f * (1 / 42 - f / 30)))


def _tetragamma(x: float) -> float:
    r = 0.0
    while x < 6:
        r -= 2 / x**3
        x += 1
    f = 1 / (x * x)
    return r - f - 1 / x**3 - f * f * (1 / 2 - f * (1 / 6 - f * (1 / 6 - f * 3 / 10)))


def _trigamma_inverse(x: float) -> float:
    if x > 1e7:
        return 1 / math.sqrt(x)
    if x < 1e-6:
        return 1 / x
    y = 0.5 + 1 / x
    for _ in range(50):
        tri = _trigamma(y)
        dif = tri * (1 - tri / x) / _tetragamma(y)
        y += dif
        if -dif / y < 1e-8:
            break
    return y


def _prior_of(e: list[float], spread: float, df: int) -> tuple[float, float]:
    """(d0, shift) from the log variances' deviations ``e`` and their spread."""
    evar = spread - _trigamma(df / 2)
    if evar <= 0:
        return math.inf, 0.0
    d0 = 2 * _trigamma_inverse(evar)
    return d0, _digamma(d0 / 2) - math.log(d0 / 2)


def fit_prior(variances: list[float], df: int) -> tuple[float, float]:
    """The prior's degrees of freedom and variance from the items' variances of ``df`` degrees of freedom each."""
    e = [math.log(v) - _digamma(df / 2) + math.log(df / 2) for v in variances if v > 0]
    if len(e) < 3:
        return 0.0, 0.0
    d0, shift = _prior_of(e, statistics.variance(e), df)
    return d0, math.exp(statistics.fmean(e) + shift)


def fit_trend(variances: list[float], sizes: list[float], df: int) -> tuple[float, Callable[[float], float] | None]:
    """As ``fit_prior``, the prior's variance a function of the item's time (log-linear: limma-trend)."""
    pts = [(math.log(v), math.log(max(size, 1.0))) for v, size in zip(variances, sizes, strict=True) if v > 0]
    if len(pts) < 5:
        return 0.0, None
    e = [z - _digamma(df / 2) + math.log(df / 2) for z, _ in pts]
    xs = [x for _, x in pts]
    mx, me = statistics.fmean(xs), statistics.fmean(e)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - me) for x, y in zip(xs, e, strict=True)) / sxx if sxx > 0 else 0.0
    a = me - b * mx
    resid = [y - (a + b * x) for x, y in zip(xs, e, strict=True)]
    d0, shift = _prior_of(e, sum(r * r for r in resid) / (len(resid) - 2), df)
    return d0, lambda size: math.exp(a + b * math.log(max(size, 1.0)) + shift)


def _moderated(
    items: list[Item], pairs: list[list[float]], d0: float, prior: Callable[[Item], float] | None
) -> list[Verdict]:
    """Each node's and aggregate's variance pooled with ``prior(item)`` of ``d0`` degrees of freedom (Smyth's
    moderated t), the total as it is."""
    n = len(pairs[0])
    out = []
    for i, rs in zip(items, pairs, strict=True):
        if i.total or not d0 or prior is None:
            out.append(judged(i, rs).verdict)
            continue
        x = [math.log(r) for r in rs]
        mean, df = statistics.fmean(x), n - 1 + d0
        var = (d0 * prior(i) + (n - 1) * statistics.variance(x)) / df if math.isfinite(d0) else prior(i)
        half = t_quantile(i.confidence, int(min(df, 1000))) * math.sqrt(var / n)
        edge = math.log1p(i.band)
        if mean - half > 0 and mean > edge:
            out.append(Verdict.SLOWER)
        elif mean > edge:
            out.append(Verdict.NOISY)
        else:
            out.append(Verdict.OK)
    return out


def _spreads(items: list[Item], pairs: list[list[float]]) -> list[tuple[Item, float]]:
    """The nodes' and aggregates' variances of their log ratios."""
    return [
        (i, statistics.variance(math.log(r) for r in rs)) for i, rs in zip(items, pairs, strict=True) if not i.total
    ]


def rule_moderated(items: list[Item], pairs: list[list[float]]) -> list[Verdict]:
    """Each node's and aggregate's spread moderated toward one prior fitted to the test's items."""
    d0, s0 = fit_prior([v for _, v in _spreads(items, pairs)], len(pairs[0]) - 1)
    return _moderated(items, pairs, d0, lambda _: s0)


def rule_trend(items: list[Item], pairs: list[list[float]]) -> list[Verdict]:
    """As ``rule_moderated``, the prior's variance a function of the item's time (limma-trend)."""
    spreads = _spreads(items, pairs)
    d0, s0 = fit_trend([v for _, v in spreads], [i.baseline_ns for i, _ in spreads], len(pairs[0]) - 1)
    return _moderated(items, pairs, d0, None if s0 is None else lambda i: s0(i.baseline_ns))


def rule_wider(factor: float) -> Callable[[list[Item], list[list[float]]], list[Verdict]]:
    """The rule as it is, but a node's or aggregate's interval ``factor`` times as wide to confirm a slowdown: room
    for a part of the noise that every pair of a check shares (``bench/check_spread.py``)."""

    def rule(items: list[Item], pairs: list[list[float]]) -> list[Verdict]:
        out = []
        for i, rs in zip(items, pairs, strict=True):
            j = judged(i, rs)
            if not i.total and j.verdict is Verdict.SLOWER:
                logs = tuple(math.log(r) for r in rs)
                interval = Interval(logs, i.confidence)
                if interval.mean - factor * interval.half_width <= 0:
                    out.append(Verdict.NOISY)
                    continue
            out.append(j.verdict)
        return out

    return rule


def rule_resolve(bands: float) -> Callable[[list[Item], list[list[float]]], list[Verdict]]:
    """The rule as it is, but the total's pairs need only tell a slowdown of ``bands`` bands from none (the plugin's
    ``judge.paired.RESOLVE`` is 2): fewer pairs where a check's pairs spread widely, a slowed total passed more
    often."""

    def rule(items: list[Item], pairs: list[list[float]]) -> list[Verdict]:
        kept = paired.RESOLVE
        paired.RESOLVE = bands
        try:
            return per_item(rule_mean)(items, pairs)
        finally:
            paired.RESOLVE = kept

    return rule


def per_item(rule: Callable[[Item, list[float]], Verdict]) -> Callable[[list[Item], list[list[float]]], list[Verdict]]:
    return lambda items, pairs: [rule(i, rs) for i, rs in zip(items, pairs, strict=True)]


VARIANTS: dict[str, Callable[[list[Item], list[list[float]]], list[Verdict]]] = {
    "mean": per_item(rule_mean),
    "median": per_item(rule_median),
    "moderated": rule_moderated,
    "trend": rule_trend,
    "wider1.25": rule_wider(1.25),
    "wider1.5": rule_wider(1.5),
    "resolve2.5": rule_resolve(2.5),
    "resolve3": rule_resolve(3.0),
}


def slowed(test: Test, how: str) -> Iterator[tuple[str, list[Item]]]:
    """The test's items with one planned slowdown, for each that ``how`` plans."""
    if how == "none":
        yield "", test.items
    elif how == "total+5":
        yield "total", [dataclasses.replace(i, ratios=[r * 1.05 for r in i.ratios]) for i in test.items]
    elif how == "node+10":
        busy = sum(test.nodes.values()) or 1.0
        for key, ns in test.nodes.items():
            if ns < 1e6:
                continue
            out = []
            for i in test.items:
                if i.name == key:
                    factor = 1.10
                elif i.total:
                    factor = 1 + 0.10 * ns / busy
                elif key in i.members:
                    factor = 1 + 0.10 * ns / max(i.baseline_ns, ns)
                else:
                    factor = 1.0
                out.append(dataclasses.replace(i, ratios=[r * factor for r in i.ratios]))
            yield key, out


KEPT: dict[str, int] = {}
"""Why a test took a pair beyond the start: the kind of each item too noisy to decide after a pair, and whether it
looked slower (``beyond``) or the total's pairs spread too much (``resolve``), counted over every replay."""


def sequential(
    items: list[Item],
    order: list[int],
    rule: Callable[[list[Item], list[list[float]]], list[Verdict]],
    start: int = START,
    limit: int | None = None,
) -> tuple[str, int, list[str]]:
    """How the test ends (pass, regression, undecided) with its pairs in ``order``, after how many, and which
    items were slower; ``limit``: the most pairs a test may take (else the pairs recorded)."""
    n_max = min(len(i.ratios) for i in items)
    if limit is not None:
        n_max = min(n_max, limit)
    for n in range(start, n_max + 1):
        verdicts = list(zip(items, rule(items, [[i.ratios[k] for k in order[:n]] for i in items]), strict=True))
        slower = [i.name for i, v in verdicts if v is Verdict.SLOWER]
        if slower:
            return "regression", n, slower
        noisy = [i for i, v in verdicts if v is Verdict.NOISY and i.gates]
        if not noisy:
            return "pass", n, []
        for i in noisy:
            estimate = math.exp(statistics.fmean(math.log(i.ratios[k]) for k in order[:n]))
            why = f"{i.kind}:{'beyond' if estimate > 1 + i.band else 'resolve'}"
            KEPT[why] = KEPT.get(why, 0) + 1
    return "undecided", n_max, []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--orders", type=int, default=20)
    parser.add_argument("--slow", choices=("none", "node+10", "total+5"), nargs="+", default=["none"])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=START, help="the pairs a test starts with")
    parser.add_argument(
        "--limits", default="", help="comma-separated: replay each variant with at most this many pairs a test"
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--condense", type=Path, help="write the reports' tests here (.json.gz) and stop")
    args = parser.parse_args()
    tests = load(args.reports)
    if args.condense:
        args.condense.write_bytes(gzip.compress(json.dumps([dataclasses.asdict(t) for t in tests]).encode(), mtime=0))
        return
    lengths = [len(t.items[0].ratios) for t in tests]
    print(f"{len(tests)} tests, {min(lengths)}-{max(lengths)} pairs", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    limits: list[int | None] = [int(x) for x in args.limits.split(",") if x] or [None]
    for how, variant, limit in itertools.product(args.slow, args.variants.split(","), limits):
        rule = VARIANTS[variant]
        rng = random.Random(args.seed)
        ends: list[tuple[str, int, bool]] = []
        per_test: dict[str, list[int]] = {}
        for test in tests:
            n = min(len(i.ratios) for i in test.items)
            orders = [rng.sample(range(n), n) for _ in range(args.orders)]
            for key, items in slowed(test, how):
                for order in orders:
                    status, pairs, slower = sequential(items, order, rule, args.start, limit)
                    named = bool(key) and any(s == key for s in slower)
                    if how == "node+10" and not named:
                        named = any(
                            i.name in slower and key in i.members and test.nodes[key] >= 0.2 * i.baseline_ns
                            for i in items
                            if not i.total
                        )
                    ends.append((status, pairs, named))
                    per_test.setdefault(test.test_id.rsplit("[", 1)[-1].rstrip("]"), []).append(pairs)
        count = len(ends)
        row = {
            "slow": how,
            "variant": variant,
            "limit": limit,
            "replays": count,
            "pairs_mean": round(statistics.fmean(p for _, p, _ in ends), 2),
            "ended_at_start": round(sum(p == args.start for _, p, _ in ends) / count, 3),
            "failed": round(sum(s == "regression" for s, _, _ in ends) / count, 4),
            "undecided": round(sum(s == "undecided" for s, _, _ in ends) / count, 4),
            "named": round(sum(n for _, _, n in ends) / count, 4) if how == "node+10" else None,
            "pairs_by_model": {k: round(statistics.fmean(v), 2) for k, v in sorted(per_test.items())},
        }
        row["kept_by"] = dict(sorted(KEPT.items(), key=lambda kv: -kv[1]))
        KEPT.clear()
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        kept = {"reports": [str(p) for p in args.reports], "tests": len(tests), "start": args.start, "rows": rows}
        args.out.write_text(json.dumps(kept, indent=1) + "\n")


if __name__ == "__main__":
    main()
