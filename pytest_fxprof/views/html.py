"""The self-contained HTML report (``--fxprof-html``): one file with every profiled test of a run.

Owns the page: its markup here, its style and script in ``assets/report.css`` and ``assets/report.js``
(package files, so that editors and linters see them for what they are). A view of the profile reports that
``report.profile_report`` makes; decides nothing. The page needs no network: its style and script are
inlined, and the profiles ride along as JSON in a ``<script type="application/json" id="fxprof-data">`` tag,
from which the script draws each profile's chart and node table (how many rows it shows first comes in the
script tag's ``data-chart-rows`` and ``data-table-rows``). The header, each profile's verdict, failures,
warnings, total, hints and module tree are plain HTML, readable without the script.

Must not import torch or pytest.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict, cast

from pytest_fxprof.records.units import fmt_ns, fmt_rate
from pytest_fxprof.records.verdicts import Status
from pytest_fxprof.store.files import write_atomic
from pytest_fxprof.views.render import graphs_text
from pytest_fxprof.views.report import (
    AggregateJSON,
    FlagJSON,
    GraphsJSON,
    LeaderJSON,
    NodeJSON,
    ProfileReportJSON,
    RollupJSON,
    TotalJSON,
    against_of,
    blame_lines_of,
    busy_line,
    verdict_tone,
)

TITLE = "pytest-fxprof report"
CHART_ROWS = 40
"""Nodes a chart shows before its "show all" toggle (every node is drawn; the rest are hidden)."""
TABLE_ROWS = 500
"""Rows a node table shows before its "show all" button (sorting and filtering go over every node)."""
NAMES_SHOWN = 6
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


def _checked(profiles: Sequence[ProfileReportJSON]) -> list[ProfileReportJSON]:
    """The profiles sorted for display; ``ValueError`` naming the first one that is not a profile report."""
    out = []
    for i, p in enumerate(profiles):
        if not isinstance(p, Mapping):
            raise ValueError(
                f"profile {i} of the HTML report is a {type(p).__name__}, not a profile report: "
                "pass the dicts that report.profile_report makes (ProfileRecord['report'])"
            )
        for name, kind in REQUIRED.items():
            if not isinstance(p.get(name), kind):
                raise ValueError(
                    f"profile {i} of the HTML report ({p.get('test_id', '?')!r}) has no valid {name!r} field: "
                    "pass the dicts that report.profile_report makes (ProfileRecord['report'])"
                )
        for j, n in enumerate(p["nodes"]):
            if not (isinstance(n, Mapping) and isinstance(n.get("key"), str) and _number(n.get("current_ns"))):
                raise ValueError(
                    f"node {j} of profile {i} of the HTML report ({p['test_id']!r}) has no valid 'key' and "
                    "'current_ns': pass the dicts that report.profile_report makes (ProfileRecord['report'])"
                )
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


# Formatting --------------------------------------------------------------------------------------


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _ratio(r: float | None) -> str:
    return "" if r is None else f"x{r:.2f}"


def _band(b: float | None) -> str:
    return "" if b is None else f"+{b:.0%}"


def _pct(x: float | None, digits: int = 1) -> str:
    return "" if x is None else f"{x:.{digits}%}"


def _count(n: object, noun: str, plural: str = "s") -> str:
    return f"{n} {noun}{'' if n == 1 else plural}"


def _badge(text: str, tone: str) -> str:
    return f'<span class="badge t-{tone}">{_e(text)}</span>'


def _verdict_badge(judged: AggregateJSON | TotalJSON) -> str:
    """The verdict of a judged item (an aggregate or the total) in its colour."""
    verdict = judged.get("verdict")
    return _badge(str(verdict or ""), verdict_tone(verdict, gates=True, confirmed=judged.get("confirmed")))


def _names(names: Sequence[str], limit: int = NAMES_SHOWN) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", \N{HORIZONTAL ELLIPSIS} {len(names) - limit} more" if len(names) > limit else "")


def _facts(pairs: Sequence[tuple[str, str]]) -> str:
    """A compact grid of label and value pairs; empty values are left out."""
    items = "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>" for k, v in pairs if v != "")
    return f'<dl class="facts">{items}</dl>'


# The header --------------------------------------------------------------------------------------


def _counts(profiles: Sequence[ProfileReportJSON]) -> str:
    counts: dict[str, int] = {}
    for p in profiles:
        counts[p["status"]] = counts.get(p["status"], 0) + 1
    first: list[str] = [Status.REGRESSION, Status.UNDECIDED, Status.PASS]
    order = sorted(counts, key=lambda s: (first.index(s) if s in first else len(first), s))
    return " ".join(_badge(f"{counts[s]} {s}", status_tone(s)) for s in order)


def _header(mode: str, profiles: Sequence[ProfileReportJSON], title: str) -> str:
    when = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %z")
    against = f"Check against {against_of(profiles) or 'a revision'}, in pairs of old and new processes"
    what = {"check": "Check against baselines", "update": "Baselines recorded", "against": against}.get(
        mode, f"Mode {mode}"
    )
    parts = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="run">{_e(what)} &middot; {_count(len(profiles), "profile")} &middot; generated {_e(when)}</p>',
    ]
    if profiles:
        env = profiles[0]["environment"]
        parts.append(f'<p class="counts">{_counts(profiles)}</p>')
        parts.append(_facts([(f, str(env.get(f, ""))) for f in ENVIRONMENT_FIELDS]))
        links = "".join(
            f'<li><a href="#{section_id(p["test_id"], p["key"])}">{_badge(p["status"], status_tone(p["status"]))} '
            f'<span class="tid">{_e(p["test_id"])}</span> <span class="dim">[{_e(p["key"])}]</span></a></li>'
            for p in profiles
        )
        parts.append(f'<nav class="toc"><ul>{links}</ul></nav>')
    else:
        parts.append("<p>No test was profiled in this run.</p>")
    return f'<header class="fxprof-header">{"".join(parts)}</header>'


# One profile -------------------------------------------------------------------------------------


SHARE_BAR_EM = 4.0
"""The width of a module's share bar at 100 % (the whole model), in em."""


