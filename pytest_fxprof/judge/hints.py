"""Hints: advice on where to look in a profile, never failures.

Owns the classification of nodes by the kind of work they do (``category``) and the rules that turn a
profile's nodes into ``Hint`` records: batch norms that could be folded into their convolution, time spent
in ops that do no matrix work, nodes whose achieved FLOP/s is far below their peers', and copies made only
to change a tensor's memory layout. Every threshold is a share of the model's time (the sum of node
medians) or a ratio to peers, plus ``MIN_NS`` so that sub-microsecond noise never makes a hint. Pure.

Must not import torch, pytest or pandas.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from pytest_fxprof.judge.noise import weighted_median
from pytest_fxprof.records.measurement import NodeStats
from pytest_fxprof.records.profile import Profile
from pytest_fxprof.records.units import fmt_ns, fmt_rate

MIN_NS = 1_000
"""A node faster than this (1 us) is never named, and a hint with less time at stake is never given: below it
a median is mostly the profiler's own per-node cost and timer noise."""

HINT_MIN_SHARE = 0.01
"""A hint is given only if its time at stake is at least 1 % of the model: less is not worth a look."""

MEMORY_NODE_SHARE = 0.10
"""One node that does no matrix work (pooling, elementwise, normalisation) taking a tenth of the model is out
of proportion: such a node reads and writes its tensor once, which costs little beside any matrix work."""

MEMORY_GROUP_SHARE = 0.30
"""All the nodes that do no matrix work taking, together, over 30 % of the model: an unfused eager model
commonly spends 10-20 % there; beyond 30 % fusion usually pays."""

LOW_FLOPS_FRACTION = 0.25
"""A node runs "far below" its peers when its FLOP/s is under a quarter of theirs. Healthy nodes of one kind
on one machine differ by up to about 2x with their shapes, and timing noise by far less; 4x means another
kernel path (depthwise or grouped convolution, a tiny-batch matrix product, an odd shape)."""

LOW_FLOPS_NODE_SHARE = 0.005
"""A node is named for a low FLOP rate only when it takes at least 0.5 % of the model."""

MIN_PEERS = 3
"""Peers needed (other nodes of the same category with counted FLOPs) before a node's rate is compared with
theirs: with fewer, the peers' rate is one or two other shapes, not a norm."""

NAMES_SHOWN = 3
"""Nodes named in a hint's message; the rest are counted (``... 4 more``)."""

KINDS = ("fusable-batchnorm", "memory-bound", "low-flops", "layout-copy")
"""Every hint kind, in the order that breaks ties in time at stake."""


class Category(StrEnum):
    """The kind of work a node does, from its op and target alone."""

    CONV = "conv"
    MATMUL = "matmul"
    ATTENTION = "attention"
    BATCHNORM = "batchnorm"
    NORM = "norm"
    POOL = "pool"
    ELEMENTWISE = "elementwise"
    COPY = "copy"
    VIEW = "view"
    OTHER = "other"


MEMORY_BOUND = frozenset({Category.POOL, Category.ELEMENTWISE, Category.BATCHNORM, Category.NORM})
"""Categories that do no matrix work: their time is moving memory."""

