"""A performance test of a training step: ResNet18's forward, loss, backward and SGD step, node by node.

    pytest examples/test_training.py --fxprof-update   # record its baseline (forward and backward nodes)
    pytest examples/test_training.py --fxprof          # fail when a node, module or direction got slower

``layer3.0.conv2`` is a custom layer (``pytest_fxprof.slow_backward``: its backward in one custom op), so that
the demo can make that backward slower with ``FXPROF_DEMO_SLOW_BACKWARD=layer3.0.conv2=0.5``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torchvision import models

from pytest_fxprof import Fxprof


def test_resnet18_train_step(fxprof: Fxprof, backward_slowdown: Callable[..., torch.nn.Module]) -> None:
    torch.manual_seed(0)
    model = backward_slowdown(models.resnet18(weights=None).train(), "layer3.0.conv2")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images, labels = torch.randn(4, 3, 112, 112), torch.tensor([1, 5, 7, 9])
    result = fxprof.train_step(
        model, images, loss_fn=lambda out: torch.nn.functional.cross_entropy(out, labels), optimizer=optimizer
    )
    directions = {n.info.direction for n in result.nodes}
    assert directions == {"forward", "backward", "optimizer"}
    assert all(p.grad is None for p in model.parameters())  # the step left nothing behind
