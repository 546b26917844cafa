"""A check of code changed since its baseline was recorded, measured against the revision it was recorded at too.

The git lookups run on temporary repositories; the runs through pytest's command line read the fake clock of
``tests/test_plugin.py``, so that what the baseline and the pairs measure is what the model's code says.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_fxprof.against.recorded import REF, RecordedSides, baseline_revision, working_revision
from pytest_fxprof.judge.decision import refuse_lone
from pytest_fxprof.judge.paired import MIN_DECIDING_PAIRS
from pytest_fxprof.modes.check import CheckCalls, RevisionCheck, code_changed, stricter
from pytest_fxprof.records.measurement import NodeInfo
from pytest_fxprof.records.verdicts import Comparison, Status
from pytest_fxprof.session.reactions import Reactions
from pytest_fxprof.session.run import RunState
from pytest_fxprof.settings import Mode, Settings
from pytest_fxprof.store.baseline import BaselineStore
from tests.test_against import PAIRS, base, commit, model
from tests.test_against_parts import git as run
from tests.test_report import checked, result

__all__ = ["base"]  # the fixture, imported to be used here


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A repository whose one commit holds ``model.py`` and an empty ``baselines/``."""
    root = tmp_path / "project"
    (root / "baselines").mkdir(parents=True)
    (root / "model.py").write_text("x = 1\n")
    (root / "baselines" / "t.json").write_text("{}\n")
    run(root, "init", "-q")
    run(root, "add", ".")
    run(root, "commit", "-qm", "first")
    return root


def test_a_recording_names_the_commit_of_a_clean_working_tree_its_baselines_and_untracked_files_aside(
    project: Path,
) -> None:
    head = run(project, "rev-parse", "HEAD")
    (project / "baselines" / "t.json").write_text('{"new": 1}\n')  # being recorded: not the code
    (project / "notes.txt").write_text("untracked\n")
    assert working_revision(project, project / "baselines") == (head, "")
    (project / "model.py").write_text("x = 2\n")
    sha, why = working_revision(project, project / "baselines")
    assert sha == ""
    assert why == "the working tree has uncommitted changes (model.py)"


def test_outside_a_repository_a_recording_names_no_commit(tmp_path: Path) -> None:
    assert working_revision(tmp_path, tmp_path / "baselines") == ("", f"{tmp_path} is not in a git repository")


def test_a_baselines_revision_is_the_one_it_names_else_the_commit_that_wrote_its_file(project: Path) -> None:
    first = run(project, "rev-parse", "HEAD")
    path = project / "baselines" / "t.json"
    assert baseline_revision(first, path) == (first, "")
    (project / "model.py").write_text("x = 2\n")
    run(project, "commit", "-qam", "code")
    # named: the commit it names, whatever came after
    assert baseline_revision(first, path) == (first, "")
    # not named (recorded from a working tree with uncommitted changes): the commit that wrote the file
    assert baseline_revision("", path) == (first, "")
    path.write_text('{"again": 1}\n')
    sha, why = baseline_revision("", path)
    assert sha == ""
    assert why.startswith("its baseline names no revision (recorded from a working tree with uncommitted changes)")
    assert "commit the baselines with the code they measured" in why
    unknown = "0" * 40
    sha, why = baseline_revision(unknown, path)
    assert sha == ""
    assert why == "this clone lacks 0000000, the commit its baseline was recorded at; fetch it (`git fetch origin`)"


def test_a_shallow_clone_says_which_commit_it_lacks_and_how_to_fetch_it(project: Path, tmp_path: Path) -> None:
    first = run(project, "rev-parse", "HEAD")
    (project / "model.py").write_text("x = 2\n")
    run(project, "commit", "-qam", "code")
    clone = tmp_path / "clone"
    run(tmp_path, "clone", "-q", "--depth", "1", f"file://{project}", str(clone))
    path = clone / "baselines" / "t.json"
    sha, why = baseline_revision(first, path)
    assert sha == ""
    assert f"this clone lacks {first[:7]}" in why
    assert f"git fetch --depth=1 origin {first}" in why
    # the commit that wrote the file lies beyond the cut: the cut shows every file as written there
    sha, why = baseline_revision("", path)
    assert sha == ""
    assert "too shallow" in why
    assert "fetch-depth: 0" in why


