"""What a side process's passes cost with and without the plain forward: a side of a later pair against a
revision times only the instrumented passes (``profile_module(plain=False)``); the first pair's also time the
plain forward in one kept pass of four and the last warm-up pass.

    .venv/bin/python bench/pass_cost.py --suite 20 --rounds 3 --out bench/pass_cost_20.json

One process builds each model of ``bench/suite_models.py``'s suite (random weights, seed 0) and profiles it as a
side does (the default protocol, one thread, no reference workload, no flop count), the plain forward timed and
not in turns, ``--rounds`` times each. Writes per model the median seconds of the warm-up and the kept passes
(the profile's own ``warmup_s`` and ``measuring_s``, capture left out) each way, each way's sum over the suite,
and the ratio of the sums, measured side by side.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="20")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import suite_models
    import torch

    from pytest_fxprof.measure.profiler import profile_module
    from pytest_fxprof.records.measurement import Protocol

    torch.set_num_threads(1)
    protocol = Protocol(warmup=4, passes=12, threads=1, processes=1)
    names = list(suite_models.SUITES[args.suite])
    seconds: dict[str, dict[str, list[float]]] = {n: {"plain": [], "none": []} for n in names}
    for r in range(args.rounds):
        for name in names:
            model, margs, mkwargs = suite_models.build(name)
            ways = ("plain", "none") if r % 2 == 0 else ("none", "plain")  # each way first in turn
            for way in ways:
                spent: dict[str, float] = {}
                with torch.no_grad():
                    profile_module(
                        model,
                        margs,
                        mkwargs,
                        name=name,
                        protocol=protocol,
                        flops=False,
                        reference=False,
                        plain=way == "plain",
                        spent=spent,
                    )
                seconds[name][way].append(spent["warmup_s"] + spent["measuring_s"])
            print(name, r, {w: round(v[-1], 3) for w, v in seconds[name].items()}, flush=True)
    medians = {n: {w: statistics.median(v) for w, v in ways.items()} for n, ways in seconds.items()}
    sums = {w: sum(m[w] for m in medians.values()) for w in ("plain", "none")}
    out: dict[str, Any] = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()}",
        "command": " ".join(sys.argv),
        "rounds": args.rounds,
        "models": medians,
        "sums": sums,
        "ratio": sums["none"] / sums["plain"],
    }
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({"sums": sums, "ratio": round(out["ratio"], 3)}))


if __name__ == "__main__":
    main()
