"""Against a revision: the measuring campaign of a run's tests, from the fingerprints to the second set of pairs.

Owns ``measure_tests``: first the tests whose computation is the same on both sides (``against.proof``), then one
set of pairs of the others (``against.rounds``), then a second, independent set of those a first set found slower
or undecided (from a fresh export and a fresh parent, within the budgets); ``early_forker``, the parent started
with the run; and ``check_test``, the campaign and the verdict (``against.compare.judge_test``) of one test alone.

Must not import torch or pytest.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_fxprof.against.answers import calls_of
from pytest_fxprof.against.compare import (
    TO_CONFIRM,
    Against,
    TestOutcome,
    judge_test,
    judged_calls,
)
from pytest_fxprof.against.proof import Proof, prove
from pytest_fxprof.against.revision import PREFIX, RevisionError, materialise, remove
from pytest_fxprof.against.rounds import AgainstError, PairedTest, Pairs, Side, StopReason, measure_pairs
from pytest_fxprof.judge.paired import PairedPolicy, needs_more
from pytest_fxprof.measure.forking import Forker, can_fork
from pytest_fxprof.measure.sampling import Child, Relaunch
from pytest_fxprof.measure.serving import Spent
from pytest_fxprof.records.profile import Profile
from pytest_fxprof.records.verdicts import Comparison, Status

PROCESS_DEADLINE_S = 600.0
"""The least time one test may run in a side's process before the process is stopped and the test failed as hung
(twice the test's budget, if that is more): the pairs hold the machine's lock, so a test that hangs would stop
every other test's check."""


def duet_for(schedule: str, profiles: Iterable[Profile]) -> bool:
    """Whether a test's pairs run as duets: ``duet`` and ``alternate`` say so; ``auto`` runs a duet where every
    call runs on the CPU, whose cores the twins share and trade, and alternates where one runs on an
    accelerator, which two processes at once would share: each would time the other's kernels too."""
    if schedule == "auto":
        return all(p.environment.device == "cpu" for p in profiles)
    return schedule == "duet"


def refuse_foreign(child: Child, label: str) -> None:
    foreign = sorted((child.data or {}).get("foreign", []))
    if foreign:
        shown = "; ".join(foreign[:6]) + (f"; ... {len(foreign) - 6} more" if len(foreign) > 6 else "")
        raise AgainstError(
            f"the old side ({label}) imported code from the working tree, so it would measure the new code: "
            f"{shown}. The old side runs the revision's tree with its top level and src/ first on PYTHONPATH; "
            "a sys.path entry or an import by absolute path to the checkout defeats that: import the project "
            "by a path relative to the test files, or name its other import roots in the ini key "
            "fxprof_against_roots"
        )


@dataclass(frozen=True)
class AskedTest:
    """A test to check against the old side: its settings (as its processes take them), its paired rule, its pairs
    and budget, and ``keys``, the calls this process made in it (None where it has not run yet)."""

    test_id: str
    settings: dict[str, Any]
    policy: PairedPolicy
    pairs: int
    max_pairs: int
    budget_s: float
    keys: tuple[str, ...] | None = None


def _keys(asked: AskedTest, got: Pairs) -> list[str]:
    """The calls to judge: this process's, else those the new side's first process made."""
    if asked.keys is not None:
        return list(asked.keys)
    return sorted(calls_of(got.new[0])) if got.new else []


def measure_tests(
    against: Against,
    new: Relaunch,
    tests: Sequence[AskedTest],
    *,
    duet: bool,
    run_budget_s: float | None = None,
    already_s: float = 0.0,
    turn: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
    progress: Callable[[int, int, float], None] | None = None,
    spent: Spent | None = None,
    notice: Callable[[str], None] | None = None,
    launched: Forker | None = None,
    confirm: bool = False,
    watch: Callable[[int, str, float], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    prove: bool = False,
) -> dict[str, Pairs]:
    """Measure ``tests`` in pairs of old and new processes that serve them all (``against.rounds``), in the
    machine's measuring ``turn`` (``measure.turns``); per test what its pairs measured, for ``judge_test``.
    ``notice`` is told why, where the processes were to be forked (``Against.fork``) but started fresh.
    ``launched``: the parent to fork them from, started ahead by the caller (``early_forker``), who ends it.

    ``confirm``: a test whose pairs end with a call slower or undecided is then measured in a second, independent
    set of pairs (``Pairs.confirmed``), from a fresh export of the revision and a fresh parent, within its budget
    and the run's; ``judge_test`` fails it only where both sets find it slower. The pairs of one check share what
    their run holds fixed (the parent, the exported tree, the minutes they ran in), and an unchanged test can read
    a few percent slower in every pair of one check and not in the next: no interval over those pairs tells that
    from a slowdown, but a second set that does not share them does (BENCHMARKS.md, "a failure measured again").

    ``prove``: first, one process per side fingerprints every test (``against.proof``); a test whose calls are the
    same computation on both sides takes no pairs (``Pairs.unchanged``), and what differs in the others' is kept
    (``Pairs.changes``)."""
    began = clock()

    def one_set(side: Against, asked: Sequence[AskedTest], launched: Forker | None = None) -> dict[str, Pairs]:
        already = already_s + clock() - began
        return _measure_set(
            side,
            new,
            asked,
            duet=duet,
            run_budget_s=run_budget_s,
            already_s=already,
            progress=progress,
            spent=spent,
            notice=notice,
            launched=launched,
            watch=watch,
        )

    with turn():
        proofs = _proofs(against, new, tests, launched=launched, spent=spent) if prove else {}
        same = [a for a in tests if a.test_id in proofs and proofs[a.test_id].unchanged]
        if same and notice is not None:
            notice(
                f"{len(same)} of {len(tests)} test(s) unchanged: the same computation at {against.label} and in the "
                "working tree (their fingerprints), decided without pairs"
            )
        tests = [a for a in tests if a not in same]
        got = one_set(against, tests, launched) if tests else {}
        for a in same:  # no pairs; the new side's unmeasured profiles stand for this process's (``first_profile``)
            proof = proofs[a.test_id]
            got[a.test_id] = Pairs(new=[proof.new] if proof.new else [], unchanged=True, changes=proof.changes)
        for a in tests:
            if a.test_id in proofs:
                got[a.test_id].changes = proofs[a.test_id].changes
        if not confirm:
            return got
        doubtful = [a for a in tests if _doubtful(got[a.test_id], a, against.label)]
        fitting = _fitting(doubtful, got, run_budget_s, already_s + clock() - began)
        if not fitting:
            return got
        if notice is not None:
            notice(
                f"{len(fitting)} test(s) found slower or undecided, measured again in a second, independent set of "
                f"pairs before they fail: {', '.join(a.test_id for a in fitting)}"
            )
        with _fresh_export(against, notice) as again:
            second = one_set(again, fitting)
        for a in fitting:
            second[a.test_id].changes = got[a.test_id].changes  # what differs is the same in either set
            got[a.test_id].confirmed = second[a.test_id]
    return got


def _proofs(
    against: Against, new: Relaunch, tests: Sequence[AskedTest], *, launched: Forker | None, spent: Spent | None
) -> dict[str, Proof]:
    """Every test's fingerprints on both sides (``against.proof.prove``), its processes forked from ``launched``
    where the pairs' would be."""
    old_side, new_side = against.sides(new)
    forker = launched if launched is not None and _forks(against, old_side) else None
    if forker is not None:
        old_side, new_side = replace(old_side, starter=forker.start), replace(new_side, starter=forker.start)
    asked = [(a.test_id, {"settings": a.settings, **({"calls": list(a.keys)} if a.keys else {})}) for a in tests]
    deadline = max(PROCESS_DEADLINE_S, *(2 * a.budget_s for a in tests))
    before = forker.forked if forker is not None else 0
    try:
        return prove(old_side, new_side, asked, deadline_s=deadline, spent=spent)
    finally:
        if forker is not None and spent is not None:
            spent.forked += forker.forked - before


def _measure_set(
    against: Against,
    new: Relaunch,
    tests: Sequence[AskedTest],
    *,
    duet: bool,
    run_budget_s: float | None,
    already_s: float,
    progress: Callable[[int, int, float], None] | None,
    spent: Spent | None,
    notice: Callable[[str], None] | None,
    launched: Forker | None = None,
    watch: Callable[[int, str, float], None] | None = None,
) -> dict[str, Pairs]:
    """One set of pairs of ``tests`` (``measure_tests``), forked from ``launched`` or a parent of its own."""
    old_side, new_side = against.sides(new)
    label = against.label

    def paired(asked: AskedTest) -> PairedTest:
        def judged(got: Pairs) -> dict[str, Comparison | None]:
            """Each call's comparison over the pairs so far (judged once per pair, for both questions)."""
            return judged_calls(got, _keys(asked, got), asked.policy, label)

        def undecided(got: Pairs) -> bool:
            return any(c is not None and needs_more(c) for c in judged(got).values())

        def moot(got: Pairs) -> bool:
            """After each pair: refuse an old side that ran the working tree's code, and stop when no call is left
            that more pairs could compare (the old side made none of them, or each hands the model another
            setup)."""
            try:
                refuse_foreign(got.old[-1], label)
                calls = judged(got)
            except AgainstError as exc:
                got.error = str(exc)
                return True
            return all(c is None or c.status is Status.MISMATCH for c in calls.values())

        request: dict[str, Any] = {"settings": asked.settings}
        if asked.keys is not None:
            request["calls"] = list(asked.keys)
        return PairedTest(
            asked.test_id, request, asked.pairs, asked.max_pairs, asked.budget_s, undecided=undecided, moot=moot
        )

    deadline = max(PROCESS_DEADLINE_S, *(2 * a.budget_s for a in tests))
    forking = duet and _forks(against, old_side)
    with _forker(forking, (old_side, new_side), launched) as forker:
        before = forker.forked if forker is not None else 0  # a parent launched ahead may have forked already
        if forker is not None:
            old_side, new_side = replace(old_side, starter=forker.start), replace(new_side, starter=forker.start)
        try:
            return measure_pairs(
                old_side,
                new_side,
                [paired(a) for a in tests],
                duet=duet,
                deadline_s=deadline,
                run_budget_s=run_budget_s,
                already_s=already_s,
                progress=progress,
                spent=spent,
                watch=watch,
            )
        finally:
            if forker is not None:
                if spent is not None:
                    spent.forked += forker.forked - before
                if forker.problem and notice is not None:
                    notice(f"the side processes started fresh: {forker.problem}")


def _doubtful(got: Pairs, asked: AskedTest, label: str) -> bool:
    """Whether a test's pairs ended with a call slower or undecided, and a second set could say otherwise: not
    where a side failed, lacked or skipped the test, nor where the run's budget ended its pairs."""
    if got.failed is not None or got.ended is not None or got.error or not got.old:
        return False
    if got.stopped is not None and got.stopped.by_run_budget:
        return False
    try:
        calls = judged_calls(got, _keys(asked, got), asked.policy, label)
    except AgainstError:  # judge_test says why
        return False
    return any(c is not None and c.status in TO_CONFIRM for c in calls.values())


def _fitting(
    doubtful: Sequence[AskedTest], got: dict[str, Pairs], run_budget_s: float | None, spent_s: float
) -> list[AskedTest]:
    """The tests of ``doubtful`` whose second set of pairs fits their own budget (what the first left of it) and,
    all together, the run's (at the first set's cost a pair); each test of the others says why it was not
    confirmed (``Pairs.unconfirmed``). A test takes its second set with the calls its first found."""
    out: list[AskedTest] = []
    left = None if run_budget_s is None else run_budget_s - spent_s
    for a in doubtful:
        g = got[a.test_id]
        cost = a.pairs * g.seconds / len(g.old)
        if g.seconds + cost > a.budget_s:
            g.unconfirmed = StopReason("test budget", a.budget_s)
        elif left is not None and cost > left:
            g.unconfirmed = StopReason("run budget", run_budget_s)
        else:
            out.append(replace(a, budget_s=a.budget_s - g.seconds, keys=tuple(_keys(a, g))))
            left = None if left is None else left - cost
    return out


@contextlib.contextmanager
def _fresh_export(against: Against, notice: Callable[[str], None] | None) -> Iterator[Against]:
    """``against`` with its revision exported afresh (removed when the block ends), so that a second set of pairs
    shares no file with the first; the same where it has no revision, or where the export fails (then ``notice``
    says so)."""
    rev = against.revision
    if rev is None:
        yield against
        return
    try:
        fresh = replace(materialise(rev.sha, rev.repo), ref=rev.ref)
    except RevisionError as exc:
        if notice is not None:
            notice(f"the second set of pairs runs the revision's first export: {exc}")
        yield against
        return
    try:
        yield replace(against, revision=fresh)
    finally:
        remove(fresh)


def _forks(against: Against, old_side: Side) -> bool:
    """Whether the sides' processes of a duet are forked from one parent: asked for, on Linux, with this
    interpreter on both sides."""
    return against.fork and can_fork() and old_side.relaunch.python == sys.executable


@contextlib.contextmanager
def _forker(forking: bool, sides: Sequence[Side], launched: Forker | None = None) -> Iterator[Forker | None]:
    """The parent that forks the sides' processes (None where they start fresh): ``launched``, else one started
    now and ended when the check ends."""
    if not forking or launched is not None:
        yield launched if forking else None
        return
    with _new_forker(sides) as forker:
        yield forker


@contextlib.contextmanager
def _new_forker(sides: Sequence[Side]) -> Iterator[Forker]:
    """A parent for the processes of ``sides``, its files in a directory of its own; ended, and the directory
    removed, when the block ends. Its roots: where the sides' own code lies (their root and invocation
    directories and import roots)."""
    roots = [d for s in sides for d in (s.relaunch.rootdir, s.relaunch.invocation_dir, *map(Path, s.relaunch.path))]
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}{os.getpid()}-fork-") as tmp:
        forker = Forker(roots, Path(tmp))
        try:
            yield forker
        finally:
            forker.close()


AHEAD = ("torch",)
"""What an early parent imports before the run has: every test of this plugin imports torch."""


@contextlib.contextmanager
def early_forker(against: Against, new: Relaunch) -> Iterator[Forker | None]:
    """A parent for the sides' processes launched now, while the run collects its tests, so that its imports
    (torch's, above all) overlap the run's; None where the sides would not fork. Pass it to ``measure_tests``;
    it ends when the block does."""
    sides = against.sides(new)
    if not _forks(against, sides[0]):
        yield None
        return
    with _new_forker(sides) as forker:
        forker.launch(AHEAD)
        yield forker


def check_test(
    against: Against,
    new: Relaunch,
    test_id: str,
    *,
    settings: dict[str, Any],
    profiles: dict[str, Profile],
    policy: PairedPolicy,
    pairs: int,
    max_pairs: int,
    budget_s: float,
    schedule: str = "auto",
    turn: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
    spent: Spent | None = None,
    confirm: bool = False,
    prove: bool = False,
) -> TestOutcome:
    """Measure ``test_id`` alone in pairs of old and new processes and judge each call of ``profiles``, on
    ``schedule`` (``settings.SCHEDULES``): what a test that no earlier measuring served gets (``judge_test``);
    ``confirm`` as ``measure_tests`` takes it."""
    asked = AskedTest(test_id, settings, policy, pairs, max_pairs, budget_s, keys=tuple(profiles))
    duet = duet_for(schedule, profiles.values())
    got = measure_tests(against, new, [asked], duet=duet, turn=turn, spent=spent, confirm=confirm, prove=prove)[test_id]
    return judge_test(against, test_id, got, profiles, policy)