def test_each_revision_is_checked_out_once_and_removed_when_the_run_ends(project: Path) -> None:
    first = run(project, "rev-parse", "HEAD")
    sides = RecordedSides(project)
    side, why = sides.side(first)
    assert side is not None
    assert why == ""
    assert side.label == f"{REF} ({first[:7]})"
    assert side.revision is not None
    tree = side.revision.tree
    assert (tree / "model.py").read_text() == "x = 1\n"
    assert sides.side(first)[0] is side  # once
    none, why = sides.side("f" * 40)
    assert none is None
    assert "git knows no revision" in why
    sides.close()
    assert not tree.exists()


def _node(name: str, target: str) -> NodeInfo:
    return NodeInfo(f"call_function:blk:{target}#0", name, "call_function", target, "blk")


def _comparison(status: Status, added: tuple[NodeInfo, ...] = (), removed: tuple[NodeInfo, ...] = ()) -> Comparison:
    return Comparison(status, (), 1.0, 3, (), None, added, removed)


def test_code_changed_means_other_operations_never_the_same_ones_renamed_or_moved() -> None:
    gelu, mul, tanh = _node("gelu", "gelu"), _node("mul", "mul"), _node("tanh", "tanh")
    assert code_changed(_comparison(Status.PASS, (mul, tanh), (gelu,)))
    assert code_changed(_comparison(Status.PASS, (mul,)))  # an operation added, nothing removed
    assert not code_changed(_comparison(Status.PASS, (_node("gelu_1", "gelu"),), (gelu,)))  # renamed
    assert not code_changed(_comparison(Status.PASS))
    assert not code_changed(_comparison(Status.MISMATCH, (mul,), (gelu,)))  # another setup: nothing compared
    assert not code_changed(None)


def _captured_otherwise(*more: str) -> Comparison:
    """The comparison of a call captured another way than its baseline (``judge.decision.mismatches_of``)."""
    return Comparison(
        Status.MISMATCH, ("capture: baseline 'export', this run 'dynamo'", *more), 1.0, 3, (), None, (), ()
    )


def test_a_call_captured_another_way_than_its_baseline_is_code_that_changed_unless_its_setup_did_too() -> None:
    assert code_changed(_captured_otherwise())
    assert not code_changed(_captured_otherwise("torch: baseline 2.5.0, this run 2.6.0"))  # another machine


@pytest.mark.parametrize("paired", [Status.REGRESSION, Status.PASS, Status.UNDECIDED])
def test_a_call_the_baseline_could_not_judge_for_its_capture_shows_what_its_pairs_found(paired: Status) -> None:
    mine = result(comparison=_captured_otherwise())
    got, is_paired = stricter(mine, RevisionCheck("a" * 40, _comparison(paired), result(seconds=2.0), 4))
    assert is_paired
    assert got.comparison is not None
    assert got.comparison.status is paired
    # the pairs measured nothing: the mismatch stands
    got, is_paired = stricter(mine, RevisionCheck("a" * 40, _comparison(Status.MISMATCH), result(seconds=2.0), 4))
    assert not is_paired
    assert got.comparison is not None
    assert got.comparison.status is Status.MISMATCH


