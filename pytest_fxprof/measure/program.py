"""The program a profile times: one entrance for every kind of call, and the one typed record it hands the profiler.

Owns ``open_program``: a forward (captured as graphs, ``capture.choose``), a training step (its forward, backward
and optimizer graphs, ``capture.step``) and a compiled module (its Inductor kernels, ``capture.inductor``) are kinds
of one ``Program``: the graphs to run, the nodes they time and what they are, the engine that times them, the plain
call as the user makes it, what puts the module back after each pass. The profiler follows a schedule over a
program and never asks which kind it holds. The module is kept as it was while the program is open (its modes,
buffers, random state, thread count; a step's parameters, grads and optimizer state), until the caller's exit
stack closes.

Must not import pytest.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import torch
import torch.fx

from pytest_fxprof.capture import inductor
from pytest_fxprof.capture.choose import capture_module, check_leaf_modules
from pytest_fxprof.capture.errors import ProfileError
from pytest_fxprof.capture.graphs import Captured, LeafSpec, Runner
from pytest_fxprof.capture.nodes import describe_nodes
from pytest_fxprof.capture.state import StepKept, fresh_copy, fresh_inputs, kept_as_is
from pytest_fxprof.capture.step import Step, capture_step, check_step, default_loss
from pytest_fxprof.measure.engine import Engine, KernelEngine, Timer, make_engine
from pytest_fxprof.records.measurement import Capture, NodeInfo


class ProgramKind(StrEnum):
    """The kinds of program: a forward's graphs, a training step's graphs, a compiled module's kernels."""

    FORWARD = "forward"
    STEP = "step"
    KERNELS = "kernels"


@dataclass(frozen=True)
class CaptureRequest:
    """How the call is to be captured, as the user asked: ``mode`` (``auto``, ``symbolic``, ``export``, ``dynamo``,
    ``inductor``), the submodules kept whole, a tracer, a training ``step`` (None: a forward), and ``known``, how an
    earlier process captured the same forward (``capture.choose.capture_module``)."""

    mode: str = "auto"
    leaf_modules: tuple[LeafSpec, ...] = ()
    tracer: torch.fx.Tracer | None = None
    step: Step | None = None
    known: Capture | None = None


@dataclass(frozen=True)
class Program:
    """What a profile times, whatever the kind: ``captured`` (its graphs, or the compiled module's kernels, and how a
    pass runs them), ``nodes`` (the graph nodes timed; none for kernels) and ``infos`` (what each timed node is, in
    order), the ``engine`` that times a pass, ``plain`` (each call makes fresh inputs and returns the plain call as
    the user makes it: the module's forward, the training step as written, the compiled module's call), ``after``
    (what puts the module back after a pass), ``checked`` (whether the capture ran its graphs once already, checked
    against the module) and, for a compiled module, its ``kernels``."""

    kind: ProgramKind
    captured: Captured
    nodes: list[torch.fx.Node]
    infos: list[NodeInfo]
    engine: Engine
    plain: Callable[[], Callable[[], Any]]
    after: Callable[[], None]
    checked: bool
    kernels: inductor.Kernels | None = None


def open_program(
    module: torch.nn.Module,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    stack: contextlib.ExitStack,
    *,
    request: CaptureRequest,
    threads: int,
    timer: Timer,
    engine: str,
) -> Program:
    """The program of ``module`` called with ``args`` and ``kwargs`` as ``request`` asks, each node timed by ``timer``
    through the ``engine`` named; the module is kept as it was until ``stack`` closes (``threads`` intra-op threads
    meanwhile). Refuses, with the fix, what cannot be asked together (a compiled module's training step; leaf modules
    or a tracer for kernels)."""
    step = request.step
    if step is not None:
        if inductor.wanted(module, request.mode):
            raise ProfileError(
                "fxprof times the kernels of a compiled module in its forward only; a training step "
                f"(fxprof.train_step) of {type(inductor.eager_module(module)).__name__} would time its eager "
                "graphs instead, and say nothing of what torch.compile generates.\n"
                "  Fix: profile the compiled module's forward with fxprof(model, ...), and the step of the eager "
                "module (model._orig_mod, or the model without model.compile()) with fxprof.train_step(...)"
            )
        check_leaf_modules(module, request.leaf_modules)
        check_step(module, args, kwargs, step)
        kept = stack.enter_context(preserved_step(module, threads, step))
        captured = capture_step(module, args, kwargs, step, kept)
        plain = eager_step(module, args, kwargs, step)
        return _graphs(
            ProgramKind.STEP, captured, engine=engine, timer=timer, plain=plain, after=kept.reset, checked=True
        )
    if inductor.wanted(module, request.mode):
        if request.leaf_modules or request.tracer is not None:
            raise ProfileError(
                f"leaf_modules= and tracer= shape a graph capture; {type(inductor.eager_module(module)).__name__} "
                "is timed by the kernels torch.compile generates, which they cannot shape.\n"
                '  Fix: leave them out, or capture the eager module (model._orig_mod, capture="auto") with them.'
            )
        stack.enter_context(preserved(module, threads))
        kernels = inductor.capture(module, args, kwargs, timer.stamp)
        return Program(
            kind=ProgramKind.KERNELS,
            captured=_kernel_capture(kernels),
            nodes=[],
            infos=list(kernels.infos),
            engine=KernelEngine(len(kernels.infos), timer, kernels.calls),
            plain=_plain_kernels(kernels, args, kwargs),
            after=nothing,
            checked=True,
            kernels=kernels,
        )
    stack.enter_context(preserved(module, threads))
    captured = capture_module(
        module,
        args,
        kwargs,
        mode=request.mode,
        leaf_modules=request.leaf_modules,
        tracer=request.tracer,
        known=request.known,
    )
    # every capture but an explicit symbolic one ran its graphs once, checked against the module
    checked = request.mode != "symbolic"
    plain = plain_forward(module, args, kwargs)
    return _graphs(
        ProgramKind.FORWARD, captured, engine=engine, timer=timer, plain=plain, after=nothing, checked=checked
    )