def _capture_text(capture: Mapping[str, Any]) -> str:
    """The capture method and its graphs; a compiled model's kernels, graph breaks and compile time."""
    if not capture:
        return ""
    if capture.get("method") == "inductor" and capture.get("detail"):
        return str(capture["detail"])
    return f"{capture.get('method', '')} ({_count(capture.get('graphs', 1), 'graph')})"


def _meta(p: ProfileReportJSON, first_env: Mapping[str, Any]) -> str:
    capture, protocol = p.get("capture") or {}, p.get("protocol") or {}
    pairs = [
        ("nodes", str(len(p["nodes"]))),
        ("capture", _capture_text(capture)),
        (
            "protocol",
            f"{protocol.get('passes')} passes after {protocol.get('warmup')} warm-up, "
            f"{_count(protocol.get('threads'), 'thread')}, {_count(protocol.get('processes'), 'process', 'es')}"
            if protocol
            else "",
        ),
        ("profiled in", f"{p['seconds']:.1f} s" if isinstance(p.get("seconds"), int | float) else ""),
        # a profile from another environment was not compared: it has no speed factor or measurements to show
        ("against", str(p.get("against") or "")),
        ("pairs", str(p["pairs"]) if p.get("pairs") else ""),
        # a profile from another environment was not compared: it has no speed factor or measurements to show
        ("speed factor", "" if p.get("mismatches") or p.get("against") else _ratio(p.get("speed_factor"))),
        (
            "measurements",
            str(p["measurements"])
            if p.get("measurements") and not p.get("mismatches") and not p.get("against")
            else "",
        ),
        ("profiler overhead", _ratio(p.get("overhead"))),
    ]
    env = p["environment"]
    if env != first_env:
        pairs += [(f, str(env.get(f, ""))) for f in ENVIRONMENT_FIELDS if env.get(f) != first_env.get(f)]
    return _facts(pairs)


def _node_index(p: ProfileReportJSON) -> dict[tuple[str, str], NodeJSON]:
    return {(n.get("name", ""), n.get("module", "")): n for n in p["nodes"]}