_MATMUL = frozenset({
    "linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "einsum",
    "bilinear", "tensordot", "inner", "outer", "chain_matmul", "multi_dot",
})  # fmt: skip
_NORM = frozenset({"normalize", "localresponsenorm", "crossmaplrn"})
_ELEMENTWISE = frozenset({
    # activations (functions and module classes, lower-cased)
    "relu", "relu6", "leaky_relu", "leakyrelu", "prelu", "rrelu", "gelu", "silu", "sigmoid", "tanh", "hardswish",
    "hardsigmoid", "hardtanh", "elu", "selu", "celu", "mish", "softplus", "softsign", "softshrink", "hardshrink",
    "tanhshrink", "logsigmoid", "glu", "threshold", "softmax", "log_softmax", "logsoftmax", "softmin", "dropout",
    "feature_dropout", "alpha_dropout", "alphadropout", "featurealphadropout", "native_dropout",
    # arithmetic, comparisons and math
    "add", "iadd", "sub", "isub", "rsub", "mul", "imul", "div", "idiv", "truediv", "itruediv", "floordiv",
    "ifloordiv", "true_divide", "floor_divide", "mod", "remainder", "fmod", "neg", "pos", "pow", "ipow", "exp",
    "exp2", "expm1", "log", "log1p", "log2", "log10", "sqrt", "rsqrt", "square", "abs", "clamp", "clamp_min",
    "clamp_max", "clip", "where", "maximum", "minimum", "addcmul", "addcdiv", "lerp", "sin", "cos", "tan", "erf",
    "erfc", "reciprocal", "sign", "floor", "ceil", "round", "trunc", "masked_fill", "eq", "ne", "lt", "gt", "le",
    "ge", "and", "or", "xor", "logical_and", "logical_or", "logical_not", "logical_xor", "bitwise_and",
    "bitwise_or", "bitwise_not",
    # reductions (one read of the input, no matrix work)
    "mean", "sum", "prod", "amax", "amin", "max", "min", "var", "std", "logsumexp", "cumsum", "cumprod",
})  # fmt: skip
_COPY = frozenset({"contiguous", "clone", "to_copy", "copy", "to"})
_VIEW = frozenset({
    "view", "reshape", "flatten", "unflatten", "permute", "transpose", "t", "squeeze", "unsqueeze", "expand",
    "expand_as", "view_as", "reshape_as", "narrow", "select", "slice", "getitem", "split", "split_with_sizes",
    "chunk", "unbind", "as_strided", "alias", "detach", "identity", "size", "getattr", "dim", "numel", "sym_size",
    "sym_numel", "sym_stride", "movedim", "swapaxes", "swapdims", "unsafe_view",
})  # fmt: skip
_LAYOUT_CHANGING = frozenset({"to", "to_copy"})
"""Copies that may only change dtype or device: they count as layout copies only when the layout changed."""

_RESHAPES = frozenset({"reshape", "flatten", "reshape_as"})
"""Views that copy when their input is not laid out for them (a strided or channels-last input)."""

_DIMS = re.compile(r"[123]d$")
_OPS_WITH_TARGETS = frozenset({"call_module", "call_function", "call_method"})


def base_name(op: str, target: str) -> str:
    """The operation's name without namespace, overload, in-place mark or rank: ``aten.relu_.default``,
    ``torch.nn.functional.relu`` and the module class ``ReLU`` all give ``relu``; ``Conv2d`` and
    ``torch.conv2d`` give ``conv``; ``aten._to_copy.default`` gives ``to_copy``."""
    if op == "call_module":
        name = target.rsplit(".", 1)[-1].lower()
        name = name.removeprefix("lazy")
    else:
        parts = target.split(".")
        name = parts[1] if parts[0] in ("aten", "prims") and len(parts) >= 2 else parts[-1]
        name = name.lower()
    return _DIMS.sub("", name.strip("_"))


def category(op: str, target: str) -> Category:
    """What kind of work a node of this op and target does (``Category.OTHER`` when it cannot tell)."""
    if op not in _OPS_WITH_TARGETS:
        return Category.OTHER  # placeholders, weights (get_attr) and outputs
    name = base_name(op, target)
    checks: tuple[tuple[Category, bool], ...] = (
        (Category.CONV, _is_conv(name)),
        (Category.ATTENTION, "attention" in name),
        (Category.MATMUL, name in _MATMUL or (op == "call_module" and name.endswith("linear"))),
        (Category.BATCHNORM, "batch_norm" in name or "batchnorm" in name),
        (Category.NORM, name.endswith("norm") or name in _NORM),
        (Category.POOL, "pool" in name),
        (Category.COPY, name in _COPY),
        (Category.VIEW, name in _VIEW),
        (Category.ELEMENTWISE, name in _ELEMENTWISE),
    )
    return next((cat for cat, hit in checks if hit), Category.OTHER)


