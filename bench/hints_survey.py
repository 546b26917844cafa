"""Which hints fire on which torchvision models, with the plugin's default thresholds.

    .venv/bin/python bench/hints_survey.py [--only NAME ...] [--all] [--out PATH]

Hints are advice, so what matters is that they name something real on architectures of every kind and stay
quiet where there is nothing to say. By default a fixed sample of architectures of different character
(residual, depthwise, dense, transformer, NAS, segmentation, video, detection); ``--all`` takes every model
of ``torchvision.models.list_models()``. Each model is built as ``bench/capture_coverage.py`` builds it
(``weights=None``, eval mode, a small input of its kind) and profiled with ``pytest_fxprof.profile`` (capture
``auto``, 1 warm-up, 3 passes), in its own process with a timeout. Prints each model's hints (kind, nodes
named, time at stake as a share of the model) and writes ``bench/hints_survey.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from capture_coverage import build, copies, inputs_for, kind_of

ROOT = Path(__file__).resolve().parent.parent
MARK = "HINTS-SURVEY-RESULT "
SAMPLE = (
    "resnet50",
    "wide_resnet50_2",
    "densenet121",
    "vgg11",
    "alexnet",
    "squeezenet1_1",
    "googlenet",
    "inception_v3",
    "mobilenet_v2",
    "mobilenet_v3_large",
    "efficientnet_b0",
    "mnasnet1_0",
    "shufflenet_v2_x1_0",
    "regnet_y_400mf",
    "convnext_tiny",
    "vit_b_16",
    "swin_t",
    "maxvit_t",
    "fcn_resnet50",
    "lraspp_mobilenet_v3_large",
    "r3d_18",
    "fasterrcnn_mobilenet_v3_large_320_fpn",
)
TIMEOUT_S = 900.0


def worker(name: str) -> None:
    """Profile one model and print its hints as one marked JSON line."""
    import torch

    from pytest_fxprof import profile

    torch.manual_seed(0)
    kind = kind_of(name)
    model, _ = build(name, kind)
    args, kwargs = copies(inputs_for(name, kind))
    started = time.perf_counter()
    result = profile(model, *args, warmup=1, passes=3, **kwargs)
    row = {
        "model": name,
        "kind": kind,
        "capture": result.capture.method,
        "nodes": len(result.nodes),
        "seconds": round(time.perf_counter() - started, 1),
        "hints": [
            {"kind": h.kind, "nodes": len(h.nodes), "share": round(h.share, 4), "message": h.message}
            for h in result.hints
        ],
    }
    print(MARK + json.dumps(row), flush=True)


def run_one(name: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", name]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"model": name, "error": f"timed out after {TIMEOUT_S:.0f} s"}
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            row: dict[str, Any] = json.loads(line[len(MARK) :])
            return row
    tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"model": name, "error": f"exit {done.returncode}: {tail[0]}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="+", default=None, help="these models only")
    parser.add_argument("--all", action="store_true", help="every torchvision model, not the sample")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "hints_survey.json")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    if args.only:
        names = list(args.only)
    elif args.all:
        from torchvision.models import list_models

        names = sorted(list_models())
    else:
        names = list(SAMPLE)
    rows = []
    for name in names:
        row = run_one(name)
        rows.append(row)
        if "error" in row:
            print(f"{name}: {row['error']}", flush=True)
            continue
        kinds = ", ".join(f"{h['kind']} ({h['nodes']} nodes, {h['share']:.1%})" for h in row["hints"]) or "none"
        print(f"{name} [{row['capture']}, {row['nodes']} nodes]: {kinds}", flush=True)
    counts: dict[str, int] = {}
    for row in rows:
        for kind in {h["kind"] for h in row.get("hints", [])}:
            counts[kind] = counts.get(kind, 0) + 1
    summary = {
        "models": len(rows),
        "errors": sum("error" in r for r in rows),
        "without_hints": sum(not r.get("hints") for r in rows if "error" not in r),
        "models_per_kind": dict(sorted(counts.items())),
    }
    print(json.dumps(summary, indent=2))
    data = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {platform.processor() or 'unknown cpu'}",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "summary": summary,
        "rows": rows,
    }
    args.out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