@pytest.mark.parametrize(
    ("stored", "paired", "shown"),
    [
        (Status.PASS, Status.REGRESSION, "paired"),  # the pairs see what the baseline's bands hide
        (Status.REGRESSION, Status.REGRESSION, "paired"),  # both: the pairs measured the change itself
        (Status.REGRESSION, Status.PASS, "stored"),  # a slowdown the code did not cause (a dependency): kept
        (Status.PASS, Status.UNDECIDED, "paired"),  # nothing green that was not judged
        (Status.UNDECIDED, Status.PASS, "stored"),
        (Status.PASS, Status.PASS, "paired"),  # as strict: the pairs' figures are the change's, not the drift's
        (Status.UNDECIDED, Status.UNDECIDED, "paired"),
        (Status.PASS, Status.MISMATCH, "stored"),
    ],
)
def test_a_call_judged_twice_shows_thestricter_verdict(stored: Status, paired: Status, shown: str) -> None:
    mine = result(comparison=_comparison(stored))
    theirs = result(comparison=None, seconds=2.0)
    got, is_paired = stricter(mine, RevisionCheck("a" * 40, _comparison(paired), theirs, MIN_DECIDING_PAIRS))
    assert is_paired == (shown == "paired")
    assert got.comparison is not None
    assert got.comparison.status is (paired if shown == "paired" else stored)
    # the pairs' profile where theirs is shown, its time the two measurements'
    assert got.seconds == (mine.seconds + 2.0 if is_paired else mine.seconds)


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--fxprof-pairs", PAIRS, *args]
    return subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)


def test_code_changed_since_the_recording_is_measured_against_its_revision_and_a_slowdown_there_fails(
    pytester: pytest.Pytester, base: str
) -> None:
    recorded = _pytest(pytester.path, "--fxprof-update", "--fxprof-processes", "2")
    assert recorded.returncode == 0, recorded.stdout
    (path,) = (pytester.path / "baselines").glob("*.json")
    assert json.loads(path.read_text())["entries"]["call0"]["revision"] == base
    commit(pytester, {}, "baselines")

    # a comment changes no operation: the baseline alone judges it, and no pair is measured
    commit(pytester, {"model.py": "# a comment\n" + model()}, "a comment")
    check = _pytest(pytester.path, "--fxprof", "--fxprof-report", "r.json")
    assert check.returncode == 0, check.stdout
    (profile,) = json.loads((pytester.path / "r.json").read_text())["profiles"]
    assert "code_changed" not in profile
    assert "pairs" not in profile

    # a node added and the slow module 5 % slower: within a baseline's +15 %, beyond the +1 % band of changed code
    commit(pytester, {"model.py": model("2_100_000", extra=True)}, "a change")
    check = _pytest(pytester.path, "--fxprof", "--fxprof-report", "r.json")
    out = check.stdout
    assert check.returncode == 1, out
    assert f"got slower than {REF} ({base[:7]}) ({PAIRS} pairs of old and new processes)" in out
    assert "its code changed: 1 node(s) added" in out
    assert "if this change is intended, refresh the baseline with: pytest --fxprof-update" in out
    (profile,) = json.loads((pytester.path / "r.json").read_text())["profiles"]
    assert profile["status"] == "regression"
    assert profile["code_changed"] == {
        "revision": base,
        "against": f"{REF} ({base[:7]})",
        "status": "regression",
        "pairs": MIN_DECIDING_PAIRS,
        "why": "",
    }

    # the baseline alone passes it
    alone = _pytest(pytester.path, "--fxprof", "--fxprof-on-code-change", "baseline", "--fxprof-report", "a.json")
    assert alone.returncode == 0, alone.stdout
    (profile,) = json.loads((pytester.path / "a.json").read_text())["profiles"]
    assert profile["status"] == "pass"
    assert "code_changed" not in profile

    # a revision this clone does not have: the baseline's verdict stands, and a warning says why and what to fetch
    data = json.loads(path.read_text())
    data["entries"]["call0"]["revision"] = "e" * 40
    edited = json.dumps(data)
    path.write_text(edited)
    check = _pytest(pytester.path, "--fxprof", "--fxprof-report", "r.json", "-W", "default")
    assert check.returncode == 0, check.stdout
    assert "its code changed since its baseline was recorded, but it was judged by the baseline alone" in check.stdout
    assert "this clone lacks eeeeeee, the commit its baseline was recorded at" in check.stdout
    (profile,) = json.loads((pytester.path / "r.json").read_text())["profiles"]
    assert profile["code_changed"]["status"] == ""
    assert profile["code_changed"]["why"].startswith("this clone lacks eeeeeee")
    assert path.read_text() == edited  # the check writes no baseline


