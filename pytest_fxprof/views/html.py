"""The self-contained HTML report (``--fxprof-html``): one file with every profiled test of a run.

A view of ``report.profile_report``'s dicts; decides nothing. Its style and script (``assets/``) are inlined and
the profiles ride along as JSON (``id="fxprof-data"``), from which the script draws each profile's chart and node
table; the rest is plain HTML, readable without the script. Must not import torch or pytest.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict, cast

from pytest_fxprof.records.units import fmt_ns
from pytest_fxprof.records.verdicts import Status
from pytest_fxprof.store.files import write_atomic
from pytest_fxprof.views.html_format import (
    badge,
    counted,
    esc,
    facts,
    fmt_band,
    fmt_pct,
    fmt_ratio,
    name_list,
    verdict_badge,
)
from pytest_fxprof.views.html_tree import module_tree, op_table
from pytest_fxprof.views.judged_json import AggregateJSON, FlagJSON, LeaderJSON, NodeJSON
from pytest_fxprof.views.render import graphs_text
from pytest_fxprof.views.report import GraphsJSON, ProfileReportJSON, against_of, blame_lines_of, busy_line

TITLE = "pytest-fxprof report"
CHART_ROWS = 40
"""Nodes a chart shows before its "show all" toggle (every node is drawn; the rest are hidden)."""
TABLE_ROWS = 500
"""Rows a node table shows before its "show all" button (sorting and filtering go over every node)."""
REQUIRED = {"test_id": str, "key": str, "status": str, "nodes": list, "total": Mapping, "environment": Mapping}
ENVIRONMENT_FIELDS = ("torch", "python", "platform", "cpu", "threads", "device", "allocator", "clock", "engine")

# A tone per status and verdict: the one colour vocabulary of the page (CSS classes ``t-<tone>``).
WARN = "warn"
STATUS_TONES: dict[str, str] = {
    Status.PASS: "good",
    Status.UNCHANGED: "good",
    Status.REGRESSION: "bad",
    Status.RECORDED: "neutral",
    Status.NOT_RECORDED: "neutral",
    Status.UNMEASURED: "neutral",
}
_JSON_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def status_tone(status: str) -> str:
    """The colour of a profile's status: regression red, pass green, recorded neutral, anything else amber."""
    return STATUS_TONES.get(status, WARN)


def section_id(test_id: str, key: str) -> str:
    """The ``id`` of a profile's section: readable, unique per (test id, key), safe in a URL fragment."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", f"{test_id}-{key}").strip("-")[:80]
    digest = hashlib.sha256(f"{test_id}\0{key}".encode()).hexdigest()[:8]
    return f"fxprof-{slug}-{digest}"


# Input -------------------------------------------------------------------------------------------


_FIX = "pass the dicts that report.profile_report makes (ProfileRecord['report'])"


def _checked(profiles: Sequence[ProfileReportJSON]) -> list[ProfileReportJSON]:
    """The profiles sorted for display; ``ValueError`` naming the first one that is not a profile report."""
    out = []
    for i, p in enumerate(profiles):
        at = f"profile {i} of the HTML report"
        if not isinstance(p, Mapping):
            raise ValueError(f"{at} is a {type(p).__name__}, not a profile report: {_FIX}")
        for name, kind in REQUIRED.items():
            if not isinstance(p.get(name), kind):
                raise ValueError(f"{at} ({p.get('test_id', '?')!r}) has no valid {name!r} field: {_FIX}")
        for j, n in enumerate(p["nodes"]):
            if not (isinstance(n, Mapping) and isinstance(n.get("key"), str) and _number(n.get("current_ns"))):
                raise ValueError(f"node {j} of {at} ({p['test_id']!r}) has no valid 'key' and 'current_ns': {_FIX}")
        out.append(cast("ProfileReportJSON", dict(p)))
    return sorted(out, key=lambda p: (STATUS_ORDER.get(p["status"], len(STATUS_ORDER)), p["test_id"], p["key"]))


STATUS_ORDER: dict[str, int] = {
    Status.REGRESSION: 0,
    Status.UNDECIDED: 1,
    Status.MISSING: 2,
    Status.MISMATCH: 3,
    Status.NOT_RECORDED: 4,
}
"""Profiles that need a reader's attention come first; the rest follow in test order."""


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _data_json(data: Mapping[str, Any]) -> str:
    """``data`` as JSON that cannot end its script tag: ``<``, ``>`` and ``&`` are written as escapes."""
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"the HTML report's data holds a value JSON cannot store (NaN, infinity or a non-JSON type): {exc}"
        ) from exc
    return text.translate(_JSON_ESCAPES)


