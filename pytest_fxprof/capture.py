"""Turn a module into one or more torch.fx graphs that run like the module, and name their nodes.

Owns every capture mode (``symbolic``, ``export``, ``dynamo`` and ``auto``, which tries them in that
order), the errors that say why a capture failed and how to fix it, and the stable identity of each
node. Must not import pytest. A capture leaves the module as it was.

A capture is a ``Captured``: the graphs, how they were made, and two functions. ``prepare`` turns a
call's ``(args, kwargs)`` into what ``forward`` takes (outside any timing); ``forward`` runs one pass of
the module, calling ``runners[i]`` wherever graph ``i`` runs. A runner takes the graph's positional
inputs (flat, in placeholder order) and returns its output, so an engine can stand in for a graph.
A runner may be called more than once per pass (a graph dynamo runs in a loop). A dynamo capture's
``forward`` raises ``ProfileError`` rather than run code that is not in its graphs (a recompilation, a
graph not seen at capture).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import io
import logging
import math
import re
import sys
import traceback
import types
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.fx
import torch.fx._pytree
from torch.utils import _pytree as pytree

from pytest_fxprof.records import Capture, NodeInfo, node_key

LeafSpec = str | type
Runner = Callable[..., Any]
MODES = ("auto", "symbolic", "export", "dynamo")
_TORCH_DIR = str(Path(torch.__file__).parent) + "/"  # not torchvision
_OWN_DIR = str(Path(__file__).parent) + "/"
_DYNAMO_DIRS = tuple(_TORCH_DIR + sub for sub in ("_dynamo/", "_functorch/", "fx/", "utils/", "_compile.py"))
"""Where the frames between a dynamo-compiled frame and the graph it calls live."""
MAX_LEAF_RETRIES = 8
"""How many submodules ``auto`` keeps whole, one per failed symbolic trace, before it tries ``export``."""


class CaptureError(Exception):
    """The module could not be captured as a graph. The message says what broke and what to do."""


class ProfileError(Exception):
    """Profiling would have changed the module, or the inputs do not fit it."""


class SymbolicTraceError(CaptureError):
    """A failed symbolic trace, with the submodule it failed in (``(path, class name)``, path ``""`` for the root)."""

    def __init__(self, message: str, failed_in: tuple[str, str] | None, cause: Exception) -> None:
        super().__init__(message)
        self.failed_in = failed_in
        self.cause = cause


@dataclass(frozen=True)
class Captured:
    """Graphs that together run like the module, and how to run them."""

    graphs: tuple[torch.fx.GraphModule, ...]
    capture: Capture
    prepare: Callable[[Sequence[Any], dict[str, Any]], Any]
    forward: Callable[[Sequence[Runner], Any], Any]


# Symbolic tracing ---------------------------------------------------------------------------------------------


class _LeafTracer(torch.fx.Tracer):
    """symbolic_trace's tracer, plus user-named leaf modules and a note of the submodule that broke."""

    def __init__(self, leaf_modules: Sequence[LeafSpec]) -> None:
        super().__init__()
        self.leaf_types = tuple(spec for spec in leaf_modules if isinstance(spec, type))
        self.leaf_paths = {spec for spec in leaf_modules if isinstance(spec, str)}
        self.failed_in: tuple[str, str] | None = None
        self.record_stack_traces = True  # each node's source line, for reports

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


