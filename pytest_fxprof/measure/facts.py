"""What each node does, seen in untimed passes: its floating-point operations, its output's shape and layout, the
bytes of new memory it keeps, the nodes it reads, its train/eval mode, whether its graph returns it, and the page
faults it takes.

Owns the facts that the hints and the views need beside a node's time. Counted under torch's flop counter
in one extra pass of the compiled engine, whose "clock" is the counter's running total.

Must not import pytest.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.utils._pytree import tree_flatten

from pytest_fxprof.capture.graphs import Captured, Runner, prepared_inputs, run_pass
from pytest_fxprof.measure.engine import ClockTimer, CompiledEngine
from pytest_fxprof.records.measurement import NodeInfo, median_int


@dataclass
class Seen:
    """What the untimed counting pass saw of each node: its floating-point operations, output and layout, and the
    bytes of new memory its outputs hold."""

    flops: list[int]
    shapes: list[str]
    layouts: list[str]
    allocated: list[int]


def count_flops(
    module: torch.nn.Module,
    captured: Captured,
    nodes: Sequence[torch.fx.Node],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    infos: Sequence[NodeInfo] = (),
    ran_before: bool = False,
) -> Seen:
    """Floating-point operations per node, in one pass of the graphs under torch's flop counter, and the
    shape and layout of what each node made.

    The compiled engine runs the pass with the counter's running total as its clock, so a node's count
    is the difference of two readings, and the graphs run as their own generated code (an Interpreter
    would hand nodes immutable argument lists, which some models mutate).
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    shapes, layouts, allocated = [""] * len(nodes), [""] * len(nodes), [0] * len(nodes)
    # memory a node may hand on without allocating it: the module's own tensors, the graph call's inputs and what the
    # nodes it reads made (all alive while it runs, so no freed address can stand for them)
    owned = {storage_key(t) for t in (*module.parameters(), *module.buffers())}
    index = {node: k for k, node in enumerate(nodes)}
    reads = [[index[n] for n in node.all_input_nodes if n in index] for node in nodes]
    made: dict[int, set[tuple[str, int]]] = {}
    handed: list[set[tuple[str, int]]] = [set()]

    def flops_so_far() -> int:
        return int(counter.get_total_flops())

    def observe(k: int, value: Any) -> None:
        shapes[k], layouts[k] = shape_of(value), layout_of(value)
        aliased = owned | handed[-1] | set().union(*(made.get(j, set()) for j in reads[k]))
        allocated[k], made[k] = new_bytes(value, aliased)

    engine = CompiledEngine(captured.graphs, nodes, ClockTimer(flops_so_far), observe)

    def counted(runner: Runner) -> Runner:
        def run(*inputs: Any) -> Any:
            handed.append({storage_key(t) for t in tree_flatten(list(inputs))[0] if isinstance(t, torch.Tensor)})
            try:
                with counter:  # entered per graph call: dynamo runs the Python between graphs outside it
                    return runner(*inputs)
            finally:
                handed.pop()

        return run

    engine.begin_pass()
    runners = [counted(r) for r in engine.runners()]
    run_pass(module, captured, runners, prepared_inputs(captured, args, kwargs), nodes=infos, ran_before=ran_before)
    return Seen(engine.end_pass().node_ns, shapes, layouts, allocated)


def storage_key(tensor: torch.Tensor) -> tuple[str, int]:
    """Where a tensor's memory lies: its device and its storage's address (0 where it has none to read)."""
    try:
        return (str(tensor.device), int(tensor.untyped_storage().data_ptr()))
    except (RuntimeError, NotImplementedError):  # subclasses and tensors without storage
        return (str(tensor.device), 0)


def new_bytes(value: Any, aliased: set[tuple[str, int]]) -> tuple[int, set[tuple[str, int]]]:
    """The bytes of memory ``value``'s tensors hold beyond ``aliased`` (storages the node was handed: views of them
    count nothing), each storage once, and every storage ``value`` holds: what the node that made ``value`` asked the
    allocator for and kept."""
    total = 0
    keys: set[tuple[str, int]] = set()
    for leaf in tree_flatten(value)[0]:
        if not isinstance(leaf, torch.Tensor) or leaf.layout != torch.strided:
            continue
        key = storage_key(leaf)
        if key[1] == 0 or key in keys:
            continue
        keys.add(key)
        if key not in aliased:
            with contextlib.suppress(RuntimeError, NotImplementedError):
                total += int(leaf.untyped_storage().nbytes())
    return total, keys


FAULT_PASSES = 1
"""Untimed passes whose page faults are read per node, and plain calls whose faults are read per submodule: in a
process's steady state a call takes the same faults call after call (the allocator's state repeats), so one of each
says which state it is in, at the cost of one call."""


SHAPES_SHOWN = 4
"""Outputs described per node; a node that returns more is described as the first ones and a count."""


