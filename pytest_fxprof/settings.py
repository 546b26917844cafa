"""Per-test settings: their defaults, their validation and the order in which sources override.

Owns the names shared by the marker, the ini keys and the command line. Must not import torch or
pytest. Precedence, most specific first: the test's ``@pytest.mark.fxprof(...)``, the command line,
the ini file, the defaults below.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from enum import StrEnum
from typing import Any

from pytest_fxprof.judge.decision import DEFAULT_FLOOR_NS, NODE_TOLERANCE, TOTAL_TOLERANCE, Policy
from pytest_fxprof.records.measurement import Protocol, Tolerances


class Mode(StrEnum):
    OFF = "off"
    CHECK = "check"
    UPDATE = "update"
    SAMPLE = "sample"


ENGINES = ("compiled", "interpreter")
"""How nodes are timed: timestamps compiled into the graph's code, or torch.fx's Interpreter (the reference)."""
CAPTURES = ("auto", "symbolic", "export", "dynamo")
"""How a module becomes graphs: ``auto`` tries symbolic tracing (then with the submodule that broke it kept
whole), then ``torch.export``, then a ``torch.compile`` (dynamo) backend."""
TEXT_CHOICES = {"engine": ENGINES, "capture": CAPTURES}


class SettingsError(ValueError):
    """A setting with a value it cannot take; the message names the setting, where it came from and why."""


@dataclass(frozen=True)
class Settings:
    """What a test is measured and judged with."""

    node_tolerance: float = NODE_TOLERANCE
    total_tolerance: float = TOTAL_TOLERANCE
    warmup: int = 4
    passes: int = 12
    threads: int = 1
    processes: int = 5
    floor_us: float = DEFAULT_FLOOR_NS / 1e3
    engine: str = ENGINES[0]
    capture: str = CAPTURES[0]

    def protocol(self) -> Protocol:
        return Protocol(warmup=self.warmup, passes=self.passes, threads=self.threads, processes=self.processes)

    def tolerances(self) -> Tolerances:
        return Tolerances(node=self.node_tolerance, total=self.total_tolerance)

    def policy(self) -> Policy:
        return Policy(
            node_tolerance=self.node_tolerance, total_tolerance=self.total_tolerance, floor_ns=self.floor_us * 1e3
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


SETTING_NAMES = tuple(f.name for f in fields(Settings))

_MINIMUM: dict[str, float] = {
    "node_tolerance": 0.0,
    "total_tolerance": 0.0,
    "warmup": 0,
    "passes": 1,
    "threads": 1,
    "processes": 1,
    "floor_us": 0.0,
}


def _coerce(name: str, value: object, source: str) -> float | int | str:
    if name in TEXT_CHOICES:
        choices = TEXT_CHOICES[name]
        if value not in choices:
            raise SettingsError(f"{source}: {name} must be one of {', '.join(choices)}, not {value!r}")
        return str(value)
    kind = int if isinstance(getattr(Settings, name), int) else float
    if isinstance(value, bool):
        raise SettingsError(f"{source}: {name} must be a number, not {value!r}")
    try:
        number = kind(value)  # type: ignore[call-overload, arg-type]
    except (TypeError, ValueError, OverflowError):
        raise SettingsError(
            f"{source}: {name} must be {'an integer' if kind is int else 'a number'}, not {value!r}"
        ) from None
    if kind is int and isinstance(value, float) and not value.is_integer():
        raise SettingsError(f"{source}: {name} must be an integer, not {value!r}")
    if not math.isfinite(number):
        raise SettingsError(f"{source}: {name} must be a finite number, not {value!r}")
    if number < _MINIMUM[name]:
        raise SettingsError(f"{source}: {name} must be at least {_MINIMUM[name]:g}, not {value!r}")
    return number


def apply(base: Settings, values: Mapping[str, object], source: str) -> Settings:
    """``base`` with ``values`` (from ``source``, named in errors) laid over it; None means unset."""
    unknown = sorted(set(values) - set(SETTING_NAMES))
    if unknown:
        raise SettingsError(f"{source}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(SETTING_NAMES)}")
    changes = {k: _coerce(k, v, source) for k, v in values.items() if v is not None}
    return replace(base, **changes)  # type: ignore[arg-type]


def from_json(raw: Mapping[str, object]) -> Settings:
    return apply(Settings(), raw, "settings")
