"""Tests against the base revision: their pairs of old and new processes, and the comparison of each call.

Owns ``Against`` (the run's two sides: the revision's tree and interpreter, the working tree's),
``measure_tests``, which measures the pairs of many tests at once (``against.rounds``), ``judge_test``, which
judges each ``fxprof`` call of one test on its pairs with the paired rule, ``check_test`` (the two for one test
alone), and ``SideWatch``, with which a fresh process says what became of each of its tests when no ``fxprof``
call wrote a profile (absent there, skipped, failed, or run without a call).

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

from pytest_fxprof.against.proof import Proof, prove
from pytest_fxprof.against.revision import PREFIX, Revision, RevisionError, materialise, remove
from pytest_fxprof.against.rounds import PairedTest, Pairs, Side, SideFailedError, StopReason, measure_pairs
from pytest_fxprof.judge.paired import MIN_PAIRS, PairedPolicy, compare_pairs, needs_more, out_of_line
from pytest_fxprof.measure.forking import Forker, can_fork
from pytest_fxprof.measure.sampling import Child, Relaunch, tail
from pytest_fxprof.measure.serving import Spent
from pytest_fxprof.records.measurement import BaselineEntry, NodeStats, capture_difference, iqr_int, median_int
from pytest_fxprof.records.profile import Profile
from pytest_fxprof.records.verdicts import Comparison, Status, Verdict
from pytest_fxprof.store.baseline import entry_from_json


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


PROCESS_DEADLINE_S = 600.0
"""The least time one test may run in a side's process before the process is stopped and the test failed as hung
(twice the test's budget, if that is more): the pairs hold the machine's lock, so a test that hangs would stop
every other test's check."""


class AgainstError(Exception):
    """A side could not be measured; the message names the side, the cause and the fix."""


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
    """How many pairs met different machines in this call and were left out (``judge.paired.out_of_line``)."""
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


def duet_for(schedule: str, profiles: Iterable[Profile]) -> bool:
    """Whether a test's pairs run as duets: ``duet`` and ``alternate`` say so; ``auto`` runs a duet where every
    call runs on the CPU, whose cores the twins share and trade, and alternates where one runs on an
    accelerator, which two processes at once would share: each would time the other's kernels too."""
    if schedule == "auto":
        return all(p.environment.device == "cpu" for p in profiles)
    return schedule == "duet"


def _calls(child: Child) -> dict[str, Any]:
    data = child.data or {}
    calls = data.get("calls")
    return calls if isinstance(calls, dict) else {}


def _entries(children: Sequence[Child], key: str, where: str) -> list[BaselineEntry] | None:
    out = []
    for i, child in enumerate(children, 1):
        raw = _calls(child).get(key)
        if raw is None:
            return None
        try:
            out.append(entry_from_json(raw.get("entry"), f"{where} process {i}, call {key!r}"))
        except ValueError as exc:
            raise AgainstError(f"the {where} side sent a malformed profile: {exc}") from None
    return out


def _out_of_step(child: Child, key: str) -> bool:
    """Whether the process ran call ``key`` without its twin in passes whose times count (its plain calls, its kept
    passes): the process says so (``Barrier.alone_in_counted``); passes measured again for preemption after them
    may run alone."""
    alone = (_calls(child).get(key) or {}).get("alone_from")
    return isinstance(alone, int)


@dataclass(frozen=True)
class PairedEntries:
    """The old and new side's entries of one call, pair by pair, as the paired rule judges them."""

    old: list[BaselineEntry]
    new: list[BaselineEntry]
    left_out: int = 0
    """Pairs whose twins lost their lock-step in the call, left out."""
    kept_out_of_step: int = 0
    """Pairs that lost it but were kept: fewer than two held it."""
    out_of_line: int = 0
    """Pairs whose processes met different machines, left out (``judge.paired.out_of_line``)."""


def paired_entries(got: Pairs, key: str) -> PairedEntries | None:
    """The entries of call ``key`` from the pairs whose twins kept their lock-step in it (all where fewer than
    two did) and whose processes met one machine; None when a side did not make the call."""
    old, new = _entries(got.old, key, "old"), _entries(got.new, key, "new")
    if old is None or new is None:
        return None
    kept = [
        (a, b)
        for a, b, child_a, child_b in zip(old, new, got.old, got.new, strict=True)
        if not (_out_of_step(child_a, key) or _out_of_step(child_b, key))
    ]
    if len(kept) < MIN_PAIRS:
        return PairedEntries(old, new, 0, len(old) - len(kept))
    stray = set(out_of_line(merged([a for a, _ in kept]), merged([b for _, b in kept])))
    held = [pair for p, pair in enumerate(kept) if p not in stray]
    return PairedEntries([a for a, _ in held], [b for _, b in held], len(old) - len(kept), 0, len(stray))


def merged(entries: Sequence[BaselineEntry]) -> BaselineEntry:
    """One entry holding each process's run, in pair order (the entries of one side)."""
    first = entries[0]
    for e in entries[1:]:
        if [n.key for n in e.nodes] != [n.key for n in first.nodes]:
            raise AgainstError(
                "one side's processes captured different graphs of the same call; the capture must be "
                "deterministic (a model whose graph depends on state or randomness cannot be compared): "
                + capture_difference(
                    [n.key for n in first.nodes], [n.key for n in e.nodes], ("its first process's capture", "another's")
                )
            )
    # the shapes and bytes come from the processes that ran the counting pass (the first pair's)
    shapes = next((e.shapes for e in entries if e.shapes), first.shapes)
    allocated = next((e.allocated for e in entries if e.allocated), first.allocated)
    return replace(first, runs=tuple(e.runs[0] for e in entries), shapes=shapes, allocated=allocated)


def side_profile(base: Profile, entry: BaselineEntry) -> Profile:
    """``base`` (this process's unmeasured profile of the call, or the new side's first process's: ``first_profile``)
    with the times the new side's processes measured: per node the median over processes, its samples one per
    process."""
    keys = [n.info.key for n in base.nodes]
    if keys != [n.key for n in entry.nodes]:
        raise AgainstError(
            "the new side's processes captured another graph than this process did; the capture must be "
            "deterministic (a model whose graph depends on state or randomness cannot be compared): "
            + capture_difference(keys, [n.key for n in entry.nodes], ("this process's capture", "the new side's"))
        )
    per_node = [tuple(r.node_ns[i] for r in entry.runs) for i in range(len(keys))]
    medians = [median_int(s) for s in per_node]
    busy = sum(medians) or 1
    faulted = [r.node_faults for r in entry.runs if r.node_faults]
    faults = [median_int([f[i] for f in faulted]) if faulted else n.faults for i, n in enumerate(base.nodes)]
    nodes = tuple(
        replace(n, median_ns=m, spread_ns=iqr_int(s), share=m / busy, samples_ns=s, info=info, faults=f)
        for n, m, s, info, f in zip(base.nodes, medians, per_node, entry.nodes, faults, strict=True)
    )
    return replace(
        base,
        nodes=nodes,
        total_samples_ns=tuple(r.total_ns for r in entry.runs if r.total_ns),  # 0: the process timed none
        instrumented_samples_ns=tuple(r.instrumented_ns for r in entry.runs),
        reference_samples_ns=tuple(r.reference_ns for r in entry.runs),
        environment=entry.environment,
        protocol=entry.protocol,
        measured=True,
        fault_samples=tuple(r.faults for r in entry.runs if r.faults is not None),
        module_faults=median_faults([r.module_faults for r in entry.runs if r.module_faults]),
    )


def median_faults(per_process: Sequence[Sequence[tuple[str, int]]]) -> tuple[tuple[str, int], ...]:
    """Each module's page faults in a call, the median over the processes that read them (a process that did not
    call a module counts it as 0)."""
    read = [dict(p) for p in per_process]
    paths = sorted({path for p in read for path in p})
    return tuple((path, median_int([p.get(path, 0) for p in read])) for path in paths)


NODE_FACTS = (
    "flops",
    "layout",
    "inputs",
    "training",
    "returned",
    "host_ns",
    "memory_bytes",
    "peak_bytes",
    "allocated",
    "faults",
)
"""What a side's first process sends of each node besides its times and output shape (``node_facts``): what the
report and the hints read of a node (``records.measurement.NodeStats``)."""


def node_facts(nodes: Sequence[NodeStats]) -> dict[str, list[Any]]:
    """Each of ``NODE_FACTS`` of ``nodes``, one list per fact, aligned with the nodes."""
    return {
        fact: [list(value) if isinstance(value, tuple) else value for value in (getattr(n, fact) for n in nodes)]
        for fact in NODE_FACTS
    }


def _facts_from_json(raw: Any, count: int) -> list[dict[str, Any]] | None:
    """``node_facts`` read back, node by node; None where any list is missing, of another length, or holds a value
    of the wrong type (the call is then captured in this process, as without them)."""
    if not isinstance(raw, dict):
        return None
    kinds: dict[str, Callable[[Any], bool]] = {
        "flops": lambda v: v is None or isinstance(v, int),
        "layout": lambda v: isinstance(v, str),
        "inputs": lambda v: isinstance(v, list) and all(isinstance(i, int) for i in v),
        "training": lambda v: v is None or isinstance(v, bool),
        "returned": lambda v: isinstance(v, bool),
        "host_ns": lambda v: v is None or isinstance(v, int),
        "memory_bytes": lambda v: v is None or isinstance(v, int),
        "peak_bytes": lambda v: v is None or isinstance(v, int),
        "allocated": lambda v: v is None or isinstance(v, int),
        "faults": lambda v: v is None or isinstance(v, int),
    }
    columns: dict[str, list[Any]] = {}
    for fact in NODE_FACTS:
        column = raw.get(fact)
        if not isinstance(column, list) or len(column) != count or not all(map(kinds[fact], column)):
            return None
        columns[fact] = column
    return [{f: tuple(c[i]) if f == "inputs" else c[i] for f, c in columns.items()} for i in range(count)]


def first_profile(got: Pairs, key: str) -> Profile | None:
    """Call ``key`` as the new side's first process profiled it (the working tree's code, as in this process), to
    stand for this process's own unmeasured profile of the call: its nodes, their facts and output shapes, the
    capture and setup, and that process's times. None where no pair measured the test to the end, or that process
    sent no facts of the call (then this process captures the call itself)."""
    if got.failed is not None or got.error or got.ended is not None or not got.new:
        return None
    raw = _calls(got.new[0]).get(key)
    if not isinstance(raw, dict):
        return None
    try:
        entry = entry_from_json(raw.get("entry"), f"new process 1, call {key!r}")
    except ValueError:
        return None
    facts = _facts_from_json(raw.get("facts"), len(entry.nodes))
    if facts is None or not entry.runs:
        return None
    run = entry.runs[0]
    busy = sum(run.node_ns) or 1
    nodes = tuple(
        NodeStats(
            info=info,
            median_ns=ns,
            spread_ns=spread,
            share=ns / busy,
            samples_ns=(ns,),
            shape=entry.shapes[i] if entry.shapes else "",
            **facts[i],
        )
        for i, (info, ns, spread) in enumerate(zip(entry.nodes, run.node_ns, run.node_spread_ns, strict=True))
    )
    return Profile(
        name=key,
        nodes=nodes,
        total_samples_ns=(run.total_ns,) if run.total_ns else (),
        instrumented_samples_ns=(run.instrumented_ns,),
        reference_samples_ns=(run.reference_ns,),
        environment=entry.environment,
        protocol=entry.protocol,
        capture=entry.capture,
        measured=False,
        setup=entry.setup,
        fault_samples=(run.faults,) if run.faults is not None else (),
        module_faults=run.module_faults,
    )


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
    return sorted(_calls(got.new[0])) if got.new else []


def _judged(got: Pairs, keys: Iterable[str], policy: PairedPolicy, label: str) -> dict[str, Comparison | None]:
    out: dict[str, Comparison | None] = {}
    for key in keys:
        found = paired_entries(got, key)
        out[key] = None if found is None else compare_pairs(merged(found.old), merged(found.new), policy, against=label)
    return out


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
        seen: dict[int, dict[str, Comparison | None]] = {}

        def judged(got: Pairs) -> dict[str, Comparison | None]:
            """Each call's comparison over the pairs so far, judged once per pair for both questions."""
            if len(got.old) not in seen:
                seen.clear()
                seen[len(got.old)] = _judged(got, _keys(asked, got), asked.policy, label)
            return seen[len(got.old)]

        def undecided(got: Pairs) -> bool:
            return any(c is not None and needs_more(c) for c in judged(got).values())

        def moot(got: Pairs) -> bool:
            """After each pair: refuse an old side that ran the working tree's code, and stop when no call is left
            that more pairs could compare (the old side made none of them, or each hands the model another
            setup)."""
            try:
                _refuse_foreign(got.old[-1], label)
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


TO_CONFIRM = (Status.REGRESSION, Status.UNDECIDED)
"""The verdicts of a set of pairs that a second set confirms before they stand (``measure_tests``)."""


def _doubtful(got: Pairs, asked: AskedTest, label: str) -> bool:
    """Whether a test's pairs ended with a call slower or undecided, and a second set could say otherwise: not
    where a side failed, lacked or skipped the test, nor where the run's budget ended its pairs."""
    if got.failed is not None or got.ended is not None or got.error or not got.old:
        return False
    if got.stopped is not None and got.stopped.by_run_budget:
        return False
    try:
        calls = _judged(got, _keys(asked, got), asked.policy, label)
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


def judge_test(
    against: Against, test_id: str, got: Pairs, profiles: dict[str, Profile], policy: PairedPolicy
) -> TestOutcome:
    """Judge each call of ``profiles`` (this process's unmeasured profiles of the test's calls, keyed as the calls
    are) on what the test's pairs measured (``measure_tests``) with the paired rule; where a second set confirmed
    them (``Pairs.confirmed``), a call fails only where both sets find it slower (``settled``). A test whose
    computation is the same on both sides (``Pairs.unchanged``) is unchanged, call by call."""
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
    for key, comparison in _judged(got, profiles, policy, label).items():
        found = paired_entries(got, key)
        new_entries = _entries(got.new, key, "new")
        if new_entries is None:
            i = next(i for i, child in enumerate(got.new, 1) if key not in _calls(child))
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


def _refuse_foreign(child: Child, label: str) -> None:
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


def pair_ratios(c: Comparison) -> list[float]:
    """The total's ratio in each pair (new over old), for the lines that show them."""
    return list(c.total.judgement.ratios) if c.total is not None else []
