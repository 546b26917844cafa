"""Capture a training step: the forward and the loss, the backward and the optimizer step, as aten-level graphs.

Owns ``capture_step``. ``torch.compile`` with a backend that hands each graph dynamo makes to AOTAutograd,
which traces the graph's forward and backward together and splits them into a forward graph and a backward
graph of aten ops (``aten.convolution_backward`` ...); where the model has graph breaks there are several such
pairs. The backward graphs run where autograd runs them, in ``loss.backward()``: each compiled graph is a slot
that hands its calls to the running capture or pass (as ``dynamo`` does for the forward), so an engine times
the backward node by node too. The optimizer step, when one is given, is a graph of one node. This is the
mechanism chosen because it is the one of torch's three (AOTAutograd behind a backend, ``make_fx`` of a
functional step, ``torch.export``'s joint graph) that takes graph breaks, and so the most models
(``bench/capture_coverage.py``'s step column).

A backward node carries AOTAutograd's ``fwd_nn_module_stack`` and ``seq_nr``: its module path and source line
are those of the forward op it differentiates, which it names. A node that runs after what it reads, against
autograd's last-in-first-out order, is not where its ``seq_nr`` says (a gradient summed over several uses of
one tensor, the backward of a custom ``autograd.Function``): it belongs to the innermost module that holds
the nodes it reads.

Must not import pytest.
"""

from __future__ import annotations

import dataclasses
import operator
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx
from torch.utils import _pytree as pytree

from pytest_fxprof.capture import dynamo
from pytest_fxprof.capture.errors import CaptureError, ProfileError, one_line, quiet
from pytest_fxprof.capture.graphs import Captured, Runner
from pytest_fxprof.capture.nodes import (
    DIRECTION_META,
    FORWARD_META,
    MODULE_PATH_META,
    TARGET_META,
    split_module_path,
)
from pytest_fxprof.capture.sources import DYNAMO_DIRS, OWN_DIR, TORCH_DIR
from pytest_fxprof.capture.state import StepKept, fresh_inputs
from pytest_fxprof.records.measurement import Capture

METHOD = "aot_autograd"
"""The capture method a training step's profile and baseline record."""

LossFn = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class Step:
    """A training step's own parts: the loss (``None``: ``default_loss``) and the optimizer, if one is stepped."""

    loss_fn: LossFn | None = None
    optimizer: Any = None


def default_loss(output: Any) -> Any:
    """The sum of every floating-point tensor in ``output`` that requires grad, wherever it sits (a tensor, a
    tuple, a list, a dict, a dataclass, a Hugging Face ``ModelOutput``); ``None`` where there is none."""
    total = None
    for tensor in _float_tensors(output):
        part = tensor.sum()
        total = part if total is None else total + part
    return total


def _float_tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() and value.requires_grad else []
    if isinstance(value, Mapping):
        items: Any = list(value.values())
    elif isinstance(value, list | tuple):
        items = list(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [getattr(value, f.name) for f in dataclasses.fields(value)]
    else:
        return []
    return [t for item in items for t in _float_tensors(item)]


def check_step(module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any], step: Step) -> None:
    """Refuse, with the fix, a step that cannot run a backward or an optimizer that is not one."""
    name = type(module).__name__
    if step.loss_fn is not None and not callable(step.loss_fn):
        raise ProfileError(
            f"loss_fn= takes a function of the model's output that returns a scalar tensor, got "
            f"{type(step.loss_fn).__name__}. Fix: loss_fn=lambda out: out.logits.mean(), or leave it out for the "
            "sum of every floating-point output"
        )
    if step.optimizer is not None and not isinstance(step.optimizer, torch.optim.Optimizer):
        raise ProfileError(
            f"optimizer= takes a torch.optim.Optimizer, got {type(step.optimizer).__name__}. Fix: "
            "optimizer=torch.optim.SGD(model.parameters(), lr=0.1), or leave it out to time no optimizer step"
        )
    trainable = any(p.requires_grad for p in module.parameters())
    inputs = any(t.requires_grad for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor))
    if not trainable and not inputs:
        raise ProfileError(
            f"{name} has no parameter that requires grad (and no input does), so a training step has no backward "
            "to run. Fix: unfreeze what trains (p.requires_grad_(True)), or profile the forward with fxprof(...)"
        )


