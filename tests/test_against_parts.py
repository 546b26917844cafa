"""Unit tests of the parts of the mode against a revision: the exported tree, the schedule of pairs, the old
side's import check and the lock-step barrier (no torch, no pytest inner runs)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from pytest_fxprof.against import revision as rev
from pytest_fxprof.against import rounds
from pytest_fxprof.against.origin import foreign_modules
from pytest_fxprof.against.revision import Revision, RevisionError, materialise, remove, remove_stale, resolve
from pytest_fxprof.measure.lockstep import DONE, call_tag, exited_mark, lockstep_barrier, pair_cores
from pytest_fxprof.measure.sampling import Child, Relaunch


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


# The schedule ------------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_sides(
    monkeypatch: pytest.MonkeyPatch, clock: FakeClock, seconds: float = 10.0, data: dict[str, Any] | None = None
) -> list[str]:
    """Sides whose processes each take ``seconds`` on ``clock`` and write ``data``; returns the order in which
    they ran."""
    ran: list[str] = []

    def run_one(side: rounds.Side, test_id: str, request: dict[str, Any], **kw: Any) -> Child:
        clock.now += seconds
        ran.append(side.name)
        return Child((), 0, data or {"calls": {}}, "")

    monkeypatch.setattr(rounds, "run_one", run_one)
    return ran


SIDE = rounds.Side("old", "HEAD", Relaunch(Path(), Path(), None))
NEW = rounds.Side("new", "the working tree", Relaunch(Path(), Path(), None))


def test_pairs_alternate_in_a_balanced_order(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    ran = fake_sides(monkeypatch, clock)
    got = rounds.measure_pairs(
        SIDE, NEW, "t", {}, pairs=4, max_pairs=12, budget_s=1000, undecided=lambda p: False, clock=clock
    )
    assert ran == ["old", "new", "new", "old", "old", "new", "new", "old"]
    assert len(got.old) == len(got.new) == 4
    assert got.seconds == 80
    assert got.stopped == ""


def test_pairs_are_added_while_undecided_up_to_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    fake_sides(monkeypatch, clock)
    seen: list[int] = []

    def undecided(p: rounds.Pairs) -> bool:
        seen.append(len(p.old))
        return True

    got = rounds.measure_pairs(
        SIDE, NEW, "t", {}, pairs=3, max_pairs=5, budget_s=1000, undecided=undecided, clock=clock
    )
    assert len(got.old) == 5
    assert got.stopped == "the limit of 5 pairs"
    assert seen == [3, 4, 5]  # asked only once the test's own pairs are measured


def test_the_budget_bounds_the_added_pairs_never_the_tests_own(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    fake_sides(monkeypatch, clock)
    got = rounds.measure_pairs(
        SIDE, NEW, "t", {}, pairs=6, max_pairs=18, budget_s=50, undecided=lambda p: True, clock=clock
    )
    assert len(got.old) == 6  # 120 s: over the budget, but the test asked for 6
    assert got.stopped == "the time budget of 50 s per test"
    got = rounds.measure_pairs(
        SIDE, NEW, "t", {}, pairs=2, max_pairs=18, budget_s=70, undecided=lambda p: True, clock=clock
    )
    assert len(got.old) == 3  # 2 pairs took 40 s, a third ends at 60 s, a fourth would end at 80 s


def test_a_decided_test_stops_at_its_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    fake_sides(monkeypatch, clock)
    got = rounds.measure_pairs(
        SIDE, NEW, "t", {}, pairs=6, max_pairs=18, budget_s=50, undecided=lambda p: False, clock=clock
    )
    assert len(got.old) == 6
    assert got.stopped == ""


@pytest.mark.parametrize(
    ("data", "absent", "skipped"), [({"absent": True}, True, ""), ({"skipped": "no GPU"}, False, "no GPU")]
)
def test_a_side_that_finds_the_test_absent_or_skipped_ends_the_rounds(
    monkeypatch: pytest.MonkeyPatch, data: dict[str, Any], absent: bool, skipped: str
) -> None:
    clock = FakeClock()
    ran = fake_sides(monkeypatch, clock, data=data)
    got = rounds.measure_pairs(
        SIDE, NEW, "t", {}, pairs=6, max_pairs=18, budget_s=500, undecided=lambda p: True, clock=clock
    )
    assert ran == ["old", "new"]  # one pair, then nothing more to measure
    assert got.ended is not None
    side, child = got.ended
    assert side == "old"
    assert (child.absent, child.skipped) == (absent, skipped)
    assert got.old == got.new == []


def test_moot_pairs_stop_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    ran = fake_sides(monkeypatch, clock)
    got = rounds.measure_pairs(
        SIDE,
        NEW,
        "t",
        {},
        pairs=6,
        max_pairs=18,
        budget_s=500,
        undecided=lambda p: True,
        moot=lambda p: True,
        clock=clock,
    )
    assert len(ran) == 2
    assert len(got.old) == 1


def test_a_failing_side_stops_the_pairs_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    def run_one(side: rounds.Side, test_id: str, request: dict[str, Any], **kw: Any) -> Child:
        raise rounds.SideFailedError(side, Child(("x",), 4, None, "ERROR: not found"), kw["number"])

    monkeypatch.setattr(rounds, "run_one", run_one)
    with pytest.raises(rounds.SideFailedError) as err:
        rounds.measure_pairs(SIDE, NEW, "t", {}, pairs=2, max_pairs=2, budget_s=10, undecided=lambda p: False)
    assert err.value.side.name == "old"
    assert err.value.child.returncode == 4


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

    from pytest_fxprof.against.compare import duet_for
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
        (tmp_path / f"{other}.waiting").write_text(call_tag(waiting[other]))
        barrier = lockstep_barrier({**spec, "side": side, "other": other}, waiting[side])
        assert barrier is not None
        if side == gives_way:
            barrier(0)  # returns at once: its twin will never reach this call
            assert barrier.alone_from == 0
        else:
            assert not barrier._give_way()


class ScriptRelaunch(Relaunch):
    """Starts ``python -c SCRIPT`` in place of pytest."""

    def __init__(self, script: str, where: Path) -> None:
        super().__init__(invocation_dir=where, rootdir=where, inifile=None)
        object.__setattr__(self, "script", script)

    def command(self, test_id: str, request: Path) -> list[str]:
        return [sys.executable, "-c", self.script]  # type: ignore[attr-defined]


def test_a_process_whose_own_child_keeps_the_pipe_open_is_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_fxprof.measure import sampling

    monkeypatch.setattr(sampling, "DRAIN_S", 0.2)
    pid_file = tmp_path / "server.pid"
    script = (
        "import subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "print('measured', flush=True)\n"
    )
    proc, out = sampling.start(ScriptRelaunch(script, tmp_path), "t.py::t", {}, tmp_path)
    child = sampling.finish(proc, out)
    server = int(pid_file.read_text())
    try:
        os.kill(server, 0)  # the server still holds the pipe: finish did not wait for it to close
        assert child.returncode == 0
        assert "measured" in child.output
    finally:
        os.kill(server, 9)


class FakeProc:
    """A process for ``_wait_both``: running until killed, then ended (``code``) after ``dies_after`` more polls;
    as with ``Popen``, only ``poll`` sets ``returncode``."""

    def __init__(self, dies_after: int, code: int = -9) -> None:
        self.returncode: int | None = None
        self.killed = False
        self.dies_after = dies_after
        self.code = code

    def poll(self) -> int | None:
        if self.killed and self.returncode is None:
            if self.dies_after == 0:
                self.returncode = self.code
            self.dies_after -= 1
        return self.returncode

    def kill(self) -> None:
        self.killed = True


def test_processes_stopped_at_the_deadline_are_late_even_when_one_dies_slowly(tmp_path: Path) -> None:
    procs = [FakeProc(dies_after=0), FakeProc(dies_after=3)]
    marks = [tmp_path / "old.exited", tmp_path / "new.exited"]
    first, late = rounds._wait_both(procs, marks, 0.0)  # type: ignore[arg-type]
    assert (first, late) == (None, True)
    assert all(p.killed for p in procs)


def test_a_process_that_fails_first_ends_its_twin(tmp_path: Path) -> None:
    failing, waiting = FakeProc(dies_after=0), FakeProc(dies_after=1)
    failing.returncode = 3
    first, late = rounds._wait_both([failing, waiting], [tmp_path / "a", tmp_path / "b"], None)  # type: ignore[list-item]
    assert (first, late) == (0, False)
    assert waiting.killed


class WaitsForTwin:
    """The old side's process of a duet waiting in its lock-step for a twin that already ended: it goes on only
    once the twin's end is marked (and gives up after ``patience`` polls, as the barrier's timeout would)."""

    def __init__(self, twin_mark: Path, patience: int = 20) -> None:
        self.returncode: int | None = None
        self.twin_mark = twin_mark
        self.patience = patience

    def poll(self) -> int | None:
        if self.returncode is None:
            self.patience -= 1
            if self.twin_mark.exists():
                self.returncode = 0
            elif self.patience == 0:
                self.returncode = 1
        return self.returncode

    def kill(self) -> None:
        raise AssertionError("nothing failed: nothing is killed")


def test_a_twin_that_ends_first_is_marked_while_the_other_waits_for_it(tmp_path: Path) -> None:
    marks = [tmp_path / "old.exited", tmp_path / "new.exited"]
    ended = FakeProc(dies_after=0, code=0)
    ended.killed = True  # it has ended: the first poll finds it so, as Popen's returncode is set by poll alone
    waiting = WaitsForTwin(marks[1])
    first, late = rounds._wait_both([waiting, ended], marks, None)  # type: ignore[list-item]
    assert waiting.returncode == 0
    assert (first, late) == (None, False)