def _user_frame(exc: BaseException) -> str | None:
    """The innermost traceback line in the user's code (outside torch and this plugin)."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not frame.filename.startswith((_TORCH_DIR, _OWN_DIR)):
            return f"{frame.filename}:{frame.lineno}: {(frame.line or '').strip()}"
    return None


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
            failed = active.failed_in if isinstance(active, _LeafTracer) else None
            raise SymbolicTraceError(_capture_advice(module, exc, active), failed, exc) from exc
        gm = torch.fx.GraphModule(active.root, graph, type(module).__name__)  # copies what it needs
    finally:
        for name in set(vars(module)) - before:  # tensor constants torch.fx parks on the traced module
            delattr(module, name)
    names = tuple(sorted(s if isinstance(s, str) else f"{s.__module__}.{s.__qualname__}" for s in leaf_modules))
    method = "symbolic_trace" if tracer is None else f"tracer:{type(tracer).__name__}"
    return gm, Capture(method=method, leaf_modules=names)


def _capture_advice(module: torch.nn.Module, exc: Exception, tracer: torch.fx.Tracer) -> str:
    cause = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    lines = [f"torch.fx.symbolic_trace could not capture {type(module).__name__}: {cause}"]
    failed = tracer.failed_in if isinstance(tracer, _LeafTracer) else None
    if failed and failed[0]:
        lines.append(f"  while tracing submodule {failed[0]!r} ({failed[1]})")
    where = _user_frame(exc)
    if where:
        lines.append(f"  at {where}")
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


def _graph_failure(module: torch.nn.Module, exc: Exception) -> str:
    """Why the captured graph failed where the module itself ran: usually a value traced as a tensor."""
    cause = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return (
        f"the captured graph of {type(module).__name__} failed: {' '.join(cause[:1])} {' '.join(cause[-1:])}\n"
        "  Tracing treats every input as a tensor, so a branch on an input that is None or a Python value "
        "(if mask is not None: ...) is fixed at trace time.\n"
        "  Fix: pass tracer= a torch.fx.Tracer whose trace() gets concrete_args for those inputs, or keep "
        "the submodule that branches whole with leaf_modules=[...]."
    )


def _target_name(gm: torch.fx.GraphModule, node: torch.fx.Node) -> str:
    if node.op == "call_module":
        return type(gm.get_submodule(str(node.target))).__name__
    if node.op == "call_function":
        if isinstance(node.target, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
            return str(node.target)  # aten.convolution.default, not torch.ops.aten.convolution.default
        try:
            return str(torch.fx.node._get_qualified_name(node.target))  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001  # pragma: no cover - exotic callables
            return getattr(node.target, "__name__", repr(node.target))
    return str(node.target)


MODULE_PATH_META = "fxprof_module"
"""``node.meta`` key where a capture records the qualified module path it resolved for a node."""


def _module_path(node: torch.fx.Node) -> str:
    recorded = node.meta.get(MODULE_PATH_META)
    if isinstance(recorded, str):
        return recorded
    if node.op == "call_module":
        return normalise_module_path(str(node.target))
    stack = node.meta.get("nn_module_stack")
    if stack:
        path = list(stack.values())[-1][0]
        return normalise_module_path(str(path))
    if node.op == "get_attr":
        return str(node.target).rpartition(".")[0]
    return ""


_ROOT_NAME = re.compile(r"^(?:[LG]\[['\"](?P<name>[^'\"]+)['\"]\]|(?P<self>self)(?=[.\[]|$))")
_PATH_PART = re.compile(
    r"\.(?:_modules|_parameters|_buffers)\[['\"]([^'\"]+)['\"]\]|\[['\"]?([^'\"\]]+)['\"]?\]|\.([^.\[]+)"
)
_MANGLED_ROOT = re.compile(r"^[LG]__(?P<name>[A-Za-z0-9]+?)__?_")


def split_module_path(path: str) -> tuple[str | None, str]:
    """``("self", "layer1.0.conv1")`` for dynamo's ``L['self'].layer1[0].conv1``: the local variable the path
    starts from (``None`` when it names none) and the qualified path below it."""
    root = _ROOT_NAME.match(path)
    if root is None:
        mangled = _MANGLED_ROOT.match(path)
        if mangled is None:
            return None, path
        # dynamo's flattened form, L__self___layer1_0_conv1: "_" both joins and may be part of a name;
        # a bare number between separators is a container index
        rest = path[mangled.end() :]
        return mangled["name"], re.sub(r"(?<=[A-Za-z0-9])_(?=\d+(?:_|$))|(?<=\d)_", ".", rest)
    name = root["name"] or root["self"]
    parts = [next(g for g in m.groups() if g is not None) for m in _PATH_PART.finditer(path, root.end())]
    return name, ".".join(parts)


def normalise_module_path(path: str) -> str:
    """The qualified module path (``layer1.0.conv1``) in any spelling a capture uses for it: ``layer1.0.conv1``,
    ``L['self'].layer1[0].conv1``, ``L['self']._modules['layer1']...`` or ``L__self___layer1_0_conv1``."""
    return split_module_path(path)[1]


def source_line(node: torch.fx.Node) -> str:
    """``file:line`` of the user's code that made ``node`` (the innermost frame outside torch), or ``""``."""
    trace = node.meta.get("stack_trace")
    if not isinstance(trace, str):
        return ""
    found = ""
    for line in trace.splitlines():
        match = _FRAME.match(line)
        if match and not match["file"].startswith((_TORCH_DIR, _OWN_DIR)):
            found = f"{_shorten(match['file'])}:{match['line']}"
    return found