def eager_loss(
    module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any], loss_fn: LossFn, *, name: str
) -> torch.Tensor:
    """The step run as the user would run it (forward, loss, backward), refusing a loss that cannot be
    differentiated, with the fix; the loss's value, to check the capture with."""
    a, k = fresh_inputs(args, kwargs)
    with torch.enable_grad():
        loss = loss_fn(module(*a, **k))
        if loss is None and loss_fn is default_loss:
            raise ProfileError(
                f"the output of {name} holds no floating-point tensor that requires grad, so the default loss (the "
                "sum of every such tensor) has nothing to sum: the output was computed under torch.no_grad(), "
                "detached, or is not floating-point. Fix: return tensors that depend on the parameters, or pass "
                "loss_fn= a function of the output that does"
            )
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            what = f"a tensor of shape {list(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise ProfileError(
                f"loss_fn returned {what}, not a scalar tensor, so there is no backward to run. Fix: reduce it "
                "(loss_fn=lambda out: criterion(out, target).mean())"
            )
        if not loss.requires_grad:
            raise ProfileError(
                f"the loss of {name} does not require grad: it does not depend on any parameter or input that "
                "requires grad (computed under torch.no_grad(), detached, or from integer outputs). Fix: compute the "
                "loss from the model's output as it is, with parameters that require grad"
            )
        loss.backward()  # type: ignore[no-untyped-call]
    return loss.detach().clone()


def capture_step(
    module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any], step: Step, kept: StepKept
) -> Captured:
    """The training step ``loss_fn(module(*args, **kwargs)).backward()`` (then ``optimizer.step()``) as graphs.

    ``kept`` is reset after each run, so that the capture leaves no step taken. The capture's forward runs one
    whole step and returns the loss; it leaves what it changed (gradients, parameters, optimizer state,
    buffers) for the caller to reset."""
    name = type(module).__name__
    check_step(module, args, kwargs, step)
    loss_fn = step.loss_fn or default_loss
    try:
        expected = eager_loss(module, args, kwargs, loss_fn, name=name)
    finally:
        kept.reset()
    run = _StepRun(module)
    compiled = torch.compile(_step, backend=_step_backend, fullgraph=False, dynamic=False)
    a, k = fresh_inputs(args, kwargs)
    _ACTIVE.append(run)
    try:
        with quiet() as recorder, dynamo._dynamo_limits(), torch.enable_grad():
            loss = compiled(module, loss_fn, a, k)
            loss.backward()
    except torch._dynamo.exc.FailOnRecompileLimitHit as exc:
        raise CaptureError(dynamo._limit_advice(run.name, exc, recorder)) from exc
    except Exception as exc:
        raise CaptureError(
            f"AOTAutograd (through torch.compile) could not capture the training step of {name}: {one_line(exc)}\n"
            "  Fix: make that code run under torch.compile (torch.compile(model)(x).sum().backward() shows the "
            "same error), or profile the forward with fxprof(...)."
        ) from exc
    finally:
        _ACTIVE.remove(run)
        kept.reset()
    run.recording = False
    if not run.backward:
        raise CaptureError(
            f"AOTAutograd made no backward graph of {name}: the backward ran outside the captured graphs (dynamo "
            "ran the forward eagerly, or reached its recompilation limit).\n"
            "  Fix: torch._dynamo.reset() before profiling, or make the forward run under torch.compile."
        )
    got = loss.detach()
    if not torch.allclose(got, expected, rtol=1e-3, atol=1e-6, equal_nan=True):
        raise CaptureError(
            f"the captured training step of {name} computes a loss of {got.item():.6g} where the model computes "
            f"{expected.item():.6g}.\n  Fix: profile the forward with fxprof(...), or make the step deterministic."
        )
    graphs = list(run.graphs)
    if step.optimizer is not None:
        graphs.append(optimizer_graph(step.optimizer))
    cap = Capture(method=METHOD, graphs=len(graphs))
    return Captured(
        graphs=tuple(graphs), capture=cap, prepare=_prepare, forward=_Pass(module, loss_fn, step, run, compiled)
    )


