"""Whether a capture computes what the module computes.

Owns ``Checker``, which runs the module once, eagerly, and checks a capture's graphs against it on copies of
the same inputs and the same random state, and ``output_difference``, which says where two outputs differ
beyond float rounding (tensors within a tolerance of the largest magnitude, containers, dataclasses and plain
objects field by field). A trace that silently fixed a Python branch is caught here, before it is timed.

Must not import pytest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import types
from collections.abc import Sequence
from typing import Any

import torch

from pytest_fxprof.capture.errors import ProfileError, one_line, quiet
from pytest_fxprof.capture.graphs import Captured, plain_runners
from pytest_fxprof.capture.state import Kept, fresh_inputs


class Checker:
    """Runs the module once, eagerly, and checks a capture against it on copies of the same inputs."""

    def __init__(self, module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any], kept: Kept) -> None:
        self.module, self.args, self.kwargs, self.kept = module, args, kwargs, kept
        self._expected: list[Any] = []

    def expected(self) -> Any:
        if not self._expected:
            a, k = fresh_inputs(self.args, self.kwargs)
            self.kept.restore()
            try:
                self._expected.append(self.module(*a, **k))
                self.kept.check_parameters()  # its output would change from run to run: no capture can match
            except ProfileError:
                raise
            except Exception as exc:
                raise ProfileError(
                    f"{type(self.module).__name__} itself fails on these inputs: {one_line(exc)}\n"
                    "  Fix: pass inputs the module runs with (the same as a plain call, model(*args, **kwargs))."
                ) from exc
            finally:
                self.kept.restore()
        return self._expected[0]

    def problem(self, captured: Captured) -> str | None:
        """Why the capture does not run like the module, or ``None``. Raises what ``forward`` raises."""
        expected = self.expected()
        a, k = fresh_inputs(self.args, self.kwargs)
        self.kept.restore()  # the same random state as the eager run: dropout draws the same mask
        try:
            with quiet():  # a failing GraphModule prints its code to stderr; the error says enough
                actual = captured.forward(plain_runners(captured), captured.prepare(a, k))
        finally:
            self.kept.restore()
        found = output_difference(expected, actual)
        return f"the captured graph's {found}" if found else None


_RTOL = 1e-4


def output_difference(expected: Any, actual: Any, where: str = "output", depth: int = 0) -> str | None:
    """Where ``actual`` differs from ``expected`` beyond float rounding (``None`` when it does not).

    Floating tensors match within 1e-4 of the largest expected magnitude (randomly initialised models can
    output 1e-10); everything else must be equal, types included (but any dict matches any dict).
    Containers, dataclasses and plain objects are compared field by field.
    """
    if depth > 32:
        return None
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        return _tensor_difference(expected, actual, where)
    both_dicts = isinstance(expected, dict) and isinstance(actual, dict)  # torch.fx returns an OrderedDict as a dict
    if type(expected) is not type(actual) and not both_dicts:
        return f"{where} is a {type(actual).__name__}, the module returns a {type(expected).__name__}"
    if isinstance(expected, list | tuple):
        if len(expected) != len(actual):
            return f"{where} has {len(actual)} items, the module's has {len(expected)}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            found = output_difference(e, a, f"{where}[{i}]", depth + 1)
            if found:
                return found
        return None
    if isinstance(expected, dict):
        if list(expected) != list(actual):
            return f"{where} has keys {list(actual)}, the module's has {list(expected)}"
        for key in expected:
            found = output_difference(expected[key], actual[key], f"{where}[{key!r}]", depth + 1)
            if found:
                return found
        return None
    if dataclasses.is_dataclass(expected) and not isinstance(expected, type):
        for f in dataclasses.fields(expected):
            found = output_difference(
                getattr(expected, f.name), getattr(actual, f.name), f"{where}.{f.name}", depth + 1
            )
            if found:
                return found
        return None
    if isinstance(expected, float):
        same = math.isclose(expected, actual, rel_tol=_RTOL, abs_tol=_RTOL) or (
            math.isnan(expected) and math.isnan(actual)
        )
        return None if same else f"{where} is {actual!r}, the module's is {expected!r}"
    if isinstance(expected, int | bool | str | bytes | types.NoneType | torch.dtype | torch.device | torch.Size):
        return None if expected == actual else f"{where} is {actual!r}, the module's is {expected!r}"
    if hasattr(expected, "__dict__"):
        return output_difference(vars(expected), vars(actual), where, depth + 1)
    with contextlib.suppress(Exception):
        if expected == actual:
            return None
    return f"{where} ({type(actual).__name__}) is not equal to the module's"


def _tensor_difference(expected: Any, actual: Any, where: str) -> str | None:
    if not (isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)):
        return f"{where} is a {type(actual).__name__}, the module returns a {type(expected).__name__}"
    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        return (
            f"{where} is {actual.dtype} {tuple(actual.shape)}, the module's is {expected.dtype} {tuple(expected.shape)}"
        )
    if expected.is_quantized:
        expected, actual = expected.dequantize(), actual.dequantize()
    if expected.numel() == 0:
        return None
    if not (expected.is_floating_point() or expected.is_complex()):
        return None if torch.equal(expected, actual) else f"{where} differs from the module's"
    e, a = expected.detach().cpu(), actual.detach().cpu()
    finite = e[torch.isfinite(e)]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    if torch.allclose(a, e, rtol=_RTOL, atol=_RTOL * scale, equal_nan=True):
        return None
    worst = float((a - e).abs().nan_to_num(math.inf).max())
    return f"{where} differs from the module's by up to {worst:.3g} (largest value {scale:.3g})"
