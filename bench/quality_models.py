"""The models that ``bench/gate_quality.py`` measures the gate on, and the slowdown it installs in them.

Three models of different character, each built seeded with its input:

* ``resnet18``: torchvision's ResNet18, batch 5 at 224 x 224: large convolutions.
* ``encoder``: a pre-norm transformer encoder of plain ``torch.nn`` layers (4 blocks, d_model 256,
  4 heads, MLP 1024 with GELU), batch 4 of 128 tokens: matrix products, softmax, layer norms.
* ``mobilenet``: torchvision's MobileNetV3-small, batch 5 at 224 x 224: many small depthwise kernels.

``slow_down`` makes a submodule slower by a fraction of its own time in each call: a busy wait, real
CPU work measured on the thread's CPU clock (so a preempted process still does all of it), invisible
to the model's code.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn
from torchvision import models

MODELS = ("resnet18", "encoder", "mobilenet")


class Attention(nn.Module):
    """Multi-head self-attention from ``nn.Linear`` layers and tensor ops, so that ``torch.fx`` traces it."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.dim = dim
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens = x.shape[0], x.shape[1]
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        weights = torch.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1)
        mixed = (weights @ v).transpose(1, 2).reshape(batch, tokens, self.dim)
        out: torch.Tensor = self.out(mixed)
        return out


class Block(nn.Module):
    """A pre-norm transformer block: attention and an MLP, each behind a layer norm and a residual."""

    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        out: torch.Tensor = x + self.mlp(self.norm2(x))
        return out


class Encoder(nn.Module):
    """A transformer encoder of ``depth`` pre-norm blocks and a final layer norm."""

    def __init__(self, depth: int = 4, dim: int = 256, heads: int = 4, hidden: int = 1024) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, heads, hidden) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        out: torch.Tensor = self.norm(x)
        return out


def build(name: str) -> tuple[nn.Module, torch.Tensor]:
    """The model ``name`` (one of ``MODELS``) in eval mode and its input, both from seed 0."""
    torch.manual_seed(0)
    model: nn.Module
    if name == "resnet18":
        model = models.resnet18(weights=None)
        shape: tuple[int, ...] = (5, 3, 224, 224)
    elif name == "encoder":
        model = Encoder()
        shape = (4, 128, 256)
    elif name == "mobilenet":
        model = models.mobilenet_v3_small(weights=None)
        shape = (5, 3, 224, 224)
    else:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return model.eval(), torch.randn(*shape)


def slow_down(model: nn.Module, path: str, fraction: float) -> None:
    """Make ``model.<path>`` take ``1 + fraction`` times as long in every call, whatever its own time is."""
    target = model.get_submodule(path)
    started: list[int] = []

    def before(_module: nn.Module, _args: Any) -> None:
        started.append(time.thread_time_ns())

    def after(_module: nn.Module, _args: Any, _out: Any) -> None:
        begin = started.pop()
        until = time.thread_time_ns() + (time.thread_time_ns() - begin) * fraction
        while time.thread_time_ns() < until:
            pass

    target.register_forward_pre_hook(before)
    target.register_forward_hook(after)
