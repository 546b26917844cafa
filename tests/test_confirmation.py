"""A verdict against a revision confirmed by a second, independent set of pairs (``against.compare``): how two sets'
verdicts settle a call, which tests fit a second set in their budget and the run's, and what a second set is
asked. Fake pairs and comparisons; the whole command is in ``tests/test_against.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_fxprof.against import campaign, compare, rounds
from pytest_fxprof.against.answers import PairedEntries
from pytest_fxprof.against.campaign import AskedTest
from pytest_fxprof.against.compare import CallOutcome, settled
from pytest_fxprof.against.revision import Revision
from pytest_fxprof.judge.paired import PairedPolicy
from pytest_fxprof.measure.sampling import Child, Relaunch
from pytest_fxprof.records.verdicts import Comparison, Status
from tests.test_blame import against
from tests.test_moved import blocks

PASS, SLOWER, UNDECIDED = Status.PASS, Status.REGRESSION, Status.UNDECIDED


def outcome(status: Status, pairs: int = 4, stopped: rounds.StopReason | None = None) -> CallOutcome:
    c = Comparison(status, (), 1.0, pairs, (), None, (), (), against="HEAD~1 (abc1234)", pairs=pairs)
    return CallOutcome(c, None, stopped, pairs=pairs)


@pytest.mark.parametrize(
    ("first", "second", "ends", "says"),
    [
        (SLOWER, SLOWER, SLOWER, "confirmed by a second, independent set of 5 pairs"),
        (SLOWER, PASS, PASS, "a first set of 4 pairs found it slower; a second, independent set of 5 pairs"),
        (SLOWER, UNDECIDED, UNDECIDED, "found it undecided; neither set alone fails it"),
        (UNDECIDED, PASS, PASS, "a first set of 4 pairs found it undecided"),
        (UNDECIDED, SLOWER, UNDECIDED, "found it slower; neither set alone fails it"),
        (UNDECIDED, UNDECIDED, UNDECIDED, "could not decide it either"),
    ],
)
def test_a_call_fails_only_where_both_sets_find_it_slower(
    first: Status, second: Status, ends: Status, says: str
) -> None:
    got = settled(outcome(first, 4), outcome(second, 5))
    assert got.comparison is not None
    assert got.comparison.status is ends
    assert says in got.confirmation
    assert got.sets == ((first.value, 4), (second.value, 5))
    # the comparison shown is one set's, with its own pairs: the lines that count left-out pairs name that set's
    assert got.pairs == got.comparison.pairs


def test_a_pass_or_a_missing_second_verdict_leaves_the_first_as_it_was() -> None:
    passed = outcome(PASS)
    assert settled(passed, outcome(SLOWER)) is passed  # a second set never fails what the first passed
    slower = outcome(SLOWER)
    assert settled(slower, None) is slower
    assert settled(slower, CallOutcome(None, None)) is slower  # the revision lacks the call there


def test_a_second_set_that_a_budget_cut_short_leaves_the_first_verdict_standing() -> None:
    got = settled(outcome(SLOWER), outcome(UNDECIDED, 1, stopped=rounds.StopReason("run budget", 60)))
    assert got.comparison is not None
    assert got.comparison.status is SLOWER
    assert "was cut short, undecided, by the run's time budget of 60 s" in got.confirmation


def asked(test_id: str, *, budget_s: float = 100.0, keys: tuple[str, ...] | None = None) -> AskedTest:
    return AskedTest(test_id, {}, PairedPolicy(), 3, 18, budget_s, keys)


def pairs(n: int, seconds: float, calls: tuple[str, ...] = ("call0",)) -> rounds.Pairs:
    child = Child((), 0, {"calls": {k: {} for k in calls}}, "")
    return rounds.Pairs([child] * n, [child] * n, seconds)


def test_a_second_set_fits_the_tests_budget_and_the_runs_at_the_first_sets_cost() -> None:
    tests = [asked("a"), asked("b", budget_s=50.0), asked("c"), asked("d")]
    # 4 pairs of 10 s: the second set's 3 pairs cost 30 s
    got = {t.test_id: pairs(4, 40.0) for t in tests}
    fit = campaign._fitting(tests, got, run_budget_s=200.0, spent_s=140.0)
    # b: 40 s spent of its 50; a takes 30 s of the run's 60 left, c the other 30, d none
    assert [t.test_id for t in fit] == ["a", "c"]
    assert str(got["b"].unconfirmed) == "the time budget of 50 s per test"
    assert str(got["d"].unconfirmed) == "the run's time budget of 200 s"
    assert got["d"].unconfirmed is not None
    assert got["d"].unconfirmed.by_run_budget
    assert got["a"].unconfirmed is None
    assert [t.budget_s for t in fit] == [60.0, 60.0]  # what the first set left of the test's budget
    assert [t.keys for t in fit] == [("call0",), ("call0",)]  # the calls the first set's new side made
    assert campaign._fitting(tests, got, run_budget_s=None, spent_s=1e9)[-1].test_id == "d"


def test_only_a_test_found_slower_or_undecided_is_measured_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the first set, the tests whose calls are slower or undecided take a second set, from a fresh export of
    the revision, and their pairs carry it; a test that passed, or that a side could not measure, does not."""
    verdicts = {"slow": SLOWER, "noisy": UNDECIDED, "fine": PASS, "broken": SLOWER}
    sets: list[tuple[Any, list[str]]] = []

    def one_set(against: compare.Against, new: Relaunch, tests: list[AskedTest], **kw: Any) -> dict[str, Any]:
        sets.append((against.revision, [t.test_id for t in tests]))
        out = {t.test_id: pairs(3, 3.0) for t in tests}
        if "broken" in out:
            out["broken"].failed = rounds.SideFailedError(rounds.Side("new", "", new), Child((), 1, None, ""), 2)
        return out

    def judged(got: rounds.Pairs, keys: Any, policy: Any, label: str) -> dict[str, Comparison]:
        test_id = next(t for t, g in firsts.items() if g is got)
        return {"call0": outcome(verdicts[test_id]).comparison}  # type: ignore[dict-item]

    firsts: dict[str, rounds.Pairs] = {}

    def first_set(*args: Any, **kw: Any) -> dict[str, Any]:
        out = one_set(*args, **kw)
        if not firsts:
            firsts.update(out)
        return out

    exported: list[str] = []

    def materialise(ref: str, cwd: Path) -> Any:
        exported.append(ref)
        return Revision("sha", "sha", cwd, cwd / "fresh")

    monkeypatch.setattr(campaign, "_measure_set", first_set)
    monkeypatch.setattr(campaign, "judged_calls", judged)
    monkeypatch.setattr(campaign, "materialise", materialise)
    monkeypatch.setattr(campaign, "remove", lambda revision: exported.append(f"removed {revision.tree.name}"))
    revision = Revision("HEAD~1", "sha", Path("/repo"), Path("/repo-old"))
    against = compare.Against(revision)
    tests = [asked(t) for t in verdicts]
    relaunch = Relaunch(Path(), Path(), None)
    got = campaign.measure_tests(against, relaunch, tests, duet=True, confirm=True)
    assert [names for _, names in sets] == [list(verdicts), ["slow", "noisy"]]
    assert sets[1][0].tree == Path("/repo/fresh")  # exported afresh ...
    assert sets[1][0].ref == "HEAD~1"  # ... under the ref the run names
    assert exported == ["sha", "removed fresh"]
    assert [t for t, g in got.items() if g.confirmed is not None] == ["slow", "noisy"]
    sets.clear()
    firsts.clear()
    campaign.measure_tests(against, relaunch, tests, duet=True, confirm=False)
    assert len(sets) == 1