def _is_conv(name: str) -> bool:
    if "backward" in name:
        return False
    return (name.startswith("conv") and not name.startswith("convert")) or "convolution" in name


@dataclass(frozen=True)
class Hint:
    """One piece of advice: what to look at, where, and how much time is at stake.

    ``kind`` is one of ``KINDS``; ``message`` one readable sentence (what, where, the time at stake, what to
    try); ``nodes`` the node names shown to people and ``keys`` their stable keys; ``time_ns`` what the hint
    could save at most, or what the flagged nodes take; ``share`` that time over the model's time.
    """

    kind: str
    message: str
    nodes: tuple[str, ...]
    keys: tuple[str, ...]
    time_ns: int
    share: float


@dataclass(frozen=True)
class _Graph:
    """The nodes of one profile with what the rules ask of them."""

    nodes: Sequence[NodeStats]
    categories: tuple[Category, ...]
    consumers: tuple[tuple[int, ...], ...]
    model_ns: int

    def data_inputs(self, k: int) -> list[int]:
        """Positions of the nodes whose outputs node ``k`` takes, weights (``get_attr``) left out."""
        return [i for i in self.nodes[k].inputs if self.nodes[i].op != "get_attr"]

    def named(self, k: int) -> bool:
        """Whether node ``k`` was measured long enough to be named in a hint."""
        return self.nodes[k].median_ns >= MIN_NS

    def pct(self, ns: int) -> str:
        """A time and its share of the model, as messages say them."""
        return f"{fmt_ns(ns)} ({ns / self.model_ns:.1%} of the model)"


def find_hints(nodes: Sequence[NodeStats]) -> tuple[Hint, ...]:
    """Every hint for a profile's nodes (in graph order, as ``Profile.nodes``), most time at stake first.

    Nodes with a median of 0 (not measured) are never named; a profile with no measured time has no hints.
    """
    graph = _graph(nodes)
    if graph.model_ns <= 0:
        return ()
    fusable = _fusable_batchnorm(graph)
    folded = {key for hint in fusable for key in hint.keys}
    found = [*fusable, *_memory_bound(graph, folded), *_low_flops(graph), *_layout_copies(graph)]
    floor = max(MIN_NS, HINT_MIN_SHARE * graph.model_ns)
    kept = [h for h in found if h.time_ns >= floor]
    return tuple(sorted(kept, key=lambda h: (-h.time_ns, KINDS.index(h.kind), h.keys)))


def profile_hints(profile: Profile) -> tuple[Hint, ...]:
    """The hints of a measured profile; none for an unmeasured one (one cold pass says little about where time
    goes)."""
    return find_hints(profile.nodes) if profile.measured else ()


def hint_lines(hints: Sequence[Hint]) -> list[str]:
    """Readable lines for the terminal, one per hint."""
    return [f"hint ({h.kind}): {h.message}" for h in hints]


def _graph(nodes: Sequence[NodeStats]) -> _Graph:
    consumers: list[list[int]] = [[] for _ in nodes]
    for k, n in enumerate(nodes):
        for i in n.inputs:
            if not 0 <= i < len(nodes) or i == k:
                raise ValueError(
                    f"node {n.name!r} (position {k}) lists input position {i}, but the profile has {len(nodes)} "
                    "nodes and a node cannot take its own output: pass all the nodes of one profile, in order "
                    "(ProfileResult.nodes)"
                )
            consumers[i].append(k)
    return _Graph(
        nodes=nodes,
        categories=tuple(category(n.op, n.target) for n in nodes),
        consumers=tuple(tuple(c) for c in consumers),
        model_ns=sum(max(n.median_ns, 0) for n in nodes),
    )


