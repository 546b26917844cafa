"""Capture by Inductor: a ``torch.compile``'d module (or one the plugin compiles) timed kernel by kernel.

The unit is what the compiled code runs: each generated kernel (C++ or Triton, often several fused operations) and
each extern call (a library matmul, an aten fallback). Owns ``wanted``, ``capture`` (the compile and the kernels as
nodes) and ``passes``; ``capture.wrapper`` reads and rewrites Inductor's wrapper, ``capture.compiled`` reads the
user's compiled module. The module is compiled again with the user's backend and options (their compiled module is
never called), under a backend that keeps each graph dynamo hands it, with provenance tracking: the dynamo nodes a
kernel's operations came from give its module, class and source line. Each graph's wrapper stamps the clock before
its first kernel and after every kernel, so a kernel's time is the gap between two stamps, its allocations included.
Dynamo caches compiled code per code object for the process's life: the backend is one object per configuration of
the user's (``_Backend``), each graph a ``_Slot`` handing its calls to the capture or pass running (``_ACTIVE``), so a
second profile of a class reuses the first's graphs. A recompilation during the passes is an error.

Must not import pytest.
"""

from __future__ import annotations

import contextlib
import json
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from pytest_fxprof.capture import dynamo
from pytest_fxprof.capture.compiled import eager_calls, inductor_settings, is_compiled, user_backend
from pytest_fxprof.capture.compiled import eager_module as eager_module  # noqa: PLC0414 - inductor.eager_module
from pytest_fxprof.capture.errors import CaptureError, ProfileError, one_line, quiet
from pytest_fxprof.capture.nodes import MODULE_PATH_META
from pytest_fxprof.capture.sources import source_line
from pytest_fxprof.capture.state import fresh_inputs
from pytest_fxprof.capture.wrapper import KernelSite as KernelSite  # noqa: PLC0414 - kept as inductor's names
from pytest_fxprof.capture.wrapper import instrumented_source as instrumented_source  # noqa: PLC0414
from pytest_fxprof.capture.wrapper import kernel_kind as kernel_kind  # noqa: PLC0414
from pytest_fxprof.capture.wrapper import kernel_sites as kernel_sites  # noqa: PLC0414
from pytest_fxprof.records.measurement import KERNEL_OP, Capture, NodeInfo, node_key

Stamp = Callable[[], Any]


def wanted(module: object, mode: str) -> bool:
    """Whether a forward of ``module`` is profiled kernel by kernel: ``capture="inductor"``, or ``auto`` handed a
    compiled module."""
    return mode == "inductor" or (mode == "auto" and is_compiled(module))


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
    """What the backend returns for one graph, cached by dynamo with it: at capture each call notes where it is called
    from (``Kernels.note``), in a timed pass it must be the call the capture saw (``Kernels.enter``)."""

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
    """fxprof's backend around one configuration of the user's, one object for the process's life (``_backend_for``)
    so that dynamo reuses what an earlier profile compiled. Each graph it compiles counts for the capture running."""

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
        self.graphs: list[_Graph] = []  # the graphs a pass calls, each once, in the order of their first call
        self.instances: list[_Instance] = []
        self.order: list[int] = []  # the instance of each graph call of a pass, in order
        self.keys: dict[tuple[Any, ...], int] = {}
        self.compiles, self.compile_s = 0, 0.0  # graphs compiled for this capture (none where reused), and seconds
        self.infos: list[NodeInfo] = []
        self.run = dynamo._DynamoRun(self.module)
        user, self.options, self.off = user_backend(module)
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


@contextlib.contextmanager
def _running(kernels: Kernels) -> Iterator[None]:
    """While the body runs, the compiled graphs hand their calls to ``kernels``, and a module compiled in place
    calls its own forward (which fxprof compiled)."""
    _ACTIVE.append(kernels)
    try:
        with eager_calls(kernels.module):
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
"""Calls of the compiled module at capture, at most, until one compiles nothing new (a model that fills a cache on
its first call compiles again on its second); the graphs are those of the last call."""


def capture(module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any], stamp: Stamp) -> Kernels:
    """Compile ``module`` with Inductor (its own backend and options where it is compiled already), call it until a
    call compiles nothing new (``SETTLE_CALLS``), and name every kernel of that call's compiled code as a node."""
    kernels = Kernels(module, stamp)
    kernels.compiled = torch.compile(kernels.module, backend=kernels.backend, **kernels.options)
    try:
        with quiet() as recorder, dynamo._dynamo_limits(), inductor_settings(), _adopting(), _running(kernels):
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


def kernel_module(modules: Sequence[str]) -> str:
    """The module a kernel belongs to, from the module path of each operation it fuses: the deepest module that
    holds more than half of them (the root, ``""``, where none does)."""
    held: Counter[str] = Counter()
    for path in modules:
        parts = path.split(".") if path else []
        for depth in range(1, len(parts) + 1):
            held[".".join(parts[:depth])] += 1
    majority = [path for path, n in held.items() if 2 * n > len(modules)]
    return max(majority, key=lambda p: p.count(".") + 1, default="")


def entry_modules(order: Sequence[int], owners: Sequence[str]) -> list[str]:
    """The module of each graph call's entry (``order``: the instance of each call of a pass, ``owners``: each
    instance's module): of two modules one holds, the inner one (where the graph break lies); of two side by side,
    the module that holds both. The first call's entry is the root's; a graph called again keeps its first call's."""
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
    calls, graphs = len(kernels.order), len(kernels.graphs)
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
