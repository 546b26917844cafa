"""The pairs of a check against a revision (``against.rounds``): which tests each pair serves and when a test
leaves them (a fake pair and clock), and the processes of a pair serving many tests, one crashing, hanging or
failing in a test (small Python scripts in place of pytest). No torch, no inner pytest runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_fxprof.against import rounds
from pytest_fxprof.measure import serving
from pytest_fxprof.measure.forking import Forker, can_fork
from pytest_fxprof.measure.lockstep import call_tag
from pytest_fxprof.measure.sampling import Child, Relaunch, Start, start
from pytest_fxprof.measure.serving import Spent

# The schedule: a fake pair ------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_pairs(
    monkeypatch: pytest.MonkeyPatch, clock: FakeClock, *, seconds: float = 10.0, data: dict[str, Any] | None = None
) -> list[list[str]]:
    """Pairs that take ``seconds`` per test on ``clock`` and write ``data`` of a test (by its id; else no calls);
    returns the tests each pair served."""
    served: list[list[str]] = []

    def run_pair(old: rounds.Side, new: rounds.Side, tests: list[rounds.PairedTest], **kw: Any) -> rounds.PairResult:
        served.append([t.test_id for t in tests])
        clock.now += seconds * len(tests)
        result = rounds.PairResult()
        for t in tests:
            child = Child((), 0, (data or {}).get(t.test_id, {"calls": {}}), "")
            result.measured[t.test_id] = (child, child)
            result.seconds[t.test_id] = seconds
        return result

    monkeypatch.setattr(rounds, "run_pair", run_pair)
    return served


OLD = rounds.Side("old", "HEAD", Relaunch(Path(), Path(), None))
NEW = rounds.Side("new", "the working tree", Relaunch(Path(), Path(), None))


def asked(test_id: str, *, pairs: int = 4, max_pairs: int = 18, budget_s: float = 1000, open_until: int = 0) -> Any:
    """A test that stays undecided until it has ``open_until`` pairs."""
    return rounds.PairedTest(
        test_id, {"settings": {}}, pairs, max_pairs, budget_s, undecided=lambda got: len(got.old) < open_until
    )


def test_every_test_takes_its_pairs_and_a_decided_one_leaves_the_later_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    served = fake_pairs(monkeypatch, clock)
    tests = [asked("a"), asked("b", open_until=6), asked("c", pairs=5)]
    got = rounds.measure_pairs(OLD, NEW, tests, clock=clock, test_order=rounds.in_turn)
    assert served == [["a", "b", "c"]] * 4 + [["b", "c"], ["b"]]
    assert [len(got[t].old) for t in "abc"] == [4, 6, 5]
    assert all(got[t].stopped is None for t in "abc")


def test_pair_one_serves_the_tests_in_the_runs_order_and_each_later_pair_in_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    served = fake_pairs(monkeypatch, clock)
    names = [f"t{i}" for i in range(8)]
    got = rounds.measure_pairs(OLD, NEW, [asked(n, pairs=6) for n in names], clock=clock, test_order=rounds.shuffled(1))
    assert served[0] == names
    assert all(sorted(pair) == names for pair in served)  # every pair serves every open test once
    assert len({tuple(pair) for pair in served[1:]}) == 5  # five later pairs, five orders
    assert all(len(got[n].old) == 6 for n in names)
    again = fake_pairs(monkeypatch, FakeClock())
    rounds.measure_pairs(OLD, NEW, [asked(n, pairs=6) for n in names], clock=FakeClock(), test_order=rounds.shuffled(1))
    assert again == served  # one seed, one schedule


def test_a_check_orders_its_pairs_afresh_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    orders = []
    for _ in range(2):
        served = fake_pairs(monkeypatch, FakeClock())
        rounds.measure_pairs(OLD, NEW, [asked(f"t{i}", pairs=3) for i in range(10)], clock=FakeClock())
        orders.append(served)
    assert orders[0][0] == orders[1][0] == [f"t{i}" for i in range(10)]
    assert orders[0][1:] != orders[1][1:]  # 10! orders a pair: two checks draw the same two by chance 1 in 10**13


def test_an_undecided_test_stops_at_its_limit_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    fake_pairs(monkeypatch, clock)
    got = rounds.measure_pairs(OLD, NEW, [asked("a", max_pairs=5, open_until=99)], clock=clock)
    assert len(got["a"].old) == 5
    assert str(got["a"].stopped) == "the limit of 5 pairs"


def test_the_tests_budget_bounds_every_pair_after_its_first_its_minimum_too(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    fake_pairs(monkeypatch, clock)
    got = rounds.measure_pairs(OLD, NEW, [asked("a", pairs=4, budget_s=30, open_until=99)], clock=clock)
    assert len(got["a"].old) == 3  # a pair takes 10 s: a fourth would end at 40 s, past the budget
    assert str(got["a"].stopped) == "the time budget of 30 s per test (a pair of it takes 10 s, so 4 pairs need 40 s)"
    got = rounds.measure_pairs(OLD, NEW, [asked("a", pairs=4, budget_s=55, open_until=99)], clock=clock)
    assert len(got["a"].old) == 5  # 4 pairs took 40 s, a fifth ends at 50 s, a sixth would end at 60 s
    assert str(got["a"].stopped) == "the time budget of 55 s per test (a pair of it takes 10 s)"
    got = rounds.measure_pairs(OLD, NEW, [asked("a", pairs=4, budget_s=5)], clock=clock)
    assert len(got["a"].old) == 1  # the first pair always runs: what a pair costs is known only after it


def test_the_run_budget_starts_no_pair_that_would_end_past_it(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    served = fake_pairs(monkeypatch, clock)
    tests = [asked("a", open_until=99), asked("b", open_until=99)]
    got = rounds.measure_pairs(OLD, NEW, tests, clock=clock, run_budget_s=130)
    # a pair of both tests takes 20 s: the seventh would end at 140 s
    assert len(served) == 6
    assert clock.now == 120
    assert str(got["a"].stopped) == str(got["b"].stopped) == "the run's time budget of 130 s"


def test_the_first_pair_runs_whatever_the_run_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    served = fake_pairs(monkeypatch, clock)
    got = rounds.measure_pairs(OLD, NEW, [asked("a")], clock=clock, run_budget_s=1)
    assert len(served) == 1
    assert str(got["a"].stopped) == "the run's time budget of 1 s"


ENDED = [({"absent": True}, True, ""), ({"skipped": "no GPU"}, False, "no GPU")]


@pytest.mark.parametrize(("data", "absent", "skipped"), ENDED)
def test_a_test_absent_or_skipped_on_a_side_leaves_the_pairs_alone(
    monkeypatch: pytest.MonkeyPatch, data: dict[str, Any], absent: bool, skipped: str
) -> None:
    clock = FakeClock()
    served = fake_pairs(monkeypatch, clock, data={"gone": data})
    got = rounds.measure_pairs(OLD, NEW, [asked("gone"), asked("kept")], clock=clock)
    assert served == [["gone", "kept"]] + [["kept"]] * 3
    assert got["gone"].ended is not None
    side, child = got["gone"].ended
    assert side == "old"
    assert (child.absent, child.skipped) == (absent, skipped)
    assert got["gone"].old == []
    assert len(got["kept"].old) == 4


def test_a_moot_test_leaves_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    served = fake_pairs(monkeypatch, clock)
    moot = rounds.PairedTest("a", {}, 4, 18, 1000, moot=lambda got: True)
    rounds.measure_pairs(OLD, NEW, [moot, asked("b")], clock=clock)
    assert served == [["a", "b"]] + [["b"]] * 3


def test_the_new_sides_calls_are_learnt_from_the_first_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock-step of later pairs knows which calls the new side makes in each test."""
    clock = FakeClock()
    fake_pairs(monkeypatch, clock, data={"a": {"calls": {"second": {}, "first": {}}}})
    test = asked("a")
    rounds.measure_pairs(OLD, NEW, [test], clock=clock)
    assert test.request["calls"] == ["first", "second"]


