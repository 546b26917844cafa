"""The JSON report (``--fxprof-report``): every profiled test with every node's decision and its reason.

Owns the report's shape (``REPORT_VERSION``). A view of the verdict records; decides nothing. Must not
import torch or pytest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from pytest_fxprof.judge.hints import profile_hints
from pytest_fxprof.records.disturbance import Disturbance, DisturbanceJSON, disturbance_to_json
from pytest_fxprof.records.measurement import FORWARD, NodeInfo, NodeStats
from pytest_fxprof.records.profile import ROLLUPS, Profile
from pytest_fxprof.records.units import fmt_ns
from pytest_fxprof.records.verdicts import (
    AggregateVerdict,
    Blame,
    Comparison,
    Judgement,
    Kind,
    Memory,
    NodeVerdict,
    Status,
    Verdict,
)
from pytest_fxprof.store.baseline import RunJSON, capture_to_json, run_to_json
from pytest_fxprof.store.files import dumps, write_atomic
from pytest_fxprof.views.render import aggregate_what, at_stake, code_change_line

REPORT_VERSION = 2
REPORT_MAX_BYTES = 1 << 30
"""A report larger than this (1 GiB) is refused unread where one is read back (``read_report``, ``fxprof``)."""


class NodeRefJSON(TypedDict):
    """A node as the report names it: its stable key, its name, where it sits and, in a training step, its
    direction and the forward node it differentiates."""

    key: str
    name: str
    op: str
    target: str
    module: str
    source: str
    direction: str
    forward: str


class NodeStatsJSON(TypedDict, total=False):
    """What a node's row holds only where known: FLOPs where counted, host time and memory where the device
    reports them."""

    flops: int
    flops_per_s: int | None
    host_ns: int
    memory_bytes: int
    peak_bytes: int | None
    allocated: int
    faults: int


class MemoryJSON(TypedDict):
    """What an item costs in memory a call on each side (``records.verdicts.Memory``): bytes of new memory its nodes
    hold, page faults its code took in the plain call; null where a side did not measure it."""

    bytes_before: int | None
    bytes_after: int | None
    faults_before: float | None
    faults_after: float | None


class JudgementJSON(TypedDict):
    """A decision as every judged item of the report holds it: the ratio (and one per measurement, or per pair of
    old and new processes), the band and what set it, and the verdict and why."""

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
    """What a node's row holds only where it was compared with its baseline: its decision and what set it (a node
    added since the baseline has none)."""

    baseline_ns: int
    speed_factor: float
    divisor: float
    floor_ns: int
    gates: bool
    baseline_shape: str


class NodeJSON(NodeRefJSON, NodeStatsJSON, NodeVerdictJSON):
    """One node of a profile (``nodes``): its identity, its median time (``current_ns``), spread, share and
    per-pass times, its output's shape and layout; the rest where measured or compared."""

    current_ns: int
    spread: float
    share: float
    samples_ns: list[int]
    shape: str
    layout: str


class TotalVerdictJSON(_JudgementFieldsJSON, total=False):
    """What the total holds only where it was compared: the baseline's time, the reference workload's factor and
    the decision."""

    baseline_ns: int
    machine_factor: float
    memory: MemoryJSON | None
    overhead_before: float | None
    overhead_after: float | None
    overhead_note: str
    states: str


class TotalJSON(TotalVerdictJSON):
    """The model's total (``total``): ``current_ns`` and ``baseline_ns`` are the plain call as the user makes it, what
    the total's verdict compares (the instrumented pass where none was timed), ``samples_ns`` its times;
    ``instrumented_ns`` the instrumented pass; ``faults`` the page faults of one plain call (null where not read)."""

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
"""What a failed profile leads with (``blame``, ``blame_json``): ``node``, ``source`` where a node leads (``kind``
``node``); ``direction``, ``instances`` and ``changed`` where a module, a pattern or a class does, with ``memory``
(what it costs in memory a call, where that changed) and ``by_memory`` (named by the page faults it gained, not
its time: ``share`` is then its part of the faults) or ``by_change`` (named as the only code that changed, where
neither its time nor its faults name a place: the total alone failed)."""


