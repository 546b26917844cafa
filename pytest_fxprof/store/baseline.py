"""Baseline files: one JSON file per test, its schema, its validation, and the directory that holds them.

Owns the on-disk format (``SCHEMA_VERSION``) and the mapping from test id to file name. Files are written
with sorted keys, integers for times, two-space indentation and a trailing newline (``files.dumps``), so
recording the same data twice gives the same bytes and a refresh diffs readably, and atomically
(``files.write_atomic``). Must not import torch, pytest or pandas.

Schema versions: 1, the entry's own recording only; 2 adds an entry's ``recorded`` (the date of its runs) and
``history`` (its earlier recordings, newest first, each ``date``, ``environment``, ``protocol`` and ``runs``),
both left out when empty, so that a version 1 file reads as it always has and is written as version 2 by the
next ``--fxprof-update`` with every field kept. A history is read whole, as the file holds it: a recording of
another environment or protocol than its entry's own (a merge resolved by hand) is kept, and never learnt from
(``BaselineEntry.comparable_recordings``); the next update starts that history afresh and says so
(``store.history.carry``). Version 2 files may hold ``capture.classes`` (each module path's
class, for the aggregates of a class's instances): optional, left out when empty, ignored by readers that predate
it, so it needed no new version.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from pytest_fxprof.records.fingerprint import Fingerprint
from pytest_fxprof.records.measurement import (
    DIRECTIONS,
    FORWARD,
    BaselineEntry,
    Capture,
    Environment,
    NodeInfo,
    Protocol,
    Recording,
    Run,
    Setup,
    Tolerances,
)
from pytest_fxprof.store.files import TooLargeError, dumps, loads, read_text, stale_temporaries, write_atomic

SCHEMA_VERSION = 2
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
"""A recording's date: UTC, ISO 8601 to the second (``2026-11-24T22:30:05Z``)."""
SUFFIX = ".json"
MAX_SLUG = 80
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_CONFLICT = re.compile(r"^(<<<<<<<|>>>>>>>|=======)( |$)", re.MULTILINE)
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


class BaselineError(Exception):
    """A baseline file that cannot be used. The message names the file, the problem and the fix."""

    def __init__(self, path: Path, problem: str, fix: str) -> None:
        super().__init__(f"{path}: {problem}. {fix}")
        self.path = path
        self.problem = problem


class NewerSchemaError(BaselineError):
    """The file was written by a newer pytest-fxprof; it is never read, nor overwritten, by this one."""


# JSON shapes ---------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class BaselineFile:
    """A test's baselines, one entry per ``fxprof`` call (keyed by its name or call number)."""

    test_id: str
    entries: Mapping[str, BaselineEntry]


def environment_to_json(env: Environment) -> dict[str, Any]:
    return {
        "torch": env.torch,
        "python": env.python,
        "platform": env.platform,
        "cpu": env.cpu,
        "threads": env.threads,
        "device": env.device,
        "allocator": env.allocator,
        "clock": env.clock,
        "engine": env.engine,
    }


def protocol_to_json(protocol: Protocol) -> dict[str, int]:
    return {
        "warmup": protocol.warmup,
        "passes": protocol.passes,
        "threads": protocol.threads,
        "processes": protocol.processes,
    }