def entry(method: str, leaves: list[str], detail: str) -> dict[str, Any]:
    capture = {"method": method, "leaf_modules": leaves, "graphs": 1, "detail": detail, "classes": {"": "Net"}}
    return {"entry": {"capture": capture, "nodes": []}}


def test_each_sides_captures_are_learnt_from_its_first_pair_and_asked_of_its_later_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each side's later pairs are told how its own first pair captured each call: the entry's capture record,
    nothing else of the entry; a call whose entry holds no capture record is left out."""
    clock = FakeClock()
    told: list[dict[str, Any]] = []

    def run_pair(old: rounds.Side, new: rounds.Side, tests: list[rounds.PairedTest], **kw: Any) -> rounds.PairResult:
        told.append({side: tests[0].asked(side) for side in ("old", "new")})
        clock.now += 10
        result = rounds.PairResult()
        old_calls = {
            "call0": entry("symbolic_trace", ["blocks.0.mixer"], "symbolic_trace failed in ...; kept it whole")
        }
        new_calls = {"call0": entry("export", [], "symbolic_trace failed ...; captured with export"), "odd": {}}
        result.measured["a"] = (Child((), 0, {"calls": old_calls}, ""), Child((), 0, {"calls": new_calls}, ""))
        result.seconds["a"] = 10
        return result

    monkeypatch.setattr(rounds, "run_pair", run_pair)
    rounds.measure_pairs(OLD, NEW, [asked("a", pairs=3)], clock=clock)
    assert len(told) == 3
    assert "captured" not in told[0]["old"]
    assert "captured" not in told[0]["new"]
    for later in told[1:]:
        assert later["old"]["captured"] == {
            "call0": entry("symbolic_trace", ["blocks.0.mixer"], "symbolic_trace failed in ...; kept it whole")[
                "entry"
            ]["capture"]
        }
        assert later["new"]["captured"] == {
            "call0": entry("export", [], "symbolic_trace failed ...; captured with export")["entry"]["capture"]
        }
        assert later["old"]["settings"] == {}  # the rest of the test's request as it was


def test_captured_by_reads_only_capture_records() -> None:
    calls = {
        "a": entry("symbolic_trace", [], ""),
        "b": {"entry": {"capture": "not a record"}},
        "c": "junk",
        "d": {"entry": None},
    }
    assert rounds.captured_by(Child((), 0, {"calls": calls}, "")) == {
        "a": entry("symbolic_trace", [], "")["entry"]["capture"]
    }
    assert rounds.captured_by(Child((), 0, None, "")) == {}
    assert rounds.captured_by(Child((), 0, {"calls": ["not", "a", "dict"]}, "")) == {}


def test_a_capture_record_in_a_request_is_read_back_or_left_out() -> None:
    from pytest_fxprof.measure.sampling import capture_from_request
    from pytest_fxprof.records.measurement import Capture

    raw = entry("symbolic_trace", ["a.b"], "kept it whole")["entry"]["capture"]
    assert capture_from_request(raw) == Capture(
        method="symbolic_trace", leaf_modules=("a.b",), detail="kept it whole", classes=(("", "Net"),)
    )
    assert capture_from_request({"method": "export", "leaf_modules": []}) == Capture(method="export")
    bad_records: tuple[Any, ...] = (
        None,
        "export",
        {},
        {"method": "export"},
        {"method": 1, "leaf_modules": []},
        {"method": "x", "leaf_modules": "a"},
        {"method": "x", "leaf_modules": [1]},
        {"method": "x", "leaf_modules": [], "detail": None},
        {"method": "x", "leaf_modules": [], "graphs": 0},
    )
    for bad in bad_records:
        assert capture_from_request(bad) is None


# A pair's processes: scripts that serve the tests as pytest would ----------------------------------------

SERVE = """
import json, os, sys, time
request = json.load(open(sys.argv[1]))
side = os.path.basename(os.path.dirname(sys.argv[1]))
pair = os.path.dirname(os.path.dirname(sys.argv[1]))
seconds = {}
for test in request["tests"]:
    test_id = test["test_id"]
    open(request["progress"], "w").write(test_id)
    what = test_id.split("-")
    if what[-1] == side or what[-1] == "both":
        if what[0] == "crash":
            sys.exit(3)
        if what[0] == "hang":
            time.sleep(60)
        if what[0] == "slow":  # in this test until the twin ends well, however busy the machine: a crash ends it first
            for _ in range(600):
                if os.path.exists(os.path.join(pair, "new.exited")):
                    break
                time.sleep(0.1)
        if what[0] == "fail":
            json.dump({"failed": "assert 1 == 2"}, open(test["out"], "w"))
            seconds[test_id] = 0.1
            continue
    json.dump({"calls": {"call0": {}}, "spent": {"capture_s": 0.25, "measuring_s": 0.5}}, open(test["out"], "w"))
    seconds[test_id] = 1.0
