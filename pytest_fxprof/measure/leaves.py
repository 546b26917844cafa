"""Submodules timed whole in a training step: their nodes reported as one node per direction.

A training step's capture (AOTAutograd) has no submodule it could keep as one call: every module is traced
to aten ops. ``merge_leaves`` gives ``leaf_modules=`` its meaning there: the nodes of each named submodule
(a path, or every submodule of a class) become one ``call_module`` node per direction, whose time in each
pass is the sum of theirs.

Must not import pytest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from pytest_fxprof.records.measurement import NodeInfo, NodeStats, iqr_int, median_int, node_key

if TYPE_CHECKING:
    import torch

    from pytest_fxprof.capture.graphs import LeafSpec


def leaf_paths(module: torch.nn.Module, leaf_modules: Sequence[LeafSpec]) -> list[str]:
    """The paths ``leaf_modules`` names (a class: each submodule of it), outermost only."""
    named = dict(module.named_modules())
    paths = set()
    for spec in leaf_modules:
        if isinstance(spec, str):
            paths.add(spec)
        else:
            paths.update(path for path, m in named.items() if path and isinstance(m, spec))
    return sorted(p for p in paths if not any(p.startswith(q + ".") for q in paths))


def merge_leaves(
    nodes: Sequence[NodeStats], module: torch.nn.Module, leaf_modules: Sequence[LeafSpec]
) -> list[NodeStats]:
    """``nodes`` with those of each leaf submodule merged into one node per direction, where its first was."""
    paths = leaf_paths(module, leaf_modules)
    if not paths:
        return list(nodes)
    named = dict(module.named_modules())

    def leaf_of(n: NodeStats) -> str | None:
        return next((p for p in paths if n.module == p or n.module.startswith(p + ".")), None)

    groups: dict[tuple[str, str], list[int]] = {}
    order: list[tuple[str, str] | int] = []
    for k, n in enumerate(nodes):
        leaf = leaf_of(n)
        if leaf is None:
            order.append(k)
            continue
        group = (leaf, n.info.direction)
        if group not in groups:
            groups[group] = []
            order.append(group)
        groups[group].append(k)
    position = {}
    for new, item in enumerate(order):
        for k in groups[item] if isinstance(item, tuple) else [item]:
            position[k] = new
    busy = sum(n.median_ns for n in nodes) or 1
    out = []
    for new, item in enumerate(order):
        members = [nodes[k] for k in groups[item]] if isinstance(item, tuple) else [nodes[item]]
        inputs = tuple(sorted({position[i] for n in members for i in n.inputs} - {new}))
        if not isinstance(item, tuple):
            out.append(replace(members[0], inputs=inputs))
            continue
        path, direction = item
        target = type(named[path]).__name__
        info = NodeInfo(
            node_key("call_module", path, target, 0, direction),
            f"{path.replace('.', '_')}_{direction}",
            "call_module",
            target,
            path,
            members[0].info.source,
            direction,
        )
        passes = min(len(n.samples_ns) for n in members)
        samples = tuple(sum(n.samples_ns[i] for n in members) for i in range(passes))
        counted = [n.flops for n in members if n.flops is not None]
        median = median_int(samples) if samples else sum(n.median_ns for n in members)
        out.append(
            NodeStats(
                info=info,
                median_ns=median,
                spread_ns=iqr_int(samples) if samples else 0,
                share=median / busy,
                samples_ns=samples,
                flops=sum(counted) if len(counted) == len(members) else None,
                allocated=_summed([n.allocated for n in members]),
                faults=_summed([n.faults for n in members]),
                shape=members[-1].shape,
                layout=members[-1].layout,
                inputs=inputs,
                returned=any(n.returned for n in members),
            )
        )
    return out


def _summed(values: list[int | None]) -> int | None:
    """The sum of the members' figures, None where any member has none (not read)."""
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)
