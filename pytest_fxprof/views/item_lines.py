"""One compared item as a line of text: a node, an aggregate, the total, and what changed in an aggregate's code.
Owns wording only; decides nothing. Must not import torch or pytest."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_fxprof.judge.aggregates import fold
from pytest_fxprof.records.measurement import FORWARD, NodeInfo
from pytest_fxprof.records.units import fmt_ns
from pytest_fxprof.records.verdicts import AggregateVerdict, Comparison, Kind, NodeVerdict, TotalVerdict, Verdict


def signed_ns(ns: float) -> str:
    return f"{'+' if ns >= 0 else '-'}{fmt_ns(abs(ns))}"


def _measured(ratios: Sequence[float], *, paired: bool = False) -> str:
    if paired:
        return " (per pair " + ", ".join(f"x{r:.2f}" for r in ratios) + ")"
    return "" if len(ratios) < 2 else " (measurements " + ", ".join(f"x{r:.2f}" for r in ratios) + ")"


def _factor(f: float, divisor: float) -> str:
    """The peers' speed factor and what the slower test divided by, as the decision used it."""
    if f > 1.0:
        return f"x{f:.2f} (divided by x{divisor:.2f}, the drift in doubt)"
    if f < 1.0 and abs(divisor - 1.0) > 5e-3:
        return f"x{f:.2f} (divided by x{divisor:.2f}, part of the speed-up credited)"
    return f"x{f:.2f}"


def _at(n: NodeInfo) -> str:
    return f", {n.source}" if n.source else ""


def node_head(n: NodeInfo) -> str:
    """A node as a failure names it: ``conv (call_function aten.convolution.default in layer1.0.conv1, file:line)``;
    outside the forward, module and direction first: ``layer3.0.conv2 backward (aten.convolution_backward.default)
    [convolution_backward_8 of convolution_10, file:line]``."""
    if n.direction == FORWARD:
        return f"{n.name} ({n.op} {n.target} in {n.where}{_at(n)})"
    of = f" of {n.forward}" if n.forward else ""
    return f"{n.where} {n.direction} ({n.target}) [{n.name}{of}{_at(n)}]"


def node_line(v: NodeVerdict) -> str:
    j = v.judgement  # against a revision (paired): no speed factor, the ratios are per pair
    factor = "" if j.paired else f" after speed factor {_factor(v.speed_factor, v.divisor)}"
    return (
        f"{node_head(v.node)}: {fmt_ns(v.baseline_ns)} -> {fmt_ns(v.current_ns)} = x{v.ratio:.2f}{factor}, "
        f"band +{v.band:.0%} ({v.band_source.value}), {signed_ns(v.delta_ns)}"
        f"{_measured(j.ratios, paired=j.paired)}{_shapes(v)}"
    )


def _shapes(v: NodeVerdict) -> str:
    since = "" if v.judgement.paired else " since the baseline"
    return f"; output changed{since}: {v.shapes[0]} -> {v.shapes[1]}" if v.shapes else ""


def nodes_text(nodes: Sequence[NodeInfo], limit: int = 8) -> str:
    shown = ", ".join(f"{n.name} ({n.target} in {n.where}{_at(n)})" for n in nodes[:limit])
    return shown + (f", ... {len(nodes) - limit} more" if len(nodes) > limit else "")


def aggregate_what(a: AggregateVerdict, *, nodes: bool = False) -> str:
    """An aggregate as every line names it: ``every aten.add.Tensor node``, ``module layer3.0 (BasicBlock)``,
    ``module transformer.h.*.mlp (MLP, 4 instances)``, ``class LayerNorm (9 instances: ...)``; with ``nodes``,
    how many nodes it holds in the same parentheses."""
    about = [_nodes_count(a)] if nodes else []
    if a.kind is Kind.OP:
        return f"every {a.name} node" + (f" ({about[0]})" if about else "")
    if a.kind is Kind.CLASS:
        about.insert(0, f"{len(a.instances)} instances: {', '.join(_folded(a.instances))}")
        return f"class {a.name} ({'; '.join(about)})"
    if a.kind is Kind.PATTERN:
        about.insert(0, f"{len(a.instances)} instances")
    if a.cls:
        about.insert(0, a.cls)
    return f"module {a.name}" + (f" ({', '.join(about)})" if about else "")


