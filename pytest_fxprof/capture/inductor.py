"""Capture by Inductor: a ``torch.compile``'d module (or one the plugin compiles) timed kernel by kernel.

The unit is what the compiled code runs: each generated kernel (a C++ or Triton kernel, often several fused
operations) and each extern call (a library matmul or convolution, an aten fallback). Owns ``wanted`` (whether a
module is profiled this way), ``capture`` (the compile and the kernels as nodes), ``instrumented_source`` (the
rewrite of Inductor's Python wrapper that stamps the clock after every kernel) and ``kernel_module`` (which module
a kernel belongs to).

How it works. The module is compiled again, with the user's backend and options (``mode``, ``options``,
``dynamic``, ``fullgraph``) wrapped by a backend that keeps each graph dynamo hands it, under three settings of
Inductor's: no cache (``_inductor_settings`` says why), provenance tracking
(``trace.provenance_tracking_level``: which post-grad FX nodes each kernel computes, and which of dynamo's
nodes those came from) and a raised recompilation limit. Each compiled graph's wrapper function (``call``) is
rewritten from its source with a stamp before the first kernel and after every kernel, so a kernel's time is the
gap between two stamps: the buffers it allocates count with it. A kernel's module path, class and source line
come from dynamo's nodes that its operations came from; its stable key from its kind (the kernel's name without
its number, or the extern call), its module and its occurrence, so that a kernel added elsewhere renames none.

Dynamo compiles the module's code again for this backend (the user's compiled module is never called, and its
cache entries stay); a recompilation while the passes run is an error, never uninstrumented code timed. Dynamo
caches compiled code per code object, for the process's life, and checks the backend it was compiled by: so the
backend is one object per configuration of the user's (``_Backend``), and each graph it compiles is a ``_Slot``
that hands its calls to whichever capture or pass runs (``_ACTIVE``). A second profile of the same class reuses
the graphs, kernels and rewritten wrappers the first compiled, and adds no cache entry, which would count against
the recompilation limit of the user's own compiles of that class and keep each profiled model alive.

Must not import pytest.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import json
import re
import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from pytest_fxprof.capture import dynamo
from pytest_fxprof.capture.errors import CaptureError, ProfileError, one_line, quiet
from pytest_fxprof.capture.nodes import MODULE_PATH_META
from pytest_fxprof.capture.sources import source_line
from pytest_fxprof.capture.state import fresh_inputs
from pytest_fxprof.records.measurement import KERNEL_OP, Capture, NodeInfo, node_key

Stamp = Callable[[], Any]

BOOKKEEPING = frozenset(
    {
        "empty_strided_cpu",
        "empty_strided_cuda",
        "empty_strided",
        "empty_strided_xpu",
        "empty_strided_mps",
        "reinterpret_tensor",
        "alloc_from_pool",
        "run_intermediate_hooks",
        "get_raw_stream",
        "assert_size_stride",
        "assert_size_stride_grouped",
        "assert_alignment",
        "assert_alignment_grouped",
        "check_memory_format",
        "clear",
        "as_strided",
        "set_device",
        "_get_stream_by_index",
    }
)
"""Calls in Inductor's wrapper that allocate, view, check or bookkeep: not kernels (nor is any call whose name, or
a part of it, starts with ``assert``). Their time counts with the kernel after them."""


DEVICE_MODULES = frozenset({"cuda", "xpu", "mps", "mtia"})
"""A call ``torch.cuda.set_device(...)`` and its kin in the wrapper manage the device (Inductor writes one inside
every device guard): bookkeeping, like the names above."""


def _bookkeeping(part: str) -> bool:
    return part in BOOKKEEPING or part.lstrip("_").startswith("assert")


def _device_call(callee: str) -> bool:
    parts = callee.split(".")
    return len(parts) > 2 and parts[0] == "torch" and parts[1] in DEVICE_MODULES


_HANDLE = re.compile(r"\[Provenance debug handles\]\s+(\S+:\d+)")
_NUMBERED = re.compile(r"_\d+$")


def is_compiled(module: object) -> bool:
    """Whether ``module`` is what ``torch.compile(model)`` returns (dynamo's ``OptimizedModule``), or a module
    compiled in place (``model.compile()``). Imports nothing: where dynamo was never imported, nothing was
    compiled."""
    kind = getattr(sys.modules.get("torch._dynamo.eval_frame"), "OptimizedModule", None)
    if kind is None:
        return False
    return isinstance(module, kind) or _in_place(module)


def _in_place(module: object) -> bool:
    """Whether ``module`` was compiled in place (``model.compile()``): its calls go to its ``_compiled_call_impl``."""
    return isinstance(module, torch.nn.Module) and getattr(module, "_compiled_call_impl", None) is not None


def _context(module: torch.nn.Module) -> Any:
    """The dynamo context a compiled ``module`` was compiled with (its backend, ``fullgraph``, ``dynamic``): an
    ``OptimizedModule``'s own, or the one the compiled call of a module compiled in place closes over."""
    if not _in_place(module):
        return module.dynamo_ctx
    impl: Any = module._compiled_call_impl
    for name, cell in zip(impl.__code__.co_freevars, impl.__closure__ or (), strict=False):
        if name == "self" and hasattr(cell.cell_contents, "callback"):
            return cell.cell_contents
    raise ProfileError(  # pragma: no cover - torch's own compiled call keeps its context
        f"{type(module).__name__} was compiled in place (model.compile()) in a way fxprof cannot read.\n"
        "  Fix: hand the fixture torch.compile(model) instead."
    )


def wanted(module: object, mode: str) -> bool:
    """Whether a forward of ``module`` is profiled kernel by kernel: ``capture="inductor"``, or ``auto`` handed a
    compiled module."""
    return mode == "inductor" or (mode == "auto" and is_compiled(module))


def eager_module(module: torch.nn.Module) -> torch.nn.Module:
    """The module a compiled module wraps (itself when it is not compiled, or compiled in place)."""
    return module._orig_mod if is_compiled(module) and not _in_place(module) else module  # type: ignore[return-value]


@contextlib.contextmanager
def _eager_calls(module: torch.nn.Module) -> Iterator[None]:
    """While the body runs, a module compiled in place calls its own forward, which fxprof compiles, not the
    compiled call ``model.compile()`` gave it (put back after)."""
    impl = getattr(module, "_compiled_call_impl", None)
    if impl is None:
        yield
        return
    module._compiled_call_impl = None
    try:
        yield
    finally:
        module._compiled_call_impl = impl


@dataclass
class KernelSite:
    """One kernel call of a compiled graph's wrapper: where it stands and what it runs."""

    line: int
    """Line of the call in the wrapper's source (1-based)."""
    callee: str
    """The kernel's name (``cpp_fused_gelu_0``) or extern call (``extern_kernels.addmm``)."""
    handle: str = ""
    """Inductor's provenance handle for it (``cpp_fused_gelu_0:2``), where the wrapper names one."""


def kernel_sites(source: str) -> list[KernelSite]:
    """The kernel calls of ``source``'s ``call`` function, in order (its bookkeeping calls left out)."""
    fn = _call_function(ast.parse(source))
    lines = source.splitlines()
    _straight(fn, lines)
    return [site for stmt in _statements(fn.body) if (site := _site(stmt, lines)) is not None]


def _straight(fn: ast.FunctionDef, lines: Sequence[str]) -> None:
    """Refuse a wrapper that runs kernels inside a branch, a loop or a ``try`` (``torch.cond``, a while loop
    compiled whole): a pass would stamp another number of kernels than the capture saw."""
    for stmt in _statements(fn.body):
        if isinstance(stmt, ast.If | ast.For | ast.While | ast.Try | ast.Match):
            inner = [s for s in ast.walk(stmt) if isinstance(s, ast.stmt) and s is not stmt and _site(s, lines)]
            if inner:
                raise CaptureError(
                    f"Inductor's code for this model runs kernels in a {type(stmt).__name__.lower()} statement "
                    f"(line {stmt.lineno} of its wrapper: a torch.cond or a loop compiled whole), which fxprof cannot "
                    "time kernel by kernel: a pass would run another set of kernels than the capture saw.\n"
                    "  Fix: hand the fixture the eager module (capture='auto') to time its operations one by one."
                )


def instrumented_source(source: str) -> tuple[str, int]:
    """``source``'s ``call`` function alone, rewritten to stamp the clock at its start and after every kernel,
    appending each stamp to ``_fxprof_s``; and the number of kernels it stamps.

    The names it adds (``_fxprof_s``, ``_fxprof_stamp``) are looked up in the globals it runs with."""
    tree = ast.parse(source)
    fn = _call_function(tree)
    lines = source.splitlines()
    count = 0

    def stamp() -> ast.stmt:
        return ast.parse("_fxprof_s.append(_fxprof_stamp())").body[0]

    def rewrite(body: list[ast.stmt]) -> list[ast.stmt]:
        nonlocal count
        out: list[ast.stmt] = []
        for stmt in body:
            if isinstance(stmt, ast.With | ast.AsyncWith):
                stmt.body = rewrite(stmt.body)
            out.append(stmt)
            if _site(stmt, lines) is not None:
                out.append(stamp())
                count += 1
        return out

    fn.body = [stamp(), *rewrite(fn.body)]
    fn.decorator_list = []
    module = ast.Module(body=[fn], type_ignores=[])
    return ast.unparse(ast.fix_missing_locations(module)), count


def _call_function(tree: ast.Module) -> ast.FunctionDef:
    """The wrapper's ``call``: a method of its ``Runner`` class, or (older torch) a function of the module."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            return node
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "call":
                    return item
    raise CaptureError("Inductor's wrapper code has no call function: this torch's wrapper is not one fxprof reads")


def _statements(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    for stmt in body:
        if isinstance(stmt, ast.With | ast.AsyncWith):
            yield from _statements(stmt.body)
        else:
            yield stmt


def _site(stmt: ast.stmt, lines: Sequence[str]) -> KernelSite | None:
    """The kernel ``stmt`` calls, or None where it calls none (an allocation, a view, a check, ``del``)."""
    value: ast.expr | None = None
    if isinstance(stmt, ast.Expr) or (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        value = stmt.value
    if not isinstance(value, ast.Call):
        return None
    callee = _callee(value.func)
    if not callee or callee.startswith("args.") or _device_call(callee) or any(map(_bookkeeping, callee.split("."))):
        return None
    handle = ""
    k = stmt.lineno - 2  # the comment lines just above the call
    while k >= 0 and lines[k].lstrip().startswith("#"):
        found = _HANDLE.search(lines[k])
        if found:
            handle = found[1]
            break
        k -= 1
    return KernelSite(stmt.lineno, callee, handle)


def _callee(func: ast.expr) -> str:
    """``cpp_fused_gelu_0`` for ``cpp_fused_gelu_0(...)`` and ``triton_poi_fused_0.run(...)``;
    ``extern_kernels.addmm`` and ``torch.ops.mkldnn._linear_pointwise.default`` as written."""
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return ""
    parts.append(func.id)
    name = ".".join(reversed(parts))
    if len(parts) == 2 and parts[0] == "run":  # a Triton kernel's launch
        return func.id
    return name


def kernel_kind(callee: str) -> str:
    """What a kernel computes, without the number Inductor gives it: ``cpp_fused_gelu`` for ``cpp_fused_gelu_0``;
    ``mkldnn._linear_pointwise.default`` for ``torch.ops.mkldnn._linear_pointwise.default``."""
    if "." in callee:
        return callee.removeprefix("torch.ops.")
    return _NUMBERED.sub("", callee)


def kernel_module(modules: Sequence[str]) -> str:
    """The module a kernel belongs to, from the module path of each operation it fuses: the deepest module that
    holds more than half of them (the root, ``""``, where none does)."""
    if not modules:
        return ""
    held: Counter[str] = Counter()
    for path in modules:
        parts = path.split(".") if path else []
        for depth in range(1, len(parts) + 1):
            held[".".join(parts[:depth])] += 1
    majority = [path for path, n in held.items() if 2 * n > len(modules)]
    return max(majority, key=lambda p: p.count(".") + 1, default="")


ENTRY = "graph entry"
"""The target of the node that times the way into a compiled graph: dynamo's guards and wrappers, and, before a
graph after the first, the eager code of its graph break. Its module: ``entry_modules``."""


@dataclass(eq=False)
class _Graph:
    """One graph Inductor compiled: dynamo's graph, its wrapper and its kernels. ``space`` is the namespace its
    rewritten wrapper runs in: the capture that times it puts its own stamps list and clock there."""

    gm: torch.fx.GraphModule
    compiled: Any = None
    sites: list[KernelSite] = field(default_factory=list)
    post_to_pre: dict[str, list[str]] = field(default_factory=dict)
    kernel_to_post: dict[str, list[str]] = field(default_factory=dict)
    space: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Instance:
    """A compiled graph as called from one place of the model (one block of several that share its code)."""

    graph: _Graph
    gm: torch.fx.GraphModule
    """Dynamo's graph with each node's module path as seen from this caller."""
    owner: str
    """The module whose code calls it (dynamo's frame), where its entry node sits."""
    first: int = 0
    """Position of its entry node among the profile's nodes; its kernels follow."""


_ACTIVE: list[Kernels] = []
"""The captures and passes running now, innermost last: the compiled graphs hand their calls to the last."""

_COMPILING: list[_Graph] = []
"""The graph ``_Backend`` is compiling now: the one whose wrapper Inductor finishes next (``_adopt``)."""


def _active() -> Kernels | None:
    return _ACTIVE[-1] if _ACTIVE else None


class _Slot:
    """What the backend returns for one graph, cached by dynamo with it. At capture each call notes the place it is
    called from (a graph that several blocks share runs once per block); in a timed pass the ``k``-th call must be
    the graph the capture saw ``k``-th, and its stamps go to that place's nodes. Outside a capture or pass it runs
    the graph as compiled."""

    def __init__(self, graph: _Graph, compiled_fn: Callable[..., Any]) -> None:
        self.graph, self.compiled_fn = graph, compiled_fn

    def __call__(self, *args: Any) -> Any:
        kernels = _active()
        if kernels is not None:
            if kernels.recording:
                kernels.note(self.graph)
            elif kernels.timed:
                kernels.enter(self.graph)
        return self.compiled_fn(*args)


class _Backend:
    """fxprof's backend around one configuration of the user's (Inductor, with their mode and options): one object
    per configuration for the process's life (``_backend_for``), so that dynamo reuses what an earlier profile of
    the same class compiled. Each graph it compiles counts, with its compile time, for the capture running."""

    def __init__(self, user: Callable[..., Any]) -> None:
        self.user = user

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> _Slot:
        graph = _Graph(gm=gm)
        kernels = _active()
        began = time.perf_counter()
        _COMPILING.append(graph)
        try:
            compiled_fn = self.user(gm, example_inputs)
        finally:
            _COMPILING.pop()
            if kernels is not None:
                kernels.compiles += 1
                kernels.compile_s += time.perf_counter() - began
        return _Slot(graph, compiled_fn)


_BACKENDS: list[_Backend] = []


def _backend_for(user: Callable[..., Any]) -> _Backend:
    """The one ``_Backend`` of ``user``'s configuration (Inductor's own wrappers compare by mode and options)."""
    for backend in _BACKENDS:
        if backend.user is user or backend.user == user:
            return backend
    backend = _Backend(user)
    _BACKENDS.append(backend)
    return backend


def _adopt(compiled: Any) -> None:
    """Called as Inductor finishes a graph (its ``CompiledFxGraph``): the graph ``_Backend`` is compiling takes it,
    its kernels read and its wrapper rewritten to stamp them in a timed pass."""
    graph = _COMPILING[-1] if _COMPILING else None
    if graph is None or graph.compiled is not None:
        return  # a graph of Inductor's own (a backward, a subgraph) or one not compiled by our backend
    graph.compiled = compiled
    raw = compiled.current_callable
    source = compiled.source_code
    graph.sites = kernel_sites(source)
    # torch before 2.8 keeps no mapping: its kernels are timed, each in the root module, with no source line
    mapping = json.loads(getattr(compiled, "inductor_provenance_mapping_str", None) or "{}")
    graph.post_to_pre = mapping.get("postToPre", {}) or {}
    graph.kernel_to_post = {
        k: v for key, table in mapping.items() if key.endswith("CodeToPost") for k, v in (table or {}).items()
    }
    text, count = instrumented_source(source)
    if count != len(graph.sites):  # pragma: no cover - both read the same statements
        raise CaptureError("fxprof read Inductor's wrapper inconsistently")
    fn = getattr(raw, "__func__", raw)
    space = graph.space
    space.update(fn.__globals__)
    space["_fxprof_s"], space["_fxprof_stamp"] = [], time.perf_counter_ns  # each capture binds its own
    exec(compile(text, fn.__code__.co_filename, "exec"), space)  # noqa: S102 - Inductor's own code, rewritten
    timed = space["call"]
    if hasattr(raw, "__self__"):
        timed = types.MethodType(timed, raw.__self__)

    def call(inputs: Any) -> Any:
        kernels = _active()
        return timed(inputs) if kernels is not None and kernels.timed else raw(inputs)

    compiled.current_callable = call


class Kernels:
    """A module compiled by Inductor with a stamp after every kernel: ``begin`` a pass, run it (``timed`` or
    plain), ``end`` it; the nodes (``infos``: each graph call's entry, then its kernels) in stamp order."""

    def __init__(self, module: torch.nn.Module, stamp: Stamp) -> None:
        self.module = eager_module(module)
        self.name = type(self.module).__name__
        self.stamp = stamp
        self.recording = True
        self.timed = False
        self.stamps: list[Any] = []
        self.sequence: list[int] = []
        self.position = 0
        self.calls: list[tuple[list[int], Sequence[Any]]] = []
        self.graphs: list[_Graph] = []
        """The graphs a pass calls, in the order of their first call, each once."""
        self.instances: list[_Instance] = []
        self.order: list[int] = []
        """The instance of each graph call of a pass, in order, as the capture run made them."""
        self.keys: dict[tuple[Any, ...], int] = {}
        self.compiles = 0
        """Graphs Inductor compiled for this capture (none where an earlier profile's were reused) ..."""
        self.compile_s = 0.0
        """... and the seconds it took to compile them."""
        self.infos: list[NodeInfo] = []
        self.run = dynamo._DynamoRun(self.module)
        user, self.options, self.off = _user_backend(module)
        self.backend = _backend_for(user)
        self.compiled: Callable[..., Any] | None = None

    @property
    def breaks(self) -> int:
        """Graph breaks a pass goes through: its graph calls less one."""
        return max(len(self.order) - 1, 0)

    def note(self, graph: _Graph) -> None:
        """At capture: the call of ``graph`` from here, a new instance the first time it comes from this place."""
        frame_locals, owner = self.run._caller()
        key = (id(graph), owner, tuple(sorted(frame_locals.items())))
        index = self.keys.get(key)
        if index is None:
            index = self.keys[key] = len(self.instances)
            self.instances.append(_Instance(graph, self.run._copy(graph.gm, frame_locals, owner), owner))
        self.order.append(index)

    def enter(self, graph: _Graph) -> None:
        """In a timed pass: the next graph call, which must be the one the capture saw at this position."""
        k = self.position
        self.position += 1
        if k >= len(self.order) or self.instances[self.order[k]].graph is not graph:
            raise ProfileError(
                f"the compiled code of {self.name} called another graph than at capture (call {k + 1} of the pass; "
                f"{len(self.order)} graph calls were captured): the model took another path, so this pass cannot "
                "be timed kernel by kernel.\n"
                "  Fix: make the forward take the same path on every call with these inputs."
            )
        self.sequence.append(self.order[k])

    def begin(self) -> None:
        """Start a timed pass: its graphs' wrappers stamp into this capture's list, and its first stamp."""
        for graph in self.graphs:
            graph.space["_fxprof_s"], graph.space["_fxprof_stamp"] = self.stamps, self.stamp
        self.stamps.clear()
        self.sequence.clear()
        self.position = 0
        self.stamps.append(self.stamp())

    def end(self) -> None:
        """End a timed pass: its stamps and the node each gap between two of them times, for the engine."""
        if self.position != len(self.order):
            raise ProfileError(
                f"the compiled code of {self.name} made {self.position} of the {len(self.order)} graph calls seen at "
                "capture: part of it ran eagerly or took another path, so it cannot be timed kernel by kernel.\n"
                "  Fix: make the forward take the same path on every call with these inputs."
            )
        slots = [
            k
            for i in self.sequence
            if (instance := self.instances[i]).graph.compiled is not None  # one Inductor left as it was: no stamps
            for k in range(instance.first, instance.first + 1 + len(instance.graph.sites))
        ]
        if len(slots) + 1 != len(self.stamps):  # pragma: no cover - a graph that raised midway raised here too
            raise ProfileError(
                f"a pass of {self.name}'s compiled code stamped {len(self.stamps) - 1} kernels where its capture saw "
                f"{len(slots)}: part of it ran without fxprof's stamps.\n"
                "  Fix: hand the fixture the eager module (capture='auto') to time its operations one by one, and "
                "report this model to pytest-fxprof."
            )
        self.calls.append((slots, list(self.stamps)))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        assert self.compiled is not None
        return self.compiled(*args, **kwargs)


OFF_WHILE_PROFILING = {"triton.cudagraphs": "CUDA graphs", "cpp_wrapper": "the C++ wrapper"}
"""Inductor options a profile turns off, with what the capture's detail calls them: each kernel is stamped from
Inductor's Python wrapper, which a CUDA graph's replay and the C++ wrapper leave out. The kernels are the same."""


def _user_backend(module: torch.nn.Module) -> tuple[Callable[..., Any], dict[str, Any], tuple[str, ...]]:
    """The backend ``module`` was compiled with (Inductor's, with the user's mode and options, less those of
    ``OFF_WHILE_PROFILING``), dynamo's own settings (``fullgraph``, ``dynamic``) and what was turned off; Inductor
    with its defaults for an eager module. Another backend is refused with the fix."""
    import torch._inductor.config

    defaults = torch._inductor.config
    if not is_compiled(module):
        from torch._inductor.compile_fx import compile_fx

        off = tuple(name for key, name in OFF_WHILE_PROFILING.items() if defaults.get_config_copy().get(key))
        return compile_fx, {"fullgraph": False, "dynamic": False}, off
    ctx: Any = _context(module)
    backend: Any = getattr(ctx, "callback", None)
    while hasattr(backend, "_torchdynamo_orig_backend"):
        backend = backend._torchdynamo_orig_backend
    name = getattr(backend, "compiler_name", None) or getattr(backend, "__name__", None) or repr(backend)
    if name != "inductor" and getattr(backend, "__name__", "") not in ("compile_fx", "inductor"):
        raise ProfileError(
            f"{type(eager_module(module)).__name__} was compiled with backend {name!r}; fxprof times the kernels "
            "Inductor generates, so it profiles torch.compile's default backend only.\n"
            "  Fix: compile with backend='inductor' (the default), or hand the fixture the eager module "
            "(model._orig_mod, or the model without model.compile()) to time its operations one by one."
        )
    config = getattr(backend, "config", None)
    settings = {**defaults.get_config_copy(), **(config if isinstance(config, dict) else {})}
    off = tuple(name for key, name in OFF_WHILE_PROFILING.items() if settings.get(key))
    if isinstance(config, dict) and any(key in config for key in OFF_WHILE_PROFILING):
        backend = copy.copy(backend)  # the user's stays as it is
        backend.config = {**config, **{key: False for key in OFF_WHILE_PROFILING if key in config}}
    dynamo_settings = {"fullgraph": bool(getattr(ctx, "fullgraph", False)), "dynamic": getattr(ctx, "_dynamic", None)}
    return backend, dynamo_settings, off


@contextlib.contextmanager
def _adopting() -> Iterator[None]:
    """While the body runs, every graph Inductor finishes is handed to ``_adopt`` before torch wraps it."""
    try:
        from torch._inductor.output_code import CompiledFxGraph

        original = CompiledFxGraph.post_compile
    except (ImportError, AttributeError) as exc:
        raise CaptureError(
            f"this torch ({torch.__version__}) compiles in a way fxprof cannot time kernel by kernel: {one_line(exc)}\n"
            "  Fix: torch 2.8 or newer, or hand the fixture the eager module (model._orig_mod)."
        ) from exc

    def post_compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        _adopt(self)
        return original(self, *args, **kwargs)

    CompiledFxGraph.post_compile = post_compile  # type: ignore[method-assign]
    try:
        yield
    finally:
        CompiledFxGraph.post_compile = original  # type: ignore[method-assign]


def _inductor_settings() -> contextlib.AbstractContextManager[Any]:
    """Inductor's settings for a capture: provenance tracking, a fresh compile, and ``OFF_WHILE_PROFILING`` off
    (where the user's own options do not set them, which their backend's copy turns off). A cache hit keeps the
    mapping of the compile that filled the cache, whose dynamo nodes may have had other names (a local variable
    renamed changes them, not the compiled graph), so it would map kernels to nodes this graph does not have."""
    import torch._functorch.config
    import torch._inductor.config

    stack = contextlib.ExitStack()
    settings: dict[str, Any] = {"fx_graph_cache": False, **dict.fromkeys(OFF_WHILE_PROFILING, False)}
    if hasattr(torch._inductor.config.trace, "provenance_tracking_level"):
        settings["trace.provenance_tracking_level"] = 1
    stack.enter_context(torch._inductor.config.patch(settings))
    stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
    return stack


@contextlib.contextmanager
def _running(kernels: Kernels) -> Iterator[None]:
    """While the body runs, the compiled graphs hand their calls to ``kernels``, and a module compiled in place
    calls its own forward (which fxprof compiled)."""
    _ACTIVE.append(kernels)
    try:
        with _eager_calls(kernels.module):
            yield
    finally:
        _ACTIVE.remove(kernels)


def _ours(exc: BaseException) -> CaptureError | ProfileError | None:
    """fxprof's own error inside ``exc`` (dynamo wraps what a backend raises in ``BackendCompilerFailed``)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, CaptureError | ProfileError):
            return e
        todo += [e.__cause__, e.__context__, getattr(e, "inner_exception", None)]
    return None


SETTLE_CALLS = 3
"""Calls of the compiled module at capture, at most, until one compiles nothing new: a model that fills a cache or
sets state on its first call (timm's EfficientViT caches its attention biases) compiles again on its second, then
settles. Its graphs are those of the last call; one that still compiles on its third call would compile on every
pass, which the passes refuse."""


def capture(module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any], stamp: Stamp) -> Kernels:
    """Compile ``module`` with Inductor (its own backend and options where it is compiled already), call it until a
    call compiles nothing new (``SETTLE_CALLS``), and name every kernel of that call's compiled code as a node."""
    kernels = Kernels(module, stamp)
    kernels.compiled = torch.compile(kernels.module, backend=kernels.backend, **kernels.options)
    try:
        with quiet() as recorder, dynamo._dynamo_limits(), _inductor_settings(), _adopting(), _running(kernels):
            for _ in range(SETTLE_CALLS):
                compiled_before = kernels.compiles
                kernels.order.clear()
                a, k = fresh_inputs(args, kwargs)
                kernels.compiled(*a, **k)
                if kernels.compiles == compiled_before:
                    break
    except torch._dynamo.exc.FailOnRecompileLimitHit as exc:
        raise CaptureError(dynamo._limit_advice(kernels.name, exc, recorder)) from exc
    except (CaptureError, ProfileError):
        raise
    except Exception as exc:
        ours = _ours(exc)
        if ours is not None:
            raise ours from exc
        raise CaptureError(
            f"torch.compile (Inductor) could not compile {kernels.name}: {one_line(exc)}\n"
            "  Fix: make the forward compile with torch.compile, or hand the fixture the eager module "
            '(capture="auto") to time its operations one by one.'
        ) from exc
    kernels.recording = False
    used = list(dict.fromkeys(kernels.instances[i].graph for i in kernels.order))
    kernels.graphs = [g for g in used if g.compiled is not None]
    if not kernels.graphs:
        raise CaptureError(
            f"torch.compile (Inductor) compiled no graph of {kernels.name}: the whole forward ran eagerly (dynamo "
            "skipped it, or its recompilation limit was reached).\n"
            '  Fix: torch._dynamo.reset() before profiling, or capture="auto" with the eager module.'
        )
    kernels.infos = _describe(kernels)
    return kernels


def _describe(kernels: Kernels) -> list[NodeInfo]:
    """Every graph's entry and kernels as nodes, in stamp order, with stable keys, module paths and source lines."""
    seen: Counter[tuple[str, str]] = Counter()
    out: list[NodeInfo] = []

    def add(module: str, target: str, name: str, source: str) -> None:
        occurrence = seen[(module, target)]
        seen[(module, target)] += 1
        out.append(NodeInfo(node_key(KERNEL_OP, module, target, occurrence), name, KERNEL_OP, target, module, source))

    entries = entry_modules(kernels.order, [i.owner for i in kernels.instances])
    used = set(kernels.order)
    number = 0
    for index, instance in enumerate(kernels.instances):
        instance.first = len(out)
        graph = instance.graph
        if index not in used or graph.compiled is None:
            # a call of the capture's earlier calls, before the model settled; or a graph Inductor handed back as it
            # was, with no wrapper to stamp, whose time is the next entry's
            continue
        number += 1
        pre = {node.name: node for node in instance.gm.graph.nodes}
        first_line = next((line for node in pre.values() if (line := source_line(node))), "")
        add(entries[index], ENTRY, f"graph call {number} entry", first_line)
        for site in graph.sites:
            origins = [
                pre[name]
                for post in graph.kernel_to_post.get(site.handle, [])
                for name in graph.post_to_pre.get(post, [])
                if name in pre
            ]
            modules = [str(node.meta.get(MODULE_PATH_META, "")) for node in origins]
            module = kernel_module(modules)
            inside = [node for node, path in zip(origins, modules, strict=True) if _within(path, module)]
            fused = list(dict.fromkeys(node.name for node in origins))
            short = site.callee.removeprefix("torch.ops.")
            name = f"{short} ({', '.join(fused)})" if fused else short
            add(module, kernel_kind(site.callee), name, next((line for n in inside if (line := source_line(n))), ""))
    return out


def entry_modules(order: Sequence[int], owners: Sequence[str]) -> list[str]:
    """The module of each graph call's entry (``order``: the instance of each call of a pass, ``owners``: each
    instance's module). The time between two graphs runs in the frames that left the first and entered the
    second: where one module holds the other, a graph break lies in the inner one, whose code runs on after it (a
    break inside ``mlp`` makes its block's code resume after it: that time is ``mlp``'s); two modules side by side
    (one block, then the next) are left and entered by the code of the module that holds both, whose it is. The
    first call's entry is the root's: it times the way into the compiled model from the start of the forward,
    whichever frame makes that call. A graph called again from the same place keeps its first call's."""
    out = list(owners)
    seen: set[int] = set()
    for k, index in enumerate(order):
        if index in seen:
            continue
        seen.add(index)
        before, now = (owners[order[k - 1]], owners[index]) if k else ("", "")
        out[index] = before if _within(before, now) else now if _within(now, before) else _common(before, now)
    return out


def _common(a: str, b: str) -> str:
    """The deepest module that holds both ``a`` and ``b``."""
    shared: list[str] = []
    for x, y in zip(a.split("."), b.split("."), strict=False):
        if x != y:
            break
        shared.append(x)
    return ".".join(shared)


def _within(path: str, module: str) -> bool:
    return not module or path == module or path.startswith(module + ".")


def described(kernels: Kernels) -> Capture:
    """The capture record: Inductor, how many graphs (and so graph breaks), the compile's time, and the options the
    profile turned off."""
    calls = len(kernels.order)
    graphs = len(kernels.graphs)
    breaks = f" ({kernels.breaks} graph break{'s' if kernels.breaks != 1 else ''})" if kernels.breaks else ""
    compiled = (
        f"compiled in {kernels.compile_s:.1f} s"
        if kernels.compiles
        else "compiled by an earlier profile of this model in this process"
    )
    if kernels.compiles > graphs:  # compiled again as it settled (a cache filled on the first call)
        compiled += f" ({kernels.compiles - graphs} recompiled as the model settled)"
    off = f"; {' and '.join(kernels.off)} off while profiling" if kernels.off else ""
    kernel_calls = sum(i.target != ENTRY for i in kernels.infos)
    return Capture(
        method="inductor",
        graphs=calls,
        detail=(
            f"torch.compile (Inductor): {kernel_calls} kernel calls in {calls} graph call{'s' if calls != 1 else ''}"
            f"{breaks} of {graphs} compiled graph{'s' if graphs != 1 else ''}, {compiled}{off}"
        ),
    )


@contextlib.contextmanager
def passes(kernels: Kernels, *, timed: bool) -> Iterator[None]:
    """Run passes of the compiled module: stamped (``timed``) or plain; a recompilation is an error."""
    kernels.timed = timed
    try:
        with dynamo._dynamo_limits(error_on_recompile=True), _running(kernels):
            yield
    except torch._dynamo.exc.RecompileError as exc:
        raise ProfileError(
            f"torch.compile would recompile {kernels.name} for this pass: {' '.join(str(exc).split())}\n"
            "  Fix: profile with inputs like those of the first call (shapes, dtypes, Python values) under the "
            "same grad mode and module mode."
        ) from exc
    finally:
        kernels.timed = False
