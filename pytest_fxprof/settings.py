"""Per-test settings: their defaults, their validation and the order in which sources override.

Owns the names shared by the marker, the ini keys and the command line. Must not import torch or
pytest. Precedence, most specific first: the test's ``@pytest.mark.fxprof(...)``, the command line,
the ini file, the defaults below.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

from pytest_fxprof.capture.methods import MODES
from pytest_fxprof.judge.decision import (
    DEFAULT_FLOOR_NS,
    FLOOR_SHARE,
    HISTORY_NODE_TOLERANCE,
    HISTORY_TOTAL_TOLERANCE,
    NODE_TOLERANCE,
    TOTAL_TOLERANCE,
    Policy,
)
from pytest_fxprof.judge.paired import (
    CHANGED_TOLERANCE,
    MIN_DECIDING_PAIRS,
    MIN_PASSING_PAIRS,
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
CAPTURES = MODES
"""How a module becomes graphs (``capture.methods``): ``auto`` tries symbolic tracing (then with the submodule
that broke it kept whole), then each graph method in turn; a compiled module, or ``inductor``, is timed by its
kernels (``capture.inductor``)."""
ALLOCATORS = ("as-is", "tuned")
"""How the measuring processes allocate memory: ``as-is``, with the allocator and settings the user's process has
(glibc's defaults, or jemalloc or tcmalloc where preloaded, ``MALLOC_*`` variables), so that what a change costs in
memory (page faults, memory handed back to the system and taken again) is measured as users pay it; ``tuned``, glibc
told never to map, trim or return memory (``measure.machine.tune_allocator``), which makes measurements quieter by
leaving exactly those costs out (BENCHMARKS.md, "The allocator: the program users run")."""
RUN_WIDE = ("allocator",)
"""Settings that hold for a whole process, not one test: the command line and ini file set them, the marker does
not (tuning the allocator cannot be undone for the tests after it)."""
SCHEDULES = ("auto", "duet", "alternate")
"""How a test's pairs run against a revision: ``duet``, the old and new process of a pair at the same time, pass
for pass in lock-step and trading their cores, so that both meet the same neighbours; ``alternate``, one after
the other (old first in odd pairs, new first in even ones); ``auto``, a duet where every call of the test runs on
the CPU, else alternate (two processes sharing one accelerator would each time the other's kernels)."""


class SettingsError(ValueError):
    """A setting with a value it cannot take; the message names the setting, where it came from and why."""


def _setting(
    default: Any, help: str, *, minimum: float | None = None, choices: tuple[str, ...] = (), why: str = ""
) -> Any:
    """A field of ``Settings`` with what the options registry (``options``) and the validation read: its help
    text, its smallest value (and ``why``, said when a value is under it) or its choices."""
    return field(default=default, metadata={"help": help, "minimum": minimum, "choices": choices, "why": why})


MORE_PAIRS = 15
"""Against a revision, a test whose verdict is still open after ``pairs`` pairs gets up to this many more (within
its ``budget_s`` and the run's)."""
_PAIRS = MIN_PASSING_PAIRS
"""Decided tests leave the pairs, undecided ones get more: starting from the fewest pairs a test passes on costs
nothing in false alarms (a slowdown still needs ``MIN_DECIDING_PAIRS`` to fail a test) and little in detection
(``bench/item_replay.py --start 3``, BENCHMARKS.md)."""


@dataclass(frozen=True)
class Settings:
    """What a test is measured and judged with: the registry of per-test settings, each settable by the marker,
    the command line (``--fxprof-NAME``) and the ini file (``fxprof_NAME``). A tolerance left unset (None) takes
    the mode's default: against a stored baseline ``NODE_TOLERANCE`` and ``TOTAL_TOLERANCE``, against a revision
    the paired rule's."""

    node_tolerance: float | None = _setting(
        None,
        "Smallest relative band a node or aggregate gets, e.g. 0.1 allows +10 percent (default "
        f"{NODE_TOLERANCE:g} against baselines, {PAIRED_NODE_TOLERANCE:g} against a revision)",
        minimum=0.0,
    )
    total_tolerance: float | None = _setting(
        None,
        f"Smallest relative band the model's total gets (default {TOTAL_TOLERANCE:g} against baselines, "
        f"{PAIRED_TOTAL_TOLERANCE:g} against a revision)",
        minimum=0.0,
    )
    changed_tolerance: float = _setting(
        CHANGED_TOLERANCE,
        "Against a revision: smallest relative band of a module, pattern or class whose code changed (operations "
        f"added or removed in it); never wider than the node band (default {CHANGED_TOLERANCE:g})",
        minimum=0.0,
    )
    warmup: int = _setting(4, "Discarded passes before measuring (default 4)", minimum=0)
    passes: int = _setting(12, "Measured passes per profile (default 12)", minimum=1)
    threads: int = _setting(1, "torch intra-op threads while profiling (default 1)", minimum=1)
    processes: int = _setting(
        5,
        "Processes a baseline is recorded from: this one plus fresh ones (default 5); a check against a baseline "
        "of one process decides nothing until it holds a second recording",
        minimum=1,
    )
    floor_us: float = _setting(
        DEFAULT_FLOOR_NS / 1e3,
        f"Node and aggregate changes smaller than this many microseconds (or {FLOOR_SHARE * 100:g} percent of the "
        f"model's time, if larger) never fail (default {DEFAULT_FLOOR_NS / 1e3:g})",
        minimum=0.0,
    )
    engine: str = _setting(
        ENGINES[0],
        "How nodes are timed: compiled (timestamps compiled into the graph's code, almost free) or interpreter "
        "(torch.fx.Interpreter, the slower reference) (default compiled)",
        choices=ENGINES,
    )
    capture: str = _setting(
        CAPTURES[0],
        "How the model becomes graphs: auto (symbolic tracing, then with the submodule that broke it kept whole, "
        "then torch.export, then a torch.compile backend; with tracer= or leaf_modules= given to the fixture, "
        "symbolic tracing with them or a failure; a torch.compile'd module: its Inductor kernels), symbolic, "
        "export, dynamo, or inductor (compile with torch.compile and time each kernel) (default auto); a training "
        "step (fxprof.train_step) is always captured by AOTAutograd",
        choices=CAPTURES,
    )
    pairs: int = _setting(
        _PAIRS,
        f"Against a revision: pairs of old and new processes per test, at least {MIN_PASSING_PAIRS} (a slowdown "
        f"fails a test from {MIN_DECIDING_PAIRS}); up to {MORE_PAIRS} more while a verdict is undecided (default "
        f"{_PAIRS})",
        minimum=MIN_PASSING_PAIRS,
        why=f": fewer pairs cannot pass the total of a check whose pairs spread as usual (1 %) (use "
        f"{MIN_PASSING_PAIRS} or more; the default is {_PAIRS})",
    )
    budget_s: float = _setting(
        150.0,
        "Against a revision: seconds a test's share of the pairs may take; no pair is added for it that would end "
        "past them (default 150)",
        minimum=0.0,
    )
    schedule: str = _setting(
        SCHEDULES[0],
        "Against a revision: duet (the old and new process of a pair run at the same time, pass for pass, trading "
        "their cores), alternate (one after the other, in a balanced order) or auto (a duet on the CPU, alternate "
        "on an accelerator) (default auto)",
        choices=SCHEDULES,
    )
    allocator: str = _setting(
        ALLOCATORS[0],
        "How the measuring processes allocate memory: as-is (the allocator and MALLOC_* settings of this process, "
        "as the user's program runs: what a change costs in page faults and memory returned to the system counts) "
        "or tuned (glibc never maps, trims or returns memory: quieter, but blind to those costs; every report names "
        "it) (default as-is)",
        choices=ALLOCATORS,
    )
    history: int = _setting(
        DEFAULT_KEEP,
        "Recordings a baseline entry keeps when --fxprof-update refreshes it: the new one plus up to N-1 earlier "
        "ones, newest first, while the environment, graph, setup and capture method stay the same (else the "
        f"history restarts, and the run says why); 1 keeps no history (default {DEFAULT_KEEP})",
        minimum=1,
    )

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
        return self.pairs + MORE_PAIRS

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


SETTING_NAMES = tuple(f.name for f in fields(Settings))
_META = {f.name: f.metadata for f in fields(Settings)}
SETTING_HELP: dict[str, str] = {name: meta["help"] for name, meta in _META.items()}
"""Each setting's help text (the command line's, the ini key's and the options reference's)."""
TEXT_CHOICES: dict[str, tuple[str, ...]] = {name: meta["choices"] for name, meta in _META.items() if meta["choices"]}
KINDS: dict[str, type[int] | type[float] | type[str]] = {
    name: float if name in ("node_tolerance", "total_tolerance") else type(getattr(Settings(), name))
    for name in SETTING_NAMES
}
"""Each setting's type (a tolerance is a number, though its default is None)."""
_MINIMUM: dict[str, float] = {name: meta["minimum"] for name, meta in _META.items() if meta["minimum"] is not None}
_WHY_MINIMUM = {name: meta["why"] for name, meta in _META.items() if meta["why"]}


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