json.dump({"tests": seconds, "session_s": 2.0}, open(request["timing"], "w"))
"""


class ScriptRelaunch(Relaunch):
    """Starts ``python -c SCRIPT REQUEST`` in place of pytest."""

    def __init__(self, script: str, where: Path) -> None:
        super().__init__(invocation_dir=where, rootdir=where, inifile=None)
        object.__setattr__(self, "script", script)

    def command(self, test_ids: Any, request: Path) -> list[str]:
        return [sys.executable, "-c", self.script, str(request)]  # type: ignore[attr-defined]


@pytest.fixture(params=["fresh", "forked"])
def starter(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Start]:
    """How the sides' processes start: fresh interpreters, or forked from one parent (``measure.forking``),
    which must serve them alike."""
    if request.param == "fresh":
        yield start
        return
    if not can_fork():
        pytest.skip("side processes are forked on Linux only")
    (tmp_path / "fork").mkdir()
    forker = Forker([tmp_path], tmp_path / "fork")
    try:
        yield forker.start
        assert forker.forked > 0, forker.problem
    finally:
        forker.close()
    assert forker.parent is None


def sides(tmp_path: Path, script: str = SERVE, starter: Start = start) -> tuple[rounds.Side, rounds.Side]:
    relaunch = ScriptRelaunch(script, tmp_path)
    return (
        rounds.Side("old", "HEAD", relaunch, starter=starter),
        rounds.Side("new", "the working tree", relaunch, starter=starter),
    )


def paired_tests(*ids: str) -> list[rounds.PairedTest]:
    return [rounds.PairedTest(t, {"settings": {}}, 4, 18, 1000) for t in ids]


@pytest.mark.parametrize("duet", [True, False])
def test_one_pair_of_processes_serves_every_test(tmp_path: Path, duet: bool, starter: Start) -> None:
    old, new = sides(tmp_path, starter=starter)
    spent = Spent()
    result = rounds.run_pair(old, new, paired_tests("a", "b", "c"), number=1, duet=duet, cores=[], spent=spent)
    assert sorted(result.measured) == ["a", "b", "c"]
    assert result.failed == {}
    assert result.seconds == {"a": 1.0, "b": 1.0, "c": 1.0}
    assert spent.processes == 2  # one per side, for the three tests
    assert spent.capture_s == pytest.approx(6 * 0.25)
    assert spent.measuring_s == pytest.approx(6 * 0.5)
    assert spent.tests_s == pytest.approx(6 * 0.25)


@pytest.mark.parametrize("duet", [True, False])
def test_a_test_that_crashes_a_side_fails_alone_and_the_next_run_again(
    tmp_path: Path, duet: bool, starter: Start
) -> None:
    old, new = sides(tmp_path, starter=starter)
    spent = Spent()
    tests = paired_tests("a", "crash-old", "c")
    result = rounds.run_pair(old, new, tests, number=1, duet=duet, cores=[], spent=spent)
    assert sorted(result.measured) == ["a", "c"]
    err = result.failed["crash-old"]
    assert err.side.name == "old"
    assert err.child.problem == "ended (exit status 3) while running the test"
    assert spent.processes == 4  # the test after the crash was measured by a fresh pair


def test_the_test_a_twin_was_running_when_the_other_crashed_is_measured_again_not_failed(
    tmp_path: Path, starter: Start
) -> None:
    """The new side crashes in its second test while the old side still runs its first: the old side is stopped,
    and its first test, which did nothing wrong, is measured again in a fresh pair."""
    old, new = sides(tmp_path, starter=starter)
    spent = Spent()
    tests = paired_tests("slow-old", "crash-new")
    result = rounds.run_pair(old, new, tests, number=1, duet=True, cores=[], spent=spent)
    assert sorted(result.measured) == ["slow-old"]
    assert sorted(result.failed) == ["crash-new"]
    assert result.failed["crash-new"].side.name == "new"
    assert spent.processes == 4


def test_a_test_that_hangs_is_stopped_at_the_deadline_and_fails_alone(tmp_path: Path, starter: Start) -> None:
    old, new = sides(tmp_path, starter=starter)
    result = rounds.run_pair(old, new, paired_tests("hang-new", "b"), number=1, duet=True, cores=[], deadline_s=1.0)
    assert sorted(result.measured) == ["b"]
    err = result.failed["hang-new"]
    assert err.side.name == "new"
    assert "ran hang-new past 1 s, so it was stopped" in err.child.problem


def test_a_pair_still_running_when_its_time_runs_out_is_stopped_and_its_tests_are_cut(
    tmp_path: Path, starter: Start
) -> None:
    """The run's budget ends a pair in flight: its processes are stopped, the test they ran (here one that hangs,
    so that the cut comes whatever the machine's speed) is not charged with a failure, and it and the tests after
    it are cut, not measured again in a fresh pair."""
    old, new = sides(tmp_path, starter=starter)
    until = time.monotonic() + 2.0
    result = rounds.run_pair(old, new, paired_tests("hang-new", "c"), number=2, duet=True, cores=[], until=until)
    assert result.measured == {}
    assert result.failed == {}
    assert result.cut == ["hang-new", "c"]


def test_the_run_budget_cuts_a_later_pair_that_runs_past_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pair's cost is estimated from the last one; one that runs longer is stopped at the run's budget, and the
    tests it cut say that the budget ended their pairs."""
    clock = FakeClock()
    given: list[float | None] = []

    def run_pair(old: rounds.Side, new: rounds.Side, tests: list[rounds.PairedTest], **kw: Any) -> rounds.PairResult:
        given.append(kw.get("until"))
        result = rounds.PairResult()
        if kw["until"] is not None:  # this pair would take 100 s: cut at its limit
            clock.now += kw["until"] - time.monotonic()
            result.cut = [t.test_id for t in tests]
            return result
        clock.now += 1.0
        for t in tests:
            child = Child((), 0, {"calls": {}}, "")
            result.measured[t.test_id] = (child, child)
            result.seconds[t.test_id] = 0.5
        return result

    monkeypatch.setattr(rounds, "run_pair", run_pair)
    got = rounds.measure_pairs(OLD, NEW, [asked("a"), asked("b")], clock=clock, run_budget_s=50)
    assert given[0] is None  # the first pair runs whatever the budget
    assert given[1] is not None
    assert 47 < clock.now <= 50.5
    assert [len(got[t].old) for t in "ab"] == [1, 1]
    assert str(got["a"].stopped) == str(got["b"].stopped) == "the run's time budget of 50 s"


