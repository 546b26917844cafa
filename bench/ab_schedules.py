"""Which schedule of old and new processes gives the check against a revision the closest pairs per second.

    .venv/bin/python bench/ab_schedules.py --out bench/ab_schedules.json --rounds 16
    .venv/bin/python bench/ab_schedules.py --out bench/ab_schedules.json --summary

Measures unchanged code (both sides run the same tree), so every ratio's spread is noise. Each round runs one
pair of each schedule, in an order shuffled per round, so that all three meet the same machine:

* ``duet``: the old and new process at the same time, pass for pass in lock-step, trading their cores pass
  by pass (what ``--fxprof-schedule duet`` runs);
* ``duet, cores kept``: the same, each process left on the core the system gives it;
* ``alternate``: one process after the other, old first in odd rounds (what ``--fxprof-schedule alternate``
  runs).

Each pair's processes are those the plugin starts (``pytest --fxprof-sample`` of a generated test of a model
of ``bench/quality_models.py``), with the default protocol. Per schedule and model it reports the seconds a
pair takes and the standard deviation across pairs of the log ratio new/old: of the total, and of the nodes
of 1 ms or more, of 200 us to 1 ms and under 200 us (median and 90th percentile over the nodes). The paired
rule's interval is proportional to that spread over the square root of the pairs, so a schedule with half
the spread decides with a quarter of the pairs; ``pairs for equal width`` says how many pairs of each
schedule give the interval of 6 duet pairs on the model's largest nodes (1 ms or more; 200 us or more where
it has none), and ``seconds`` what they cost. ``/ speed factor`` is the spread of those nodes once each pair's
ratios are divided by the pair's own speed factor (the time-weighted median of the other nodes' ratios, as
the stored-baseline gate takes it): what that correction would add to a schedule.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_fxprof.against.compare import Against
from pytest_fxprof.against.rounds import PairedTest, Side, run_pair
from pytest_fxprof.measure.sampling import Child, Relaunch
from pytest_fxprof.settings import Settings

BENCH = Path(__file__).resolve().parent
MODELS = ("resnet18", "mobilenet", "encoder")
SCHEDULES = ("duet", "duet, cores kept", "alternate")
SIZES = ((1e6, math.inf, ">= 1 ms"), (2e5, 1e6, "200 us-1 ms"), (0.0, 2e5, "< 200 us"))

TEST = """\
import sys

import pytest

sys.path.insert(0, {bench!r})
from quality_models import build


@pytest.mark.parametrize("name", {models!r})
def test_model(fxprof, name):
    model, x = build(name)
    fxprof(model, x)
"""


def run_of(child: Child) -> dict[str, Any]:
    (call,) = (child.data or {})["calls"].values()
    run: dict[str, Any] = call["entry"]["runs"][0]
    return run


def pair(schedule: str, old: Side, new: Side, test_id: str, request: dict[str, Any], *, k: int) -> dict[str, Any]:
    """One pair of ``schedule`` for one test (the alternate schedule's order is the plugin's: old first in odd
    pairs)."""
    began = time.perf_counter()
    test = PairedTest(test_id, request, 1, 1, math.inf)
    duet = schedule != "alternate"
    got = run_pair(old, new, [test], number=k + 1, duet=duet, cores=None if schedule != "duet, cores kept" else [])
    if test_id in got.failed:
        err = got.failed[test_id]
        raise SystemExit(f"the {err.side.name} side failed ({err.child.problem}):\n{err.child.output[-3000:]}")
    o, n = got.measured[test_id]
    return {"seconds": time.perf_counter() - began, "old": run_of(o), "new": run_of(n)}


def measure(args: argparse.Namespace) -> None:
    models = [m for m in args.models.split(",") if m]
    data: dict[str, Any] = json.loads(args.out.read_text()) if args.out.is_file() else {}
    work = Path(tempfile.mkdtemp(prefix="fxprof-ab-schedules-"))
    try:
        (work / "test_schedules.py").write_text(TEST.format(bench=str(BENCH), models=models))
        relaunch = Relaunch(invocation_dir=work, rootdir=work, inifile=None)
        old, new = Against(None).sides(relaunch)
        request = {"settings": Settings().to_json()}
        rng = random.Random(args.seed)
        for r in range(args.rounds):
            for model in models:
                test_id = f"test_schedules.py::test_model[{model}]"
                for schedule in rng.sample(SCHEDULES, len(SCHEDULES)):
                    got = pair(schedule, old, new, test_id, dict(request), k=r)
                    data.setdefault(model, {}).setdefault(schedule, []).append(got)
                    ratio = got["new"]["instrumented_ns"] / got["old"]["instrumented_ns"]
                    print(
                        f"round {r + 1}/{args.rounds} {model} {schedule}: total x{ratio:.3f}, {got['seconds']:.1f} s",
                        flush=True,
                    )
                args.out.write_text(json.dumps(data) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def sd(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else math.nan


def log_ratio(pair: dict[str, Any], i: int) -> float:
    return math.log(max(pair["new"]["node_ns"][i], 1) / max(pair["old"]["node_ns"][i], 1))


def speed_factor(pair: dict[str, Any], i: int) -> float:
    """The pair's speed factor for node ``i`` as the stored-baseline gate takes it: the time-weighted median of
    the other nodes' log ratios."""
    ranked = sorted(
        (log_ratio(pair, j), pair["old"]["node_ns"][j]) for j in range(len(pair["old"]["node_ns"])) if j != i
    )
    half, seen = sum(w for _, w in ranked) / 2, 0.0
    for value, weight in ranked:
        seen += weight
        if seen >= half:
            return value
    return 0.0


