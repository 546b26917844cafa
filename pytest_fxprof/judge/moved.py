"""How two graphs' nodes pair (``align``), and lines that swapped places: what both gates do where the model's
operations moved but none came or went.

Two independent lines of a module swapped (``k = self.key(x)`` before ``q = self.query(x)``) run the same operations
in another order, and the one that now runs first meets colder caches: time moves between them, and the module that
holds both sums it. Judged alone, the operation that lost would read as a slowdown of code that did not change. So
where an operation moved past others (``scopes``: the smallest module holding it and the operations it moved past),
every node, module and pattern inside that module whose operations did not change is slower only where that module
(its aggregate, else the nearest ancestor judged, else the model's total) is slower too (``held_to_scopes``). New
operations are the change's and keep their band; a graph with nothing moved is untouched.

Code that changed trades time between its operations the same way: a head-by-head loop instead of one ``einsum``
adds matrix products and makes the scaling ``mul`` that follows them slower while the attention as a whole got
faster. Inside a module whose code changed and that the check found not slower, a node or an operator type's share
of it that is slower or too noisy to decide is that trade, not a regression: the module is what changed, and it
decides (``held_to_changes``).

Pure. Must not import torch, pytest or pandas.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from difflib import SequenceMatcher
from typing import TypeVar

from pytest_fxprof.judge.aggregates import fold, parent_path
from pytest_fxprof.records.measurement import BaselineEntry, NodeInfo, is_step
from pytest_fxprof.records.verdicts import AggregateVerdict, Judgement, Kind, NodeVerdict, TotalVerdict, Verdict


def align(
    baseline: Sequence[NodeInfo], current: Sequence[NodeInfo]
) -> tuple[list[tuple[int, int]], list[NodeInfo], list[NodeInfo]]:
    """Pair nodes by signature in graph order; return (pairs of indices, added, removed)."""
    a = [n.signature for n in baseline]
    b = [n.signature for n in current]
    pairs: list[tuple[int, int]] = []
    added: list[NodeInfo] = []
    removed: list[NodeInfo] = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            pairs.extend(zip(range(i1, i2), range(j1, j2), strict=True))
        else:
            removed.extend(baseline[i1:i2])
            added.extend(current[j1:j2])
    return pairs, added, removed


def node_times(entry: BaselineEntry, nodes: Sequence[NodeInfo]) -> tuple[float, ...]:
    """The median time over ``entry``'s runs of each of ``nodes`` (nodes of ``entry``): what an added or removed
    node puts at stake, for the lists that rank nodes by it."""
    index = {id(n): j for j, n in enumerate(entry.nodes)}
    out = []
    for n in nodes:
        j = index.get(id(n))
        times = [r.node_ns[j] for r in entry.runs if j is not None and j < len(r.node_ns)]
        out.append(float(statistics.median(times)) if times else 0.0)
    return tuple(out)


def _common(a: str, b: str) -> str:
    """The deepest module path that holds both ``a`` and ``b`` ("" for the whole model)."""
    out = []
    for x, y in zip(a.split("."), b.split("."), strict=False):
        if x != y:
            break
        out.append(x)
    return ".".join(out)


def scopes(old: Sequence[NodeInfo], new: Sequence[NodeInfo], pairs: Sequence[tuple[int, int]]) -> set[tuple[str, str]]:
    """Where operations moved: per node only one side holds whose operation the other side holds unmatched too (the
    same operation in the same module, moved), the module holding it and every matched node it moved past (those on
    the other side of it in one graph than in the other), with its direction. None where it moved past nothing."""
    where_old = dict(pairs)
    matched_old = sorted(where_old)
    matched_new = set(where_old.values())
    only_old = [i for i in range(len(old)) if i not in where_old]
    only_new = [j for j in range(len(new)) if j not in matched_new]
    step = is_step(old) or is_step(new)  # outside a training step the aggregates have no direction
    out: set[tuple[str, str]] = set()
    taken: set[int] = set()
    for i in only_old:
        twin = next((j for j in only_new if j not in taken and new[j].signature == old[i].signature), None)
        if twin is None:
            continue  # an operation removed, not moved
        taken.add(twin)
        passed = [k for k in matched_old if (k < i) != (where_old[k] < twin)]
        if not passed:
            continue
        scope = old[i].module
        for k in passed:
            scope = _common(scope, old[k].module)
        out.add((scope, old[i].direction if step else ""))
    return out


def _inside(path: str, scope: str) -> bool:
    return not scope or path == scope or path.startswith(scope + ".")


J = TypeVar("J", NodeVerdict, AggregateVerdict)


def _held(item: J, scope: str, holder: str) -> J:
    why = (
        f"; but lines inside {scope or 'the model'} only swapped places (no operation added or removed there) and "
        f"{holder} is not slower: time moved between the lines, no regression"
    )
    judgement: Judgement = replace(item.judgement, verdict=Verdict.OK, reason=item.judgement.reason + why, replaced="")
    return replace(item, judgement=judgement)


def held_to_scopes(
    moved: set[tuple[str, str]],
    nodes: Sequence[NodeVerdict],
    aggregates: Sequence[AggregateVerdict],
    total: TotalVerdict | None,
) -> tuple[tuple[NodeVerdict, ...], tuple[AggregateVerdict, ...]]:
    """``nodes`` and ``aggregates`` with every slower node, module or pattern whose code did not change and that lies
    inside a scope of ``moved`` held to that scope: within its band unless the scope stands slower (``scopes``)."""
    if not moved:
        return tuple(nodes), tuple(aggregates)
    judged = {(a.where, a.direction): a for a in aggregates if a.kind in (Kind.MODULE, Kind.PATTERN)}

    def stands(scope: str, direction: str, *, folded: bool) -> tuple[bool, str]:
        """Whether the module ``scope`` (its pattern first for a pattern's item; else what judges it: its nearest
        ancestor judged, or the model's total) is slower, and what it is called."""
        for start in (fold(scope), scope) if folded else (scope,):
            path = start
            while path and (path, direction) not in judged:
                path = parent_path(path)
            if path:
                a = judged[(path, direction)]
                return a.verdict is Verdict.SLOWER, f"{a.kind.value} {a.name}"
        return total is not None and total.verdict is Verdict.SLOWER, "the model's total"

    def holder(path: str, direction: str, *, folded: bool, node: bool) -> tuple[str, str] | None:
        """A scope that holds ``path`` (a node's module, holding it too where ``node``) and is not slower, and the name
        of what judged it; None where none does."""
        for scope, d in sorted(moved):
            where = fold(scope) if folded else scope
            if d == direction and _inside(path, where) and (node or path != where):
                slower, name = stands(scope, d, folded=folded)
                if not slower:
                    return where, name
        return None

    step = any(d for _, d in moved)
    out_nodes = []
    for v in nodes:
        held = (
            holder(v.node.module, v.node.direction if step else "", folded=False, node=True)
            if v.verdict is Verdict.SLOWER
            else None
        )
        out_nodes.append(_held(v, *held) if held is not None else v)
    out_aggregates = []
    for a in aggregates:
        held = None
        if a.verdict is Verdict.SLOWER and a.kind in (Kind.MODULE, Kind.PATTERN) and not a.changed:
            held = holder(a.where, a.direction, folded=a.kind is Kind.PATTERN, node=False)
        out_aggregates.append(_held(a, *held) if held is not None else a)
    return tuple(out_nodes), tuple(out_aggregates)


DECIDED_NOT_SLOWER = (Verdict.OK, Verdict.FASTER)
"""The verdicts of a changed module that speak for what it holds (``held_to_changes``): found within its band or
faster, not merely not found slower."""


def held_to_changes(
    nodes: Sequence[NodeVerdict], aggregates: Sequence[AggregateVerdict]
) -> tuple[tuple[NodeVerdict, ...], tuple[AggregateVerdict, ...]]:
    """``nodes`` and ``aggregates`` with every node and operator type that is slower or too noisy to decide held
    within its band where it lies inside modules whose code changed and that were found not slower
    (``DECIDED_NOT_SLOWER``): each node's place is the deepest such module holding it; an operator type is held where
    the nodes it has outside those places are, together, within its band (see the module's docstring)."""
    changed = {(a.where, a.direction): a for a in aggregates if a.kind is Kind.MODULE and a.changed}
    if not changed:
        return tuple(nodes), tuple(aggregates)
    step = any(d for _, d in changed)  # outside a training step the aggregates have no direction

    def place(node: NodeInfo) -> AggregateVerdict | None:
        """The deepest module holding ``node`` whose code changed, where it was found not slower; else None."""
        path, direction = node.module, node.direction if step else ""
        while True:
            if (path, direction) in changed:
                found = changed[(path, direction)]
                return found if found.verdict in DECIDED_NOT_SLOWER else None
            if not path:
                return None
            path = parent_path(path)

    def held(j: Judgement, holder: AggregateVerdict) -> Judgement:
        why = (
            f"; but it lies inside {holder.kind.value} {holder.name}, whose code changed and which is "
            f"{'faster' if holder.verdict is Verdict.FASTER else 'not slower'} (x{holder.ratio:.3f}): the change moved "
            "time between its operations, no regression"
        )
        return replace(j, verdict=Verdict.OK, reason=j.reason + why, replaced="")

    open_verdicts = (Verdict.SLOWER, Verdict.NOISY)
    out_nodes = []
    by_key = {v.node.key: v for v in nodes}
    for v in nodes:
        holder = place(v.node) if v.verdict in open_verdicts else None
        out_nodes.append(replace(v, judgement=held(v.judgement, holder)) if holder is not None else v)
    out_aggregates = []
    for a in aggregates:
        holder = None
        if a.kind is Kind.OP and a.verdict in open_verdicts:
            holder = _op_holder(a, by_key, place)
        out_aggregates.append(replace(a, judgement=held(a.judgement, holder)) if holder is not None else a)
    return tuple(out_nodes), tuple(out_aggregates)


def _op_holder(
    a: AggregateVerdict, by_key: dict[str, NodeVerdict], place: Callable[[NodeInfo], AggregateVerdict | None]
) -> AggregateVerdict | None:
    """The changed module that holds most of operator type ``a``'s time and was found not slower, where every node of
    ``a`` that came or went lies in such a module and its other nodes are, together, within ``a``'s band; else None."""
    if any(place(n) is None for n in (*a.added, *a.removed)):
        return None
    weight: dict[str, float] = {}
    holders: dict[str, AggregateVerdict] = {}
    outside_base = outside_now = 0.0
    for m in a.members:
        v = by_key.get(m.key)
        if v is None:
            return None
        h = place(m)
        if h is None:
            outside_base += v.baseline_ns
            outside_now += v.baseline_ns * v.ratio
            continue
        holders[h.where] = h
        weight[h.where] = weight.get(h.where, 0.0) + v.baseline_ns
    if not holders or (outside_base and outside_now > outside_base * (1.0 + a.band)):
        return None
    return holders[max(weight, key=lambda w: weight[w])]
