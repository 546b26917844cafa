"""Aggregates: which nodes both gates sum and judge together, and how strictly each level is tested.

Owns ``plan``, which lays out the aggregates of a comparison over the nodes of both sides, so that a changed graph
is judged by module: each module-like aggregate holds its matched nodes and the nodes only one side holds (charged
to the module they sit in). An operator type holds the nodes both sides hold, no more: a change that swaps one
operation for others (a ``linear`` for a ``matmul`` and an ``add``) moves time between operator types without
slowing anything, and its new nodes are judged in the module whose code changed. The aggregates:

- every operator type (all ``aten.linear.default``; per direction in a training step);
- every module subtree at every depth (``transformer``, ``transformer.h``, ``transformer.h.2.mlp``), and in a
  training step each direction whole (``<model> backward``);
- every *pattern*: a module path with its indices folded (``transformer.h.*.mlp``, ``encoder.layer.*.attention``)
  that has two or more instances. A change to a block's code slows every instance alike, and their sum has the
  power that one instance lacks;
- every module *class* with two or more instances (``LayerNorm``) that are not one pattern's instances, but for
  torch's containers (``Sequential``, ``ModuleList``), which have no code of their own.

An aggregate is kept where both sides hold it (a module only one side has is judged within its parent), where
it has two computing nodes or more on a side (``CALLS``), and, but for an operator type, where it is not the whole
graph. Aggregates with the same nodes are one: a module subtree over a pattern (``encoder`` for ``encoder.*``), but
the pattern over a container (``transformer.h.*`` of class ``Block`` for ``transformer.h``, a ``ModuleList`` of
blocks and nothing else: the blocks hold the code), a pattern over a class (``transformer.h.*.mlp`` of class
``MLP`` for the class ``MLP``), the deepest module of a chain that holds the same nodes; a class with the nodes of
an operator type (every ``Linear`` module, each one node) is that operator type.

Levels: the operator types are one, each depth is one (the module subtrees and patterns of that depth), the
classes are one. Each aggregate is tested at the base false-alarm rate (``Policy.spread_k`` deviations against a
baseline, ``PairedPolicy.confidence`` against a revision) where its level holds at most ``LEVEL_ITEMS`` of them,
and at ``LEVEL_ITEMS / m`` of it where the level holds ``m`` more (Bonferroni within the level). So a deep model,
whose every depth adds a level of aggregates, adds at most one level's worth of false alarms per depth, whatever
its width; and the levels a small model has are tested as before.

Must not import torch, pytest or pandas.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from pytest_fxprof.records.measurement import KERNEL_OP, NodeInfo, is_step
from pytest_fxprof.records.profile import ROOT
from pytest_fxprof.records.verdicts import AggregateVerdict, Judgement, Kind, operations_changed

LEVEL_ITEMS = 10
"""A level of at most this many aggregates is tested at the base false-alarm rate, as the gate always tested a
network's stages and blocks (ResNet's four stages, their eight blocks); a level of ``m`` more at ``LEVEL_ITEMS / m``
of it each, so that the level as a whole never gets more likely to cry wolf than ten items."""

_INDEX = re.compile(r"^\d+$")

CALLS = ("call_module", "call_function", "call_method", KERNEL_OP)
"""The nodes that compute, a compiled model's kernels among them. An aggregate needs two of them on a side: a module
of one computing node and its weights (``get_attr``, a few hundred nanoseconds) is that node, which fails a test
alone only if it is large enough, and would otherwise fail it as a module however small."""

_KIND_ORDER = {Kind.OP: 0, Kind.MODULE: 1, Kind.PATTERN: 2, Kind.CLASS: 3}
_PRIORITY = (Kind.MODULE, Kind.PATTERN, Kind.CLASS)
"""Which of several aggregates with the same nodes is kept: a module's subtree names the code most exactly."""


def fold(path: str) -> str:
    """``path`` with every index folded to ``*``: ``transformer.h.*.mlp`` of ``transformer.h.2.mlp``."""
    return ".".join("*" if _INDEX.match(part) else part for part in path.split("."))


def parent_path(path: str) -> str:
    """The module path (or pattern) one level up: ``transformer.h.*`` of ``transformer.h.*.mlp``; "" at the top."""
    return path.rpartition(".")[0]


def depth_of(path: str) -> int:
    """How deep a module path or pattern lies: 1 for ``layer3``, 2 for ``layer3.0``; 0 for the whole model."""
    return 0 if not path or path == ROOT else path.count(".") + 1


