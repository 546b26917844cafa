"""Tests against the base revision: the run's two sides, and the verdict of each call on what its pairs measured.

Owns ``Against`` (the run's two sides: the revision's tree and interpreter, the working tree's), ``judge_test``,
which judges each ``fxprof`` call of one test on its pairs with the paired rule (``judged_calls``, once per set of
pairs) and settles two sets into one verdict (``settled``), and ``SideWatch``, with which a fresh process says what
became of each of its tests when no ``fxprof`` call wrote a profile (absent there, skipped, failed, or run without a
call). The pairs are measured by ``against.campaign``; what the processes answered is read by ``against.answers``.

Must not import torch or pytest.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_fxprof.against.answers import PairedEntries, calls_of, entries_of, merged, paired_entries, side_profile
from pytest_fxprof.against.revision import Revision
from pytest_fxprof.against.rounds import AgainstError, Pairs, Side, SideFailedError, StopReason
from pytest_fxprof.judge.paired import PairedPolicy, compare_pairs, needs_more
from pytest_fxprof.measure.sampling import Relaunch, tail
from pytest_fxprof.records.profile import Profile
from pytest_fxprof.records.verdicts import Comparison, Status, Verdict


@dataclass
class SideWatch:
    """What a side's process saw of one test it runs, for what it reports where no ``fxprof`` call wrote its
    profiles (``report``)."""

    test_id: str
    collected: bool = False
    passed: bool = False
    failed: str = ""
    """Why it failed (its report's text), where it did; a file of it that failed to collect counts."""
    skipped: str = ""

    def note(self, when: str, outcome: str, reason: str = "") -> None:
        """One phase's outcome (``setup``, ``call``, ``teardown``, ``collect``; ``passed``, ``failed``,
        ``skipped``); ``reason``: why it skipped or failed."""
        if outcome == "skipped":
            self.skipped = reason.removeprefix("Skipped: ") or "skipped"
        elif outcome == "failed":
            self.failed = self.failed or f"{when} failed: {reason}".rstrip(": ") or "failed"
        elif when == "call":
            self.passed = True

    def report(self, *, absent: bool) -> dict[str, Any]:
        """``{"skipped": why}``, ``{"calls": {}}`` (it passed without an ``fxprof`` call), ``{"absent": True}``
        (pytest found no such test, where ``absent`` says that this can be told: the file or the name is not there,
        and nothing failed to collect), or ``{"failed": why}``."""
        if self.failed:
            return {"failed": self.failed}
        if self.skipped:
            return {"skipped": self.skipped}
        if self.passed:
            return {"calls": {}}
        if not self.collected and absent:
            return {"absent": True}
        return {"failed": "it did not run (its output says why)"}


NOT_FOUND = (4, 5)
"""pytest's exit statuses where the test named on the command line is not there: a usage error (no such file,
no such name in it) or nothing collected."""


@dataclass(frozen=True)
class Against:
    """What the old side is: the revision (None: the working tree's code too), its interpreter (None: this
    one), and the extra import roots of the project (relative to the repository's top level); ``fork``: whether
    the processes of a duet are forked from one parent that imported the run's libraries (``measure.forking``),
    where they can be."""

    revision: Revision | None
    python: str | None = None
    roots: tuple[str, ...] = ()
    fork: bool = False

    @property
    def label(self) -> str:
        """The old side in every line that names it: ``origin/main (1a2b3c4)``, ``Python /old/bin/python``."""
        parts = []
        if self.revision is not None:
            parts.append(self.revision.label)
        if self.python is not None:
            parts.append(f"{'under ' if parts else ''}Python {self.python}")
        return " ".join(parts) or "the working tree"

    def _path(self, top: Path | None, rootdir: Path) -> tuple[str, ...]:
        base = top if top is not None else rootdir
        out = [str(base / r) for r in self.roots]
        out.append(str(base))
        if (base / "src").is_dir():
            out.append(str(base / "src"))
        return tuple(out)

    def sides(self, new: Relaunch) -> tuple[Side, Side]:
        """The old and new sides of a run started as ``new`` was."""
        rev = self.revision
        repo = rev.repo if rev is not None else None
        new_side = Side("new", "the working tree", replace(new, path=self._path(repo, new.rootdir)))
        old = replace(new, python=self.python or sys.executable)
        request: dict[str, Any] = {}
        if rev is not None:

            def moved(path: Path) -> Path:
                try:
                    return rev.old_path(path)
                except ValueError:  # outside the repository: the same file serves both sides
                    return path

            inifile = moved(new.inifile) if new.inifile is not None else None
            old = replace(
                old,
                invocation_dir=moved(new.invocation_dir) if moved(new.invocation_dir).is_dir() else rev.tree,
                rootdir=moved(new.rootdir),
                inifile=inifile if inifile is not None and inifile.is_file() else None,  # none yet at REF
                path=self._path(rev.tree, new.rootdir),
            )
            request["against"] = {
                "new_root": str(rev.repo),
                "old_root": str(rev.tree),
                "extra": [str(rev.repo / r) for r in self.roots],
            }
        else:
            old = replace(old, path=new_side.relaunch.path)
        return Side("old", self.label, old, request), new_side


@dataclass(frozen=True)
class CallOutcome:
    """One ``fxprof`` call against the old side: ``comparison`` (None when the call is new: the old side never
    made it) and the new side's measurement as a profile (None when it made no such call); ``stopped`` says what
    ended the pairs while a verdict was open, ``left_out`` how many pairs lost their lock-step in this call and
    were left out, ``kept_out_of_step`` how many lost it and were kept (fewer than two pairs held it)."""

    comparison: Comparison | None
    profile: Profile | None
    stopped: StopReason | None = None
    left_out: int = 0
    kept_out_of_step: int = 0
    out_of_line: int = 0
    """How many pairs met different machines in this call and were left out (``judge.outliers.out_of_line``)."""
    pairs: int = 0
    """How many pairs the comparison stands on (those of one set: ``Pairs.confirmed``)."""
    confirmation: str = ""
    """What a second set of pairs found where the first found the call slower or undecided (or why none did)."""
    sets: tuple[tuple[str, int], ...] = ()
    """Where a second set was measured: each set's verdict and pairs, the first set first."""
    changes: list[str] | None = None
    """What differs between the sides' computation fingerprints (empty: the same, decided unchanged; None: not
    compared)."""


@dataclass(frozen=True)
class TestOutcome:
    """A test against the old side: ``absent`` when the test does not exist there, ``skipped`` why it skipped
    on a side (nothing to compare), else each call's outcome."""

    __test__ = False

    absent: bool
    calls: dict[str, CallOutcome]
    pairs: int = 0
    """How many pairs were measured, in every set."""
    seconds: float = 0.0
    skipped: str = ""


def _failure(err: SideFailedError, label: str, test_id: str) -> AgainstError:
    child = err.child
    who = f"the old side ({label})" if err.side.name == "old" else "the new side (the working tree)"
    what = child.problem or f"exited with status {child.returncode}"
    order = (
        f"; pair {err.number} served its tests in an order of its own, so a test that passes only after another ran "
        "in the same process can fail here"
        if err.number > 1
        else ""
    )
    return AgainstError(
        f"{who} could not measure {test_id} (process {err.number}: {what}{order}); its output follows, then its "
        f"command\n{'-' * 20} output of {who} {'-' * 20}\n{tail(child.output).rstrip()}\n{'-' * 60}\n"
        f"command: {' '.join(child.command)}"
    )


TO_CONFIRM = (Status.REGRESSION, Status.UNDECIDED)
"""The verdicts of a set of pairs that a second set confirms before they stand
(``against.campaign.measure_tests``)."""


def judged_calls(got: Pairs, keys: Iterable[str], policy: PairedPolicy, label: str) -> dict[str, Comparison | None]:
    """Each call of ``keys`` judged with the paired rule on the pairs ``got`` holds: once per set of pairs, the
    same question asked again (by the campaign after each pair and before a second set, then by ``judge_test``)
    answered from ``Pairs.verdicts``."""
    keys = list(keys)
    asked = (len(got.old), tuple(sorted(keys)), policy, label)
    if asked not in got.verdicts:
        out: dict[str, Comparison | None] = {}
        for key in asked[1]:
            found = paired_entries(got, key)
            out[key] = (
                None if found is None else compare_pairs(merged(found.old), merged(found.new), policy, against=label)
            )
        got.verdicts.clear()  # a pair more: the earlier answers are spent
        got.verdicts[asked] = out
    return {key: got.verdicts[asked][key] for key in keys}


def judge_test(
    against: Against, test_id: str, got: Pairs, profiles: dict[str, Profile], policy: PairedPolicy
) -> TestOutcome:
    """Judge each call of ``profiles`` (this process's unmeasured profiles of the test's calls, keyed as the calls
    are) on what the test's pairs measured (``against.campaign.measure_tests``) with the paired rule; where a second
    set confirmed them (``Pairs.confirmed``), a call fails only where both sets find it slower (``settled``). A test
    whose computation is the same on both sides (``Pairs.unchanged``) is unchanged, call by call."""
    if got.unchanged:
        if set(profiles) != set(got.changes):
            raise AgainstError(
                f"the processes that fingerprinted {test_id} made the fxprof calls {sorted(got.changes)}, this one "
                f"{sorted(profiles)}; calls must not depend on the process (make the call whatever ran before it)"
            )
        unchanged = Comparison.unchanged(against=against.label)
        calls = {k: CallOutcome(unchanged, p, changes=[]) for k, p in profiles.items()}
        return TestOutcome(absent=False, calls=calls)
    first = _judge_set(against, test_id, got, profiles, policy)
    if got.confirmed is None:
        if got.unconfirmed is None:
            return first
        why = f"not measured again in a second set of pairs: {got.unconfirmed} left no time for it"
        calls = {
            k: replace(c, confirmation=why) if c.comparison is not None and c.comparison.status in TO_CONFIRM else c
            for k, c in first.calls.items()
        }
        return replace(first, calls=calls)
    second = _judge_set(against, test_id, got.confirmed, profiles, policy)
    if second.absent or second.skipped:  # it ran in the first set: what the first found stands
        return first
    calls = {k: settled(c, second.calls.get(k)) for k, c in first.calls.items()}
    return replace(first, calls=calls, pairs=first.pairs + second.pairs, seconds=first.seconds + second.seconds)


def settled(first: CallOutcome, second: CallOutcome | None) -> CallOutcome:
    """A call's outcome from two independent sets of pairs, where the first found it slower or undecided: slower
    where both do; a pass where the second passes it; undecided otherwise, as where the first was undecided and the
    second finds it slower (neither set alone decides a failure). A second set that a budget cut short leaves the
    first's verdict standing."""
    a = first.comparison
    b = second.comparison if second is not None else None
    if second is None or a is None or b is None or a.status not in TO_CONFIRM or b.status is Status.MISMATCH:
        return first
    sets = ((a.status.value, first.pairs), (b.status.value, second.pairs))
    first, second = replace(first, sets=sets), replace(second, sets=sets)
    found = f"a first set of {first.pairs} pairs found it {_found(a)}"
    again = f"a second, independent set of {second.pairs} pairs (fresh processes, the revision exported afresh)"
    if b.status is Status.UNDECIDED and second.stopped is not None and second.stopped.limit != "pairs":
        return replace(first, confirmation=f"{again} was cut short, undecided, by {second.stopped}: {found}")
    if a.status is Status.REGRESSION and b.status is Status.REGRESSION:
        return replace(first, confirmation=f"confirmed by {again}: {_found(b)}")
    if b.status is Status.PASS:
        return replace(second, confirmation=f"{found}; {again} did not, and decides: {_found(b)}")
    if a.status is Status.UNDECIDED and b.status is Status.UNDECIDED:
        return replace(first, confirmation=f"{again} could not decide it either: {_found(b)}")
    if a.status is Status.UNDECIDED:
        return replace(first, confirmation=f"{again} found it {_found(b)}; neither set alone fails it")
    return replace(second, confirmation=f"{found}; {again} found it {_found(b)}; neither set alone fails it")


def _found(c: Comparison) -> str:
    """A set's verdict in a few words: ``slower (total x1.062)``; where the total is not what failed, what did,
    beside it: ``slower in transformer.h.*.mlp x1.21 (total x0.993, within its band)``."""
    word = {Status.REGRESSION: "slower", Status.UNDECIDED: "undecided", Status.PASS: "within its bands"}
    said = word.get(c.status, c.status.value)
    if c.total is None:
        return said
    if c.status is Status.REGRESSION and c.total.verdict is not Verdict.SLOWER:
        lead = c.blame.lead if c.blame is not None else None
        node = c.blame.node if c.blame is not None else None
        if lead is not None:
            said += f" in {lead.name} x{lead.ratio:.2f}"
        elif node is not None:
            said += f" in node {node.node.name} x{node.ratio:.2f}"
        elif c.slower_aggregates:
            said += f" in {c.slower_aggregates[0].name} x{c.slower_aggregates[0].ratio:.2f}"
        state = {Verdict.OK: "within its band", Verdict.FASTER: "faster", Verdict.NOISY: "too noisy to decide"}
        return f"{said} (total x{c.total.ratio:.3f}, {state[c.total.verdict]})"
    return f"{said} (total x{c.total.ratio:.3f})"


def _judge_set(
    against: Against, test_id: str, got: Pairs, profiles: dict[str, Profile], policy: PairedPolicy
) -> TestOutcome:
    """Each call judged on one set of pairs (``judge_test``)."""
    label = against.label
    if got.failed is not None:
        raise _failure(got.failed, label, test_id)
    if got.error:
        raise AgainstError(got.error)
    if got.ended is not None:
        side, child = got.ended
        where = label if side == "old" else "a fresh process of the working tree"
        if child.skipped:
            return TestOutcome(absent=False, calls={}, skipped=f"the test skipped at {where}: {child.skipped}")
        if side == "old" and against.revision is not None:
            return TestOutcome(absent=True, calls={})
        raise AgainstError(f"{where} found no test {test_id} (collected nothing of that name)")
    calls = {}
    for key, comparison in judged_calls(got, profiles, policy, label).items():
        found = paired_entries(got, key)
        new_entries = entries_of(got.new, key, "new")
        if new_entries is None:
            i = next(i for i, child in enumerate(got.new, 1) if key not in calls_of(child))
            raise AgainstError(
                f"fresh process {i} of the working tree for {test_id} made no fxprof call {key!r}, which this "
                "process made; calls must not depend on the process (make the call whatever ran before it)"
            )
        profile = side_profile(profiles[key], merged(new_entries))
        stopped = got.stopped if comparison is not None and needs_more(comparison) else None
        found = found or PairedEntries([], [])
        calls[key] = CallOutcome(
            comparison,
            profile,
            stopped,
            found.left_out,
            found.kept_out_of_step,
            found.out_of_line,
            pairs=len(got.old),
            changes=got.changes.get(key),
        )
    return TestOutcome(absent=False, calls=calls, pairs=len(got.old), seconds=got.seconds)
