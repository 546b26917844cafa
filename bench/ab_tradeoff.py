"""The trade-off behind the check against a revision's defaults, replayed from what ``bench/ab_quality.py`` measured.

    .venv/bin/python bench/ab_tradeoff.py bench/ab_quality.jsonl

Every check of ``ab_quality.py`` stored each item's ratio new/old per pair (every node, operator type, module
subtree and the total). This judges each check again with the paired rule (``judge/paired.py``'s
``judge_pairs``) on its first ``n`` pairs, for several pair counts, confidence levels and node tolerances, no
pairs added (a check of unchanged code that the plugin extended is replayed on its first pairs too). A replayed
check fails when a node that gates alone, an aggregate or the total is slower, as the plugin decides.

Prints, per setting: the false alarms over the checks of unchanged code (``none``) and the detection of each
slowed condition, pooled over the models, and the seconds ``n`` pairs take (the median seconds a pair took,
times ``n``). Only checks that measured at least ``n`` pairs count at ``n``. With ``--sequential`` each check
is replayed as the plugin schedules it instead: from ``n`` pairs, one more while an item that gates is
undecided and nothing failed, as far as the check's recorded pairs go; ``s`` is then the mean pairs used.

    .venv/bin/python bench/ab_tradeoff.py bench/ab_quality.jsonl --sequential --pairs 4,6 --confidence 0.999
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from pytest_fxprof.judge.paired import CONFIDENCE, PAIRED_NODE_TOLERANCE, PAIRED_TOTAL_TOLERANCE, judge_pairs
from pytest_fxprof.records.verdicts import BandSource, Verdict

SCALE = 1e9
"""Ratios are replayed as times: the old side at this, the new side at this times the ratio."""


def verdicts(items: list[dict[str, Any]], n: int, confidence: float, node_tolerance: float) -> list[Verdict]:
    """Each gating item's verdict on the check's first ``n`` pairs."""
    out = []
    for item in items:
        if not item["gates"] or len(item["ratios"] or []) < n:
            continue
        tolerance = PAIRED_TOTAL_TOLERANCE if item["kind"] == "total" else node_tolerance
        floor = float(item.get("floor") or 0.0)
        band, source = (floor, BandSource.FLOOR) if floor > tolerance else (tolerance, BandSource.TOLERANCE)
        j = judge_pairs(
            [SCALE] * n,
            [SCALE * r for r in item["ratios"][:n]],
            band,
            source,
            confidence=confidence,
            floor=floor,
            resolve=item["kind"] == "total",
        )
        out.append(j.verdict)
    return out


def failed(items: list[dict[str, Any]], n: int, confidence: float, node_tolerance: float) -> bool:
    return Verdict.SLOWER in verdicts(items, n, confidence, node_tolerance)


def sequential(check: dict[str, Any], start: int, confidence: float, node_tolerance: float) -> tuple[bool, int]:
    """The check replayed as the plugin extends it: ``start`` pairs, then one more while an item that gates is
    undecided and nothing failed, as far as the check's recorded pairs go. Returns whether it failed and the
    pairs it used."""
    recorded = check.get("pairs") or 0
    n = start
    while True:
        seen = verdicts(check["items"], n, confidence, node_tolerance)
        if Verdict.SLOWER in seen:
            return True, n
        if Verdict.NOISY not in seen or n >= recorded:
            return False, n
        n += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("lines", type=Path, nargs="+", help="ab_quality.py's JSON lines")
    parser.add_argument("--pairs", default="3,4,5,6", help="pair counts to replay (3,4,5,6)")
    parser.add_argument("--confidence", default=f"0.99,0.995,{CONFIDENCE}", help="one-sided confidence levels")
    parser.add_argument("--node-tolerance", default=f"0.03,{PAIRED_NODE_TOLERANCE},0.08", help="node bands")
    parser.add_argument(
        "--sequential",
        action="store_true",
        help="replay each check from --pairs pairs on, one more while undecided, as far as its recorded pairs go "
        "(the plugin's schedule); the s column is then the mean pairs used",
    )
    args = parser.parse_args()
    checks = [
        c
        for path in args.lines
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and (c := json.loads(line)).get("type") == "check" and not c.get("args")
    ]
    conditions = sorted({c["condition"] for c in checks}, key=lambda c: (c != "none", c))
    per_pair = statistics.median(c["seconds"] / c["pairs"] for c in checks if c.get("pairs"))
    header = f"{'pairs':>5} {'conf':>6} {'node':>5} {'s':>4}"
    print(header + "".join(f" {c:>13}" for c in conditions))
    for n in (int(x) for x in args.pairs.split(",")):
        for confidence in (float(x) for x in args.confidence.split(",")):
            for tolerance in (float(x) for x in args.node_tolerance.split(",")):
                counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
                used = []
                for c in checks:
                    if (c.get("pairs") or 0) < n:
                        continue
                    tally = counts[c["condition"]]
                    if args.sequential:
                        fails, pairs = sequential(c, n, confidence, tolerance)
                        used.append(pairs)
                    else:
                        fails = failed(c["items"], n, confidence, tolerance)
                    tally[0] += fails
                    tally[1] += 1
                cells = "".join(
                    f" {f'{k}/{m} {k / m:4.0%}' if m else '-':>13}" for k, m in (counts[c] for c in conditions)
                )
                cost = statistics.mean(used) if args.sequential else n * per_pair
                print(f"{n:>5} {confidence:>6} {tolerance:>5} {cost:>4.1f}{cells}")
    print("none: checks of unchanged code that failed (false alarms); the other columns: slowed checks that failed")


if __name__ == "__main__":
    main()
