"""The JSON report (``--fxprof-report``): every profiled test with every node's decision and its reason. Owns
the report's shape (``REPORT_VERSION``); decides nothing. Must not import torch or pytest."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from pytest_fxprof.judge.hints import profile_hints
from pytest_fxprof.records.disturbance import Disturbance, DisturbanceJSON, disturbance_to_json
from pytest_fxprof.records.profile import ROLLUPS, Profile
from pytest_fxprof.records.units import fmt_ns
from pytest_fxprof.records.verdicts import Comparison, Status, Verdict
from pytest_fxprof.store.files import dumps, write_atomic
from pytest_fxprof.store.schema import RunJSON, capture_to_json, run_to_json
from pytest_fxprof.views.judged_json import (
    AggregateJSON,
    BlameJSON,
    FlagJSON,
    JudgedJSON,
    NodeJSON,
    NodeRefJSON,
    TotalJSON,
    aggregate_json,
    blame_json,
    flags_json,
    node_json,
    node_ref,
    total_json,
)
from pytest_fxprof.views.render import at_stake

REPORT_VERSION = 2
REPORT_MAX_BYTES = 1 << 30
"""A report larger than this (1 GiB) is refused unread where one is read back (``read_report``, ``fxprof``)."""


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
    """A measuring turn the call held the machine for (``measuring``), and how long it waited for it."""

    what: str
    start: str
    end: str
    waited_s: float


class CodeChangedJSON(TypedDict):
    """A check of a call whose code changed since its baseline, against the revision it was recorded at ("" where
    none is known); ``status`` "" where not measured (``why``)."""

    revision: str
    against: str
    status: str
    pairs: int
    why: str


class SetJSON(TypedDict):
    """One set of pairs of a call against a revision that a second set confirmed (``sets``)."""

    status: str
    pairs: int


class FingerprintJSON(TypedDict):
    """What a call's computation fingerprint was compared with, and what differs (``records.fingerprint``)."""

    reference: str
    differences: list[str]


class ProfileReportJSON(TypedDict):
    """The report of one ``fxprof`` call (``profile_report``), what every view reads. The keys from ``speed_factor``
    to ``warned`` are present where it was compared; those after it, where the run added them."""

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
    """Where the automatic capture kept submodules holding much of the time whole (``render.coarse_line``)."""
    busy_processes: NotRequired[int]
    code_changed: NotRequired[CodeChangedJSON]
    sets: NotRequired[list[SetJSON]]
    fingerprint: NotRequired[FingerprintJSON]
    """What differs from its reference's fingerprint (empty: decided unchanged without measuring)."""


class ProfileRecord(TypedDict):
    """One ``fxprof`` call as plain data: what the terminal summary and the report need."""

    test_id: str
    key: str
    status: str
    summary: str
    report: ProfileReportJSON


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
    out: ProfileReportJSON = {
        "test_id": test_id,
        "key": key,
        "status": status,
        "environment": asdict(result.environment),
        "capture": capture_to_json(result.capture),
        "protocol": asdict(result.protocol),
        "setup": asdict(result.setup) if result.setup is not None else None,
        "total": total_json(result, comparison),
        "module_faults": dict(result.module_faults),
        "overhead": round(result.overhead, 4) if result.overhead is not None else None,
        "remeasured": result.remeasured,
        "disturbance": disturbance_report(result.disturbance),
        "seconds": round(result.seconds, 3),
        "runs": [run_to_json(r) for r in (result.run(), *result.confirmations)],
        "nodes": [node_json(n, verdicts.get(n.info.key)) for n in result.nodes],
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
        out["added"] = [node_ref(n) for n in comparison.added]
        out["removed"] = [node_ref(n) for n in comparison.removed]
        out["graphs"] = {"baseline": comparison.graphs[0], "current": comparison.graphs[1]}
        out["measurements"] = comparison.measurements
        if comparison.status is Status.UNDECIDED:  # no verdict: what was too noisy to decide (or why nothing was)
            out["noisy"] = comparison.noisy_reason or "; ".join(comparison.noisy)
        if comparison.against:  # the ratios of each verdict are then one per pair of old and new processes
            out["against"] = comparison.against
            out["pairs"] = comparison.pairs
        out["aggregates"] = [aggregate_json(a) for a in comparison.aggregates]
        out["blame"] = blame_json(comparison.blame)
        out["flagged"], out["warned"] = flags_json(comparison)
    return out


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
    """A profile's disturbance, with ``line``: what every view shows of a busy profile ("" when it is not)."""
    return {**disturbance_to_json(d), "reasons": list(d.reasons), "line": d.line}


def busy_line(profile: ProfileReportJSON) -> str:
    """What a report's profile says of the machine it was measured on: "measured on a busy machine: ..." or ""."""
    d = profile.get("disturbance")
    return str(d.get("line") or "") if isinstance(d, Mapping) else ""


def verdict_tone(verdict: str | None, gates: bool = True, confirmed: bool | None = None) -> str:
    """How every view colours a decision: ``bad`` (it failed the test), ``warn`` (slower without failing it,
    unconfirmed, faster, too noisy), ``good`` (within its band) or ``none`` (not compared)."""
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
    """A report's compared nodes worst first, as ``render.at_stake`` ranks them (ties in graph order); a node added
    since the baseline (it has no ratio) ranks by its whole time."""
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
    """A node of ``worst_nodes`` as a view shows it: its ratio, or an added node's time (``+1.20 ms (added)``)."""
    if "ratio" in n:
        return f"x{float(n['ratio']):.2f}"
    return f"+{fmt_ns(int(n.get('current_ns') or 0))} (added)"


class AgainstJSON(TypedDict):
    """The old side of a run against a revision (``label``: ``origin/main (1a2b3c4)``), so that ``fxprof merge``
    tells one run's shards from another's; ``ref`` and ``commit`` "" where only its Python differs."""

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
    """Where the run's measuring time went, in seconds (``measure.serving.Spent``)."""


def write_report(
    path: Path,
    mode: str,
    records: Sequence[ProfileRecord],
    unused: Sequence[str],
    *,
    against: AgainstJSON | None = None,
    time: Mapping[str, float] | None = None,
) -> None:
    """The report of a run's ``records``; ``against``: its old side; ``time``: where its measuring time went."""
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
