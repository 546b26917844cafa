"""Rows for pandas: a profile's nodes, its roll-ups, its comparison's decisions, and JSON reports read back.

Owns the column names and units of every DataFrame the package returns (times in microseconds, shares and
ratios as fractions). Columns are the same whether or not a profile was compared (empty where not), so CSV
files of different runs line up.

Must not import torch or pytest. Must not import pandas at module level: ``read_report`` imports it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pytest_fxprof.records.measurement import DIRECTIONS, FORWARD
from pytest_fxprof.records.verdicts import Comparison, Judgement, NodeVerdict
from pytest_fxprof.store.files import TooLargeError, loads, read_text
from pytest_fxprof.views.judged_json import JudgedJSON, JudgementJSON, judgement_json
from pytest_fxprof.views.report import REPORT_MAX_BYTES, ProfileReportJSON

if TYPE_CHECKING:
    import pandas as pd

    from pytest_fxprof.records.profile import Profile, Rollup

Rows = tuple[list[dict[str, Any]], list[str]]

NODE_COLUMNS = [
    "key", "node", "direction", "forward", "op", "target", "module", "source", "shape", "layout", "median_us",
    "spread", "share", "samples", "flops", "gflops_per_s", "host_us", "memory_bytes", "peak_bytes",
    "baseline_us", "ratio", "band", "verdict", "gates",
]  # fmt: skip
ROLLUP_COLUMNS = ["by", "name", "direction", "depth", "nodes", "median_us", "spread", "share", "flops", "gflops_per_s"]
VERDICT_COLUMNS = [
    "kind", "name", "direction", "module", "baseline_us", "current_us", "ratio", "band", "band_source", "verdict",
    "confirmed", "gates", "reason",
]  # fmt: skip


def _us(ns: float | None) -> float | None:
    return ns / 1e3 if ns is not None else None


def _giga(value: float | None) -> float | None:
    return value / 1e9 if value is not None else None


def node_rows(result: Profile) -> Rows:
    verdicts: dict[str, NodeVerdict] = (
        {v.node.key: v for v in result.comparison.nodes} if result.comparison is not None else {}
    )
    rows = []
    for n in result.nodes:
        v = verdicts.get(n.info.key)
        rows.append(
            {
                "key": n.info.key,
                "node": n.name,
                "direction": n.info.direction,
                "forward": n.info.forward,
                "op": n.op,
                "target": n.target,
                "module": n.module,
                "source": n.info.source,
                "shape": n.shape,
                "layout": n.layout,
                "median_us": n.median_ns / 1e3,
                "spread": n.spread,
                "share": n.share,
                "samples": len(n.samples_ns),
                "flops": n.flops,
                "gflops_per_s": n.flops_per_s / 1e9 if n.flops_per_s is not None else None,
                "host_us": _us(n.host_ns),
                "memory_bytes": n.memory_bytes,
                "peak_bytes": n.peak_bytes,
                "baseline_us": _us(v.baseline_ns) if v else None,
                "ratio": v.ratio if v else None,
                "band": v.band if v else None,
                "verdict": v.verdict.value if v else None,
                "gates": v.gates if v else None,
            }
        )
    return rows, NODE_COLUMNS


def rollup_rows(rollups: Sequence[Rollup]) -> Rows:
    rows = [
        {
            "by": r.by,
            "name": r.name,
            "direction": r.direction,
            "depth": r.depth,
            "nodes": r.nodes,
            "median_us": r.median_ns / 1e3,
            "spread": r.spread_ns / r.median_ns if r.median_ns else 0.0,
            "share": r.share,
            "flops": r.flops,
            "gflops_per_s": r.flops_per_s / 1e9 if r.flops_per_s is not None else None,
        }
        for r in rollups
    ]
    return rows, ROLLUP_COLUMNS


def verdict_rows(c: Comparison | None) -> Rows:
    """Each decision of a comparison: every matched node, every aggregate, then the total."""
    if c is None:
        return [], VERDICT_COLUMNS

    def item(baseline_ns: float, current_ns: float, j: Judgement) -> _Judged:
        return {"baseline_ns": baseline_ns, "current_ns": current_ns, **judgement_json(j)}

    rows = [
        _verdict(
            "node",
            v.node.name,
            v.node.module,
            item(v.baseline_ns, v.current_ns, v.judgement),
            v.gates,
            direction=v.node.direction,
        )
        for v in c.nodes
    ]
    rows += [
        _verdict(
            a.kind.value,
            a.name,
            _module_of(a.kind.value, a.name),
            item(a.baseline_ns, a.current_ns, a.judgement),
            a.gates,
        )
        for a in c.aggregates
    ]
    if c.total is not None:
        rows.append(_verdict("total", "total", "", item(c.total.baseline_ns, c.total.current_ns, c.total.judgement)))
    return rows, VERDICT_COLUMNS


MODULE_LIKE = ("module", "pattern")
"""The aggregate kinds a DataFrame's ``module`` column names (a pattern's indices folded: ``transformer.h.*.mlp``)."""


def _module_of(kind: str, name: str) -> str:
    return name if kind in MODULE_LIKE else ""


class _Judged(JudgementJSON):
    """A comparison's decision with its item's times, as ``verdict_rows`` makes its rows from it."""

    baseline_ns: float
    current_ns: float


def _verdict(
    kind: str, name: str, module: str, item: JudgedJSON | _Judged, gates: bool = True, *, direction: str | None = None
) -> dict[str, Any]:
    """A decision's row from its plain data (a report's node, aggregate or total). An aggregate's direction is
    the one its name ends with, in a training step (``layer3.0 backward``)."""
    if direction is None:
        head, _, last = name.rpartition(" ")
        direction = last if head and last in DIRECTIONS else ""
        module = head if direction and kind in MODULE_LIKE else module
    return {
        "kind": kind,
        "name": name,
        "direction": direction,
        "module": module,
        "baseline_us": item["baseline_ns"] / 1e3,
        "current_us": item["current_ns"] / 1e3,
        "ratio": item["ratio"],
        "band": item["band"],
        "band_source": item["band_source"],
        "verdict": item["verdict"],
        "confirmed": item["confirmed"],
        "gates": gates,
        "reason": item["reason"],
    }


READ_BY = ("node", "verdict", "module", "op")


def read_report(path: str | Path, by: str = "node") -> pd.DataFrame:
    """A JSON report written by ``--fxprof-report`` as one DataFrame over all its profiles (``test_id`` and
    ``key`` first): its nodes (``by="node"``), decisions (``"verdict"``) or roll-ups (``"module"``, ``"op"``)."""
    import pandas as pd

    if by not in READ_BY:
        raise ValueError(f"by must be one of {', '.join(READ_BY)}, not {by!r}")
    again = "write it again with pytest --fxprof --fxprof-report PATH"
    try:
        data = loads(read_text(Path(path), REPORT_MAX_BYTES))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); {again}") from None
    except TooLargeError as exc:
        raise ValueError(f"{path}: too large to be a report ({exc})") from None
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}; {again}") from None
    if not isinstance(data, dict) or "report_version" not in data or not isinstance(data.get("profiles"), list):
        raise ValueError(f"{path} is not a report written by --fxprof-report (it has no report_version)")
    profiles = cast("list[ProfileReportJSON]", data["profiles"])
    try:
        rows = [{"test_id": p["test_id"], "key": p["key"], **row} for p in profiles for row in _report_rows(p, by)]
    except (KeyError, TypeError, ZeroDivisionError) as exc:
        raise ValueError(f"{path}: a profile lacks a field or has the wrong type ({exc!r}); {again}") from None
    columns = {"node": NODE_COLUMNS, "verdict": VERDICT_COLUMNS}.get(by, ROLLUP_COLUMNS)
    return pd.DataFrame(rows, columns=["test_id", "key", *columns])


def _report_rows(p: ProfileReportJSON, by: str) -> list[dict[str, Any]]:
    if by == "node":
        return [
            {
                "key": n["key"],
                "node": n["name"],
                "direction": n.get("direction", FORWARD),  # older reports have none
                "forward": n.get("forward", ""),
                "op": n["op"],
                "target": n["target"],
                "module": n["module"],
                "source": n.get("source", ""),
                "shape": n.get("shape", ""),
                "layout": n.get("layout", ""),
                "median_us": n["current_ns"] / 1e3,
                "spread": n["spread"],
                "share": n["share"],
                "samples": len(n.get("samples_ns", [])),
                "flops": n.get("flops"),
                "gflops_per_s": _giga(n.get("flops_per_s")),
                "host_us": _us(n.get("host_ns")),
                "memory_bytes": n.get("memory_bytes"),
                "peak_bytes": n.get("peak_bytes"),
                "baseline_us": _us(n.get("baseline_ns")),
                "ratio": n.get("ratio"),
                "band": n.get("band"),
                "verdict": n.get("verdict"),
                "gates": n.get("gates"),
            }
            for n in p["nodes"]
        ]
    if by == "verdict":
        out = [
            _verdict("node", n["name"], n["module"], n, n["gates"], direction=n.get("direction", FORWARD))
            for n in p["nodes"]
            if "ratio" in n
        ]
        out += [
            _verdict(a["kind"], a["name"], _module_of(a["kind"], a["name"]), a, a.get("gates", True))
            for a in p.get("aggregates", [])
        ]
        if "ratio" in p["total"]:
            out.append(_verdict("total", "total", "", p["total"]))
        return out
    return [
        {
            "by": by,
            "name": r["name"],
            "direction": r.get("direction", ""),
            "depth": r["depth"],
            "nodes": r["nodes"],
            "median_us": r["current_ns"] / 1e3,
            "spread": r["spread_ns"] / r["current_ns"] if r["current_ns"] else 0.0,
            "share": r["share"],
            "flops": r["flops"],
            "gflops_per_s": r["flops"] / r["current_ns"] if r["flops"] and r["current_ns"] else None,
        }
        for r in p["rollups"][by]
    ]
