"""Baselines that learn their runner's drift: record the same models at several times, then check against a
history of recordings and against the newest recording alone.

    .venv/bin/python bench/history_quality.py record --work DIR --times 4 --every-min 20
    .venv/bin/python bench/history_quality.py check --work DIR --unchanged 10 --slowed 6

``record`` writes ``bench/gate_quality.py``'s generated tests into ``DIR`` (once) and records the unchanged
test of each model (``--models``) with ``pytest --fxprof-update``, ``--times`` times, ``--every-min`` minutes
apart (other work on the machine between them is what a runner's drift is made of). Each recording's baseline
files go to ``DIR/recordings/NN/``, and ``DIR/recordings.jsonl`` says when each was taken and the machine's
load then.

``check`` builds, per model, two baselines from those recordings: ``latest`` (the newest recording alone, as a
single ``--fxprof-update`` leaves it) and ``history`` (every recording, oldest first, refreshed one after the
other through the plugin's own history merge, which keeps the default 5). It plans ``gate_quality``'s
conditions on the newest recording (``none``, one node of 1 ms or more +15 % and +25 %, every node of the
heaviest module type +30 %, the whole model +10 %), runs ``--unchanged`` check processes of the unchanged tests
and ``--slowed`` check processes of every condition against each baseline, one after the other, and prints and
writes (``--out``) the failure rate of each: false alarms under ``none``, detection (failed and named) under
every other condition, and how often a check was skipped or too noisy (never a detection).

``bands`` prints, per model and baseline, the bands an unchanged check gets: the nodes that can fail a test
alone (median and widest) and the total, and how many recordings they were learnt from.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from gate_quality import (
    PLAN,
    QUIET,
    Condition,
    PytestError,
    Tally,
    machine,
    plan_model,
    print_table,
    pytest_args,
    read_report,
    run_pytest,
    tail,
    tally_json,
    test_id,
    write_tests,
)

from pytest_fxprof.judge.decision import Policy, compare, learnt_from
from pytest_fxprof.records.measurement import BaselineEntry
from pytest_fxprof.store import history
from pytest_fxprof.store.baseline import BaselineStore, as_file

RECORDINGS = "recordings"
LOG = "recordings.jsonl"
DEFAULT_MODELS = ("resnet18", "encoder", "mobilenet", "regnet", "efficientnet")
CONDITIONS = ("none", "node10pct+15", "node10pct+25", "type+30", "total+10")
VARIANTS = ("latest", "history")


def recordings_of(work: Path, model: str) -> list[tuple[str, BaselineEntry]]:
    """The model's recorded entries, oldest first, each with its recording's date."""
    dates = {}
    for line in (work / LOG).read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        dates[row["recording"]] = row["date"].replace("+00:00", "Z")
    out = []
    for folder in sorted(p for p in (work / RECORDINGS).iterdir() if p.is_dir()):
        recorded = BaselineStore(folder).load(test_id(model, "none"))
        if recorded is not None and folder.name in dates:
            out.append((dates[folder.name], recorded.entries["call0"]))
    return out


def variants(recorded: list[tuple[str, BaselineEntry]]) -> dict[str, BaselineEntry]:
    """``latest``: the newest recording alone; ``history``: every recording, oldest first, each refreshed over the
    one before it through the plugin's own merge (``store.history.carry``), keeping them all."""
    folded: BaselineEntry | None = None
    for date, entry in recorded:
        folded, why = history.carry(folded, entry, history.DEFAULT_KEEP, date)
        if why:
            print(f"  history restarted: {why}")
    assert folded is not None
    date, newest = recorded[-1]
    return {"latest": replace(newest, recorded=date, history=()), "history": folded}


def bands(work: Path, models: list[str]) -> dict[str, dict[str, dict[str, object]]]:
    """Per model and baseline (``latest``, ``history``): the bands the decision gives the nodes that can fail a test
    alone (1 ms or 5 %: median and widest) and the total, as ``compare`` sets them against an unchanged check."""
    out: dict[str, dict[str, dict[str, object]]] = {}
    for model in models:
        recorded = recordings_of(work, model)
        if not recorded:
            continue
        out[model] = {}
        for variant, entry in variants(recorded).items():
            unchanged = replace(entry, runs=entry.runs[:1], history=())
            c = compare(entry, unchanged, Policy())
            gating = [v.band for v in c.nodes if v.gates]
            total = c.total.band if c.total is not None else None
            row: dict[str, object] = {
                "recordings": len(entry.recordings),
                "learnt_from": len(learnt_from(entry, Policy())),
                "gating_nodes": len(gating),
                "node_band_median": round(statistics.median(gating), 4) if gating else None,
                "node_band_max": round(max(gating), 4) if gating else None,
                "total_band": round(total, 4) if total is not None else None,
            }
            out[model][variant] = row
            print(
                f"{model:13} {variant:8} {row['recordings']} recording(s), {row['learnt_from']} learnt from: "
                f"{row['gating_nodes']} gating nodes, band "
                f"median +{gating and statistics.median(gating):.1%}, widest +{gating and max(gating):.1%}; "
                f"total +{total or 0:.1%}"
            )
    return out