def _calls(tmp_path: Path, stored: Comparison, paired: Comparison) -> tuple[CheckCalls, RunState]:
    """A test's calls checked against a baseline that judged ``stored``, whose pairs against the baseline's
    revision judged ``paired`` (stood in for: no process is started)."""
    store = BaselineStore(tmp_path)
    calls = CheckCalls("t.py::test", Settings(), store=store, reactions=Reactions())
    calls.results["call0"] = result(comparison=stored)

    def measured(keys: list[str], outcome: object) -> None:
        calls.revision_checks = {k: RevisionCheck("a" * 40, paired, result(seconds=2.0), 4) for k in keys}

    calls._against_revision = measured  # type: ignore[method-assign]
    return calls, RunState(Mode.CHECK, store, Reactions())


def test_a_slowdown_the_baseline_finds_and_the_pairs_do_not_fails_and_says_the_code_did_not_cause_it(
    tmp_path: Path,
) -> None:
    _, slower = checked({"relu": 3.0}, {"relu": 3.0})
    assert slower.status is Status.REGRESSION
    changed = replace(slower, added=(_node("mul", "mul"),), baseline_processes=5)  # a baseline that can decide
    _, same = checked({})
    passed = replace(same, against=f"{REF} (aaaaaaa)", pairs=4)
    calls, run = _calls(tmp_path, changed, passed)
    outcome = calls.finish(run, passed=True)
    (failure,) = outcome.failures
    assert failure.startswith("fxprof: t.py::test [call0] got slower than its baseline")
    assert f"measured against {REF} (aaaaaaa) in 4 pairs of fresh processes as well: pass" in failure
    assert "what slowed is not the code that changed (a dependency, the machine, or drift since the recording)" in (
        failure
    )
    assert "if this change is intended, refresh the baseline with" in failure
    (record,) = run.records
    assert record["status"] == "regression"
    assert record["report"]["code_changed"]["status"] == "pass"


def test_a_slowdown_the_pairs_find_leads_the_failure_with_their_verdict_and_the_baselines_advice(
    tmp_path: Path,
) -> None:
    _, same = checked({})
    changed = replace(same, added=(_node("mul", "mul"),))
    _, slower = checked({"relu": 3.0}, {"relu": 3.0})
    against = replace(slower, against=f"{REF} (aaaaaaa)", pairs=4)
    calls, run = _calls(tmp_path, changed, against)
    (failure,) = calls.finish(run, passed=True).failures
    assert failure.startswith(f"fxprof: t.py::test [call0] got slower than {REF} (aaaaaaa) (4 pairs")
    assert failure.endswith(
        "if this change is intended, refresh the baseline with: pytest --fxprof-update 't.py::test'"
    )
    (record,) = run.records
    assert record["report"]["against"] == f"{REF} (aaaaaaa)"