_FRAME = re.compile(r'\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')


def _shorten(path: str) -> str:
    """An installed package's file from the package down; the user's relative to the working directory."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.rpartition(marker)[2]
    with contextlib.suppress(ValueError):
        return str(Path(path).relative_to(Path.cwd()))
    return path


def describe_nodes(graphs: Sequence[torch.fx.GraphModule]) -> list[tuple[torch.fx.Node, NodeInfo]]:
    """Every node that does work, across ``graphs`` in order, with its stable identity."""
    seen: Counter[tuple[str, str, str]] = Counter()
    out = []
    for gm in graphs:
        for node in gm.graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            op, module, target = node.op, _module_path(node), _target_name(gm, node)
            occurrence = seen[(op, module, target)]
            seen[(op, module, target)] += 1
            key = node_key(op, module, target, occurrence)
            out.append((node, NodeInfo(key, node.name, op, target, module, source_line(node))))
    return out


# Keeping the module as it was, and checking a capture against it -----------------------------------------


class Kept:
    """What a capture may disturb in the module, noted on entry: put back with ``restore`` (buffers and torch's
    random state, between trial runs) and ``close`` (also modes, attributes a capture added, registrations)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module
        self.modules = list(module.modules())
        self.attrs = [(m, set(vars(m)), set(m._parameters), set(m._buffers), set(m._modules)) for m in self.modules]
        self.modes = [(m, m.training) for m in self.modules]
        self.buffers = [
            (owner, name, buf, buf.detach().clone())
            for owner in self.modules
            for name, buf in owner._buffers.items()
            if buf is not None
        ]
        self.versions = {name: p._version for name, p in module.named_parameters()}
        self.rng = torch.random.get_rng_state()
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
        self.cuda_rng = torch.cuda.get_rng_state_all() if cuda else None

    def restore(self) -> None:
        """Buffers to their values on entry, torch's random state to where it was."""
        torch.random.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        with torch.no_grad():
            for owner, name, original, saved in self.buffers:
                owner._buffers[name] = original
                original.copy_(saved)

    def close(self) -> None:
        for m, names, params, buffers, children in self.attrs:
            for name in set(vars(m)) - names:  # e.g. torch.compile's _is_torch_compile marker
                del vars(m)[name]
            for registry, before in ((m._parameters, params), (m._buffers, buffers), (m._modules, children)):
                for name in set(registry) - before:
                    del registry[name]
        for m, training in self.modes:
            m.training = training
        self.restore()
        self.check_parameters()

    def check_parameters(self) -> None:
        """Refuse a module that changes its own parameters in place (a forward that trains itself)."""
        changed = [name for name, p in self.module.named_parameters() if self.versions.get(name) != p._version]
        if changed:
            raise ProfileError(
                f"the module changed its parameters in place during forward ({', '.join(changed[:5])}); "
                "profiling it repeatedly would alter the model. Profile a copy (copy.deepcopy(model))."
            )


