"""One test against the base revision: its pairs of old and new processes, and the comparison of each call.

Owns ``Against`` (the run's two sides: the revision's tree and interpreter, the working tree's) and
``check_test``, which measures a test's pairs and judges each of its ``fxprof`` calls with the paired rule.

Must not import torch or pytest.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_fxprof.against.revision import Revision
from pytest_fxprof.against.rounds import Pairs, Side, SideFailedError, machine_lock, measure_pairs
from pytest_fxprof.judge.paired import PairedPolicy, compare_pairs, needs_more
from pytest_fxprof.measure.sampling import Child, Relaunch, tail
from pytest_fxprof.records.measurement import BaselineEntry, iqr_int, median_int
from pytest_fxprof.records.profile import Profile
from pytest_fxprof.records.verdicts import Comparison
from pytest_fxprof.store.baseline import entry_from_json

NOT_FOUND = (4, 5)
"""pytest's exit statuses for a test id it cannot find (4) or a selection that collected nothing (5)."""

BROKEN = ("ERROR collecting", "error during collection", "errors during collection")
"""What pytest prints when a module failed to import: then a test it does not find is broken, not absent."""


def absent(child: Child) -> bool:
    """Whether the old side's process found no such test (rather than failing to import its module)."""
    return child.returncode in NOT_FOUND and not any(text in child.output for text in BROKEN)


class AgainstError(Exception):
    """A side could not be measured; the message names the side, the cause and the fix."""


@dataclass(frozen=True)
class Against:
    """What the old side is: the revision (None: the working tree's code too), its interpreter (None: this
    one), and the extra import roots of the project (relative to the repository's top level)."""

    revision: Revision | None
    python: str | None = None
    roots: tuple[str, ...] = ()

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
    made it) and the new side's measurement as a profile (None when it made no such call)."""

    comparison: Comparison | None
    profile: Profile | None
    stopped: str = ""


@dataclass(frozen=True)
class TestOutcome:
    """A test against the old side: ``absent`` when the test does not exist there, else each call's outcome."""

    __test__ = False

    absent: bool
    calls: dict[str, CallOutcome]
    pairs: int = 0
    seconds: float = 0.0


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


def merged(entries: Sequence[BaselineEntry]) -> BaselineEntry:
    """One entry holding each process's run, in pair order (the entries of one side)."""
    first = entries[0]
    for e in entries[1:]:
        if [n.key for n in e.nodes] != [n.key for n in first.nodes]:
            raise AgainstError(
                "one side's processes captured different graphs of the same call; the capture must be "
                "deterministic (a model whose graph depends on state or randomness cannot be compared)"
            )
    return replace(first, runs=tuple(e.runs[0] for e in entries))


def side_profile(base: Profile, entry: BaselineEntry) -> Profile:
    """``base`` (this process's unmeasured profile of the call) with the times the new side's processes
    measured: per node the median over processes, its samples one per process."""
    keys = [n.info.key for n in base.nodes]
    if keys != [n.key for n in entry.nodes]:
        raise AgainstError(
            "the new side's processes captured another graph than this process did; the capture must be "
            "deterministic (a model whose graph depends on state or randomness cannot be compared)"
        )
    per_node = [tuple(r.node_ns[i] for r in entry.runs) for i in range(len(keys))]
    medians = [median_int(s) for s in per_node]
    busy = sum(medians) or 1
    nodes = tuple(
        replace(n, median_ns=m, spread_ns=iqr_int(s), share=m / busy, samples_ns=s, info=info)
        for n, m, s, info in zip(base.nodes, medians, per_node, entry.nodes, strict=True)
    )
    return replace(
        base,
        nodes=nodes,
        total_samples_ns=tuple(r.total_ns for r in entry.runs),
        instrumented_samples_ns=tuple(r.instrumented_ns for r in entry.runs),
        reference_samples_ns=tuple(r.reference_ns for r in entry.runs),
        environment=entry.environment,
        protocol=entry.protocol,
        measured=True,
    )


def _failure(err: SideFailedError, label: str, test_id: str) -> AgainstError:
    child = err.child
    who = f"the old side ({label})" if err.side.name == "old" else "the new side (the working tree)"
    what = child.problem or f"exited with status {child.returncode}"
    return AgainstError(
        f"{who} could not measure {test_id} (process {err.number}: {what}); its output follows, then its "
        f"command\n{'-' * 20} output of {who} {'-' * 20}\n{tail(child.output).rstrip()}\n{'-' * 60}\n"
        f"command: {' '.join(child.command)}"
    )


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
) -> TestOutcome:
    """Measure ``test_id`` in pairs of old and new processes and judge each call of ``profiles`` (this
    process's unmeasured profiles of the test's calls, keyed as the calls are), on ``schedule``
    (``settings.SCHEDULES``)."""
    old_side, new_side = against.sides(new)
    duet = duet_for(schedule, profiles.values())
    label = against.label

    def judged(got: Pairs) -> dict[str, Comparison | None]:
        out: dict[str, Comparison | None] = {}
        for key in profiles:
            old, new_entries = _entries(got.old, key, "old"), _entries(got.new, key, "new")
            out[key] = (
                None
                if old is None or new_entries is None
                else compare_pairs(merged(old), merged(new_entries), policy, against=label)
            )
        return out

    def undecided(got: Pairs) -> bool:
        return any(c is not None and needs_more(c) for c in judged(got).values())

    request = {"test_id": test_id, "settings": settings, "entry": True}
    try:
        with machine_lock():
            got = measure_pairs(
                old_side,
                new_side,
                test_id,
                request,
                pairs=pairs,
                max_pairs=max_pairs,
                budget_s=budget_s,
                undecided=undecided,
                duet=duet,
            )
    except SideFailedError as err:
        if err.side.name == "old" and against.revision is not None and absent(err.child):
            return TestOutcome(absent=True, calls={})
        raise _failure(err, label, test_id) from None
    foreign = sorted({m for child in got.old for m in (child.data or {}).get("foreign", [])})
    if foreign:
        shown = "; ".join(foreign[:6]) + (f"; ... {len(foreign) - 6} more" if len(foreign) > 6 else "")
        raise AgainstError(
            f"the old side ({label}) imported code from the working tree, so it would measure the new code: "
            f"{shown}. The old side runs the revision's tree with its top level and src/ first on PYTHONPATH; "
            "a sys.path entry or an import by absolute path to the checkout defeats that: import the project "
            "by a path relative to the test files, or name its other import roots in the ini key "
            "fxprof_against_roots"
        )
    calls = {}
    for key, comparison in judged(got).items():
        new_entries = _entries(got.new, key, "new")
        profile = side_profile(profiles[key], merged(new_entries)) if new_entries is not None else None
        calls[key] = CallOutcome(comparison, profile, got.stopped if comparison is not None else "")
    return TestOutcome(absent=False, calls=calls, pairs=len(got.old), seconds=got.seconds)


def pair_ratios(c: Comparison) -> list[float]:
    """The total's ratio in each pair (new over old), for the lines that show them."""
    return list(c.total.judgement.ratios) if c.total is not None else []
