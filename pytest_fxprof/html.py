"""The self-contained HTML report (``--fxprof-html``): one file with every profiled test of a run.

Owns the page: its markup, style and script. A view of the profile reports that ``report.profile_report``
makes; decides nothing. The page needs no network: its style and script are inline, and the profiles ride
along as JSON in a ``<script type="application/json" id="fxprof-data">`` tag, from which the script draws
each profile's chart and node table. The header, each profile's verdict, failures, warnings, total, hints
and module tree are plain HTML, readable without the script. Must not import torch or pytest.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Any

from pytest_fxprof.baseline import write_atomic
from pytest_fxprof.render import fmt_ns, fmt_rate
from pytest_fxprof.report import verdict_tone

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
STATUS_TONES = {
    "pass": "good",
    "regression": "bad",
    "recorded": "neutral",
    "not recorded": "neutral",
    "unmeasured": "neutral",
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


def _checked(profiles: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
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
        out.append(dict(p))
    return sorted(out, key=lambda p: (STATUS_ORDER.get(p["status"], len(STATUS_ORDER)), p["test_id"], p["key"]))


STATUS_ORDER = {"regression": 0, "missing": 1, "mismatch": 2, "not recorded": 3}
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


def _verdict_badge(judged: Mapping[str, Any]) -> str:
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


def _counts(profiles: Sequence[Mapping[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for p in profiles:
        counts[p["status"]] = counts.get(p["status"], 0) + 1
    order = sorted(counts, key=lambda s: (["regression", "pass"].index(s) if s in ("regression", "pass") else 2, s))
    return " ".join(_badge(f"{counts[s]} {s}", status_tone(s)) for s in order)


def _header(mode: str, profiles: Sequence[Mapping[str, Any]], title: str) -> str:
    when = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %z")
    what = {"check": "Check against baselines", "update": "Baselines recorded"}.get(mode, f"Mode {mode}")
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


def _meta(p: Mapping[str, Any], first_env: Mapping[str, Any]) -> str:
    capture, protocol = p.get("capture") or {}, p.get("protocol") or {}
    pairs = [
        ("nodes", str(len(p["nodes"]))),
        ("capture", f"{capture.get('method', '')} ({_count(capture.get('graphs', 1), 'graph')})" if capture else ""),
        (
            "protocol",
            f"{protocol.get('passes')} passes after {protocol.get('warmup')} warm-up, "
            f"{_count(protocol.get('threads'), 'thread')}, {_count(protocol.get('processes'), 'process', 'es')}"
            if protocol
            else "",
        ),
        ("profiled in", f"{p['seconds']:.1f} s" if isinstance(p.get("seconds"), int | float) else ""),
        # a profile from another environment was not compared: it has no speed factor or measurements to show
        ("speed factor", "" if p.get("mismatches") else _ratio(p.get("speed_factor"))),
        ("measurements", str(p["measurements"]) if p.get("measurements") and not p.get("mismatches") else ""),
        ("profiler overhead", _ratio(p.get("overhead"))),
    ]
    env = p["environment"]
    if env != first_env:
        pairs += [(f, str(env.get(f, ""))) for f in ENVIRONMENT_FIELDS if env.get(f) != first_env.get(f)]
    return _facts(pairs)


def _node_index(p: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
    return {(n.get("name", ""), n.get("module", "")): n for n in p["nodes"]}


def _aggregate_index(p: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
    return {(a.get("kind", ""), a.get("name", "")): a for a in p.get("aggregates", [])}


def _flag_item(flag: Mapping[str, Any], p: Mapping[str, Any]) -> str:
    """One line of what failed (or warned about) a profile: the item, its ratio, reason and leading nodes."""
    kind, name = flag.get("kind", ""), flag.get("name", "")
    reason = ""
    if kind == "node":
        n = _node_index(p).get((name, flag.get("module", "")), {})
        where = n.get("module") or "<root>"
        what = f'node <b>{_e(name)}</b> <span class="dim">({_e(n.get("target", ""))} in {_e(where)}'
        what += f"{', ' + _e(n['source']) if n.get('source') else ''})</span>"
        reason = n.get("reason", "")
    elif kind == "total":
        what, reason = "<b>total</b>", p["total"].get("reason", "")
    else:
        a = _aggregate_index(p).get((kind, name), {})
        what = f"every <b>{_e(name)}</b> node" if kind == "op" else f"module <b>{_e(name)}</b>"
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


def _flag_list(title: str, flags: Sequence[Mapping[str, Any]], p: Mapping[str, Any], tone: str) -> str:
    if not flags:
        return ""
    items = "".join(_flag_item(f, p) for f in flags)
    return f'<div class="flags t-{tone}"><h3>{_e(title)}</h3><ul>{items}</ul></div>'


def _faster(p: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Nodes, aggregates and the total found faster beyond their band, as flag items (nodes large enough to
    gate alone, as the gate reports them)."""
    out: list[dict[str, Any]] = [
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


def _structure(p: Mapping[str, Any]) -> str:
    """Why a profile was not compared, or how its graph changed since the baseline."""
    parts = []
    if p.get("mismatches"):
        items = "".join(f"<li>{_e(m)}</li>" for m in p["mismatches"])
        parts.append(f"<h3>Recorded in another environment, so not compared</h3><ul>{items}</ul>")
    for field in ("added", "removed"):
        refs = p.get(field) or []
        if refs:
            names = _names([f"{r.get('name', '')} ({r.get('target', '')})" for r in refs])
            parts.append(f"<p><b>{len(refs)} node(s) {field}</b> since the baseline: {_e(names)}</p>")
    return f'<div class="flags t-warn">{"".join(parts)}</div>' if parts else ""


def _total(p: Mapping[str, Any]) -> str:
    t = p["total"]
    band = f"{_band(t.get('band'))} ({t['band_source']})" if t.get("band_source") else _band(t.get("band"))
    measured = ", ".join(_ratio(r) for r in t.get("ratios", [])) if len(t.get("ratios", [])) > 1 else ""
    pairs = [
        ("current", fmt_ns(t.get("current_ns", 0))),
        ("baseline", fmt_ns(t["baseline_ns"]) if "baseline_ns" in t else ""),
        ("ratio", _ratio(t.get("ratio"))),
        ("band", band),
        ("measurements", measured),
        ("machine factor", _ratio(t.get("machine_factor"))),
        ("plain forward", fmt_ns(t["plain_ns"]) if t.get("plain_ns") else ""),
    ]
    verdict = _verdict_badge(t) if t.get("verdict") else ""
    reason = f' <span class="reason">{_e(t["reason"])}</span>' if t.get("reason") else ""
    return f'<div class="total"><h3>Total (instrumented pass) {verdict}{reason}</h3>{_facts(pairs)}</div>'


def _hints(p: Mapping[str, Any]) -> str:
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


def _module_row(r: Mapping[str, Any], verdict: Mapping[str, Any] | None, branch: bool) -> str:
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


def _module_tree(p: Mapping[str, Any]) -> str:
    """The module roll-ups as a tree of ``<details>``, slowest first, each beside its aggregate verdict."""
    rows = (p.get("rollups") or {}).get("module") or []
    if not rows:
        return ""
    verdicts = {a["name"]: a for a in p.get("aggregates", []) if a.get("kind") == "module"}
    known = {r["name"] for r in rows}
    children: dict[str | None, list[Mapping[str, Any]]] = {}
    for r in rows:
        parent = _parent(r["name"], int(r.get("depth", 0)))
        if parent is not None and parent not in known:
            parent = "<model>" if "<model>" in known else None
        children.setdefault(parent, []).append(r)

    # a subtree opens where one of its modules was not judged ok, so that the judgement is in sight
    judged = [name for name, a in verdicts.items() if a.get("verdict") != "ok"]

    def render(r: Mapping[str, Any]) -> str:
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


def _op_table(p: Mapping[str, Any]) -> str:
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


def _chart_block(p: Mapping[str, Any]) -> str:
    compared = any("verdict" in n for n in p["nodes"])
    legend = f'<span class="sw dot t-{"good" if compared else "none"}"></span> current time, its whisker the spread'
    if compared:
        legend += (
            ' <span class="sw tick"></span> baseline <span class="sw band"></span> tolerated range (baseline '
            "\N{MULTIPLICATION SIGN} the drift its test divides out, up to its band)"
        )
    order = (
        "worst first: what failed, what was warned about, then by how much of its band each used"
        if compared
        else "slowest first"
    )
    return (
        f'<h3>Nodes, {order}</h3><p class="legend">{legend}</p>'
        f'<div class="chart-wrap"><svg class="fxprof-chart" role="img" aria-label="time per node" width="1100" '
        'height="0"></svg></div>'
    )


def _section(index: int, p: Mapping[str, Any], first_env: Mapping[str, Any]) -> str:
    try:
        return _section_of(index, p, first_env)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"the profile of {p['test_id']} [{p['key']}] in the HTML report has a field of the wrong shape "
            f"({type(exc).__name__}: {exc}): pass the dicts that report.profile_report makes (ProfileRecord['report'])"
        ) from exc


