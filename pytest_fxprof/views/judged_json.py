"""The JSON of each judged item of a report: a node, an aggregate, the total, and what failed a profile (its
blame and flags). A view of the verdict records; decides nothing. Must not import torch or pytest."""

from __future__ import annotations

from dataclasses import asdict
from typing import NotRequired, TypedDict, cast

from pytest_fxprof.records.measurement import FORWARD, NodeInfo, NodeStats
from pytest_fxprof.records.profile import Profile
from pytest_fxprof.records.verdicts import (
    AggregateVerdict,
    Blame,
    Comparison,
    Judgement,
    Kind,
    Memory,
    NodeVerdict,
    Verdict,
)
from pytest_fxprof.views.item_lines import aggregate_what, code_change_line


class NodeRefJSON(TypedDict):
    """A node as the report names it; in a training step, with its direction and the forward node it differentiates."""

    key: str
    name: str
    op: str
    target: str
    module: str
    source: str
    direction: str
    forward: str


class NodeStatsJSON(TypedDict, total=False):
    """What a node's row holds only where known: FLOPs where counted, host time and memory where measured."""

    flops: int
    flops_per_s: int | None
    host_ns: int
    memory_bytes: int
    peak_bytes: int | None
    allocated: int
    faults: int


class MemoryJSON(TypedDict):
    """What an item costs in memory a call on each side (``records.verdicts.Memory``); null where not measured."""

    bytes_before: int | None
    bytes_after: int | None
    faults_before: float | None
    faults_after: float | None


class JudgementJSON(TypedDict):
    """A decision as every judged item holds it: its ratio (``ratios``: per measurement or pair), band and verdict."""

    ratio: float
    ratios: list[float]
    band: float
    band_source: str
    sigma: float | None
    floor: float
    verdict: str
    confirmed: bool | None
    reason: str


class _JudgementFieldsJSON(TypedDict, total=False):
    """The keys of ``JudgementJSON`` on an item that holds them only where it was compared."""

    ratio: float
    ratios: list[float]
    band: float
    band_source: str
    sigma: float | None
    floor: float
    verdict: str
    confirmed: bool | None
    reason: str


class NodeVerdictJSON(_JudgementFieldsJSON, total=False):
    """What a node's row holds only where it was compared (a node added since the baseline has none)."""

    baseline_ns: int
    speed_factor: float
    divisor: float
    floor_ns: int
    gates: bool
    baseline_shape: str


class NodeJSON(NodeRefJSON, NodeStatsJSON, NodeVerdictJSON):
    """One node of a profile (``nodes``): its median time (``current_ns``), per-pass times and output's shape."""

    current_ns: int
    spread: float
    share: float
    samples_ns: list[int]
    shape: str
    layout: str


class TotalVerdictJSON(_JudgementFieldsJSON, total=False):
    """What the total holds only where it was compared."""

    baseline_ns: int
    machine_factor: float
    memory: MemoryJSON | None
    overhead_before: float | None
    overhead_after: float | None
    overhead_note: str
    states: str


class TotalJSON(TotalVerdictJSON):
    """The model's total (``total``): ``current_ns`` and ``baseline_ns`` are the plain call (the instrumented pass
    where none was timed), what its verdict compares; ``faults`` the page faults of one plain call."""

    current_ns: int
    instrumented_ns: int
    plain_ns: int
    samples_ns: list[int]
    faults: int | None


_AggregateFieldsJSON = TypedDict(
    "_AggregateFieldsJSON",
    {
        "kind": str,
        "name": str,
        "path": str,
        "direction": str,
        "what": str,
        "class": str,
        "instances": list[str],
        "level": str,
        "level_items": int,
        "members": list[str],
        "added": list[NodeRefJSON],
        "removed": list[NodeRefJSON],
        "baseline_ns": int,
        "current_ns": int,
        "delta_ns": int,
        "speed_factor": float,
        "divisor": float,
        "gates": bool,
        "memory": MemoryJSON | None,
        "changed": NotRequired[str],
    },
)
"""An aggregate of the report but its decision (``changed``: what changed in its code, where anything did)."""


class AggregateJSON(_AggregateFieldsJSON, JudgementJSON):
    """One aggregate of a compared profile (``aggregates``, ``aggregate_json``)."""


