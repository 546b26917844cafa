"""Which torchvision models capture node by node, by which mode, and whether the graphs run like the model.

    .venv/bin/python bench/capture_coverage.py [--only NAME ...] [--modes] [--out PATH] [--jobs N]

Every model of ``torchvision.models.list_models()`` (quantized builders with ``quantize=True``) is built with
``weights=None`` (and ``weights_backbone=None`` where the builder takes it), in eval mode, and given a small
input of its kind: one 224x224 image (classification, segmentation, quantization), a list of one 320x320
image (detection: the R-CNN, RetinaNet and FCOS transforms resize to 320 instead of 800, and score thresholds
are 0 so there are boxes to compare), a 8x112x112 clip (video; 16x224x224 for MViT and S3D, whose
shapes are fixed) or two 128x128 images (optical flow). Each model is captured with ``capture="auto"``
(``--modes``: also each of symbolic, export and dynamo), one pass of the captured graphs with plain runners is
compared with the eager output, and, when ``pytest_fxprof.profile`` takes ``capture=``, it is profiled node
by node (1 warm-up, 1 pass). Each model runs in its own process with a timeout, so a hang or a crash costs
one row. Prints a table and a summary and writes ``bench/capture_coverage.json``.

``--step`` adds the training-step column (mode ``step``): each model that can train on the CPU, in train mode
with a batch of two of its inputs (Inception v3's at 299 x 299, which its auxiliary classifier needs in train
mode; detection models with a target per image, and their loss dict summed by the default loss), is
profiled with ``profile_train_step`` (1 warm-up, 1 pass; AOTAutograd, forward and backward node by node), and
the row records its nodes per direction and the share of backward nodes mapped to a module
(``mapped_backward``). Quantized models cannot train (their kernels have no backward) and are listed apart.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import inspect
import json
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODES = ("auto", "symbolic", "export", "dynamo", "step")
MARK = "CAPTURE-COVERAGE-RESULT "


# One model, in a worker process ------------------------------------------------------------------------------


def kind_of(name: str) -> str:
    from torchvision.models import get_model_builder

    module = get_model_builder(name).__module__
    for kind in ("detection", "segmentation", "video", "optical_flow", "quantization"):
        if f".{kind}." in module or module.endswith(f".{kind}"):
            return kind
    return "classification"


def build(name: str, kind: str) -> tuple[Any, dict[str, Any]]:
    from torchvision.models import get_model, get_model_builder

    params = inspect.signature(get_model_builder(name)).parameters
    options: dict[str, Any] = {"weights": None}
    if "weights_backbone" in params:
        options["weights_backbone"] = None
    if kind == "quantization":
        options["quantize"] = True
    if kind == "detection":
        if "rcnn" in name:
            options |= {"box_score_thresh": 0.0, "min_size": 320, "max_size": 320}
        elif name.startswith(("retinanet", "fcos")):
            options |= {"score_thresh": 0.0, "min_size": 320, "max_size": 320}
        else:  # SSD and SSDlite have a fixed size
            options["score_thresh"] = 0.0
    model = get_model(name, **options).eval()
    return model, {k: v for k, v in options.items() if k != "weights"}


def inputs_for(name: str, kind: str) -> tuple[Any, ...]:
    import torch

    gen = torch.Generator().manual_seed(0)
    if kind == "detection":
        return ([torch.rand(3, 320, 320, generator=gen)],)
    if kind == "optical_flow":
        return torch.rand(1, 3, 128, 128, generator=gen), torch.rand(1, 3, 128, 128, generator=gen)
    if kind == "video":
        frames, size = (16, 224) if name.startswith(("mvit", "s3d")) else (8, 112)
        return (torch.rand(1, 3, frames, size, size, generator=gen),)
    return (torch.rand(1, 3, 224, 224, generator=gen),)


def step_inputs(name: str, kind: str) -> tuple[Any, ...]:
    """A batch of two of the model's inputs, in train mode; detection models take their targets too."""
    import torch

    gen = torch.Generator().manual_seed(0)
    if name == "inception_v3":  # its auxiliary classifier, which runs in train mode, needs 299 x 299
        return (torch.rand(2, 3, 299, 299, generator=gen),)
    if kind != "detection":
        return tuple(torch.cat([a, torch.rand(a.shape, generator=gen)]) for a in inputs_for(name, kind))
    images = [torch.rand(3, 320, 320, generator=gen) for _ in range(2)]
    targets = []
    for _ in images:
        target: dict[str, Any] = {"boxes": torch.tensor([[40.0, 60.0, 200.0, 220.0]]), "labels": torch.tensor([1])}
        if "maskrcnn" in name:
            masks = torch.zeros(1, 320, 320, dtype=torch.uint8)
            masks[:, 60:220, 40:200] = 1
            target["masks"] = masks
        if "keypoint" in name:
            target["keypoints"] = torch.tensor([[[100.0, 100.0, 1.0]] * 17])
        targets.append(target)
    return images, targets


