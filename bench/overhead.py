"""What timing every node costs: each engine's instrumented forward against the plain graph forward.

    .venv/bin/python bench/overhead.py [--rounds 15] [--out bench/overhead.json]
    .venv/bin/python bench/overhead.py --step [--rounds 15] [--out bench/overhead_step.json]

For each graph (a chain of 500 tiny ops, ResNet18 at batch 1 and 64 x 64, one transformer block), in one
process on one intra-op thread, the variants run interleaved round by round so that they meet the same
machine state: the eager module, the plain ``GraphModule`` forward, the compiled engine's instrumented
forward and the interpreter engine's. Each round times ``--calls`` calls of each variant on the wall
clock; the figure per variant is the median over rounds of the time per call. Printed and written as
JSON: the ratio of each engine to the plain graph forward, and the time each adds per node.

Then both engines profile each model, alternately (``--profiles`` times each), and the medians of the
nodes of 100 us or more are compared: the engines should agree on large nodes' times.

``--step``: the training step (forward, default loss, backward, SGD with momentum) of ResNet18 (batch 8,
224 x 224) and of a transformer encoder block (batch 8, 128 tokens of 256), captured once by AOTAutograd.
Three variants run interleaved, one call each per round, with parameters, grads and optimizer state put back
between calls (outside the time): the eager step, the plain step (the captured graphs without stamps) and the
compiled engine's instrumented step. The figure is the instrumented step over the plain step.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torchvision
from quality_models import Block  # this script's folder, on sys.path when it runs
from torch import nn

from pytest_fxprof import profile
from pytest_fxprof.capture.choose import capture_module
from pytest_fxprof.capture.graphs import plain_runners, prepared_inputs
from pytest_fxprof.capture.nodes import describe_nodes
from pytest_fxprof.capture.state import StepKept
from pytest_fxprof.capture.step import Step, capture_step, default_loss
from pytest_fxprof.measure.engine import ClockTimer, make_engine


class TinyChain(nn.Module):
    """500 element-wise ops on a 16-element tensor: all Python, almost no arithmetic."""

    def __init__(self, length: int = 500) -> None:
        super().__init__()
        self.length = length

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.length):
            x = x * 1.0001 if i % 2 else x + 0.5
        return x


def graphs() -> dict[str, tuple[nn.Module, tuple[Any, ...]]]:
    torch.manual_seed(0)
    return {
        "tiny-op chain (500)": (TinyChain(), (torch.randn(16),)),
        "resnet18 (1x3x64x64)": (torchvision.models.resnet18(weights=None).eval(), (torch.randn(1, 3, 64, 64),)),
        "transformer block (1x64x256)": (Block(256, 4, 1024).eval(), (torch.randn(1, 64, 256),)),
    }


def per_call(fn: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls


def overhead(module: nn.Module, inputs: tuple[Any, ...], rounds: int, calls: int) -> dict[str, Any]:
    captured = capture_module(module, inputs, {})
    described = describe_nodes(captured.graphs)
    nodes = [n for n, _ in described]
    prepared = captured.prepare(list(inputs), {})
    plain = [gm.forward for gm in captured.graphs]
    variants: dict[str, Callable[[], Any]] = {
        "eager": lambda: module(*inputs),
        "graph": lambda: captured.forward(plain, prepared),
    }
    for name in ("compiled", "interpreter"):
        engine = make_engine(name, captured.graphs, nodes, ClockTimer(time.perf_counter_ns))
        runners = engine.runners()

        def run(engine: Any = engine, runners: Any = runners) -> None:
            engine.begin_pass()  # the instrumented forward; turning stamps into times comes after a pass
            captured.forward(runners, prepared)

        variants[name] = run
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():
        per_call(fn, calls)  # warm
    for _ in range(rounds):
        for name, fn in variants.items():
            samples[name].append(per_call(fn, calls))
    med = {name: statistics.median(s) for name, s in samples.items()}
    return {
        "nodes": len(nodes),
        "capture": captured.capture.method,
        "median_ns_per_call": {k: round(v) for k, v in med.items()},
        "ratio_to_graph": {k: round(med[k] / med["graph"], 4) for k in ("eager", "compiled", "interpreter")},
        "added_ns_per_node": {k: round((med[k] - med["graph"]) / len(nodes), 1) for k in ("compiled", "interpreter")},
    }


def step_models() -> dict[str, tuple[nn.Module, tuple[Any, ...]]]:
    torch.manual_seed(0)
    return {
        "resnet18 step (8x3x224x224)": (
            torchvision.models.resnet18(weights=None).train(),
            (torch.randn(8, 3, 224, 224),),
        ),
        "encoder block step (8x128x256)": (Block(256, 4, 1024).train(), (torch.randn(8, 128, 256),)),
    }


def step_overhead(module: nn.Module, inputs: tuple[Any, ...], rounds: int) -> dict[str, Any]:
    """The eager, plain and instrumented step, one call each per round, everything put back between calls."""
    optimizer = torch.optim.SGD(module.parameters(), lr=0.01, momentum=0.9)
    kept = StepKept(module, optimizer)
    try:
        with torch.enable_grad():
            captured = capture_step(module, inputs, {}, Step(optimizer=optimizer), kept)
            nodes = [n for n, _ in describe_nodes(captured.graphs)]
            engine = make_engine("compiled", captured.graphs, nodes, ClockTimer(time.perf_counter_ns))
            runners, plain = engine.runners(), plain_runners(captured)

            def eager(prepared: Any) -> None:
                default_loss(module(*prepared[0])).backward()
                optimizer.step()

            def instrumented(prepared: Any) -> None:
                engine.begin_pass()
                captured.forward(runners, prepared)

            variants: dict[str, Callable[[Any], Any]] = {
                "eager": eager,
                "plain": lambda prepared: captured.forward(plain, prepared),
                "compiled": instrumented,
            }
            samples: dict[str, list[int]] = {name: [] for name in variants}
            for round_ in range(rounds + 2):  # two rounds of warm-up
                for name, fn in variants.items():
                    prepared = prepared_inputs(captured, inputs, {})
                    start = time.perf_counter_ns()
                    fn(prepared)
                    took = time.perf_counter_ns() - start
                    kept.reset()
                    if round_ >= 2:
                        samples[name].append(took)
    finally:
        kept.close()
    med = {name: statistics.median(s) for name, s in samples.items()}
    directions = {
        d: sum(1 for _, i in describe_nodes(captured.graphs) if i.direction == d) for d in ("forward", "backward")
    }
    return {
        "nodes": len(nodes),
        "nodes_by_direction": directions,
        "capture": captured.capture.method,
        "graphs": captured.capture.graphs,
        "median_ns_per_step": {k: round(v) for k, v in med.items()},
        "ratio_to_plain": {k: round(med[k] / med["plain"], 4) for k in ("eager", "compiled")},
        "added_ns_per_node": round((med["compiled"] - med["plain"]) / len(nodes), 1),
        "rounds": rounds,
    }


def main_step(rounds: int, out: Path) -> None:
    torch.set_num_threads(1)
    results = {name: step_overhead(module, inputs, rounds) for name, (module, inputs) in step_models().items()}
    print(f"{'step':32} {'nodes':>6} {'plain step':>11} {'eager':>7} {'instrumented':>13} {'+ns/node':>9}")
    for name, r in results.items():
        ratio = r["ratio_to_plain"]
        print(
            f"{name:32} {r['nodes']:>6} {r['median_ns_per_step']['plain'] / 1e6:>9.1f}ms {ratio['eager']:>7.3f}"
            f" {ratio['compiled']:>13.3f} {r['added_ns_per_node']:>9.1f}"
        )
    write(out, results)


def write(out: Path, results: dict[str, Any]) -> None:
    """The results as JSON, with the date, the machine, torch's version and the command."""
    payload = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.node()} {platform.machine()} ({torch.get_num_threads()} thread)",
        "torch": torch.__version__,
        "command": " ".join(["python", *sys.argv]),
        "results": results,
    }
    out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")