BlameJSON = TypedDict(
    "BlameJSON",
    {
        "kind": str,
        "name": str,
        "node": NotRequired[str],
        "direction": NotRequired[str],
        "class": str,
        "what": str,
        "instances": NotRequired[list[str]],
        "chain": list[str],
        "chain_ratios": list[float],
        "baseline_ns": int,
        "current_ns": int,
        "ratio": float,
        "share": float,
        "extra_ns": int,
        "by_memory": NotRequired[bool],
        "by_change": NotRequired[bool],
        "memory": NotRequired[str],
        "source": NotRequired[str],
        "changed": NotRequired[str],
        "added": list[NodeRefJSON],
        "removed": list[NodeRefJSON],
    },
)
"""What a failed profile leads with (``blame``): a node (``node``, ``source``) or a module, pattern or class, named
by its time, by the page faults it gained (``by_memory``: ``share`` is its part of them) or as the only code that
changed (``by_change``)."""


class LeaderJSON(TypedDict):
    """A member that points at the cause of a flagged aggregate (``led_by``)."""

    name: str
    module: str
    baseline_ns: int
    current_ns: int


class FlagJSON(TypedDict):
    """A node, aggregate (``led_by``: the members that lead it) or the total that failed a profile (``flagged``) or
    was slower or undecidable without failing it (``warned``)."""

    kind: str
    name: str
    module: str
    ratio: float
    direction: NotRequired[str]
    target: NotRequired[str]
    led_by: NotRequired[list[LeaderJSON]]


JudgedJSON = NodeJSON | AggregateJSON | TotalJSON
"""A judged item of a report: a node, an aggregate or the total."""


def node_ref(n: NodeInfo) -> NodeRefJSON:
    return {
        "key": n.key,
        "name": n.name,
        "op": n.op,
        "target": n.target,
        "module": n.module,
        "source": n.source,
        "direction": n.direction,
        "forward": n.forward,
    }


def _optional(n: NodeStats) -> NodeStatsJSON:
    """FLOPs where counted; host time and memory where the device reports them."""
    out: NodeStatsJSON = {}
    if n.flops is not None:
        out["flops"] = n.flops
        out["flops_per_s"] = round(n.flops_per_s) if n.flops_per_s is not None else None
    if n.host_ns is not None:
        out["host_ns"] = n.host_ns
    if n.memory_bytes is not None:
        out["memory_bytes"] = n.memory_bytes
        out["peak_bytes"] = n.peak_bytes
    if n.allocated is not None:
        out["allocated"] = n.allocated
    if n.faults is not None:
        out["faults"] = n.faults
    return out


def node_json(n: NodeStats, v: NodeVerdict | None) -> NodeJSON:
    """A node's row (``nodes``); its decision where it was compared (``v``)."""
    return {
        **node_ref(n.info),
        "current_ns": n.median_ns,
        "spread": round(n.spread, 4),
        "share": round(n.share, 5),
        "samples_ns": list(n.samples_ns),
        "shape": n.shape,
        "layout": n.layout,
        **_optional(n),
        **_node_verdict(n, v),
    }


def total_json(result: Profile, c: Comparison | None) -> TotalJSON:
    """The model's total (``total``); its decision where it was compared."""
    return {
        "current_ns": result.total_ns,
        "instrumented_ns": result.instrumented_ns,
        "plain_ns": result.total_ns,
        "samples_ns": list(result.total_samples_ns or result.instrumented_samples_ns),
        "faults": result.faults,
        **_total_verdict(c),
    }


def memory_json(m: Memory | None) -> MemoryJSON | None:
    return None if m is None else cast("MemoryJSON", asdict(m))


def _node_verdict(n: NodeStats, v: NodeVerdict | None) -> NodeVerdictJSON:
    """A node's decision where it was compared; nothing where not."""
    if v is None:
        return {}
    return {
        "baseline_ns": round(v.baseline_ns),
        "speed_factor": round(v.speed_factor, 4),
        "divisor": round(v.divisor, 4),
        "floor_ns": round(v.floor_ns),
        "gates": v.gates,
        "baseline_shape": v.shapes[0] if v.shapes else n.shape,
        **judgement_json(v.judgement),
    }


def _total_verdict(c: Comparison | None) -> TotalVerdictJSON:
    """The total's decision where it was compared; nothing where not."""
    if c is None or c.total is None:
        return {}
    t = c.total
    before, after = t.overhead
    return {
        "baseline_ns": round(t.baseline_ns),
        "machine_factor": round(t.machine_factor, 4),
        "memory": memory_json(t.memory),
        "overhead_before": round(before, 4) if before is not None else None,
        "overhead_after": round(after, 4) if after is not None else None,
        "overhead_note": t.overhead_note,
        "states": t.states,
        **judgement_json(t.judgement),
    }


