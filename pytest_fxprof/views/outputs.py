"""The end of a run's report files, and the verdict each test carries on its pytest report.

Owns which view an option writes and the plain values put in ``user_properties`` (what junitxml writes as
properties and xdist sends to its controller). Every view reads the same per-profile records. Must not import
torch or pytest; the views' own modules are imported only when their option is given.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_fxprof.views.report import AgainstJSON, ProfileRecord, worst_nodes

PropertyValue = str | int | float
PROPERTY_PREFIX = "fxprof"


def _profiles(records: Sequence[ProfileRecord]) -> list[dict[str, Any]]:
    return [r["report"] for r in sorted(records, key=lambda r: (r["test_id"], r["key"]))]


def write_view(
    name: str,
    path: Path,
    mode: str,
    records: Sequence[ProfileRecord],
    unused: Sequence[str],
    *,
    environ: Mapping[str, str] = os.environ,
    against: AgainstJSON | None = None,
) -> list[Path]:
    """Write the view ``name`` (an option's name: ``report``, ``html``, ``trace``, ``markdown`` or
    ``benchmark_json``) of the run's records; return the files written. ``against``: the old side of a run against
    a revision, which the report records at its top."""
    profiles = _profiles(records)
    if name == "report":
        from pytest_fxprof.views.report import write_report

        write_report(path, mode, records, unused, against=against)
        return [path]
    if name == "html":
        from pytest_fxprof.views.html import write_html

        write_html(path, mode, profiles, unused)
        return [path]
    if name == "trace":
        from pytest_fxprof.views.trace import write_traces

        return write_traces(path, profiles)
    if name == "markdown":
        from pytest_fxprof.views.markdown import markdown_summary, write_markdown

        return write_markdown(path, markdown_summary(mode, profiles, unused), environ)
    if name == "benchmark_json":
        from pytest_fxprof.views.benchjson import write_benchmark_json

        write_benchmark_json(path, profiles)
        return [path]
    raise ValueError(f"no report view named {name!r}")


def user_properties(records: Iterable[ProfileRecord]) -> list[tuple[str, PropertyValue]]:
    """One test's verdicts as ``(name, value)`` pairs of plain values, per ``fxprof`` call:
    ``fxprof[KEY].status`` and, where it was compared, the total's ratio, the worst node, what failed it,
    and the number of hints."""
    out: list[tuple[str, PropertyValue]] = []
    for record in sorted(records, key=lambda r: r["key"]):
        profile = record["report"]
        prefix = f"{PROPERTY_PREFIX}[{record['key']}]"
        out.append((f"{prefix}.status", record["status"]))
        out.append((f"{prefix}.time_ns", int(profile["total"]["current_ns"])))
        if "ratio" in profile["total"]:
            out.append((f"{prefix}.total_ratio", float(profile["total"]["ratio"])))
        if profile.get("against"):  # against a revision: which, in how many pairs, the total's ratio in each
            out.append((f"{prefix}.against", str(profile["against"])))
            out.append((f"{prefix}.pairs", int(profile["pairs"])))
            ratios = profile["total"].get("ratios", [])
            out.append((f"{prefix}.pair_ratios", " ".join(f"{r:.4f}" for r in ratios)))
        compared = worst_nodes(profile["nodes"], 1)
        if compared:
            (worst,) = compared
            out.append((f"{prefix}.worst_node", str(worst["name"])))
            out.append((f"{prefix}.worst_ratio", float(worst["ratio"])))
        flagged = profile.get("flagged", [])
        if flagged:
            out.append((f"{prefix}.failed_by", "; ".join(_flag_text(f) for f in flagged)))
        hints = profile.get("hints", [])
        if hints:
            out.append((f"{prefix}.hints", len(hints)))
    return out


def _flag_text(flag: Mapping[str, Any]) -> str:
    """``node layer3_0_conv2 x1.49``, ``module layer3.0 x1.27``, ``total x1.12``."""
    what = "total" if flag["kind"] == "total" else f"{flag['kind']} {flag['name']}"
    return f"{what} x{flag['ratio']:.2f}"