def _section_of(index: int, p: Mapping[str, Any], first_env: Mapping[str, Any]) -> str:
    tone = status_tone(p["status"])
    flagged = _flag_list("Failed by", p.get("flagged") or [], p, "bad")
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


def _unused(unused: Sequence[str]) -> str:
    if not unused:
        return ""
    items = "".join(f"<li>{_e(u)}</li>" for u in sorted(unused))
    return f'<section class="unused"><h2>Unused baselines</h2><ul>{items}</ul></section>'


# The page ----------------------------------------------------------------------------------------


def render_html(mode: str, profiles: Sequence[Mapping[str, Any]], unused: Sequence[str], title: str = TITLE) -> str:
    """The report page of a run: ``profiles`` are ``profile_report`` dicts, shown regressions and other problems
    first, then by (test id, key)."""
    shown = _checked(profiles)
    data = _data_json({"mode": mode, "title": title, "profiles": shown, "unused_baselines": sorted(unused)})
    first_env = shown[0]["environment"] if shown else {}
    sections = "".join(_section(i, p, first_env) for i, p in enumerate(shown))
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        f"{_header(mode, shown, title)}\n"
        '<noscript><p class="noscript">The charts and node tables need JavaScript.</p></noscript>\n'
        f"<main>{sections}{_unused(unused)}</main>\n"
        f'<script type="application/json" id="fxprof-data">{data}</script>\n'
        f"<script>{_script()}</script>\n</body>\n</html>\n"
    )


