"""What the gate does with each way a check can end, as the user chose, and the advice it gives."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class OnMissing(StrEnum):
    FAIL = "fail"
    SKIP = "skip"


class OnMismatch(StrEnum):
    SKIP = "skip"
    FAIL = "fail"


class OnUndecided(StrEnum):
    FAIL = "fail"
    SKIP = "skip"
    PASS_WITH_WARNING = "pass-with-warning"  # noqa: S105 - a reaction, not a password


class OnGraphChange(StrEnum):
    WARN = "warn"
    FAIL = "fail"


class OnUnused(StrEnum):
    WARN = "warn"
    FAIL = "fail"


class OnFaster(StrEnum):
    IGNORE = "ignore"
    WARN = "warn"
    FAIL = "fail"


class OnCodeChange(StrEnum):
    REVISION = "revision"
    BASELINE = "baseline"


class OnUnchanged(StrEnum):
    DECIDE = "decide"
    MEASURE = "measure"


class Confirm(StrEnum):
    FRESH = "fresh"
    SAME = "same"
    OFF = "off"


@dataclass(frozen=True)
class Reactions:
    """What the gate does with a missing baseline, another environment, a changed graph, a stale file,
    a profile that got faster, how it confirms one that looks slower before failing it, and how it judges code
    changed since a baseline was recorded."""

    missing: OnMissing = OnMissing.FAIL
    mismatch: OnMismatch = OnMismatch.SKIP
    graph_change: OnGraphChange = OnGraphChange.WARN
    unused: OnUnused = OnUnused.WARN
    faster: OnFaster = OnFaster.WARN
    confirm: Confirm = Confirm.FRESH
    code_change: OnCodeChange = OnCodeChange.REVISION
    """A check whose model's code changed since its baseline was recorded: measured against the revision the
    baseline was recorded at as well, in pairs of fresh processes, the stricter verdict kept (``revision``); or
    judged by the baseline alone (``baseline``)."""
    undecided: OnUndecided = OnUndecided.FAIL
    """A check that reached no verdict (``Status.UNDECIDED``: an item that gates too noisy to decide, or a profile
    measured on a busy machine every time): failed, skipped, or passed with a warning. Failed by default: a gate
    that did not judge must not look green in CI, and an undecided check says so, never "slower"."""
    unchanged: OnUnchanged = OnUnchanged.DECIDE
    """A call whose computation's fingerprint is its baseline's or the old side's: decided unchanged without
    measuring (``decide``), or measured as any other (``measure``)."""


@dataclass
class Outcome:
    """How a test ends because of fxprof, beyond what its own code did."""

    failures: list[str] = field(default_factory=list)
    skips: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def add(self, other: Outcome) -> None:
        self.failures += other.failures
        self.skips += other.skips
        self.warnings += other.warnings


class UsageError(Exception):
    """The fixture was called in a way it cannot serve; the message says how to call it."""


def update_command(test_id: str) -> str:
    """``pytest --fxprof-update 'TEST_ID'``, the id quoted for a POSIX shell whatever it holds."""
    quoted = "'" + test_id.replace("'", "'\"'\"'") + "'"
    return f"pytest --fxprof-update {quoted}"


def rerecord_hint(test_id: str) -> str:
    """The command that records the test's baseline again, its id quoted for a POSIX shell whatever it holds."""
    return f"record it with: {update_command(test_id)}"


def if_intended(test_id: str) -> str:
    """The advice a failure or a changed graph gives: never a fix, since refreshing accepts the slowdown."""
    return f"if this change is intended, refresh the baseline with: {update_command(test_id)}"