@contextlib.contextmanager
def kept_as_is(module: torch.nn.Module) -> Iterator[Kept]:
    """The body may disturb the module; afterwards it is put back (``Kept.close``), and a forward that
    changed its own parameters is refused, unless the body raised (its error says more)."""
    kept = Kept(module)
    try:
        yield kept
    except BaseException:
        with contextlib.suppress(ProfileError):  # the error on its way out says more
            kept.close()
        raise
    kept.close()


def fresh_copy(value: Any) -> Any:
    """A copy whose tensors are new, wherever they sit (lists, dicts, dataclasses, objects): the module may
    change its inputs in place. ``copy.deepcopy`` reaches tensors inside any container; values it cannot
    copy fall back to cloning the tensors that torch's pytree reaches (lists, tuples, dicts, named tuples)."""
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - an uncopyable input: clone what pytree reaches
        return pytree.tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, value)


def _fresh(args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Copies of the example inputs, as ``(args, kwargs)``, whose tensors are new."""
    a, k = fresh_copy((list(args), dict(kwargs)))
    return a, k


def flat_graph(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with the default codegen: flat positional inputs in placeholder order, the output node's value
    as it is (a pytree codegen, as ``torch.export``'s, packs and unpacks them). This is how a timing engine
    runs a graph, so it is what a capture is checked with."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return torch.fx.GraphModule(gm, graph, type(gm).__name__)


def plain_runners(captured: Captured) -> list[Runner]:
    """A runner per graph that just runs it, as an engine would without timing."""
    return [flat_graph(gm) for gm in captured.graphs]


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


def _one_line(exc: BaseException) -> str:
    """``Type: first line`` of an error, and where it arose in the user's code (or torch's own ``Caused by``)."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    if len(first) > 160:  # torch's errors go on to explain at length: keep the first sentence
        end = first.find(". ", 40)
        first = first[: end + 1] if 0 < end < 160 else first[:157] + "..."
    line = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    caused = re.search(r"^Caused by: \((.+)\)\s*$", text, re.MULTILINE)
    where = _user_frame(exc) or (caused[1] if caused else None)
    return f"{line} (at {where})" if where else line


_TORCH_LOGGERS = ("torch", "torch._dynamo", "torch._export", "torch.export", "torch.fx.experimental.symbolic_shapes")


class _Recorder(logging.Handler):
    """Keeps torch's warnings instead of printing them, for the error that explains a failure."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.messages.append(record.getMessage())

    def limit_hit(self) -> str:
        """Which function hit dynamo's recompilation limit, and why it recompiled, from dynamo's warning."""
        for message in reversed(self.messages):
            if "hit config." in message:
                lines = [line.strip() for line in message.splitlines()[:3]]
                return "; ".join(line for line in lines if line)
        return ""


_RECORDER = _Recorder()


@contextlib.contextmanager
def _quiet() -> Iterator[_Recorder]:
    """No logs, warnings or partial graphs (export prints them to stderr) while export or dynamo try a model:
    a failure is reported, in one line, in our error instead. torch's warnings are kept in the recorder."""
    loggers = [logging.getLogger(name) for name in _TORCH_LOGGERS]
    saved = [(logger.level, logger.propagate, logger.handlers[:]) for logger in loggers]
    _RECORDER.messages.clear()
    for logger in loggers:
        logger.handlers, logger.propagate = [_RECORDER], False
        logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield _RECORDER
    finally:
        for logger, (level, propagate, handlers) in zip(loggers, saved, strict=True):
            logger.setLevel(level)
            logger.propagate, logger.handlers = propagate, handlers