def test_a_set_that_found_a_part_slower_names_it_beside_a_total_that_was_not() -> None:
    # every MLP's GELU twice as slow: the MLPs fail, the total within its band
    c = against(blocks(), blocks(heads=4, mul=1.6, gelu=2.0), noise=0.005)
    assert c.status is Status.REGRESSION
    assert c.total is not None
    said = compare._found(c)
    assert said.startswith("slower in h.")
    assert ".mlp x1.0" in said
    assert said.endswith(f"(total x{c.total.ratio:.3f}, within its band)"), said
    # a slower total says the total alone, as before
    slower = against(blocks(), blocks(gelu=3.0), noise=0.005)
    assert slower.total is not None
    assert compare._found(slower) == f"slower (total x{slower.total.ratio:.3f})"


def test_the_verdict_of_a_set_of_pairs_is_judged_once_whoever_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a pair the campaign asks whether a test needs more, then whether to confirm it, then the test asks for
    its outcome: each call of one set of pairs is judged once for all three, and again only after a pair more."""
    judged: list[str] = []

    def counted(old: Any, new: Any, policy: PairedPolicy, against: str) -> Comparison:
        judged.append(old)
        return outcome(SLOWER).comparison  # type: ignore[return-value]

    monkeypatch.setattr(compare, "paired_entries", lambda got, key: PairedEntries([key], [key]))
    monkeypatch.setattr(compare, "merged", lambda entries: entries[0])
    monkeypatch.setattr(compare, "compare_pairs", counted)
    got = pairs(4, 40.0, calls=("call0", "call1"))
    policy = PairedPolicy()
    first = compare.judged_calls(got, ["call0", "call1"], policy, "HEAD~1")
    assert campaign._doubtful(got, asked("t"), "HEAD~1")  # the campaign's question: slower, so confirm
    again = compare.judged_calls(got, ["call1", "call0"], policy, "HEAD~1")  # the test's, its calls in its order
    assert judged == ["call0", "call1"]
    assert list(again) == ["call1", "call0"]
    assert again == first
    got.old.append(got.old[0])
    got.new.append(got.new[0])
    compare.judged_calls(got, ["call0", "call1"], policy, "HEAD~1")
    assert judged == ["call0", "call1", "call0", "call1"]
