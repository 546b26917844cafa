"""The JSON report (``--fxprof-report``): every profiled test with every node's decision and its reason.

Owns the report's shape (``REPORT_VERSION``). A view of the verdict records; decides nothing. Must not
import torch or pytest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypedDict

from pytest_fxprof.baseline import dumps, write_atomic
from pytest_fxprof.decision import Comparison
from pytest_fxprof.records import NodeInfo, ProfileResult

REPORT_VERSION = 1


class ProfileRecord(TypedDict):
    """One ``fxprof`` call as plain data: what the terminal summary and the report need."""

    test_id: str
    key: str
    status: str
    summary: str
    report: dict[str, Any]


def _node_ref(n: NodeInfo) -> dict[str, str]:
    return {"key": n.key, "name": n.name, "op": n.op, "target": n.target, "module": n.module}


def profile_report(
    test_id: str, key: str, status: str, result: ProfileResult, comparison: Comparison | None
) -> dict[str, Any]:
    """The report of one profile; node decisions are present when it was compared with a baseline."""
    verdicts = {v.node.key: v for v in comparison.nodes} if comparison else {}
    nodes = []
    for n in result.nodes:
        row: dict[str, Any] = {
            **_node_ref(n.info),
            "current_ns": n.median_ns,
            "spread": round(n.spread, 4),
            "share": round(n.share, 5),
        }
        v = verdicts.get(n.info.key)
        if v is not None:
            row.update(
                baseline_ns=round(v.baseline_ns),
                speed_factor=round(v.speed_factor, 4),
                ratio=round(v.ratio, 4),
                band=round(v.band, 4),
                band_source=v.band_source.value,
                floor_ns=round(v.floor_ns),
                verdict=v.verdict.value,
                reason=v.reason,
            )
        nodes.append(row)
    out: dict[str, Any] = {
        "test_id": test_id,
        "key": key,
        "status": status,
        "environment": asdict(result.environment),
        "capture": {"method": result.capture.method, "leaf_modules": list(result.capture.leaf_modules)},
        "protocol": asdict(result.protocol),
        "total": {"current_ns": result.total_ns, "instrumented_ns": result.instrumented_ns},
        "overhead": round(result.overhead, 4) if result.overhead is not None else None,
        "remeasured": result.remeasured,
        "nodes": nodes,
    }
    if comparison is not None:
        out["speed_factor"] = round(comparison.speed_factor, 4)
        out["baseline_processes"] = comparison.baseline_processes
        out["mismatches"] = list(comparison.mismatches)
        out["added"] = [_node_ref(n) for n in comparison.added]
        out["removed"] = [_node_ref(n) for n in comparison.removed]
        if comparison.total is not None:
            t = comparison.total
            out["total"].update(
                baseline_ns=round(t.baseline_ns),
                ratio=round(t.ratio, 4),
                band=round(t.band, 4),
                band_source=t.band_source.value,
                machine_factor=round(t.machine_factor, 4),
                verdict=t.verdict.value,
                reason=t.reason,
            )
    return out


def write_report(path: Path, mode: str, records: Sequence[ProfileRecord], unused: Sequence[str]) -> None:
    data = {
        "report_version": REPORT_VERSION,
        "mode": mode,
        "profiles": [r["report"] for r in sorted(records, key=lambda r: (r["test_id"], r["key"]))],
        "unused_baselines": sorted(unused),
    }
    write_atomic(path, dumps(data))
