"""Bands learnt from a baseline's history of recordings (``judge.decision``), on synthetic samples."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace

import pytest

from pytest_fxprof.judge.decision import HISTORY_NODE_TOLERANCE, HISTORY_TOTAL_TOLERANCE, MIN_RECORDINGS, compare
from pytest_fxprof.judge.noise import node_noise, spread_of
from pytest_fxprof.records.measurement import BaselineEntry, Recording, Run
from pytest_fxprof.records.verdicts import BandSource, Comparison, NodeVerdict, Status, Verdict
from pytest_fxprof.settings import Settings
from pytest_fxprof.views.render import regression_message
from tests.records_for_tests import BASE_NS, ENV, MODEL, POLICY, PROTOCOL
from tests.test_decision import REF_NS, make_entry, make_run

NO_FLOOR = replace(POLICY, floor_ns=0, floor_share=0.0)
JITTER = (1.0, 1.005, 0.995)
"""Three processes per recording, half a percent apart."""


def times(factors: Mapping[str, float] | None = None, overall: float = 1.0) -> list[int]:
    return [round(BASE_NS[n.name] * overall * (factors or {}).get(n.name, 1.0)) for n in MODEL]


def recording(factors: Mapping[str, float] | None = None, overall: float = 1.0) -> list[Run]:
    """One recording's processes: the model (``factors`` per node) with a little jitter per process."""
    return [make_run(times(factors, overall * j), reference_ns=REF_NS) for j in JITTER]


def with_history(newest: Sequence[Run], *older: Sequence[Run]) -> BaselineEntry:
    """An entry whose own recording is ``newest`` and whose history is ``older`` (newest first)."""
    history = tuple(
        Recording(f"2026-11-{20 - k}T10:00:00Z", ENV, PROTOCOL, tuple(runs)) for k, runs in enumerate(older)
    )
    return replace(make_entry(newest), recorded="2026-11-21T10:00:00Z", history=history)


def check(factors: Mapping[str, float] | None = None, overall: float = 1.0) -> BaselineEntry:
    return make_entry([make_run(times(factors, overall), reference_ns=REF_NS)])


def verdict(c: Comparison, name: str) -> NodeVerdict:
    return next(v for v in c.nodes if v.node.name == name)


# Three recordings of a quiet runner, but conv1 drifts +-8 % from one recording to the next
DRIFTING = with_history(recording(), recording({"conv1": 1.08}), recording({"conv1": 0.92}))
ONE = make_entry(recording())


def test_spread_of_adds_the_drift_between_groups_to_the_spread_within_them() -> None:
    within, dof = spread_of([[1.0, 1.0, 1.0]])
    assert (within, dof) == (0.0, 2)
    sigma, dof = spread_of([[1.0, 1.0], [1.1, 1.1], [0.9, 0.9]])
    assert dof == 3
    assert sigma == pytest.approx(statistics.stdev([0.0, math.log(1.1), math.log(0.9)]))  # nothing within
    assert spread_of([[2.0]]) == (None, 0)  # one value: nothing to estimate from


def test_a_node_that_drifted_between_recordings_gets_a_wider_band_than_one_recording_shows() -> None:
    alone = node_noise(ONE.runs)
    learnt = node_noise(DRIFTING.runs, history=[rec.runs for rec in DRIFTING.history])
    conv1 = [n.name for n in MODEL].index("conv1")
    conv2 = [n.name for n in MODEL].index("conv2")
    drifted, one = learnt[conv1].sigma, alone[conv1].sigma
    steady, steady_one = learnt[conv2].sigma, alone[conv2].sigma
    assert drifted is not None
    assert one is not None
    assert drifted > one + 0.03  # the drift is on record
    assert steady == pytest.approx(steady_one, abs=0.02)  # a steady node stays narrow
    assert learnt[conv1].centre_ns == alone[conv1].centre_ns  # the centre is the newest recording's


def test_from_min_recordings_on_the_history_tolerances_replace_the_defaults() -> None:
    assert MIN_RECORDINGS == 3
    c = compare(DRIFTING, check(), NO_FLOOR)
    assert c.recordings == 3
    assert verdict(c, "conv2").band == pytest.approx(HISTORY_NODE_TOLERANCE)
    assert verdict(c, "conv2").judgement.band_source is BandSource.TOLERANCE
    steady = compare(with_history(recording(), recording(), recording()), check(), NO_FLOOR)
    assert steady.total is not None
    assert steady.total.band == pytest.approx(HISTORY_TOTAL_TOLERANCE)
    # two recordings: the drift counts, the tolerances are still the defaults
    two = with_history(recording(), recording({"conv1": 1.08}))
    c2 = compare(two, check(), NO_FLOOR)
    assert c2.recordings == 2
    assert verdict(c2, "conv2").band == pytest.approx(NO_FLOOR.node_tolerance)


def test_history_catches_a_smaller_slowdown_on_a_steady_node_that_one_recording_misses() -> None:
    slowed = check({"conv2": 1.09})
    assert compare(ONE, slowed, NO_FLOOR).status is Status.PASS  # +9 % is inside the 10 % tolerance
    c = compare(DRIFTING, slowed, NO_FLOOR)
    assert c.status is Status.REGRESSION
    assert verdict(c, "conv2").verdict is Verdict.SLOWER


def test_history_holds_the_drift_a_node_showed_and_fails_beyond_it() -> None:
    c = compare(DRIFTING, check({"conv1": 1.08}), NO_FLOOR)  # as far as conv1 drifted between recordings
    assert verdict(c, "conv1").verdict is Verdict.OK
    assert verdict(c, "conv1").judgement.band_source is BandSource.SPREAD
    band = verdict(c, "conv1").band
    assert HISTORY_NODE_TOLERANCE < band < 0.5
    beyond = compare(DRIFTING, check({"conv1": (1 + band) * 1.2}), NO_FLOOR)
    assert verdict(beyond, "conv1").verdict is Verdict.SLOWER


def test_the_total_learns_its_drift_between_recordings() -> None:
    steady = with_history(recording(), recording(), recording())
    assert compare(steady, check(overall=1.06), NO_FLOOR).status is Status.REGRESSION  # +6 % beyond +3 %
    assert compare(ONE, check(overall=1.06), NO_FLOOR).status is Status.PASS  # within the 15 % default
    drifting = with_history(recording(), recording(overall=1.08), recording(overall=0.93))
    c = compare(drifting, check(overall=1.06), NO_FLOOR)
    assert c.total is not None
    assert c.total.verdict is Verdict.OK
    assert c.total.judgement.band_source is BandSource.SPREAD


def test_a_tolerance_the_user_set_holds_whatever_the_history() -> None:
    policy = Settings(node_tolerance=0.2, total_tolerance=0.12).policy()
    assert policy.learnt(MIN_RECORDINGS).node_tolerance == 0.2
    assert policy.learnt(MIN_RECORDINGS).total_tolerance == 0.12
    default = Settings().policy()
    assert default.learnt(MIN_RECORDINGS - 1) == default
    assert default.learnt(MIN_RECORDINGS).node_tolerance == HISTORY_NODE_TOLERANCE


def test_a_failure_says_how_many_recordings_its_baseline_learnt_from() -> None:
    c = compare(DRIFTING, check({"conv2": 1.5}), NO_FLOOR)
    assert regression_message("t.py::test [call0]", c).startswith(
        "fxprof: t.py::test [call0] got slower than its baseline (3 process(es) over 3 recordings)"
    )
