"""A baseline's history learns only from recordings measured as its entry's own was: the same environment
(``Environment.MATCH_FIELDS``) and protocol (``Protocol.MATCH_FIELDS``), as the file reads, in the bands
(``judge.decision.learnt_from``), in ``fxprof show`` and in the next ``--fxprof-update`` (``store.history.carry``).

Such a recording only reaches a file edited by hand, as a merge of two baseline files resolved by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_fxprof.judge.decision import compare, learnt_from
from pytest_fxprof.records.measurement import BaselineEntry, Recording, measured_unlike
from pytest_fxprof.store.baseline import as_file, parse, render
from pytest_fxprof.store.history import carry
from tests.records_for_tests import ENV, POLICY, PROTOCOL
from tests.test_cli import run, write_baseline
from tests.test_history_bands import check, recording, with_history

OTHER_TORCH = replace(ENV, torch="2.4.0+cpu")
DAY = "2026-11-18T10:00:00Z"
"""The date of the recording measured otherwise, older than those of ``with_history``."""

# Three recordings of a quiet runner that drifts a little: bands learnt from the history
COMPARABLE = with_history(recording(), recording({"conv1": 1.03}), recording({"fc": 0.97}))


def with_foreign(entry: BaselineEntry, foreign: Recording) -> BaselineEntry:
    """``entry`` with ``foreign`` added as its oldest recording (where a merge resolved by hand put it)."""
    return replace(entry, history=(*entry.history, foreign))


def foreign(change: Callable[[Recording], Recording]) -> Recording:
    """A recording far slower than the others (+40 %, conv1 twice as slow), changed by ``change``."""
    return change(Recording(DAY, ENV, PROTOCOL, tuple(recording({"conv1": 2.0}, overall=1.4))))


UNLIKE = [
    pytest.param(
        lambda r: replace(r, environment=OTHER_TORCH), "environment torch '2.4.0+cpu' -> '2.4.1+cpu'", id="torch"
    ),
    pytest.param(
        lambda r: replace(r, environment=replace(ENV, cpu="AMD EPYC 9654", threads=4)),
        "environment cpu 'AMD EPYC 9654' -> 'Intel(R) Xeon(R) Platinum 8480+', threads 4 -> 1",
        id="cpu-and-threads",
    ),
    pytest.param(
        lambda r: replace(r, protocol=replace(PROTOCOL, passes=40)),
        "the protocol changed (passes 40 -> 20)",
        id="passes",
    ),
    pytest.param(
        lambda r: replace(r, protocol=replace(PROTOCOL, warmup=1)),
        "the protocol changed (warmup 1 -> 5)",
        id="warmup",
    ),
]


@pytest.mark.parametrize(("change", "why"), UNLIKE)
def test_a_recording_measured_otherwise_is_never_learnt_from(
    change: Callable[[Recording], Recording], why: str
) -> None:
    odd = foreign(change)
    entry = with_foreign(COMPARABLE, odd)
    assert entry.not_comparable(odd) == why
    assert entry.comparable_recordings == COMPARABLE.recordings
    assert learnt_from(entry, POLICY) == learnt_from(COMPARABLE, POLICY)
    # the bands, and every verdict, are those of the comparable recordings, as if the file did not hold it
    now = check({"conv1": 1.06})
    judged = compare(entry, now, POLICY)
    assert judged == compare(COMPARABLE, now, POLICY)
    assert judged.recordings == 3


def test_learning_from_it_would_have_loosened_the_bands() -> None:
    """The same recording measured alike is learnt from, and widens the bands: what the rule keeps out."""
    alike = with_foreign(COMPARABLE, foreign(lambda r: r))
    now = check({"conv1": 1.06})
    loose, tight = compare(alike, now, POLICY), compare(COMPARABLE, now, POLICY)
    assert loose.recordings == 4
    assert loose.total is not None
    assert tight.total is not None
    assert loose.total.judgement.band > 2 * tight.total.judgement.band
    conv1 = next(v for v in loose.nodes if v.node.name == "conv1")
    assert conv1.judgement.band > 2 * next(v for v in tight.nodes if v.node.name == "conv1").judgement.band


def test_what_need_not_match_is_learnt_from() -> None:
    """Python and platform are not compared, nor how many processes a recording holds."""
    other = Recording(
        DAY,
        replace(ENV, python="3.12.4", platform="Linux-6.9-x86_64"),
        replace(PROTOCOL, processes=2),
        tuple(recording()[:2]),
    )
    entry = with_foreign(COMPARABLE, other)
    assert measured_unlike(other, entry.own_recording) == ""
    assert entry.comparable_recordings == entry.recordings
    assert compare(entry, check(), POLICY).recordings == 4


def test_the_file_keeps_it_as_it_was_read() -> None:
    entry = with_foreign(COMPARABLE, foreign(lambda r: replace(r, environment=OTHER_TORCH)))
    path = Path("baselines/t.json")
    text = render(as_file("t.py::test_t", {"call0": entry}))
    assert parse(text, path).entries["call0"] == entry  # read whole, never dropped on reading


def test_the_next_update_sets_it_aside_keeps_the_others_and_says_so() -> None:
    previous = with_foreign(COMPARABLE, foreign(lambda r: replace(r, environment=OTHER_TORCH)))
    new = replace(COMPARABLE, history=(), recorded="")
    entry, said = carry(previous, new, 5, "2026-11-22T10:00:00Z")
    assert said == (
        f"1 earlier recording(s) set aside, measured otherwise (environment torch '2.4.0+cpu' -> '2.4.1+cpu' in its "
        f"recording of {DAY}); the 3 measured as this one was kept"
    )
    assert entry.recorded == "2026-11-22T10:00:00Z"
    assert entry.history == COMPARABLE.recordings  # every comparable one, none lost for the foreign one
    # without it, the same update keeps them all
    kept, why = carry(COMPARABLE, new, 5, "2026-11-22T10:00:00Z")
    assert why == ""
    assert kept.history == COMPARABLE.recordings


def test_show_marks_each_recording_and_counts_only_those_learnt_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = with_foreign(COMPARABLE, foreign(lambda r: replace(r, environment=OTHER_TORCH)))
    code, out, err = run(capsys, "show", write_baseline(tmp_path, {"call0": entry}))
    assert (code, err) == (0, "")
    assert (
        "bands: learnt from 3 recordings (the spread within them and the drift between them; smallest node band "
        "+5%, total +3%); 1 of another environment or protocol than the latest not learnt from (the next "
        "--fxprof-update sets it aside and keeps the others)"
    ) in out
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("2026-11-")}
    assert list(rows) == ["latest", "-1", "-2", "-3"]
    assert all(rows[k].rstrip().endswith("yes") for k in ("latest", "-1", "-2"))
    assert rows["-3"].startswith(DAY)
    assert rows["-3"].rstrip().endswith("not learnt from: environment torch '2.4.0+cpu' -> '2.4.1+cpu'")


def test_one_that_would_age_out_anyway_restarts_nothing() -> None:
    previous = with_foreign(COMPARABLE, foreign(lambda r: replace(r, environment=OTHER_TORCH)))
    new = replace(COMPARABLE, history=(), recorded="")
    entry, why = carry(previous, new, 3, "2026-11-22T10:00:00Z")
    assert why == ""
    assert entry.history == COMPARABLE.recordings[:2]
