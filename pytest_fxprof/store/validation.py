"""Reading the baseline file's JSON back into records, every field checked.

Each reader raises ``ShapeError`` (a ``ValueError``) naming the field's path and what was expected
(``entries['call0'].runs[0].node_ns should be 2 non-negative integers (one per node)``); fields added after a file
was written read as their defaults. A history is read whole, as the file holds it: a recording of another
environment or protocol than its entry's own is kept, never learnt from (``BaselineEntry.comparable_recordings``).

Must not import torch, pytest or pandas.
"""

from __future__ import annotations

import math
import re
from typing import Any

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

DATE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
"""A recording's date: UTC, ISO 8601 to the second (``2026-11-24T22:30:05Z``)."""
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


class ShapeError(ValueError):
    """A field with the wrong type or missing; the message is the field's path and what was expected."""


def member(obj: object, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """The member ``key`` of the JSON object ``obj`` (found at ``where``, "" for the top), of the type ``kind``."""
    if not isinstance(obj, dict):
        raise ShapeError(f"{where or 'the top level'} should be an object")
    if key not in obj:
        raise ShapeError(f"{where}.{key} is missing" if where else f"'{key}' is missing")
    value = obj[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int in Python; a true/false where a number belongs is still the wrong shape
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise ShapeError(f"{where + '.' if where else ''}{key} should be {names}, found {type(value).__name__}")
    return value


def _count(obj: object, key: str, where: str, minimum: int = 0) -> int:
    value: int = member(obj, key, int, where)
    if value < minimum:
        raise ShapeError(f"{where}.{key} should be at least {minimum}, found {value}")
    return value


def _number(obj: object, key: str, where: str) -> float:
    value = float(member(obj, key, (int, float), where))
    if not math.isfinite(value) or value < 0:
        raise ShapeError(f"{where}.{key} should be a finite non-negative number, found {value}")
    return value


def _strings(obj: object, key: str, where: str) -> tuple[str, ...]:
    values = member(obj, key, list, where)
    if not all(isinstance(v, str) for v in values):
        raise ShapeError(f"{where}.{key} should be a list of strings")
    return tuple(values)


def _int_list(obj: object, key: str, where: str, length: int) -> tuple[int, ...]:
    values = member(obj, key, list, where)
    if len(values) != length or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise ShapeError(f"{where}.{key} should be {length} non-negative integers (one per node)")
    return tuple(values)


def _counts_by_name(obj: object, key: str, where: str) -> tuple[tuple[str, int], ...]:
    """A mapping of names to non-negative integers, sorted by name."""
    raw = member(obj, key, dict, where)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in raw.values()):
        raise ShapeError(f"{where}.{key} should map module paths to non-negative integers")
    return tuple(sorted(raw.items()))


def _classes(cap: object, where: str) -> tuple[tuple[str, str], ...]:
    """A capture's module classes (files of earlier versions have none)."""
    if not isinstance(cap, dict) or "classes" not in cap:
        return ()
    raw = member(cap, "classes", dict, where)
    if not all(isinstance(v, str) for v in raw.values()):
        raise ShapeError(f"{where}.classes should map module paths to class names (strings)")
    return tuple(sorted(raw.items()))


def run_from_json(raw: object, where: str, count: int) -> Run:
    """One process's run of a ``count``-node graph."""
    given = raw if isinstance(raw, dict) else {}  # member says what is wrong with anything else
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
        raise ShapeError(f"{where} holds no measured time (instrumented_ns and every node_ns are 0)")
    return run


def _environment_from_json(raw: object, where: str) -> Environment:
    env = member(raw, "environment", dict, where)
    w_env = f"{where}.environment"
    return Environment(
        torch=member(env, "torch", str, w_env),
        python=member(env, "python", str, w_env),
        platform=member(env, "platform", str, w_env),
        cpu=member(env, "cpu", str, w_env),
        threads=_count(env, "threads", w_env, minimum=1),
        device=member(env, "device", str, w_env),
        allocator=member(env, "allocator", str, w_env),
        # files written before the clock was recorded were timed on the wall clock
        clock=member(env, "clock", str, w_env) if "clock" in env else "wall",
        # and before the engine was, by the interpreter
        engine=member(env, "engine", str, w_env) if "engine" in env else "interpreter",
    )


def _protocol_from_json(raw: object, where: str) -> Protocol:
    proto = member(raw, "protocol", dict, where)
    return Protocol(
        warmup=_count(proto, "warmup", f"{where}.protocol"),
        passes=_count(proto, "passes", f"{where}.protocol", minimum=1),
        threads=_count(proto, "threads", f"{where}.protocol", minimum=1),
        processes=_count(proto, "processes", f"{where}.protocol", minimum=1),
    )


def _runs_from_json(raw: object, where: str, count: int) -> tuple[Run, ...]:
    runs_raw = member(raw, "runs", list, where)
    if not runs_raw:
        raise ShapeError(f"{where}.runs is empty")
    return tuple(run_from_json(r, f"{where}.runs[{i}]", count) for i, r in enumerate(runs_raw))


def _date(raw: object, key: str, where: str) -> str:
    value: str = member(raw, key, str, where)
    if value and not DATE.match(value):
        raise ShapeError(
            f"{where}.{key} is {value!r}, not a UTC date to the second such as '2026-11-24T22:30:05Z' (or '')"
        )
    return value


def _history_from_json(raw: object, where: str, count: int) -> tuple[Recording, ...]:
    if not isinstance(raw, dict) or "history" not in raw:  # version 1 files, and entries without history
        return ()
    out = []
    for i, item in enumerate(member(raw, "history", list, where)):
        w = f"{where}.history[{i}]"  # member says where an item is no object
        out.append(
            Recording(
                date=_date(item, "date", w),
                environment=_environment_from_json(item, w),
                protocol=_protocol_from_json(item, w),
                runs=_runs_from_json(item, w, count),
            )
        )
    return tuple(out)


def capture_from_json(cap: object, where: str) -> Capture:
    """A capture record as ``schema.capture_to_json`` writes it."""
    if not isinstance(cap, dict):
        raise ShapeError(f"{where} should be an object")
    return Capture(
        method=member(cap, "method", str, where),
        leaf_modules=_strings(cap, "leaf_modules", where),
        graphs=_count(cap, "graphs", where, minimum=1) if "graphs" in cap else 1,  # older files: one symbolic graph
        detail=member(cap, "detail", str, where) if "detail" in cap else "",
        classes=_classes(cap, where),
        opaque=_strings(cap, "opaque", where) if "opaque" in cap else (),
    )


def entry_from_json(raw: object, where: str = "entry") -> BaselineEntry:
    """An entry as ``schema.entry_to_json`` writes it: a baseline file's, or one sent from another process."""
    cap = member(raw, "capture", dict, where)
    given: dict[str, Any] = raw if isinstance(raw, dict) else {}  # member says what is wrong with anything else
    environment = _environment_from_json(raw, where)
    protocol = _protocol_from_json(raw, where)
    tol = member(raw, "tolerances", dict, where)
    nodes_raw = member(raw, "nodes", list, where)
    nodes = []
    shapes = []
    allocated = []
    for i, n in enumerate(nodes_raw):
        w = f"{where}.nodes[{i}]"
        key, name, op, target, module = (member(n, k, str, w) for k in ("key", "name", "op", "target", "module"))
        source = member(n, "source", str, w) if "source" in n else ""  # older files have none
        direction = member(n, "direction", str, w) if "direction" in n else FORWARD
        if direction not in DIRECTIONS:
            raise ShapeError(f"{w}.direction is {direction!r}, not one of {', '.join(DIRECTIONS)}")
        forward = member(n, "forward", str, w) if "forward" in n else ""
        nodes.append(NodeInfo(key, name, op, target, module, source, direction, forward))
        shapes.append(member(n, "shape", str, w) if "shape" in n else None)
        allocated.append(_count(n, "allocated", w) if "allocated" in n else None)
    setup = None
    if "setup" in given:  # older files have none
        raw_setup = member(raw, "setup", dict, where)
        setup = Setup(
            inputs=_strings(raw_setup, "inputs", f"{where}.setup"),
            mode=member(raw_setup, "mode", str, f"{where}.setup"),
            state=_strings(raw_setup, "state", f"{where}.setup") if "state" in raw_setup else (),
        )
    runs = _runs_from_json(raw, where, len(nodes))
    recorded = _date(raw, "recorded", where) if "recorded" in given else ""
    revision = member(raw, "revision", str, where) if "revision" in given else ""
    if revision and not _SHA.fullmatch(revision):
        raise ShapeError(f"{where}.revision is {revision[:80]!r}, not a git commit's full hexadecimal name")
    return BaselineEntry(
        capture=capture_from_json(cap, f"{where}.capture"),
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
        fingerprint=_fingerprint_from_json(given["fingerprint"], f"{where}.fingerprint")
        if "fingerprint" in given
        else None,
    )


def _fingerprint_from_json(raw: object, where: str) -> Fingerprint:
    """A stored fingerprint, checked: text entries only (its digest is computed again from them)."""
    parts = member(raw, "parts", dict, where)
    for part, entries in parts.items():
        if not isinstance(entries, dict) or not all(isinstance(v, str) for v in entries.values()):
            raise ShapeError(f"{where}.parts.{part} is not an object of strings")
    modules = member(raw, "modules", dict, where)
    if not all(isinstance(v, str) for v in modules.values()):
        raise ShapeError(f"{where}.modules is not an object of strings")
    return Fingerprint(parts, modules, _strings(raw, "unreadable", where))
