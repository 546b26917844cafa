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
other through the plugin's own history merge). It plans ``gate_quality``'s conditions on the newest recording
(``none``, one node of 1 ms or more +15 % and +25 %, every node of one operator type +30 %, the whole model
+10 %), runs ``--unchanged`` check processes of the unchanged tests and ``--slowed`` check processes of every
condition against each baseline, and prints and writes (``--out``) the failure rate of each: false alarms
under ``none``, detection (failed and named) under every other condition, and how often a check was skipped or
too noisy (never a detection).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

from gate_quality import QUIET, PytestError, run_pytest, tail, test_id, write_tests

RECORDINGS = "recordings"
LOG = "recordings.jsonl"
DEFAULT_MODELS = ("resnet18", "encoder", "mobilenet", "regnet", "efficientnet")


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
    argv = sys.argv[1:]
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record the models' unchanged tests several times")
    rec.add_argument("--work", type=Path, required=True, help="the folder of the tests and recordings")
    rec.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated models")
    rec.add_argument("--times", type=int, default=4, help="recordings (4)")
    rec.add_argument("--every-min", type=float, default=20.0, help="minutes from one recording's start to the next")
    ns = parser.parse_args(argv)
    if ns.command == "record":
        models = [m.strip() for m in ns.models.split(",") if m.strip()]
        record(ns.work, models, ns.times, ns.every_min * 60, extra)


if __name__ == "__main__":
    main()