def _hint(graph: _Graph, kind: str, flagged: Sequence[int], time_ns: int, message: str) -> Hint:
    return Hint(
        kind=kind,
        message=message,
        nodes=tuple(graph.nodes[k].name for k in flagged),
        keys=tuple(graph.nodes[k].info.key for k in flagged),
        time_ns=time_ns,
        share=time_ns / graph.model_ns,
    )


def _names(items: Sequence[str]) -> str:
    """The first ``NAMES_SHOWN`` items and a count of the rest."""
    shown = ", ".join(items[:NAMES_SHOWN])
    more = len(items) - NAMES_SHOWN
    return f"{shown}, ... {more} more" if more > 0 else shown


def _count(n: int, noun: str, plural: str = "") -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"


def _slowest(graph: _Graph, positions: Sequence[int]) -> list[int]:
    return sorted(positions, key=lambda k: (-graph.nodes[k].median_ns, graph.nodes[k].info.key))


# fusable-batchnorm -----------------------------------------------------------------------------------------


def _fusable_batchnorm(graph: _Graph) -> list[Hint]:
    """Batch norms in eval mode whose only data input is a convolution that feeds nothing else."""
    pairs: list[tuple[int, int]] = []
    for k, n in enumerate(graph.nodes):
        if graph.categories[k] is not Category.BATCHNORM or n.training is not False or n.median_ns <= 0:
            continue
        sources = graph.data_inputs(k)
        conv = sources[0] if len(sources) == 1 else None
        if (
            conv is not None
            and graph.categories[conv] is Category.CONV
            and graph.consumers[conv] == (k,)
            and not graph.nodes[conv].returned  # the model returns the conv's output too: folding would change it
        ):
            pairs.append((conv, k))
    if not pairs:
        return []
    pairs.sort(key=lambda p: (-graph.nodes[p[1]].median_ns, graph.nodes[p[1]].info.key))
    time_ns = sum(graph.nodes[bn].median_ns for _, bn in pairs)
    listed = _names([f"{graph.nodes[conv].name} -> {graph.nodes[bn].name}" for conv, bn in pairs])
    one = len(pairs) == 1
    message = (
        f"{_count(len(pairs), 'batch norm')} in eval mode {'is' if one else 'are each'} the only reader of a "
        f"convolution's output ({listed}): folding {'it' if one else 'them'} into the convolution weights removes "
        f"{graph.pct(time_ns)}; try torch.fx.experimental.optimization.fuse on the traced model or "
        "torch.ao.quantization.fuse_modules on the module"
    )
    return [_hint(graph, "fusable-batchnorm", [bn for _, bn in pairs], time_ns, message)]


# memory-bound ----------------------------------------------------------------------------------------------


def _memory_bound(graph: _Graph, folded: set[str]) -> list[Hint]:
    """One node that does no matrix work taking ``MEMORY_NODE_SHARE`` of the model, or all of them together
    ``MEMORY_GROUP_SHARE`` (batch norms already named by a fusable-batchnorm hint left out)."""
    members = _slowest(
        graph,
        [
            k
            for k, n in enumerate(graph.nodes)
            if graph.categories[k] in MEMORY_BOUND and graph.named(k) and n.info.key not in folded
        ],
    )
    total = sum(graph.nodes[k].median_ns for k in members)
    advice = "fuse {0} with {1} neighbours (torch.compile), or reorder so {2} on smaller tensors"
    if len(members) > 1 and total >= MEMORY_GROUP_SHARE * graph.model_ns:
        led = _names([_timed(graph, k) for k in members])
        message = (
            f"{_count(len(members), 'node')} that do no matrix work (pooling, elementwise, normalisation) take "
            f"{graph.pct(total)}, led by {led}: such nodes are bound by memory traffic; "
            + advice.format("them", "their", "they run")
        )
        return [_hint(graph, "memory-bound", members, total, message)]
    large = [k for k in members if graph.nodes[k].median_ns >= MEMORY_NODE_SHARE * graph.model_ns]
    if not large:
        return []
    time_ns = sum(graph.nodes[k].median_ns for k in large)
    listed = _names([_described(graph, k) for k in large])
    if len(large) == 1:
        message = (
            f"{listed} does no matrix work yet takes {graph.pct(time_ns)}: it is bound by memory traffic; "
            + advice.format("it", "its", "it runs")
        )
    else:
        message = (
            f"{listed} do no matrix work yet each take over {MEMORY_NODE_SHARE:.0%} of the model, together "
            f"{graph.pct(time_ns)}: they are bound by memory traffic; " + advice.format("them", "their", "they run")
        )
    return [_hint(graph, "memory-bound", large, time_ns, message)]


