"""Support for the example perf tests: a controlled slowdown, to show the gate catching one.

``FXPROF_DEMO_SLOWDOWN="layer3.0.conv1=0.5"`` makes that submodule of every example model 50 % slower:
real CPU work (a busy wait, on the thread's CPU clock, for half of the submodule's own CPU time), invisible
to the model's code.
Several ``path=fraction`` pairs may be given, separated by commas. Unset, nothing changes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch

ENV = "FXPROF_DEMO_SLOWDOWN"


def _parse(spec: str) -> dict[str, float]:
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        path, sep, fraction = part.partition("=")
        if not sep:
            raise pytest.UsageError(f"{ENV}={spec!r}: write path=fraction, e.g. layer3.0.conv1=0.5")
        out[path.strip()] = float(fraction)
    return out


def slow_down(model: torch.nn.Module, fraction: float, path: str) -> None:
    """Make ``model.<path>`` take ``1 + fraction`` times as long, whatever its own time is."""
    target = model.get_submodule(path)
    started: list[int] = []

    def before(_module: torch.nn.Module, _args: Any) -> None:
        started.append(time.thread_time_ns())

    def after(_module: torch.nn.Module, _args: Any, _out: Any) -> None:
        begin = started.pop()
        until = time.thread_time_ns() + (time.thread_time_ns() - begin) * fraction
        while time.thread_time_ns() < until:
            pass

    target.register_forward_pre_hook(before)
    target.register_forward_hook(after)


@pytest.fixture
def injected_slowdown() -> Callable[[torch.nn.Module], torch.nn.Module]:
    """Apply ``FXPROF_DEMO_SLOWDOWN`` to a model (the submodules it names that the model has)."""
    wanted = _parse(os.environ.get(ENV, ""))

    def apply(model: torch.nn.Module) -> torch.nn.Module:
        names = {name for name, _ in model.named_modules()}
        for path, fraction in wanted.items():
            if path in names:
                slow_down(model, fraction, path)
        return model

    return apply
