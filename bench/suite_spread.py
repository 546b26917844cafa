"""How the totals of a suite's checks against a revision spread between checks, against what their pairs predict.

    .venv/bin/python bench/suite_spread.py bench/suite_cost_5_learned_totals.jsonl bench/suite_cost_5_shifted.jsonl

Reads the JSON lines of ``bench/suite_cost.py`` (each test's total ratio per pair, recorded since ``f83fd43``) and
prints, per file and test: the median over the checks of the pairs' spread (standard deviation of the log
ratios), each check's mean ratio, and ``across / within``: the variance of the checks' mean log ratios over the
mean variance their pairs predict for them (the pairs' variance over their number), as ``bench/check_spread.py``
reads stored checks. About 1 where a check's pairs sample all of the noise between checks; well above 1 where
something stays the same within a check and changes between checks (its pairs would not see it, and its
interval would be too narrow). With five checks, values from about 0.1 to 2.8 are within chance.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path


def spread(path: Path) -> None:
    runs = [r for r in map(json.loads, path.read_text().splitlines()) if "run" in r]
    failed = sum(t["failed"] for r in runs for t in r["tests"].values())
    median = statistics.median(r["ratio"] for r in runs)
    print(f"{path}: {len(runs)} checks, x{median:.2f} at the median, {failed} failed")
    for name in runs[0]["tests"]:
        means, predicted, spreads, pairs = [], [], [], []
        for r in runs:
            ratios = (r["tests"][name].get("total") or {}).get("ratios") or []
            if len(ratios) < 2:
                continue
            logs = [math.log(x) for x in ratios]
            sd = statistics.stdev(logs)
            means.append(statistics.mean(logs))
            predicted.append(sd**2 / len(logs))
            spreads.append(sd)
            pairs.append(len(logs))
        if len(means) < 2:
            continue
        across = statistics.variance(means) / statistics.mean(predicted)
        shown = " ".join(f"x{math.exp(m):.3f}" for m in means)
        print(
            f"  {name:20s} pairs' spread {100 * statistics.median(spreads):.1f}%  checks' means {shown}  "
            f"across / within {across:.2f}  pairs {pairs}"
        )


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        spread(Path(arg))