def _prepare(a: Sequence[Any], k: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    return list(a), dict(k)


@dataclasses.dataclass
class _Pass:
    """One step through the runners: the forward graphs and the loss, ``backward()``, the optimizer's graph."""

    module: torch.nn.Module
    loss_fn: LossFn
    step: Step
    run: _StepRun
    compiled: Callable[..., Any]

    def __call__(self, runners: Sequence[Runner], prepared: Any) -> Any:
        call_args, call_kwargs = prepared
        what = f"the training step of {self.run.name}"
        fix = "torch._dynamo.reset() before profiling"
        with torch.enable_grad(), self.run.replaying(runners, _ACTIVE, what=what, fix=fix):
            out = self.compiled(self.module, self.loss_fn, call_args, call_kwargs)
            out.backward()
        if self.step.optimizer is not None:
            runners[-1]()
        return out


def _step(module: torch.nn.Module, loss_fn: LossFn, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    return loss_fn(module(*args, **kwargs))


def optimizer_graph(optimizer: torch.optim.Optimizer) -> torch.fx.GraphModule:
    """A graph of one node that steps ``optimizer``: the step's ``optimizer`` direction."""
    graph = torch.fx.Graph()
    node = graph.call_function(_OptimizerStep(optimizer), ())
    node.meta[DIRECTION_META] = "optimizer"
    node.meta[TARGET_META] = f"{type(optimizer).__name__}.step"
    node.meta[MODULE_PATH_META] = ""
    graph.output(None)
    return torch.fx.GraphModule(torch.nn.Module(), graph, "OptimizerStep")


class _OptimizerStep:
    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self.__name__ = "optimizer_step"

    def __call__(self) -> None:
        self.optimizer.step()


_ACTIVE: list[_StepRun] = []


class _ForwardSlot:
    """AOTAutograd's compiled forward of one graph: runs it, or hands the call to the active ``_StepRun``."""

    def __init__(self) -> None:
        self.gm: torch.fx.GraphModule | None = None
        # AOTAutograd hands it its inputs as one list (a graph's inputs are never one); on the instance, so that
        # the wrapper dynamo puts around a backward (functools.wraps copies __dict__) says so too
        self._boxed_call = True

    def __call__(self, *args: Any) -> Any:
        inputs = args
        if len(args) == 1 and type(args[0]) is list:
            inputs = tuple(args[0])
            args[0].clear()  # the boxed convention: the callee owns the inputs, and frees them as it goes
        if _ACTIVE:
            return _ACTIVE[-1].call(self, inputs)  # type: ignore[arg-type]
        assert self.gm is not None
        return self.gm(*inputs)


class _BackwardSlot(_ForwardSlot):
    """The compiled backward of the graph whose forward is ``forward``."""

    def __init__(self, gm: torch.fx.GraphModule, forward: _ForwardSlot) -> None:
        super().__init__()
        self.gm = self.backward_gm = gm
        self.forward = forward


def _step_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
    from torch._dynamo.backends.common import aot_autograd

    forward = _ForwardSlot()

    def forward_compiler(fw: torch.fx.GraphModule, _: Any) -> _ForwardSlot:
        forward.gm = fw
        return forward

    def backward_compiler(bw: torch.fx.GraphModule, _: Any) -> _BackwardSlot:
        return _BackwardSlot(bw, forward)

    return aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler)(gm, example_inputs)


_BETWEEN = (*DYNAMO_DIRS, TORCH_DIR + "autograd/", OWN_DIR)


class _StepRun(dynamo._DynamoRun):
    """The graphs of one step's capture: forward graphs learnt as dynamo's are, and each backward graph paired
    with the forward call it differentiates (autograd runs backwards last in, first out)."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__(module)
        self.open: dict[_ForwardSlot, list[tuple[Any, ...]]] = {}  # each forward slot's calls not yet differentiated
        self.backward = 0

    def between(self, frame: types.FrameType) -> bool:
        if frame.f_code.co_name == _step.__name__ and frame.f_code.co_filename == _step.__code__.co_filename:
            return False  # the compiled step itself: its locals name the module
        return frame.f_code.co_filename.startswith(_BETWEEN)

    def _record(self, slot: Any) -> tuple[Any, ...]:
        if not isinstance(slot, _BackwardSlot):
            key = super()._record(slot)
            self.open.setdefault(slot, []).append(key)
            return key
        calls = self.open.get(slot.forward)
        if not calls:
            raise CaptureError(f"autograd ran a backward graph of {self.name} whose forward was not captured")
        forward_key = calls.pop()
        _, owner, frame_locals = forward_key
        key = (slot, owner, frame_locals)
        index = self.index.get(key)
        if index is None:
            index = self.index[key] = len(self.graphs)
            forward = self.graphs[self.index[forward_key]]
            self.graphs.append(_backward_copy(slot.backward_gm, forward, dict(frame_locals), owner, self.name))
            self.backward += 1
        self.sequence.append((slot, index))  # type: ignore[arg-type]  # any slot: call() compares identity
        return key


def _backward_copy(
    bw: torch.fx.GraphModule, fw: torch.fx.GraphModule, frame_locals: dict[str, str], owner: str, name: str
) -> torch.fx.GraphModule:
    """A copy of backward graph ``bw`` whose nodes name their direction, module path and forward node: from
    AOTAutograd's record of the forward op each differentiates, read as the forward call that ran it saw its
    modules (``frame_locals``, ``owner``), and from ``fw``, the copy of that call's forward graph."""
    peers: dict[int, torch.fx.Node] = {}  # by seq_nr, the forward op (not the getitem that unpacks it)
    for node in fw.graph.nodes:
        seq = node.meta.get("seq_nr")
        if node.op == "call_function" and seq is not None and node.target is not operator.getitem:
            peers.setdefault(seq, node)
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(bw.graph, {}))
    order: dict[torch.fx.Node, int] = {}  # each backward node's place in the forward (its inputs' for one unplaced)
    for node in graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        node.meta[DIRECTION_META] = "backward"
        seq = node.meta.get("seq_nr")
        before = [order[n] for n in node.all_input_nodes if n in order]
        # autograd runs backwards last in, first out: a node placed after what it reads is not where its
        # seq_nr says (a gradient summed over uses, a custom autograd.Function's backward); its inputs place it
        summed = bool(node.meta.get("is_gradient_acc"))
        placed = isinstance(seq, int) and not summed and (not before or seq <= min(before))
        order[node] = seq if placed or not before else min(before)
        peer = peers.get(seq) if placed else None
        if peer is not None:
            node.meta[FORWARD_META] = peer.name
        # the module the forward op ran in (AOTAutograd's record of it; a custom autograd.Function's backward, or a
        # forward op recomputed under activation checkpointing, has its own), else that of its forward node
        stack = None if summed else node.meta.get("fwd_nn_module_stack") or node.meta.get("nn_module_stack")
        if stack:
            local, below = split_module_path(str(list(stack.values())[-1][0]))
            base = frame_locals.get(local, "") if local is not None else ""
            node.meta[MODULE_PATH_META] = ".".join(p for p in (base, below) if p)
        elif peer is not None:
            node.meta[MODULE_PATH_META] = str(peer.meta.get(MODULE_PATH_META, owner))
        else:
            paths = [str(n.meta[MODULE_PATH_META]) for n in node.all_input_nodes if MODULE_PATH_META in n.meta]
            node.meta[MODULE_PATH_META] = _common_module(paths) if paths else owner
    return torch.fx.GraphModule(bw, graph, f"{name}Backward")


def _common_module(paths: Sequence[str]) -> str:
    parts = [p.split(".") if p else [] for p in paths]
    common: list[str] = []
    for level in zip(*parts, strict=False):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return ".".join(common)
