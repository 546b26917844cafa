"""What a profile's disturbance figures read on a quiet machine and beside CPU-bound neighbours.

    .venv/bin/python bench/disturbance.py --repeats 2 --hogs 2

Profiles each model (``bench/quality_models.py``: ResNet18, MobileNetV3-small, the encoder, RegNetY-400MF,
EfficientNet-B0) in this process with ``profile_module`` at one thread, 5 warm-up and 20 kept passes, first
with nothing else started, then with ``--hogs`` processes that spin on the CPU (``while True: pass``, started
here and killed at the end, whatever ends the script). Prints per profile every figure of its
``Disturbance`` and whether the rules call it busy, and writes them as JSON (``--out``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from dataclasses import asdict
from pathlib import Path

from gate_quality import neighbours
from quality_models import build

from pytest_fxprof.measure.profiler import profile_module
from pytest_fxprof.records.measurement import Protocol

MODELS = ("resnet18", "mobilenet", "encoder", "regnet", "efficientnet")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2, help="profiles per model and condition (2)")
    parser.add_argument("--hogs", type=int, default=2, help="CPU-bound neighbours in the busy condition (2)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "disturbance.json", help="JSON results")
    ns = parser.parse_args()
    protocol = Protocol(warmup=5, passes=20, threads=1, processes=1)
    rows = []
    for condition, count in (("quiet", 0), (f"{ns.hogs} hogs", ns.hogs)):
        with neighbours(count, 0, script="while True: pass"):
            for name in MODELS:
                model, x = build(name)
                for k in range(ns.repeats):
                    p = profile_module(model, (x,), {}, name=name, protocol=protocol, flops=False)
                    d = p.disturbance
                    rows.append({"condition": condition, "model": name, "repeat": k, **asdict(d), "busy": d.busy})
                    print(f"{condition:8} {name:13} {k}: busy={d.busy!s:5} {d.figures}", flush=True)
    out = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "protocol": asdict(protocol), "rows": rows}
    ns.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {ns.out}")


if __name__ == "__main__":
    main()
