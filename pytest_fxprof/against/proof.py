"""Against a revision: the tests whose computation is the same on both sides, found before any pair is measured.

Owns ``prove``: one process per side serves every test at once, capturing each ``fxprof`` call and writing its
computation fingerprint (``records.fingerprint``) without timing anything. A test whose calls are the same on both
sides (the same calls, each fingerprint read whole and equal) runs the same computation at the revision and in the
working tree: its measurements on the two sides are draws of one distribution, so it is decided *unchanged*
without pairs. The others are measured in pairs as ever, and what differs in their fingerprints names where.

Must not import torch or pytest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_fxprof.against.revision import PREFIX
from pytest_fxprof.against.rounds import Side
from pytest_fxprof.measure.sampling import Child
from pytest_fxprof.measure.serving import Served, Spent, run, serving_dir, settle
from pytest_fxprof.records.fingerprint import Fingerprint


@dataclass(frozen=True)
class Proof:
    """What the sides' fingerprints say of one test: ``unchanged`` where every call is the same computation on both
    sides; ``changes``, per call, what differs (empty for a call that is the same). A test that a side failed,
    skipped or did not finish, or whose calls are not the same on both sides, is not unchanged: its pairs say
    what became of it."""

    unchanged: bool
    changes: dict[str, list[str]] = field(default_factory=dict)
    new: Child | None = None
    """The new side's process as it fingerprinted the test: its unmeasured profile of each call stands for the run's
    own process's where the test is unchanged (``against.answers.first_profile``)."""


def prove(
    old: Side, new: Side, tests: Sequence[tuple[str, Mapping[str, Any]]], *, deadline_s: float, spent: Spent | None
) -> dict[str, Proof]:
    """Fingerprint every test of ``tests`` (``(test_id, what its processes are asked)``) on both sides at once, one
    process each; per test what the fingerprints say."""
    with serving_dir(PREFIX, "proof") as tmp:
        served = []
        for side in (old, new):
            directory = Path(tmp) / side.name
            directory.mkdir()
            extra = {**side.request, "entry": True, "fingerprint": True}
            served.append(Served(side.name, side.relaunch, list(tests), directory, extra, starter=side.starter))
        run(served, deadline_s)
        got = settle(served, [t for t, _ in tests], spent)
    out = {}
    for test_id, _ in tests:
        children = got.measured.get(test_id)
        if children is None:
            out[test_id] = Proof(unchanged=False)  # a side's process did not fingerprint it: its pairs say why
        else:
            out[test_id] = replace(same_computation(children["old"], children["new"]), new=children["new"])
    return out


def same_computation(old: Child, new: Child) -> Proof:
    """What the fingerprints two sides' processes wrote of one test say."""
    if old.ended or new.ended or old.data is None or new.data is None:
        return Proof(unchanged=False)  # a side skipped it, lacked it or did not run it to the end
    if old.data.get("foreign"):  # the old side ran the working tree's code: its pairs refuse it, with the fix
        return Proof(unchanged=False)
    old_calls, new_calls = _fingerprints(old), _fingerprints(new)
    if old_calls.keys() != new_calls.keys():  # a call made on one side only: the pairs call it new
        return Proof(unchanged=False)
    changes = {}
    for key, seen in new_calls.items():
        before = old_calls[key]
        if seen is None or before is None:
            changes[key] = ["could not be read: the fingerprint of a side's call"]
        else:
            changes[key] = [] if seen.same_as(before) else seen.differences(before)
    return Proof(unchanged=all(not c for c in changes.values()), changes=changes)


def _fingerprints(child: Child) -> dict[str, Fingerprint | None]:
    calls = (child.data or {}).get("calls")
    if not isinstance(calls, dict):
        return {}
    return {
        str(key): Fingerprint.from_json(call.get("fingerprint")) if isinstance(call, dict) else None
        for key, call in calls.items()
    }