def _script() -> str:
    return SCRIPT.replace("__CHART_ROWS__", str(CHART_ROWS)).replace("__TABLE_ROWS__", str(TABLE_ROWS))


def write_html(
    path: Path, mode: str, profiles: Sequence[Mapping[str, Any]], unused: Sequence[str], title: str = TITLE
) -> None:
    """Write the report page to ``path`` atomically (a reader sees the old page or the new one, never half)."""
    write_atomic(path, render_html(mode, profiles, unused, title))


CSS = """
:root { --fg: #1f2328; --dim: #656d76; --line: #d8dee4; --soft: #f6f8fa;
  --good: #1a7f37; --good-bg: #dafbe1; --bad: #cf222e; --bad-bg: #ffebe9;
  --warn: #9a6700; --warn-bg: #fff8c5; --neutral: #57606a; --neutral-bg: #eaeef2;
  --none: #0969da; --none-bg: #ddf4ff; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #fff; line-height: 1.45;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
header.fxprof-header, main { max-width: 1200px; margin: 0 auto; padding: 0 24px; }
header.fxprof-header { padding-top: 20px; padding-bottom: 8px; border-bottom: 1px solid var(--line); }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 0 0 8px; word-break: break-all; }
h3 { font-size: 14px; margin: 16px 0 6px; }
summary h3 { display: inline; }
.run, .dim, .reason, .legend { color: var(--dim); }
.reason { font-size: 13px; font-weight: normal; }
.badge { display: inline-block; padding: 0 8px; border-radius: 10px; font-size: 12px; font-weight: 600;
  line-height: 20px; white-space: nowrap; vertical-align: 1px; }
.badge.t-good { color: var(--good); background: var(--good-bg); }
.badge.t-bad { color: var(--bad); background: var(--bad-bg); }
.badge.t-warn { color: var(--warn); background: var(--warn-bg); }
.badge.t-neutral, .badge.t-none { color: var(--neutral); background: var(--neutral-bg); }
dl.facts { display: flex; flex-wrap: wrap; gap: 4px 24px; margin: 8px 0; }
dl.facts div { display: flex; gap: 6px; }
dl.facts dt { color: var(--dim); }
dl.facts dd { margin: 0; }
nav.toc ul { list-style: none; padding: 0; margin: 8px 0; columns: 2 420px; }
nav.toc li { margin: 2px 0; break-inside: avoid; }
nav.toc a { color: var(--fg); text-decoration: none; }
nav.toc a:hover .tid { text-decoration: underline; }
section.fxprof-profile { margin: 24px 0; padding: 16px 20px; border: 1px solid var(--line);
  border-left-width: 4px; border-radius: 6px; }
section.t-good { border-left-color: var(--good); }
section.t-bad { border-left-color: var(--bad); }
section.t-warn { border-left-color: #d4a72c; }
section.t-neutral { border-left-color: var(--neutral); }
.flags { padding: 4px 12px; margin: 10px 0; border-radius: 6px; }
.flags.t-bad { background: var(--bad-bg); }
.flags.t-warn { background: var(--warn-bg); }
.flags h3 { margin: 6px 0; }
.flags ul, .hints ul { margin: 4px 0 8px; padding-left: 20px; }
.flags li, .hints li { margin: 3px 0; }
.led { color: var(--dim); font-size: 13px; }
.hints .kind { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px;
  background: var(--soft); border: 1px solid var(--line); border-radius: 4px; padding: 0 4px; }
.legend { font-size: 12px; margin: 0 0 4px; }
.sw { display: inline-block; vertical-align: middle; margin: 0 4px 0 10px; }
.sw.dot { width: 9px; height: 9px; border-radius: 50%; background: var(--good); }
.sw.dot.t-none { background: var(--none); }
.sw.tick { width: 2px; height: 12px; background: var(--fg); }
.sw.band { width: 22px; height: 10px; background: rgba(26, 127, 55, 0.16); }
.chart-wrap { overflow-x: auto; }
svg.fxprof-chart { display: block; max-width: 100%; height: auto; font-size: 11px; }
svg.fxprof-chart text { fill: var(--fg); }
svg.fxprof-chart .axis text { fill: var(--dim); }
svg.fxprof-chart .grid line { stroke: var(--line); }
svg.fxprof-chart .grid line.minor { stroke: #eef1f4; }
svg.fxprof-chart .hit { fill: transparent; }
svg.fxprof-chart .fxprof-row:hover .hit { fill: var(--soft); }
svg.fxprof-chart .base { stroke: var(--fg); stroke-width: 1.5; }
svg.fxprof-chart .whisker { stroke-width: 1.5; }
svg.fxprof-chart.collapsed .fxprof-extra { display: none; }
svg.fxprof-chart .t-good { fill: var(--good); stroke: var(--good); }
svg.fxprof-chart .t-bad { fill: var(--bad); stroke: var(--bad); }
svg.fxprof-chart .t-warn { fill: #bf8700; stroke: #bf8700; }
svg.fxprof-chart .t-none { fill: var(--none); stroke: var(--none); }
svg.fxprof-chart .band { stroke: none; fill-opacity: 0.16; }
svg.fxprof-chart text.ratio.t-good, svg.fxprof-chart text.ratio.t-none { fill: var(--dim); stroke: none; }
svg.fxprof-chart text.ratio { stroke: none; }
button { font: inherit; font-size: 13px; padding: 2px 10px; border: 1px solid var(--line); border-radius: 6px;
  background: var(--soft); color: var(--fg); cursor: pointer; }
button:hover { background: var(--neutral-bg); }
details.block > summary { cursor: pointer; margin: 16px 0 6px; }
details.block > summary h3 { margin: 0; }
.mtree { border: 1px solid var(--line); border-radius: 6px; max-height: 480px; overflow: auto; }
.mtree details > summary { list-style: none; cursor: pointer; }
.mtree details > summary::-webkit-details-marker { display: none; }
.mrow { display: grid; grid-template-columns: minmax(16em, 1fr) 4.5em 6.5em 9em 5.5em 17em; gap: 0 12px;
  padding: 2px 10px; border-bottom: 1px solid #eef1f4; align-items: center; }
.mrow:hover { background: var(--soft); }
.mhead { font-weight: 600; background: var(--soft); position: sticky; top: 0; z-index: 1; }
.mname { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.caret, .nocaret { display: inline-block; width: 1em; color: var(--dim); }
.caret::before { content: "\\25B8"; }
details[open] > summary .caret::before { content: "\\25BE"; }
.share { display: flex; align-items: center; gap: 6px; }
.share .bar { display: inline-block; height: 8px; min-width: 1px; max-width: 4em; background: #8c959f;
  border-radius: 2px; flex: none; }
.share .num { flex: 1; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
table.plain, table.nodes { border-collapse: collapse; width: 100%; font-size: 13px; }
table.plain th, table.plain td, table.nodes th, table.nodes td { border-bottom: 1px solid var(--line);
  padding: 3px 8px; text-align: left; white-space: nowrap; }
table.plain th.num, table.plain td.num, table.nodes th.num, table.nodes td.num { text-align: right; }
table.plain th, table.nodes th { background: var(--soft); font-weight: 600; }
.controls { display: flex; gap: 12px; align-items: center; margin: 6px 0; flex-wrap: wrap; }
.controls input, .controls select { font: inherit; font-size: 13px; padding: 3px 8px;
  border: 1px solid var(--line); border-radius: 6px; }
.controls input { width: 24em; }
.table-wrap { max-height: 560px; overflow: auto; border: 1px solid var(--line); border-radius: 6px; }
table.nodes thead th { position: sticky; top: 0; z-index: 1; cursor: pointer; user-select: none;
  box-shadow: inset 0 -1px 0 var(--line); border-bottom: none; }
table.nodes thead th:hover { background: var(--neutral-bg); }
table.nodes th[aria-sort="ascending"]::after { content: " \\25B4"; }
table.nodes th[aria-sort="descending"]::after { content: " \\25BE"; }
table.nodes tbody tr:hover { background: var(--soft); }
table.nodes td.src, table.nodes td.shape { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  font-size: 12px; }
table.nodes td.src { max-width: 28em; overflow: hidden; text-overflow: ellipsis; }
section.unused { margin: 24px 0; }
.noscript { max-width: 1200px; margin: 12px auto; padding: 0 24px; color: var(--warn); }
"""