def _graphs(
    kind: ProgramKind,
    captured: Captured,
    *,
    engine: str,
    timer: Timer,
    plain: Callable[[], Callable[[], Any]],
    after: Callable[[], None],
    checked: bool,
) -> Program:
    """A program of graphs: their nodes as ``capture.nodes`` describes them, timed by the engine named."""
    described = describe_nodes(captured.graphs)
    nodes = [node for node, _ in described]
    return Program(
        kind=kind,
        captured=captured,
        nodes=nodes,
        infos=[info for _, info in described],
        engine=make_engine(engine, captured.graphs, nodes, timer),
        plain=plain,
        after=after,
        checked=checked,
    )


@contextlib.contextmanager
def preserved(module: torch.nn.Module, threads: int) -> Iterator[None]:
    """Run the body with ``threads`` intra-op threads and no grad, then put everything back: the thread
    count, and what ``kept_as_is`` keeps (modes, buffers, attributes, random state, parameters)."""
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with kept_as_is(module), torch.no_grad():
            yield
    finally:
        torch.set_num_threads(previous_threads)


@contextlib.contextmanager
def preserved_step(module: torch.nn.Module, threads: int, step: Step) -> Iterator[StepKept]:
    """Run the body with ``threads`` intra-op threads and grad enabled, then put everything back: the thread
    count, and what ``StepKept`` keeps (parameters, their grads, the optimizer's state, modes, buffers, random
    state), which the body also resets after each step it runs."""
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        kept = StepKept(module, step.optimizer)
        try:
            with torch.enable_grad():
                yield kept
        finally:
            kept.close()
    finally:
        torch.set_num_threads(previous_threads)


def plain_forward(
    module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any]
) -> Callable[[], Callable[[], Any]]:
    """Each call makes fresh inputs and returns the plain forward to time on them."""

    def make() -> Callable[[], Any]:
        call_args, call_kwargs = fresh_copy((list(args), kwargs))
        return lambda: module(*call_args, **call_kwargs)

    return make


def _kernel_capture(kernels: inductor.Kernels) -> Captured:
    """The compiled module as a capture: a pass runs it with its kernels stamped."""

    def prepare(a: Sequence[Any], k: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        return list(a), dict(k)

    def forward(runners: Sequence[Runner], prepared: tuple[list[Any], dict[str, Any]]) -> Any:
        with inductor.passes(kernels, timed=True):
            kernels.begin()
            out = kernels(*prepared[0], **prepared[1])
            kernels.end()
            return out

    return Captured(graphs=(), capture=inductor.described(kernels), prepare=prepare, forward=forward)


def _plain_kernels(
    kernels: inductor.Kernels, args: Sequence[Any], kwargs: dict[str, Any]
) -> Callable[[], Callable[[], Any]]:
    """Each call makes fresh inputs and returns the compiled module's plain forward (no stamps) to time on them."""

    def make() -> Callable[[], Any]:
        call_args, call_kwargs = fresh_copy((list(args), kwargs))

        def go() -> Any:
            with inductor.passes(kernels, timed=False):
                return kernels(*call_args, **call_kwargs)

        return go

    return make


def eager_step(
    module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any], step: Step
) -> Callable[[], Callable[[], Any]]:
    """Each call makes fresh inputs and returns the training step as written to time on them: the module's own
    forward, the loss, ``backward()`` and ``optimizer.step()``; the caller resets what it changed (``StepKept``)."""
    loss_fn = step.loss_fn or default_loss

    def make() -> Callable[[], Any]:
        call_args, call_kwargs = fresh_inputs(args, kwargs)

        def go() -> Any:
            with torch.enable_grad():
                loss = loss_fn(module(*call_args, **call_kwargs))
                loss.backward()
            if step.optimizer is not None:
                step.optimizer.step()
            return loss

        return go

    return make


def nothing() -> None:
    """Nothing to put back after a pass of a forward or of kernels."""
