"""How much a model's profile spreads between fresh processes that profile it as a later side against a revision
does (told how the first pair captured it; no plain forward, flop count or reference workload; one thread), by way:

* ``check``: the capture checked against the module, as the plugin does (the module's eager run and a run of the
  graphs, before the warm-up passes);
* ``skip``: that check left out (``Checker`` runs nothing), as the later pairs did at ``83f798b`` wherever their
  graphs' code was the code the first pair checked;
* ``warmupN``: the check, and ``N`` warm-up passes instead of the protocol's 4.

    .venv/bin/python bench/process_spread.py --suite 20 --ways check,skip --out bench/process_spread_skip.json
    .venv/bin/python bench/process_spread.py --suite 20 --rounds 8 --ways check,warmup8 --out q.json

A first process captures each model of ``bench/suite_models.py``'s suite and writes its capture record. Then each
round starts one fresh process per way, in turn: it builds each model (random weights, seed 0) and profiles it once
(``profile_module``, 4 warm-up and 12 kept passes unless the way says otherwise). Writes per way and model each
process's middle instrumented pass (the 7th of 12 by time) and the phases' seconds, per model and way the spread
between processes (the standard deviation of the log of those middle passes), and for each pair of ways in how
many models the first named spread wider. The processes run one after the other, so the machine's drift over the
rounds is in every way's spread alike.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from shared import header, json_of  # this script's folder, first on sys.path

BENCH = Path(__file__).resolve().parent


def child(way: str, records: Path, suite: str) -> None:
    """One fresh process of ``way``: writes one JSON line per model's profile (or, as ``first``, the records)."""
    sys.path.insert(0, str(BENCH))
    import suite_models
    import torch

    from pytest_fxprof.capture.choose import capture_module
    from pytest_fxprof.measure.profiler import profile_module
    from pytest_fxprof.records.measurement import Protocol
    from pytest_fxprof.store.schema import capture_to_json
    from pytest_fxprof.store.validation import capture_from_json

    torch.set_num_threads(1)
    names = list(suite_models.SUITES[suite])
    if way == "first":
        out = {}
        for name in names:
            model, args, kwargs = suite_models.build(name)
            with torch.no_grad():
                c = capture_module(model, args, kwargs).capture
            out[name] = capture_to_json(c)
        records.write_text(json.dumps(out))
        return
    if way == "skip":
        from pytest_fxprof.capture import verify

        verify.Checker.expected = lambda self: None  # type: ignore[method-assign]
        verify.Checker.problem = lambda self, captured: None  # type: ignore[method-assign]
    warmup = int(way.removeprefix("warmup")) if way.startswith("warmup") else 4
    protocol = Protocol(warmup=warmup, passes=12, threads=1, processes=1)
    known = json.loads(records.read_text())
    result: dict[str, dict[str, float]] = {}
    for name in names:
        model, args, kwargs = suite_models.build(name)
        capture = capture_from_json(known[name], f"records[{name!r}]")
        spent: dict[str, float] = {}
        began = time.perf_counter()
        with torch.no_grad():
            profile = profile_module(
                model,
                args,
                kwargs,
                name=name,
                protocol=protocol,
                flops=False,
                reference=False,
                plain=False,
                spent=spent,
                known=capture,
            )
        spent["all_s"] = time.perf_counter() - began
        kept = sorted(profile.instrumented_samples_ns)
        spent["total_ms"] = kept[len(kept) // 2] / 1e6  # the upper middle pass: the 7th of 12
        result[name] = spent
    print(json.dumps(result))


def run(way: str, records: Path, suite: str) -> dict[str, Any]:
    result: dict[str, Any] | None = json_of(
        [sys.executable, __file__, "--child", way, str(records), suite], way, cwd=BENCH
    )
    return result or {}


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(sys.argv[2], Path(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="20")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--ways", default="check,skip")
    parser.add_argument("--out", type=Path, required=True)
    opts = parser.parse_args()
    ways = opts.ways.split(",")
    processes: dict[str, list[dict[str, Any]]] = {way: [] for way in ways}
    with tempfile.TemporaryDirectory() as tmp:
        records = Path(tmp) / "records.json"
        run("first", records, opts.suite)
        for r in range(opts.rounds):
            for way in ways:
                processes[way].append(run(way, records, opts.suite))
            print(f"round {r + 1} of {opts.rounds}", flush=True)
    names = list(processes[ways[0]][0])
    spread = {
        way: {n: round(statistics.stdev(math.log(p[n]["total_ms"]) for p in processes[way]), 4) for n in names}
        for way in ways
    }
    wider = {f"{b} over {a}": sum(spread[b][n] > spread[a][n] for n in names) for a in ways for b in ways if a != b}
    phases = ("capture_s", "warmup_s", "measuring_s", "all_s")
    per_process = {
        way: {k: round(statistics.median(sum(p[n][k] for n in names) for p in processes[way]), 2) for k in phases}
        for way in ways
    }
    out = {
        **header("process_spread.py", names),
        "spread": spread,
        "median_spread": {way: round(statistics.median(spread[way].values()), 4) for way in ways},
        "wider": wider,
        "process_s": per_process,
        "processes": processes,
    }
    opts.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("median_spread", "wider", "process_s")}))


if __name__ == "__main__":
    main()
