"""Performance tests of three torchvision architectures of different character.

    pytest examples --fxprof-update   # record baselines (fresh processes, committed in baselines/)
    pytest examples --fxprof          # fail the test whose nodes or total got slower
    pytest examples                   # run each model once, untimed

ResNet18: large convolutions. MobileNetV3-small: many small depthwise kernels, squeeze-excitation and
hardswish. A small VisionTransformer: attention, layer norms and MLPs.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torchvision import models
from torchvision.models import VisionTransformer

from pytest_fxprof import Fxprof

Slowdown = Callable[[torch.nn.Module], torch.nn.Module]


def test_resnet18(fxprof: Fxprof, injected_slowdown: Slowdown) -> None:
    model = injected_slowdown(models.resnet18(weights=None).eval())
    result = fxprof(model, torch.randn(1, 3, 224, 224))
    assert len(result.nodes) > 60


def test_mobilenet_v3_small(fxprof: Fxprof, injected_slowdown: Slowdown) -> None:
    model = injected_slowdown(models.mobilenet_v3_small(weights=None).eval())
    result = fxprof(model, torch.randn(1, 3, 224, 224))
    assert len(result.nodes) > 100


@pytest.mark.fxprof(passes=30)
def test_vision_transformer(fxprof: Fxprof, injected_slowdown: Slowdown) -> None:
    model = VisionTransformer(
        image_size=96, patch_size=16, num_layers=4, num_heads=4, hidden_dim=192, mlp_dim=768, num_classes=100
    )
    model = injected_slowdown(model.eval())
    result = fxprof(model, torch.randn(2, 3, 96, 96))
    assert any(n.target == "MultiheadAttention" for n in result.nodes)