def _aggregate_index(p: ProfileReportJSON) -> dict[tuple[str, str], AggregateJSON]:
    return {(a.get("kind", ""), a.get("name", "")): a for a in p.get("aggregates", [])}


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
        n: NodeJSON | dict[str, str] = _node_index(p).get((name, flag.get("module", "")), {})
        where = n.get("module") or "<root>"
        if n.get("direction", "forward") != "forward":  # a training step's backward or optimizer node
            where += f" {n['direction']}"
        what = f'node <b>{_e(name)}</b> <span class="dim">({_e(n.get("target", ""))} in {_e(where)}'
        what += f"{', ' + _e(n['source']) if n.get('source') else ''})</span>"
        reason = n.get("reason", "")
    elif kind == "total":
        what, reason = "<b>total</b>", p["total"].get("reason", "")
    else:
        a: AggregateJSON | dict[str, str] = _aggregate_index(p).get((kind, name), {})
        what = f"every <b>{_e(name)}</b> node" if kind == "op" else f"{_e(kind or 'module')} <b>{_e(name)}</b>"
        reason = a.get("reason", "")
    line = f"{what} {_e(_ratio(flag.get('ratio')))}"
    if reason:
        line += f' <span class="reason">{_e(reason)}</span>'
    leaders = flag.get("led_by") or []
    if leaders:
        shown = "; ".join(
            f"{_e(ld.get('name', ''))} {_e(fmt_ns(ld.get('baseline_ns', 0)))} \N{RIGHTWARDS ARROW} "
            f"{_e(fmt_ns(ld.get('current_ns', 0)))}"
            for ld in leaders
        )
        line += f'<div class="led">most of it: {shown}</div>'
    return f"<li>{line}</li>"


def _flag_list(title: str, flags: Sequence[FlagJSON | _Faster], p: ProfileReportJSON, tone: str) -> str:
    if not flags:
        return ""
    items = "".join(_flag_item(f, p) for f in flags)
    return f'<div class="flags t-{tone}"><h3>{_e(title)}</h3><ul>{items}</ul></div>'


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
        parts.append(f"<h3>Undecided: {what}</h3><p>{_e(p['noisy'])}</p>")
    busy = busy_line(p)
    if busy:
        parts.append(f'<p class="busy"><b>{_e(busy)}</b></p>')
    if p.get("mismatches"):
        items = "".join(f"<li>{_e(m)}</li>" for m in p["mismatches"])
        parts.append(f"<h3>Recorded in another environment, so not compared</h3><ul>{items}</ul>")
    graphs: GraphsJSON | dict[str, int] = p.get("graphs") or {}
    if graphs.get("baseline") != graphs.get("current"):
        parts.append(f"<p><b>{_e(graphs_text(graphs['baseline'], graphs['current']))}</b> {_e(since)}</p>")
    changes: tuple[Literal["added"], Literal["removed"]] = ("added", "removed")
    for field in changes:
        refs = p.get(field) or []
        if refs:
            names = _names([f"{r.get('name', '')} ({r.get('target', '')})" for r in refs])
            parts.append(f"<p><b>{len(refs)} node(s) {field}</b> {_e(since)}: {_e(names)}</p>")
    return f'<div class="flags t-warn">{"".join(parts)}</div>' if parts else ""


def _total(p: ProfileReportJSON) -> str:
    t = p["total"]
    band = f"{_band(t.get('band'))} ({t['band_source']})" if t.get("band_source") else _band(t.get("band"))
    measured = ", ".join(_ratio(r) for r in t.get("ratios", [])) if len(t.get("ratios", [])) > 1 else ""
    pairs = [
        ("current", fmt_ns(t.get("current_ns", 0))),
        ("baseline", fmt_ns(t["baseline_ns"]) if "baseline_ns" in t else ""),
        ("ratio", _ratio(t.get("ratio"))),
        ("band", band),
        ("per pair" if p.get("against") else "measurements", measured),
        ("machine factor", "" if p.get("against") else _ratio(t.get("machine_factor"))),
        ("instrumented pass", fmt_ns(t["instrumented_ns"]) if t.get("instrumented_ns") else ""),
        ("page faults a call", f"{t['faults']:,}" if t.get("faults") is not None else ""),
        ("profiler overhead", _overheads(t)),
        ("allocator", str(p["environment"].get("allocator", ""))),
    ]
    verdict = _verdict_badge(t) if t.get("verdict") else ""
    reason = f' <span class="reason">{_e(t["reason"])}</span>' if t.get("reason") else ""
    notes = "".join(f"<p>{_e(str(t[k]))}</p>" for k in ("states", "overhead_note") if t.get(k))
    return f'<div class="total"><h3>Total (the plain call) {verdict}{reason}</h3>{_facts(pairs)}{notes}</div>'


