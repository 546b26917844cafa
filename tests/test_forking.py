"""Side processes forked from one parent (``measure.forking``, ``measure.zygote``): which modules the parent may
import, what a forked side finds already imported, the fallback to fresh processes, and no process outliving
the run. The pairs served by forked sides (crashes, hangs, failures) are in ``test_rounds``. No torch."""

from __future__ import annotations

import json
import mmap
import os
import random
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from pytest_fxprof.measure import forking, zygote
from pytest_fxprof.measure.forking import Forker, can_fork, preloadable
from pytest_fxprof.measure.sampling import Relaunch, finish

pytestmark = pytest.mark.skipif(not can_fork(), reason="side processes are forked on Linux only")


def module(path: Path) -> types.ModuleType:
    m = types.ModuleType(path.stem)
    m.__file__ = str(path)
    return m


def test_the_parent_imports_no_module_of_either_side(tmp_path: Path) -> None:
    new, old, libs = tmp_path / "work", tmp_path / "old", tmp_path / "libs"
    venv = new / ".venv" / "lib" / "site-packages"  # a virtual environment inside the project: libraries
    for d in (new / "pkg", old, libs, venv):
        d.mkdir(parents=True)
    (new / "pkg" / "__init__.py").write_text("")
    (old / "shadowed.py").write_text("")  # the old tree has its own copy of an installed module
    modules = {
        "torch": module(venv / "torch" / "__init__.py"),
        "numpy": module(libs / "numpy" / "__init__.py"),
        "pkg": module(new / "pkg" / "__init__.py"),
        "pkg.core": module(new / "pkg" / "core.py"),
        "conftest": module(libs / "conftest.py"),
        "test_model": module(old / "test_model.py"),
        "shadowed": module(libs / "shadowed.py"),
        "pytest_someplugin": module(libs / "pytest_someplugin.py"),  # installed plugins are libraries too
        "__main__": module(libs / "main.py"),
        "builtin": types.ModuleType("builtin"),  # no file: nothing to import again
    }
    got = preloadable(modules, [new, old], libraries=[venv])
    assert got == ["torch", "numpy", "pytest_someplugin"]


