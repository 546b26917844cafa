"""The test's side of a measurement: what it handed to the model, and the module's train/eval mode.

Owns ``setup_of``, which writes every input the call takes as a line (a tensor as its dtype, shape and device;
a Python scalar, string or None as itself; anything else as its type) under its path in the call
(``args[0]``, ``kwargs['mask']``, ``args[1][0]``), the mode as ``train``, ``eval`` or how many modules
are in train mode, and the globals of torch that the test changed before the call (``state_of``: the default
dtype or device, grad mode, a function of ``torch``, ``torch.nn.functional`` or ``torch.Tensor`` it replaced),
against what they were as the test began (``note_start``, called as each test's setup begins). A baseline
records it, so that a check with other inputs, another mode or another state is told apart from a slower model,
and names the test that changed a global as the cause.

Must not import pytest.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from pytest_fxprof.records.measurement import REPLACED, Setup

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


def torch_settings() -> dict[str, str]:
    """The globals of torch that change what a model computes or how fast, as text."""
    autocast = getattr(torch, "is_autocast_enabled", None)
    return {
        "default dtype": str(torch.get_default_dtype()),
        "default device": str(torch.get_default_device()),
        "grad mode": "on" if torch.is_grad_enabled() else "off",
        "inference mode": "on" if torch.is_inference_mode_enabled() else "off",
        "float32 matmul precision": torch.get_float32_matmul_precision(),
        "deterministic algorithms": "on" if torch.are_deterministic_algorithms_enabled() else "off",
        "mkldnn": "on" if torch.backends.mkldnn.enabled else "off",
        "autocast on the CPU": "on" if autocast is not None and autocast("cpu") else "off",
    }


NAMESPACES: tuple[tuple[str, Any], ...] = (
    ("torch", torch),
    ("torch.nn.functional", torch.nn.functional),
    ("torch.Tensor", torch.Tensor),
)
"""Where a replaced function changes what a model runs (``torch.nn.functional.relu = ...``)."""


@dataclass(frozen=True)
class Globals:
    """The globals of torch at one moment: settings as text, and the object each public name of ``NAMESPACES``
    held."""

    settings: dict[str, str]
    names: dict[str, Any]

    @classmethod
    def now(cls) -> Globals:
        names = {}
        for prefix, space in NAMESPACES:
            for name, value in list(vars(space).items()):
                if not name.startswith("_") and callable(value) and not isinstance(value, type):
                    names[f"{prefix}.{name}"] = value
        return cls(torch_settings(), names)


def _replaced(now: Any, before: Any) -> bool:
    """Whether ``now`` is another function than ``before``: not the same object, nor a wrapper of it (torch
    wraps some of its own functions as a lazy submodule is first imported: ``torch._dynamo`` wraps
    ``torch.manual_seed``, keeping it as ``__wrapped__``)."""
    if now is before:
        return False
    try:
        return inspect.unwrap(now, stop=lambda f: f is before) is not before
    except ValueError:  # a chain of wrappers that loops
        return True


_START: list[Globals] = []
"""The globals as the test that runs now began (``note_start``); empty outside a test."""


def note_start() -> None:
    """Remember the globals as a test begins (before its fixtures), for ``state_of``."""
    _START[:] = [Globals.now()]


def state_of() -> tuple[str, ...]:
    """What the running test changed of torch's globals since it began: ``default dtype: torch.float64``,
    ``replaced: torch.nn.functional.relu``; empty outside a test or where it changed none."""
    if not _START:
        return ()
    start, now = _START[0], Globals.now()
    lines = [f"{k}: {v}" for k, v in now.settings.items() if start.settings.get(k) != v]
    replaced = sorted(k for k, v in now.names.items() if k in start.names and _replaced(v, start.names[k]))
    return (*lines, *(REPLACED + name for name in replaced))


def call_inputs(args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Each input a call takes, with where it sits in it (``args[0]``, ``kwargs['mask']``, ``args[1][0]``)."""
    leaves, _ = pytree.tree_flatten_with_path((tuple(args), dict(sorted(kwargs.items()))))
    out = []
    for key_path, value in leaves:
        top, *rest = key_path
        head = "args" if getattr(top, "idx", None) == 0 else "kwargs"
        out.append((head + pytree.keystr(tuple(rest)), value))
    return out


def setup_of(module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any]) -> Setup:
    """What ``module(*args, **kwargs)`` is handed, in which mode and state."""
    lines = [input_line(where, value) for where, value in call_inputs(args, kwargs)]
    return Setup(inputs=tuple(lines), mode=mode_of(module), state=state_of())
