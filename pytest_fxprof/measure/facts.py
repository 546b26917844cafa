"""What each node does, seen in one untimed pass: its floating-point operations, its output's shape and layout,
the nodes it reads, its train/eval mode and whether its graph returns it.

Owns the facts that the hints and the views need beside a node's time. Counted under torch's flop counter
in one extra pass of the compiled engine, whose "clock" is the counter's running total.

Must not import pytest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from pytest_fxprof.capture.graphs import Captured, Runner, prepared_inputs, run_pass
from pytest_fxprof.measure.engine import ClockTimer, CompiledEngine
from pytest_fxprof.records.measurement import NodeInfo


@dataclass
class Seen:
    """What the untimed counting pass saw of each node: its floating-point operations, output and layout."""

    flops: list[int]
    shapes: list[str]
    layouts: list[str]


def count_flops(
    module: torch.nn.Module,
    captured: Captured,
    nodes: Sequence[torch.fx.Node],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    infos: Sequence[NodeInfo] = (),
    ran_before: bool = False,
) -> Seen:
    """Floating-point operations per node, in one pass of the graphs under torch's flop counter, and the
    shape and layout of what each node made.

    The compiled engine runs the pass with the counter's running total as its clock, so a node's count
    is the difference of two readings, and the graphs run as their own generated code (an Interpreter
    would hand nodes immutable argument lists, which some models mutate).
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    shapes, layouts = [""] * len(nodes), [""] * len(nodes)

    def flops_so_far() -> int:
        return int(counter.get_total_flops())

    def observe(k: int, value: Any) -> None:
        shapes[k], layouts[k] = shape_of(value), layout_of(value)

    engine = CompiledEngine(captured.graphs, nodes, ClockTimer(flops_so_far), observe)

    def counted(runner: Runner) -> Runner:
        def run(*inputs: Any) -> Any:
            with counter:  # entered per graph call: dynamo runs the Python between graphs outside it
                return runner(*inputs)

        return run

    engine.begin_pass()
    runners = [counted(r) for r in engine.runners()]
    run_pass(module, captured, runners, prepared_inputs(captured, args, kwargs), nodes=infos, ran_before=ran_before)
    return Seen(engine.end_pass().node_ns, shapes, layouts)


SHAPES_SHOWN = 4
"""Outputs described per node; a node that returns more is described as the first ones and a count."""


def shape_of(value: Any) -> str:
    """A node's output as text: ``float32[1, 64, 56, 56]``, several in parentheses, empty for no tensor."""
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}[{', '.join(str(d) for d in value.shape)}]"
    if isinstance(value, list | tuple):
        parts = [shape_of(v) for v in value]
        parts = [p for p in parts if p]
        if not parts:
            return ""
        more = f", ... {len(parts) - SHAPES_SHOWN} more" if len(parts) > SHAPES_SHOWN else ""
        return f"({', '.join(parts[:SHAPES_SHOWN])}{more})"
    return ""


def layout_of(value: Any) -> str:
    """The memory layout of a node's (first) output tensor: contiguous, channels_last or strided."""
    if isinstance(value, list | tuple):
        return next((lay for lay in (layout_of(v) for v in value) if lay), "")
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        return ""
    try:
        if value.is_contiguous():
            return "contiguous"
        formats = {4: torch.channels_last, 5: torch.channels_last_3d}
        if value.dim() in formats and value.is_contiguous(memory_format=formats[value.dim()]):
            return "channels_last"
    except RuntimeError:  # tensors that cannot say (some subclasses)
        return ""
    return "strided"


def graph_facts(
    graphs: Sequence[torch.fx.GraphModule], nodes: Sequence[torch.fx.Node]
) -> list[tuple[tuple[int, ...], bool | None, bool]]:
    """Per node: the positions of the timed nodes it takes outputs of, the training flag that applies to it
    (its module's mode, or a batch norm's ``training`` argument), and whether its graph returns its output."""
    index = {node: k for k, node in enumerate(nodes)}
    owner = {node: gm for gm in graphs for node in gm.graph.nodes}
    out = []
    for node in nodes:
        inputs = tuple(sorted({index[n] for n in node.all_input_nodes if n in index}))
        returned = any(user.op == "output" for user in node.users)
        out.append((inputs, _training(owner[node], node), returned))
    return out


def _training(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool | None:
    if node.op == "call_module":
        return bool(gm.get_submodule(str(node.target)).training)
    name = str(getattr(node.target, "__name__", node.target))
    if "batch_norm" not in name:
        return None
    if "no_training" in name:  # aten._native_batch_norm_legit_no_training
        return False
    flag = node.kwargs.get("training", node.args[5] if len(node.args) > 5 else None)
    return flag if isinstance(flag, bool) else None