def _timed(graph: _Graph, k: int) -> str:
    return f"{graph.nodes[k].name} {fmt_ns(graph.nodes[k].median_ns)}"


def _described(graph: _Graph, k: int) -> str:
    n = graph.nodes[k]
    return f"{n.name} ({n.target} in {n.info.where})"


# low-flops -------------------------------------------------------------------------------------------------

_PLURALS = {
    Category.CONV: "convolutions",
    Category.MATMUL: "matrix products",
    Category.ATTENTION: "attention nodes",
}
_LOW_FLOPS_ADVICE = {
    Category.CONV: "depthwise and grouped convolutions do little work per byte moved: try channels_last, fusing "
    "them with their neighbours (torch.compile), or a denser convolution",
    Category.MATMUL: "small or oddly shaped matrix products leave the hardware idle: batch them together, pad "
    "their sizes to multiples of 8, or fuse them (torch.compile)",
}
_DEFAULT_ADVICE = "check its shapes (a tiny batch, an odd size) and try fusing it with its neighbours (torch.compile)"


def _low_flops(graph: _Graph) -> list[Hint]:
    """Per category, the nodes whose FLOP/s is under ``LOW_FLOPS_FRACTION`` of their peers'; the time at stake
    is what they would save at their peers' rate."""
    rated: dict[Category, list[int]] = {}
    for k, n in enumerate(graph.nodes):
        if graph.categories[k] is not Category.OTHER and n.flops and graph.named(k):
            rated.setdefault(graph.categories[k], []).append(k)
    hints = []
    for cat, members in rated.items():
        if len(members) <= MIN_PEERS:
            continue
        slow: list[tuple[int, float, float]] = []  # position, its rate, its peers' rate
        for k in members:
            peers = [j for j in members if j != k]
            peer_rate = weighted_median([_rate(graph, j) for j in peers], [graph.nodes[j].median_ns for j in peers])
            n = graph.nodes[k]
            if (
                _rate(graph, k) < LOW_FLOPS_FRACTION * peer_rate
                and n.median_ns >= LOW_FLOPS_NODE_SHARE * graph.model_ns
            ):
                slow.append((k, _rate(graph, k), peer_rate))
        if slow:
            hints.append(_low_flops_hint(graph, cat, len(members) - 1, slow))
    return hints


def _rate(graph: _Graph, k: int) -> float:
    return graph.nodes[k].flops_per_s or 0.0


def _low_flops_hint(graph: _Graph, cat: Category, peers: int, slow: list[tuple[int, float, float]]) -> Hint:
    def saved(item: tuple[int, float, float]) -> float:
        n = graph.nodes[item[0]]
        return n.median_ns - (n.flops or 0) / item[2] * 1e9

    slow.sort(key=lambda item: (-saved(item), graph.nodes[item[0]].info.key))
    time_ns = round(sum(saved(item) for item in slow))
    listed = _names(
        [f"{graph.nodes[k].name} at {fmt_rate(rate)} GFLOP/s against {fmt_rate(peer)}" for k, rate, peer in slow]
    )
    one = len(slow) == 1
    noun = _PLURALS.get(cat, f"{cat} nodes")
    message = (
        f"{_count(len(slow), 'node')} {'runs' if one else 'run'} far below the FLOP rate of the other {peers} "
        f"{noun} ({listed}; peers' time-weighted median): at their rate {'it' if one else 'they'} would take "
        f"{graph.pct(time_ns)} less; {_LOW_FLOPS_ADVICE.get(cat, _DEFAULT_ADVICE)}"
    )
    return _hint(graph, "low-flops", [k for k, _, _ in slow], time_ns, message)


