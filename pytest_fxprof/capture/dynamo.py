"""Capture by ``torch.compile`` (dynamo): a backend that keeps each FX graph dynamo makes, one per graph break.

Dynamo keeps what it compiles in per-code-object caches that outlive a capture and that every instance of a
class shares: a second capture of the same model class, shapes and modes reuses the graphs the first compiled
(our backend is not called again), and a recompilation limit (``torch._dynamo.config.recompile_limit``) counts
entries per code object. ``torch._dynamo.reset()`` is never called: it would drop every compiled function of
the user's process (their own ``torch.compile`` calls included). Instead the backend is one module-level
function (dynamo checks that cached code was compiled by the backend in use, so ours is reused, never the
user's), each graph it compiles is a ``_Slot`` that hands its calls to whichever capture or pass is running
(the innermost ``_DynamoRun``), and a capture learns its graphs from the calls of a real run, not from the
backend. A cache limit being hit, a recompilation or a graph not seen at capture make errors, never eager
code timed as if it were the graphs.

Must not import pytest.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.fx

from pytest_fxprof.capture.errors import CaptureError, ProfileError, Recorder, one_line, quiet
from pytest_fxprof.capture.graphs import Captured, Runner
from pytest_fxprof.capture.nodes import MODULE_PATH_META, split_module_path
from pytest_fxprof.capture.sources import DYNAMO_DIRS, OWN_DIR
from pytest_fxprof.capture.state import fresh_inputs
from pytest_fxprof.capture.verify import Checker
from pytest_fxprof.records.measurement import Capture


def capture(module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any], checker: Checker) -> Captured:
    """``torch.compile`` with a backend that keeps each FX graph dynamo makes (one per graph break).

    The module runs eagerly first (the checker's reference run): code that initialises state on its first
    call (torchvision's MultiScaleRoIAlign sets its scales) would otherwise be compiled on that path, and
    every later pass would recompile.
    """
    checker.expected()
    run = _DynamoRun(module)
    compiled = torch.compile(module, backend=_dynamo_backend, fullgraph=False, dynamic=False)
    a, k = fresh_inputs(args, kwargs)
    _ACTIVE.append(run)
    try:
        with quiet() as recorder, _dynamo_limits():
            compiled(*a, **k)
    except torch._dynamo.exc.FailOnRecompileLimitHit as exc:
        raise CaptureError(_limit_advice(run.name, exc, recorder)) from exc
    except Exception as exc:
        raise CaptureError(
            f"torch.compile (dynamo) could not capture {run.name}: {one_line(exc)}\n"
            '  Fix: capture="symbolic" with leaf_modules=[the submodule that fails] or a tracer=, or make that '
            "code run under torch.compile."
        ) from exc
    finally:
        _ACTIVE.remove(run)
    run.recording = False
    if not run.graphs:
        raise CaptureError(
            f"torch.compile (dynamo) made no graph of {run.name}: the whole forward ran eagerly (dynamo skipped "
            "it, or its recompilation limit was reached, torch._dynamo.config.recompile_limit).\n"
            "  Fix: torch._dynamo.reset() before profiling (it drops what dynamo compiled before), or "
            'capture="symbolic" with leaf_modules=[...].'
        )

    def forward(runners: Sequence[Runner], prepared: Any) -> Any:
        call_args, call_kwargs = prepared
        fix = 'capture="symbolic" with leaf_modules=[...], or torch._dynamo.reset() before profiling'
        with run.replaying(runners, _ACTIVE, what=run.name, fix=fix):
            return compiled(*call_args, **call_kwargs)

    def prepare(a: Sequence[Any], k: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        return list(a), dict(k)

    cap = Capture(method="dynamo", graphs=len(run.graphs))
    return Captured(graphs=tuple(run.graphs), capture=cap, prepare=prepare, forward=forward)


class _Slot:
    """Dynamo's stand-in for one compiled graph: runs it, or hands the call to the active ``_DynamoRun``."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.gm = gm

    def __call__(self, *args: Any) -> Any:
        if _ACTIVE:
            return _ACTIVE[-1].call(self, args)
        return self.gm(*args)


_ACTIVE: list[_DynamoRun] = []


def _dynamo_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> _Slot:
    return _Slot(gm)


class _DynamoRun:
    """The graphs of one dynamo capture: learnt from the calls of the capture run, then dispatched to runners."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.name = type(module).__name__
        self.paths = {id(m): path for path, m in module.named_modules()}
        self.recording = True
        self.graphs: list[torch.fx.GraphModule] = []
        self.index: dict[tuple[Any, ...], int] = {}
        self.sequence: list[tuple[_Slot, int]] = []  # (slot, graph index) of each call, in order
        self.runners: Sequence[Runner] = ()
        self.position = 0

    def call(self, slot: _Slot, args: tuple[Any, ...]) -> Any:
        if self.recording:
            self._record(slot)
            return slot.gm(*args)
        k = self.position
        self.position += 1
        if k >= len(self.sequence) or self.sequence[k][0] is not slot:
            raise ProfileError(
                f"dynamo ran a graph of {self.name} that was not captured (call {k + 1} of the pass; "
                f"{len(self.sequence)} graph calls were captured): the model took another path than at capture, "
                "so this pass cannot be timed node by node.\n"
                "  Fix: make the forward take the same path on every call with these inputs, or capture it "
                'with capture="symbolic" and leaf_modules=[...].'
            )
        return self.runners[self.sequence[k][1]](*args)

    def _record(self, slot: _Slot) -> tuple[Any, ...]:
        """Note the call of ``slot`` (a copy of its graph, the first time it runs from this caller); its key."""
        frame_locals, owner = self._caller()
        key = (slot, owner, tuple(sorted(frame_locals.items())))
        index = self.index.get(key)
        if index is None:
            index = self.index[key] = len(self.graphs)
            self.graphs.append(self._copy(slot.gm, frame_locals, owner))
        self.sequence.append((slot, index))
        return key

    def _caller(self) -> tuple[dict[str, str], str]:
        """The module paths of the compiled frame's local modules, and of the module whose code it is."""
        frame: types.FrameType | None = sys._getframe(2)
        while frame is not None and self.between(frame):
            frame = frame.f_back
        frame_locals: dict[str, str] = {}
        owner = ""
        if frame is not None:
            frame_locals = {
                name: self.paths[id(value)]
                for name, value in frame.f_locals.items()
                if isinstance(value, torch.nn.Module) and id(value) in self.paths
            }
        outer = frame
        while outer is not None:  # a resume function or torch's own code: the innermost frame of a module
            value = outer.f_locals.get("self")
            if isinstance(value, torch.nn.Module) and id(value) in self.paths:
                owner = self.paths[id(value)]
                break
            outer = outer.f_back
        return frame_locals, owner

    @contextlib.contextmanager
    def replaying(self, runners: Sequence[Runner], active: list[Any], *, what: str, fix: str) -> Iterator[None]:
        """One pass of the captured graphs: their calls go to ``runners`` (this run on ``active``, the list its
        slots look in). A pass that would recompile, or that missed a captured graph call, is an error naming
        ``what``, with ``fix`` for the second."""
        self.runners, self.position = runners, 0
        active.append(self)
        try:
            with _dynamo_limits(error_on_recompile=True):
                yield
        except torch._dynamo.exc.RecompileError as exc:
            raise ProfileError(
                f"dynamo would recompile {what} for this pass, so it would not run the captured graphs: "
                f"{' '.join(str(exc).split())}\n"
                "  Fix: profile with inputs like those captured (shapes, dtypes, Python values) under the same "
                "grad mode and module mode."
            ) from exc
        except torch._dynamo.exc.FailOnRecompileLimitHit as exc:
            raise ProfileError(_limit_advice(self.name, exc)) from exc
        finally:
            active.remove(self)
            self.runners = ()
        if self.position != len(self.sequence):
            raise ProfileError(
                f"dynamo ran {self.position} of the {len(self.sequence)} graph calls captured for {what}: part "
                "of it ran eagerly or took another path than at capture, so it cannot be timed node by node. "
                f"Fix: {fix}."
            )

    def between(self, frame: types.FrameType) -> bool:
        """Whether ``frame`` lies between the compiled frame and the graph it calls (torch's or this package's)."""
        return frame.f_code.co_filename.startswith((*DYNAMO_DIRS, OWN_DIR))

    def _copy(self, gm: torch.fx.GraphModule, frame_locals: dict[str, str], owner: str) -> torch.fx.GraphModule:
        """A copy of ``gm`` whose nodes carry their qualified module path, as seen from this call."""
        graph = torch.fx.Graph()
        graph.output(graph.graph_copy(gm.graph, {}))
        for node in graph.nodes:
            path = owner
            stack = node.meta.get("nn_module_stack")
            if stack:
                local, below = split_module_path(str(list(stack.values())[-1][0]))
                base = frame_locals.get(local, "") if local is not None else ""
                path = ".".join(p for p in (base, below) if p)
            node.meta[MODULE_PATH_META] = path
        return torch.fx.GraphModule(gm, graph, self.name)


RECOMPILE_LIMIT = 256
"""Cache entries per code object that a dynamo capture may make (dynamo's default is 8): with static shapes a
function called with many shapes compiles once per shape, as torchvision's ``nms`` does per class in a
detection model's post-processing. Raised only while a capture or a pass runs; the entries stay."""


def _dynamo_limits(*, error_on_recompile: bool = False) -> contextlib.AbstractContextManager[None]:
    """Dynamo's settings while a capture or pass runs: a limit hit (or, in a pass, any recompilation) raises."""
    config = torch._dynamo.config
    return config.patch(  # type: ignore[no-any-return]
        recompile_limit=max(config.recompile_limit, RECOMPILE_LIMIT),
        accumulated_recompile_limit=max(config.accumulated_recompile_limit, 4 * RECOMPILE_LIMIT),
        fail_on_recompile_limit_hit=True,
        error_on_recompile=error_on_recompile,
    )


def _limit_advice(name: str, exc: BaseException, recorder: Recorder | None = None) -> str:
    where = (recorder.limit_hit() if recorder else "") or " ".join(str(exc).split())[:300]
    return (
        f"dynamo reached its recompilation limit on {name} ({where}); "
        "it would run that code eagerly, not as captured graphs.\n"
        "  Fix: torch._dynamo.reset() before profiling (it drops what dynamo compiled before), or raise "
        "torch._dynamo.config.recompile_limit."
    )
