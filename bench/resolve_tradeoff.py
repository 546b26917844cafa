"""What the confidence of the total's resolve (``judge.paired.RESOLVE_CONFIDENCE``) costs in pairs and buys in
detection, from the pairs that unchanged checks recorded (no measuring here).

    cd bench && ../.venv/bin/python resolve_tradeoff.py suite_cost_5_learned_totals.jsonl \
        suite_cost_5_shifted.jsonl suite_cost_5_final.jsonl suite_cost_20_learned.jsonl \
        suite_cost_gpt64_learned_fork.jsonl > resolve_tradeoff.jsonl

Reads each test of unchanged code (``bench/suite_cost.py`` lines whose tests recorded ``total.ratios``, the total's
ratio in each pair), then, per confidence and seed, replays its check many times on the paired rule's total
(``judge.paired.judge_pairs`` with ``resolve``): pairs drawn from the test's own recorded ratios (with
replacement), from ``--fxprof-pairs``' default up to its limit, as long as the total is too noisy to decide. It
counts the pairs a test took, how many stopped at the fewest, and how often the total failed; then the same with
every ratio 5 % higher (``+5 %``: a slowdown on top of what the test's pairs showed) and with the ratios centred on
1 first (``centred +5 %``: on top of none). Only the total: a node or aggregate that looks slower also adds
pairs, alike at every confidence.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
from pathlib import Path
from typing import Any

from pytest_fxprof.judge import paired
from pytest_fxprof.judge.paired import PAIRED_TOTAL_TOLERANCE, judge_pairs
from pytest_fxprof.records.verdicts import BandSource, Verdict
from pytest_fxprof.settings import _PAIRS, MORE_PAIRS

CONFIDENCES = (0.999, 0.995, 0.99, 0.975)


def recorded(paths: list[Path]) -> list[tuple[str, list[float]]]:
    """Each unchanged test's log ratios of the total, pair by pair."""
    out = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else {}
            for name, test in (row.get("tests") or {}).items():
                ratios = (test.get("total") or {}).get("ratios")
                if ratios and test.get("condition", "none") == "none":
                    out.append((name, [math.log(r) for r in ratios]))
    return out


def check(rng: random.Random, pool: list[float], shift: float) -> tuple[Verdict, int]:
    """One check of a test's total, its pairs' log ratios drawn from ``pool`` plus ``shift``: its verdict and
    pairs."""
    logs = [rng.choice(pool) + shift for _ in range(_PAIRS)]
    while True:
        ratios = [math.exp(x) for x in logs]
        j = judge_pairs(
            [1e6] * len(ratios), [1e6 * r for r in ratios], PAIRED_TOTAL_TOLERANCE, BandSource.TOLERANCE, resolve=True
        )
        if j.verdict is not Verdict.NOISY or len(logs) >= _PAIRS + MORE_PAIRS:
            return j.verdict, len(logs)
        logs.append(rng.choice(pool) + shift)


def replay(tests: list[tuple[str, list[float]]], confidence: float, seed: int, repeats: int) -> dict[str, Any]:
    paired.RESOLVE_CONFIDENCE = confidence
    rng = random.Random(seed)
    pairs, failed, caught, caught_centred = [], 0, 0, 0
    slowed = math.log(1.05)
    for _, logs in tests:
        centre = statistics.fmean(logs)
        for _ in range(repeats):
            verdict, n = check(rng, logs, 0.0)
            pairs.append(n)
            failed += verdict is Verdict.SLOWER
            caught += check(rng, logs, slowed)[0] is Verdict.SLOWER
            caught_centred += check(rng, logs, slowed - centre)[0] is Verdict.SLOWER
    n = len(pairs)
    return {
        "confidence": confidence,
        "seed": seed,
        "checks": n,
        "mean_pairs": round(statistics.fmean(pairs), 3),
        "at_fewest": round(sum(p == _PAIRS for p in pairs) / n, 3),
        "most_pairs": max(pairs),
        "unchanged_failed": failed,
        "caught_plus5": round(caught / n, 4),
        "caught_centred_plus5": round(caught_centred / n, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="bench/suite_cost.py JSON lines")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=40, help="checks replayed per test and seed")
    args = parser.parse_args()
    tests = recorded(args.paths)
    print(json.dumps({"tests": len(tests), "files": [str(p) for p in args.paths]}))
    for confidence in CONFIDENCES:
        for seed in range(1, args.seeds + 1):
            print(json.dumps(replay(tests, confidence, seed, args.repeats)))


if __name__ == "__main__":
    main()
