"""Training steps of models beyond torchvision's, on the CPU or a CUDA device: capture, mapping and cost.

    .venv/bin/python bench/step_models.py [--device cuda] [--only NAME ...] [--out bench/step_models.json]

Each model (random weights, small configurations) is profiled with ``profile_train_step`` (SGD with
momentum; 3 warm-up and 10 kept passes; the default loss, or the model's own loss where it returns one):
torchvision's ResNet18 (batch 8, 224 x 224), a transformer encoder block (``quality_models.Block``, batch 8 of
128 tokens of 256), timm's ConvNeXt-atto (batch 4) and ViT-tiny (batch 2, 224 x 224), and transformers' BERT
(2 layers, 256 wide, masked-LM head, batch 4 of 128 tokens, its own loss) and GPT-2 (4 layers, 256 wide, LM
head, its own loss). Models whose package is missing are listed as skipped.

A row: the capture and its graphs, the nodes per direction, the share of backward nodes mapped to a module
(``capture_coverage.mapped_backward``), the step's time and that of each direction, the profiler's overhead
(the instrumented step over the plain one: the same graphs without stamps), and whether the parameters, their
grads and the optimizer's state came back as they were. Printed and written as JSON.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from capture_coverage import mapped_backward  # this script's folder, on sys.path when it runs
from quality_models import Block

from pytest_fxprof import profile_train_step

MODELS = ("resnet18", "encoder-block", "convnext-atto", "vit-tiny", "bert", "gpt2")


def build(name: str) -> tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]:
    """The model in train mode, its positional inputs and its keyword inputs, from seed 0."""
    torch.manual_seed(0)
    if name == "resnet18":
        import torchvision

        return torchvision.models.resnet18(weights=None).train(), (torch.randn(8, 3, 224, 224),), {}
    if name == "encoder-block":
        return Block(256, 4, 1024).train(), (torch.randn(8, 128, 256),), {}
    if name in ("convnext-atto", "vit-tiny"):
        import timm

        arch, batch = ("convnext_atto", 4) if name == "convnext-atto" else ("vit_tiny_patch16_224", 2)
        return timm.create_model(arch, pretrained=False).train(), (torch.randn(batch, 3, 224, 224),), {}
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    ids = torch.randint(0, 1000, (4, 128))
    if name == "bert":
        config = BertConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=1024)
        return BertForMaskedLM(config).train(), (), {"input_ids": ids, "labels": ids}
    gpt = GPT2Config(n_embd=256, n_layer=4, n_head=4, n_positions=256, use_cache=False)
    return GPT2LMHeadModel(gpt).train(), (), {"input_ids": ids, "labels": ids}


def own_loss(name: str) -> Any:
    """The loss of models that compute their own (transformers' with ``labels``): their ``loss`` field."""
    return (lambda out: out.loss) if name in ("bert", "gpt2") else None


def measure(name: str, device: str) -> dict[str, Any]:
    row: dict[str, Any] = {"model": name, "device": device}
    try:
        model, args, kwargs = build(name)
    except ImportError as exc:
        return row | {"skipped": f"{exc.name or exc} is not installed"}
    model.to(device)
    args = tuple(a.to(device) for a in args)
    kwargs = {k: v.to(device) for k, v in kwargs.items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    before = [p.detach().clone() for p in model.parameters()]
    start = time.perf_counter()
    try:
        result = profile_train_step(
            model, *args, loss_fn=own_loss(name), optimizer=optimizer, warmup=3, passes=10, **kwargs
        )
    except Exception as exc:  # noqa: BLE001 - a row says what failed
        return row | {"error": f"{type(exc).__name__}: {exc}"[:1500], "traceback": traceback.format_exc(limit=-6)}
    row["seconds"] = round(time.perf_counter() - start, 1)
    nodes = result.nodes
    backward = [n for n in nodes if n.info.direction == "backward"]
    directions = {r.direction: r.median_ns for r in result.rollup("module") if r.path == "<model>" and r.direction}
    row |= {
        "method": result.capture.method,
        "graphs": result.capture.graphs,
        "nodes": {d: sum(1 for n in nodes if n.info.direction == d) for d in ("forward", "backward", "optimizer")},
        "mapped_share": round(len(mapped_backward(nodes)) / len(backward), 4) if backward else None,
        "below_root_share": round(sum(1 for n in backward if n.module) / len(backward), 4) if backward else None,
        "step_ms": round(result.total_ns / 1e6, 3),
        "direction_ms": {d: round(ns / 1e6, 3) for d, ns in directions.items()},
        "overhead": round(result.overhead, 4) if result.overhead is not None else None,
        "clock": result.environment.clock,
        "host_times": any(n.host_ns is not None for n in nodes),
        "restored": all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
        and all(p.grad is None for p in model.parameters())
        and len(optimizer.state) == 0,
        "slowest": [
            f"{n.module or '<root>'} {n.info.direction} ({n.target}) {n.median_ns / 1e3:.1f} us"
            for n in sorted(nodes, key=lambda n: -n.median_ns)[:5]
        ],
    }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--only", nargs="+", choices=MODELS)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("step_models.json"))
    ns = parser.parse_args()
    rows = []
    for name in ns.only or MODELS:
        row = measure(name, ns.device)
        rows.append(row)
        if "skipped" in row or "error" in row:
            print(f"{name:14} {row.get('skipped') or row.get('error', '')[:200]}", flush=True)
            continue
        print(
            f"{name:14} {row['graphs']:>2} graph(s), nodes {row['nodes']}, mapped {row['mapped_share']:.1%}, step "
            f"{row['step_ms']:.2f} ms {row['direction_ms']}, overhead x{row['overhead']:.3f}, restored "
            f"{row['restored']}",
            flush=True,
        )
    payload = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.node()} {platform.machine()}",
        "device": torch.cuda.get_device_name() if ns.device.startswith("cuda") else ns.device,
        "torch": torch.__version__,
        "command": " ".join(["python", *sys.argv]),
        "results": rows,
    }
    ns.out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {ns.out}")


if __name__ == "__main__":
    main()