class LeaderJSON(TypedDict):
    """A member that points at the cause of a flagged aggregate (``led_by``)."""

    name: str
    module: str
    baseline_ns: int
    current_ns: int


class FlagJSON(TypedDict):
    """An item that failed a profile (``flagged``) or was slower or undecidable without failing it (``warned``):
    a node (with its ``direction`` and ``target`` outside the forward), an aggregate (with the members that lead
    it, ``led_by``) or the total."""

    kind: str
    name: str
    module: str
    ratio: float
    direction: NotRequired[str]
    target: NotRequired[str]
    led_by: NotRequired[list[LeaderJSON]]


class RollupJSON(TypedDict):
    """One module subtree or operator type of a profile (``rollups``)."""

    name: str
    depth: int
    nodes: int
    current_ns: int
    spread_ns: int
    share: float
    flops: int | None
    direction: str
    path: str


class HintJSON(TypedDict):
    """One piece of advice on a profile (``hints``)."""

    kind: str
    message: str
    nodes: list[str]
    keys: list[str]
    time_ns: int
    share: float


class DisturbanceReportJSON(DisturbanceJSON):
    """A profile's disturbance (``disturbance_report``)."""

    reasons: list[str]
    line: str


class GraphsJSON(TypedDict):
    """How many graphs the capture made, in the baseline and in this run."""

    baseline: int
    current: int


class MeasuringJSON(TypedDict):
    """A measuring turn the call's measuring held the machine for (``measuring``): what it measured, when it
    started and ended, and how long it waited for another process's turn."""

    what: str
    start: str
    end: str
    waited_s: float


class CodeChangedJSON(TypedDict):
    """A check of a call whose code changed since its baseline was recorded, against the revision it was recorded
    at: that commit ("" where none is known), the old side's label, the pairs' status ("" where not measured: ``why``)
    and how many pairs."""

    revision: str
    against: str
    status: str
    pairs: int
    why: str


class SetJSON(TypedDict):
    """One set of pairs of a call against a revision that a second set confirmed (``sets``): its verdict and
    pairs."""

    status: str
    pairs: int


class FingerprintJSON(TypedDict):
    """What a call's computation fingerprint was compared with, and what differs (``records.fingerprint``)."""

    reference: str
    differences: list[str]


class ProfileReportJSON(TypedDict):
    """The report of one ``fxprof`` call (``profile_report``), an element of the JSON report's ``profiles`` and
    what every view reads. The keys from ``speed_factor`` to ``warned`` are present where the profile was compared
    (``noisy`` where it is undecided, ``against`` and ``pairs`` against a revision); ``measuring`` and ``notices``
    are added by the run that made it, ``busy_processes`` by a recording whose processes stayed busy, ``code_changed``
    by a check whose model's code changed since its baseline was recorded, ``sets`` against a revision where a second
    set of pairs confirmed what the first found."""

    test_id: str
    key: str
    status: str
    environment: dict[str, Any]
    capture: dict[str, Any]
    protocol: dict[str, Any]
    setup: dict[str, Any] | None
    total: TotalJSON
    module_faults: NotRequired[dict[str, int]]
    overhead: float | None
    remeasured: bool
    disturbance: DisturbanceReportJSON
    seconds: float
    runs: list[RunJSON]
    nodes: list[NodeJSON]
    rollups: dict[str, list[RollupJSON]]
    hints: list[HintJSON]
    speed_factor: NotRequired[float]
    baseline_processes: NotRequired[int]
    baseline_recordings: NotRequired[int]
    mismatches: NotRequired[list[str]]
    added: NotRequired[list[NodeRefJSON]]
    removed: NotRequired[list[NodeRefJSON]]
    graphs: NotRequired[GraphsJSON]
    measurements: NotRequired[int]
    noisy: NotRequired[str]
    against: NotRequired[str]
    pairs: NotRequired[int]
    aggregates: NotRequired[list[AggregateJSON]]
    blame: NotRequired[BlameJSON | None]
    flagged: NotRequired[list[FlagJSON]]
    warned: NotRequired[list[FlagJSON]]
    measuring: NotRequired[list[MeasuringJSON]]
    notices: NotRequired[list[str]]
    coarse: NotRequired[str]
    """Where the automatic capture kept submodules holding much of the time whole: what that means for blame, and
    the fix (``views.render.coarse_line``)."""
    busy_processes: NotRequired[int]
    code_changed: NotRequired[CodeChangedJSON]
    sets: NotRequired[list[SetJSON]]
    fingerprint: NotRequired[FingerprintJSON]
    """Where the call's computation fingerprint was compared with its reference's (its baseline's, the old
    side's): what differs (empty where it is the same, and the call was decided unchanged without measuring)."""