# The header --------------------------------------------------------------------------------------


def _counts(profiles: Sequence[ProfileReportJSON]) -> str:
    counts = Counter(p["status"] for p in profiles)
    first: list[str] = [Status.REGRESSION, Status.UNDECIDED, Status.PASS]
    order = sorted(counts, key=lambda s: (first.index(s) if s in first else len(first), s))
    return " ".join(badge(f"{counts[s]} {s}", status_tone(s)) for s in order)


def _header(mode: str, profiles: Sequence[ProfileReportJSON], title: str) -> str:
    when = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %z")
    against = f"Check against {against_of(profiles) or 'a revision'}, in pairs of old and new processes"
    what = {"check": "Check against baselines", "update": "Baselines recorded", "against": against}.get(
        mode, f"Mode {mode}"
    )
    parts = [
        f"<h1>{esc(title)}</h1>",
        f'<p class="run">{esc(what)} &middot; {counted(len(profiles), "profile")} &middot; generated {esc(when)}</p>',
    ]
    if profiles:
        env = profiles[0]["environment"]
        parts.append(f'<p class="counts">{_counts(profiles)}</p>')
        parts.append(facts([(f, str(env.get(f, ""))) for f in ENVIRONMENT_FIELDS]))
        links = "".join(
            f'<li><a href="#{section_id(p["test_id"], p["key"])}">{badge(p["status"], status_tone(p["status"]))} '
            f'<span class="tid">{esc(p["test_id"])}</span> <span class="dim">[{esc(p["key"])}]</span></a></li>'
            for p in profiles
        )
        parts.append(f'<nav class="toc"><ul>{links}</ul></nav>')
    else:
        parts.append("<p>No test was profiled in this run.</p>")
    return f'<header class="fxprof-header">{"".join(parts)}</header>'


# One profile -------------------------------------------------------------------------------------


def _capture_text(capture: Mapping[str, Any]) -> str:
    """The capture method and its graphs; a compiled model's kernels, graph breaks and compile time."""
    if not capture:
        return ""
    if capture.get("method") == "inductor" and capture.get("detail"):
        return str(capture["detail"])
    return f"{capture.get('method', '')} ({counted(capture.get('graphs', 1), 'graph')})"


def _meta(p: ProfileReportJSON, first_env: Mapping[str, Any]) -> str:
    capture, protocol = p.get("capture") or {}, p.get("protocol") or {}
    runs = (
        f"{protocol.get('passes')} passes after {protocol.get('warmup')} warm-up, "
        f"{counted(protocol.get('threads'), 'thread')}, {counted(protocol.get('processes'), 'process', 'es')}"
        if protocol
        else ""
    )
    # a profile from another environment was not compared: it has no speed factor or measurements to show
    compared = not p.get("mismatches") and not p.get("against")
    pairs = [
        ("nodes", str(len(p["nodes"]))),
        ("capture", _capture_text(capture)),
        ("protocol", runs),
        ("profiled in", f"{p['seconds']:.1f} s" if isinstance(p.get("seconds"), int | float) else ""),
        ("against", str(p.get("against") or "")),
        ("pairs", str(p["pairs"]) if p.get("pairs") else ""),
        ("speed factor", fmt_ratio(p.get("speed_factor")) if compared else ""),
        ("measurements", str(p["measurements"]) if p.get("measurements") and compared else ""),
        ("profiler overhead", fmt_ratio(p.get("overhead"))),
    ]
    env = p["environment"]
    if env != first_env:
        pairs += [(f, str(env.get(f, ""))) for f in ENVIRONMENT_FIELDS if env.get(f) != first_env.get(f)]
    return facts(pairs)