def recording_to_json(recording: Recording) -> RecordingJSON:
    return {
        "date": recording.date,
        "environment": environment_to_json(recording.environment),
        "protocol": protocol_to_json(recording.protocol),
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
        "environment": environment_to_json(entry.environment),
        "protocol": protocol_to_json(entry.protocol),
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


# Validation ----------------------------------------------------------------------------------------


class _ShapeError(Exception):
    """A field with the wrong type or missing; the message is the field's path and what was expected."""


def _get(obj: object, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict):
        raise _ShapeError(f"{where or 'the top level'} should be an object")
    if key not in obj:
        raise _ShapeError(f"{where}.{key} is missing" if where else f"'{key}' is missing")
    value = obj[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int in Python; a true/false where a number belongs is still the wrong shape
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise _ShapeError(f"{where + '.' if where else ''}{key} should be {names}, found {type(value).__name__}")
    return value


def _count(obj: object, key: str, where: str, minimum: int = 0) -> int:
    value: int = _get(obj, key, int, where)
    if value < minimum:
        raise _ShapeError(f"{where}.{key} should be at least {minimum}, found {value}")
    return value


def _number(obj: object, key: str, where: str) -> float:
    value = float(_get(obj, key, (int, float), where))
    if not math.isfinite(value) or value < 0:
        raise _ShapeError(f"{where}.{key} should be a finite non-negative number, found {value}")
    return value


def _strings(obj: object, key: str, where: str) -> tuple[str, ...]:
    values = _get(obj, key, list, where)
    if not all(isinstance(v, str) for v in values):
        raise _ShapeError(f"{where}.{key} should be a list of strings")
    return tuple(values)


def _int_list(obj: object, key: str, where: str, length: int) -> tuple[int, ...]:
    values = _get(obj, key, list, where)
    if len(values) != length or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise _ShapeError(f"{where}.{key} should be {length} non-negative integers (one per node)")
    return tuple(values)


def _counts_by_name(obj: object, key: str, where: str) -> tuple[tuple[str, int], ...]:
    """A mapping of names to non-negative integers, sorted by name."""
    raw = _get(obj, key, dict, where)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in raw.values()):
        raise _ShapeError(f"{where}.{key} should map module paths to non-negative integers")
    return tuple(sorted(raw.items()))


def _classes(cap: object, where: str) -> tuple[tuple[str, str], ...]:
    """A capture's module classes (files of earlier versions have none)."""
    if not isinstance(cap, dict) or "classes" not in cap:
        return ()
    raw = _get(cap, "classes", dict, where)
    if not all(isinstance(v, str) for v in raw.values()):
        raise _ShapeError(f"{where}.classes should map module paths to class names (strings)")
    return tuple(sorted(raw.items()))


def _run_from_json(raw: object, where: str, count: int) -> Run:
    given = raw if isinstance(raw, dict) else {}  # _get says what is wrong with anything else
    run = Run(
        total_ns=_count(raw, "total_ns", where),
        instrumented_ns=_count(raw, "instrumented_ns", where),
        reference_ns=_count(raw, "reference_ns", where),
        node_ns=_int_list(raw, "node_ns", where, count),
        node_spread_ns=_int_list(raw, "node_spread_ns", where, count),
        # memory: absent from runs that did not read it (files of earlier versions, a CUDA device)
        faults=_count(raw, "faults", where) if "faults" in given else None,
        node_faults=_int_list(raw, "node_faults", where, count) if "node_faults" in given else (),
        module_faults=_counts_by_name(raw, "module_faults", where) if "module_faults" in given else (),
    )
    if run.instrumented_ns == 0 or (count and not any(run.node_ns)):
        # nothing a profile measures takes no time: such a run would make any check look infinitely slower
        raise _ShapeError(f"{where} holds no measured time (instrumented_ns and every node_ns are 0)")
    return run


def _environment_from_json(raw: object, where: str) -> Environment:
    env = _get(raw, "environment", dict, where)
    w_env = f"{where}.environment"
    return Environment(
        torch=_get(env, "torch", str, w_env),
        python=_get(env, "python", str, w_env),
        platform=_get(env, "platform", str, w_env),
        cpu=_get(env, "cpu", str, w_env),
        threads=_count(env, "threads", w_env, minimum=1),
        device=_get(env, "device", str, w_env),
        allocator=_get(env, "allocator", str, w_env),
        # files written before the clock was recorded were timed on the wall clock
        clock=_get(env, "clock", str, w_env) if "clock" in env else "wall",
        # and before the engine was, by the interpreter
        engine=_get(env, "engine", str, w_env) if "engine" in env else "interpreter",
    )


def _protocol_from_json(raw: object, where: str) -> Protocol:
    proto = _get(raw, "protocol", dict, where)
    return Protocol(
        warmup=_count(proto, "warmup", f"{where}.protocol"),
        passes=_count(proto, "passes", f"{where}.protocol", minimum=1),
        threads=_count(proto, "threads", f"{where}.protocol", minimum=1),
        processes=_count(proto, "processes", f"{where}.protocol", minimum=1),
    )


def _runs_from_json(raw: object, where: str, count: int) -> tuple[Run, ...]:
    runs_raw = _get(raw, "runs", list, where)
    if not runs_raw:
        raise _ShapeError(f"{where}.runs is empty")
    return tuple(_run_from_json(r, f"{where}.runs[{i}]", count) for i, r in enumerate(runs_raw))


def _date(raw: object, key: str, where: str) -> str:
    value: str = _get(raw, key, str, where)
    if value and not DATE.match(value):
        raise _ShapeError(
            f"{where}.{key} is {value!r}, not a UTC date to the second such as '2026-11-24T22:30:05Z' (or '')"
        )
    return value


def _history_from_json(raw: object, where: str, count: int) -> tuple[Recording, ...]:
    if not isinstance(raw, dict) or "history" not in raw:  # version 1 files, and entries without history
        return ()
    out = []
    for i, item in enumerate(_get(raw, "history", list, where)):
        w = f"{where}.history[{i}]"
        if not isinstance(item, dict):
            raise _ShapeError(f"{w} should be an object")
        out.append(
            Recording(
                date=_date(item, "date", w),
                environment=_environment_from_json(item, w),
                protocol=_protocol_from_json(item, w),
                runs=_runs_from_json(item, w, count),
            )
        )
    return tuple(out)


def _capture_from_json(cap: object, where: str) -> Capture:
    if not isinstance(cap, dict):
        raise _ShapeError(f"{where} should be an object")
    return Capture(
        method=_get(cap, "method", str, where),
        leaf_modules=_strings(cap, "leaf_modules", where),
        graphs=_count(cap, "graphs", where, minimum=1) if "graphs" in cap else 1,  # older files: one symbolic graph
        detail=_get(cap, "detail", str, where) if "detail" in cap else "",
        classes=_classes(cap, where),
        opaque=_strings(cap, "opaque", where) if "opaque" in cap else (),
    )


def _entry_from_json(raw: object, where: str) -> BaselineEntry:
    cap = _get(raw, "capture", dict, where)
    environment = _environment_from_json(raw, where)
    protocol = _protocol_from_json(raw, where)
    tol = _get(raw, "tolerances", dict, where)
    nodes_raw = _get(raw, "nodes", list, where)
    nodes = []
    shapes = []
    allocated = []
    for i, n in enumerate(nodes_raw):
        w = f"{where}.nodes[{i}]"
        key, name, op, target, module = (_get(n, k, str, w) for k in ("key", "name", "op", "target", "module"))
        source = _get(n, "source", str, w) if "source" in n else ""  # older files have none
        direction = _get(n, "direction", str, w) if "direction" in n else FORWARD
        if direction not in DIRECTIONS:
            raise _ShapeError(f"{w}.direction is {direction!r}, not one of {', '.join(DIRECTIONS)}")
        forward = _get(n, "forward", str, w) if "forward" in n else ""
        nodes.append(NodeInfo(key, name, op, target, module, source, direction, forward))
        shapes.append(_get(n, "shape", str, w) if "shape" in n else None)
        allocated.append(_count(n, "allocated", w) if "allocated" in n else None)
    setup = None
    if isinstance(raw, dict) and "setup" in raw:  # older files have none
        raw_setup = _get(raw, "setup", dict, where)
        setup = Setup(
            inputs=_strings(raw_setup, "inputs", f"{where}.setup"),
            mode=_get(raw_setup, "mode", str, f"{where}.setup"),
            state=_strings(raw_setup, "state", f"{where}.setup") if "state" in raw_setup else (),
        )
    runs = _runs_from_json(raw, where, len(nodes))
    recorded = _date(raw, "recorded", where) if isinstance(raw, dict) and "recorded" in raw else ""
    revision = _get(raw, "revision", str, where) if isinstance(raw, dict) and "revision" in raw else ""
    if revision and not _SHA.fullmatch(revision):
        raise _ShapeError(f"{where}.revision is {revision[:80]!r}, not a git commit's full hexadecimal name")
    return BaselineEntry(
        capture=_capture_from_json(cap, f"{where}.capture"),
        environment=environment,
        protocol=protocol,
        tolerances=Tolerances(
            node=_number(tol, "node", f"{where}.tolerances"),
            total=_number(tol, "total", f"{where}.tolerances"),
        ),
        nodes=tuple(nodes),
        runs=runs,
        setup=setup,
        shapes=tuple(s or "" for s in shapes) if any(s is not None for s in shapes) else (),
        allocated=tuple(a or 0 for a in allocated) if any(a is not None for a in allocated) else (),
        recorded=recorded,
        history=_history_from_json(raw, where, len(nodes)),
        revision=revision,
        fingerprint=_fingerprint_from_json(raw["fingerprint"], f"{where}.fingerprint")
        if isinstance(raw, dict) and "fingerprint" in raw
        else None,
    )


def _fingerprint_from_json(raw: object, where: str) -> Fingerprint:
    """A stored fingerprint, checked: text entries only (its digest is computed again from them)."""
    parts = _get(raw, "parts", dict, where)
    for part, entries in parts.items():
        if not isinstance(entries, dict) or not all(isinstance(v, str) for v in entries.values()):
            raise _ShapeError(f"{where}.parts.{part} is not an object of strings")
    modules = _get(raw, "modules", dict, where)
    if not all(isinstance(v, str) for v in modules.values()):
        raise _ShapeError(f"{where}.modules is not an object of strings")
    return Fingerprint(parts, modules, _strings(raw, "unreadable", where))


def parse(text: str, path: Path) -> BaselineFile:
    """Validate a baseline file's text; raise ``BaselineError`` naming what is wrong."""
    rerecord = "Fix or delete it, then record it again with `pytest --fxprof-update`"
    if not text.strip():
        raise BaselineError(path, "the file is empty (an interrupted write or a bad checkout?)", rerecord)
    if _CONFLICT.search(text):
        raise BaselineError(
            path,
            "the file contains git merge-conflict markers",
            "Resolve the conflict by keeping one side (or re-record it with `pytest --fxprof-update`)",
        )
    try:
        raw = loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(
            path, f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}; truncated?)", rerecord
        ) from None
    except ValueError as exc:
        raise BaselineError(path, f"the file is not a pytest-fxprof baseline: {exc}", rerecord) from None
    try:
        version = _get(raw, "schema_version", int, "")
        if version > SCHEMA_VERSION:
            raise NewerSchemaError(
                path,
                f"it has schema version {version}, newer than the {SCHEMA_VERSION} this pytest-fxprof reads",
                "Upgrade pytest-fxprof to the version that wrote it",
            )
        if version < 1:
            raise _ShapeError(f"schema_version {version} is not a version pytest-fxprof ever wrote")
        test_id = _get(raw, "test_id", str, "")
        entries_raw = _get(raw, "entries", dict, "")
        entries = {str(k): _entry_from_json(v, f"entries[{k!r}]") for k, v in sorted(entries_raw.items())}
    except _ShapeError as exc:
        raise BaselineError(path, f"the file is not a pytest-fxprof baseline: {exc}", rerecord) from None
    return BaselineFile(test_id=test_id, entries=entries)


