"""The Markdown summary (``--fxprof-markdown PATH``, and ``$GITHUB_STEP_SUMMARY`` when it is set).

Owns the wording and layout of a compact summary for a pull-request comment or a CI job's summary page:
a heading with the verdict counts, a table of profiles, one short block per regression or mismatch, then
warnings and hints folded into ``<details>`` blocks, and the unused baselines. A view of the per-profile
reports; decides nothing. Must not import torch or pytest.

Everything from a test or a model (ids, node names, reasons) is escaped: ``|`` and line breaks cannot
break a table, and text cannot turn into Markdown or HTML (``<root>`` stays visible).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_fxprof.records.measurement import FORWARD
from pytest_fxprof.records.units import fmt_ns
from pytest_fxprof.records.verdicts import Status
from pytest_fxprof.store.files import write_atomic
from pytest_fxprof.views.item_lines import machine_credit
from pytest_fxprof.views.judged_json import FlagJSON, NodeJSON
from pytest_fxprof.views.render import graphs_text
from pytest_fxprof.views.report import (
    GraphsJSON,
    ProfileReportJSON,
    against_of,
    blame_lines_of,
    busy_line,
    item_tone,
    worst_label,
    worst_nodes,
)

SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
TITLE = "pytest-fxprof"
MODES = ("check", "update", "against")
PROFILES_SHOWN = 50
"""Rows of the profile table; the profiles that need attention come first."""
BLOCKS_SHOWN = 10
"""Regression and mismatch blocks; the rest are counted."""
NODES_SHOWN = 8
"""Slowed nodes (and failing items) listed per regression."""
LEADERS_SHOWN = 3
ITEMS_SHOWN = 20
"""Lines of the warnings, hints and unused baselines lists."""

STATUS_WORDS: dict[str, tuple[str, str]] = {
    Status.REGRESSION: ("regression", "regressions"),
    Status.MISMATCH: ("mismatch", "mismatches"),
    Status.UNDECIDED: ("undecided", "undecided"),
    Status.MISSING: ("missing a baseline", "missing a baseline"),
    Status.PASS: ("passed", "passed"),
    Status.UNCHANGED: ("unchanged, not measured", "unchanged, not measured"),
    Status.RECORDED: ("recorded", "recorded"),
    Status.NOT_RECORDED: ("not recorded", "not recorded"),
    Status.UNMEASURED: ("unmeasured", "unmeasured"),
}
"""The heading's word for each status (one, several), in the heading's order."""
ATTENTION = (Status.REGRESSION, Status.UNDECIDED, Status.MISMATCH, Status.MISSING, Status.ERROR)
"""Statuses that fail a test, skip it or leave it without a verdict: shown first, in bold."""
STATUS_CELLS: dict[str, str] = {Status.MISSING: "missing baseline", Status.UNDECIDED: "undecided (no verdict)"}

_SPECIAL = re.compile(r"([\\`*_\[\]<>|&~#])")
_BREAK = re.compile(r"\s*[\r\n]+\s*")
_TICKS = re.compile(r"`+")


def _text(value: object) -> str:
    """Plain text, safe in a table cell or a list item: Markdown and HTML characters escaped, one line."""
    return _SPECIAL.sub(r"\\\1", _BREAK.sub(" ", str(value)))


def _code(value: object, cell: bool = False) -> str:
    """A code span of ``value`` (one line); in a table ``cell``, ``|`` is escaped as GitHub's tables need."""
    text = _BREAK.sub(" ", str(value))
    fence = "`" * (max((len(run) for run in _TICKS.findall(text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    if cell:
        text = text.replace("|", "\\|")
    return f"{fence}{pad}{text}{pad}{fence}"


def _label(profile: ProfileReportJSON) -> str:
    return f"{profile['test_id']} [{profile['key']}]"


def _more(shown: int, total: int, what: str = "") -> list[str]:
    return [f"... {total - shown} more {what}".rstrip()] if total > shown else []


def _ratio(value: float) -> str:
    return f"x{value:.2f}"


# The heading and the table -----------------------------------------------------------------------------


def _heading(mode: str, profiles: Sequence[ProfileReportJSON]) -> str:
    counts: dict[str, int] = {}
    for p in profiles:
        counts[p["status"]] = counts.get(p["status"], 0) + 1
    order = [*STATUS_WORDS, *sorted(set(counts) - set(STATUS_WORDS))]
    parts = [f"{counts[s]} {STATUS_WORDS.get(s, (s, s))[counts[s] != 1]}" for s in order if counts.get(s)] or [
        "no profiled test"
    ]
    title = f"{TITLE} (baselines updated)" if mode == "update" else TITLE
    against = against_of(profiles)
    if mode == "against" and against:
        title = f"{TITLE} against {against}"
    return f"## {title}: {', '.join(parts)}"


def _status_cell(status: str) -> str:
    word = _text(STATUS_CELLS.get(status, status))
    return f"**{word}**" if status in ATTENTION else word


NOT_TIMED = (Status.UNCHANGED,)
"""Statuses whose profile timed nothing: one cold pass, whose times a table leaves out."""


def _total_cell(profile: ProfileReportJSON) -> str:
    total = profile.get("total", {})
    if "current_ns" not in total or profile["status"] in NOT_TIMED:
        return ""
    text = fmt_ns(total["current_ns"])
    if "ratio" in total:
        text += f", {_ratio(total['ratio'])} ({_text(total.get('verdict', ''))})"
    if "pairs" in profile:  # against a revision: the total's ratio in each pair of old and new processes
        per_pair = " ".join(_ratio(r) for r in total.get("ratios", []))
        text += f", {profile['pairs']} pairs ({per_pair})" if per_pair else f", {profile['pairs']} pairs"
    return text


def _worst_cell(profile: ProfileReportJSON) -> str:
    """The node with the most time at stake (``worst_nodes``: one the change added by its time); without a
    comparison, the slowest node and its share."""
    if profile["status"] in NOT_TIMED:
        return ""
    compared = worst_nodes(profile.get("nodes", []), 1)
    if compared:
        (worst,) = compared
        shown = _ratio(worst["ratio"]) if "ratio" in worst else _text(worst_label(worst))
        return f"{_code(worst['name'], cell=True)} {shown}"
    nodes = profile.get("nodes", [])
    if not nodes:
        return ""
    slowest = max(nodes, key=lambda n: n.get("current_ns", 0))
    share = f" ({slowest['share']:.0%})" if "share" in slowest else ""
    return f"{_code(slowest['name'], cell=True)} {fmt_ns(slowest.get('current_ns', 0))}{share}"


def _table(mode: str, profiles: Sequence[ProfileReportJSON]) -> list[str]:
    ordered = sorted(profiles, key=lambda p: p["status"] not in ATTENTION)  # stable: the rest keep their order
    shown = ordered[:PROFILES_SHOWN]
    node = "Worst node" if mode in ("check", "against") else "Slowest node"
    lines = [f"| Test | Status | Total | {node} |", "| --- | --- | --- | --- |"]
    lines += [
        f"| {_code(_label(p), cell=True)} | {_status_cell(p['status'])} | {_total_cell(p)} | {_worst_cell(p)} |"
        for p in shown
    ]
    more = _more(len(shown), len(ordered), "profiles (see the JSON report)")
    return lines + (["", *more] if more else [])  # a blank line ends a table; a plain line would join it


# One block per problem --------------------------------------------------------------------------------


def _leaders(item: FlagJSON) -> str:
    leaders = item.get("led_by", [])
    if not leaders:
        return ""
    shown = ", ".join(
        f"{_code(v['name'])} {fmt_ns(v['baseline_ns'])} -> {fmt_ns(v['current_ns'])}" for v in leaders[:LEADERS_SHOWN]
    )
    return f", led by {shown}" + (f" and {len(leaders) - LEADERS_SHOWN} more" if len(leaders) > LEADERS_SHOWN else "")


def _item(item: FlagJSON) -> str:
    """One flagged or warned item: what it is, where, and its ratio."""
    kind, name, ratio = item.get("kind", ""), item.get("name", ""), _ratio(item.get("ratio", 0.0))
    if kind == "total":
        return f"the total {ratio}"
    if kind == "node":
        where = f" in {_code(item['module'])}" if item.get("module") else ""
        if item.get("direction", FORWARD) != FORWARD:  # a training step's: which way, and what
            where += f" {_text(item['direction'])} ({_code(item.get('target', ''))})"
        return f"node {_code(name)}{where} {ratio}"
    if kind == "op":
        return f"every {_code(name)} node {ratio}{_leaders(item)}"
    return f"{_text(kind)} {_code(name)} {ratio}{_leaders(item)}"


def _slowed_table(nodes: Sequence[NodeJSON], *, against: bool = False) -> list[str]:
    slowed = worst_nodes([n for n in nodes if item_tone(n) == "bad"])  # failed the test, the most time lost first
    if not slowed:
        return []
    times = "Old -> new" if against else "Baseline -> current"
    lines = [
        f"| Slower node | Module | {times} | Ratio | Band | Source |",
        "| --- | --- | --- | ---: | ---: | --- |",
    ]
    for n in slowed[:NODES_SHOWN]:
        module = _code(n["module"], cell=True) if n.get("module") else "root"
        if n.get("direction", FORWARD) != FORWARD:
            module += f" {_text(n['direction'])}"
        source = _code(n["source"], cell=True) if n.get("source") else ""
        times = f"{fmt_ns(n['baseline_ns'])} -> {fmt_ns(n['current_ns'])}"
        band = f"+{n['band']:.0%}"
        lines.append(
            f"| {_code(n['name'], cell=True)} | {module} | {times} | {_ratio(n['ratio'])} | {band} | {source} |"
        )
    more = _more(NODES_SHOWN, len(slowed), "slower nodes")
    return ["", *lines, *(["", *more] if more else [])]


def _regression_block(profile: ProfileReportJSON) -> list[str]:
    flagged = profile.get("flagged", [])
    lines = [f"### {_code(_label(profile))}: regression", ""]
    where = blame_lines_of(profile)
    if where:  # what the failure leads with: where the time went
        lines += [f"Where: {_text(where[0])}", *(f"- {_text(line)}" for line in where[1:]), ""]
    lines += ["Failed by:"]
    lines += [f"- {_item(f)}" for f in flagged[:NODES_SHOWN]]
    lines += [f"- {line}" for line in _more(NODES_SHOWN, len(flagged), "items")]
    lines += _slowed_table(profile.get("nodes", []), against=bool(profile.get("against")))
    total = profile.get("total", {})
    if "ratio" in total and "baseline_ns" in total:
        # against a revision both sides of a pair meet the same machine: no reference workload corrects them
        corrected = (
            f" at {_text(profile['against'])}, per pair of old and new processes"
            if profile.get("against")
            else f" against the reference workload (machine {_ratio(total['machine_factor'])}"
            f"{machine_credit(total['machine_factor'], total.get('verdict', ''))})"
        )
        lines += [
            "",
            f"Total: {fmt_ns(total['baseline_ns'])} -> {fmt_ns(total['current_ns'])}, {_ratio(total['ratio'])}"
            f"{corrected}, band +{total.get('band', 0.0):.0%}: {_text(total.get('verdict', ''))}",
        ]
    return lines


def _mismatch_block(profile: ProfileReportJSON) -> list[str]:
    why = (
        "Not compared: the test hands the model other inputs, another mode or another state of torch than at "
        f"{_text(profile['against'])}."
        if profile.get("against")
        else "Not compared: the baseline was recorded elsewhere, or with other inputs, another mode or another state "
        "of torch."
    )
    lines = [f"### {_code(_label(profile))}: mismatch", "", why]
    mismatches = profile.get("mismatches", [])
    lines += [f"- {_text(m)}" for m in mismatches[:NODES_SHOWN]]
    return lines + [f"- {line}" for line in _more(NODES_SHOWN, len(mismatches), "differences")]


def _busy(profiles: Sequence[ProfileReportJSON]) -> list[str]:
    """One line per profile measured on a busy machine, or undecided, with its figures: never folded."""
    items = []
    for p in profiles:
        if p.get("noisy"):
            items.append(f"- {_code(_label(p))}: undecided, too noisy to decide: {_text(p['noisy'])}")
        elif busy_line(p):
            items.append(f"- {_code(_label(p))}: {_text(busy_line(p))}")
    shown = items[:ITEMS_SHOWN] + [f"- {m}" for m in _more(ITEMS_SHOWN, len(items))]
    return ["", *shown] if items else []


def _blocks(profiles: Sequence[ProfileReportJSON]) -> list[str]:
    problems = [p for p in profiles if p["status"] in (Status.REGRESSION, Status.MISMATCH)]
    out: list[str] = []
    for p in problems[:BLOCKS_SHOWN]:
        block = _regression_block(p) if p["status"] == Status.REGRESSION else _mismatch_block(p)
        out += ["", *block]
    if len(problems) > BLOCKS_SHOWN:
        out += ["", f"... {len(problems) - BLOCKS_SHOWN} more regressions or mismatches (see the JSON report)"]
    return out


# Folded lists -----------------------------------------------------------------------------------------


def _details(summary: str, items: Sequence[str]) -> list[str]:
    """A collapsed list (GitHub renders ``<details>``; the blank lines let Markdown work inside it)."""
    if not items:
        return []
    shown = [f"- {i}" for i in items[:ITEMS_SHOWN]] + [f"- {m}" for m in _more(ITEMS_SHOWN, len(items))]
    return ["", "<details>", f"<summary>{summary} ({len(items)})</summary>", "", *shown, "", "</details>"]


def _warnings(profiles: Sequence[ProfileReportJSON]) -> list[str]:
    out = []
    for p in profiles:
        label = _code(_label(p))
        out += [f"{label}: {_item(w)}, slower without failing, or undecided" for w in p.get("warned", [])]
        added, removed = len(p.get("added", [])), len(p.get("removed", []))
        graphs: GraphsJSON | dict[str, int] = p.get("graphs") or {}
        broke = graphs.get("baseline") != graphs.get("current")
        if added or removed or broke:
            change = f", {graphs_text(graphs['baseline'], graphs['current'])}" if broke else ""
            since = _text(p["against"]) if p.get("against") else "the baseline"
            out.append(f"{label}: graph changed since {since}, {added} node(s) added, {removed} removed{change}")
    return out


def _compiled(profiles: Sequence[ProfileReportJSON]) -> list[str]:
    """Each compiled model's kernels, graph calls, graph breaks and compile time (``capture.inductor``)."""
    return [
        f"{_code(_label(p))}: {_text(capture.get('detail', ''))}"
        for p in profiles
        if (capture := p.get("capture") or {}).get("method") == "inductor"
    ]


def _hints(profiles: Sequence[ProfileReportJSON]) -> list[str]:
    """Every profile's hints, the most time at stake first (each message names its nodes and their time)."""
    hints = [(h, p) for p in profiles for h in p.get("hints", [])]
    hints.sort(key=lambda hp: -hp[0].get("time_ns", 0))
    return [f"{_code(_label(p))}: {_text(h.get('message', ''))}" for h, p in hints]


def _unused(unused: Sequence[str]) -> list[str]:
    if not unused:
        return []
    shown = ", ".join(_code(u) for u in unused[:ITEMS_SHOWN])
    more = f", ... {len(unused) - ITEMS_SHOWN} more" if len(unused) > ITEMS_SHOWN else ""
    return ["", f"**Unused baselines** ({len(unused)}): {shown}{more}"]


def markdown_summary(mode: str, profiles: Sequence[ProfileReportJSON], unused: Sequence[str]) -> str:
    """The run's summary in GitHub-flavoured Markdown, ending with a newline."""
    if mode not in MODES:
        raise ValueError(f"fxprof markdown: mode must be one of {', '.join(MODES)}, not {mode!r}")
    lines = [_heading(mode, profiles)]
    if profiles:
        lines += ["", *_table(mode, profiles)]
    lines += _busy(profiles)
    lines += _blocks(profiles)
    lines += _details("Warnings", _warnings(profiles))
    lines += _details("Compiled models", _compiled(profiles))
    lines += _details("Hints", _hints(profiles))
    lines += _unused(sorted(unused))
    return "\n".join(lines) + "\n"


def _separator(target: Path) -> str:
    """What puts a blank line between the file's content and ours: an HTML block (a ``</details>`` line) or a
    table before us would otherwise swallow our heading."""
    if not target.exists() or target.stat().st_size == 0:
        return ""
    with target.open("rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return "\n" if fh.read(1) == b"\n" else "\n\n"


def write_markdown(path: Path | None, text: str, environ: Mapping[str, str] = os.environ) -> list[Path]:
    """Write ``text`` to ``path`` (atomically, if given) and append it to the file that
    ``$GITHUB_STEP_SUMMARY`` names (if set and not empty), never overwriting what other steps wrote there.
    Return the files written."""
    written: list[Path] = []
    if path is not None:
        write_atomic(path, text)
        written.append(path)
    summary = environ.get(SUMMARY_ENV, "")
    if summary:
        target = Path(summary)
        addition = _separator(target) + text
        with target.open("a", encoding="utf-8", newline="\n") as fh:
            fh.write(addition)  # one write: the job's other steps may append too
        written.append(target)
    return written