def mapped_backward(nodes: Any) -> set[int]:
    """The backward nodes whose module is known: from the forward op each differentiates (a module path below
    the root, or the forward node it names), or, for a gradient summed over several uses, from the nodes it
    reads, when those are known."""
    known: set[int] = set()
    for k, n in enumerate(nodes):
        if n.info.direction != "backward":
            continue
        read = [i for i in n.inputs if nodes[i].info.direction == "backward"]
        if n.module or n.info.forward or (read and all(i in known for i in read)):
            known.add(k)
    return known


def measure_step(name: str) -> dict[str, Any]:
    """Profile one model's training step (forward and backward node by node): a row of mode ``step``."""
    import torch

    from pytest_fxprof import profile_train_step

    torch.set_num_threads(1)
    kind = kind_of(name)
    row: dict[str, Any] = {"model": name, "kind": kind, "mode": "step"}
    start = time.perf_counter()
    if kind == "quantization":
        return row | {"error": "cannot train: quantized kernels have no backward", "cannot_train": True, "seconds": 0}
    try:
        torch.manual_seed(0)
        model, options = build(name, kind)
        model.train()
        row["build"] = options
        args = step_inputs(name, kind)
        result = profile_train_step(model, *args, warmup=1, passes=1, flops=False, name=name)
        counts = {d: sum(1 for n in result.nodes if n.info.direction == d) for d in ("forward", "backward")}
        mapped = len(mapped_backward(result.nodes))
        row["below_root"] = sum(1 for n in result.nodes if n.info.direction == "backward" and n.module)
        row |= {"method": result.capture.method, "graphs": result.capture.graphs, "nodes": len(result.nodes)}
        row |= {"forward_nodes": counts["forward"], "backward_nodes": counts["backward"], "mapped": mapped}
        row |= {"mapped_share": round(mapped / counts["backward"], 4) if counts["backward"] else 0.0}
        row |= {"match": True, "profiled_nodes": len(result.nodes), "step_ms": round(result.total_ns / 1e6, 2)}
        row["overhead"] = round(result.overhead, 4) if result.overhead is not None else None
    except Exception as exc:  # noqa: BLE001 - a row says what failed
        row["error"] = error_text(exc)
        row["traceback"] = traceback.format_exc(limit=-6)
    row["seconds"] = time.perf_counter() - start
    return row


def error_text(exc: BaseException) -> str:
    """The error's message; an auto capture's has a line per mode that failed."""
    return f"{type(exc).__name__}: {str(exc).strip()}"[:2000]


