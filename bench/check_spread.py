"""How far checks of unchanged code spread from one another, against what their own pairs predict.

    .venv/bin/python bench/check_spread.py bench/ab_unchanged.jsonl bench/ab_quality.jsonl bench/ab_quality_final.jsonl

Reads the checks that ``bench/ab_quality.py`` recorded with ``condition`` ``none`` (nothing slowed: the old and
the new side run the same code), and for each model's total and each of its modules that at least ``--min-checks``
checks measured: the variance between the checks' mean log ratios (``across``), and the variance a check's mean
has from its own pairs' spread (``within``: each check's variance of the log ratios over its pairs, divided by
its pairs, averaged over the checks). Where pairs sample all the noise, ``across / within`` is about 1; above 1,
part of the noise is shared by all pairs of a check (and differs from check to check), which the interval a
check computes from its pairs alone does not see.
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from pair_spread import unchanged_checks


@dataclass(frozen=True)
class Spread:
    model: str
    kind: str
    name: str
    checks: int
    across: float
    within: float


def across_within(checks: list[list[float]]) -> tuple[float, float]:
    """Of one item's checks (each its ratios per pair): the variance between the checks' mean log ratios, and the
    variance a check's mean has from its own pairs (its pairs' variance over their number, averaged)."""
    logs = [[math.log(r) for r in check] for check in checks]
    across = statistics.variance([statistics.mean(one) for one in logs])
    within = statistics.mean([statistics.variance(one) / len(one) for one in logs])
    return across, within


def spreads(paths: list[Path], min_checks: int) -> list[Spread]:
    items: dict[tuple[str, str, str], list[list[float]]] = {}
    for row in unchanged_checks(paths):
        for item in row["items"]:
            ratios = item.get("ratios", [])
            if item.get("kind") in ("total", "module") and len(ratios) >= 4:
                items.setdefault((row["model"], item["kind"], item["name"]), []).append(ratios)
    out: list[Spread] = []
    for (model, kind, name), checks in sorted(items.items()):
        if len(checks) < min_checks:
            continue
        across, within = across_within(checks)
        out.append(Spread(model, kind, name, len(checks), across, within))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", type=Path, nargs="+", help="JSON lines of bench/ab_quality.py")
    parser.add_argument("--min-checks", type=int, default=8)
    args = parser.parse_args()
    rows = spreads(args.paths, args.min_checks)
    print(
        "| model | checks | total: sd between checks | total: across / within | modules "
        "| modules: median [90th pct] across / within |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for model in sorted({r.model for r in rows}):
        mine = [r for r in rows if r.model == model]
        total = next((r for r in mine if r.kind == "total"), None)
        modules = sorted(r.across / r.within for r in mine if r.kind == "module" and r.within > 0)
        sd = f"{math.sqrt(total.across):.1%}" if total else "-"
        ratio = f"{total.across / total.within:.2f}" if total and total.within > 0 else "-"
        checks = total.checks if total else max(r.checks for r in mine)
        mod = f"{statistics.median(modules):.2f} [{modules[int(0.9 * len(modules))]:.2f}]" if modules else "-"
        print(f"| {model} | {checks} | {sd} | {ratio} | {len(modules)} | {mod} |")


if __name__ == "__main__":
    main()