@dataclass(frozen=True)
class Group:
    """One aggregate of a comparison: its nodes on both sides and the level it is tested with.

    ``matched`` are positions in the comparison's node pairs; ``only_old`` and ``only_new`` positions in each side's
    nodes of the nodes the other side lacks. ``cls`` is the class of the module (or of every instance of the pattern,
    or the class gathered), ``instances`` a pattern's or class's module paths. ``tested`` is how many aggregates its
    ``family`` (level) holds."""

    kind: Kind
    path: str
    direction: str
    matched: tuple[int, ...]
    only_old: tuple[int, ...]
    only_new: tuple[int, ...]
    cls: str = ""
    instances: tuple[str, ...] = ()
    family: str = ""
    tested: int = 1

    def code_changed(self, old: Sequence[NodeInfo], new: Sequence[NodeInfo]) -> bool:
        """Whether the code under this module, pattern or class changed between ``old`` and ``new`` (each side's
        nodes): the operations only one side holds differ (the same operations in another order, or renamed, are
        no change). Never for an operator type, which says what kind of work, not whose code."""
        if self.kind is Kind.OP:
            return False
        return operations_changed((new[j] for j in self.only_new), (old[i] for i in self.only_old))

    @property
    def name(self) -> str:
        """The name every view shows: ``layer3.0``, ``layer3.0 backward`` in a training step."""
        return f"{self.path} {self.direction}" if self.direction else self.path

    def verdict(
        self,
        old: Sequence[NodeInfo],
        new: Sequence[NodeInfo],
        pairs: Sequence[tuple[int, int]],
        *,
        baseline_ns: float,
        current_ns: float,
        speed_factor: float,
        judgement: Judgement,
        divisor: float,
        gates: bool = True,
    ) -> AggregateVerdict:
        """This aggregate's verdict, its members and the nodes only one side holds named from the two sides' nodes
        (``old``, ``new``) and the comparison's node ``pairs``: what both gates return."""
        return AggregateVerdict(
            self.kind,
            self.name,
            tuple(old[pairs[k][0]] for k in self.matched),
            baseline_ns,
            current_ns,
            speed_factor,
            judgement,
            divisor,
            self.matched,
            cls=self.cls,
            instances=self.instances,
            added=tuple(new[j] for j in self.only_new),
            removed=tuple(old[i] for i in self.only_old),
            family=self.family,
            tested=self.tested,
            path=self.path,
            direction=self.direction,
            gates=gates,
        )

    @property
    def strictness(self) -> float:
        """The share of the base false-alarm rate it is tested at (1 for a level of ``LEVEL_ITEMS`` or fewer)."""
        return min(1.0, LEVEL_ITEMS / self.tested) if self.tested else 1.0


@dataclass(frozen=True)
class _Key:
    kind: Kind
    path: str
    direction: str


def memberships(n: NodeInfo, step: bool, classes: Mapping[str, str]) -> list[tuple[_Key, str]]:
    """The aggregates node ``n`` belongs to, each with the module instance that puts it there ("" for an operator
    type): its operator type, each module subtree above it, each pattern those fold to, each class of a module that
    holds it (the node's own module for a ``call_module`` node: it is that module's whole time); in a training step
    (``step``) each in the node's direction, and the direction whole."""
    direction = n.direction if step else ""
    out: list[tuple[_Key, str]] = []
    if n.op in CALLS:
        out.append((_Key(Kind.OP, n.target, direction), ""))
    parts = n.module.split(".") if n.module else []
    # a call_module node's own path is the node itself, not a subtree
    depth = len(parts) - 1 if n.op == "call_module" else len(parts)
    seen_classes: set[str] = set()
    for d in range(1, len(parts) + 1):
        path = ".".join(parts[:d])
        if d <= depth:
            out.append((_Key(Kind.MODULE, path, direction), path))
            folded = fold(path)
            if folded != path:
                out.append((_Key(Kind.PATTERN, folded, direction), path))
        cls = classes.get(path, "")
        if cls and cls not in seen_classes:  # a module nested in one of its own class counts once
            seen_classes.add(cls)
            out.append((_Key(Kind.CLASS, cls, direction), path))
    if step:
        out.append((_Key(Kind.MODULE, ROOT, direction), ""))
    return out


def _side(nodes: Sequence[NodeInfo], step: bool, classes: Mapping[str, str]) -> dict[_Key, tuple[list[int], set[str]]]:
    out: dict[_Key, tuple[list[int], set[str]]] = defaultdict(lambda: ([], set()))
    for i, n in enumerate(nodes):
        for key, instance in memberships(n, step, classes):
            members, instances = out[key]
            members.append(i)
            if instance:
                instances.add(instance)
    return out