def _overheads(t: TotalJSON) -> str:
    """The profiler's overhead on each side, where both were compared ("" otherwise)."""
    before, after = t.get("overhead_before"), t.get("overhead_after")
    if before is None and after is None:
        return ""
    return " / ".join(_ratio(o) if o is not None else "-" for o in (before, after))


def _hints(p: ProfileReportJSON) -> str:
    hints = p.get("hints") or []
    if not hints:
        return ""
    items = []
    for h in hints:
        stake = f"{fmt_ns(h.get('time_ns', 0))} at stake ({_pct(h.get('share'))} of the model)"
        nodes = f"; nodes: {_names(list(h.get('nodes', [])))}" if h.get("nodes") else ""
        items.append(
            f'<li><span class="kind">{_e(h.get("kind", ""))}</span> {_e(h.get("message", ""))} '
            f'<span class="dim">{_e(stake + nodes)}</span></li>'
        )
    return f'<div class="hints"><h3>Hints</h3><ul>{"".join(items)}</ul></div>'


def _module_row(r: RollupJSON, verdict: AggregateJSON | None, branch: bool) -> str:
    name = str(r.get("name", ""))
    head, dot, tail = name.rpartition(".")
    label = f'<span class="dim">{_e(head + dot)}</span>{_e(tail)}' if dot else _e(name)
    flops, current = r.get("flops"), r.get("current_ns", 0)
    rate = fmt_rate(flops / (current / 1e9)) if flops and current else ""
    share = float(r.get("share") or 0.0)
    judged = ""
    if verdict is not None:
        judged = (
            f"{_verdict_badge(verdict)} "
            f"{_e(_ratio(verdict.get('ratio')))} <span class='dim'>band {_e(_band(verdict.get('band')))}</span>"
        )
        if verdict.get("reason"):
            judged = f'<span title="{_e(verdict["reason"])}">{judged}</span>'
    caret = '<span class="caret"></span>' if branch else '<span class="nocaret"></span>'
    return (
        f'<span class="mname" style="padding-left:{int(r.get("depth", 0)) * 1.1:.1f}em">{caret}{label}</span>'
        f'<span class="num">{_e(r.get("nodes", ""))}</span><span class="num">{_e(fmt_ns(current))}</span>'
        f'<span class="share"><span class="bar" style="width:{min(share, 1.0) * SHARE_BAR_EM:.2f}em"></span>'
        f'<span class="num">{_e(_pct(share))}</span></span><span class="num">{_e(rate)}</span>'
        f'<span class="judged">{judged}</span>'
    )


def _parent(name: str, depth: int) -> str | None:
    if depth == 0:
        return None
    return name.rpartition(".")[0] if depth > 1 else "<model>"


_DIRECTION_SHORT = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}