class _Checker:
    """Runs the module once, eagerly, and checks a capture against it on copies of the same inputs."""

    def __init__(self, module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any], kept: Kept) -> None:
        self.module, self.args, self.kwargs, self.kept = module, args, kwargs, kept
        self._expected: list[Any] = []

    def expected(self) -> Any:
        if not self._expected:
            a, k = _fresh(self.args, self.kwargs)
            self.kept.restore()
            try:
                self._expected.append(self.module(*a, **k))
                self.kept.check_parameters()  # its output would change from run to run: no capture can match
            except ProfileError:
                raise
            except Exception as exc:
                raise ProfileError(
                    f"{type(self.module).__name__} itself fails on these inputs: {_one_line(exc)}\n"
                    "  Fix: pass inputs the module runs with (the same as a plain call, model(*args, **kwargs))."
                ) from exc
            finally:
                self.kept.restore()
        return self._expected[0]

    def problem(self, captured: Captured) -> str | None:
        """Why the capture does not run like the module, or ``None``. Raises what ``forward`` raises."""
        expected = self.expected()
        a, k = _fresh(self.args, self.kwargs)
        self.kept.restore()  # the same random state as the eager run: dropout draws the same mask
        try:
            with _quiet():  # a failing GraphModule prints its code to stderr; the error says enough
                actual = captured.forward(plain_runners(captured), captured.prepare(a, k))
        finally:
            self.kept.restore()
        found = output_difference(expected, actual)
        return f"the captured graph's {found}" if found else None


# Symbolic tracing, with submodules kept whole -------------------------------------------------------------


def _symbolic(module: torch.nn.Module, leaf_modules: Sequence[LeafSpec], tracer: torch.fx.Tracer | None) -> Captured:
    gm, cap = trace_symbolic(module, leaf_modules, tracer)
    if isinstance(gm.graph._codegen, torch.fx.graph._PyTreeCodeGen):  # a tracer given concrete_args

        def prepare(a: Sequence[Any], k: dict[str, Any]) -> list[Any]:
            return _pytree_placeholder_args(gm, module, a, k)

        return _single(gm, cap, prepare, unflatten=gm.graph._codegen.process_outputs)
    return _single(gm, cap, lambda a, k: placeholder_args(gm, module, a, k))


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
    count = len(gm.graph.find_nodes(op="placeholder"))
    if len(flat) != count:
        raise ProfileError(
            f"the inputs of {type(module).__name__} flatten to {len(flat)} values, the traced graph takes {count}: "
            "pass inputs with the structure given to the tracer's concrete_args"
        )
    return flat


def _auto_symbolic(
    module: torch.nn.Module,
    leaf_modules: Sequence[LeafSpec],
    tracer: torch.fx.Tracer | None,
    checker: _Checker,
) -> tuple[Captured | None, str]:
    """Symbolic tracing, keeping each submodule that breaks it whole (up to ``MAX_LEAF_RETRIES``), checked
    against the module: the capture, or ``None`` and why it failed."""
    leaves = list(leaf_modules)
    kept: list[str] = []
    name = "symbolic_trace" if tracer is None else f"tracer:{type(tracer).__name__}"
    while True:
        try:
            captured = _symbolic(module, leaves, tracer)
        except SymbolicTraceError as exc:
            failed = exc.failed_in
            if tracer is None and failed and failed[0] and failed[0] not in leaves and len(kept) < MAX_LEAF_RETRIES:
                leaves.append(failed[0])
                kept.append(f"{name} failed in {failed[0]!r} ({failed[1]}): {_one_line(exc.cause)}; kept it whole")
                continue
            where = f" in {failed[0]!r} ({failed[1]})" if failed and failed[0] else ""
            if len(kept) >= MAX_LEAF_RETRIES and where:
                where += f", after keeping {len(kept)} submodules whole"
            return None, f"{name} failed{where}: {_one_line(exc.cause)}"
        break
    try:
        problem = checker.problem(captured)
    except ProfileError:
        raise
    except Exception as exc:  # noqa: BLE001 - a graph that fails where the module runs: try the next mode
        problem = f"the traced graph fails where the module runs: {_one_line(exc)}"
    if problem:
        if kept:
            problem += f" (with {', '.join(repr(leaf) for leaf in leaves[len(leaf_modules) :])} kept whole)"
        return None, f"{name}: {problem}"
    cap = dataclasses.replace(captured.capture, detail="; ".join(kept))
    return dataclasses.replace(captured, capture=cap), ""


