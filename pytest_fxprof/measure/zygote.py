"""The parent that forks a check's side processes: started once per check, it imports the run's libraries, then
forks every process of every pair, both sides alike, each of which becomes ``python -m pytest ...``.

Run as a script (``python zygote.py LISTING RUN_PID``), never imported by it: this file imports nothing but the
standard library, so that the parent holds no code of either side. ``LISTING`` is a JSON object: ``modules``, what
to import, and ``roots``, the sides' trees, which are taken off the import path first (a library that imports a
side's code is not imported), and whose top-level names it never imports (``skipped``). It answers ``ready`` (or
``unfit: WHY`` where it cannot fork safely: a thread started while importing), then reads one order per line on
stdin (a JSON object: ``argv``, ``cwd``, ``env``, ``status``, ``output``, ``imported``, ``tree``), forks a child per
order and answers its pid (or ``unfit: WHY``). An order ``{"import": [...]}`` before the first fork adds modules
to the listing's (what the run imported after it started the parent) and is answered like the listing. When a
child ends it writes its exit status (minus the signal that ended it) into the order's ``status`` file. It ends
once stdin is closed and every child has ended; it and each child end with their parent (``die_with_parent``).
``measure.forking`` is its other half, in the run.

The parent also learns what the sides import as their tests run (a library a test imports in its body, a lazy
submodule of one): each child writes the modules it imported into the order's ``imported`` file as it ends, and
before the next fork with no child running (between two pairs), the parent imports those that a child of every
``tree`` (each side's code) imported, by the same rules as the listing's. Both sides of every later pair then
find them imported, as both found the listing's; a module that one side's code alone imports (a dependency a
change added) stays that side's own to import.

Must not import anything outside the standard library (it would be imported into both sides).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import mmap
import os
import random
import runpy
import select
import signal
import site
import sys
import sysconfig
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO


def die_with_parent(parent: int | None) -> None:
    """End this process when the one that started it ends (Linux), so that none outlives a run that was killed;
    at once if that one is already gone."""
    if parent is None:
        return
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def library_dirs() -> list[Path]:
    """Where the interpreter's own and installed packages live: its standard library and site-packages (not
    its whole prefix, which may hold the project: a system Python under /usr and a checkout in /usr/src). What
    lies there is no side's code, even inside a side's tree (a virtual environment kept in the checkout)."""
    paths = sysconfig.get_paths()
    places = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    places.update(site.getsitepackages())
    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user:
        places.add(user)
    return [Path(p).resolve() for p in sorted(places) if p]


def side_code(path: Path, roots: Sequence[Path], libraries: Sequence[Path]) -> bool:
    """Whether ``path`` (resolved) is a side's code: under one of ``roots`` and in none of ``libraries``."""
    return any(path.is_relative_to(r) for r in roots) and not any(path.is_relative_to(d) for d in libraries)


def skipped(roots: Iterable[Path]) -> set[str]:
    """The top-level names the parent never imports: ``__main__``, ``conftest``, and each name that one of
    ``roots`` holds (a side imports that from its tree, not an installed copy)."""
    return {"__main__", "conftest"} | {n for r in roots for n in _top_level_names(r)}


def _top_level_names(root: Path) -> set[str]:
    """The modules and packages importable from directory ``root``."""
    try:
        entries = list(root.iterdir())
    except OSError:
        return set()
    return {e.stem for e in entries if e.suffix == ".py"} | {e.name for e in entries if (e / "__init__.py").is_file()}


def importable(
    entries: Iterable[tuple[str, str | None]], roots: Sequence[Path], skipped: Iterable[str], libraries: Sequence[Path]
) -> list[str]:
    """The names of ``entries`` (each a module's name and file, in import order) that the parent may import: from
    a file in ``libraries`` or outside every one of ``roots`` (resolved: the code of either side), and no name
    whose top level is one of ``skipped``."""
    skip = set(skipped)
    out = []
    for name, file in entries:
        if not isinstance(file, str) or not file or name.split(".")[0] in skip:
            continue
        if not side_code(Path(file).resolve(), roots, libraries):
            out.append(name)
    return out