def _step_row(
    path: str, depth: int, by: Mapping[str, RollupJSON], verdicts: Mapping[str, AggregateJSON], kids: bool
) -> str:
    """One module of a training step: its forward and backward times side by side, and both verdicts."""
    head, dot, tail = path.rpartition(".")
    label = f'<span class="dim">{_e(head + dot)}</span>{_e(tail)}' if dot else _e(path)
    fw: RollupJSON | dict[str, int] = by.get("forward", {})
    bw: RollupJSON | dict[str, int] = by.get("backward", {})
    times = [int(fw.get("current_ns") or 0), int(bw.get("current_ns") or 0)]
    nodes = sum(int(r.get("nodes") or 0) for r in by.values())
    ratio = f"x{times[1] / times[0]:.2f}" if times[0] and times[1] else ""
    judged = []
    for direction in ("forward", "backward", "optimizer"):
        v = verdicts.get(f"{path} {direction}")
        if v is not None:
            badge = f"{_verdict_badge(v)} {_e(_ratio(v.get('ratio')))}"
            short = _DIRECTION_SHORT[direction]
            judged.append(f'<span title="{_e(v.get("reason") or direction)}">{short} {badge}</span>')
    caret = '<span class="caret"></span>' if kids else '<span class="nocaret"></span>'
    return (
        f'<span class="mname" style="padding-left:{depth * 1.1:.1f}em">{caret}{label}</span>'
        f'<span class="num">{nodes}</span><span class="num">{_e(fmt_ns(times[0]) if fw else "")}</span>'
        f'<span class="num">{_e(fmt_ns(times[1]) if bw else "")}</span><span class="num">{_e(ratio)}</span>'
        f'<span class="judged">{" ".join(judged)}</span>'
    )


def _step_module_tree(p: ProfileReportJSON, rows: Sequence[RollupJSON]) -> str:
    """A training step's module tree: each module once, its forward and backward times side by side."""
    verdicts = {a["name"]: a for a in p.get("aggregates", []) if a.get("kind") == "module"}
    by_path: dict[str, dict[str, RollupJSON]] = {}
    depth: dict[str, int] = {}
    for r in rows:
        if r.get("direction"):
            by_path.setdefault(str(r.get("path", "")), {})[str(r["direction"])] = r
            depth[str(r.get("path", ""))] = int(r.get("depth", 0))
    children: dict[str | None, list[str]] = {}
    for path in sorted(by_path, key=lambda q: -sum(int(r.get("current_ns") or 0) for r in by_path[q].values())):
        parent = _parent(path, depth[path])
        children.setdefault(parent if parent in by_path or parent is None else "<model>", []).append(path)

    def render(path: str) -> str:
        kids = children.get(path, [])
        row = _step_row(path, depth[path], by_path[path], verdicts, bool(kids))
        if not kids:
            return f'<div class="mrow leaf">{row}</div>'
        opened = " open" if depth[path] == 0 else ""
        inner = "".join(render(k) for k in kids)
        return f'<details class="mnode"{opened}><summary class="mrow">{row}</summary>{inner}</details>'

    head = (
        '<div class="mrow mhead"><span>module</span><span class="num">nodes</span><span class="num">forward</span>'
        '<span class="num">backward</span><span class="num">bwd/fwd</span><span>verdicts</span></div>'
    )
    optimizer = by_path.get("<model>", {}).get("optimizer")
    note = f'<p class="dim">optimizer step {_e(fmt_ns(int(optimizer.get("current_ns") or 0)))}</p>' if optimizer else ""
    tree = "".join(render(q) for q in children.get(None, []))
    return (
        f'<details class="block" open><summary><h3>Modules, forward and backward</h3></summary>'
        f'<div class="mtree">{head}{tree}</div>{note}</details>'
    )


def _module_tree(p: ProfileReportJSON) -> str:
    """The module roll-ups as a tree of ``<details>``, slowest first, each beside its aggregate verdict."""
    rows = (p.get("rollups") or {}).get("module") or []
    if not rows:
        return ""
    if any(r.get("direction") for r in rows):
        return _step_module_tree(p, rows)
    verdicts = {a["name"]: a for a in p.get("aggregates", []) if a.get("kind") == "module"}
    known = {r["name"] for r in rows}
    children: dict[str | None, list[RollupJSON]] = {}
    for r in rows:
        parent = _parent(r["name"], int(r.get("depth", 0)))
        if parent is not None and parent not in known:
            parent = "<model>" if "<model>" in known else None
        children.setdefault(parent, []).append(r)

    # a subtree opens where one of its modules was not judged ok, so that the judgement is in sight
    judged = [name for name, a in verdicts.items() if a.get("verdict") != "ok"]

    def render(r: RollupJSON) -> str:
        kids = children.get(r["name"], [])
        row = _module_row(r, verdicts.get(r["name"]), bool(kids))
        if not kids:
            return f'<div class="mrow leaf">{row}</div>'
        inside = any(name.startswith(r["name"] + ".") for name in judged)
        opened = " open" if int(r.get("depth", 0)) == 0 or inside else ""
        inner = "".join(render(k) for k in kids)
        return f'<details class="mnode"{opened}><summary class="mrow">{row}</summary>{inner}</details>'

    head = (
        '<div class="mrow mhead"><span>module</span><span class="num">nodes</span><span class="num">time</span>'
        '<span class="num">share</span><span class="num">GFLOP/s</span><span>module verdict</span></div>'
    )
    tree = "".join(render(r) for r in children.get(None, []))
    return (
        f'<details class="block" open><summary><h3>Modules</h3></summary><div class="mtree">{head}{tree}</div>'
        "</details>"
    )