def plan(
    old: Sequence[NodeInfo],
    new: Sequence[NodeInfo],
    pairs: Sequence[tuple[int, int]],
    old_classes: Mapping[str, str] | None = None,
    new_classes: Mapping[str, str] | None = None,
) -> list[Group]:
    """The aggregates of a comparison of ``old`` with ``new`` nodes, ``pairs`` the matched positions (old, new):
    operator types first, then module subtrees, patterns and classes, each sorted by name (see the module's rules).
    ``old_classes`` and ``new_classes`` map each side's module paths to class names (``Capture.classes``)."""
    old_classes, new_classes = old_classes or {}, new_classes or {}
    step = is_step(old) or is_step(new)
    before, after = _side(old, step, old_classes), _side(new, step, new_classes)
    pair_of = {i: k for k, (i, _) in enumerate(pairs)}
    found: list[Group] = []
    for key in sorted(before.keys() & after.keys(), key=lambda k: (_KIND_ORDER[k.kind], k.path, k.direction)):
        old_idx, old_instances = before[key]
        new_idx, new_instances = after[key]
        whole = len(old_idx) == len(old) and len(new_idx) == len(new)
        calls = max(sum(old[i].op in CALLS for i in old_idx), sum(new[j].op in CALLS for j in new_idx))
        if calls < 2 or (whole and key.kind is not Kind.OP):
            continue
        instances = old_instances | new_instances
        if key.kind in (Kind.PATTERN, Kind.CLASS) and len(instances) < 2:
            continue
        if key.kind is Kind.CLASS and key.path in CONTAINERS:  # no code of its own: its children's class says more
            continue
        olds, news = set(old_idx), set(new_idx)
        matched = tuple(sorted(k for i in olds if (k := pair_of.get(i)) is not None and pairs[k][1] in news))
        if key.kind is Kind.OP:  # an operator type compares the nodes both sides hold: see the module's rules
            if len(matched) < 2:
                continue
            found.append(Group(key.kind, key.path, key.direction, matched, (), ()))
            continue
        paired_old = {pairs[k][0] for k in matched}
        paired_new = {pairs[k][1] for k in matched}
        found.append(
            Group(
                kind=key.kind,
                path=key.path,
                direction=key.direction,
                matched=matched,
                only_old=tuple(i for i in old_idx if i not in paired_old),
                only_new=tuple(j for j in new_idx if j not in paired_new),
                cls=key.path if key.kind is Kind.CLASS else _class_of(key, instances, old_classes, new_classes),
                instances=tuple(sorted(instances)) if key.kind is not Kind.MODULE else (),
            )
        )
    return _levels(_merged(found))


def _class_of(key: _Key, instances: set[str], old: Mapping[str, str], new: Mapping[str, str]) -> str:
    """The class of a module, or of every instance of a pattern ("" where unknown or mixed)."""
    if key.kind is Kind.OP:
        return ""
    names = {new.get(p) or old.get(p, "") for p in (instances or {key.path})}
    return names.pop() if len(names) == 1 else ""


def _merged(groups: list[Group]) -> list[Group]:
    """Aggregates with the same nodes as one: a module subtree over a pattern over a class, the deepest of each (it
    names the code most exactly: ``backbone.body`` of a ``backbone`` that holds nothing else), named with a class
    where the kept one has none."""
    by_nodes: dict[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]], list[Group]] = defaultdict(list)
    out: list[Group] = []
    for g in groups:
        if g.kind is Kind.OP:
            out.append(g)
        else:
            by_nodes[(g.direction, g.matched, g.only_old, g.only_new)].append(g)
    ops = {(g.direction, g.matched, g.only_old, g.only_new) for g in out}
    for nodes, found in by_nodes.items():
        # a class whose every instance is one node of one operator type (Linear): the type names it
        same = [g for g in found if not (nodes in ops and g.kind is Kind.CLASS)]
        if not same:
            continue
        same.sort(key=_precedence)
        kept = same[0]
        cls = kept.cls or next((g.cls for g in same if g.cls and g.cls not in CONTAINERS), "")
        out.append(replace(kept, cls=cls))
    return sorted(out, key=lambda g: (_KIND_ORDER[g.kind], g.path, g.direction))


CONTAINERS = frozenset({"ModuleList", "ModuleDict", "Sequential", "ParameterList", "ParameterDict"})
"""torch's containers: a module of one of these has no code of its own but its children's, so where it holds the
same nodes as the pattern of its children (``transformer.h`` and ``transformer.h.*``), the pattern names them."""


def _precedence(g: Group) -> tuple[float, int]:
    """Which of several aggregates with the same nodes names them: a module subtree (a container after every other
    one, and after a pattern), then a pattern, then a class; of each kind, the deepest."""
    kind = float(_PRIORITY.index(g.kind))
    if g.kind is Kind.MODULE and g.cls in CONTAINERS:
        kind = _PRIORITY.index(Kind.PATTERN) + 0.5
    return kind, -depth_of(g.path)


def family_of(g: Group) -> str:
    """The level an aggregate is tested with: ``op``, ``depth N`` (module subtrees and patterns), ``class``."""
    if g.kind is Kind.OP:
        return "op"
    if g.kind is Kind.CLASS:
        return "class"
    return f"depth {depth_of(g.path)}"


def _levels(groups: list[Group]) -> list[Group]:
    counts: dict[str, int] = defaultdict(int)
    for g in groups:
        counts[family_of(g)] += 1
    return [replace(g, family=family_of(g), tested=counts[family_of(g)]) for g in groups]


def graph_groups(nodes: Sequence[NodeInfo], classes: Mapping[str, str] | None = None) -> list[Group]:
    """The aggregates of one graph (compared with itself): what a profile's nodes would be judged in."""
    return plan(nodes, nodes, [(i, i) for i in range(len(nodes))], classes, classes)
