"""Which reference workload divides the machine's speed out of a model's total best, between processes.

    .venv/bin/python bench/reference_choice.py --processes 7

Each of ``--processes`` fresh processes (tuned allocator, one thread, no grad) times, in every pass
after ``--warmup``, three NumPy workloads that share no kernel with torch and the plain forward of
ResNet18 (batch 1): ``cache`` (element-wise work and a sort on 128 KiB, the first half of
``pytest_fxprof.measure.machine.ReferenceWorkload``), ``stream`` (a multiply-add streaming over 8 MiB, the
second half) and ``wide`` (element-wise work on 2 MiB). Per process it keeps the medians. The table
gives, per candidate, the standard deviation between processes of log(model / reference): the smaller,
the less of the machine's drift is left in the total the gate compares. ``both`` is the product of
``cache`` and ``stream`` (their sum is what the profiler times).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

CANDIDATES = ("cache", "stream", "wide")


def child(warmup: int, passes: int) -> None:
    import numpy as np
    import torch
    import torchvision

    from pytest_fxprof.measure.machine import tune_allocator

    tune_allocator()
    torch.set_num_threads(1)
    model = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    rng = np.random.default_rng(0)
    small, stream, wide = rng.standard_normal(1 << 14), rng.standard_normal(1 << 20), rng.standard_normal(1 << 18)
    out = np.empty_like(stream)

    def timed(fn: Callable[[], object]) -> int:
        start = time.perf_counter_ns()
        fn()
        return time.perf_counter_ns() - start

    def cache() -> None:
        acc = small
        for _ in range(4):
            acc = np.tanh(acc * 0.5) + np.sqrt(np.abs(acc))
        np.sort(acc)

    def streaming() -> None:
        np.multiply(stream, 1.0001, out=out)
        np.add(out, stream, out=out)

    def widened() -> None:
        acc = wide
        for _ in range(3):
            acc = np.tanh(acc * 0.5) + np.abs(acc)

    samples: dict[str, list[int]] = {name: [] for name in ("model", *CANDIDATES)}
    with torch.no_grad():
        for i in range(warmup + passes):
            times = {"cache": timed(cache), "stream": timed(streaming), "wide": timed(widened)}
            times["model"] = timed(lambda: model(x))
            if i >= warmup:
                for name, t in times.items():
                    samples[name].append(t)
    print(json.dumps({name: statistics.median(v) for name, v in samples.items()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--passes", type=int, default=12)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.child:
        child(ns.warmup, ns.passes)
        return
    rows: list[dict[str, float]] = []
    for _ in range(ns.processes):
        cmd = [sys.executable, __file__, "--child", "--warmup", str(ns.warmup), "--passes", str(ns.passes)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print("process  model ms  " + "  ".join(f"{c:>9}" for c in CANDIDATES))
    for i, row in enumerate(rows, 1):
        refs = "  ".join(f"{row[c] / 1e6:>6.3f} ms" for c in CANDIDATES)
        print(f"{i:>7}  {row['model'] / 1e6:>8.2f}  {refs}")
    print("sd of log(model / reference) between processes:")
    print(f"  none (raw model time): {statistics.stdev(math.log(r['model']) for r in rows):.1%}")
    for c in CANDIDATES:
        print(f"  {c}: {statistics.stdev(math.log(r['model'] / r[c]) for r in rows):.1%}")
    both = statistics.stdev(math.log(r["model"] / math.sqrt(r["cache"] * r["stream"])) for r in rows)
    print(f"  both (cache and stream): {both:.1%}")


if __name__ == "__main__":
    main()
