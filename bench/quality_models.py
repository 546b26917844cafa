"""The models that ``bench/gate_quality.py`` measures the gate on, and the slowdown it installs in them.

Three models of different character, each built seeded with its input:

* ``resnet18``: torchvision's ResNet18, batch 5 at 224 x 224: large convolutions.
* ``encoder``: a pre-norm transformer encoder of plain ``torch.nn`` layers (4 blocks, d_model 256,
  4 heads, MLP 1024 with GELU), batch 4 of 128 tokens: matrix products, softmax, layer norms.
* ``mobilenet``: torchvision's MobileNetV3-small, batch 5 at 224 x 224: many small depthwise kernels.

The slowdowns ``bench/gate_quality.py`` installs in them are ``pytest_fxprof.slow_down``'s.

And two training steps (``STEP_MODELS``), whose conditions are code changes made when the model is built
(``build_step``): ``resnet18-step`` (ResNet18, batch 4 at 160 x 160, train mode with batch norm frozen, as
when fine-tuning) and ``encoder-step`` (the encoder, batch 4 of 128 tokens, train mode). In both, one large
layer's backward (``layer3.0.conv2``'s, ``blocks.1.mlp.0``'s) is ``pytest_fxprof.slow_backward``'s: one custom
op, the layer's own gradient kernels, then, under ``backward+25``, busy work for a quarter of their time on the
thread's CPU clock (the same op, with no extra work, in every other condition). ``checkpoint`` puts one stage
(``layer3``, ``blocks.1``) under activation checkpointing (``torch.utils.checkpoint``, non-reentrant), so that
the backward recomputes its forward.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils.checkpoint
from torch import nn
from torchvision import models

from pytest_fxprof import slow_backward

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


ZOO = ("convnext", "vit", "bert", "gpt2")

UNTUNED = ("regnet", "efficientnet")
"""torchvision models that no default was chosen on: RegNetY-400MF and EfficientNet-B0, batch 5 at 224 x 224."""
"""Models of the zoos users bring, random weights and small configurations (they need ``timm`` and
``transformers``, which the project does not install): timm's ConvNeXt-atto at batch 5 and ViT-tiny at batch 2
(224 x 224), and transformers' BERT (2 layers, 256 wide, batch 4 of 128 tokens; captured by export) and GPT-2
(4 layers, 256 wide, batch 4 of 128 tokens; captured by dynamo)."""


def build(name: str) -> tuple[nn.Module, torch.Tensor]:
    """The model ``name`` (one of ``MODELS``, ``UNTUNED`` or ``ZOO``) in eval mode and its input, both from seed 0."""
    torch.manual_seed(0)
    model: nn.Module
    if name in ZOO:
        return _zoo(name)
    if name == "resnet18":
        model = models.resnet18(weights=None)
        shape: tuple[int, ...] = (5, 3, 224, 224)
    elif name == "encoder":
        model = Encoder()
        shape = (4, 128, 256)
    elif name == "mobilenet":
        model = models.mobilenet_v3_small(weights=None)
        shape = (5, 3, 224, 224)
    elif name == "regnet":
        model = models.regnet_y_400mf(weights=None)
        shape = (5, 3, 224, 224)
    elif name == "efficientnet":
        model = models.efficientnet_b0(weights=None)
        shape = (5, 3, 224, 224)
    else:
        raise ValueError(f"unknown model {name!r}; known: {', '.join((*MODELS, *UNTUNED))}")
    return model.eval(), torch.randn(*shape)


def _zoo(name: str) -> tuple[nn.Module, torch.Tensor]:
    if name in ("convnext", "vit"):
        import timm

        arch, batch = ("convnext_atto", 5) if name == "convnext" else ("vit_tiny_patch16_224", 2)
        model: nn.Module = timm.create_model(arch, pretrained=False)
        return model.eval(), torch.randn(batch, 3, 224, 224)
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

    if name == "bert":
        config = BertConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=1024)
        model = BertModel(config)
        vocab = config.vocab_size
    else:
        gpt = GPT2Config(n_embd=256, n_layer=4, n_head=4, n_positions=256, use_cache=False)
        model = GPT2Model(gpt)
        vocab = gpt.vocab_size
    return nn.Module.eval(model), torch.randint(0, vocab, (4, 128))  # typed, where transformers ships its types


STEP_MODELS = ("resnet18-step", "encoder-step")
STEP_CONDITIONS = ("none", "backward+25", "checkpoint")
STEP_TARGETS = {"resnet18-step": ("layer3.0.conv2", "layer3"), "encoder-step": ("blocks.1.mlp.0", "blocks.1")}
"""Per step model: the layer whose backward ``backward+25`` slows, and the stage ``checkpoint`` wraps."""


def checkpointed(stage: nn.Module) -> None:
    """Put ``stage`` under activation checkpointing, as a change to its class's ``forward`` would: its forward
    runs again in the backward, and every module keeps its path."""
    base = type(stage)

    class Checkpointed(base):  # type: ignore[valid-type, misc]
        def forward(self, *args: Any) -> Any:
            return torch.utils.checkpoint.checkpoint(super().forward, *args, use_reentrant=False)

    Checkpointed.__name__ = base.__name__
    stage.__class__ = Checkpointed


def build_step(name: str, condition: str) -> tuple[nn.Module, torch.Tensor]:
    """The step model ``name`` under ``condition`` (one of ``STEP_CONDITIONS``) in train mode, and its input."""
    if condition not in STEP_CONDITIONS:
        raise ValueError(f"unknown step condition {condition!r}; known: {', '.join(STEP_CONDITIONS)}")
    torch.manual_seed(0)
    model: nn.Module
    if name == "resnet18-step":
        model, x = models.resnet18(weights=None), torch.randn(4, 3, 160, 160)
    elif name == "encoder-step":
        model, x = Encoder(), torch.randn(4, 128, 256)
    else:
        raise ValueError(f"unknown step model {name!r}; known: {', '.join(STEP_MODELS)}")
    layer, stage = STEP_TARGETS[name]
    slow_backward(model, layer, 0.25 if condition == "backward+25" else 0.0)
    if condition == "checkpoint":
        checkpointed(model.get_submodule(stage))
    model.train()
    if name == "resnet18-step":  # batch norm frozen, as when fine-tuning: its statistics are not updated twice
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()
    return model, x
