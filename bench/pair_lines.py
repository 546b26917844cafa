"""Pairs whose processes met two machines: how far each pair's typical node lies from the median pair's, and
what leaving out those beyond ``judge.outliers.OUT_OF_LINE`` changes, read from the checks against a revision
that ``bench/ab_quality.py`` and ``bench/code_changes.py`` recorded (no measuring here).

    .venv/bin/python bench/pair_lines.py bench/ab_quality.jsonl bench/ab_unchanged.jsonl \\
        bench/ab_quality_blame.jsonl bench/ab_memory.jsonl bench/code_changes.jsonl \\
        bench/code_changes_changed_band.jsonl bench/ab_quality_modes.jsonl

A pair's shift is the median log ratio (new over old) of the nodes that weigh ``LINE_SHARE`` of the model or
more, from each node's recorded ratio per pair (rounded to 4 digits) and its old side's time, as
``judge.outliers.pair_shifts`` takes them from the entries. Printed: the quantiles of every pair's distance from
its check's median pair, then for each limit the pairs left out and every check whose verdict changes when its
gating items are judged again (``judge_pairs``, with the bands the check recorded) without them; both verdicts
come from that replay, so the two are read alike. An undecided replay measures more pairs in a real check.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

from pytest_fxprof.judge.outliers import LINE_SHARE, MIN_LINE_NODES, OUT_OF_LINE
from pytest_fxprof.judge.paired import MIN_PAIRS, judge_pairs
from pytest_fxprof.records.verdicts import BandSource, Verdict

LIMITS = (0.05, 0.07, OUT_OF_LINE, 0.15, 0.20)
SCALE = 1e9
"""Ratios become times of this many nanoseconds (``judge_pairs`` takes times, at least 1 ns each)."""


def checks(paths: list[Path]) -> list[dict[str, Any]]:
    out = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            if d.get("type") == "check" and d.get("items") and d.get("mode", "against") == "against":
                out.append(d | {"file": path.name})
    return out


def shifts(check: dict[str, Any]) -> list[float] | None:
    nodes = [it for it in check["items"] if it["kind"] == "node" and it.get("ratios")]
    if not nodes:
        return None
    busy = sum(it.get("baseline_ns", 0) for it in nodes) or 1
    weighty = [it for it in nodes if it.get("baseline_ns", 0) >= LINE_SHARE * busy]
    if len(weighty) < MIN_LINE_NODES:
        return None
    pairs = min(len(it["ratios"]) for it in weighty)
    return [statistics.median(math.log(max(it["ratios"][p], 1e-9)) for it in weighty) for p in range(pairs)]


def left_out(found: list[float], limit: float) -> set[int]:
    """As ``judge.outliers.out_of_line`` decides from the shifts."""
    if len(found) < 3:
        return set()
    centre = statistics.median(found)
    out = {p for p, s in enumerate(found) if abs(s - centre) > math.log1p(limit)}
    return set() if 2 * len(out) >= len(found) or len(found) - len(out) < MIN_PAIRS else out


def verdict(check: dict[str, Any], drop: set[int]) -> str:
    slower = noisy = False
    for it in check["items"]:
        if not it.get("gates") or not it.get("ratios"):
            continue
        ratios = [r for p, r in enumerate(it["ratios"]) if p not in drop]
        j = judge_pairs(
            [SCALE] * len(ratios),
            [r * SCALE for r in ratios],
            it["band"],
            BandSource(it["band_source"]),
            floor=it.get("floor") or 0.0,
            resolve=it["kind"] == "total",
        )
        slower = slower or j.verdict is Verdict.SLOWER
        noisy = noisy or j.verdict is Verdict.NOISY
    return "regression" if slower else "undecided" if noisy else "pass"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path)
    args = parser.parse_args()
    found = [(c, s) for c in checks(args.paths) if (s := shifts(c)) is not None]
    distances = sorted(abs(x - statistics.median(s)) for _, s in found for x in s)
    print(f"{len(found)} checks, {len(distances)} pairs: distance of a pair's typical node from its median pair's")
    for q in (0.5, 0.9, 0.95, 0.99, 0.999, 1.0):
        print(f"  {q:>6.1%}: {math.expm1(distances[min(len(distances) - 1, int(q * len(distances)))]):.1%}")
    for limit in LIMITS:
        out = [(c, left_out(s, limit)) for c, s in found]
        changed = [(c, d) for c, d in out if d and verdict(c, set()) != verdict(c, d)]
        pairs, where = sum(len(d) for _, d in out), sum(1 for _, d in out if d)
        print(f"limit {limit:.0%}: {pairs} pairs left out of {where} checks")
        for c, d in changed:
            what = c.get("condition") or c.get("change")
            print(
                f"  {c['file']} {c.get('model')} {what} (recorded {c['status']}): pairs {sorted(d)} left out, "
                f"replayed {verdict(c, set())} -> {verdict(c, d)}"
            )


if __name__ == "__main__":
    main()