def aggregate_json(a: AggregateVerdict) -> AggregateJSON:
    """One aggregate of the report (``AggregateJSON``)."""
    fields: _AggregateFieldsJSON = {
        "kind": a.kind.value,
        "name": a.name,
        "path": a.where,
        "direction": a.direction,
        "what": aggregate_what(a),
        "class": a.cls,
        "instances": list(a.instances),
        "level": a.family,
        "level_items": a.tested,
        "members": [m.key for m in a.members],
        "added": [node_ref(n) for n in a.added],
        "removed": [node_ref(n) for n in a.removed],
        "baseline_ns": round(a.baseline_ns),
        "current_ns": round(a.current_ns),
        "delta_ns": round(a.delta_ns),
        "speed_factor": round(a.speed_factor, 4),
        "divisor": round(a.divisor, 4),
        "gates": a.gates,
        "memory": memory_json(a.memory),
    }
    out: AggregateJSON = {**fields, **judgement_json(a.judgement)}
    changed = code_change_line(a)
    if changed:
        out["changed"] = changed
    return out


def blame_json(b: Blame | None) -> BlameJSON | None:
    """What a failure leads with (``BlameJSON``), None where it names nothing."""
    if b is None:
        return None
    chain = [a.where for a in b.chain]
    chain_ratios = [round(a.ratio, 4) for a in b.chain]
    if b.lead is None:
        assert b.node is not None
        v = b.node
        return {
            "kind": "node",
            "name": v.node.module,
            "node": v.node.name,
            "class": "",
            "chain": chain,
            "chain_ratios": chain_ratios,
            "what": f"node {v.node.name} ({v.node.label} in {v.node.where})",
            "baseline_ns": round(v.baseline_ns),
            "current_ns": round(v.current_ns),
            "ratio": round(v.ratio, 4),
            "share": round(b.share, 4),
            "extra_ns": round(b.extra_ns),
            "source": v.node.source,
            "added": [],
            "removed": [],
        }
    a = b.lead
    return {
        "kind": a.kind.value,
        "name": a.where,
        "direction": a.direction,
        "class": a.cls,
        "what": aggregate_what(a),
        "instances": list(a.instances),
        "chain": chain,
        "chain_ratios": chain_ratios,
        "baseline_ns": round(a.baseline_ns),
        "current_ns": round(a.current_ns),
        "ratio": round(a.ratio, 4),
        "share": round(b.share, 4),
        "extra_ns": round(b.extra_ns),
        "changed": code_change_line(a),
        "added": [node_ref(n) for n in a.added],
        "removed": [node_ref(n) for n in a.removed],
        "by_memory": b.by_memory,
        "by_change": b.by_change,
        "memory": a.memory.text() if a.memory is not None else "",
    }


def judgement_json(j: Judgement) -> JudgementJSON:
    return {
        "ratio": round(j.ratio, 4),
        "ratios": [round(r, 4) for r in j.ratios],
        "band": round(j.band, 4),
        "band_source": j.band_source.value,
        "sigma": round(j.sigma, 4) if j.sigma is not None else None,
        "floor": round(j.floor, 4),
        "verdict": j.verdict.value,
        "confirmed": j.confirmed,
        "reason": j.reason,
    }


def flags_json(c: Comparison) -> tuple[list[FlagJSON], list[FlagJSON]]:
    """What failed the profile, and what was slower (or undecidable) without failing it."""

    def node(v: NodeVerdict) -> FlagJSON:
        n = v.node
        out: FlagJSON = {"kind": "node", "name": n.name, "module": n.module, "ratio": round(v.ratio, 4)}
        if n.direction != FORWARD:
            out["direction"] = n.direction
            out["target"] = n.target
        return out

    def aggregate(a: AggregateVerdict) -> FlagJSON:
        module = a.name if a.kind in (Kind.MODULE, Kind.PATTERN) else ""
        leaders: list[LeaderJSON] = [
            {
                "name": v.node.name,
                "module": v.node.module,
                "baseline_ns": round(v.baseline_ns),
                "current_ns": round(v.current_ns),
            }
            for v in c.leaders(a)
        ]
        return {"kind": a.kind.value, "name": a.name, "module": module, "ratio": round(a.ratio, 4), "led_by": leaders}

    def warns(j: Judgement) -> bool:
        return j.confirmed is False or j.verdict is Verdict.NOISY

    flagged = [node(v) for v in c.slower] + [aggregate(a) for a in c.slower_aggregates]
    total: FlagJSON | None = (
        {"kind": "total", "name": "total", "module": "", "ratio": round(c.total.ratio, 4)} if c.total else None
    )
    if total is not None and c.total is not None and c.total.verdict is Verdict.SLOWER:
        flagged.append(total)
    warned = [node(v) for v in c.slower_small]
    warned += [node(v) for v in c.nodes if v.gates and warns(v.judgement)]
    warned += [aggregate(a) for a in c.aggregates if warns(a.judgement)]
    if total is not None and c.total is not None and warns(c.total.judgement):
        warned.append(total)
    return flagged, warned
