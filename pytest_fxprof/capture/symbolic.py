"""Capture by ``torch.fx.symbolic_trace``: one graph that shares the module's parameters and submodules.

Owns the tracer (``symbolic_trace``'s, plus user-named leaf modules and a note of the submodule that broke
tracing), the error that names that submodule (found in the traceback for a user's tracer), the user's source
line and the fix, and the binding of a call's inputs to the graph's placeholders (including a tracer given
``concrete_args``).

Must not import pytest.
"""

from __future__ import annotations

import inspect
import sys
import traceback
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
import torch.fx._pytree

from pytest_fxprof.capture.errors import CaptureError, ProfileError
from pytest_fxprof.capture.graphs import Captured, LeafSpec, single_graph
from pytest_fxprof.capture.nodes import GUARD_META
from pytest_fxprof.capture.sources import user_frame
from pytest_fxprof.records.measurement import Capture


class SymbolicTraceError(CaptureError):
    """A failed symbolic trace, with the submodule it failed in (``(path, class name)``, path ``""`` for the root)."""

    def __init__(self, message: str, failed_in: tuple[str, str] | None, cause: Exception) -> None:
        super().__init__(message)
        self.failed_in = failed_in
        self.cause = cause


def capture(module: torch.nn.Module, leaf_modules: Sequence[LeafSpec], tracer: torch.fx.Tracer | None) -> Captured:
    """Symbolic tracing, with ``leaf_modules`` kept whole or a user's ``tracer``; not checked against the module."""
    gm, cap = trace_symbolic(module, leaf_modules, tracer)
    _mark_guards(gm)
    if isinstance(gm.graph._codegen, torch.fx.graph._PyTreeCodeGen):  # a tracer given concrete_args

        def prepare(a: Sequence[Any], k: dict[str, Any]) -> list[Any]:
            return _pytree_placeholder_args(gm, module, a, k)

        return single_graph(gm, cap, prepare, unflatten=gm.graph._codegen.process_outputs)
    return single_graph(gm, cap, lambda a, k: placeholder_args(gm, module, a, k))