def test_a_call_captured_another_way_than_its_baseline_is_judged_by_its_pairs_against_the_baselines_revision(
    tmp_path: Path,
) -> None:
    """A data-dependent branch that export cannot capture moves the call from export to dynamo: its nodes cannot be
    matched with the baseline's, and a mismatch would skip the test green; its pairs against the revision the
    baseline was recorded at decide it instead."""
    _, slower = checked({"relu": 3.0}, {"relu": 3.0})
    against = replace(slower, against=f"{REF} (aaaaaaa)", pairs=4)
    calls, run = _calls(tmp_path, _captured_otherwise(), against)
    outcome = calls.finish(run, passed=True)
    (failure,) = outcome.failures
    assert failure.startswith(f"fxprof: t.py::test [call0] got slower than {REF} (aaaaaaa) (4 pairs")
    assert not outcome.skips
    (record,) = run.records
    assert record["status"] == "regression"
    assert record["report"]["code_changed"]["status"] == "regression"
    notices = " ".join(calls.notices["call0"])
    assert "it was captured another way than its baseline (capture: baseline 'export', this run 'dynamo')" in notices

    _, same = checked({})
    passed = replace(same, against=f"{REF} (aaaaaaa)", pairs=4)
    calls, run = _calls(tmp_path, _captured_otherwise(), passed)
    outcome = calls.finish(run, passed=True)
    assert not outcome.failures
    assert not outcome.skips  # judged, not skipped
    (record,) = run.records
    assert record["status"] == "pass"


def test_baselines_outside_the_repository_find_their_commit_in_the_tests_repository(
    pytester: pytest.Pytester, base: str
) -> None:
    # the baselines kept in a directory no git repository holds: each entry names the commit it was recorded at,
    # which the tests' repository knows
    outside = pytester.path.parent / f"{pytester.path.name}-baselines"
    where = f"--fxprof-baseline-dir={outside}"  # one argument: pytest takes a lone path for a rootdir hint
    recorded = _pytest(pytester.path, "--fxprof-update", "--fxprof-processes", "2", where)
    assert recorded.returncode == 0, recorded.stdout
    (path,) = outside.glob("*.json")
    assert json.loads(path.read_text())["entries"]["call0"]["revision"] == base
    commit(pytester, {"model.py": model("2_100_000", extra=True)}, "a change")
    check = _pytest(pytester.path, "--fxprof", where, "-W", "default")
    out = check.stdout
    assert check.returncode == 1, out
    assert "is not in a git repository" not in out
    assert f"got slower than {REF} ({base[:7]}) ({PAIRS} pairs of old and new processes)" in out, out


def test_a_baselines_commit_is_looked_up_in_the_tests_repository_wherever_the_file_lives(
    project: Path, tmp_path: Path
) -> None:
    first = run(project, "rev-parse", "HEAD")
    outside = tmp_path / "elsewhere" / "t.json"
    outside.parent.mkdir()
    outside.write_text("{}\n")
    assert baseline_revision(first, outside, project) == (first, "")
    assert baseline_revision(first, outside) == ("", f"{outside.parent} is not in a git repository")
    sha, why = baseline_revision("", outside, project)
    assert sha == ""
    assert "lies outside the tests' repository" in why
    assert "record it again from a clean working tree" in why
    # inside the repository, as before
    assert baseline_revision(first, project / "baselines" / "t.json", project) == (first, "")


def test_a_baseline_of_one_process_leaves_the_verdict_of_changed_code_to_the_pairs(tmp_path: Path) -> None:
    """Against a baseline of one process nothing is decided (``decision.refuse_lone``); where the code changed, the
    pairs against the baseline's revision decide, a pass as well as a slowdown."""
    _, same = checked({})
    stored = refuse_lone(replace(same, added=(_node("mul", "mul"),)))
    assert (stored.lone, stored.refused, stored.status) == (True, True, Status.UNDECIDED)
    _, slower = checked({"relu": 3.0}, {"relu": 3.0})
    calls, run = _calls(tmp_path, stored, replace(slower, against=f"{REF} (aaaaaaa)", pairs=4))
    (failure,) = calls.finish(run, passed=True).failures
    assert failure.startswith(f"fxprof: t.py::test [call0] got slower than {REF} (aaaaaaa) (4 pairs")
    calls, run = _calls(tmp_path, stored, replace(same, against=f"{REF} (aaaaaaa)", pairs=4))
    assert calls.finish(run, passed=True).failures == []
    (record,) = run.records
    assert record["status"] == "pass"