def short(error: str) -> str:
    """One line of an error for the table: the last mode's failure where there is a line per mode."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    modes = [line for line in lines if line.startswith(("symbolic_trace", "tracer:", "export:", "dynamo:"))]
    return modes[-1] if modes else (lines[0] if lines else "")


def measure(name: str, modes: list[str], profile_it: bool) -> list[dict[str, Any]]:
    """Capture, check and (if it can) profile one model with each mode: a row per mode."""
    import torch

    from pytest_fxprof import profile
    from pytest_fxprof.capture.choose import capture_module
    from pytest_fxprof.capture.graphs import plain_runners
    from pytest_fxprof.capture.nodes import describe_nodes
    from pytest_fxprof.capture.verify import output_difference

    torch.set_num_threads(1)
    kind = kind_of(name)
    torch.manual_seed(0)
    start = time.perf_counter()
    model, options = build(name, kind)
    args = inputs_for(name, kind)
    build_s = time.perf_counter() - start
    with torch.no_grad():
        expected = model(*args)
    takes_capture = "capture" in inspect.signature(profile).parameters
    rows = []
    for mode in modes:
        row: dict[str, Any] = {"model": name, "kind": kind, "mode": mode, "build": options, "build_s": build_s}
        start = time.perf_counter()
        try:
            with torch.no_grad():
                captured = capture_module(model, args, {}, mode=mode)
                row["capture_s"] = time.perf_counter() - start
                cap = captured.capture
                row |= {"method": cap.method, "graphs": cap.graphs, "leaves": list(cap.leaf_modules)}
                row |= {"detail": cap.detail, "nodes": len(describe_nodes(captured.graphs))}
                actual = captured.forward(plain_runners(captured), captured.prepare(*copies(args)))
            difference = output_difference(expected, actual)
            row["match"] = difference is None
            if difference:
                row["error"] = difference
            if profile_it and takes_capture:
                began = time.perf_counter()  # with the plugin's defaults: the compiled engine, FLOPs counted
                result = profile(model, *copies(args)[0], capture=mode, warmup=1, passes=1, name=name)
                row["profile_s"] = time.perf_counter() - began
                row["profiled_nodes"] = len(result.nodes)
                row["nodes_with_flops"] = sum(1 for n in result.nodes if n.flops)
                row["profiled_method"] = result.capture.method
                row["model_ms"] = round(result.total_ns / 1e6, 2)
        except Exception as exc:  # noqa: BLE001 - a row says what failed
            row.setdefault("capture_s", time.perf_counter() - start)
            row["error"] = error_text(exc)
            row["traceback"] = traceback.format_exc(limit=-6)
        row["seconds"] = time.perf_counter() - start
        rows.append(row)
    return rows


def copies(args: tuple[Any, ...]) -> tuple[list[Any], dict[str, Any]]:
    import copy

    return copy.deepcopy(list(args)), {}


def worker(name: str, modes: list[str], profile_it: bool) -> None:
    rows = measure(name, [m for m in modes if m != "step"], profile_it)
    if "step" in modes:
        rows.append(measure_step(name))
    print(MARK + json.dumps(rows, default=str), flush=True)


# The run -----------------------------------------------------------------------------------------------------


def run_one(name: str, modes: list[str], profile_it: bool, timeout: float) -> list[dict[str, Any]]:
    cmd = [sys.executable, __file__, "--worker", name, "--mode-list", ",".join(modes)]
    if not profile_it:
        cmd.append("--no-profile")
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return [
            {"model": name, "mode": m, "error": f"timed out after {timeout:.0f} s", "seconds": timeout} for m in modes
        ]
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            rows: list[dict[str, Any]] = json.loads(line[len(MARK) :])
            return rows
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    error = f"worker exited {proc.returncode}: {' | '.join(tail)}"[:400]
    return [{"model": name, "mode": m, "error": error, "seconds": time.perf_counter() - start} for m in modes]


def table(rows: list[dict[str, Any]]) -> str:
    head = ("model", "mode", "method", "graphs", "nodes", "leaves", "match", "profiled", "seconds", "error")
    match = {True: "yes", False: "NO"}
    lines = [head]
    lines += [
        (
            r["model"],
            r["mode"],
            r.get("method", "-"),
            str(r.get("graphs", "-")),
            str(r.get("nodes", "-")),
            ",".join(r.get("leaves", [])) or "-",
            match.get(r["match"], "-") if "match" in r else "-",
            str(r.get("profiled_nodes", "-")),
            f"{r.get('seconds', 0):.1f}",
            short(r.get("error") or "")[:110],
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head) - 1)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=False)) + "  " + line[-1] for line in lines
    )


def summary(rows: list[dict[str, Any]], profile_it: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in dict.fromkeys(r["mode"] for r in rows):
        mine = [r for r in rows if r["mode"] == mode]
        ok = [r for r in mine if r.get("match") and not r.get("error")]
        by_method: dict[str, int] = {}
        for r in ok:
            by_method[r["method"]] = by_method.get(r["method"], 0) + 1
        if mode == "step":
            trainable = [r for r in mine if not r.get("cannot_train")]
            ok = [r for r in trainable if r.get("match") and not r.get("error")]
            out[mode] = {
                "models": len(mine),
                "can_train": len(trainable),
                "profiled": len(ok),
                "profiled_share": round(len(ok) / len(trainable), 4) if trainable else None,
                "mapped_90": sum(1 for r in ok if r["mapped_share"] >= 0.9),
                "mapped_share_min": min((r["mapped_share"] for r in ok), default=None),
                "mapped_share_median": sorted(r["mapped_share"] for r in ok)[len(ok) // 2] if ok else None,
                "failed": sorted(r["model"] for r in trainable if r not in ok),
                "cannot_train": sorted(r["model"] for r in mine if r.get("cannot_train")),
            }
            continue
        out[mode] = {
            "models": len(mine),
            "captured_and_matching": len(ok),
            "by_method": dict(sorted(by_method.items())),
            "failed": sorted(r["model"] for r in mine if r not in ok),
            "profiled": sum(1 for r in mine if "profiled_nodes" in r) if profile_it else None,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these torchvision model names only")
    parser.add_argument("--modes", action="store_true", help="also capture with each mode, not only auto")
    parser.add_argument("--out", type=Path, default=Path("bench/capture_coverage.json"))
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per model (default 1200)")
    parser.add_argument("--jobs", type=int, default=1, help="models at once, each on one thread (default 1)")
    parser.add_argument("--no-profile", action="store_true", help="capture and check only")
    parser.add_argument("--step", action="store_true", help="also profile each model's training step")
    parser.add_argument("--step-only", action="store_true", help="only the training-step column")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--mode-list", help=argparse.SUPPRESS)
    ns = parser.parse_args()
    profile_it = not ns.no_profile
    if ns.worker:
        worker(ns.worker, ns.mode_list.split(","), profile_it)
        return

    import torch
    import torchvision
    from torchvision.models import list_models

    from pytest_fxprof import profile

    names = ns.only or list_models()
    unknown = sorted(set(names) - set(list_models()))
    if unknown:
        raise SystemExit(f"not torchvision models: {', '.join(unknown)}")
    modes = list(MODES[:-1]) if ns.modes else ["auto"]
    if ns.step or ns.step_only:
        modes = [*([] if ns.step_only else modes), "step"]
    takes_capture = "capture" in inspect.signature(profile).parameters
    if profile_it and not takes_capture:
        print("pytest_fxprof.profile takes no capture= yet: capturing and checking only", flush=True)
    began = time.perf_counter()
    rows: list[dict[str, Any]] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=ns.jobs) as pool:
        futures = {pool.submit(run_one, name, modes, profile_it, ns.timeout): name for name in names}
        for future in concurrent.futures.as_completed(futures):
            for row in future.result():
                rows.append(row)
                print(
                    f"{row['model']:<40} {row['mode']:<8} {row.get('method', '-'):<15} "
                    f"{'match' if row.get('match') else 'FAIL':<6} {row.get('seconds', 0):7.1f}s "
                    f"{short(row.get('error') or '')[:110]}",
                    flush=True,
                )
    total_s = time.perf_counter() - began
    order = {name: i for i, name in enumerate(names)}
    rows.sort(key=lambda r: (order[r["model"]], MODES.index(r["mode"])))
    print()
    print(table(rows))
    result = summary(rows, profile_it and takes_capture)
    print()
    for mode, s in result.items():
        if mode == "step":
            print(
                f"step: {s['profiled']}/{s['can_train']} that can train profiled node by node, {s['mapped_90']} of "
                f"them with at least 90 % of backward nodes mapped (least {s['mapped_share_min']}); failed: "
                f"{', '.join(s['failed']) or 'none'}; cannot train: {len(s['cannot_train'])}"
            )
            continue
        print(
            f"{mode}: {s['captured_and_matching']}/{s['models']} captured and matching eager, by method "
            f"{s['by_method']}; failed: {', '.join(s['failed']) or 'none'}"
            + (f"; profiled: {s['profiled']}" if s["profiled"] is not None else "")
        )
    print(f"total {total_s / 60:.1f} min")
    ns.out.write_text(
        json.dumps(
            {
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "command": " ".join([Path(sys.executable).name, *sys.argv]),
                "torch": str(torch.__version__),
                "torchvision": str(torchvision.__version__),
                "python": platform.python_version(),
                "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cpus",
                "jobs": ns.jobs,
                "profiled": profile_it and takes_capture,
                "total_s": round(total_s, 1),
                "summary": result,
                "models": rows,
            },
            indent=1,
            default=str,
        )
        + "\n",
        encoding="utf-8",
    )
    print(f"wrote {ns.out}")


if __name__ == "__main__":
    main()