JudgedJSON = NodeJSON | AggregateJSON | TotalJSON
"""A judged item of a report: a node, an aggregate or the total."""


class ProfileRecord(TypedDict):
    """One ``fxprof`` call as plain data: what the terminal summary and the report need."""

    test_id: str
    key: str
    status: str
    summary: str
    report: ProfileReportJSON


def _node_ref(n: NodeInfo) -> NodeRefJSON:
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


def memory_json(m: Memory | None) -> MemoryJSON | None:
    if m is None:
        return None
    return {
        "bytes_before": m.bytes_before,
        "bytes_after": m.bytes_after,
        "faults_before": m.faults_before,
        "faults_after": m.faults_after,
    }


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


def _rollups(result: Profile) -> dict[str, list[RollupJSON]]:
    return {
        by: [
            {
                "name": r.name,
                "depth": r.depth,
                "nodes": r.nodes,
                "current_ns": r.median_ns,
                "spread_ns": r.spread_ns,
                "share": round(r.share, 5),
                "flops": r.flops,
                "direction": r.direction,
                "path": r.path,
            }
            for r in result.rollup(by)
        ]
        for by in ROLLUPS
    }


def profile_report(
    test_id: str, key: str, status: str, result: Profile, comparison: Comparison | None
) -> ProfileReportJSON:
    """The report of one profile; node decisions are present when it was compared with a baseline."""
    verdicts = {v.node.key: v for v in comparison.nodes} if comparison else {}
    nodes: list[NodeJSON] = []
    for n in result.nodes:
        row: NodeJSON = {
            **_node_ref(n.info),
            "current_ns": n.median_ns,
            "spread": round(n.spread, 4),
            "share": round(n.share, 5),
            "samples_ns": list(n.samples_ns),
            "shape": n.shape,
            "layout": n.layout,
            **_optional(n),
            **_node_verdict(n, verdicts.get(n.info.key)),
        }
        nodes.append(row)
    out: ProfileReportJSON = {
        "test_id": test_id,
        "key": key,
        "status": status,
        "environment": asdict(result.environment),
        "capture": capture_to_json(result.capture),
        "protocol": asdict(result.protocol),
        "setup": asdict(result.setup) if result.setup is not None else None,
        # current_ns and baseline_ns are the plain call (what the total verdict compares)
        "total": {
            "current_ns": result.total_ns,
            "instrumented_ns": result.instrumented_ns,
            "plain_ns": result.total_ns,
            "samples_ns": list(result.total_samples_ns or result.instrumented_samples_ns),
            "faults": result.faults,
            **_total_verdict(comparison),
        },
        "module_faults": dict(result.module_faults),
        "overhead": round(result.overhead, 4) if result.overhead is not None else None,
        "remeasured": result.remeasured,
        "disturbance": disturbance_report(result.disturbance),
        "seconds": round(result.seconds, 3),
        "runs": [run_to_json(r) for r in (result.run(), *result.confirmations)],
        "nodes": nodes,
        "rollups": _rollups(result),
        "hints": [
            {
                "kind": h.kind,
                "message": h.message,
                "nodes": list(h.nodes),
                "keys": list(h.keys),
                "time_ns": h.time_ns,
                "share": round(h.share, 5),
            }
            for h in profile_hints(result)
        ],
    }
    if comparison is not None:
        out["speed_factor"] = round(comparison.speed_factor, 4)
        out["baseline_processes"] = comparison.baseline_processes
        out["baseline_recordings"] = comparison.recordings  # the recordings the bands were learnt from
        out["mismatches"] = list(comparison.mismatches)
        out["added"] = [_node_ref(n) for n in comparison.added]
        out["removed"] = [_node_ref(n) for n in comparison.removed]
        out["graphs"] = {"baseline": comparison.graphs[0], "current": comparison.graphs[1]}
        out["measurements"] = comparison.measurements
        if comparison.status is Status.UNDECIDED:  # no verdict: what was too noisy to decide (or why nothing was)
            out["noisy"] = comparison.noisy_reason or "; ".join(comparison.noisy)
        if comparison.against:  # the ratios of each verdict are then one per pair of old and new processes
            out["against"] = comparison.against
            out["pairs"] = comparison.pairs
        out["aggregates"] = [aggregate_json(a) for a in comparison.aggregates]
        out["blame"] = blame_json(comparison.blame)
        out["flagged"], out["warned"] = _flags(comparison)
    return out


