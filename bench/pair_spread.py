"""How much the pairs of unchanged checks against a revision disagree, and what that asks of ``--fxprof-pairs``
and of an undecided check: read from the checks ``bench/ab_quality.py`` recorded (no measuring here).

    .venv/bin/python bench/pair_spread.py bench/ab_quality.jsonl bench/ab_unchanged.jsonl \
        bench/ab_quality_blame.jsonl

For every check of unchanged code (condition ``none``) that recorded its items: the sample standard deviation of
the total's log ratio over its pairs, their quantiles, and for each number of pairs how many of those checks the
paired rule's total could decide (its interval at ``CONFIDENCE`` no wider than ``RESOLVE`` bands:
``judge.paired.can_decide``). Then how many of those checks ended with an item that gates too noisy to decide
and nothing failed: the checks the ``undecided`` status now counts (they passed with a warning before it).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

from pytest_fxprof.judge.paired import MIN_DECIDING_PAIRS, PAIR_SPREAD, can_decide

QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)


def unchanged_checks(paths: list[Path]) -> list[dict[str, Any]]:
    out = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else {}
            if row.get("type") == "check" and row.get("condition") == "none" and row.get("items"):
                out.append(row)
    return out


def total_spread(check: dict[str, Any]) -> float:
    (total,) = (i for i in check["items"] if i["kind"] == "total")
    return statistics.stdev(math.log(r) for r in total["ratios"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checks", nargs="+", type=Path, help="JSON lines written by bench/ab_quality.py --out")
    args = parser.parse_args()
    checks = unchanged_checks(args.checks)
    spreads = sorted(total_spread(c) for c in checks)
    median = statistics.median(spreads)
    print(f"{len(checks)} checks of unchanged code; the total's spread between pairs (sd of log ratios):")
    print("  " + ", ".join(f"q{q:g} {spreads[round(q * (len(spreads) - 1))]:.4f}" for q in QUANTILES))
    print(f"  median {median:.4f} (the rule assumes PAIR_SPREAD = {PAIR_SPREAD:g})")
    print("pairs  totals that could be decided at that spread")
    for n in range(2, 9):
        decided = sum(can_decide(n, s) for s in spreads)
        mark = "  <- MIN_DECIDING_PAIRS" if n == MIN_DECIDING_PAIRS else ""
        print(f"{n:5}  {decided}/{len(spreads)}{mark}")
    undecided = [c for c in checks if c["status"] == "pass" and c["noisy"]]
    print(f"ended undecided (an item that gates too noisy to decide, nothing failed): {len(undecided)}/{len(checks)}")
    for c in undecided:
        print(f"  {c['model']}: {', '.join(c['noisy'])} after {c['pairs']} pairs")


if __name__ == "__main__":
    main()
