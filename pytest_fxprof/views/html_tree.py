"""The HTML report's roll-ups of a profile: its module tree (a training step's with forward and backward side by
side) and its operator types, each beside its aggregate verdict. Must not import torch or pytest."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pytest_fxprof.records.units import fmt_ns, fmt_rate
from pytest_fxprof.views.html_format import esc, fmt_band, fmt_pct, fmt_ratio, verdict_badge
from pytest_fxprof.views.judged_json import AggregateJSON
from pytest_fxprof.views.report import ProfileReportJSON, RollupJSON

SHARE_BAR_EM = 4.0
"""The width of a module's share bar at 100 % (the whole model), in em."""
_DIRECTION_SHORT = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}


def _verdicts(p: ProfileReportJSON, kind: str) -> dict[str, AggregateJSON]:
    return {a["name"]: a for a in p.get("aggregates", []) if a.get("kind") == kind}


def _name_cell(path: str, depth: int, branch: bool) -> str:
    """A module's name, indented by its depth, its parents dimmed, behind a caret where it has children."""
    head, dot, tail = path.rpartition(".")
    label = f'<span class="dim">{esc(head + dot)}</span>{esc(tail)}' if dot else esc(path)
    caret = '<span class="caret"></span>' if branch else '<span class="nocaret"></span>'
    return f'<span class="mname" style="padding-left:{depth * 1.1:.1f}em">{caret}{label}</span>'


def _branch(row: str, inner: str, opened: bool) -> str:
    """A row of the tree: a leaf, or a ``<details>`` holding its children (``inner``)."""
    if not inner:
        return f'<div class="mrow leaf">{row}</div>'
    return f'<details class="mnode"{" open" if opened else ""}><summary class="mrow">{row}</summary>{inner}</details>'


def _tree_block(title: str, columns: Sequence[str], tree: str, note: str = "") -> str:
    head = "".join(f'<span class="num">{c}</span>' for c in columns[1:-1])
    return (
        f'<details class="block" open><summary><h3>{title}</h3></summary><div class="mtree">'
        f'<div class="mrow mhead"><span>{columns[0]}</span>{head}<span>{columns[-1]}</span></div>{tree}</div>'
        f"{note}</details>"
    )


def _module_row(r: RollupJSON, verdict: AggregateJSON | None, branch: bool) -> str:
    flops, current = r.get("flops"), r.get("current_ns", 0)
    rate = fmt_rate(flops / (current / 1e9)) if flops and current else ""
    share = float(r.get("share") or 0.0)
    judged = ""
    if verdict is not None:
        judged = (
            f"{verdict_badge(verdict)} "
            f"{esc(fmt_ratio(verdict.get('ratio')))} <span class='dim'>band {esc(fmt_band(verdict.get('band')))}</span>"
        )
        if verdict.get("reason"):
            judged = f'<span title="{esc(verdict["reason"])}">{judged}</span>'
    return (
        f"{_name_cell(str(r.get('name', '')), int(r.get('depth', 0)), branch)}"
        f'<span class="num">{esc(r.get("nodes", ""))}</span><span class="num">{esc(fmt_ns(current))}</span>'
        f'<span class="share"><span class="bar" style="width:{min(share, 1.0) * SHARE_BAR_EM:.2f}em"></span>'
        f'<span class="num">{esc(fmt_pct(share))}</span></span><span class="num">{esc(rate)}</span>'
        f'<span class="judged">{judged}</span>'
    )


def _parent(name: str, depth: int) -> str | None:
    if depth == 0:
        return None
    return name.rpartition(".")[0] if depth > 1 else "<model>"


def _step_row(
    path: str, depth: int, by: Mapping[str, RollupJSON], verdicts: Mapping[str, AggregateJSON], kids: bool
) -> str:
    """One module of a training step: its forward and backward times side by side, and both verdicts."""
    fw: RollupJSON | dict[str, int] = by.get("forward", {})
    bw: RollupJSON | dict[str, int] = by.get("backward", {})
    times = [int(fw.get("current_ns") or 0), int(bw.get("current_ns") or 0)]
    nodes = sum(int(r.get("nodes") or 0) for r in by.values())
    ratio = f"x{times[1] / times[0]:.2f}" if times[0] and times[1] else ""
    judged = []
    for direction in ("forward", "backward", "optimizer"):
        v = verdicts.get(f"{path} {direction}")
        if v is not None:
            badge = f"{verdict_badge(v)} {esc(fmt_ratio(v.get('ratio')))}"
            short = _DIRECTION_SHORT[direction]
            judged.append(f'<span title="{esc(v.get("reason") or direction)}">{short} {badge}</span>')
    return (
        f"{_name_cell(path, depth, kids)}"
        f'<span class="num">{nodes}</span><span class="num">{esc(fmt_ns(times[0]) if fw else "")}</span>'
        f'<span class="num">{esc(fmt_ns(times[1]) if bw else "")}</span><span class="num">{esc(ratio)}</span>'
        f'<span class="judged">{" ".join(judged)}</span>'
    )


def _step_module_tree(p: ProfileReportJSON, rows: Sequence[RollupJSON]) -> str:
    """A training step's module tree: each module once, its forward and backward times side by side."""
    verdicts = _verdicts(p, "module")
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
        return _branch(row, "".join(render(k) for k in kids), depth[path] == 0)

    opt = by_path.get("<model>", {}).get("optimizer")
    note = f'<p class="dim">optimizer step {esc(fmt_ns(int(opt.get("current_ns") or 0)))}</p>' if opt else ""
    tree = "".join(render(q) for q in children.get(None, []))
    columns = ["module", "nodes", "forward", "backward", "bwd/fwd", "verdicts"]
    return _tree_block("Modules, forward and backward", columns, tree, note)


def module_tree(p: ProfileReportJSON) -> str:
    """The module roll-ups as a tree of ``<details>``, slowest first, each beside its aggregate verdict."""
    rows = (p.get("rollups") or {}).get("module") or []
    if not rows:
        return ""
    if any(r.get("direction") for r in rows):
        return _step_module_tree(p, rows)
    verdicts = _verdicts(p, "module")
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
        inside = any(name.startswith(r["name"] + ".") for name in judged)
        return _branch(row, "".join(render(k) for k in kids), int(r.get("depth", 0)) == 0 or inside)

    tree = "".join(render(r) for r in children.get(None, []))
    return _tree_block("Modules", ["module", "nodes", "time", "share", "GFLOP/s", "module verdict"], tree)


def op_table(p: ProfileReportJSON) -> str:
    """Time per operator type, beside the verdict of every node of that type taken together."""
    rows = (p.get("rollups") or {}).get("op") or []
    if not rows:
        return ""
    verdicts = _verdicts(p, "op")
    body = []
    for r in rows:
        v = verdicts.get(r["name"])
        judged = f"{verdict_badge(v)} {esc(fmt_ratio(v.get('ratio')))}" if v else ""
        body.append(
            f"<tr><td>{esc(r['name'])}</td><td class='num'>{esc(r.get('nodes', ''))}</td>"
            f"<td class='num'>{esc(fmt_ns(r.get('current_ns', 0)))}</td>"
            f"<td class='num'>{esc(fmt_pct(r.get('share')))}</td><td>{judged}</td></tr>"
        )
    return (
        '<details class="block"><summary><h3>Operator types</h3></summary><table class="plain"><thead><tr>'
        "<th>operator</th><th class='num'>nodes</th><th class='num'>time</th><th class='num'>share</th>"
        f"<th>verdict of all its nodes</th></tr></thead><tbody>{''.join(body)}</tbody></table></details>"
    )