def summary(args: argparse.Namespace) -> None:
    data = json.loads(args.out.read_text())
    print(f"{'model':10} {'schedule':17} {'pairs':>5} {'s/pair':>6} {'total sd':>8}", end="")
    for _, _, label in SIZES:
        print(f" {label + ' sd (median, p90)':>26}", end="")
    print(f" {'largest / speed factor':>22} {'pairs for equal width':>21} {'seconds':>7}")
    for model, schedules in data.items():
        reference = None
        for schedule in SCHEDULES:
            pairs = schedules.get(schedule, [])
            if len(pairs) < 3:
                continue
            logs_total = [math.log(p["new"]["instrumented_ns"] / p["old"]["instrumented_ns"]) for p in pairs]
            old_medians = [
                statistics.median(p["old"]["node_ns"][i] for p in pairs) for i in range(len(pairs[0]["old"]["node_ns"]))
            ]
            cells = []
            node_sds = []
            for low, high, _ in SIZES:
                idx = [i for i, t in enumerate(old_medians) if low <= t < high]
                sds = sorted(sd([log_ratio(p, i) for p in pairs]) for i in idx)
                node_sds.append(statistics.median(sds) if sds else math.nan)
                cells.append(f"{statistics.median(sds):.4f}, {sds[int(0.9 * (len(sds) - 1))]:.4f}" if sds else "-")
            # the largest nodes the model has: those of 1 ms or more, else of 200 us or more
            cls = next(k for k, (low, _, _) in enumerate(SIZES) if any(t >= low for t in old_medians))
            large = [i for i, t in enumerate(old_medians) if t >= SIZES[cls][0]]
            factored = sorted(sd([log_ratio(p, i) - speed_factor(p, i) for p in pairs]) for i in large)
            cells.append(f"{statistics.median(factored):.4f}" if factored else "-")
            seconds = statistics.median(p["seconds"] for p in pairs)
            width = node_sds[cls]  # the model's largest nodes: those that gate alone
            if reference is None:
                reference = width
            equal = 6 * (width / reference) ** 2 if reference else math.nan
            print(f"{model:10} {schedule:17} {len(pairs):>5} {seconds:>6.1f} {sd(logs_total):>8.4f}", end="")
            for c in cells[:-1]:
                print(f" {c:>26}", end="")
            print(f" {cells[-1]:>22}", end="")
            print(f" {equal:>21.1f} {equal * seconds:>7.0f}")
    print("sd: standard deviation across pairs of log(new/old); largest: the model's nodes of 1 ms or more (of 200 us")
    print("or more where it has none); / speed factor: their ratios divided by the pair's time-weighted median of the")
    print("other nodes' ratios (median over the nodes); pairs for equal width: as many pairs of this schedule as give")
    print("the interval of 6 duet pairs on the largest nodes (the spread's square), and their seconds")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="JSON: each pair's runs, per model and schedule")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--summary", action="store_true", help="print the table of what --out holds, run nothing")
    args = parser.parse_args()
    if args.summary:
        summary(args)
    else:
        measure(args)
        summary(args)


if __name__ == "__main__":
    main()