def test_a_test_that_fails_on_a_side_says_why_and_the_others_go_on(tmp_path: Path, starter: Start) -> None:
    old, new = sides(tmp_path, starter=starter)
    result = rounds.run_pair(old, new, paired_tests("fail-both", "b"), number=1, duet=True, cores=[])
    assert sorted(result.measured) == ["b"]
    err = result.failed["fail-both"]
    assert err.child.problem == "the test failed there"
    assert err.child.output == "assert 1 == 2"


def test_a_side_that_cannot_start_fails_every_test_with_its_output(tmp_path: Path, starter: Start) -> None:
    old, new = sides(tmp_path, "import sys; print('ERROR: no such conftest'); sys.exit(4)", starter)
    result = rounds.run_pair(old, new, paired_tests("a", "b"), number=1, duet=False)
    assert result.measured == {}
    assert sorted(result.failed) == ["a", "b"]
    child = result.failed["a"].child
    assert child.problem == "ended (exit status 4) before running any test"
    assert "no such conftest" in child.output


def test_the_pairs_of_a_suite_fail_only_the_test_that_crashed(tmp_path: Path, starter: Start) -> None:
    old, new = sides(tmp_path, starter=starter)
    tests = [rounds.PairedTest(t, {"settings": {}}, 2, 2, 1000) for t in ("a", "crash-new", "c")]
    got = rounds.measure_pairs(old, new, tests, duet=True)
    assert got["crash-new"].failed is not None
    assert [len(got[t].old) for t in ("a", "c")] == [2, 2]