# torch.export ----------------------------------------------------------------------------------------------


def _export(module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any]) -> Captured:
    """``torch.export`` (non-strict) of the module, unlifted: one graph with parameters as ``get_attr``."""
    a, k = _fresh(args, kwargs)
    try:
        with _quiet():
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
    return _single(gm, cap, prepare, unflatten=lambda out: _unflatten_output(out, out_spec))


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
        f"torch.export could not capture {type(module).__name__}: {_one_line(exc)}\n"
        "  torch.export traces the whole forward as one graph: data-dependent shapes or branches "
        "(boolean masks, nonzero, if on a tensor's value) and inputs it cannot flatten stop it.\n"
        '  Fix: capture="dynamo" splits the model into graphs where it cannot go on; or make that code '
        "export-friendly (torch._check for sizes, torch.cond for branches)."
    )


# torch.compile (dynamo) ------------------------------------------------------------------------------------

# Dynamo keeps what it compiles in per-code-object caches that outlive a capture and that every instance of a
# class shares: a second capture of the same model class, shapes and modes reuses the graphs the first compiled
# (our backend is not called again), and a recompilation limit (torch._dynamo.config.recompile_limit) counts
# entries per code object. We do not call torch._dynamo.reset(): it would drop every compiled function of the
# user's process (their own torch.compile calls included). Instead the backend is one module-level function
# (dynamo checks that cached code was compiled by the backend in use, so ours is reused, never the user's),
# each graph it compiles is a _Slot that hands its calls to whichever capture or pass is running (the
# innermost _DynamoRun), and a capture learns its graphs from the calls of a real run, not from the
# backend. A cache limit being hit, a recompilation or a graph not seen at capture make errors, never eager code.


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

    def _record(self, slot: _Slot) -> None:
        frame_locals, owner = self._caller()
        key = (slot, owner, tuple(sorted(frame_locals.items())))
        index = self.index.get(key)
        if index is None:
            index = self.index[key] = len(self.graphs)
            self.graphs.append(self._copy(slot.gm, frame_locals, owner))
        self.sequence.append((slot, index))

    def _caller(self) -> tuple[dict[str, str], str]:
        """The module paths of the compiled frame's local modules, and of the module whose code it is."""
        frame: types.FrameType | None = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename.startswith((*_DYNAMO_DIRS, _OWN_DIR)):
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


