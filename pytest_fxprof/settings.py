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

from pytest_fxprof.judge.decision import (
    DEFAULT_FLOOR_NS,
    HISTORY_NODE_TOLERANCE,
    HISTORY_TOTAL_TOLERANCE,
    NODE_TOLERANCE,
    TOTAL_TOLERANCE,
    Policy,
)
from pytest_fxprof.judge.paired import (
    CHANGED_TOLERANCE,
    MIN_DECIDING_PAIRS,
    PAIRED_NODE_TOLERANCE,
    PAIRED_TOTAL_TOLERANCE,
    PairedPolicy,
)
from pytest_fxprof.records.measurement import Protocol, Tolerances
from pytest_fxprof.store.history import DEFAULT_KEEP


class Mode(StrEnum):
    OFF = "off"
    CHECK = "check"
    UPDATE = "update"
    SAMPLE = "sample"
    AGAINST = "against"


ENGINES = ("compiled", "interpreter")
"""How nodes are timed: timestamps compiled into the graph's code, or torch.fx's Interpreter (the reference)."""
CAPTURES = ("auto", "symbolic", "export", "dynamo")
"""How a module becomes graphs: ``auto`` tries symbolic tracing (then with the submodule that broke it kept
whole), then ``torch.export``, then a ``torch.compile`` (dynamo) backend."""
SCHEDULES = ("auto", "duet", "alternate")
"""How a test's pairs run against a revision: ``duet``, the old and new process of a pair at the same time, pass
for pass in lock-step and trading their cores, so that both meet the same neighbours; ``alternate``, one after
the other (old first in odd pairs, new first in even ones); ``auto``, a duet where every call of the test runs on
the CPU, else alternate (two processes sharing one accelerator would each time the other's kernels)."""
TEXT_CHOICES = {"engine": ENGINES, "capture": CAPTURES, "schedule": SCHEDULES}


class SettingsError(ValueError):
    """A setting with a value it cannot take; the message names the setting, where it came from and why."""


@dataclass(frozen=True)
class Settings:
    """What a test is measured and judged with. A tolerance left unset (None) takes the mode's default: against
    a stored baseline ``NODE_TOLERANCE`` and ``TOTAL_TOLERANCE``, against a revision the paired rule's."""

    node_tolerance: float | None = None
    total_tolerance: float | None = None
    changed_tolerance: float = CHANGED_TOLERANCE
    """Against a revision: the band of a module, pattern or class whose code changed (never wider than the node
    band)."""
    warmup: int = 4
    passes: int = 12
    threads: int = 1
    processes: int = 5
    floor_us: float = DEFAULT_FLOOR_NS / 1e3
    engine: str = ENGINES[0]
    capture: str = CAPTURES[0]
    pairs: int = 6
    budget_s: float = 150.0
    schedule: str = SCHEDULES[0]
    history: int = DEFAULT_KEEP
    """Recordings a baseline entry keeps when ``--fxprof-update`` refreshes it: the new one and up to
    ``history - 1`` earlier ones (1: no history)."""

    def protocol(self) -> Protocol:
        return Protocol(warmup=self.warmup, passes=self.passes, threads=self.threads, processes=self.processes)

    def tolerances(self) -> Tolerances:
        return Tolerances(node=self._node(NODE_TOLERANCE), total=self._total(TOTAL_TOLERANCE))

    def _node(self, default: float) -> float:
        return default if self.node_tolerance is None else self.node_tolerance

    def _total(self, default: float) -> float:
        return default if self.total_tolerance is None else self.total_tolerance

    def policy(self) -> Policy:
        return Policy(
            node_tolerance=self._node(NODE_TOLERANCE),
            total_tolerance=self._total(TOTAL_TOLERANCE),
            floor_ns=self.floor_us * 1e3,
            # a tolerance the user set holds whatever the baseline's history
            history_node_tolerance=self._node(HISTORY_NODE_TOLERANCE),
            history_total_tolerance=self._total(HISTORY_TOTAL_TOLERANCE),
        )

    def paired_policy(self) -> PairedPolicy:
        """The paired rule's knobs, against a revision."""
        return PairedPolicy(
            node_tolerance=self._node(PAIRED_NODE_TOLERANCE),
            total_tolerance=self._total(PAIRED_TOTAL_TOLERANCE),
            changed_tolerance=self.changed_tolerance,
            floor_ns=self.floor_us * 1e3,
        )

    @property
    def max_pairs(self) -> int:
        """How many pairs a test may grow to while an item that gates is undecided."""
        return self.pairs * MORE_PAIRS

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


MORE_PAIRS = 3
"""Against a revision, a test whose verdict is still open after ``pairs`` pairs gets up to this many times as
many (within its ``budget_s``)."""

SETTING_NAMES = tuple(f.name for f in fields(Settings))
KINDS: dict[str, type[int] | type[float] | type[str]] = {
    name: float if name in ("node_tolerance", "total_tolerance") else type(getattr(Settings, name))
    for name in SETTING_NAMES
}
"""Each setting's type (a tolerance is a number, though its default is None)."""

_MINIMUM: dict[str, float] = {
    "node_tolerance": 0.0,
    "total_tolerance": 0.0,
    "changed_tolerance": 0.0,
    "warmup": 0,
    "passes": 1,
    "threads": 1,
    "processes": 1,
    "floor_us": 0.0,
    "pairs": MIN_DECIDING_PAIRS,
    "budget_s": 0.0,
    "history": 1,
}


_WHY_MINIMUM = {
    "pairs": f": fewer pairs cannot decide the total of a check whose pairs spread as usual (1 %) at the gate's "
    f"confidence (use {MIN_DECIDING_PAIRS} or more; the default is {Settings.pairs})",
}


def _coerce(name: str, value: object, source: str) -> float | int | str:
    if name in TEXT_CHOICES:
        choices = TEXT_CHOICES[name]
        if value not in choices:
            raise SettingsError(f"{source}: {name} must be one of {', '.join(choices)}, not {value!r}")
        return str(value)
    kind = KINDS[name]
    if isinstance(value, bool):
        raise SettingsError(f"{source}: {name} must be a number, not {value!r}")
    try:
        number: float = int(value) if kind is int else float(value)  # type: ignore[call-overload, arg-type]
    except (TypeError, ValueError, OverflowError):
        raise SettingsError(
            f"{source}: {name} must be {'an integer' if kind is int else 'a number'}, not {value!r}"
        ) from None
    if kind is int and isinstance(value, float) and not value.is_integer():
        raise SettingsError(f"{source}: {name} must be an integer, not {value!r}")
    if not math.isfinite(number):
        raise SettingsError(f"{source}: {name} must be a finite number, not {value!r}")
    if number < _MINIMUM[name]:
        why = _WHY_MINIMUM.get(name, "")
        raise SettingsError(f"{source}: {name} must be at least {_MINIMUM[name]:g}, not {value!r}{why}")
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
