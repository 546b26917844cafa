"""The end of a run's report files, and the verdict each test carries on its pytest report.

Owns which view an option writes and the plain values put in ``user_properties`` (what junitxml writes as
properties and xdist sends to its controller). Every view reads the same per-profile records. Must not import
torch or pytest; the views' own modules are imported only when their option is given.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_fxprof.views.judged_json import FlagJSON
from pytest_fxprof.views.report import AgainstJSON, ProfileRecord, ProfileReportJSON, worst_nodes

PropertyValue = str | int | float
PROPERTY_PREFIX = "fxprof"


def _profiles(records: Sequence[ProfileRecord]) -> list[ProfileReportJSON]:
    return [r["report"] for r in sorted(records, key=lambda r: (r["test_id"], r["key"]))]


@dataclass(frozen=True)
class View:
    """A report file written at the end of a run with ``--fxprof`` or ``--fxprof-update`` (or against a revision),
    from the run's records: its option ``--fxprof-NAME`` takes ``metavar``."""

    metavar: str
    help: str
    write: Callable[[Path, str, Sequence[ProfileRecord], Sequence[str], Mapping[str, str]], list[Path]]
    """``(path, mode, records, unused, environ)`` -> the files written; imports its module only when called."""


def _html(path: Path, mode: str, records: Sequence[ProfileRecord], unused: Sequence[str], _: object) -> list[Path]:
    from pytest_fxprof.views.html import write_html

    write_html(path, mode, _profiles(records), unused)
    return [path]


def _trace(path: Path, mode: str, records: Sequence[ProfileRecord], unused: Sequence[str], _: object) -> list[Path]:
    from pytest_fxprof.views.trace import write_traces

    return write_traces(path, _profiles(records))


def _markdown(
    path: Path, mode: str, records: Sequence[ProfileRecord], unused: Sequence[str], environ: Mapping[str, str]
) -> list[Path]:
    from pytest_fxprof.views.markdown import markdown_summary, write_markdown

    return write_markdown(path, markdown_summary(mode, _profiles(records), unused), environ)


def _benchmark_json(
    path: Path, mode: str, records: Sequence[ProfileRecord], unused: Sequence[str], _: object
) -> list[Path]:
    from pytest_fxprof.views.benchjson import write_benchmark_json

    write_benchmark_json(path, _profiles(records))
    return [path]


VIEWS: dict[str, View] = {
    "html": View(
        "PATH", "Write one self-contained HTML report of every profiled test (charts, module tree, node table)", _html
    ),
    "trace": View(
        "DIR", "Write a Chrome trace event file per fixture call to DIR (opens in Perfetto or chrome://tracing)", _trace
    ),
    "markdown": View(
        "PATH",
        "Write a Markdown summary for a pull-request comment; also appended to $GITHUB_STEP_SUMMARY when it is set",
        _markdown,
    ),
    "benchmark_json": View(
        "PATH",
        "Write the results in pytest-benchmark's JSON format (an entry per fixture call and per node, with samples)",
        _benchmark_json,
    ),
}
"""The report views by option name (``--fxprof-html``, ...): a new view is its module and one entry here."""


def write_view(
    name: str,
    path: Path,
    mode: str,
    records: Sequence[ProfileRecord],
    unused: Sequence[str],
    *,
    environ: Mapping[str, str] = os.environ,
    against: AgainstJSON | None = None,
    time: Mapping[str, float] | None = None,
) -> list[Path]:
    """Write the view ``name`` (``report``, the JSON report, or one of ``VIEWS``) of the run's records; return
    the files written. ``against``: the old side of a run against a revision, which the report records at its
    top, and ``time``, where the run's measuring time went (``measure.sampling.Spent``)."""
    if name == "report":
        from pytest_fxprof.views.report import write_report

        write_report(path, mode, records, unused, against=against, time=time)
        return [path]
    if name not in VIEWS:
        raise ValueError(f"no report view named {name!r}")
    return VIEWS[name].write(path, mode, records, unused, environ)


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
            if "ratio" in worst:  # else a node the change added, which has no ratio
                out.append((f"{prefix}.worst_ratio", float(worst["ratio"])))
        flagged = profile.get("flagged", [])
        if flagged:
            out.append((f"{prefix}.failed_by", "; ".join(_flag_text(f) for f in flagged)))
        hints = profile.get("hints", [])
        if hints:
            out.append((f"{prefix}.hints", len(hints)))
    return out


def _flag_text(flag: FlagJSON) -> str:
    """``node layer3_0_conv2 x1.49``, ``module layer3.0 x1.27``, ``total x1.12``."""
    what = "total" if flag["kind"] == "total" else f"{flag['kind']} {flag['name']}"
    return f"{what} x{flag['ratio']:.2f}"