def shape_of(value: Any) -> str:
    """A node's output as text: ``float32[1, 64, 56, 56]``, several in parentheses, empty for no tensor."""
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}[{', '.join(str(d) for d in value.shape)}]"
    if isinstance(value, list | tuple):
        parts = [shape_of(v) for v in value]
        parts = [p for p in parts if p]
        if not parts:
            return ""
        more = f", ... {len(parts) - SHAPES_SHOWN} more" if len(parts) > SHAPES_SHOWN else ""
        return f"({', '.join(parts[:SHAPES_SHOWN])}{more})"
    return ""


def layout_of(value: Any) -> str:
    """The memory layout of a node's (first) output tensor: contiguous, channels_last or strided."""
    if isinstance(value, list | tuple):
        return next((lay for lay in (layout_of(v) for v in value) if lay), "")
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        return ""
    try:
        if value.is_contiguous():
            return "contiguous"
        formats = {4: torch.channels_last, 5: torch.channels_last_3d}
        if value.dim() in formats and value.is_contiguous(memory_format=formats[value.dim()]):
            return "channels_last"
    except RuntimeError:  # tensors that cannot say (some subclasses)
        return ""
    return "strided"


def graph_facts(
    graphs: Sequence[torch.fx.GraphModule], nodes: Sequence[torch.fx.Node]
) -> list[tuple[tuple[int, ...], bool | None, bool]]:
    """Per node: the positions of the timed nodes it takes outputs of, the training flag that applies to it
    (its module's mode, or a batch norm's ``training`` argument), and whether its graph returns its output."""
    index = {node: k for k, node in enumerate(nodes)}
    owner = {node: gm for gm in graphs for node in gm.graph.nodes}
    out = []
    for node in nodes:
        inputs = tuple(sorted({index[n] for n in node.all_input_nodes if n in index}))
        returned = any(user.op == "output" for user in node.users)
        out.append((inputs, _training(owner[node], node), returned))
    return out


def _training(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool | None:
    if node.op == "call_module":
        return bool(gm.get_submodule(str(node.target)).training)
    name = str(getattr(node.target, "__name__", node.target))
    if "batch_norm" not in name:
        return None
    if "no_training" in name:  # aten._native_batch_norm_legit_no_training
        return False
    flag = node.kwargs.get("training", node.args[5] if len(node.args) > 5 else None)
    return flag if isinstance(flag, bool) else None


def count_faults(
    captured: Captured,
    nodes: Sequence[torch.fx.Node],
    run: Callable[[Sequence[Runner]], object],
    faults: Callable[[], int],
    passes: int = FAULT_PASSES,
) -> list[int]:
    """Each node's minor page faults: ``passes`` untimed passes of the graphs (``run`` runs one with the runners it
    is given) whose clock is the thread's fault counter, so that a node's count is the faults taken from its stamp
    to the next, where the memory it asks for is taken and what it frees is handed back; the median per node."""
    engine = CompiledEngine(captured.graphs, nodes, ClockTimer(faults))
    per_pass: list[list[int]] = []
    for _ in range(passes):
        engine.begin_pass()
        run(engine.runners())
        per_pass.append(engine.end_pass().node_ns)
    return [median_int(list(column)) for column in zip(*per_pass, strict=True)] if per_pass else []


def module_faults(
    module: torch.nn.Module,
    plain_call: Callable[[], Callable[[], Any]],
    after: Callable[[], None],
    faults: Callable[[], int],
    passes: int = FAULT_PASSES,
) -> dict[str, int]:
    """Each submodule's minor page faults in the plain call as the user makes it (the root's is ""): ``passes``
    calls (``plain_call`` makes one's inputs and returns it) with a hook before and after every submodule's forward
    that reads the thread's fault counter, the median per submodule over the calls, a submodule called several
    times in a call counting each time. The graphs free each value at its last use, eager code where its last
    reference dies, so where a change's cost is the allocator's, only the call as the user makes it pays it, and
    this says in which module. The hooks are removed before this returns, whatever happens."""
    names = {id(m): name for name, m in module.named_modules(remove_duplicate=False)}
    per_call: list[dict[str, int]] = []
    started: list[int] = []
    taken: dict[str, int] = {}

    def before(m: torch.nn.Module, _args: Any) -> None:
        started.append(faults())

    def done(m: torch.nn.Module, _args: Any, _out: Any) -> None:
        if started:
            name = names.get(id(m), "")
            taken[name] = taken.get(name, 0) + faults() - started.pop()

    handles = []
    try:
        for m in {id(m): m for _, m in module.named_modules(remove_duplicate=False)}.values():
            handles.append(m.register_forward_pre_hook(before))
            handles.append(m.register_forward_hook(done, always_call=True))
        for _ in range(passes):
            go = plain_call()
            started.clear()
            taken.clear()
            go()
            after()
            per_call.append(dict(taken))
    finally:
        for handle in handles:
            handle.remove()
    paths = sorted({p for call in per_call for p in call})
    return {p: median_int([call.get(p, 0) for call in per_call]) for p in paths}