def preload(names: Sequence[str]) -> None:
    """Import ``names`` in order; one that cannot be imported again (it needs the state of the run that first
    imported it) is left to the side that needs it. Then move every object the parent holds out of the garbage
    collector's sight (``gc.freeze``): a child's collections, pytest's at its end among them, then look only at
    what the child made, and never touch (and so copy) the parent's pages."""
    for name in names:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    gc.collect()
    gc.freeze()


class Learned:
    """What the children of each tree imported that the parent has not (``add``), and which of it the parent may
    import now (``wanted``): what a child of every tree seen imported, importable by ``rules``."""

    def __init__(self, rules: Callable[[Iterable[tuple[str, str | None]]], list[str]]) -> None:
        self.rules = rules
        self.files: dict[str, str | None] = {}
        """Each module a child imported, and its file, in the order they were first imported."""
        self.trees: dict[str, set[str]] = {}
        self.tried: set[str] = set()

    def seen(self, tree: str) -> None:
        self.trees.setdefault(tree, set())

    def add(self, tree: str, path: Path) -> None:
        """What a child of ``tree`` wrote into ``path`` as it ended (nothing where it ended before it could)."""
        try:
            written = json.loads(path.read_text(encoding="utf-8"))
            entries = [(str(name), file if isinstance(file, str) else None) for name, file in written]
        except (OSError, ValueError, TypeError):  # unreadable, or not the pairs a child writes: nothing learned
            return
        names = self.trees.setdefault(tree, set())
        for name, file in entries:
            self.files.setdefault(name, file)
            names.add(name)

    def wanted(self) -> list[str]:
        """The modules to import before the next fork (each asked once: one that fails to import stays the
        sides')."""
        if not self.trees:
            return []
        common = set.intersection(*self.trees.values())
        known = self.tried | set(sys.modules)
        entries = [(n, f) for n, f in self.files.items() if n in common and n not in known]
        names = self.rules(entries)
        self.tried.update(n for n, _ in entries)
        return names


def unfit(imported: str) -> str:
    """Why this process may not fork after importing ``imported`` (a thread other than its own runs), or ``""``."""
    if threading.active_count() == 1:
        return ""
    names = ", ".join(sorted(t.name for t in threading.enumerate() if t is not threading.current_thread()))
    return f"importing {imported} started threads ({names}), so forking is unsafe"


def serve(answers: TextIO, base_path: Sequence[str], learned: Learned) -> None:
    """Fork a side process per order on stdin, answering its pid on ``answers``; reap them as they end, and
    import what ``learned`` says the children of every tree imported before a fork with no child running."""
    children: dict[int, tuple[Path, Path | None, str]] = {}
    reading = True

    def reap() -> None:
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            done = children.pop(pid, None)
            if done is not None:
                end, imported, tree = done
                if imported is not None:
                    learned.add(tree, imported)
                part = end.with_name(end.name + ".part")
                part.write_text(str(os.waitstatus_to_exitcode(status)), encoding="utf-8")
                part.replace(end)

    while reading or children:
        if reading and select.select([sys.stdin], [], [], 0.02)[0]:
            line = sys.stdin.readline()
            if not line:
                reading = False
                continue
            order = {**json.loads(line), "parent": os.getpid()}
            if "import" in order:  # what the run imported since it started this process (before any fork)
                preload([str(name) for name in order["import"]])
                why = unfit("the run's libraries")
                print(f"unfit: {why}" if why else "ready", file=answers, flush=True)
                reading = not why
                continue
            tree = str(order.get("tree", ""))
            learned.seen(tree)
            wanted = learned.wanted() if not children else []  # between pairs: both sides of the next find them
            if wanted:
                preload(wanted)
                why = unfit("what the sides' tests imported")
                if why:
                    print(f"unfit: {why}", file=answers, flush=True)
                    reading = False
                    continue
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                answers.close()
                side(order, base_path)
            imported = Path(order["imported"]) if order.get("imported") else None
            children[pid] = (Path(order["status"]), imported, tree)
            print(pid, file=answers, flush=True)
        elif not reading:
            select.select([], [], [], 0.02)
        reap()


