"""Support for the example perf tests: a controlled slowdown, to show the gate catching one.

``FXPROF_DEMO_SLOWDOWN="layer3.0.conv2=0.5"`` makes that submodule of every example model 50 % slower:
real CPU work (``pytest_fxprof.slow_down``: a busy wait, on the thread's CPU clock, for half of the
submodule's own CPU time), invisible to the model's code.
Several ``path=fraction`` pairs may be given, separated by commas. Unset, nothing changes.

``FXPROF_DEMO_SLOW_BACKWARD="layer3.0.conv2=0.5"`` does the same to that layer's backward in the training-step
example (``pytest_fxprof.slow_backward``: the layer's gradient kernels in one custom op, then busy work for
half their time). The layer is installed whether or not it is slowed, so that the recording has it too.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from pytest_fxprof import slow_backward, slow_down

if TYPE_CHECKING:
    import torch

ENV = "FXPROF_DEMO_SLOWDOWN"
BACKWARD_ENV = "FXPROF_DEMO_SLOW_BACKWARD"


def _parse(spec: str, env: str = ENV) -> dict[str, float]:
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        path, sep, fraction = part.partition("=")
        try:
            if not sep:
                raise ValueError(part)
            out[path.strip()] = float(fraction)
        except ValueError:
            raise pytest.UsageError(f"{env}={spec!r}: write path=fraction, e.g. layer3.0.conv2=0.5") from None
    return out


@pytest.fixture
def injected_slowdown() -> Callable[[torch.nn.Module], torch.nn.Module]:
    """Apply ``FXPROF_DEMO_SLOWDOWN`` to a model (the submodules it names that the model has)."""
    wanted = _parse(os.environ.get(ENV, ""))

    def apply(model: torch.nn.Module) -> torch.nn.Module:
        names = {name for name, _ in model.named_modules()}
        for path, fraction in wanted.items():
            if path in names:
                slow_down(model, path, fraction)
        return model

    return apply


@pytest.fixture
def backward_slowdown() -> Callable[[torch.nn.Module, str], torch.nn.Module]:
    """Install ``slow_backward`` at a layer of a model, slowed by the fraction ``FXPROF_DEMO_SLOW_BACKWARD`` gives
    that layer (0 where it names none)."""
    wanted = _parse(os.environ.get(BACKWARD_ENV, ""), BACKWARD_ENV)

    def apply(model: torch.nn.Module, path: str) -> torch.nn.Module:
        slow_backward(model, path, wanted.get(path, 0.0))
        return model

    return apply