class _LeafTracer(torch.fx.Tracer):
    """symbolic_trace's tracer, plus user-named leaf modules and a note of the submodule that broke."""

    def __init__(self, leaf_modules: Sequence[LeafSpec]) -> None:
        super().__init__()
        self.leaf_types = tuple(spec for spec in leaf_modules if isinstance(spec, type))
        self.leaf_paths = {spec for spec in leaf_modules if isinstance(spec, str)}
        self.failed_in: tuple[str, str] | None = None
        # each node's source line, for reports, recorded by create_node: torch.fx's own recording imports
        # torch._inductor and sympy the first time (about 2 s in every process that traces)
        self.record_stack_traces = False

    def create_node(  # noqa: PLR0917 (torch.fx's signature)
        self,
        kind: str,
        target: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        name: str | None = None,
        type_expr: Any | None = None,
    ) -> torch.fx.Node:
        node = super().create_node(kind, target, args, kwargs, name, type_expr)
        if not node.stack_trace:
            trace = forward_stack()
            if trace:
                node.stack_trace = trace
        return node

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        if module_qualified_name in self.leaf_paths or isinstance(m, self.leaf_types):
            return True
        return super().is_leaf_module(m, module_qualified_name)

    def call_module(
        self, m: torch.nn.Module, forward: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        try:
            return super().call_module(m, forward, args, kwargs)
        except Exception:
            if self.failed_in is None:  # the innermost module records itself first
                self.failed_in = (self.path_of_module(m), type(m).__name__)
            raise


_TRACE = torch.fx.Tracer.trace.__code__


def forward_stack() -> str:
    """The stack from the traced module's outermost ``forward`` in to the caller's caller, formatted as torch.fx
    records a node's ``stack_trace`` (empty outside a trace, or where no ``forward`` is on it)."""
    frames: list[types.FrameType] = []
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code is not _TRACE:
        frames.append(frame)
        frame = frame.f_back
    if frame is None:
        return ""
    frames.reverse()
    first = next((i for i, f in enumerate(frames) if f.f_code.co_name == "forward"), None)
    if first is None:
        return ""
    summary = traceback.StackSummary.extract((f, f.f_lineno) for f in frames[first:])
    return "".join(summary.format()).strip()


def trace_symbolic(
    module: torch.nn.Module, leaf_modules: Sequence[LeafSpec] = (), tracer: torch.fx.Tracer | None = None
) -> tuple[torch.fx.GraphModule, Capture]:
    """Trace ``module`` into a GraphModule that shares its parameters, buffers and submodules."""
    active = tracer if tracer is not None else _LeafTracer(leaf_modules)
    before = set(vars(module))
    try:
        try:
            graph = active.trace(module)
        except Exception as exc:
            failed = active.failed_in if isinstance(active, _LeafTracer) else _failed_in(module, active, exc)
            raise SymbolicTraceError(_capture_advice(module, exc, tracer, failed), failed, exc) from exc
        gm = torch.fx.GraphModule(active.root, graph, type(module).__name__)  # copies what it needs
    finally:
        for name in set(vars(module)) - before:  # tensor constants torch.fx parks on the traced module
            delattr(module, name)
    method = "symbolic_trace" if tracer is None else f"tracer:{type(tracer).__name__}"
    return gm, Capture(method=method, leaf_modules=tuple(sorted(leaf_names(leaf_modules))))


def leaf_names(leaf_modules: Sequence[LeafSpec]) -> list[str]:
    """How a capture record names the submodules kept whole: a path as it is, a class as ``module.QualName``."""
    return [s if isinstance(s, str) else f"{s.__module__}.{s.__qualname__}" for s in leaf_modules]


def _failed_in(module: torch.nn.Module, tracer: torch.fx.Tracer, exc: Exception) -> tuple[str, str] | None:
    """The submodule a user's tracer failed in, from the traceback: the innermost frame of a submodule's own
    code, or of the tracer's code given a submodule (its ``call_module``); ``None`` where none is found."""
    paths = {id(m): path for path, m in module.named_modules()}
    found = None
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        owner = frame.f_locals.get("self")
        if id(owner) in paths:
            found = owner
        elif owner is tracer:
            code = frame.f_code
            given = [frame.f_locals.get(name) for name in code.co_varnames[1 : code.co_argcount]]
            found = next((m for m in given if id(m) in paths), found)
        tb = tb.tb_next
    return None if found is None else (paths[id(found)], type(found).__name__)


def _capture_advice(
    module: torch.nn.Module, exc: Exception, tracer: torch.fx.Tracer | None, failed: tuple[str, str] | None
) -> str:
    cause = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    name = type(module).__name__
    asked = "torch.fx.symbolic_trace" if tracer is None else f"the tracer passed (tracer={type(tracer).__name__})"
    lines = [f"{asked} could not capture {name}: {cause}"]
    if failed and failed[0]:
        lines.append(f"  while tracing submodule {failed[0]!r} ({failed[1]})")
    where = user_frame(exc)
    if where:
        lines.append(f"  at {where}")
    if tracer is not None:
        lines.append(tracer_fix(failed))
        return "\n".join(lines)
    lines.append(
        "  Data-dependent control flow (if/for on tensor values), len()/int() of a traced value and "
        "submodules kept in plain lists cannot be traced symbolically."
    )
    if failed and failed[0]:
        lines.append(
            f"  Fix: keep that submodule whole as one timed node: fxprof(model, ..., leaf_modules=[{failed[0]!r}]) "
            f"or leaf_modules=[{failed[1]}]; or pass tracer= a torch.fx.Tracer that handles it."
        )
    else:
        lines.append(
            "  Fix: pass tracer= a torch.fx.Tracer that handles the construct, or make the failing code "
            "traceable (torch.fx.wrap a function to keep it as one node)."
        )
    return "\n".join(lines)


AUTO_CHOOSES = (
    'capture="auto" choose: symbolic tracing (keeping each submodule that breaks it whole), then torch.export, '
    "then dynamo"
)
"""What ``capture="auto"`` does without a tracer or a leaf list, for the fix that says to drop them."""


def tracer_fix(failed: tuple[str, str] | None) -> str:
    """The fix for a user's tracer that could not trace: mend the tracer, or let ``auto`` choose without it."""
    keep = f" (its is_leaf_module can keep {failed[0]!r} whole)" if failed and failed[0] else ""
    return f"  Fix: make the tracer handle it{keep}, or drop tracer= to let {AUTO_CHOOSES}."


def placeholder_args(
    gm: torch.fx.GraphModule, module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any]
) -> list[Any]:
    """The graph's positional inputs, bound from the call's args and kwargs like ``module(...)`` would."""
    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
    except TypeError as exc:
        raise ProfileError(f"the inputs do not fit {type(module).__name__}.forward: {exc}") from None
    bound.apply_defaults()
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    # torch.fx makes one placeholder per argument of forward, in order, but may rename it (a concrete argument
    # ``flag`` becomes ``flag_1``): by position where the counts agree, else by name
    params = list(inspect.signature(module.forward).parameters)
    names = params if len(params) == len(placeholders) else [str(n.target).lstrip("*") for n in placeholders]
    fixed = _specialised(gm)
    out: list[Any] = []
    for node, name in zip(placeholders, names, strict=True):
        target = str(node.target)
        if target.startswith("**"):
            raise ProfileError(f"{type(module).__name__}.forward takes **{name}; pass those inputs by name")
        value = bound.arguments.get(name, node.args[0] if node.args else None)
        if node in fixed:
            _refuse_another(module, name, value, fixed[node])
        if target.startswith("*"):
            out.extend(value or ())
        else:
            out.append(value)
    return out