class _Faster(TypedDict):
    """An item found faster beyond its band, as a list of flags shows it (``_faster``)."""

    kind: str
    name: str
    module: NotRequired[str]
    ratio: float | None
    led_by: NotRequired[list[LeaderJSON]]


def _flag_item(flag: FlagJSON | _Faster, p: ProfileReportJSON) -> str:
    """One line of what failed (or warned about) a profile: the item, its ratio, reason and leading nodes."""
    kind, name = flag.get("kind", ""), flag.get("name", "")
    reason = ""
    if kind == "node":
        nodes = {(n.get("name", ""), n.get("module", "")): n for n in p["nodes"]}
        n: NodeJSON | dict[str, str] = nodes.get((name, flag.get("module", "")), {})
        where = n.get("module") or "<root>"
        if n.get("direction", "forward") != "forward":  # a training step's backward or optimizer node
            where += f" {n['direction']}"
        what = f'node <b>{esc(name)}</b> <span class="dim">({esc(n.get("target", ""))} in {esc(where)}'
        what += f"{', ' + esc(n['source']) if n.get('source') else ''})</span>"
        reason = n.get("reason", "")
    elif kind == "total":
        what, reason = "<b>total</b>", p["total"].get("reason", "")
    else:
        aggregates = {(a.get("kind", ""), a.get("name", "")): a for a in p.get("aggregates", [])}
        a: AggregateJSON | dict[str, str] = aggregates.get((kind, name), {})
        what = f"every <b>{esc(name)}</b> node" if kind == "op" else f"{esc(kind or 'module')} <b>{esc(name)}</b>"
        reason = a.get("reason", "")
    line = f"{what} {esc(fmt_ratio(flag.get('ratio')))}"
    if reason:
        line += f' <span class="reason">{esc(reason)}</span>'
    leaders = flag.get("led_by") or []
    if leaders:
        shown = "; ".join(
            f"{esc(ld.get('name', ''))} {esc(fmt_ns(ld.get('baseline_ns', 0)))} \N{RIGHTWARDS ARROW} "
            f"{esc(fmt_ns(ld.get('current_ns', 0)))}"
            for ld in leaders
        )
        line += f'<div class="led">most of it: {shown}</div>'
    return f"<li>{line}</li>"


def _flag_list(title: str, flags: Sequence[FlagJSON | _Faster], p: ProfileReportJSON, tone: str) -> str:
    if not flags:
        return ""
    items = "".join(_flag_item(f, p) for f in flags)
    return f'<div class="flags t-{tone}"><h3>{esc(title)}</h3><ul>{items}</ul></div>'


def _faster(p: ProfileReportJSON) -> list[_Faster]:
    """Nodes, aggregates and the total found faster beyond their band, as flag items (nodes large enough to
    gate alone, as the gate reports them)."""
    out: list[_Faster] = [
        {"kind": "node", "name": n["name"], "module": n.get("module", ""), "ratio": n.get("ratio")}
        for n in p["nodes"]
        if n.get("verdict") == "faster" and n.get("gates")
    ]
    out += [
        {"kind": a["kind"], "name": a["name"], "ratio": a.get("ratio")}
        for a in p.get("aggregates", [])
        if a.get("verdict") == "faster"
    ]
    if p["total"].get("verdict") == "faster":
        out.append({"kind": "total", "name": "total", "ratio": p["total"].get("ratio")})
    return out


