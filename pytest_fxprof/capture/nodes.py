"""Each node's identity: its module path, its target's name, its source line and its stable key.

Owns ``describe_nodes``, which names every node that does work across a capture's graphs, ``module_classes``,
which names the class of each module that holds one, and the reading of
module paths in every spelling a capture uses (``layer1.0.conv1``, dynamo's ``L['self'].layer1[0].conv1`` and
``L__self___layer1_0_conv1``). A node's key (op, module path, target and its occurrence among nodes with the
same three) does not shift when an op is inserted elsewhere in the graph.

Must not import pytest.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import torch
import torch.fx

from pytest_fxprof.capture.sources import source_line
from pytest_fxprof.records.measurement import FORWARD, NodeInfo, node_key

GUARD_META = "fxprof_guard"
"""``node.meta`` key a capture sets on the nodes that check its inputs rather than compute (the guards a tracer's
``concrete_args`` add): they run, but are not timed nor named as the model's nodes."""


DIRECTION_META = "fxprof_direction"
"""``node.meta`` key a training step's capture sets on each node: ``forward``, ``backward`` or ``optimizer``."""
FORWARD_META = "fxprof_forward"
"""``node.meta`` key that names, on a backward node, the forward node it differentiates."""
TARGET_META = "fxprof_target"
"""``node.meta`` key that names a node's target where the callable's own name would not say what it does."""


def describe_nodes(graphs: Sequence[torch.fx.GraphModule]) -> list[tuple[torch.fx.Node, NodeInfo]]:
    """Every node that does work, across ``graphs`` in order, with its stable identity (guards left out)."""
    seen: Counter[tuple[str, str, str, str]] = Counter()
    out = []
    for gm in graphs:
        for node in gm.graph.nodes:
            if node.op in ("placeholder", "output") or node.meta.get(GUARD_META):
                continue
            op, module = node.op, _module_path(node)
            target = str(node.meta.get(TARGET_META) or _target_name(gm, node))
            direction = str(node.meta.get(DIRECTION_META, FORWARD))
            occurrence = seen[(direction, op, module, target)]
            seen[(direction, op, module, target)] += 1
            key = node_key(op, module, target, occurrence, direction)
            forward = str(node.meta.get(FORWARD_META, ""))
            info = NodeInfo(key, node.name, op, target, module, source_line(node), direction, forward)
            out.append((node, info))
    return out


def module_classes(module: torch.nn.Module, infos: Sequence[NodeInfo]) -> tuple[tuple[str, str], ...]:
    """``(path, class name)`` of each module of ``module`` that holds a node of ``infos`` and of each module above
    it, sorted by path: what ``Capture.classes`` records. A path the module does not have (a capture's own
    naming) is left out."""
    wanted: set[str] = set()
    for info in infos:
        parts = info.module.split(".") if info.module else []
        wanted.update(".".join(parts[:d]) for d in range(1, len(parts) + 1))
    if not wanted:
        return ()
    found = {path: type(sub).__name__ for path, sub in module.named_modules(remove_duplicate=False) if path in wanted}
    return tuple(sorted(found.items()))


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
