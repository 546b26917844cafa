"""A controlled slowdown of one leaf submodule: how to show that the gate catches what it should.

Owns ``slow_down`` (the forward) and ``slow_backward`` (a layer's backward, in a training step: installed by
``pytest_fxprof.slowbackward``), which the demo, the gate-quality bench and users' own checks of their gate
use. Must not import torch or pytest at module level (a module's hooks are all ``slow_down`` needs).

The slowdown is real CPU work, invisible to the model's code: a forward pre-hook notes the clock, and a
forward hook busy-waits for ``fraction`` of the time the submodule's own forward took in that call. It
waits on the thread's CPU clock by default, so a process that is descheduled meanwhile still does all
of the work, and a slowdown is relative: ``fraction=0.25`` makes the submodule 25 % slower whatever its
speed on the machine at hand. On the CPU: on a GPU the thread's clock sees only kernel launches.

Only a module that the profiled graph calls as a whole runs its hooks: a leaf module (one without
submodules), or one named in ``leaf_modules``. torch.fx traces through any other, so ``slow_down``
refuses it unless ``whole=True`` says it is kept whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_fxprof.busywork import busy_work

if TYPE_CHECKING:
    import torch


def slow_down(
    model: torch.nn.Module,
    path: str,
    fraction: float,
    *,
    whole: bool = False,
    clock: Callable[[], int] = time.thread_time_ns,
) -> tuple[Any, Any]:
    """Make ``model.<path>`` take ``1 + fraction`` times as long; return the two hook handles.

    ``handle.remove()`` on both undoes it. ``path`` is a submodule path as ``named_modules`` gives it
    (``"layer3.0.conv1"``). A path the model does not have, a module with submodules (unless ``whole``),
    or a negative or non-finite fraction raises ``ValueError`` naming it.
    """
    if not fraction >= 0.0 or fraction == float("inf"):
        raise ValueError(f"slow_down: fraction must be a finite number of at least 0, not {fraction!r}")
    try:
        target = model.get_submodule(path)
    except AttributeError:
        known = ", ".join(name for name, _ in list(model.named_modules())[1:8])
        raise ValueError(f"slow_down: {type(model).__name__} has no submodule {path!r} (it has {known}, ...)") from None
    if not whole and (not path or next(target.children(), None) is not None):
        raise ValueError(
            f"slow_down: {path or 'the model itself'!s} has submodules, so torch.fx traces through it and its "
            "hooks never run in the profiled graph; slow one of its leaves, or pass whole=True if it is kept "
            "whole (leaf_modules=)"
        )
    started: list[int] = []

    def before(_module: torch.nn.Module, _args: Any) -> None:
        started.append(clock())

    def after(_module: torch.nn.Module, _args: Any, _out: Any) -> None:
        busy_work(started.pop(), fraction, clock)

    return target.register_forward_pre_hook(before), target.register_forward_hook(after)


def slow_backward(model: torch.nn.Module, path: str, fraction: float = 0.0) -> torch.nn.Module:
    """Make the backward of ``model.<path>`` (a plain ``Conv2d`` or a ``Linear``) do ``1 + fraction`` times its
    work, for a training step's gate (``fxprof.train_step``); return the layer that replaced it.

    The layer becomes a custom ``autograd.Function`` whose backward is one custom op: its gradient kernels, then
    busy work for ``fraction`` of their time on the thread's CPU clock. That changes the captured graph, so
    install it where the baseline is recorded too, with ``fraction=0``. A path the model does not have, another
    layer type, or a negative or non-finite fraction raises ``ValueError`` naming it.
    """
    from pytest_fxprof.slowbackward import install

    return install(model, path, fraction)
