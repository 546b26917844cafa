"""Unit tests of the parts of the mode against a revision: the exported tree, the old side's import check and the
lock-step barrier (no torch, no pytest inner runs). The pairs' schedule is ``test_rounds.py``'s."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest

from pytest_fxprof.against import revision as rev
from pytest_fxprof.against.origin import foreign_modules
from pytest_fxprof.against.revision import Revision, RevisionError, materialise, remove, remove_stale, resolve
from pytest_fxprof.measure.lockstep import DONE, call_tag, exited_mark, lockstep_barrier, pair_cores


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository of two commits: ``a.py`` says 1, then 2."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "a.py").write_text("VALUE = 1\n")
    (root / "pkg").mkdir()
    (root / "pkg" / "b.txt").write_text("b\n")
    git(root, "add", ".")
    git(root, "commit", "-qm", "one")
    (root / "a.py").write_text("VALUE = 2\n")
    git(root, "commit", "-qam", "two")
    return root


# The exported tree ------------------------------------------------------------------------------------


def test_the_revision_is_exported_beside_the_checkout_and_removed(repo: Path) -> None:
    (repo / "a.py").write_text("VALUE = 3\n")  # uncommitted: the new side's, not the old one's
    (repo / "c.py").write_text("untracked\n")
    stash_before = git(repo, "stash", "list")
    status_before = git(repo, "status", "--porcelain")
    r = materialise("HEAD~1", repo)
    try:
        assert (r.tree / "a.py").read_text() == "VALUE = 1\n"
        assert (r.tree / "pkg" / "b.txt").read_text() == "b\n"
        assert not (r.tree / "c.py").exists()
        assert r.sha == git(repo, "rev-parse", "HEAD~1")
        assert r.label == f"HEAD~1 ({r.sha[:7]})"
        assert r.old_path(repo / "pkg") == r.tree / "pkg"
        assert not r.tree.is_relative_to(repo)
    finally:
        remove(r)
    assert not r.tree.exists()
    assert (repo / "a.py").read_text() == "VALUE = 3\n"
    assert git(repo, "status", "--porcelain") == status_before
    assert git(repo, "stash", "list") == stash_before
    assert git(repo, "worktree", "list").count("\n") == 0  # no worktree registered


def test_a_sha_is_labelled_once(repo: Path) -> None:
    sha = git(repo, "rev-parse", "HEAD")
    r = Revision(sha[:10], sha, repo, repo)
    assert r.label == sha[:7]


def test_not_a_repository_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(RevisionError, match=r"is not in a git repository.*run it in a clone"):
        resolve("main", tmp_path)


def test_an_unknown_revision_names_the_fix(repo: Path) -> None:
    with pytest.raises(RevisionError, match=r"git knows no revision 'nope'.*git fetch origin"):
        resolve("nope", repo)


def test_an_option_like_revision_is_refused(repo: Path) -> None:
    with pytest.raises(RevisionError, match="not a revision"):
        resolve("--output=/tmp/x", repo)


def test_a_shallow_clone_says_fetch_depth_0(repo: Path, tmp_path: Path) -> None:
    shallow = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)], check=True, capture_output=True
    )
    with pytest.raises(RevisionError, match=r"shallow.*git fetch --unshallow.*fetch-depth: 0"):
        resolve("HEAD~1", shallow)


def test_git_missing_names_the_fix(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(RevisionError, match="git was not found on PATH"):
        resolve("HEAD", repo)


def test_trees_and_index_files_of_killed_runs_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"{rev.PREFIX}{dead.pid}-abc"
    live = tmp_path / f"{rev.PREFIX}{os.getpid()}-def"
    other = tmp_path / "fxprof-against-notapid"
    for p in (stale, live, other):
        p.mkdir()
        (p / "f").write_text("x")
    index = tmp_path / f"{stale.name}.index"  # git read-tree's index file, left by a run killed meanwhile
    lock = tmp_path / f"{stale.name}.index.lock"
    index.write_text("x")
    lock.write_text("x")
    assert remove_stale(tmp_path) == [stale, index, lock]
    assert not stale.exists()
    assert not index.exists()
    assert not lock.exists()
    assert live.exists()
    assert other.exists()


# The old side's import check ---------------------------------------------------------------------------


def module(name: str, file: str | None) -> types.ModuleType:
    m = types.ModuleType(name)
    if file is not None:
        m.__file__ = file
    return m


def test_modules_from_the_working_tree_are_named(tmp_path: Path) -> None:
    new, old = tmp_path / "repo", tmp_path / "old"
    (new / "src" / "proj").mkdir(parents=True)
    (old / "src" / "proj").mkdir(parents=True)
    venv = new / ".venv" / "lib" / "site-packages"
    venv.mkdir(parents=True)
    modules = {
        "proj": module("proj", str(new / "src" / "proj" / "__init__.py")),
        "proj_old": module("proj_old", str(old / "src" / "proj" / "__init__.py")),
        "os": os,
        "builtin": module("builtin", None),
        "pytest_fxprof.plugin": module("pytest_fxprof.plugin", str(new / "pytest_fxprof" / "plugin.py")),
    }
    found = foreign_modules(new, old, modules)
    assert found == [f"proj ({new / 'src' / 'proj' / '__init__.py'})"]


def test_a_checkout_under_the_interpreters_prefix_is_still_watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a system Python under /usr and the project in /usr/src/app (a common container layout)
    new, old = tmp_path / "usr" / "src" / "app", tmp_path / "old"
    new.mkdir(parents=True)
    old.mkdir()
    for name in ("prefix", "base_prefix", "exec_prefix"):
        monkeypatch.setattr(sys, name, str(tmp_path / "usr"))
    modules = {"app": module("app", str(new / "app.py"))}
    assert foreign_modules(new, old, modules) == [f"app ({new / 'app.py'})"]


def test_an_extra_import_root_outside_the_tree_is_watched(tmp_path: Path) -> None:
    new, old, extra = tmp_path / "repo", tmp_path / "old", tmp_path / "lib"
    for d in (new, old, extra):
        d.mkdir()
    modules = {"helper": module("helper", str(extra / "helper.py"))}
    assert foreign_modules(new, old, modules) == []
    assert foreign_modules(new, old, modules, extra=[extra]) == [f"helper ({extra / 'helper.py'})"]


# The lock-step barrier --------------------------------------------------------------------------------


@pytest.fixture
def twins(tmp_path: Path) -> tuple[Any, Any]:
    a = lockstep_barrier({"dir": str(tmp_path), "side": "old", "other": "new"}, "call0")
    b = lockstep_barrier({"dir": str(tmp_path), "side": "new", "other": "old"}, "call0")
    return a, b


def test_no_spec_no_barrier() -> None:
    assert lockstep_barrier(None, "call0") is None


def test_a_pass_waits_for_its_twin(twins: tuple[Any, Any]) -> None:
    a, b = twins
    events: list[str] = []

    def old() -> None:
        for i in range(3):
            a(i)
            events.append(f"old {i}")
        a(DONE)

    t = threading.Thread(target=old)
    t.start()
    for i in range(3):
        events.append(f"new reaches {i}")
        b(i)
    b(DONE)
    t.join()
    for i in range(3):  # the old side never ran pass i before the new side reached it
        assert events.index(f"new reaches {i}") < events.index(f"old {i}")


def test_a_finished_twin_releases_the_other(twins: tuple[Any, Any]) -> None:
    a, b = twins
    b(DONE)
    a(0)  # returns: the twin is done
    a(1)


def test_the_twins_trade_their_cores_pass_by_pass(tmp_path: Path) -> None:
    placed: dict[str, list[list[int]]] = {"old": [], "new": []}

    def twin(side: str, other: str) -> Any:
        spec = {"dir": str(tmp_path), "side": side, "other": other, "cores": [4, 5]}
        return lockstep_barrier(spec, "call0", place=lambda cores: placed[side].append(sorted(cores)))

    def passes(barrier: Any) -> None:
        for i in range(3):
            barrier(i)
        barrier(DONE)

    threads = [threading.Thread(target=passes, args=(twin(*sides),)) for sides in (("old", "new"), ("new", "old"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert placed["old"] == [[4], [5], [4], [4, 5]]  # even passes on the first core, odd on the second, then both
    assert placed["new"] == [[5], [4], [5], [4, 5]]


def test_a_twin_moves_only_once_both_reached_the_pass_and_times_it_once_both_moved(tmp_path: Path) -> None:
    """A twin that moved to its next core before the other finished its pass would wait on the core the other
    still runs on; and one that timed its pass while the other was still moving would share its core."""
    events: list[tuple[str, str, int]] = []
    lock = threading.Lock()

    def note(what: str, side: str, i: int) -> None:
        with lock:
            events.append((what, side, i))

    def twin(side: str, other: str, slow: float) -> None:
        spec = {"dir": str(tmp_path), "side": side, "other": other, "cores": [4, 5]}
        i_now = [0]
        barrier = lockstep_barrier(spec, "call0", place=lambda cores: note("moves", side, i_now[0]))
        assert barrier is not None
        for i in range(3):
            note("reaches", side, i)
            i_now[0] = i
            barrier(i)
            note("times", side, i)
            time.sleep(slow)  # the pass
        barrier(DONE)

    threads = [threading.Thread(target=twin, args=sides) for sides in (("old", "new", 0.0), ("new", "old", 0.02))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(3):
        for side, other in (("old", "new"), ("new", "old")):
            assert events.index(("reaches", other, i)) < events.index(("moves", side, i))
            assert events.index(("moves", other, i)) < events.index(("times", side, i))


def test_twins_measure_passes_again_until_both_have_theirs(twins: tuple[Any, Any]) -> None:
    """A side with its clean passes keeps its twin company while the twin measures a preempted pass again; both
    stop before the same pass."""
    a, b = twins
    stopped: dict[str, int] = {}

    def run(name: str, barrier: Any, needs: int) -> None:
        for i in range(12):
            barrier(i)
            if i >= 4 and barrier.stop(i + 1, enough=i + 1 >= needs):
                stopped[name] = i + 1
                break
        barrier(DONE)

    threads = [threading.Thread(target=run, args=args) for args in (("old", a, 5), ("new", b, 8))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert stopped == {"old": 8, "new": 8}
    assert a.alone_from is None
    assert b.alone_from is None


def test_a_twin_that_is_done_leaves_the_stop_to_this_side(twins: tuple[Any, Any]) -> None:
    a, b = twins
    b(DONE)
    assert not a.stop(5, enough=False)  # it needs more: it runs them alone
    assert a.alone_from == 5
    assert a.stop(6, enough=True)
    # alone only in passes after those whose times count (measured again for preemption): it says it held
    a.counted_until = 4
    assert a.alone_in_counted is None
    a.counted_until = 5
    assert a.alone_in_counted == 5
    a.counted_until = None  # not said: every pass counts
    assert a.alone_in_counted == 5


def test_without_cores_a_twin_stays_where_the_system_put_it(tmp_path: Path) -> None:
    moved: list[object] = []
    a = lockstep_barrier({"dir": str(tmp_path), "side": "old", "other": "new", "cores": []}, "k", place=moved.append)
    assert a is not None
    a(DONE)
    assert moved == []


@pytest.mark.parametrize(
    ("threads", "available", "expected"),
    [(1, [0, 1, 2, 3], [0, 1]), (2, [0, 1, 2, 3], [0, 1, 2, 3]), (1, [3], []), (2, [0, 1, 2], [])],
)
def test_a_pair_gets_two_groups_of_cores_or_none(threads: int, available: list[int], expected: list[int]) -> None:
    assert pair_cores(threads, available) == expected


def test_auto_runs_a_duet_on_the_cpu_and_alternates_on_an_accelerator() -> None:
    from dataclasses import replace

    from pytest_fxprof.against.campaign import duet_for
    from tests.records_for_tests import ENV

    def on(device: str) -> Any:
        return types.SimpleNamespace(environment=replace(ENV, device=device))

    gpu = "cuda:NVIDIA H100 (CUDA 13.0)"
    assert duet_for("auto", [on("cpu"), on("cpu")])
    assert not duet_for("auto", [on("cpu"), on(gpu)])  # one call on the accelerator: the test alternates
    assert duet_for("duet", [on(gpu)])  # asked for
    assert not duet_for("alternate", [on("cpu")])


def test_a_twin_that_ended_releases_the_other_and_the_pass_is_said(tmp_path: Path) -> None:
    a = lockstep_barrier({"dir": str(tmp_path), "side": "new", "other": "old"}, "call0")
    assert a is not None
    exited_mark(tmp_path, "old").touch()  # what the parent marks when the old process ended
    a(0)
    a(1)
    assert a.alone_from == 0


def test_a_twin_that_ran_the_call_alone_makes_the_other_run_it_alone(tmp_path: Path) -> None:
    old = lockstep_barrier({"dir": str(tmp_path), "side": "old", "other": "new"}, "call0")
    new = lockstep_barrier({"dir": str(tmp_path), "side": "new", "other": "old"}, "call0")
    assert old is not None
    assert new is not None
    (tmp_path / f"{call_tag('call0')}.new.alone").touch()  # the new side gave up its lock-step in this call
    for i in range(3):
        (tmp_path / f"{call_tag('call0')}.new.{i}").touch()  # and marked its passes meanwhile
    old(0)
    assert old.alone_from == 0  # its twin's marks are not a pass run at the same time


@pytest.mark.parametrize(
    ("old_waits", "new_waits", "new_calls", "gives_way"),
    [
        ("removed", "common", ["common"], "old"),  # the pull request removed a call: the old side gives it up
        ("common", "added", ["added", "common"], "new"),  # it added one: the new side gives that up
    ],
)
def test_twins_waiting_on_different_calls_the_right_one_gives_way(
    tmp_path: Path, old_waits: str, new_waits: str, new_calls: list[str], gives_way: str
) -> None:
    tags = [call_tag(k) for k in new_calls]
    spec = {"dir": str(tmp_path), "new_calls": tags}
    waiting = {"old": old_waits, "new": new_waits}
    for side, other in (("old", "new"), ("new", "old")):
        (tmp_path / f"{other}.waiting").write_text(f"0 {call_tag(waiting[other])}")
        barrier = lockstep_barrier({**spec, "side": side, "other": other}, waiting[side])
        assert barrier is not None
        if side == gives_way:
            barrier(0)  # returns at once: its twin will never reach this call
            assert barrier.alone_from == 0
        else:
            assert not barrier._give_way()


@pytest.mark.parametrize(("theirs", "gives_way"), [(2, True), (0, False)])
def test_a_twin_in_a_later_test_left_this_one_behind(tmp_path: Path, theirs: int, gives_way: bool) -> None:
    """Twins that serve several tests: one waiting in a later test than this side's has left this test behind
    (its side skipped or failed it), so this side runs the call alone; one in an earlier test will still come."""
    (tmp_path / "new.waiting").write_text(f"{theirs} {call_tag('call0', 'test_b')}")
    barrier = lockstep_barrier({"dir": str(tmp_path), "side": "old", "other": "new", "test": 1}, "call0", test_id="t")
    assert barrier is not None
    assert barrier._give_way() is gives_way
