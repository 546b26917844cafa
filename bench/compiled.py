"""Compiled models, kernel by kernel: what the stamps cost, and how much of the kernel time is mapped to a module.

    .venv/bin/python bench/compiled.py [--models resnet18,...|torchvision|zoo] [--rounds 30] [--out F.jsonl]

Each model runs in a fresh process (dynamo's and Inductor's state stay apart), on one intra-op thread, built at
random weights in eval mode: every torchvision classification model (``torchvision``, inputs 1 x 3 x 224 x 224),
or the zoo of ``suite_models.py`` (a few timm and transformers models at small configurations, and the GPT-style
model). The process compiles the model with ``torch.compile`` (default mode) the way the fixture does
(``capture.inductor.capture``), then times, interleaved round by round so that both meet the same machine state,
one call of the compiled forward without stamps and one with a stamp after every kernel (``--rounds`` rounds, after
5 warm-up rounds). Written per model, one JSON line each:

- ``overhead``: the median stamped call over the median plain one (the target is at most 1.10);
- ``kernels``, ``graph_calls``, ``graphs`` (compiled), ``breaks``, ``compile_s``;
- ``mapped``: the share of the kernels' time (graph entries left out) whose kernel Inductor's provenance mapped to
  dynamo's nodes, so that it has a module path and a source line; ``in_module``: the share whose module is not the
  root; ``entries``: the share of the stamped pass spent entering graphs (guards, wrappers, graph breaks' code).

A model that fails to compile or run is written with its error. The file is appended to, one line per model, and a
model already in it is skipped (rerun with a fresh ``--out`` to measure again).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

HERE = Path(__file__).parent


def torchvision_models() -> list[str]:
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def build(name: str) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    import torch

    sys.path.insert(0, str(HERE))
    import suite_models

    if name.startswith("tv:"):
        import torchvision

        torch.manual_seed(0)
        arch = name[3:]
        options: dict[str, Any] = {}
        if arch in ("googlenet", "inception_v3"):
            options = {"aux_logits": False, "init_weights": False}
        model = torchvision.models.get_model(arch, weights=None, **options).eval()
        size = 299 if arch == "inception_v3" else 224
        return model, (torch.randn(1, 3, size, size),), {}
    return suite_models.build(name)


def one(name: str, rounds: int) -> dict[str, Any]:
    import torch

    from pytest_fxprof.capture import inductor
    from pytest_fxprof.capture.state import fresh_inputs
    from pytest_fxprof.measure.engine import ClockTimer, KernelEngine

    torch.set_num_threads(1)
    model, args, kwargs = build(name)
    timer = ClockTimer(time.perf_counter_ns)
    with torch.no_grad():
        kernels = inductor.capture(cast("torch.nn.Module", torch.compile(model)), args, kwargs, timer.stamp)
        engine = KernelEngine(len(kernels.infos), timer, kernels.calls)
        plain: list[int] = []
        stamped: list[int] = []
        per_node = [0.0] * len(kernels.infos)
        for i in range(rounds + 5):
            for timed in (False, True) if i % 2 else (True, False):
                a, k = fresh_inputs(args, kwargs)
                with inductor.passes(kernels, timed=timed):
                    if timed:
                        engine.begin_pass()
                        kernels.begin()
                    start = time.perf_counter_ns()
                    kernels(*a, **k)
                    took = time.perf_counter_ns() - start
                    if timed:
                        kernels.end()
                        times = engine.end_pass().node_ns
                if i < 5:
                    continue
                (stamped if timed else plain).append(took)
                if timed:
                    for j, t in enumerate(times):
                        per_node[j] += t
    infos = kernels.infos
    entry = sum(t for t, i in zip(per_node, infos, strict=True) if i.target == inductor.ENTRY)
    work = [(t, i) for t, i in zip(per_node, infos, strict=True) if i.target != inductor.ENTRY]
    total = sum(t for t, _ in work) or 1.0
    return {
        "model": name,
        "overhead": round(statistics.median(stamped) / statistics.median(plain), 4),
        "plain_ms": round(statistics.median(plain) / 1e6, 3),
        "kernels": len(work),
        "graph_calls": len(kernels.order),
        "graphs": len(kernels.graphs),
        "breaks": kernels.breaks,
        "compile_s": round(kernels.compile_s, 1),
        "mapped": round(sum(t for t, i in work if i.source) / total, 4),
        "in_module": round(sum(t for t, i in work if i.module) / total, 4),
        "entries": round(entry / (entry + total), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="zoo")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--out", type=Path, default=HERE / "compiled.jsonl")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=int, default=900)
    options = parser.parse_args()
    if options.one:
        print(json.dumps(one(options.one, options.rounds)))
        return
    sys.path.insert(0, str(HERE))
    import suite_models

    if options.models == "torchvision":
        names = [f"tv:{n}" for n in torchvision_models()]
    elif options.models == "zoo":
        names = list(suite_models.available((*suite_models.TIMM, *suite_models.TRANSFORMERS, "gpt_style")))
    else:
        names = options.models.split(",")
    done = set()
    if options.out.exists():
        done = {json.loads(line)["model"] for line in options.out.read_text().splitlines() if line.strip()}
    for name in names:
        if name in done:
            continue
        began = time.perf_counter()
        command = [sys.executable, __file__, "--one", name, "--rounds", str(options.rounds)]
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=options.timeout, check=False)
            lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
            failed: dict[str, Any] = {"model": name, "error": run.stderr[-600:]}
            row = json.loads(lines[-1]) if run.returncode == 0 and lines else failed
        except subprocess.TimeoutExpired:
            row = {"model": name, "error": f"over {options.timeout} s"}
        row["wall_s"] = round(time.perf_counter() - began, 1)
        row["date"] = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
        row["machine"] = f"{platform.machine()}, {platform.processor() or 'cpu'}"
        print(json.dumps(row), flush=True)
        with options.out.open("a") as out:
            out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
