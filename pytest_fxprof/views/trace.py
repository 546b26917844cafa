"""Chrome trace event files (``--fxprof-trace DIR``): each profile's kept passes as nested spans.

Owns the trace layout: one JSON Object Format file per profile (``{"traceEvents": [...], "displayTimeUnit":
"ns", "otherData": {...}}``) that opens in Perfetto (ui.perfetto.dev) and chrome://tracing. A view of the
per-profile report; decides nothing. Must not import torch or pytest.

What the timeline shows, and what it does not: every span's duration is a measured time (a node's span is
its ``samples_ns[i]`` in pass ``i``), but the spans are laid back to back. The instrumentation times nodes,
not what lies between them (the interpreter's dispatch, Python glue, the time between passes), so the
trace invents no gaps: a pass span is the sum of its nodes' times (the instrumented pass it came from is
in its ``instrumented_ns`` argument), and the timeline is a picture of where the measured time went, not
a wall-clock recording.

Layout, on one track: pass ``i`` starts where pass ``i - 1`` ends; inside it the nodes follow in graph
order, each inside a span of its module path and of every ancestor (``layer1``, ``layer1.0``,
``layer1.0.conv1``); in a training step, under a span of the node's direction (``forward``, ``backward``,
``optimizer``), so that a backward node sits under its module's span in the backward. A module span covers
one run of consecutive nodes that share it, so a module called
twice with another in between gets two spans. Positions are whole nanoseconds and become microseconds
(the format's unit) only when written, so a child never outlives its parent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_fxprof.records.disturbance import BUSY_LINE
from pytest_fxprof.records.measurement import FORWARD
from pytest_fxprof.records.profile import ROOT
from pytest_fxprof.store.baseline import SUFFIX, file_name
from pytest_fxprof.store.files import write_atomic
from pytest_fxprof.views.judged_json import AggregateJSON, NodeJSON
from pytest_fxprof.views.report import ProfileReportJSON, busy_line, item_tone

TRACE_SUFFIX = ".trace.json"
NS_PER_US = 1000
READ_BACK_NS = 0.2
"""Added to every start and duration before they become microseconds, so that a viewer reading them back to
nanoseconds by truncation (Perfetto's importer) or by rounding, alone or summed into an end, gets the exact
integers: written as plain quotients, ``12.345`` reads back as ``12344.999...`` and truncates to one less, and
a child would end after its parent."""
PID = 1
TID = 1
TONE_COLOURS = {"bad": "terrible", "warn": "yellow"}
"""Reserved colour names of the trace viewers (``cname``), by ``report.item_tone``; a span within its band keeps
the viewer's own colour."""
NODE_ARGS = ("key", "direction", "forward", "op", "target", "module", "shape", "layout", "source", "flops")
VERDICT_ARGS = ("baseline_ns", "ratio", "band", "verdict", "reason")
OTHER_DATA = ("torch", "device", "engine", "clock", "threads", "cpu")
TIMING_NOTE = (
    "each span lasts its measured time; spans are laid back to back in graph order, pass after pass: "
    "the time between nodes is not measured, so it is not shown"
)


@dataclass
class _Span:
    """A complete (``"X"``) event under construction; its end is known when its last child is laid out."""

    name: str
    cat: str
    start_ns: int
    end_ns: int = 0
    args: dict[str, Any] = field(default_factory=dict)
    colour: str | None = None

    def event(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "cat": self.cat,
            "ph": "X",
            "pid": PID,
            "tid": TID,
            "ts": (self.start_ns + READ_BACK_NS) / NS_PER_US,
            "dur": (self.end_ns - self.start_ns + READ_BACK_NS) / NS_PER_US,
            "args": self.args,
        }
        if self.colour is not None:
            out["cname"] = self.colour
        return out


def _text(profile: ProfileReportJSON, name: str) -> str:
    value = profile.get(name)
    if not isinstance(value, str):
        raise ValueError(
            f"fxprof trace: a profile has no {name!r} text (got {value!r}); pass the profiles of a report "
            "that this version of pytest-fxprof wrote"
        )
    return value


def _nodes(profile: ProfileReportJSON, label: str) -> list[NodeJSON]:
    nodes = profile.get("nodes")
    if not isinstance(nodes, list) or not all(isinstance(n, Mapping) for n in nodes):
        raise ValueError(f"fxprof trace: {label}: 'nodes' must be a list of node objects; got {type(nodes).__name__}")
    return nodes


def _samples(node: NodeJSON, label: str) -> list[int]:
    samples = node.get("samples_ns")
    if isinstance(samples, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in samples):
        return [int(s) for s in samples]
    raise ValueError(
        f"fxprof trace: {label}: node {node.get('name')!r} has no per-pass times (samples_ns, whole "
        f"nanoseconds; got {samples!r}); write the report with this version of pytest-fxprof"
    )


def _ancestors(module: str) -> list[str]:
    """``"a.b.c"`` -> ``["a", "a.b", "a.b.c"]``; the root module (``""``) has none."""
    parts = module.split(".") if module else []
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _shared(open_spans: Sequence[_Span], chain: Sequence[str]) -> int:
    """How many of the open module spans (outermost first) the next node stays inside."""
    count = 0
    for span, path in zip(open_spans, chain, strict=False):
        if span.name != path:
            break
        count += 1
    return count


def _verdict_args(item: NodeJSON | AggregateJSON) -> dict[str, Any]:
    fields: Mapping[str, Any] = item
    return {name: fields[name] for name in VERDICT_ARGS if name in fields}


def _node_span(node: NodeJSON, index: int, start: int, ns: int) -> _Span:
    fields: Mapping[str, Any] = node
    args = {name: fields[name] for name in NODE_ARGS if name in fields}
    args.update(pass_index=index, time_ns=ns, median_ns=node.get("current_ns"), **_verdict_args(node))
    colour = TONE_COLOURS.get(item_tone(node))
    return _Span(str(node.get("name", "")), "node", start, start + ns, args, colour)


def _module_span(path: str, start: int, modules: Mapping[str, AggregateJSON], direction: str = "") -> _Span:
    """A module span (in a training step, ``direction``'s: the span of the direction itself where ``path`` is
    it); its arguments carry the module's own verdict (over all its runs) where it has one."""
    if direction and path == direction:
        args: dict[str, Any] = {"direction": direction}
        aggregate = modules.get(f"{ROOT} {direction}")
    else:
        args = {"module": path, **({"direction": direction} if direction else {})}
        aggregate = modules.get(f"{path} {direction}" if direction else path)
    if aggregate is not None:
        args.update(median_ns=aggregate.get("current_ns"), **_verdict_args(aggregate))
    colour = TONE_COLOURS.get(item_tone(aggregate)) if aggregate is not None else None
    return _Span(path, "module", start, args=args, colour=colour)


def _pass_spans(
    index: int,
    nodes: Sequence[NodeJSON],
    times: Sequence[int],
    start: int,
    modules: Mapping[str, AggregateJSON],
) -> list[_Span]:
    """One pass, parents before children: the pass span, then module and node spans in graph order."""
    whole = _Span(f"pass {index}", "pass", start, args={"pass_index": index})
    spans = [whole]
    open_spans: list[_Span] = []
    cursor = start
    step = any(node.get("direction", FORWARD) != FORWARD for node in nodes)
    for node, ns in zip(nodes, times, strict=True):
        direction = str(node.get("direction", FORWARD)) if step else ""
        chain = ([direction] if step else []) + _ancestors(str(node.get("module", "")))
        keep = _shared(open_spans, chain)
        for span in open_spans[keep:]:
            span.end_ns = cursor
        del open_spans[keep:]
        for path in chain[keep:]:
            span = _module_span(path, cursor, modules, direction)
            spans.append(span)
            open_spans.append(span)
        spans.append(_node_span(node, index, cursor, ns))
        cursor += ns
    for span in open_spans:
        span.end_ns = cursor
    whole.end_ns = cursor
    whole.args["nodes_ns"] = cursor - start
    return spans


def _metadata(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": PID, "tid": TID, "args": {"name": value}}


def trace_events(profile: ProfileReportJSON) -> dict[str, Any]:
    """The Chrome trace of one profile report (an element of the JSON report's ``profiles``): as many passes
    as every node has samples for (they are aligned: ``samples_ns[i]`` of every node is pass ``i``)."""
    test_id, key = _text(profile, "test_id"), _text(profile, "key")
    label = f"{test_id} [{key}]"
    nodes = _nodes(profile, label)
    samples = [_samples(n, label) for n in nodes]
    passes = min((len(s) for s in samples), default=0)
    modules = {a["name"]: a for a in profile.get("aggregates", []) if a.get("kind") == "module"}
    instrumented = profile.get("total", {}).get("samples_ns", [])
    events = [_metadata("process_name", test_id), _metadata("thread_name", label)]
    cursor = 0
    for i in range(passes):
        spans = _pass_spans(i, nodes, [s[i] for s in samples], cursor, modules)
        if len(instrumented) == passes:
            spans[0].args["instrumented_ns"] = instrumented[i]
        cursor = spans[0].end_ns
        events.extend(span.event() for span in spans)
    environment = profile.get("environment", {})
    protocol = profile.get("protocol", {})
    other: dict[str, Any] = {
        "test_id": test_id,
        "key": key,
        "status": profile.get("status", ""),
        "passes": passes,
        "warmup": protocol.get("warmup"),
        "timing": TIMING_NOTE,
        **({"against": profile["against"], "pairs": profile.get("pairs")} if profile.get("against") else {}),
        **{name: environment[name] for name in OTHER_DATA if name in environment},
    }
    busy = busy_line(profile)
    if busy:  # the spans below came from a disturbed machine: the trace says so, with the figures
        other["busy_machine"] = busy
        events[0]["args"]["name"] = f"{test_id} ({BUSY_LINE})"
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}


def trace_file_name(test_id: str, key: str) -> str:
    """A safe file name for one profile's trace (only ``[A-Za-z0-9._-]``, a hash keeps ids apart)."""
    return file_name(f"{test_id}[{key}]").removesuffix(SUFFIX) + TRACE_SUFFIX


def _dumps(trace: Mapping[str, Any]) -> str:
    # compact (a trace has thousands of events); non-ASCII kept as UTF-8, since some trace readers do not
    # decode \\u escapes
    return json.dumps(trace, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"


def write_traces(directory: Path, profiles: Sequence[ProfileReportJSON]) -> list[Path]:
    """Write one trace file per profile into ``directory`` (created if needed); return the files."""
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"--fxprof-trace needs a directory, and {directory} is a file; give a directory path")
    files: dict[Path, str] = {}
    for profile in profiles:
        trace = trace_events(profile)  # every profile is checked before any file is written
        path = directory / trace_file_name(trace["otherData"]["test_id"], trace["otherData"]["key"])
        if path in files:
            raise ValueError(
                f"fxprof trace: two profiles named {trace['otherData']['test_id']} [{trace['otherData']['key']}]; "
                "give each fxprof call of a test its own name"
            )
        files[path] = _dumps(trace)
    for path, text in files.items():
        write_atomic(path, text)
    return list(files)