_SPECIALISED = "has been specialized to have value"
"""What the message of a guard that torch.fx adds for a concrete argument says."""

_ASSERT_IS_NONE = getattr(torch.fx._symbolic_trace, "_assert_is_none", None)
"""The guard torch.fx adds for an argument made concrete as None (where this torch has one)."""


def _guard_of(node: torch.fx.Node) -> tuple[torch.fx.Node | None, torch.fx.Node, Any] | None:
    """``(the comparison it asserts, the placeholder, the value)`` if ``node`` is a guard torch.fx added for a
    concrete argument: ``torch._assert(placeholder == value, "... has been specialized to have value ...")``,
    or for None ``_assert_is_none(placeholder, "...")``, which asserts no comparison of its own (None)."""
    if node.op != "call_function" or len(node.args) < 2:
        return None
    check, message = node.args[0], node.args[1]
    if not (isinstance(message, str) and _SPECIALISED in message and isinstance(check, torch.fx.Node)):
        return None
    if _ASSERT_IS_NONE is not None and node.target is _ASSERT_IS_NONE:
        return (None, check, None) if check.op == "placeholder" else None
    if node.target is not torch._assert or check.op != "call_function" or len(check.args) != 2:
        return None
    placeholder, value = check.args
    if not (isinstance(placeholder, torch.fx.Node) and placeholder.op == "placeholder"):
        return None
    return check, placeholder, value


def _mark_guards(gm: torch.fx.GraphModule) -> None:
    """Mark the guards of concrete arguments (and the comparisons only they use) so that they are not timed."""
    for node in gm.graph.nodes:
        guard = _guard_of(node)
        if guard is not None:
            node.meta[GUARD_META] = True
            if guard[0] is not None and len(guard[0].users) == 1:
                guard[0].meta[GUARD_META] = True


def _specialised(gm: torch.fx.GraphModule) -> dict[torch.fx.Node, Any]:
    """The placeholders that a tracer's concrete arguments fixed, with their value."""
    out = {}
    for node in gm.graph.nodes:
        guard = _guard_of(node)
        if guard is not None:
            out[guard[1]] = guard[2]
    return out


def _refuse_another(module: torch.nn.Module, name: str, value: Any, fixed: Any) -> None:
    """Refuse a call whose ``name`` is not the value the tracer fixed: the graph of another call would be timed."""
    if _same(value, fixed):
        return
    was, now = _shown(fixed), _shown(value)
    raise ProfileError(
        f"the tracer fixed {name}={was} when it traced {type(module).__name__} (concrete_args), but "
        f"this call passes {name}={now}: the graph traced for {was} would be timed.\n"
        f"  Fix: pass {name}={was}, or a tracer whose concrete_args give {name} this value."
    )


def _shown(value: Any) -> str:
    """A value as a message shows it: a tensor by its kind, never its (possibly huge) contents."""
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')}{list(value.shape)} tensor"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _same(value: Any, fixed: Any) -> bool:
    if value is fixed:
        return True
    try:
        return bool(type(value) is type(fixed) and value == fixed)
    except Exception:  # noqa: BLE001 - a value that cannot say it equals: not the same
        return False


def _pytree_placeholder_args(
    gm: torch.fx.GraphModule, module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any]
) -> list[Any]:
    codegen = gm.graph._codegen
    assert isinstance(codegen, torch.fx.graph._PyTreeCodeGen)
    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
    except TypeError as exc:
        raise ProfileError(f"the inputs do not fit {type(module).__name__}.forward: {exc}") from None
    bound.apply_defaults()
    info = codegen.pytree_info
    # the traced function is the unbound forward: its first argument is the module, not a placeholder
    positional = [module if i == 0 else bound.arguments.get(name) for i, name in enumerate(info.orig_args)]
    flat = list(torch.fx._pytree.tree_flatten_spec(positional, info.in_spec))[1:]
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    if len(flat) != len(placeholders):
        raise ProfileError(
            f"the inputs of {type(module).__name__} flatten to {len(flat)} values, the traced graph takes "
            f"{len(placeholders)}: pass inputs with the structure given to the tracer's concrete_args"
        )
    fixed = _specialised(gm)
    for node, value in zip(placeholders, flat, strict=True):
        if node in fixed:
            _refuse_another(module, str(node.target), value, fixed[node])
    return flat
