"""The baseline file's JSON: its shapes (``TypedDict``s), its schema version, and records written as it.

Schema versions: 1, the entry's own recording only; 2 adds an entry's ``recorded`` (the date of its runs) and
``history`` (its earlier recordings, newest first), both left out when empty, so that a version 1 file reads as it
always has and is written as version 2 by the next ``--fxprof-update``. Fields added since are optional, left out
when empty and ignored by older readers, so they needed no new version. An environment and a protocol are written
whole (``asdict``).

Must not import torch, pytest or pandas.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, NotRequired, TypedDict

from pytest_fxprof.records.measurement import FORWARD, BaselineEntry, Capture, NodeInfo, Recording, Run

SCHEMA_VERSION = 2


class NodeJSON(TypedDict):
    key: str
    name: str
    op: str
    target: str
    module: str
    source: str
    shape: NotRequired[str]
    allocated: NotRequired[int]
    direction: NotRequired[str]
    forward: NotRequired[str]


class RunJSON(TypedDict):
    total_ns: int
    instrumented_ns: int
    reference_ns: int
    node_ns: list[int]
    node_spread_ns: list[int]
    faults: NotRequired[int]
    node_faults: NotRequired[list[int]]
    module_faults: NotRequired[dict[str, int]]


class SetupJSON(TypedDict):
    inputs: list[str]
    mode: str
    state: NotRequired[list[str]]
    """The globals of torch the test changed before the call; left out where it changed none."""


class RecordingJSON(TypedDict):
    date: str
    environment: dict[str, Any]
    protocol: dict[str, int]
    runs: list[RunJSON]


class EntryJSON(TypedDict):
    capture: dict[str, Any]
    environment: dict[str, Any]
    protocol: dict[str, int]
    tolerances: dict[str, float]
    nodes: list[NodeJSON]
    runs: list[RunJSON]
    setup: NotRequired[SetupJSON]
    recorded: NotRequired[str]
    history: NotRequired[list[RecordingJSON]]
    revision: NotRequired[str]
    fingerprint: NotRequired[FingerprintJSON]


class FingerprintJSON(TypedDict):
    """A call's computation fingerprint (``records.fingerprint``): its digest, its parts (entry by entry), each
    module subtree's digest, and what could not be read."""

    value: str
    parts: dict[str, dict[str, str]]
    modules: dict[str, str]
    unreadable: list[str]


class FileJSON(TypedDict):
    schema_version: int
    test_id: str
    entries: dict[str, EntryJSON]


def recording_to_json(recording: Recording) -> RecordingJSON:
    return {
        "date": recording.date,
        "environment": asdict(recording.environment),
        "protocol": asdict(recording.protocol),
        "runs": [run_to_json(r) for r in recording.runs],
    }


def capture_to_json(capture: Capture) -> dict[str, Any]:
    """A capture as the baseline file and the report write it (``classes`` left out when empty)."""
    out: dict[str, Any] = {
        "method": capture.method,
        "leaf_modules": list(capture.leaf_modules),
        "graphs": capture.graphs,
        "detail": capture.detail,
    }
    if capture.classes:
        out["classes"] = dict(capture.classes)
    if capture.opaque:
        out["opaque"] = list(capture.opaque)
    return out


def entry_to_json(entry: BaselineEntry) -> EntryJSON:
    out: EntryJSON = {
        "capture": capture_to_json(entry.capture),
        "environment": asdict(entry.environment),
        "protocol": asdict(entry.protocol),
        "tolerances": {"node": entry.tolerances.node, "total": entry.tolerances.total},
        "nodes": [
            _node_json(n, entry.shapes[i] if entry.shapes else None, entry.allocated[i] if entry.allocated else None)
            for i, n in enumerate(entry.nodes)
        ],
        "runs": [run_to_json(r) for r in entry.runs],
    }
    if entry.setup is not None:
        setup: SetupJSON = {"inputs": list(entry.setup.inputs), "mode": entry.setup.mode}
        if entry.setup.state:
            setup["state"] = list(entry.setup.state)
        out["setup"] = setup
    if entry.recorded:  # left out when unknown (an entry of a version 1 file), as is an empty history
        out["recorded"] = entry.recorded
    if entry.history:
        out["history"] = [recording_to_json(r) for r in entry.history]
    if entry.revision:  # left out when unknown (a dirty working tree, no git, an older file)
        out["revision"] = entry.revision
    if entry.fingerprint is not None:  # left out where not read (an older file)
        f = entry.fingerprint
        out["fingerprint"] = {
            "value": f.value,
            "parts": {p: dict(sorted(v.items())) for p, v in sorted(f.parts.items())},
            "modules": dict(sorted(f.modules.items())),
            "unreadable": list(f.unreadable),
        }
    return out


def _node_json(n: NodeInfo, shape: str | None, allocated: int | None = None) -> NodeJSON:
    out: NodeJSON = {
        "key": n.key,
        "name": n.name,
        "op": n.op,
        "target": n.target,
        "module": n.module,
        "source": n.source,
    }
    if shape is not None:
        out["shape"] = shape
    if allocated is not None:
        out["allocated"] = allocated
    if n.direction != FORWARD:  # a forward node's entry reads as it always has
        out["direction"] = n.direction
        out["forward"] = n.forward
    return out


def run_to_json(run: Run) -> RunJSON:
    out: RunJSON = {
        "total_ns": run.total_ns,
        "instrumented_ns": run.instrumented_ns,
        "reference_ns": run.reference_ns,
        "node_ns": list(run.node_ns),
        "node_spread_ns": list(run.node_spread_ns),
    }
    if run.faults is not None:  # memory, where it was read
        out["faults"] = run.faults
    if run.node_faults:
        out["node_faults"] = list(run.node_faults)
    if run.module_faults:
        out["module_faults"] = dict(run.module_faults)
    return out
