"""What capturing a suite's models costs a side process against a revision: in its first pair (``auto`` tries
each way in turn) and in its later pairs (told how the first pair captured each model: ``capture_module``'s
``known``), and with the code of another checkout (``--before DIR``).

    .venv/bin/python bench/capture_cost.py --suite 20 --rounds 3 --out bench/capture_cost.json
    .venv/bin/python bench/capture_cost.py --suite 20 --rounds 3 --before /tmp/code_old --out q.json

Each round starts one fresh process per way, in turn (before, first, later): it imports the package, builds
each model of ``bench/suite_models.py``'s suite in the suite's order (random weights, seed 0) and times
``capture_module`` on it, as a side process captures each test of a pair (one thread). The first process writes
each model's capture record; the later process reads it and captures with it. Writes per way and model the
median seconds over the rounds, each way's sum, and the sums' ratios to the first way measured side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from shared import header, json_of  # this script's folder, first on sys.path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

PROCESS = r"""
import json, sys, time
import torch
torch.set_num_threads(1)
sys.path.insert(0, sys.argv[1])
import suite_models
from pytest_fxprof.capture.choose import capture_module
names, records, way = json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
known = json.load(open(records)) if way == "later" else {}
out, captured = {}, {}
for name in names:
    model, args, kwargs = suite_models.build(name)
    options = {}
    if name in known:
        from pytest_fxprof.records.measurement import Capture
        r = known[name]
        options["known"] = Capture(method=r["method"], leaf_modules=tuple(r["leaf_modules"]), detail=r["detail"])
    with torch.no_grad():
        began = time.perf_counter()
        got = capture_module(model, args, kwargs, **options)
        out[name] = time.perf_counter() - began
    c = got.capture
    captured[name] = {"method": c.method, "leaf_modules": list(c.leaf_modules), "detail": c.detail}
if way == "first":
    json.dump(captured, open(records, "w"))
print(json.dumps({"seconds": out, "captured": captured}))
"""


def one(way: str, code: Path, names: list[str], records: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")])}
    result: dict[str, Any] = json_of(
        [sys.executable, "-c", PROCESS, str(BENCH), json.dumps(names), str(records), way], way, env=env
    )
    return result


def main() -> None:
    sys.path.insert(0, str(BENCH))
    import suite_models

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="20", choices=sorted(suite_models.SUITES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, help="a checkout whose package is timed too (its auto capture)")
    parser.add_argument("--out", type=Path, required=True)
    opts = parser.parse_args()
    names = list(suite_models.available(suite_models.SUITES[opts.suite]))
    ways = [("before", opts.before)] if opts.before else []
    ways += [("first", ROOT), ("later", ROOT)]
    seconds: dict[str, dict[str, list[float]]] = {way: {n: [] for n in names} for way, _ in ways}
    same = True
    with tempfile.TemporaryDirectory() as tmp:
        records = Path(tmp) / "records.json"
        for _ in range(opts.rounds):
            got = {}
            for way, code in ways:
                got[way] = one(way, code, names, records)
                for name, s in got[way]["seconds"].items():
                    seconds[way][name].append(s)
            same = same and got["first"]["captured"] == got["later"]["captured"]
    medians = {way: {n: round(statistics.median(v), 4) for n, v in per.items()} for way, per in seconds.items()}
    sums = {way: round(sum(m.values()), 3) for way, m in medians.items()}
    rounds_sums = {
        way: [round(sum(v[i] for v in per.values()), 3) for i in range(opts.rounds)] for way, per in seconds.items()
    }
    result = {
        **header("capture_cost.py", names),
        "median_s": medians,
        "sum_s": sums,
        "round_sums_s": rounds_sums,
        "later_over_first": round(sums["later"] / sums["first"], 3),
        "first_over_before": round(sums["first"] / sums["before"], 3) if "before" in sums else None,
        "later_captured_as_first": same,
    }
    opts.out.write_text(json.dumps(result, indent=1) + "\n")
    print(
        json.dumps(
            {
                k: result[k]
                for k in ("sum_s", "round_sums_s", "later_over_first", "first_over_before", "later_captured_as_first")
            }
        )
    )


if __name__ == "__main__":
    main()
