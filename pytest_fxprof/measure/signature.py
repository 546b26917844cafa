"""The test's side of a measurement: what it handed to the model, and the module's train/eval mode.

Owns ``setup_of``, which writes every input the call takes as a line (a tensor as its dtype, shape and device;
a Python scalar, string or None as itself; anything else as its type) under its path in the call
(``args[0]``, ``kwargs['mask']``, ``args[1][0]``), and the mode as ``train``, ``eval`` or how many modules
are in train mode. A baseline records it, so that a check with other inputs or another mode is told apart
from a slower model.

Must not import pytest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from pytest_fxprof.records.measurement import Setup

PLAIN = (bool, int, float, str, type(None))


def input_line(path: str, value: Any) -> str:
    """One input: where it sits in the call, and what it is."""
    if isinstance(value, torch.Tensor):
        shape = ", ".join(str(d) for d in value.shape)
        return f"{path}: {str(value.dtype).removeprefix('torch.')}[{shape}] {value.device}"
    if isinstance(value, PLAIN):
        return f"{path}: {value!r}"
    return f"{path}: {type(value).__name__}"


def mode_of(module: torch.nn.Module) -> str:
    """``train`` or ``eval`` where every module agrees, else how many are in train mode."""
    modes = [m.training for m in module.modules()]
    if all(modes):
        return "train"
    if not any(modes):
        return "eval"
    return f"{sum(modes)} of {len(modes)} modules in train mode"


def setup_of(module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any]) -> Setup:
    """What ``module(*args, **kwargs)`` is handed, and in which mode."""
    leaves, _ = pytree.tree_flatten_with_path((tuple(args), dict(sorted(kwargs.items()))))
    lines = []
    for key_path, value in leaves:
        top, *rest = key_path
        head = "args" if getattr(top, "idx", None) == 0 else "kwargs"
        lines.append(input_line(head + pytree.keystr(tuple(rest)), value))
    return Setup(inputs=tuple(lines), mode=mode_of(module))
