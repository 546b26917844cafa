"""Capture by ``torch.export`` (non-strict): one ATen-level graph, unlifted, with parameters as ``get_attr``.

Owns the export call, the flattening of a call's inputs against the program's input spec (refusing inputs of
another structure, shape, dtype or Python value than the graph was specialised to, each with the fix), and
the rebuilding of the output's structure.

Must not import pytest.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any

import torch
import torch.export
from torch.utils import _pytree as pytree

from pytest_fxprof.capture.errors import CaptureError, ProfileError, one_line, quiet
from pytest_fxprof.capture.graphs import Captured, single_graph
from pytest_fxprof.capture.state import fresh_inputs
from pytest_fxprof.capture.verify import Checker
from pytest_fxprof.records.measurement import Capture


def capture(
    module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any], checker: Checker | None = None
) -> Captured:
    """``torch.export`` (non-strict) of the module, unlifted: one graph with parameters as ``get_attr``. Its graph
    runs the module's code once, so ``checker`` (the method's common signature) has nothing to check here."""
    a, k = fresh_inputs(args, kwargs)
    try:
        with quiet():
            program = torch.export.export(module, tuple(a), k, strict=False)
        gm = program.module(check_guards=False)  # input checks are done by prepare, not a node in the graph
    except Exception as exc:
        raise CaptureError(_export_advice(module, exc)) from exc
    in_spec, out_spec = program.call_spec.in_spec, program.call_spec.out_spec
    assert in_spec is not None
    placeholders = gm.graph.find_nodes(op="placeholder")
    name = type(module).__name__

    def prepare(a: Sequence[Any], k: dict[str, Any]) -> list[Any]:
        return _exported_inputs(name, in_spec, placeholders, a, k)

    cap = Capture(method="export", graphs=1)
    return single_graph(gm, cap, prepare, unflatten=lambda out: _unflatten_output(out, out_spec))


def _unflatten_output(out: Any, out_spec: pytree.TreeSpec | None) -> Any:
    if out_spec is None:
        return out
    return pytree.tree_unflatten(list(out) if isinstance(out, list | tuple) else [out], out_spec)


def _exported_inputs(
    name: str,
    in_spec: pytree.TreeSpec,
    placeholders: Sequence[torch.fx.Node],
    args: Sequence[Any],
    kwargs: dict[str, Any],
) -> list[Any]:
    """The exported graph's placeholders, flattened from ``(args, kwargs)`` against the program's input spec."""
    template = pytree.tree_unflatten([None] * in_spec.num_leaves, in_spec)
    expected_kwargs = template[1] if isinstance(template, tuple) and len(template) == 2 else {}
    if isinstance(expected_kwargs, dict) and set(expected_kwargs) == set(kwargs):
        kwargs = {key: kwargs[key] for key in expected_kwargs}  # the order the program was exported with
    flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    if spec != in_spec:
        raise ProfileError(
            f"the inputs do not match the graph torch.export captured for {name}: it takes "
            f"{pytree.treespec_pprint(in_spec)} as (args, kwargs), these are {pytree.treespec_pprint(spec)}.\n"
            "  Fix: pass the inputs with the structure they had at capture (the same positional and keyword "
            "arguments, the same containers), or capture again with these inputs."
        )
    for node, value in zip(placeholders, flat, strict=True):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and isinstance(value, torch.Tensor):
            if tuple(val.shape) != tuple(value.shape) or val.dtype != value.dtype:
                raise ProfileError(
                    f"input {node.target!r} of {name} is {value.dtype} {tuple(value.shape)}; torch.export captured "
                    f"it as {val.dtype} {tuple(val.shape)} and specialised the graph to that.\n"
                    "  Fix: profile with inputs of the captured shape, or capture again with these inputs."
                )
        elif isinstance(val, torch.Tensor) != isinstance(value, torch.Tensor):
            raise ProfileError(
                f"input {node.target!r} of {name} is a {type(value).__name__}; torch.export captured a "
                f"{type(val).__name__}. Fix: pass inputs of the captured types, or capture again."
            )
        elif isinstance(val, int | float | bool | str | types.NoneType) and (type(val), val) != (type(value), value):
            raise ProfileError(
                f"input {node.target!r} of {name} is {value!r}; torch.export specialised the graph to {val!r}, "
                "the value it had at capture.\n  Fix: profile with the captured value, or capture again."
            )
    return flat


def _export_advice(module: torch.nn.Module, exc: Exception) -> str:
    return (
        f"torch.export could not capture {type(module).__name__}: {one_line(exc)}\n"
        "  torch.export traces the whole forward as one graph: data-dependent shapes or branches "
        "(boolean masks, nonzero, if on a tensor's value) and inputs it cannot flatten stop it.\n"
        '  Fix: capture="dynamo" splits the model into graphs where it cannot go on; or make that code '
        "export-friendly (torch._check for sizes, torch.cond for branches)."
    )