def _dynamo(module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any], checker: _Checker) -> Captured:
    """``torch.compile`` with a backend that keeps each FX graph dynamo makes (one per graph break).

    The module runs eagerly first (the checker's reference run): code that initialises state on its first
    call (torchvision's MultiScaleRoIAlign sets its scales) would otherwise be compiled on that path, and
    every later pass would recompile.
    """
    checker.expected()
    run = _DynamoRun(module)
    compiled = torch.compile(module, backend=_dynamo_backend, fullgraph=False, dynamic=False)
    a, k = _fresh(args, kwargs)
    _ACTIVE.append(run)
    try:
        with _quiet() as recorder, _dynamo_limits():
            compiled(*a, **k)
    except torch._dynamo.exc.FailOnRecompileLimitHit as exc:
        raise CaptureError(_limit_advice(run.name, exc, recorder)) from exc
    except Exception as exc:
        raise CaptureError(
            f"torch.compile (dynamo) could not capture {run.name}: {_one_line(exc)}\n"
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
        run.runners, run.position = runners, 0
        _ACTIVE.append(run)
        try:
            with _dynamo_limits(error_on_recompile=True):
                out = compiled(*call_args, **call_kwargs)
        except torch._dynamo.exc.RecompileError as exc:
            raise ProfileError(
                f"dynamo would recompile {run.name} for this pass, so it would not run the captured graphs: "
                f"{' '.join(str(exc).split())}\n"
                "  Fix: profile with inputs like those captured (shapes, dtypes, Python values) under the same "
                "grad mode and module mode."
            ) from exc
        except torch._dynamo.exc.FailOnRecompileLimitHit as exc:
            raise ProfileError(_limit_advice(run.name, exc)) from exc
        finally:
            _ACTIVE.remove(run)
            run.runners = ()
        if run.position != len(run.sequence):
            raise ProfileError(
                f"dynamo ran {run.position} of the {len(run.sequence)} graph calls captured for {run.name}: part "
                "of the forward ran eagerly or took another path than at capture, so it cannot be timed node by "
                'node. Fix: capture="symbolic" with leaf_modules=[...], or torch._dynamo.reset() before profiling.'
            )
        return out

    def prepare(a: Sequence[Any], k: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        return list(a), dict(k)

    cap = Capture(method="dynamo", graphs=len(run.graphs))
    return Captured(graphs=tuple(run.graphs), capture=cap, prepare=prepare, forward=forward)


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


def _limit_advice(name: str, exc: BaseException, recorder: _Recorder | None = None) -> str:
    where = (recorder.limit_hit() if recorder else "") or " ".join(str(exc).split())[:300]
    return (
        f"dynamo reached its recompilation limit on {name} ({where}); "
        "it would run that code eagerly, not as captured graphs.\n"
        "  Fix: torch._dynamo.reset() before profiling (it drops what dynamo compiled before), or raise "
        "torch._dynamo.config.recompile_limit."
    )


# Choosing a capture -------------------------------------------------------------------------------------


def capture_module(
    module: torch.nn.Module,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    mode: str = "auto",
    leaf_modules: Sequence[LeafSpec] = (),
    tracer: torch.fx.Tracer | None = None,
) -> Captured:
    """Capture ``module`` called with ``args`` and ``kwargs`` (used as examples, never changed) by ``mode``.

    ``symbolic``: ``torch.fx`` symbolic tracing (``leaf_modules`` kept whole, or a user ``tracer``).
    ``export``: ``torch.export`` (non-strict), one graph. ``dynamo``: ``torch.compile`` with a backend that
    keeps each graph, several where the model has graph breaks. ``auto``: symbolic tracing, keeping each
    submodule that breaks it whole; then export; then dynamo; the first whose graphs run like the module.
    Every capture but an explicit ``symbolic`` one is checked against the module's own output. The module
    is left as it was (modes, buffers, attributes) and so is torch's random state.
    """
    if mode not in MODES:
        raise CaptureError(f"unknown capture mode {mode!r}; choose one of {', '.join(MODES)}")
    _check_request(module, args, kwargs, mode=mode, leaf_modules=leaf_modules, tracer=tracer)
    with kept_as_is(module) as kept:
        if mode == "symbolic":
            return _symbolic(module, leaf_modules, tracer)
        checker = _Checker(module, args, kwargs, kept)
        if mode == "auto":
            return _auto(module, args, kwargs, leaf_modules=leaf_modules, tracer=tracer, checker=checker)
        captured = _export(module, args, kwargs) if mode == "export" else _dynamo(module, args, kwargs, checker)
        problem = checker.problem(captured)
        if problem:
            raise CaptureError(
                f"{_MODE_NAMES[mode]} captured {type(module).__name__}, but {problem}.\n"
                '  Fix: capture="auto" tries the other modes; capture="symbolic" with leaf_modules=[...] keeps '
                "the part that differs whole."
            )
        return captured


_MODE_NAMES = {"export": "torch.export", "dynamo": "torch.compile (dynamo)"}


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
    if not isinstance(module, torch.nn.Module):
        raise ProfileError(f"fxprof profiles a torch.nn.Module, got {type(module).__name__}")
    name = type(module).__name__
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise ProfileError(f"the positional inputs of {name} must be a sequence, got {type(args).__name__}")
    if not isinstance(kwargs, dict):
        raise ProfileError(f"the keyword inputs of {name} must be a dict, got {type(kwargs).__name__}")
    if tracer is not None and not isinstance(tracer, torch.fx.Tracer):
        raise CaptureError(f"tracer= takes a torch.fx.Tracer instance, got {type(tracer).__name__}")
    if isinstance(leaf_modules, str | type):
        raise CaptureError(f"leaf_modules= takes a list, got {leaf_modules!r}; write leaf_modules=[{leaf_modules!r}]")
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
    if mode in ("export", "dynamo") and (leaf_modules or tracer is not None):
        raise CaptureError(
            f'leaf_modules= and tracer= are for symbolic tracing; capture="{mode}" cannot use them. '
            'Fix: drop them, or use capture="symbolic" or capture="auto".'
        )
    with contextlib.suppress(TypeError, ValueError):  # a signature inspect cannot read binds anything
        try:
            inspect.signature(module.forward).bind(*args, **kwargs)
        except TypeError as exc:
            raise ProfileError(f"the inputs do not fit {name}.forward: {exc}") from None


def _auto(
    module: torch.nn.Module,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    leaf_modules: Sequence[LeafSpec],
    tracer: torch.fx.Tracer | None,
    checker: _Checker,
) -> Captured:
    """The first of symbolic (with submodules kept whole), export and dynamo whose graphs run like the module."""
    checker.expected()  # a module that fails on its inputs is refused before any capture is blamed
    captured, failed = _auto_symbolic(module, leaf_modules, tracer, checker)
    if captured is not None:
        return captured
    failures = [failed]
    for mode in ("export", "dynamo"):
        try:
            candidate = _export(module, args, kwargs) if mode == "export" else _dynamo(module, args, kwargs, checker)
            problem = checker.problem(candidate)
        except CaptureError as exc:  # its first line names the mode, the cause and where
            problem = str(exc).splitlines()[0]
        except Exception as exc:  # noqa: BLE001 - every mode's failure is reported together
            problem = _one_line(exc)
        if problem is None:
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


def _single(
    gm: torch.fx.GraphModule,
    cap: Capture,
    prepare: Callable[[Sequence[Any], dict[str, Any]], Any],
    unflatten: Callable[[Any], Any] | None = None,
) -> Captured:
    """A capture that is one graph fed with flat positional inputs (its output rebuilt by ``unflatten``)."""

    def forward(runners: Sequence[Runner], inputs: Any) -> Any:
        out = runners[0](*inputs)
        return unflatten(out) if unflatten is not None else out

    return Captured(graphs=(gm,), capture=cap, prepare=prepare, forward=forward)


def placeholder_args(
    gm: torch.fx.GraphModule, module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any]
) -> list[Any]:
    """The graph's positional inputs, bound from the call's args and kwargs like ``module(...)`` would."""
    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
    except TypeError as exc:
        raise ProfileError(f"the inputs do not fit {type(module).__name__}.forward: {exc}") from None
    bound.apply_defaults()
    out: list[Any] = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        target = str(node.target)
        name = target.lstrip("*")
        if target.startswith("**"):
            raise ProfileError(f"{type(module).__name__}.forward takes **{name}; pass those inputs by name")
        value = bound.arguments.get(name, node.args[0] if node.args else None)
        if target.startswith("*"):
            out.extend(value or ())
        else:
            out.append(value)
    return out