def _folded(paths: Sequence[str], limit: int = 4) -> list[str]:
    """Module paths with their indices folded, each once (``transformer.h.*.ln_1``), at most ``limit`` and a count."""
    folded = list(dict.fromkeys(fold(p) for p in paths))
    return folded[:limit] + ([f"{len(folded) - limit} more"] if len(folded) > limit else [])


def _nodes_count(a: AggregateVerdict) -> str:
    count = len(a.members) + len(a.added)
    return f"{count} nodes" if not a.changed else f"{count} nodes, {len(a.members) + len(a.removed)} before"


def aggregate_line(a: AggregateVerdict) -> str:
    j = a.judgement
    memory = a.memory.text() if a.memory is not None else ""
    memory = f"; memory {memory}" if memory else ""
    factor = "" if j.paired else f" after speed factor {_factor(a.speed_factor, a.divisor)} from nodes outside it"
    return (
        f"{aggregate_what(a, nodes=True)}: {fmt_ns(a.baseline_ns)} -> {fmt_ns(a.current_ns)} = x{a.ratio:.2f}"
        f"{factor}, band +{j.band:.0%} ({j.band_source.value}), {signed_ns(a.delta_ns)}"
        f"{_measured(j.ratios, paired=j.paired)}{memory}"
    )


def led_by(c: Comparison, a: AggregateVerdict) -> str:
    """The aggregate's members that point at the cause, on a line of their own."""
    leaders = c.leaders(a)
    if not leaders:
        return ""
    shown = "; ".join(
        f"{v.node.name} ({v.node.label} in {v.node.where}{_at(v.node)}) "
        f"{fmt_ns(v.baseline_ns)} -> {fmt_ns(v.current_ns)}"
        for v in leaders
    )
    return f"\n    most of it: {shown}"


def total_line(t: TotalVerdict) -> str:
    j = t.judgement
    credit = machine_credit(t.machine_factor, t.verdict.value)
    against = "" if j.paired else f" against the reference workload (machine x{t.machine_factor:.2f}{credit})"
    return (
        f"total: {fmt_ns(t.baseline_ns)} -> {fmt_ns(t.current_ns)} (the plain call), x{t.ratio:.2f}{against}, "
        f"band +{t.band:.0%} ({t.band_source.value}): {t.verdict.value}{_measured(j.ratios, paired=j.paired)}"
    )


def total_detail_lines(t: TotalVerdict) -> list[str]:
    """What the total's line rests on, each on a line of its own: the allocator states the processes fell into, the
    whole call's memory, the profiler's overhead on each side and, where it grew, what that means for the nodes."""
    out = [f"  {t.states}"] if t.states else []
    memory = t.memory.text() if t.memory is not None else ""
    if memory:
        out.append(f"  memory of the call: {memory}")
    before, after = t.overhead
    if before is not None or after is not None:
        sides = ("old side", "new side") if t.judgement.paired else ("baseline", "this run")
        shown = ", ".join(f"x{o:.2f} {side}" for o, side in zip((before, after), sides, strict=True) if o is not None)
        out.append(f"  the profiler's overhead (instrumented pass over the plain call): {shown}")
    if t.overhead_note:
        out.append(f"  {t.overhead_note}")
    return out


def machine_credit(factor: float, verdict: str) -> str:
    """What a faster machine counted for: nothing, unless the total was found faster (``judge.decision``)."""
    return "; faster, not credited" if factor < 1.0 and verdict != Verdict.FASTER.value else ""


# What changed in an aggregate's code ---------------------------------------------------------------------