def _structure(p: ProfileReportJSON) -> str:
    """Why a profile was not compared, or how its graph changed since the baseline (against a revision: from it)."""
    parts = []
    since = f"compared with {p['against']}" if p.get("against") else "since the baseline"
    if p.get("noisy"):
        judged = any("verdict" in n for n in p.get("nodes", []))  # a busy profile judged nothing
        what = "these items that gate were too noisy to decide" if judged else "too noisy to decide, so not judged"
        parts.append(f"<h3>Undecided: {what}</h3><p>{esc(p['noisy'])}</p>")
    busy = busy_line(p)
    if busy:
        parts.append(f'<p class="busy"><b>{esc(busy)}</b></p>')
    if p.get("mismatches"):
        items = "".join(f"<li>{esc(m)}</li>" for m in p["mismatches"])
        parts.append(f"<h3>Recorded in another environment, so not compared</h3><ul>{items}</ul>")
    graphs: GraphsJSON | dict[str, int] = p.get("graphs") or {}
    if graphs.get("baseline") != graphs.get("current"):
        parts.append(f"<p><b>{esc(graphs_text(graphs['baseline'], graphs['current']))}</b> {esc(since)}</p>")
    changes: tuple[Literal["added"], Literal["removed"]] = ("added", "removed")
    for field in changes:
        refs = p.get(field) or []
        if refs:
            names = name_list([f"{r.get('name', '')} ({r.get('target', '')})" for r in refs])
            parts.append(f"<p><b>{len(refs)} node(s) {field}</b> {esc(since)}: {esc(names)}</p>")
    return f'<div class="flags t-warn">{"".join(parts)}</div>' if parts else ""


def _total(p: ProfileReportJSON) -> str:
    t = p["total"]
    band = f"{fmt_band(t.get('band'))} ({t['band_source']})" if t.get("band_source") else fmt_band(t.get("band"))
    measured = ", ".join(fmt_ratio(r) for r in t.get("ratios", [])) if len(t.get("ratios", [])) > 1 else ""
    overheads = [t.get("overhead_before"), t.get("overhead_after")]  # the profiler's on each side
    overhead = " / ".join(fmt_ratio(o) if o is not None else "-" for o in overheads)
    pairs = [
        ("current", fmt_ns(t.get("current_ns", 0))),
        ("baseline", fmt_ns(t["baseline_ns"]) if "baseline_ns" in t else ""),
        ("ratio", fmt_ratio(t.get("ratio"))),
        ("band", band),
        ("per pair" if p.get("against") else "measurements", measured),
        ("machine factor", "" if p.get("against") else fmt_ratio(t.get("machine_factor"))),
        ("instrumented pass", fmt_ns(t["instrumented_ns"]) if t.get("instrumented_ns") else ""),
        ("page faults a call", f"{t['faults']:,}" if t.get("faults") is not None else ""),
        ("profiler overhead", overhead if overheads != [None, None] else ""),
        ("allocator", str(p["environment"].get("allocator", ""))),
    ]
    verdict = verdict_badge(t) if t.get("verdict") else ""
    reason = f' <span class="reason">{esc(t["reason"])}</span>' if t.get("reason") else ""
    notes = "".join(f"<p>{esc(str(t[k]))}</p>" for k in ("states", "overhead_note") if t.get(k))
    return f'<div class="total"><h3>Total (the plain call) {verdict}{reason}</h3>{facts(pairs)}{notes}</div>'


def _hints(p: ProfileReportJSON) -> str:
    hints = p.get("hints") or []
    if not hints:
        return ""
    items = []
    for h in hints:
        stake = f"{fmt_ns(h.get('time_ns', 0))} at stake ({fmt_pct(h.get('share'))} of the model)"
        nodes = f"; nodes: {name_list(list(h.get('nodes', [])))}" if h.get("nodes") else ""
        items.append(
            f'<li><span class="kind">{esc(h.get("kind", ""))}</span> {esc(h.get("message", ""))} '
            f'<span class="dim">{esc(stake + nodes)}</span></li>'
        )
    return f'<div class="hints"><h3>Hints</h3><ul>{"".join(items)}</ul></div>'


def _chart_block(p: ProfileReportJSON) -> str:
    compared = any("verdict" in n for n in p["nodes"])
    legend = f'<span class="sw dot t-{"good" if compared else "none"}"></span> current time, its whisker the spread'
    if compared:
        legend += (
            ' <span class="sw tick"></span> baseline <span class="sw band"></span> tolerated range (baseline '
            "\N{MULTIPLICATION SIGN} the drift its test divides out, up to its band)"
        )
    order = (
        "worst first: what failed, what was warned about, then by the time each lost" if compared else "slowest first"
    )
    return (
        f'<h3>Nodes, {order}</h3><p class="legend">{legend}</p>'
        f'<div class="chart-wrap"><svg class="fxprof-chart" role="img" aria-label="time per node" width="1100" '
        'height="0"></svg></div>'
    )