def render(baseline: BaselineFile) -> str:
    data: FileJSON = {
        "schema_version": SCHEMA_VERSION,
        "test_id": baseline.test_id,
        "entries": {k: entry_to_json(v) for k, v in baseline.entries.items()},
    }
    return dumps(data)


# File names and the store --------------------------------------------------------------------------


def file_name(test_id: str) -> str:
    """A safe, collision-free file name for a test id.

    Only ``[A-Za-z0-9._-]`` survive from the id (no separator, so no path can escape the directory),
    the readable part is cut to ``MAX_SLUG`` characters and never starts with a dot, and a hash of the
    whole id keeps two ids that read alike apart.
    """
    slug = _UNSAFE.sub("_", test_id).strip("._-")[:MAX_SLUG].rstrip("._-") or "test"
    digest = hashlib.sha256(test_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{slug}-{digest}{SUFFIX}"


MAX_BYTES = 64 << 20
"""A baseline file larger than this (64 MiB) is refused unread: the largest model profiled here (2,629 nodes,
five processes) gives about 1 MiB."""


def read_baseline(path: Path) -> BaselineFile:
    """The baseline in the file at ``path``, a plain file of the directory; ``BaselineError`` for anything else
    (a symbolic link, a file too large, unreadable or malformed), ``FileNotFoundError`` when there is none."""
    if path.is_symlink():
        raise BaselineError(
            path,
            f"it is a symbolic link (to {os.readlink(path)}), not a baseline file of this directory",
            "Replace the link with the file itself, or delete it and record again with `pytest --fxprof-update`",
        )
    try:
        text = read_text(path, MAX_BYTES)
    except FileNotFoundError:
        raise
    except TooLargeError as exc:
        raise BaselineError(
            path,
            f"it is too large to be a baseline ({exc})",
            "Delete it and record again with `pytest --fxprof-update`",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(path, f"cannot be read ({exc})", "Check the file's permissions and encoding") from None
    return parse(text, path)


@dataclass(frozen=True)
class BaselineStore:
    """The baseline directory."""

    directory: Path

    def path_for(self, test_id: str) -> Path:
        return self.directory / file_name(test_id)

    def load(self, test_id: str) -> BaselineFile | None:
        """The test's baselines, None if it has none; ``BaselineError`` if its file is unusable."""
        path = self.path_for(test_id)
        try:
            baseline = read_baseline(path)
        except FileNotFoundError:
            return None
        if baseline.test_id != test_id:
            raise BaselineError(
                path,
                f"it belongs to test {baseline.test_id!r}, not {test_id!r}",
                "It was copied or renamed by hand; delete it and record again with `pytest --fxprof-update`",
            )
        return baseline

    def write(self, baseline: BaselineFile) -> Path:
        path = self.path_for(baseline.test_id)
        write_atomic(path, render(baseline))
        return path

    def remove_stale_temporaries(self) -> list[Path]:
        """Delete the temporary files that writers killed before their rename left here; return them."""
        removed = []
        for path in stale_temporaries(self.directory):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
        return removed

    def recorded_tests(self) -> Iterator[tuple[Path, str | None]]:
        """Every baseline file with the test id it holds (None where the file cannot be parsed)."""
        if not self.directory.is_dir():
            return
        for path in sorted(self.directory.glob(f"*{SUFFIX}")):
            try:
                yield path, read_baseline(path).test_id
            except (BaselineError, OSError):
                yield path, None

    @staticmethod
    def problem_of(path: Path) -> str:
        """Why ``path`` cannot be read as a baseline (``recorded_tests`` gave it no test id), or "" if it can."""
        try:
            read_baseline(path)
        except BaselineError as exc:
            return exc.problem
        except OSError as exc:
            return f"cannot be read ({exc.strerror or exc})"
        return ""


def as_file(test_id: str, entries: Mapping[str, BaselineEntry]) -> BaselineFile:
    return BaselineFile(test_id=test_id, entries=dict(sorted(entries.items())))


def entry_from_json(raw: object, where: str = "entry") -> BaselineEntry:
    """Validate and build an entry sent from another process; ``ValueError`` names the bad field."""
    try:
        return _entry_from_json(raw, where)
    except _ShapeError as exc:
        raise ValueError(str(exc)) from None


def capture_from_json(raw: object, where: str) -> Capture:
    """Validate and build a capture record as ``capture_to_json`` writes it; ``ValueError`` names the bad field."""
    try:
        return _capture_from_json(raw, where)
    except _ShapeError as exc:
        raise ValueError(str(exc)) from None


def run_from_json(raw: object, where: str, count: int) -> Run:
    """Validate and build one process's run of a ``count``-node graph; ``ValueError`` names the bad field."""
    try:
        return _run_from_json(raw, where, count)
    except _ShapeError as exc:
        raise ValueError(str(exc)) from None