def op_name(target: str) -> str:
    """A node's target as short as people read it in a list: ``tanh`` of ``aten.tanh.default``, ``add`` of
    ``operator.add``, ``Linear`` of a module's class, ``layer_norm`` of a custom op's ``mylib.layer_norm.default``
    (a compiled model's library call)."""
    parts = target.split(".")
    if parts[0] in ("aten", "prims", "quantized") and len(parts) >= 2:
        return parts[1]
    if len(parts) >= 3 and (parts[-1] == "default" or parts[-1][:1].isupper()):  # an overload: the op is before it
        return parts[-2]
    return parts[-1]


def _per_instance(a: AggregateVerdict, nodes: Sequence[NodeInfo]) -> tuple[list[NodeInfo], int]:
    """The nodes of one instance and how many instances hold the same (by operation, in order), where every instance
    of the pattern or class that holds any does; else all of ``nodes`` and 1."""
    if not a.instances or not nodes:
        return list(nodes), 1
    longest = sorted(a.instances, key=len, reverse=True)
    by: dict[str, list[NodeInfo]] = {}
    for n in nodes:
        instance = next((p for p in longest if n.module == p or n.module.startswith(p + ".")), "")
        by.setdefault(instance, []).append(n)
    groups = list(by.values())
    # by their operations as the line names them: each instance's weights (``layer1.0.conv2.weight``) are its own
    first = [op_name(n.target) for n in groups[0]]
    if len(groups) > 1 and all([op_name(n.target) for n in g] == first for g in groups):
        return groups[0], len(groups)
    return list(nodes), 1


def _ops(nodes: Sequence[NodeInfo], limit: int = 8) -> str:
    names = [op_name(n.target) + ("" if n.direction == FORWARD else f" {n.direction}") for n in nodes]
    return ", ".join(names[:limit]) + (f", ... {len(names) - limit} more" if len(names) > limit else "")


def code_change_line(a: AggregateVerdict) -> str:
    """What changed in an aggregate's code, from the nodes only one side holds: "its code changed: 6 nodes added in
    each of 4 instances at model.py:78-80 (tanh, pow, mul, add, mul, mul); 1 removed in each (gelu)"; "" where
    nothing did."""
    if not a.changed:
        return ""
    parts = []
    added, each = _per_instance(a, a.added)
    if added:
        per = f" in each of {each} instances" if each > 1 else _modules_of(a, added)
        parts.append(f"{len(added)} node(s) added{per}{_sources_at(added)} ({_ops(added)})")
    removed, each_removed = _per_instance(a, a.removed)
    if removed:
        per = " in each" if each_removed > 1 and added and each_removed == each else ""
        per = per or (f" in each of {each_removed} instances" if each_removed > 1 else _modules_of(a, removed))
        parts.append(f"{len(removed)} removed{per}{_sources_at(removed)} ({_ops(removed)})")
    # an operator type's nodes come and go with the code of the modules they sit in, named instead
    return ("its code changed: " if a.kind is not Kind.OP else "its nodes changed: ") + "; ".join(parts)


def _sources_at(nodes: Sequence[NodeInfo]) -> str:
    """Where ``nodes`` were written, per file with its line span: `` at model.py:78-80``; "" where none is known."""
    lines: dict[str, list[int]] = {}
    for n in nodes:
        file, _, line = n.source.rpartition(":")
        if file and line.isdigit():
            lines.setdefault(file, []).append(int(line))
    spans = [f"{f}:{min(ls)}" + (f"-{max(ls)}" if max(ls) != min(ls) else "") for f, ls in lines.items()]
    return f" at {', '.join(spans)}" if spans else ""


def _modules_of(a: AggregateVerdict, nodes: Sequence[NodeInfo]) -> str:
    """For an operator type, the modules ``nodes`` sit in (``in transformer.h.*.mlp``); "" for a module's own."""
    if a.kind is not Kind.OP:
        return ""
    return " in " + ", ".join(_folded([n.where for n in nodes]))