def side(order: Mapping[str, Any], base_path: Sequence[str]) -> None:
    """In a forked child: become ``python ARGV`` (``-m pytest ...``, or ``-c CODE ...``) in the side's directory,
    environment and import path, its output into the order's file; never return."""
    code = 1
    before = set(sys.modules)
    try:
        die_with_parent(order["parent"])  # and so with the run: the parent dies with it
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter has it
        out = os.open(order["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(order["cwd"])
        os.environ.clear()
        os.environ.update(order["env"])
        extra = [p for p in order["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [order["cwd"], *extra, *base_path]
        _reseed()
        _shift_heap()
        code = _run(list(order["argv"]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 (anything else ends the side as a crash would, with its traceback)
        traceback.print_exc()
    finally:
        try:
            if order.get("imported"):
                _write_imported(Path(order["imported"]), before)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(int(code))


def _write_imported(path: Path, before: set[str]) -> None:
    """Write the modules imported since ``before`` (each name and file, in import order) into ``path``."""
    entries = []
    for name, module in list(sys.modules.items()):
        if name not in before:
            try:
                file = module.__dict__.get("__file__")
            except Exception:  # noqa: BLE001 (a module object of any kind: its file is unknown)
                file = None
            entries.append((name, file if isinstance(file, str) else None))
    with contextlib.suppress(OSError):
        part = path.with_name(path.name + ".part")
        part.write_text(json.dumps(entries), encoding="utf-8")
        part.replace(path)


def _reseed() -> None:
    """Seed the global random generators the parent imported from fresh entropy, as a fresh process has them:
    ``random``, and numpy's where it is imported (torch's starts from a fixed seed in every process)."""
    random.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


_SHIFT: list[object] = []
"""What ``_shift_heap`` allocated, held for the child's life."""


def _shift_heap() -> None:
    """Move where this child's later allocations land by a random amount: a random number of mapped pages, a
    block of random size on the heap and a random number of small objects. A fresh interpreter's start moves them
    by its own hash seed and imports; children forked from one state would otherwise place each side's tensors
    alike in every pair of a check, and a difference that their placement makes between the two sides would be
    the same in every pair, not sampled as the spread between processes."""
    rng = random.Random(os.urandom(16))  # noqa: S311 (a placement, not a secret)
    _SHIFT.append(mmap.mmap(-1, mmap.PAGESIZE * rng.randint(1, 512)))
    _SHIFT.append(bytearray(rng.randint(1, 1 << 16)))
    _SHIFT.extend(bytes(rng.randint(1, 200)) for _ in range(rng.randint(0, 4000)))


def _run(argv: list[str]) -> int:
    """What ``python ARGV`` would run, for ``-m MODULE ARGS`` or ``-c CODE ARGS``; its exit status where it
    returns (``SystemExit`` otherwise)."""
    if argv[:1] == ["-m"] and len(argv) > 1:
        sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's file first, as ``-m`` does
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    if argv[:1] == ["-c"] and len(argv) > 1:
        sys.argv = ["-c", *argv[2:]]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102 (the run's own command)
        return 0
    raise SystemExit(f"a forked side runs `-m MODULE` or `-c CODE`, not {argv[:2]}")


def main(listing: Path, run_pid: int) -> None:
    here = str(Path(__file__).resolve().parent)
    if sys.path and str(Path(sys.path[0] or ".").resolve()) == here:
        del sys.path[0]  # the script's own directory (the plugin's) is no import root of either side
    die_with_parent(run_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt is the run's to handle: it ends the children
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the imports or the children print goes to stderr, never into the answers
    asked = json.loads(listing.read_text(encoding="utf-8"))
    own = set(os.environ.get("PYTHONPATH", "").split(os.pathsep))
    base_path = [p for p in sys.path if p not in own]  # each child puts its own PYTHONPATH before it
    # a library that imports a side's code (from this process's PYTHONPATH, an editable install) is not preloaded
    roots, libraries = [Path(r).resolve() for r in asked["roots"]], library_dirs()
    sys.path[:] = [p for p in sys.path if not side_code(Path(p or ".").resolve(), roots, libraries)]
    preload(asked["modules"])
    why = unfit("the run's libraries")
    if why:
        print(f"unfit: {why}", file=answers, flush=True)
        return
    print("ready", file=answers, flush=True)
    skip = skipped(roots)
    serve(answers, base_path, Learned(lambda entries: importable(entries, roots, skip, libraries)))


if __name__ == "__main__" and len(sys.argv) == 3:
    main(Path(sys.argv[1]), int(sys.argv[2]))
