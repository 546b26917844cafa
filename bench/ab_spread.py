"""How closely the pairs of a check against a revision agree: the spread of their ratios, per size of item.

    .venv/bin/python bench/ab_spread.py REPORT.json [REPORT.json ...]

Reads JSON reports of ``pytest --fxprof-against REF --fxprof-report REPORT.json`` (best on unchanged code, so
that every ratio's spread is noise) and prints, per profile: the pairs, the seconds they took, and the
standard deviation across pairs of the log ratio new/old, for the total, for nodes of 1 ms or more, of
200 us to 1 ms and under 200 us (median and largest over the nodes), and for the aggregates; and the same for
node ratios divided by their pair's total ratio (what a per-pair speed factor would leave). The schedule
that gives the smaller spread in the same time decides more with fewer pairs.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

SIZES = ((1e6, math.inf, ">= 1 ms"), (2e5, 1e6, "200 us - 1 ms"), (0.0, 2e5, "< 200 us"))


def spread(ratios: list[float]) -> float:
    return statistics.stdev(math.log(r) for r in ratios)


def main() -> None:
    for name in sys.argv[1:]:
        report = json.loads(Path(name).read_text(encoding="utf-8"))
        for p in report["profiles"]:
            if "pairs" not in p:
                continue
            total = p["total"]["ratios"]
            seconds = p.get("seconds") or 0.0
            print(
                f"{name}: {p['test_id']} [{p['key']}]: {p['pairs']} pairs in {seconds:.0f} s "
                f"({seconds / p['pairs']:.1f} s a pair), passes {p['protocol']['passes']}"
            )
            print(f"  total: sd {spread(total):.3f}, ratios {' '.join(f'{r:.3f}' for r in total)}")
            logs_total = [math.log(r) for r in total]
            for low, high, label in SIZES:
                nodes = [n for n in p["nodes"] if "ratios" in n and low <= n["baseline_ns"] < high]
                if not nodes:
                    continue
                raw = [spread(n["ratios"]) for n in nodes]
                shared = [
                    statistics.stdev(math.log(r) - t for r, t in zip(n["ratios"], logs_total, strict=True))
                    for n in nodes
                ]
                print(
                    f"  nodes {label:>13} ({len(nodes):3}): sd median {statistics.median(raw):.3f} max "
                    f"{max(raw):.3f}; divided by the pair's total: median {statistics.median(shared):.3f}"
                )
            aggregates = [spread(a["ratios"]) for a in p.get("aggregates", [])]
            if aggregates:
                print(
                    f"  aggregates ({len(aggregates)}): sd median {statistics.median(aggregates):.3f} "
                    f"max {max(aggregates):.3f}"
                )


if __name__ == "__main__":
    main()