def _section(index: int, p: ProfileReportJSON, first_env: Mapping[str, Any]) -> str:
    tone = status_tone(p["status"])
    try:
        flagged = _where(p) + _flag_list("Failed by", p.get("flagged") or [], p, "bad")
        warned = _flag_list("Warnings", p.get("warned") or [], p, WARN)
        faster = _flag_list("Faster than the baseline beyond the band", _faster(p), p, WARN)
        body = (
            f"{_meta(p, first_env)}{flagged}{_structure(p)}{warned}{faster}{_total(p)}{_hints(p)}"
            f'{_chart_block(p)}{module_tree(p)}{op_table(p)}<h3>All nodes</h3><div class="fxprof-nodes"></div>'
        )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"the profile of {p['test_id']} [{p['key']}] in the HTML report has a field of the wrong shape "
            f"({type(exc).__name__}: {exc}): {_FIX}"
        ) from exc
    return (
        f'<section class="fxprof-profile t-{tone}" id="{section_id(p["test_id"], p["key"])}" data-index="{index}">'
        f'<h2>{badge(p["status"], tone)} <span class="tid">{esc(p["test_id"])}</span> '
        f'<span class="dim">[{esc(p["key"])}]</span></h2>{body}</section>'
    )


def _where(p: ProfileReportJSON) -> str:
    """What a failed profile leads with (``report.blame_lines_of``): where the time went, above what failed it."""
    lines = blame_lines_of(p)
    if not lines:
        return ""
    rest = "".join(f"<li>{esc(line)}</li>" for line in lines[1:])
    listed = f"<ul>{rest}</ul>" if rest else ""
    return f'<div class="flags t-bad where"><h3>Where</h3><p>{esc(lines[0])}</p>{listed}</div>'


def _unused(unused: Sequence[str]) -> str:
    if not unused:
        return ""
    items = "".join(f"<li>{esc(u)}</li>" for u in sorted(unused))
    return f'<section class="unused"><h2>Unused baselines</h2><ul>{items}</ul></section>'


# The page ----------------------------------------------------------------------------------------


def render_html(mode: str, profiles: Sequence[ProfileReportJSON], unused: Sequence[str], title: str = TITLE) -> str:
    """The report page of a run: ``profiles`` are ``profile_report`` dicts, shown regressions and other problems
    first, then by (test id, key)."""
    shown = _checked(profiles)
    data = _data_json({"mode": mode, "title": title, "profiles": shown, "unused_baselines": sorted(unused)})
    first_env = shown[0]["environment"] if shown else {}
    sections = "".join(_section(i, p, first_env) for i, p in enumerate(shown))
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>\n{asset('report.css')}</style>\n</head>\n<body>\n"
        f"{_header(mode, shown, title)}\n"
        '<noscript><p class="noscript">The charts and node tables need JavaScript.</p></noscript>\n'
        f"<main>{sections}{_unused(unused)}</main>\n"
        f'<script type="application/json" id="fxprof-data">{data}</script>\n'
        f'<script data-chart-rows="{CHART_ROWS}" data-table-rows="{TABLE_ROWS}">\n{asset("report.js")}</script>\n'
        "</body>\n</html>\n"
    )


@functools.cache
def asset(name: str) -> str:
    """One of the page's own files (``report.css``, ``report.js``), inlined into every page."""
    return resources.files("pytest_fxprof.views").joinpath("assets", name).read_text(encoding="utf-8")


def write_html(
    path: Path, mode: str, profiles: Sequence[ProfileReportJSON], unused: Sequence[str], title: str = TITLE
) -> None:
    """Write the report page to ``path`` atomically (a reader sees the old page or the new one, never half)."""
    write_atomic(path, render_html(mode, profiles, unused, title))