def check(work: Path, ns: argparse.Namespace, extra: list[str]) -> None:
    """Check every model's conditions against its ``latest`` and its ``history`` baseline; print and write the
    rates."""
    env = write_tests(work)
    models = [m.strip() for m in ns.models.split(",") if m.strip()]
    plans: dict[str, dict[str, Condition]] = {}
    for variant in VARIANTS:
        shutil.rmtree(work / f"check-{variant}", ignore_errors=True)
    held: dict[str, int] = {}
    for model in models:
        recorded = recordings_of(work, model)
        if not recorded:
            raise SystemExit(f"no recording of {model} in {work / RECORDINGS}")
        built = variants(recorded)
        held[model] = len(built["history"].recordings)
        plans[model] = plan_model(built["latest"], list(CONDITIONS))
        for variant, entry in built.items():
            store = BaselineStore(work / f"check-{variant}")
            for name, condition in plans[model].items():
                if not condition.skipped:
                    store.write(as_file(test_id(model, name), {"call0": entry}))
        print(f"{model}: {held[model]} recordings")
        for name, condition in plans[model].items():
            print(f"  {name:14} {condition.describe()}")
    plan_json = {m: {"conditions": {c: p.to_json() for c, p in plans[m].items()}} for m in models}
    (work / PLAN).write_text(json.dumps({"models": plan_json}, indent=2), encoding="utf-8")
    owner = {test_id(m, c): (m, c) for m in models for c in plans[m] if not plans[m][c].skipped}
    tallies = {v: {m: {c: Tally() for c in plans[m]} for m in models} for v in VARIANTS}
    unchanged = [test_id(m, "none") for m in models]
    slowed = [tid for tid, (m, c) in owner.items() if c != "none"]
    rng = random.Random(ns.seed)
    jobs = [("unchanged", i, unchanged) for i in range(ns.unchanged)]
    jobs += [("slowed", i, rng.sample(slowed, len(slowed))) for i in range(ns.slowed)]
    for phase, index, ids in jobs:
        for variant in VARIANTS:  # side by side: each check process against both baselines, one after the other
            report = work / f"report-{variant}-{phase}-{index}.json"
            args = [*ids, *QUIET, "--fxprof", "--fxprof-baseline-dir", str(work / f"check-{variant}")]
            _, seconds, _ = run_pytest([*args, "--fxprof-report", str(report), *extra], work, env, phase)
            seen = read_report(report)
            failed = []
            for tid in ids:
                model, name = owner[tid]
                tallies[variant][model][name].add(seen.get(tid), plans[model][name])
                if seen.get(tid) is not None and seen[tid].status == "regression":
                    failed.append(f"{model}-{name}")
            print(f"{variant} {phase} {index}: {seconds:.0f} s, failed: {', '.join(failed) or '-'}", flush=True)
    results = {}
    for variant in VARIANTS:
        print(f"\nagainst the {variant} baseline")
        print_table(models, plans, tallies[variant])
        results[variant] = {m: {c: tally_json(t, plans[m][c]) for c, t in tallies[variant][m].items()} for m in models}
    out = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "recordings": [json.loads(line) for line in (work / LOG).read_text(encoding="utf-8").splitlines()],
        "held": held,
        "settings": {"unchanged": ns.unchanged, "slowed": ns.slowed, "seed": ns.seed, "pytest_args": extra},
        "plan": plan_json,
        "results": results,
    }
    ns.out.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {ns.out}")


def record(work: Path, models: list[str], times: int, every_s: float, extra: list[str]) -> None:
    """``times`` recordings of every model's unchanged test, ``every_s`` seconds apart (start to start)."""
    work.mkdir(parents=True, exist_ok=True)
    env = write_tests(work)
    folder = work / RECORDINGS
    folder.mkdir(exist_ok=True)
    done = len([p for p in folder.iterdir() if p.is_dir()])
    for k in range(times):
        began = time.monotonic()
        target = folder / f"{done + k:02d}"
        args = [*(test_id(m, "none") for m in models), *QUIET, "--fxprof-update"]
        args += ["--fxprof-baseline-dir", str(target), *extra]
        load = os.getloadavg()
        when = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        code, seconds, output = run_pytest(args, work, env, f"recording {target.name}")
        if code != 0:
            raise PytestError(f"recording {target.name}: pytest exited {code}\n{tail(output)}")
        line = {"recording": target.name, "date": when, "seconds": round(seconds, 1), "load": load, "models": models}
        with (work / LOG).open("a", encoding="utf-8") as log:
            log.write(json.dumps(line) + "\n")
        print(f"recording {target.name} at {when}: {seconds:.0f} s, load {load[0]:.2f}", flush=True)
        if k + 1 < times:
            time.sleep(max(0.0, every_s - (time.monotonic() - began)))


def main() -> None:
    argv, extra = pytest_args(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record the models' unchanged tests several times")
    rec.add_argument("--work", type=Path, required=True, help="the folder of the tests and recordings")
    rec.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated models")
    rec.add_argument("--times", type=int, default=4, help="recordings (4)")
    rec.add_argument("--every-min", type=float, default=20.0, help="minutes from one recording's start to the next")
    chk = sub.add_parser("check", help="check the conditions against the latest recording and the history")
    chk.add_argument("--work", type=Path, required=True, help="the folder of the tests and recordings")
    chk.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated models")
    chk.add_argument("--unchanged", type=int, default=10, help="check processes of the unchanged tests (10)")
    chk.add_argument("--slowed", type=int, default=6, help="check processes of every condition (6)")
    chk.add_argument("--seed", type=int, default=0, help="seed of the shuffled test order (0)")
    chk.add_argument("--out", type=Path, default=Path(__file__).parent / "history_quality.json", help="JSON results")
    bnd = sub.add_parser("bands", help="the bands of each model's latest recording and of its history")
    bnd.add_argument("--work", type=Path, required=True, help="the folder of the tests and recordings")
    bnd.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated models")
    ns = parser.parse_args(argv)
    if ns.command == "bands":
        bands(ns.work, [m.strip() for m in ns.models.split(",") if m.strip()])
    if ns.command == "check":
        check(ns.work, ns, extra)
    if ns.command == "record":
        models = [m.strip() for m in ns.models.split(",") if m.strip()]
        record(ns.work, models, ns.times, ns.every_min * 60, extra)


if __name__ == "__main__":
    main()