# layout-copy -----------------------------------------------------------------------------------------------

_RELAID = ("strided", "channels_last")


def _layout_copies(graph: _Graph) -> list[Hint]:
    """Copies that take time (mostly re-laying out a strided or channels-last tensor), and convolutions fed a
    strided input (they copy it inside, unseen)."""
    copies: dict[int, int | None] = {}  # copy -> the node whose layout it converts (None: a plain copy)
    convs: dict[int, int] = {}  # convolution -> the node that made its strided input
    for k in range(len(graph.nodes)):
        if not graph.named(k):
            continue
        sources = graph.data_inputs(k)
        relaid = next((i for i in sources if graph.nodes[i].layout in _RELAID), None)
        if _copies(graph, k, sources, relaid):
            copies[k] = relaid
        elif graph.categories[k] is Category.CONV:
            strided = next((i for i in sources if graph.nodes[i].layout == "strided"), None)
            if strided is not None:
                convs[k] = strided
    hints = []
    if copies:
        hints.append(_copies_hint(graph, copies))
    if convs:
        hints.append(_strided_convs_hint(graph, convs))
    return hints


def _copies(graph: _Graph, k: int, sources: Sequence[int], relaid: int | None) -> bool:
    """Whether node ``k`` copies its input: a copy op (a ``to`` only when it changed the layout: otherwise it
    changed dtype or device), or a reshape that made a contiguous tensor of one not laid out for it."""
    n, cat = graph.nodes[k], graph.categories[k]
    name = base_name(n.op, n.target)
    if cat is Category.COPY:
        return name not in _LAYOUT_CHANGING or _layout_changed(graph, k, sources)
    return cat is Category.VIEW and name in _RESHAPES and relaid is not None and n.layout == "contiguous"


def _layout_changed(graph: _Graph, k: int, sources: Sequence[int]) -> bool:
    mine = graph.nodes[k].layout
    return bool(mine) and any(graph.nodes[i].layout not in ("", mine) for i in sources)


def _copies_hint(graph: _Graph, copies: dict[int, int | None]) -> Hint:
    flagged = _slowest(graph, list(copies))
    time_ns = sum(graph.nodes[k].median_ns for k in flagged)

    def described(k: int) -> str:
        source = copies[k]
        if source is None:
            return f"{graph.nodes[k].name} (a plain copy)"
        return f"{graph.nodes[k].name} (from {graph.nodes[source].name}'s {graph.nodes[source].layout} output)"

    one = len(flagged) == 1
    message = (
        f"{_count(len(flagged), 'copy', 'copies')} {'takes' if one else 'take'} {graph.pct(time_ns)}: "
        f"{_names([described(k) for k in flagged])}; produce the layout the consumer wants where the tensor is made "
        f"(drop the permute or transpose, or keep one memory format throughout) so the "
        f"{'copy goes' if one else 'copies go'} away"
    )
    return _hint(graph, "layout-copy", flagged, time_ns, message)


def _strided_convs_hint(graph: _Graph, convs: dict[int, int]) -> Hint:
    flagged = _slowest(graph, list(convs))
    time_ns = sum(graph.nodes[k].median_ns for k in flagged)
    listed = _names([f"{graph.nodes[k].name} (from {graph.nodes[convs[k]].name})" for k in flagged])
    one = len(flagged) == 1
    message = (
        f"{_count(len(flagged), 'convolution')} {'is' if one else 'are'} fed a strided input ({listed}), copied "
        f"inside before computing; {'it takes' if one else 'they take'} {graph.pct(time_ns)}: make the input "
        "contiguous or channels_last where it is produced, or drop the permute or transpose that makes it strided"
    )
    return _hint(graph, "layout-copy", flagged, time_ns, message)