def test_each_process_is_asked_its_tests_in_order_with_the_new_sides_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a side's process is asked: its tests in the pair's order, each with its settings and the new side's
    calls, the first pair counting flops and the later not (every pair times the plain call), the duet's lock-step with
    those calls' tags, and where to say which test runs and how long each took."""
    asked: list[dict[str, Any]] = []

    def launch(self: serving.Served) -> None:
        asked.append(json.loads(json.dumps(self.request)))  # plain JSON, as the request file carries it
        raise KeyboardInterrupt  # start nothing

    monkeypatch.setattr(serving.Served, "launch", launch)
    old, new = sides(tmp_path)
    tests = paired_tests("a", "b")
    tests[0].request["calls"] = ["call0"]
    for number in (1, 2):
        with pytest.raises(KeyboardInterrupt):
            rounds.run_pair(old, new, tests, number=number, duet=True, cores=[])
    first, later = asked
    assert [t["test_id"] for t in first["tests"]] == ["a", "b"]
    assert first["tests"][0]["calls"] == ["call0"]
    assert (first["flops"], later["flops"]) == (True, False)
    assert "plain" not in first  # the total rests on every pair's plain call
    assert "plain" not in later
    assert first["lockstep"]["new_calls"] == [call_tag("call0", "a")]
    assert first["entry"] is True
    assert {"progress", "timing"} <= set(first)
    assert all("captured" not in t for t in first["tests"])  # none learnt yet