SCRIPT = r"""
(function () {
  "use strict";
  var SHOWN = __CHART_ROWS__, ROWS = __TABLE_ROWS__;
  var data = JSON.parse(document.getElementById("fxprof-data").textContent);

  function fmtNs(ns) {
    var size = Math.abs(ns), units = [[1, "ns", 0], [1e3, "us", 1], [1e6, "ms", 2]];
    for (var i = 0; i < units.length; i++) {
      var u = units[i], f = Math.pow(10, u[2]);
      if (Math.round(size / u[0] * f) / f < 1000) return (ns / u[0]).toFixed(u[2]) + " " + u[1];
    }
    return (ns / 1e9).toFixed(2) + " s";
  }
  function fmtDecade(k) {
    var units = ["ns", "us", "ms", "s"], u = Math.min(Math.floor(k / 3), units.length - 1);
    return Math.pow(10, k - 3 * u) + " " + units[u];
  }
  function fmtRatio(r) { return r == null ? "" : "x" + r.toFixed(2); }
  function fmtPct(x, d) { return x == null ? "" : (100 * x).toFixed(d) + "%"; }
  function fmtBand(b) { return b == null ? "" : "+" + (100 * b).toFixed(0) + "%"; }
  function fmtRate(f) { return f == null ? "" : (f / 1e9).toFixed(1); }
  function has(n, k) { return n[k] !== undefined && n[k] !== null; }
  function compared(p) { return p.nodes.some(function (n) { return has(n, "verdict"); }); }
  function tone(n) {
    if (!has(n, "verdict")) return "none";
    if (n.verdict === "ok") return n.confirmed === false ? "warn" : "good";  // flagged, then not confirmed
    if (n.verdict === "slower") return n.gates ? "bad" : "warn";
    return "warn";
  }
  function group(n) {
    if (!has(n, "verdict")) return "";
    return n.verdict.indexOf("noisy") >= 0 ? "noisy" : n.verdict;
  }
  function where(n) { return n.module || "<root>"; }

  function tooltip(n) {
    var lines = [n.name, "module " + where(n) + " \u00b7 " + n.op + " " + n.target];
    if (n.shape) lines.push("shape " + n.shape + (n.layout ? " (" + n.layout + ")" : ""));
    if (n.source) lines.push("source " + n.source);
    lines.push("current " + fmtNs(n.current_ns) + ", spread " + fmtPct(n.spread, 0) + ", share " + fmtPct(n.share, 1));
    if (has(n, "baseline_ns")) {
      lines.push("baseline " + fmtNs(n.baseline_ns) + ", expected " + fmtNs(n.baseline_ns * n.divisor) +
        " (divided by " + fmtRatio(n.divisor) + ")");
      lines.push("ratio " + fmtRatio(n.ratio) + ", band " + fmtBand(n.band) + " (" + n.band_source + ")");
      lines.push(n.verdict + ": " + n.reason);
    }
    return lines.join("\n");
  }

  // The chart: one row per node, worst first; a log time axis.
  var W = 1100, LABEL = 260, X0 = 272, X1 = 1010, ROW = 18, TOP = 26, BOTTOM = 6;

  function rank(n) {  // what failed the profile first, then what was warned about, then the rest
    if (n.verdict === "slower") return n.gates ? 0 : 1;
    return tone(n) === "warn" && n.verdict !== "faster" ? 1 : 2;
  }
  // how much of its band a node's ratio uses (render.band_used): 1 at the band's edge
  function bandUsed(n) {
    if (!has(n, "ratio")) return -Infinity;
    if (n.band > 0) return (n.ratio - 1) / n.band;
    return n.ratio > 1 ? Infinity : n.ratio - 1;
  }

  function worstFirst(cmp) {
    return function (a, b) {
      if (cmp) {
        if (rank(a) !== rank(b)) return rank(a) - rank(b);
        var ua = bandUsed(a), ub = bandUsed(b);
        if (ua !== ub) return ub - ua;
      }
      if (a.current_ns !== b.current_ns) return b.current_ns - a.current_ns;
      return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
    };
  }

  function domain(nodes) {
    var lo = Infinity, hi = 0;
    nodes.forEach(function (n) {
      var s = n.spread || 0, c = n.current_ns;
      [c, c * (1 - s / 2), n.baseline_ns, has(n, "baseline_ns") ? n.baseline_ns * n.divisor : 0].forEach(function (v) {
        if (v > 0 && v < lo) lo = v;
      });
      hi = Math.max(hi, c * (1 + s / 2), n.baseline_ns || 0, has(n, "baseline_ns") ? n.baseline_ns * n.divisor : 0);
    });
    if (!(lo < Infinity)) lo = 1;
    lo = Math.max(1, lo);
    hi = Math.max(hi, lo);
    var a = Math.floor(Math.log10(lo)), b = Math.ceil(Math.log10(hi * 1.05));
    return [a, Math.max(b, a + 1)];
  }

  function drawChart(svg, p) {
    var NS = svg.namespaceURI, cmp = compared(p);
    function el(tag, attrs, parent) {
      var e = document.createElementNS(NS, tag);
      for (var k in attrs) e.setAttribute(k, attrs[k]);
      parent.appendChild(e);
      return e;
    }
    var rows = p.nodes.slice().sort(worstFirst(cmp));
    var d = domain(rows), lo = d[0], hi = d[1];
    function x(ns) {
      var v = ns > 0 ? Math.log10(ns) : lo;
      v = Math.min(Math.max(v, lo), hi);
      return +(X0 + (X1 - X0) * (v - lo) / (hi - lo)).toFixed(1);
    }
    var full = TOP + rows.length * ROW + BOTTOM;
    var frag = document.createDocumentFragment();
    var grid = el("g", {"class": "grid axis"}, frag);
    for (var k = lo; k <= hi; k++) {
      var at = Math.pow(10, k);
      el("line", {x1: x(at), x2: x(at), y1: TOP - 6, y2: full}, grid);
      el("text", {x: x(at), y: TOP - 10, "text-anchor": "middle"}, grid).textContent = fmtDecade(k);
      if (k < hi && hi - lo <= 5) {
        [2, 5].forEach(function (m) {
          el("line", {"class": "minor", x1: x(m * at), x2: x(m * at), y1: TOP, y2: full}, grid);
        });
      }
    }
    el("text", {x: W - 4, y: TOP - 10, "text-anchor": "end"}, grid).textContent = cmp ? "ratio" : "time";
    rows.forEach(function (n, i) {
      var y = TOP + i * ROW, mid = y + ROW / 2, t = tone(n), s = n.spread || 0, c = n.current_ns;
      var g = el("g", {"class": "fxprof-row" + (i >= SHOWN ? " fxprof-extra" : "")}, frag);
      el("title", {}, g).textContent = tooltip(n);
      el("rect", {"class": "hit", x: 0, y: y, width: W, height: ROW}, g);
      var name = n.name.length > 38 ? n.name.slice(0, 37) + "\u2026" : n.name;
      el("text", {x: LABEL, y: mid + 4, "text-anchor": "end"}, g).textContent = name;
      if (has(n, "baseline_ns")) {
        var expected = n.baseline_ns * n.divisor, edge = expected * (1 + n.band);
        el("rect", {"class": "band t-" + t, x: x(expected), y: y + 3,
          width: Math.max(1, x(edge) - x(expected)), height: ROW - 6}, g);
        el("line", {"class": "base", x1: x(n.baseline_ns), x2: x(n.baseline_ns), y1: y + 2, y2: y + ROW - 2}, g);
      }
      if (s > 0) {
        el("line", {"class": "whisker t-" + t, x1: x(c * (1 - s / 2)), x2: x(c * (1 + s / 2)), y1: mid, y2: mid}, g);
      }
      el("circle", {"class": "fxprof-mark t-" + t, "data-key": n.key, cx: x(c), cy: mid, r: 4}, g);
      el("text", {"class": "ratio t-" + t, x: W - 4, y: mid + 4, "text-anchor": "end"}, g).textContent =
        cmp ? fmtRatio(n.ratio) : fmtNs(c);
    });
    svg.appendChild(frag);
    function size(count) {
      var h = TOP + count * ROW + BOTTOM;
      svg.setAttribute("height", h);
      svg.setAttribute("viewBox", "0 0 " + W + " " + h);
    }
    if (rows.length <= SHOWN) {
      size(rows.length);
      return;
    }
    svg.classList.add("collapsed");
    size(SHOWN);
    var button = document.createElement("button");
    button.type = "button";
    button.className = "fxprof-more";
    function label() {
      var open = !svg.classList.contains("collapsed");
      button.textContent = open ? "Show the worst " + SHOWN + " only" : "Show all " + rows.length + " nodes";
    }
    label();
    button.addEventListener("click", function () {
      var collapsed = svg.classList.toggle("collapsed");
      size(collapsed ? SHOWN : rows.length);
      label();
    });
    svg.parentNode.insertAdjacentElement("afterend", button);
  }

  // The node table: sortable by any column, filtered by text and verdict.
  var COLUMNS = [
    {label: "#", num: true, value: function (n, i) { return i; }, text: function (n, i) { return String(i); }},
    {label: "node", value: function (n) { return n.name; }},
    {label: "current", num: true, value: function (n) { return n.current_ns; },
      text: function (n) { return fmtNs(n.current_ns); }},
    {label: "spread", num: true, value: function (n) { return n.spread; },
      text: function (n) { return fmtPct(n.spread, 0); }},
    {label: "baseline", num: true, cmp: true, value: function (n) { return n.baseline_ns; },
      text: function (n) { return has(n, "baseline_ns") ? fmtNs(n.baseline_ns) : ""; }},
    {label: "ratio", num: true, cmp: true, value: function (n) { return n.ratio; },
      text: function (n) { return fmtRatio(n.ratio); }},
    {label: "band", num: true, cmp: true, value: function (n) { return n.band; },
      text: function (n) { return fmtBand(n.band); }},
    {label: "verdict", cmp: true, value: function (n) { return n.verdict || ""; }, badge: true},
    {label: "share", num: true, value: function (n) { return n.share; },
      text: function (n) { return fmtPct(n.share, 1); }},
    {label: "GFLOP/s", num: true, value: function (n) { return n.flops_per_s; },
      text: function (n) { return fmtRate(n.flops_per_s); }},
    {label: "op", value: function (n) { return n.op; }},
    {label: "target", value: function (n) { return n.target; }},
    {label: "module", value: function (n) { return where(n); }},
    {label: "shape", cls: "shape", value: function (n) { return n.shape || ""; }},
    {label: "source", cls: "src", value: function (n) { return n.source || ""; }}
  ];
  var collator = new Intl.Collator(undefined, {numeric: true, sensitivity: "base"});

  function buildTable(host, p) {
    var cmp = compared(p);
    var cols = COLUMNS.filter(function (c) { return cmp || !c.cmp; });
    var controls = document.createElement("div");
    controls.className = "controls";
    var search = document.createElement("input");
    search.type = "search";
    search.className = "fxprof-filter";
    search.placeholder = "Filter by name, module, target or op";
    search.setAttribute("aria-label", "Filter nodes by name, module, target or op");
    controls.appendChild(search);
    var select = null;
    if (cmp) {
      select = document.createElement("select");
      select.className = "fxprof-verdict";
      select.setAttribute("aria-label", "Show nodes with this verdict");
      ["all", "slower", "faster", "ok", "noisy"].forEach(function (v) {
        var o = document.createElement("option");
        o.value = v;
        o.textContent = v === "all" ? "every verdict" : v;
        select.appendChild(o);
      });
      controls.appendChild(select);
    }
    var count = document.createElement("span");
    count.className = "dim fxprof-count";
    controls.appendChild(count);
    var more = document.createElement("button");
    more.type = "button";
    more.className = "fxprof-all-rows";
    controls.appendChild(more);
    host.appendChild(controls);

    var wrap = document.createElement("div");
    wrap.className = "table-wrap";
    var table = document.createElement("table");
    table.className = "nodes";
    var head = table.createTHead().insertRow();
    var ths = cols.map(function (c) {
      var th = document.createElement("th");
      th.textContent = c.label;
      th.scope = "col";
      if (c.num) th.className = "num";
      th.title = "Sort by " + c.label;
      head.appendChild(th);
      return th;
    });
    var body = document.createElement("tbody");
    table.appendChild(body);
    wrap.appendChild(table);
    host.appendChild(wrap);

    // Rows are made when first shown, and at most ROWS are shown until "show all": a big graph stays quick.
    var items = p.nodes.map(function (n, i) {
      var hay = [n.name, n.module, n.target, n.op].join("\n").toLowerCase();
      return {node: n, index: i, tr: null, hay: hay, group: group(n)};
    });
    function row(it) {
      if (it.tr) return it.tr;
      var n = it.node, tr = document.createElement("tr");
      tr.dataset.key = n.key;
      cols.forEach(function (c) {
        var td = document.createElement("td");
        if (c.num) td.className = "num";
        if (c.cls) td.className = c.cls;
        if (c.badge) {
          if (has(n, "verdict")) {
            var b = document.createElement("span");
            b.className = "badge t-" + tone(n);
            b.textContent = n.verdict;
            td.appendChild(b);
            td.title = n.reason || "";
          }
        } else {
          td.textContent = c.text ? c.text(n, it.index) : c.value(n, it.index);
          if (c.cls === "src") td.title = n.source || "";
        }
        tr.appendChild(td);
      });
      it.tr = tr;
      return tr;
    }

    var all = false;
    function render() {
      var q = search.value.trim().toLowerCase(), v = select ? select.value : "all";
      var matching = items.filter(function (it) {
        return (!q || it.hay.indexOf(q) >= 0) && (v === "all" || it.group === v);
      });
      var shown = all ? matching : matching.slice(0, ROWS);
      var frag = document.createDocumentFragment();
      shown.forEach(function (it) { frag.appendChild(row(it)); });
      body.replaceChildren(frag);
      var total = items.length, text = matching.length + " of " + total + " nodes";
      if (matching.length === total) text = total + " nodes";
      if (shown.length < matching.length) text += ", the first " + shown.length + " shown";
      count.textContent = text;
      more.hidden = matching.length <= ROWS;
      more.textContent = all ? "Show the first " + ROWS + " only" : "Show all " + matching.length;
    }
    more.addEventListener("click", function () { all = !all; render(); });

    var sorted = {col: -1, dir: 1};
    function sortBy(ci) {
      var c = cols[ci];
      sorted.dir = sorted.col === ci ? -sorted.dir : (c.num && c.label !== "#" ? -1 : 1);
      sorted.col = ci;
      var dir = sorted.dir;
      var keyed = items.map(function (it) { return {it: it, v: c.value(it.node, it.index)}; });
      keyed.sort(function (a, b) {
        var va = a.v, vb = b.v;
        var ma = va === undefined || va === null || va === "", mb = vb === undefined || vb === null || vb === "";
        if (ma || mb) return ma === mb ? a.it.index - b.it.index : ma ? 1 : -1;  // missing values last
        var r = c.num ? va - vb : collator.compare(va, vb);
        return r ? dir * r : a.it.index - b.it.index;
      });
      items = keyed.map(function (k) { return k.it; });
      ths.forEach(function (th, i) {
        if (i === ci) th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
        else th.removeAttribute("aria-sort");
      });
      render();
    }
    ths.forEach(function (th, ci) { th.addEventListener("click", function () { sortBy(ci); }); });
    search.addEventListener("input", render);
    if (select) select.addEventListener("change", render);
    render();
  }

  var sections = document.querySelectorAll("section.fxprof-profile");
  for (var i = 0; i < sections.length; i++) {
    var p = data.profiles[Number(sections[i].dataset.index)];
    drawChart(sections[i].querySelector("svg.fxprof-chart"), p);
    buildTable(sections[i].querySelector(".fxprof-nodes"), p);
  }
})();
"""