def _op_table(p: ProfileReportJSON) -> str:
    """Time per operator type, beside the verdict of every node of that type taken together."""
    rows = (p.get("rollups") or {}).get("op") or []
    if not rows:
        return ""
    verdicts = {a["name"]: a for a in p.get("aggregates", []) if a.get("kind") == "op"}
    body = []
    for r in rows:
        v = verdicts.get(r["name"])
        judged = f"{_verdict_badge(v)} {_e(_ratio(v.get('ratio')))}" if v else ""
        body.append(
            f"<tr><td>{_e(r['name'])}</td><td class='num'>{_e(r.get('nodes', ''))}</td>"
            f"<td class='num'>{_e(fmt_ns(r.get('current_ns', 0)))}</td>"
            f"<td class='num'>{_e(_pct(r.get('share')))}</td><td>{judged}</td></tr>"
        )
    return (
        '<details class="block"><summary><h3>Operator types</h3></summary><table class="plain"><thead><tr>'
        "<th>operator</th><th class='num'>nodes</th><th class='num'>time</th><th class='num'>share</th>"
        f"<th>verdict of all its nodes</th></tr></thead><tbody>{''.join(body)}</tbody></table></details>"
    )


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
    try:
        return _section_of(index, p, first_env)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"the profile of {p['test_id']} [{p['key']}] in the HTML report has a field of the wrong shape "
            f"({type(exc).__name__}: {exc}): pass the dicts that report.profile_report makes (ProfileRecord['report'])"
        ) from exc


def _section_of(index: int, p: ProfileReportJSON, first_env: Mapping[str, Any]) -> str:
    tone = status_tone(p["status"])
    flagged = _where(p) + _flag_list("Failed by", p.get("flagged") or [], p, "bad")
    warned = _flag_list("Warnings", p.get("warned") or [], p, WARN)
    faster = _flag_list("Faster than the baseline beyond the band", _faster(p), p, WARN)
    return (
        f'<section class="fxprof-profile t-{tone}" id="{section_id(p["test_id"], p["key"])}" data-index="{index}">'
        f'<h2>{_badge(p["status"], tone)} <span class="tid">{_e(p["test_id"])}</span> '
        f'<span class="dim">[{_e(p["key"])}]</span></h2>'
        f"{_meta(p, first_env)}{flagged}{_structure(p)}{warned}{faster}{_total(p)}{_hints(p)}"
        f'{_chart_block(p)}{_module_tree(p)}{_op_table(p)}<h3>All nodes</h3><div class="fxprof-nodes"></div>'
        "</section>"
    )


def _where(p: ProfileReportJSON) -> str:
    """What a failed profile leads with (``report.blame_lines_of``): where the time went, above what failed it."""
    lines = blame_lines_of(p)
    if not lines:
        return ""
    rest = "".join(f"<li>{_e(line)}</li>" for line in lines[1:])
    listed = f"<ul>{rest}</ul>" if rest else ""
    return f'<div class="flags t-bad where"><h3>Where</h3><p>{_e(lines[0])}</p>{listed}</div>'


def _unused(unused: Sequence[str]) -> str:
    if not unused:
        return ""
    items = "".join(f"<li>{_e(u)}</li>" for u in sorted(unused))
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
        f"<title>{_e(title)}</title>\n<style>\n{asset('report.css')}</style>\n</head>\n<body>\n"
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