def test_each_side_is_asked_its_own_captures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: dict[str, dict[str, Any]] = {}

    def launch(self: serving.Served) -> None:
        asked[self.name] = json.loads(json.dumps(self.request))
        raise KeyboardInterrupt

    monkeypatch.setattr(serving.Served, "launch", launch)
    old, new = sides(tmp_path)
    tests = paired_tests("a")
    tests[0].captured = {"old": {"call0": {"method": "export"}}, "new": {"call0": {"method": "dynamo"}}}
    for number in (1, 2):  # one after the other: old first in pair 1, new first in pair 2
        with pytest.raises(KeyboardInterrupt):
            rounds.run_pair(old, new, tests, number=number, duet=False, cores=[])
    assert asked["old"]["tests"][0]["captured"] == {"call0": {"method": "export"}}
    assert asked["new"]["tests"][0]["captured"] == {"call0": {"method": "dynamo"}}


def test_a_round_removes_the_directories_of_its_kind_that_a_killed_run_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a recording stopped by a signal leaves its fresh processes' directory behind; the next round of that kind
    # removes it, and leaves alone a live run's, another kind's and a link
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"fxprof-{dead.pid}-fresh-abc"
    live = tmp_path / f"fxprof-{os.getpid()}-fresh-def"
    other = tmp_path / f"fxprof-{dead.pid}-duet-ghi"
    for p in (stale, live, other):
        p.mkdir()
        (p / "request.json").write_text("{}")
    link = tmp_path / f"fxprof-{dead.pid}-fresh-link"
    link.symlink_to(live)
    with serving.serving_dir("fxprof-", "fresh") as made:
        assert Path(made).parent == tmp_path
        assert not stale.exists()
        assert live.exists()
        assert other.exists()
        assert link.is_symlink()
    assert not Path(made).exists()


def test_a_test_that_failed_a_side_in_a_later_pair_is_told_that_pair_had_its_own_order() -> None:
    from pytest_fxprof.against.compare import _failure

    child = Child(("python", "-m", "pytest"), 1, None, "E   KeyError: 'warm'\n")
    first = str(_failure(rounds.SideFailedError(NEW, child, 1), "HEAD~1 (abc1234)", "t.py::test_b"))
    later = str(_failure(rounds.SideFailedError(NEW, child, 3), "HEAD~1 (abc1234)", "t.py::test_b"))
    assert "could not measure t.py::test_b (process 1: exited with status 1)" in first
    assert "order" not in first
    assert (
        "(process 3: exited with status 1; pair 3 served its tests in an order of its own, so a test that passes "
        "only after another ran in the same process can fail here)" in later
    )
    assert "KeyError: 'warm'" in later


class _Running:
    """A process of a round as ``serving._watch`` sees it: running one test since a moment."""

    def __init__(self, test: str, since: float) -> None:
        self.proc = SimpleNamespace(returncode=None)  # still running
        self.test, self.since = test, since

    def current(self) -> tuple[str, float]:
        return self.test, self.since


def test_a_test_that_runs_long_is_named_every_while(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("pytest_fxprof.measure.serving.time.monotonic", lambda: now[0])
    told: list[tuple[str, float]] = []
    seen: dict[str, float] = {}
    running = [_Running("fast", 995.0), _Running("slow", 960.0)]
    serving._watch(running, seen, lambda test, s: told.append((test, s)))  # type: ignore[arg-type]
    assert told == [("slow", 40.0)]  # the longest running, once it ran WATCH_S
    now[0] += 10
    serving._watch(running, seen, lambda test, s: told.append((test, s)))  # type: ignore[arg-type]
    assert told == [("slow", 40.0)]  # not again before another WATCH_S
    now[0] += serving.WATCH_S
    serving._watch(running, seen, lambda test, s: told.append((test, s)))  # type: ignore[arg-type]
    assert told == [("slow", 40.0), ("slow", 40.0 + 10 + serving.WATCH_S)]
