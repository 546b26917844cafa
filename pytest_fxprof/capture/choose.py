"""Which capture runs: the mode asked for, or ``auto``'s first that computes what the module computes.

Owns ``capture_module``, the entry to this package for a forward (``step.capture_step`` is a training step's):
it refuses what cannot be captured before trying (each refusal with its fix), keeps the module as it was
throughout, and for ``auto`` tries symbolic tracing (keeping each submodule that breaks it whole, up to
``MAX_LEAF_RETRIES``), then ``torch.export``, then dynamo, checking each against the module's own output;
when all fail, the error lists why each one did. Where symbolic tracing succeeded only by keeping whole, on its
own, submodules that hold others, ``auto`` also tries export, then dynamo, and keeps the capture that resolves
the most of the model (``resolved_submodules``), symbolic tracing on a tie; the submodules it kept whole that
remain one node are the record's ``opaque``. What the user asked for is honoured or fails with its own
error: given a tracer or a leaf list, ``auto`` traces with them only, and never puts other graphs in their place.

Must not import pytest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import itertools
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from torch.utils import _pytree as pytree

from pytest_fxprof.capture import methods, symbolic
from pytest_fxprof.capture.errors import CaptureError, ProfileError, one_line
from pytest_fxprof.capture.graphs import Captured, LeafSpec
from pytest_fxprof.capture.nodes import describe_nodes
from pytest_fxprof.capture.state import kept_as_is
from pytest_fxprof.capture.symbolic import SymbolicTraceError
from pytest_fxprof.capture.verify import Checker
from pytest_fxprof.records.measurement import Capture

MAX_LEAF_RETRIES = 8
"""How many submodules ``auto`` keeps whole, one per failed symbolic trace, before it tries ``export``."""


def capture_module(
    module: torch.nn.Module,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    mode: str = "auto",
    leaf_modules: Sequence[LeafSpec] = (),
    tracer: torch.fx.Tracer | None = None,
    known: Capture | None = None,
) -> Captured:
    """Capture ``module`` called with ``args`` and ``kwargs`` (used as examples, never changed) by ``mode``.

    ``symbolic``: ``torch.fx`` symbolic tracing (``leaf_modules`` kept whole, or a user ``tracer``).
    ``export``: ``torch.export`` (non-strict), one graph. ``dynamo``: ``torch.compile`` with a backend that
    keeps each graph, several where the model has graph breaks. ``auto``: symbolic tracing, keeping each
    submodule that breaks it whole; then export; then dynamo; the first whose graphs run like the module, but
    where symbolic tracing kept submodules that hold submodules whole, export or dynamo where either resolves
    more of the model (``_resolve_further``); ``Capture.opaque`` names the submodules kept whole that remain so.
    ``auto`` given a ``tracer`` or ``leaf_modules`` traces symbolically with them or raises ``CaptureError``
    (a ``tracer`` beside ``leaf_modules``, or either with ``export`` or ``dynamo``, is refused before trying).
    Every capture but an explicit ``symbolic`` one is checked against the module's own output. The module
    is left as it was (modes, buffers, attributes) and so is torch's random state.

    ``known``: how ``auto`` captured the same module in an earlier process (its ``Capture`` record: the method and
    every submodule kept whole). ``auto`` without a tracer then captures that way first, checked as ever, and keeps
    the record's ``detail`` and ``opaque``; only where that fails does it try every way again (``_known``).
    """
    if mode not in methods.MODES:
        raise CaptureError(f"unknown capture mode {mode!r}; choose one of {', '.join(methods.MODES)}")
    _check_request(module, args, kwargs, mode=mode, leaf_modules=leaf_modules, tracer=tracer)
    with kept_as_is(module) as kept:
        if mode == "symbolic":
            return symbolic.capture(module, leaf_modules, tracer)
        checker = Checker(module, args, kwargs, kept)
        if mode == "auto":
            if known is not None and tracer is None:
                captured = _known(module, args, kwargs, known, leaf_modules=leaf_modules, checker=checker)
                if captured is not None:
                    return captured
            return _auto(module, args, kwargs, leaf_modules=leaf_modules, tracer=tracer, checker=checker)
        captured = _capture_by(mode, module, args, kwargs, checker)
        problem = checker.problem(captured)
        if problem:
            raise CaptureError(
                f"{methods.BY_NAME[mode].label} captured {type(module).__name__}, but {problem}.\n"
                '  Fix: capture="auto" tries the other modes; capture="symbolic" with leaf_modules=[...] keeps '
                "the part that differs whole."
            )
        return captured


def check_module(module: Any, args: Any, kwargs: Any) -> None:
    """Refuse, with the fix, a module that no capture can take or that nothing could time: not an
    ``nn.Module``, a TorchScript module, or one (or inputs) on the meta device, which holds no data."""
    if isinstance(module, torch.jit.ScriptModule):
        raise ProfileError(
            f"fxprof cannot capture a TorchScript module ({type(module).__name__}, made by torch.jit.script or "
            "torch.jit.trace): its code is TorchScript, not Python that torch.fx can follow. Fix: pass the "
            "nn.Module you scripted (model, not torch.jit.script(model))"
        )
    if not isinstance(module, torch.nn.Module):
        raise ProfileError(f"fxprof profiles a torch.nn.Module, got {type(module).__name__}")
    tensors = [*module.parameters(), *module.buffers()]
    tensors += [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    if any(t.is_meta for t in tensors):
        raise ProfileError(
            f"{type(module).__name__} has parameters, buffers or inputs on the meta device, which holds no data: "
            "nothing can run on it, so nothing can be timed. Fix: materialise the model on a real device "
            "(module.to_empty(device='cpu') and load its weights, or build it there) and pass inputs there too"
        )


def _check_request(
    module: Any,
    args: Any,
    kwargs: Any,
    *,
    mode: str,
    leaf_modules: Sequence[LeafSpec],
    tracer: torch.fx.Tracer | None,
) -> None:
    """Refuse what cannot be captured before trying, each with the fix."""
    check_module(module, args, kwargs)
    name = type(module).__name__
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise ProfileError(f"the positional inputs of {name} must be a sequence, got {type(args).__name__}")
    if not isinstance(kwargs, dict):
        raise ProfileError(f"the keyword inputs of {name} must be a dict, got {type(kwargs).__name__}")
    if tracer is not None and not isinstance(tracer, torch.fx.Tracer):
        raise CaptureError(f"tracer= takes a torch.fx.Tracer instance, got {type(tracer).__name__}")
    check_leaf_modules(module, leaf_modules)
    given = [arg for arg, on in (("tracer=", tracer is not None), ("leaf_modules=", bool(leaf_modules))) if on]
    if mode in methods.BY_NAME and given:
        them = "them" if len(given) > 1 else "it"
        raise CaptureError(
            f'{" and ".join(given)} {"are" if len(given) > 1 else "is"} for symbolic tracing; capture="{mode}" '
            f"cannot use {them}. "
            f'Fix: drop {them} to capture with {methods.BY_NAME[mode].label}, or set capture="symbolic" (or "auto") '
            "with @pytest.mark.fxprof(capture=...), the fxprof_capture ini key or --fxprof-capture."
        )
    if len(given) > 1:
        raise CaptureError(
            f"tracer= and leaf_modules= cannot be used together: the tracer decides which submodules are traced "
            f"into (its is_leaf_module), so leaf_modules={_shown_leaves(leaf_modules)} would be ignored. "
            "Fix: have the tracer's is_leaf_module return True for those submodules, or drop tracer=."
        )
    with contextlib.suppress(TypeError, ValueError):  # a signature inspect cannot read binds anything
        try:
            inspect.signature(module.forward).bind(*args, **kwargs)
        except TypeError as exc:
            raise ProfileError(f"the inputs do not fit {name}.forward: {exc}") from None


def check_leaf_modules(module: torch.nn.Module, leaf_modules: Sequence[LeafSpec]) -> None:
    """Refuse, with the fix, ``leaf_modules=`` that is not a list of submodule paths or ``nn.Module`` classes."""
    if isinstance(leaf_modules, str | type):
        raise CaptureError(f"leaf_modules= takes a list, got {leaf_modules!r}; write leaf_modules=[{leaf_modules!r}]")
    name = type(module).__name__
    paths = dict(module.named_modules())
    for spec in leaf_modules:
        if isinstance(spec, type):
            if not issubclass(spec, torch.nn.Module):
                raise CaptureError(f"leaf_modules= takes submodule paths or nn.Module classes, got the class {spec!r}")
        elif not isinstance(spec, str):
            raise CaptureError(f"leaf_modules= takes submodule paths (str) or nn.Module classes, got {spec!r}")
        elif spec == "":
            raise CaptureError(f"leaf_modules= cannot keep the root of {name} whole: name a submodule")
        elif spec not in paths:
            near = [p for p in paths if p and p.rpartition(".")[2] == spec.rpartition(".")[2]][:3]
            hint = f"; did you mean {', '.join(map(repr, near))}?" if near else ""
            raise CaptureError(f"leaf_modules= names {spec!r}, which is not a submodule of {name}{hint}")


def _auto(
    module: torch.nn.Module,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    leaf_modules: Sequence[LeafSpec],
    tracer: torch.fx.Tracer | None,
    checker: Checker,
) -> Captured:
    """The first of symbolic (with submodules kept whole), export and dynamo whose graphs run like the module;
    where symbolic tracing kept whole on its own submodules that hold others, export or dynamo instead where
    either resolves more of the model (``_resolve_further``).

    Given a tracer or a leaf list, only symbolic tracing with them: their graphs, or a ``CaptureError``."""
    checker.expected()  # a module that fails on its inputs is refused before any capture is blamed
    captured, failed = _auto_symbolic(module, leaf_modules, tracer, checker)
    if captured is not None:
        if tracer is None and not leaf_modules and _hidden_in(module, captured.capture.opaque):
            return _resolve_further(module, args, kwargs, captured, checker)
        return captured
    failures = [failed]
    for mode in (m.name for m in methods.GRAPH_METHODS):
        candidate, problem = _try_graph_method(mode, module, args, kwargs, checker)
        if candidate is not None:
            detail = "; ".join([*failures, f"captured with {mode}"])
            return dataclasses.replace(candidate, capture=dataclasses.replace(candidate.capture, detail=detail))
        failures.append(f"{mode}: {problem}")
    lines = [f"could not capture {type(module).__name__} as graphs with any mode:"]
    lines += [f"  {line}" for line in failures]
    lines.append(
        "  Fix: keep the submodule that breaks tracing whole (leaf_modules=[...]), pass tracer= a torch.fx.Tracer "
        'that handles it, or make the failing code run under torch.compile and pick capture="dynamo".'
    )
    raise CaptureError("\n".join(lines))


def _try_graph_method(
    mode: str, module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any], checker: Checker
) -> tuple[Captured | None, str]:
    """A capture by ``mode`` (one of ``methods.GRAPH_METHODS``) checked against the module, or ``None`` and why
    it failed or differs, in one line."""
    try:
        candidate = _capture_by(mode, module, args, kwargs, checker)
        problem = checker.problem(candidate)
    except CaptureError as exc:  # its first line names the mode, the cause and where
        problem = str(exc).splitlines()[0]
    except Exception as exc:  # noqa: BLE001 - every mode's failure is reported together
        problem = one_line(exc)
    return (None, problem) if problem else (candidate, "")


def resolved_submodules(module: torch.nn.Module, captured: Captured) -> set[str]:
    """The paths of the submodules of ``module`` (``named_modules``, the root left out) that ``captured`` resolves,
    so that blame can name them: each that lies inside no submodule the capture keeps whole (the module of a
    ``call_module`` node, in any graph), and that holds a node of the capture (itself or a module below it) or
    holds no parameters or buffers (an ``Identity``, or a ``Dropout`` in eval, leaves no node in an ATen graph).
    A submodule dynamo ran eagerly between its graphs, or that nothing calls, holds no node: not resolved."""
    infos = [info for _, info in describe_nodes(captured.graphs)]
    whole = {info.module for info in infos if info.op == "call_module" and info.module}
    held: set[str] = set()
    for info in infos:
        parts = info.module.split(".") if info.module else []
        held.update(".".join(parts[:d]) for d in range(1, len(parts) + 1))
    out = set()
    for path, sub in module.named_modules():
        parts = path.split(".") if path else []
        if not parts or any(".".join(parts[:d]) in whole for d in range(1, len(parts))):
            continue
        if path in held or next(itertools.chain(sub.parameters(), sub.buffers()), None) is None:
            out.add(path)
    return out


def _hidden_in(module: torch.nn.Module, leaves: Sequence[str]) -> set[str]:
    """The paths of the submodules of ``module`` inside ``leaves`` (below them, not the leaves themselves)."""
    prefixes = tuple(f"{leaf}." for leaf in leaves)
    return {path for path, _ in module.named_modules() if path.startswith(prefixes)}


def _resolve_further(
    module: torch.nn.Module,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    symbolic_capture: Captured,
    checker: Checker,
) -> Captured:
    """Of ``symbolic_capture`` (which keeps submodules holding others whole, ``auto``'s own choice) and export,
    then dynamo, each checked against the module, the capture that resolves the most of it
    (``resolved_submodules``): symbolic tracing on a tie (the cheapest; it keeps ``call_module`` nodes), then
    the earlier mode. Dynamo is not tried where export resolved all that symbolic tracing resolved or hid.

    ``Capture.detail`` goes on from the symbolic capture's with what each mode did; ``Capture.opaque`` is empty
    where export or dynamo is kept."""
    cap = symbolic_capture.capture
    best, best_resolved = symbolic_capture, resolved_submodules(module, symbolic_capture)
    gainable = best_resolved | _hidden_in(module, cap.opaque)
    base = len(best_resolved)
    notes = [cap.detail] if cap.detail else []
    for mode in (m.name for m in methods.GRAPH_METHODS):
        candidate, problem = _try_graph_method(mode, module, args, kwargs, checker)
        if candidate is None:
            notes.append(f"{mode}: {problem}")
            continue
        resolved = resolved_submodules(module, candidate)
        more = len(resolved) - base
        notes.append(f"{mode} resolved {_more_submodules(more)}")
        if len(resolved) > len(best_resolved):
            best, best_resolved = candidate, resolved
        if resolved >= gainable:  # nothing is left for a later mode to resolve
            break
    if best is symbolic_capture:
        return dataclasses.replace(best, capture=dataclasses.replace(cap, detail="; ".join(notes)))
    notes.append(f"captured with {best.capture.method}")  # as every fallback's detail ends
    return dataclasses.replace(best, capture=dataclasses.replace(best.capture, detail="; ".join(notes), opaque=()))


def _more_submodules(more: int) -> str:
    """How many more submodules a mode resolved than symbolic tracing, in words."""
    if more <= 0:
        return "no more submodules"
    return f"{more} more submodule{'' if more == 1 else 's'}"


def _known(
    module: torch.nn.Module,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    known: Capture,
    *,
    leaf_modules: Sequence[LeafSpec],
    checker: Checker,
) -> Captured | None:
    """The capture ``known`` records, made again without the tries that failed before it (symbolic tracing with the
    submodules ``auto`` kept whole, or export or dynamo straight away) and checked against the module; ``None``
    where it fails or differs from the module, or records a way ``auto`` does not take.

    The pairs against a revision serve each test in many processes of the same code: only the first tries every
    way (EfficientViT's 6 traces that fail before the seventh, BERT's before export)."""
    checker.expected()  # as _auto: a module that fails on its inputs is refused before any capture is blamed
    if known.method == "symbolic_trace":
        given = set(symbolic.leaf_names(leaf_modules))
        added = [name for name in known.leaf_modules if name not in given]
        if not set(added) <= set(dict(module.named_modules())):  # kept whole: submodules of this module only
            return None
        try:
            captured = symbolic.capture(module, [*leaf_modules, *added], None)
            differs = captured.capture.leaf_modules != known.leaf_modules or checker.problem(captured)
        except ProfileError:  # as _auto_symbolic: the module's own fault, which no other capture mends
            raise
        except Exception:  # noqa: BLE001 - auto tries every way again, and says why each failed
            return None
    elif known.method in methods.BY_NAME:
        try:  # as _auto: any failure of these modes is a try that failed
            captured = _capture_by(known.method, module, args, kwargs, checker)
            differs = captured.capture.leaf_modules != known.leaf_modules or checker.problem(captured)
        except Exception:  # noqa: BLE001
            return None
    else:
        return None
    if differs:
        return None
    cap = dataclasses.replace(captured.capture, detail=known.detail, opaque=known.opaque)
    return dataclasses.replace(captured, capture=cap)


def _auto_symbolic(
    module: torch.nn.Module,
    leaf_modules: Sequence[LeafSpec],
    tracer: torch.fx.Tracer | None,
    checker: Checker,
) -> tuple[Captured | None, str]:
    """Symbolic tracing, keeping each submodule that breaks it whole (up to ``MAX_LEAF_RETRIES``), checked
    against the module: the capture, or ``None`` and why it failed. Given a tracer or a leaf list, a failure
    raises a ``CaptureError`` instead (``_refused``): no other capture may stand in for what was asked."""
    leaves = list(leaf_modules)
    kept: list[str] = []
    name = "symbolic_trace" if tracer is None else f"tracer:{type(tracer).__name__}"
    while True:
        try:
            captured = symbolic.capture(module, leaves, tracer)
        except SymbolicTraceError as exc:
            failed = exc.failed_in
            if tracer is None and failed and failed[0] and failed[0] not in leaves and len(kept) < MAX_LEAF_RETRIES:
                leaves.append(failed[0])
                kept.append(f"{name} failed in {failed[0]!r} ({failed[1]}): {one_line(exc.cause)}; kept it whole")
                continue
            where = f" in {failed[0]!r} ({failed[1]})" if failed and failed[0] else ""
            if len(kept) >= MAX_LEAF_RETRIES and where:
                where += f", after keeping {len(kept)} submodules whole"
            why = f"{name} failed{where}: {one_line(exc.cause)}"
            if tracer is not None or leaf_modules:
                added = leaves[len(leaf_modules) :]
                raise _refused(module, leaf_modules, tracer, why, failed_in=failed, added=added) from exc.cause
            return None, why
        break
    try:
        problem = checker.problem(captured)
    except ProfileError:
        raise
    except Exception as exc:  # noqa: BLE001 - a graph that fails where the module runs: try the next mode
        problem = f"the traced graph fails where the module runs: {one_line(exc)}"
    if problem:
        if kept:
            problem += f" (with {', '.join(repr(leaf) for leaf in leaves[len(leaf_modules) :])} kept whole)"
        if tracer is not None or leaf_modules:
            added = leaves[len(leaf_modules) :]
            raise _refused(module, leaf_modules, tracer, f"{name}: {problem}", differs=True, added=added)
        return None, f"{name}: {problem}"
    ours = [leaf for leaf in leaves[len(leaf_modules) :] if isinstance(leaf, str)]
    if ours:  # those still one node: not those inside a submodule it kept whole later
        whole = {info.module for _, info in describe_nodes(captured.graphs) if info.op == "call_module"}
        ours = [leaf for leaf in ours if leaf in whole]
    opaque = tuple(ours)
    cap = dataclasses.replace(captured.capture, detail="; ".join(kept), opaque=opaque)
    return dataclasses.replace(captured, capture=cap), ""


def _refused(
    module: torch.nn.Module,
    leaf_modules: Sequence[LeafSpec],
    tracer: torch.fx.Tracer | None,
    why: str,
    *,
    failed_in: tuple[str, str] | None = None,
    differs: bool = False,
    added: Sequence[LeafSpec] = (),
) -> CaptureError:
    """The error of ``auto`` given a tracer or a leaf list that it could not capture with: what was asked, why
    (tracing failed, in ``failed_in`` where known, or the graph ``differs`` from the module) and the fix.
    ``added`` are the submodules ``auto`` kept whole besides the leaf list."""
    if tracer is not None:
        asked = f"with the tracer passed (tracer={type(tracer).__name__})"
    else:
        asked = f"by symbolic tracing with leaf_modules={_shown_leaves(leaf_modules)}"
    head = f'could not capture {type(module).__name__} {asked}, and capture="auto" uses no other capture in its place:'
    if tracer is not None and not differs:
        fix = symbolic.tracer_fix(failed_in)
    elif tracer is not None:
        fix = (
            "  Fix: make the tracer trace what forward computes on these inputs (a Python branch on an input is "
            "fixed at trace time: give the tracer's trace() concrete_args for it, or keep the submodule that "
            f"branches whole in its is_leaf_module), or drop tracer= to let {symbolic.AUTO_CHOOSES}."
        )
    else:
        if differs:
            part = "add the submodule whose graph differs to leaf_modules="
        elif failed_in and failed_in[0]:
            part = f"add {failed_in[0]!r} to leaf_modules="
        else:
            part = "make the failing code traceable (torch.fx.wrap a function to keep it as one node)"
        also = f" (auto kept {', '.join(map(repr, added))} whole already)" if added else ""
        fix = f"  Fix: {part}{also}, or drop leaf_modules= to let {symbolic.AUTO_CHOOSES}."
    return CaptureError("\n".join([head, f"  {why}", fix]))


def _shown_leaves(leaf_modules: Sequence[LeafSpec]) -> str:
    """``leaf_modules=`` as a user writes it: paths quoted, classes by name."""
    return "[" + ", ".join(spec.__name__ if isinstance(spec, type) else repr(spec) for spec in leaf_modules) + "]"


def _capture_by(
    mode: str, module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any], checker: Checker
) -> Captured:
    """A capture by one of ``methods.GRAPH_METHODS`` (not yet checked against the module)."""
    capture: Any = importlib.import_module(methods.BY_NAME[mode].module).capture
    return capture(module, args, kwargs, checker)  # type: ignore[no-any-return]
