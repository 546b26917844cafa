"""Unit tests of ``pytest_fxprof.store.history``: what a refresh keeps of an entry's earlier recordings."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

import pytest

from pytest_fxprof.records.measurement import BaselineEntry, Capture, NodeInfo, Recording, Setup
from pytest_fxprof.settings import Settings
from pytest_fxprof.store import history
from pytest_fxprof.store.history import carry, trim, why_not_comparable
from tests.test_baseline import ENV, make_entry

SETUP = Setup(inputs=("args[0]: float32[4, 8] cpu",), mode="eval")
DAYS = [f"2026-11-{d:02d}T12:00:00Z" for d in range(1, 10)]


def refreshed(times: int, keep: int) -> list[str]:
    """The dates an entry holds after ``times`` refreshes of one unchanged call, newest first."""
    entry = None
    for day in DAYS[:times]:
        entry, why = carry(entry, replace(make_entry(), setup=SETUP), keep, day)
        assert why == ""
    assert entry is not None
    return [r.date for r in entry.recordings]


def test_the_clock_gives_utc_to_the_second() -> None:
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", history.now())


def test_the_default_keeps_five_recordings() -> None:
    assert Settings().history == 5


def test_a_first_recording_has_its_date_and_no_history() -> None:
    entry, why = carry(None, make_entry(), 5, DAYS[0])
    assert (entry.recorded, entry.history, why) == (DAYS[0], (), "")


def test_refreshes_keep_the_newest_recordings_first_up_to_keep() -> None:
    assert refreshed(3, keep=5) == [DAYS[2], DAYS[1], DAYS[0]]
    assert refreshed(7, keep=5) == [DAYS[6], DAYS[5], DAYS[4], DAYS[3], DAYS[2]]
    assert refreshed(4, keep=2) == [DAYS[3], DAYS[2]]
    assert refreshed(4, keep=1) == [DAYS[3]]


def test_the_previous_entrys_own_runs_become_the_newest_history() -> None:
    previous = replace(make_entry(run_count=3), recorded=DAYS[0])
    entry, _ = carry(previous, make_entry(run_count=2), 5, DAYS[1])
    assert entry.runs == make_entry(run_count=2).runs
    assert entry.history == (Recording(DAYS[0], previous.environment, previous.protocol, previous.runs),)


def test_a_previous_entry_of_a_version_1_file_is_kept_undated() -> None:
    entry, _ = carry(make_entry(), make_entry(), 5, DAYS[1])
    assert [r.date for r in entry.recordings] == [DAYS[1], ""]


def test_a_new_recording_replaces_any_history_it_came_with() -> None:
    stray = (Recording(DAYS[0], ENV, make_entry().protocol, make_entry().runs),)
    entry, _ = carry(None, replace(make_entry(), history=stray), 5, DAYS[1])
    assert entry.history == ()


CHANGES = [
    pytest.param(
        lambda e: replace(e, environment=replace(ENV, torch="2.5.0+cpu")),
        "environment torch '2.4.1+cpu' -> '2.5.0+cpu'",
        id="torch",
    ),
    pytest.param(
        lambda e: replace(e, environment=replace(ENV, cpu="AMD EPYC", threads=8)),
        "environment cpu 'Intel(R) Xeon(R) Platinum 8480+' -> 'AMD EPYC', threads 4 -> 8",
        id="cpu-and-threads",
    ),
    pytest.param(
        lambda e: replace(e, capture=Capture(method="export")),
        "the capture method changed (symbolic_trace -> export)",
        id="capture",
    ),
    pytest.param(
        lambda e: replace(e, protocol=replace(e.protocol, passes=40)),
        "the protocol changed (passes 20 -> 40)",
        id="protocol",
    ),
    pytest.param(lambda e: make_entry(node_count=4), "the graph changed (1 node(s) added, 0 removed)", id="added"),
    pytest.param(
        lambda e: replace(e, nodes=tuple(reversed(e.nodes))),
        "the graph changed (its nodes run in another order)",
        id="order",
    ),
    pytest.param(
        lambda e: replace(e, setup=Setup(inputs=("args[0]: float32[8, 8] cpu",), mode="eval")),
        "the setup changed (inputs: args[0] was float32[4, 8] cpu in the baseline, float32[8, 8] cpu in this run)",
        id="setup",
    ),
]


@pytest.mark.parametrize(("change", "why"), CHANGES)
def test_another_environment_graph_setup_or_capture_restarts_the_history(
    change: Callable[[BaselineEntry], BaselineEntry], why: str
) -> None:
    previous = replace(make_entry(), setup=SETUP, recorded=DAYS[0])
    new = change(replace(make_entry(), setup=SETUP))
    assert why_not_comparable(previous, new) == why
    entry, said = carry(previous, new, 5, DAYS[1])
    # another program (capture, graph, setup), or the one earlier recording measured otherwise: none is left to keep
    program = why.startswith(("the capture", "the graph", "the setup"))
    where = "" if program else f" in its recording of {DAYS[0]}"
    assert said == f"history restarted, {why}{where}; its 1 earlier recording(s) were not kept"
    assert (entry.recorded, entry.history) == (DAYS[1], ())


def test_what_need_not_match_keeps_the_history() -> None:
    previous = replace(make_entry(), setup=SETUP, recorded=DAYS[0])
    # python and platform are not compared, a setup recorded on one side only is not either, nor are names
    renamed = tuple(replace(n, name=f"renamed_{i}", source="x.py:1") for i, n in enumerate(make_entry().nodes))
    new = replace(make_entry(), environment=replace(ENV, python="3.12.0", platform="Linux-6.9"), nodes=renamed)
    assert why_not_comparable(previous, new) == ""
    entry, why = carry(previous, new, 5, DAYS[1])
    assert why == ""
    assert [r.date for r in entry.recordings] == [DAYS[1], DAYS[0]]


def test_with_keep_1_nothing_is_kept_and_nothing_said() -> None:
    previous = replace(make_entry(), recorded=DAYS[0])
    new = replace(make_entry(), environment=replace(ENV, torch="2.5.0"))
    entry, why = carry(previous, new, 1, DAYS[1])
    assert (entry.history, why) == ((), "")


def test_trim_keeps_the_newest() -> None:
    entry = None
    for day in DAYS[:5]:
        entry, _ = carry(entry, make_entry(), 5, day)
    assert entry is not None
    assert [r.date for r in trim(entry, 2).recordings] == [DAYS[4], DAYS[3]]
    assert trim(entry, 1).history == ()
    assert trim(entry, 9) == entry
    with pytest.raises(ValueError, match="at least 1 recording"):
        trim(entry, 0)


def test_node_keys_not_names_decide_the_graph() -> None:
    previous = make_entry()
    moved = (*previous.nodes[:-1], NodeInfo("other:key#0", "layers_2", "call_module", "layers.2", "layers.2"))
    assert (
        why_not_comparable(previous, replace(previous, nodes=moved)) == "the graph changed (1 node(s) added, 1 removed)"
    )