def test_a_forked_side_finds_the_runs_libraries_imported_and_neither_sides_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run imported a library, its own module, and a library that imports its own module (found on the
    run's PYTHONPATH): a forked side finds only the first imported."""
    root, libs = tmp_path / "root", tmp_path / "libs"
    root.mkdir()
    libs.mkdir()
    (root / "mine.py").write_text("")
    (libs / "outside_lib.py").write_text("")
    (libs / "uses_mine.py").write_text("import mine\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(libs), str(root)]))
    (tmp_path / "fork").mkdir()
    names = ("mine", "outside_lib", "uses_mine")
    script = f"import sys; open(sys.argv[1], 'w').write(' '.join(n for n in {names} if n in sys.modules))"
    out = tmp_path / "seen"
    relaunch = Relaunch(invocation_dir=root, rootdir=root, inifile=None)
    forker = Forker([root], tmp_path / "fork", modules={n: module(libs / f"{n}.py") for n in names[1:]})
    try:
        proc = forker.start(ScriptRelaunch(relaunch, script, out), {"tests": []}, tmp_path)
        child = finish(proc, None, deadline_s=60)
    finally:
        forker.close()
    assert forker.forked == 1
    assert child.returncode == 0, child.output
    assert out.read_text() == "outside_lib"
    request = json.loads((tmp_path / "request.json").read_text())
    assert request["parent"] != os.getpid()  # the side ends with the parent that forked it


def forked_outputs(tmp_path: Path, script: str, count: int, modules: dict[str, types.ModuleType]) -> list[str]:
    """What ``count`` children forked one after the other from a parent that imported ``modules`` wrote, each
    running ``python -c SCRIPT OUT``."""
    (tmp_path / "fork").mkdir()
    relaunch = Relaunch(invocation_dir=tmp_path, rootdir=tmp_path, inifile=None)
    forker = Forker([tmp_path / "root"], tmp_path / "fork", modules=modules)
    written = []
    try:
        for k in range(count):
            (tmp_path / str(k)).mkdir()
            out = tmp_path / f"out{k}"
            child = finish(forker.start(ScriptRelaunch(relaunch, script, out), {"tests": []}, tmp_path / str(k)), None)
            assert child.returncode == 0, child.output
            written.append(out.read_text())
    finally:
        forker.close()
    assert forker.forked == count
    return written


def test_each_forked_side_draws_its_own_random_numbers(tmp_path: Path) -> None:
    numpy = pytest.importorskip("numpy")
    script = "import random, sys, numpy; open(sys.argv[1], 'w').write(f'{random.random()} {numpy.random.random()}')"
    preload = {"random": random, "numpy": numpy, "numpy.random": numpy.random}
    drawn = [text.split() for text in forked_outputs(tmp_path, script, 2, preload)]
    assert drawn[0][0] != drawn[1][0]
    assert drawn[0][1] != drawn[1][1]


LEARN = """
import sys
names = sys.argv[2].split(",")
found = [n for n in names if n in sys.modules]
for n in names:
    __import__(n)
open(sys.argv[1], "w").write(",".join(found))
"""


def test_the_parent_imports_between_pairs_what_the_tests_of_both_sides_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each side's process imports, as its tests run, a library both sides use, a library that only the new side
    uses, and the side's own module: both processes of the next pair find the shared library imported, and
    neither of the others."""
    old, new, libs = tmp_path / "old", tmp_path / "new", tmp_path / "libs"
    for d in (old, new, libs):
        d.mkdir()
    for name in ("shared_lib", "new_only_lib"):
        (libs / f"{name}.py").write_text("")
    for root in (old, new):
        (root / "mine.py").write_text("")
    (tmp_path / "fork").mkdir()
    forker = Forker([old, new], tmp_path / "fork", modules={})
    wanted = {"old": "shared_lib,mine", "new": "shared_lib,new_only_lib,mine"}
    seen: list[tuple[str, str]] = []
    try:
        for pair in range(2):
            running = []
            for side in ("old", "new"):
                root = tmp_path / side
                monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), str(libs)]))
                relaunch = Relaunch(invocation_dir=root, rootdir=root, inifile=None)
                directory = tmp_path / f"{side}{pair}"
                directory.mkdir()
                script = ScriptRelaunch(relaunch, LEARN, directory / "found", wanted[side])
                running.append((side, directory, forker.start(script, {"tests": []}, directory)))
            for side, directory, proc in running:
                child = finish(proc, None, deadline_s=60)
                assert child.returncode == 0, child.output
                seen.append((side, (directory / "found").read_text()))
    finally:
        forker.close()
    assert forker.forked == 4
    assert not forker.problem
    assert seen == [("old", ""), ("new", ""), ("old", "shared_lib"), ("new", "shared_lib")]


def test_the_parent_learns_only_what_every_side_imported_each_module_once(tmp_path: Path) -> None:
    """What each child wrote as it ended: the parent imports what a child of every tree imported, by its rules,
    in import order, and asks for none twice; a file that is unreadable or not a child's list teaches nothing."""
    written = {
        "old.json": [["shared_b", "/lib/b.py"], ["shared_a", "/lib/a.py"], ["old_only", "/lib/o.py"], ["frozen", None]],
        "new.json": [["shared_a", "/lib/a.py"], ["frozen", None], ["shared_b", "/lib/b.py"], ["new_only", "/lib/n.py"]],
        "dict.json": {"not": "a list"},
        "numbers.json": [1, 2],
    }
    for name, content in written.items():
        (tmp_path / name).write_text(json.dumps(content))
    (tmp_path / "torn.json").write_text('[["shared_a", "/lib/')
    learned = zygote.Learned(lambda entries: [n for n, f in entries if f])
    for name in ("dict.json", "numbers.json", "torn.json", "missing.json"):
        learned.add("new", tmp_path / name)
    learned.add("old", tmp_path / "old.json")
    learned.add("new", tmp_path / "new.json")
    assert learned.wanted() == ["shared_b", "shared_a"]  # the first child's order; "frozen" has no file
    assert learned.wanted() == []


def test_a_library_the_tests_imported_that_starts_a_thread_leaves_the_later_processes_fresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    libs = tmp_path / "libs"
    libs.mkdir()
    (libs / "threaded_lib.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(libs))
    (tmp_path / "fork").mkdir()
    forker = Forker([tmp_path / "root"], tmp_path / "fork", modules={})
    relaunch = Relaunch(invocation_dir=tmp_path, rootdir=tmp_path, inifile=None)
    fresh: list[Relaunch] = []
    try:
        (tmp_path / "first").mkdir()
        script = ScriptRelaunch(relaunch, LEARN, tmp_path / "found", "threaded_lib")
        child = finish(forker.start(script, {"tests": []}, tmp_path / "first"), None, deadline_s=60)
        assert child.returncode == 0, child.output
        monkeypatch.setattr(forking, "start", lambda relaunch, request, directory: fresh.append(relaunch))
        forker.start(relaunch, {"tests": []}, tmp_path)
    finally:
        forker.close()
    assert fresh == [relaunch]
    assert forker.forked == 1
    assert forker.parent is None
    assert forker.problem.startswith("importing what the sides' tests imported started threads (")


def test_a_forked_side_finds_the_parents_objects_out_of_the_collectors_sight(tmp_path: Path) -> None:
    """The parent freezes what it holds (``gc.freeze``): a side's collections, pytest's at its end among them, look
    only at what the side made."""
    script = "import gc, sys; open(sys.argv[1], 'w').write(str(gc.get_freeze_count()))"
    assert int(forked_outputs(tmp_path, script, 1, {"json": json})[0]) > 1000


SHIFTED = """
import sys
shift = sys.modules["__main__"]._SHIFT  # the parent's script, whose function forked this child
sizes = [len(shift[0]), len(shift[1]), len(shift) - 2]
open(sys.argv[1], "w").write(" ".join(map(str, sizes)))
"""


def test_each_forked_side_moves_its_later_allocations_by_a_random_amount(tmp_path: Path) -> None:
    """Forked from one state, each child first maps a random number of pages and allocates a block of random size
    and a random number of small objects, so that where its tensors land is drawn anew, as in a fresh
    interpreter."""
    shifted = [tuple(int(n) for n in text.split()) for text in forked_outputs(tmp_path, SHIFTED, 3, {})]
    assert all(pages >= mmap.PAGESIZE and block >= 1 for pages, block, _ in shifted)
    assert len(set(shifted)) == 3


def test_a_parent_launched_early_imports_what_the_run_imported_since_before_the_first_fork(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Launched as collection starts with what the run imported then and a library every run imports later (not
    the side's module of that name), the parent is told at the first fork what the run imported since."""
    root, libs = tmp_path / "root", tmp_path / "libs"
    root.mkdir()
    libs.mkdir()
    for name in ("early_lib", "ahead_lib", "later_lib"):
        (libs / f"{name}.py").write_text("")
    (root / "own_code.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(libs), str(root)]))
    monkeypatch.syspath_prepend(str(libs))
    monkeypatch.syspath_prepend(str(root))
    (tmp_path / "fork").mkdir()
    imported = {"early_lib": module(libs / "early_lib.py")}  # what the run has imported, as it grows
    forker = Forker([root], tmp_path / "fork", modules=imported)
    names = ("early_lib", "ahead_lib", "later_lib", "own_code")
    script = f"import sys; open(sys.argv[1], 'w').write(' '.join(n for n in {names} if n in sys.modules))"
    try:
        forker.launch(("ahead_lib", "own_code", "no_such_module"))
        assert forker.parent is not None
        assert forker.listed == {"early_lib", "ahead_lib"}  # a side's module is never listed, nor a missing one
        imported["later_lib"] = module(libs / "later_lib.py")  # collection imported it
        relaunch = Relaunch(invocation_dir=root, rootdir=root, inifile=None)
        child = finish(forker.start(ScriptRelaunch(relaunch, script, tmp_path / "seen"), {"tests": []}, tmp_path), None)
    finally:
        forker.close()
    assert child.returncode == 0, child.output
    assert forker.forked == 1
    assert (tmp_path / "seen").read_text() == "early_lib ahead_lib later_lib"


def start_with_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> tuple[Forker, bool]:
    """Ask a forker whose parent imports one library of ``source`` (on the run's PYTHONPATH) for a process; the
    forker, ended, and whether the process was started fresh instead."""
    libs = tmp_path / "libs"
    libs.mkdir()
    (libs / "the_lib.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", str(libs))
    (tmp_path / "fork").mkdir()
    forker = Forker([tmp_path / "root"], tmp_path / "fork", modules={"the_lib": module(libs / "the_lib.py")})
    started: list[Relaunch] = []
    monkeypatch.setattr(forking, "start", lambda relaunch, request, directory: started.append(relaunch))
    relaunch = Relaunch(invocation_dir=tmp_path, rootdir=tmp_path, inifile=None)
    try:
        forker.start(relaunch, {"tests": []}, tmp_path)
    finally:
        forker.close()
    assert forker.parent is None
    return forker, started == [relaunch]


def test_a_parent_whose_imports_start_a_thread_is_not_forked_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    forker, fresh = start_with_library(tmp_path, monkeypatch, threads)
    assert fresh
    assert forker.forked == 0
    assert forker.problem.startswith("importing the run's libraries started threads (")
    assert "so forking is unsafe" in forker.problem


def test_a_parent_that_dies_while_importing_leaves_fresh_processes_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dies = "import os, sys\nprint('the_lib: no licence found', file=sys.stderr)\nos._exit(3)\n"
    forker, fresh = start_with_library(tmp_path, monkeypatch, dies)
    assert fresh
    assert forker.problem == "the parent of the side processes did not start (exit status 3): the_lib: no licence found"


def test_an_old_side_under_another_python_starts_fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fork").mkdir()
    forker = Forker([tmp_path], tmp_path / "fork")
    started: list[Relaunch] = []
    monkeypatch.setattr(forking, "start", lambda relaunch, request, directory: started.append(relaunch))
    relaunch = Relaunch(invocation_dir=tmp_path, rootdir=tmp_path, inifile=None, python="/old/venv/bin/python")
    forker.start(relaunch, {"tests": []}, tmp_path)
    assert started == [relaunch]
    assert forker.parent is None  # no parent was started for it


RUN = """
import sys, time
from pathlib import Path
from pytest_fxprof.measure.forking import Forker
from pytest_fxprof.measure.sampling import Relaunch

here = Path(sys.argv[1])
class Hanging(Relaunch):
    def command(self, test_ids, request):
        return [sys.executable, "-c", "import time; time.sleep(600)", str(request)]
forker = Forker([here / "root"], here / "fork")
side = here / "side"
side.mkdir()
proc = forker.start(Hanging(invocation_dir=here, rootdir=here, inifile=None), {"tests": []}, side)
print(forker.parent.pid, proc.pid, flush=True)
time.sleep(600)
"""


def test_a_run_killed_leaves_neither_the_parent_nor_a_side_behind(tmp_path: Path) -> None:
    (tmp_path / "fork").mkdir()
    (tmp_path / "root").mkdir()
    run = subprocess.Popen(
        [sys.executable, "-c", RUN, str(tmp_path)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert run.stdout is not None
        pids = [int(p) for p in run.stdout.readline().split()]
        assert len(pids) == 2, "the run did not fork its side"
        for pid in pids:
            os.kill(pid, 0)  # both alive
        run.kill()
        run.wait()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].split()[0] != "Z"  # a zombie has ended, its parent not yet reaped it
    except OSError:
        return False


class ScriptRelaunch(Relaunch):
    """Starts ``python -c SCRIPT OUT [ARGS]`` in place of pytest."""

    def __init__(self, base: Relaunch, script: str, out: Path, *args: str) -> None:
        super().__init__(invocation_dir=base.invocation_dir, rootdir=base.rootdir, inifile=None)
        object.__setattr__(self, "script", script)
        object.__setattr__(self, "out", out)
        object.__setattr__(self, "args", args)

    def command(self, test_ids: object, request: Path) -> list[str]:
        return [sys.executable, "-c", self.script, str(self.out), *self.args]  # type: ignore[attr-defined]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_measuring_process_ended_by_an_interrupting_signal_interrupts_the_run(sig: signal.Signals) -> None:
    code = f"import os, signal; signal.signal({int(sig)}, signal.SIG_DFL); os.kill(os.getpid(), {int(sig)})"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with pytest.raises(KeyboardInterrupt, match=rf"was interrupted \({sig.name}\): the run stops"):
        finish(proc, None)


def test_a_measuring_process_that_failed_or_was_killed_is_a_failure_not_an_interrupt() -> None:
    failed = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"], stdout=subprocess.PIPE, text=True)
    assert finish(failed, None).returncode == 1
    killed = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert finish(killed, None).returncode == -signal.SIGKILL  # the kernel's OOM killer, say: a crash, said as one