def agreement(module: nn.Module, inputs: tuple[Any, ...], repeats: int, floor_ns: int = 100_000) -> dict[str, Any]:
    """Per large node: median over profiles of compiled / interpreter node medians."""
    per_engine: dict[str, list[list[int]]] = {"compiled": [], "interpreter": []}
    for _ in range(repeats):
        for engine, medians in per_engine.items():
            result = profile(module, *inputs, engine=engine, warmup=3, passes=10, flops=False)
            medians.append([n.median_ns for n in result.nodes])
    comp = [statistics.median(col) for col in zip(*per_engine["compiled"], strict=True)]
    interp = [statistics.median(col) for col in zip(*per_engine["interpreter"], strict=True)]
    ratios = [c / i for c, i in zip(comp, interp, strict=True) if i >= floor_ns]
    if not ratios:
        return {"large_nodes": 0}
    return {
        "large_nodes": len(ratios),
        "median_ratio": round(statistics.median(ratios), 4),
        "min_ratio": round(min(ratios), 4),
        "max_ratio": round(max(ratios), 4),
        "summed_ratio": round(
            sum(c for c, i in zip(comp, interp, strict=True) if i >= floor_ns)
            / sum(i for i in interp if i >= floor_ns),
            4,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--profiles", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--step", action="store_true", help="the training step instead (bench/overhead_step.json)")
    args = parser.parse_args()
    if args.step:
        main_step(args.rounds, args.out or Path(__file__).with_name("overhead_step.json"))
        return
    args.out = args.out or Path(__file__).with_name("overhead.json")
    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    with torch.no_grad():
        for name, (module, inputs) in graphs().items():
            results[name] = overhead(module, inputs, args.rounds, args.calls)
    for name, (module, inputs) in graphs().items():
        results[name]["agreement"] = agreement(module, inputs, args.profiles)
    print(
        f"{'graph':30} {'nodes':>5} {'plain graph':>12} {'eager':>7} {'compiled':>9} {'interp.':>8}"
        f" {'+ns/node comp.':>15} {'+ns/node interp.':>17} {'large nodes comp./interp.':>26}"
    )
    for name, r in results.items():
        ratio, added, agree = r["ratio_to_graph"], r["added_ns_per_node"], r["agreement"]
        agreed = (
            f"{agree['median_ratio']:.3f} ({agree['min_ratio']:.2f}-{agree['max_ratio']:.2f}, n={agree['large_nodes']})"
            if agree["large_nodes"]
            else "-"
        )
        print(
            f"{name:30} {r['nodes']:>5} {r['median_ns_per_call']['graph'] / 1e3:>10.1f}us {ratio['eager']:>7.3f}"
            f" {ratio['compiled']:>9.3f} {ratio['interpreter']:>8.3f} {added['compiled']:>15.1f}"
            f" {added['interpreter']:>17.1f} {agreed:>26}"
        )
    write(args.out, results)


if __name__ == "__main__":
    main()