def aggregate_json(a: AggregateVerdict) -> AggregateJSON:
    """One aggregate of the report: what it is (its level, class, instances), its decision, and the nodes only one
    side holds (``added``, ``removed``: its code changed)."""
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
        "added": [_node_ref(n) for n in a.added],
        "removed": [_node_ref(n) for n in a.removed],
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
    """What a failure leads with (``Comparison.blame``), None where it names no module: the lead's kind (``module``,
    ``pattern``, ``class``, or ``node`` where a node leads), its ``name`` (path, pattern or class; a node's module),
    its class, the enclosing modules (``chain``, outermost first), its times and share of the extra time, and the
    nodes added and removed in it."""
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
        "added": [_node_ref(n) for n in a.added],
        "removed": [_node_ref(n) for n in a.removed],
        "by_memory": b.by_memory,
        "by_change": b.by_change,
        "memory": a.memory.text() if a.memory is not None else "",
    }


def blame_lines_of(profile: ProfileReportJSON) -> list[str]:
    """What a failed profile of a report leads with, as the views show it: where the time went (its times, ratio and
    share of the extra time), the modules around it, what changed in its code; [] where it names nothing."""
    b = profile.get("blame")
    if not isinstance(b, Mapping):
        return []
    share = float(b.get("share") or 0.0)
    part = f", {share:.0%} of the extra time" if share < 0.995 else ""
    if b.get("by_memory"):
        part = f", {share:.0%} of the page faults the plain call gained (the allocator's cost)"
    elif b.get("by_change"):
        part = ", the only code that changed (the call slowed, no module's time in the graphs did)"
    memory = f"; memory {b['memory']}" if b.get("memory") else ""
    times = f"{fmt_ns(int(b.get('baseline_ns') or 0))} -> {fmt_ns(int(b.get('current_ns') or 0))}"
    out = [f"{b.get('what') or b.get('name')}: {times} = x{float(b.get('ratio') or 0):.2f}{part}{memory}"]
    chain = [f"{n} x{r:.2f}" for n, r in zip(b.get("chain") or [], b.get("chain_ratios") or [], strict=False)]
    if chain:
        out.append("in: " + " > ".join(chain))
    if b.get("changed"):
        out.append(str(b["changed"]))
    return out


def disturbance_report(d: Disturbance) -> DisturbanceReportJSON:
    """A profile's disturbance in the report: every figure (``busy`` by the rules of ``records.disturbance``), the
    reasons it is busy and ``line``, what every view shows of a busy profile ("" when it is not)."""
    return {**disturbance_to_json(d), "reasons": list(d.reasons), "line": d.line}


def busy_line(profile: ProfileReportJSON) -> str:
    """What a report's profile says of the machine it was measured on: "measured on a busy machine: ..." or ""."""
    d = profile.get("disturbance")
    return str(d.get("line") or "") if isinstance(d, Mapping) else ""


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


def _flags(c: Comparison) -> tuple[list[FlagJSON], list[FlagJSON]]:
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


