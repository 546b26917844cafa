"""Does a node's time depend on what its process ran before? With and without the allocator tuning.

    .venv/bin/python bench/process_history.py --repeats 3

Profiles MobileNetV3-small in fresh processes, ``--repeats`` times each way: alone, and after ResNet18
ran in the same process. Prints the quantiles of the per-node ratio (after / alone, medians over the
repeats) and the totals, once with glibc's allocator as it comes and once tuned as the plugin tunes it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, sys
import torch
from torchvision import models
from pytest_fxprof import profile
from pytest_fxprof.measure import machine

if sys.argv[2] == "untuned":
    machine._allocator_state.append("default")  # keep glibc as it comes
if sys.argv[1] == "after":
    profile(models.resnet18(weights=None).eval(), torch.randn(1, 3, 224, 224))
result = profile(models.mobilenet_v3_small(weights=None).eval(), torch.randn(1, 3, 224, 224))
json.dump({"nodes": [n.median_ns for n in result.nodes], "allocator": result.environment.allocator},
          open(sys.argv[3], "w"))
"""


def measure(order: str, allocator: str, repeats: int, tmp: Path) -> list[list[int]]:
    runs = []
    for i in range(repeats):
        out = tmp / f"{order}-{allocator}-{i}.json"
        subprocess.run([sys.executable, "-c", CHILD, order, allocator, str(out)], check=True, capture_output=True)
        runs.append(json.loads(out.read_text())["nodes"])
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for allocator in ("untuned", "tuned"):
            alone = measure("alone", allocator, ns.repeats, Path(tmp))
            after = measure("after", allocator, ns.repeats, Path(tmp))
            a = [statistics.median(v) for v in zip(*alone, strict=True)]
            b = [statistics.median(v) for v in zip(*after, strict=True)]
            ratios = sorted(y / x for x, y in zip(a, b, strict=True))
            q = [ratios[round(p * (len(ratios) - 1))] for p in (0.05, 0.25, 0.5, 0.75, 0.95)]
            print(f"{allocator:8} after/alone per node, quantiles 5/25/50/75/95 %: {' '.join(f'{x:.2f}' for x in q)}")
            print(f"{'':8} totals alone (ms): {[round(sum(r) / 1e6, 2) for r in alone]}")
            print(f"{'':8} totals after (ms): {[round(sum(r) / 1e6, 2) for r in after]}")


if __name__ == "__main__":
    main()
