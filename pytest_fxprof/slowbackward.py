"""A controlled slowdown of one layer's backward: how to show that a training step's gate catches one.

Owns the layer ``slow_backward`` installs: a ``Conv2d`` or ``Linear`` whose backward is a custom
``autograd.Function`` with one custom op (``fxprof::conv2d_grad``, ``fxprof::linear_grad``) that runs the
layer's own gradient kernels, then busy-works for ``fraction`` of their time on the thread's CPU clock: real
CPU work in one backward node, whatever the machine's speed, as a custom layer whose backward got slower
would be. Hooks cannot do this in a training step: AOTAutograd traces the backward into a graph.

The layer replaces the original in the graph (its forward and backward nodes differ from the stock layer's),
so a test installs it in the recording and in every check alike, with ``fraction=0`` where nothing is slowed.

Imports torch; imported by ``pytest_fxprof.slowdown.slow_backward`` when it is called. Must not import pytest.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from pytest_fxprof.busywork import busy_work


@torch.library.custom_op("fxprof::conv2d_grad", mutates_args=())
def conv2d_grad(  # noqa: PLR0917 - a custom op's schema is positional
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, stride: int, padding: int, bias: bool, fraction: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    start = time.thread_time_ns()
    gx, gw, gb = torch.ops.aten.convolution_backward(
        grad,
        x,
        weight,
        None,
        [stride] * 2,
        [padding] * 2,
        [1, 1],
        False,  # noqa: FBT003 - aten's schema: not transposed
        [0, 0],
        1,
        [True, True, bias],
    )
    busy_work(start, fraction)
    return gx, gw, gb if bias else grad.new_empty(0)


@conv2d_grad.register_fake
def _(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, *rest: Any) -> tuple[torch.Tensor, ...]:
    bias = rest[2]
    return torch.empty_like(x), torch.empty_like(weight), grad.new_empty(weight.shape[0] if bias else 0)


@torch.library.custom_op("fxprof::linear_grad", mutates_args=())
def linear_grad(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, fraction: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    start = time.thread_time_ns()
    flat_grad, flat_x = grad.reshape(-1, grad.shape[-1]), x.reshape(-1, x.shape[-1])
    out = (grad @ weight, flat_grad.t() @ flat_x, flat_grad.sum(0))
    busy_work(start, fraction)
    return out


@linear_grad.register_fake
def _(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, _: float) -> tuple[torch.Tensor, ...]:
    return torch.empty_like(x), torch.empty_like(weight), grad.new_empty(weight.shape[0])


class _Conv2d(torch.autograd.Function):
    @staticmethod
    def forward(  # noqa: PLR0917 - autograd.Function.apply takes positional arguments
        x: torch.Tensor, weight: torch.Tensor, bias: Any, stride: int, padding: int, fraction: float
    ) -> Any:
        return F.conv2d(x, weight, bias, stride, padding)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        x, weight, bias, ctx.stride, ctx.padding, ctx.fraction = inputs
        ctx.bias = bias is not None
        ctx.save_for_backward(x, weight)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight = ctx.saved_tensors
        gx, gw, gb = conv2d_grad(grad, x, weight, ctx.stride, ctx.padding, ctx.bias, ctx.fraction)
        return gx, gw, gb if ctx.bias else None, None, None, None


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor, weight: torch.Tensor, bias: Any, fraction: float) -> Any:
        return F.linear(x, weight, bias)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        x, weight, bias, ctx.fraction = inputs
        ctx.bias = bias is not None
        ctx.save_for_backward(x, weight)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight = ctx.saved_tensors
        gx, gw, gb = linear_grad(grad, x, weight, ctx.fraction)
        return gx, gw, gb if ctx.bias else None, None


class SlowBackward(nn.Module):
    """``layer`` with its backward in one custom op that does ``fraction`` more work; the layer's parameters
    are kept, as ``layer.weight`` and ``layer.bias`` below this module."""

    def __init__(self, layer: nn.Conv2d | nn.Linear, fraction: float) -> None:
        super().__init__()
        self.layer, self.fraction = layer, fraction

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layer = self.layer
        if isinstance(layer, nn.Conv2d):
            stride, padding = layer.stride[0], layer.padding[0]
            out: torch.Tensor = _Conv2d.apply(x, layer.weight, layer.bias, stride, padding, self.fraction)
        else:
            out = _Linear.apply(x, layer.weight, layer.bias, self.fraction)
        return out


def install(model: nn.Module, path: str, fraction: float) -> SlowBackward:
    """Replace ``model.<path>`` (a ``Conv2d`` or ``Linear``) by a ``SlowBackward`` of it."""
    if not fraction >= 0.0 or fraction == float("inf"):
        raise ValueError(f"slow_backward: fraction must be a finite number of at least 0, not {fraction!r}")
    try:
        layer = model.get_submodule(path) if path else None
    except AttributeError:
        layer = None
    if layer is None:
        known = ", ".join(name for name, _ in list(model.named_modules())[1:8])
        raise ValueError(f"slow_backward: {type(model).__name__} has no submodule {path!r} (it has {known}, ...)")
    if isinstance(layer, nn.Conv2d):
        plain = (
            layer.groups == 1
            and layer.dilation == (1, 1)
            and len(set(layer.stride)) == 1
            and isinstance(layer.padding, tuple)
            and len(set(layer.padding)) == 1
            and layer.padding_mode == "zeros"
        )
        if not plain:
            raise ValueError(
                f"slow_backward: {path} is a Conv2d with groups, dilation, a string padding or uneven strides; "
                "pick a plain one (groups=1, dilation=1, the same stride and padding on both sides)"
            )
    elif not isinstance(layer, nn.Linear):
        raise ValueError(f"slow_backward: {path} is a {type(layer).__name__}; pick a Conv2d or a Linear")
    slowed = SlowBackward(layer, fraction)
    parent, _, name = path.rpartition(".")
    setattr(model.get_submodule(parent), name, slowed)
    return slowed