def verdict_tone(verdict: str | None, gates: bool = True, confirmed: bool | None = None) -> str:
    """How every view colours a decision: ``bad`` (it failed the test), ``warn`` (a slower node too small to
    fail alone, one a second measurement did not confirm, faster beyond its band, too noisy to decide),
    ``good`` (within its band) or ``none`` (not compared)."""
    if verdict is None:
        return "none"
    if verdict == Verdict.OK.value:
        return "warn" if confirmed is False else "good"
    if verdict == Verdict.SLOWER.value:
        return "bad" if gates else "warn"
    return "warn"


def item_tone(item: JudgedJSON) -> str:
    """``verdict_tone`` of a report's node, aggregate or total."""
    return verdict_tone(item.get("verdict"), bool(item.get("gates", True)), item.get("confirmed"))


def worst_nodes(nodes: Sequence[NodeJSON], limit: int | None = None) -> list[NodeJSON]:
    """A report's compared nodes worst first, as ``render.at_stake`` ranks them (what failed, then by the time each
    lost; ties in graph order): what every view calls the worst. Where the profile was compared, a node that only
    this run holds (added: it has no ratio) ranks by its whole time, which the change added."""
    if not any("ratio" in n for n in nodes):
        return []
    return sorted(nodes, key=_stake)[:limit]


def _stake(n: NodeJSON) -> tuple[int, float]:
    if "ratio" not in n:  # added since the baseline or the old side
        return at_stake(float(n.get("current_ns") or 0), "added", failed=False)
    delta = float(n.get("baseline_ns") or 0) * (float(n["ratio"]) - 1.0)
    verdict = str(n.get("verdict", ""))
    return at_stake(delta, verdict, failed=verdict == Verdict.SLOWER.value and bool(n.get("gates", True)))


def worst_label(n: NodeJSON) -> str:
    """How a view shows a node of ``worst_nodes``: its ratio, or for an added node its time (``+1.20 ms
    (added)``)."""
    if "ratio" in n:
        return f"x{float(n['ratio']):.2f}"
    return f"+{fmt_ns(int(n.get('current_ns') or 0))} (added)"


class AgainstJSON(TypedDict):
    """What a run against a revision compared with, at the top of its report (also where every profile is new, so
    that ``fxprof merge`` can tell the shards of one run from another's): the old side as every line names it
    (``label``: ``origin/main (1a2b3c4)``), the revision as given (``ref``) and the commit it named (``commit``, the
    full sha; both "" where only the old side's Python differs), and that Python ("" for the run's own)."""

    label: str
    ref: str
    commit: str
    python: str


class ReportJSON(TypedDict):
    """A JSON report as ``--fxprof-report`` and ``fxprof merge`` write it: its version, the run's mode, every
    profile's report (by test id and key), the baselines no test used and, against a revision, its old side."""

    report_version: int
    mode: str
    profiles: list[ProfileReportJSON]
    unused_baselines: list[str]
    against: NotRequired[AgainstJSON]
    time: NotRequired[dict[str, float]]
    """Where the run's measuring time went, in seconds (``measure.sampling.Spent``): fresh processes starting,
    capture, warm-up, measuring, the tests' own code in fresh processes, waiting for the measuring turn."""


def write_report(
    path: Path,
    mode: str,
    records: Sequence[ProfileRecord],
    unused: Sequence[str],
    *,
    against: AgainstJSON | None = None,
    time: Mapping[str, float] | None = None,
) -> None:
    """The report of a run's ``records``; ``against``: the old side of a run against a revision; ``time``: where
    the run's measuring time went."""
    data: ReportJSON = {
        "report_version": REPORT_VERSION,
        "mode": mode,
        "profiles": [r["report"] for r in sorted(records, key=lambda r: (r["test_id"], r["key"]))],
        "unused_baselines": sorted(unused),
    }
    if against is not None:
        data["against"] = against.copy()
    if time is not None:
        data["time"] = dict(time)
    write_atomic(path, dumps(data))


def against_of(profiles: Sequence[ProfileReportJSON]) -> str:
    """The revision a run compared with (``origin/main (1a2b3c4)``), from its profiles; empty against baselines."""
    return next((str(p["against"]) for p in profiles if p.get("against")), "")
