"""Side processes forked from one parent: a check's pairs without an interpreter and its imports per process.

Owns ``Forker`` (the run's half of ``measure.zygote``: it starts the parent when the first process is asked for,
then has it fork each one, and ends it), ``Forked`` (a forked side as ``measure.serving`` waits for it, like a
``subprocess.Popen``) and ``preloadable`` (which of the run's modules the parent may import).

One parent forks both sides of every pair, so that what a process inherits from it is the same for both sides and
divides out of each pair's ratio; a parent per side would add a factor that stays within a check and changes between
checks (BENCHMARKS.md, "both sides of every pair forked from one process"). The parent imports what the run has
imported (torch, pytest and its plugins, the tests' libraries) except the code of either side: every module from a
file under the run's root or directory or a side's import roots. Each child then becomes ``python -m pytest ...`` as
a fresh process would: the side's directory, environment, import path and arguments. Between pairs the parent also
imports, by the same rules, what the children of both sides imported as their tests ran (``zygote.Learned``):
libraries a test imports in its body.

Forking is used where it is safe and was measured: on Linux, with this interpreter on both sides, for duets (the
sides on the CPU). Where the parent cannot start or would fork unsafely (a thread started while it imported),
the processes start fresh, and ``Forker.problem`` says why.

Must not import torch or pytest.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_fxprof.measure import zygote
from pytest_fxprof.measure.sampling import Process, Relaunch, child_env, start, tail, write_request
from pytest_fxprof.measure.zygote import importable, library_dirs, skipped

READY_S = 300.0
"""How long the parent may take to import the run's libraries before the check gives up forking."""
CLOSE_S = 30.0
"""How long the parent may take to end once told to (its children ended before)."""
QUIET_REWRITE = ("-W", "ignore::pytest.PytestAssertRewriteWarning")
"""Added to a forked side's pytest: the parent imported the installed pytest plugins (and a library may import a
plugin's module: transformers imports anyio), which pytest then warns it cannot rewrite, an error under
``filterwarnings = error``. A fresh process imports them after pytest's import hook, which rewrites the asserts
in a plugin's own code: what a plugin's failing assert says, never what is measured."""


def can_fork() -> bool:
    """Whether side processes may be forked here (Linux: elsewhere forking after importing torch is unsafe)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def preloadable(modules: Mapping[str, Any], roots: Iterable[Path], libraries: Iterable[Path] = ()) -> list[str]:
    """The names of ``modules`` (in import order) that the parent may import: each from a file in ``libraries``
    or outside every one of ``roots`` (the code of either side), and not of a name that a root holds (a side
    imports that from its tree, not the installed copy)."""
    under = [r.resolve() for r in roots]
    entries = [(name, getattr(module, "__file__", None)) for name, module in list(modules.items())]
    return importable(entries, under, skipped(under), [d.resolve() for d in libraries])


class Forked:
    """A forked side, as ``sampling.finish`` and ``measure.serving`` use a ``subprocess.Popen``: its exit status
    (minus the signal that ended it) from the file the parent writes when it reaps it; its output from its file
    once it ended."""

    def __init__(
        self, pid: int, args: Sequence[str], status: Path, output: Path, parent: subprocess.Popen[str]
    ) -> None:
        self.pid = pid
        self.args = list(args)
        self.status = status
        self.output = output
        self.parent = parent
        self.returncode: int | None = None
        self.chunks: list[str] = []

    def poll(self) -> int | None:
        if self.returncode is None:
            if self.status.is_file():
                self.returncode = int(self.status.read_text(encoding="utf-8"))
            elif self.parent.poll() is not None:  # the parent died, and its children with it
                self.returncode = -signal.SIGKILL
            if self.returncode is not None:
                with contextlib.suppress(OSError):
                    self.chunks.append(self.output.read_text(encoding="utf-8", errors="replace"))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.02)
        return code

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class Forker:
    """The parent of a check's side processes: started by ``launch`` or the first ``start`` (with the modules the
    run has imported by then, or ``modules``, but those under ``roots``), ended by ``close``. ``start`` is
    ``sampling.start``'s equal; where the parent could not start, or may no longer fork, it starts fresh processes
    (``problem`` says why)."""

    def __init__(
        self,
        roots: Sequence[Path],
        directory: Path,
        modules: Mapping[str, Any] | None = None,
    ) -> None:
        self.roots = list(roots)
        self.directory = directory
        self.modules = modules
        self.parent: subprocess.Popen[str] | None = None
        self.problem = ""
        self.forked = 0
        self.listed: set[str] = set()
        """The modules the parent was asked to import."""
        self.ready = False

    def launch(self, ahead: Sequence[str] = ()) -> None:
        """Start the parent now, with the modules the run has imported so far and those of ``ahead`` that the rules
        allow (a library every run imports later, such as torch), so that its imports overlap the run's own
        (collecting the tests); the first ``start`` waits for it and has it import what the run imported since."""
        if self.parent is not None or self.problem:
            return
        modules = sys.modules if self.modules is None else self.modules
        roots, libraries = [r.resolve() for r in self.roots], library_dirs()
        preload = preloadable(modules, roots, libraries)
        preload += importable(_origins(n for n in ahead if n not in modules), roots, skipped(roots), libraries)
        listing = self.directory / "preload.json"
        listing.write_text(json.dumps({"modules": preload, "roots": [str(r) for r in self.roots]}), encoding="utf-8")
        cmd = [sys.executable, str(Path(zygote.__file__).resolve()), str(listing), str(os.getpid())]
        with (self.directory / "parent.log").open("w", encoding="utf-8") as err:  # what its imports print
            self.parent = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        self.listed = set(preload)

    def _begin(self) -> subprocess.Popen[str] | None:
        early = self.parent is not None  # launched before: the run may have imported more since
        self.launch()
        parent = self.parent
        if parent is None or self.ready:
            return parent
        assert parent.stdin is not None
        assert parent.stdout is not None
        answer = parent.stdout.readline().strip() if _readable(parent.stdout, READY_S) else ""
        since = []
        if early and answer == "ready":
            modules = sys.modules if self.modules is None else self.modules
            since = [n for n in preloadable(modules, self.roots, library_dirs()) if n not in self.listed]
        if since:  # what the run imported after it launched the parent
            self.listed.update(since)
            try:
                parent.stdin.write(json.dumps({"import": since}) + "\n")
                parent.stdin.flush()
                answer = parent.stdout.readline().strip() if _readable(parent.stdout, READY_S) else ""
            except OSError:
                answer = ""
        if answer != "ready":
            self.close()
            said = tail((self.directory / "parent.log").read_text(encoding="utf-8", errors="replace").strip())
            ended = f"the parent of the side processes did not start (exit status {parent.poll()})"
            self.problem = _refused(answer, ended + (f": {said}" if said else ""))
            return None
        self.ready = True
        return parent

    def start(self, relaunch: Relaunch, request: dict[str, Any], directory: Path) -> Process:
        """A side's process for ``request``: forked from the parent (started now if it is not yet), or fresh
        where the parent could not start."""
        parent = self._begin() if relaunch.python == sys.executable else None
        if parent is None or parent.poll() is not None:
            return start(relaunch, request, directory)
        assert parent.stdin is not None
        assert parent.stdout is not None
        cmd = write_request(relaunch, request, directory, parent.pid)
        if cmd[1:3] == ["-m", "pytest"]:
            cmd += QUIET_REWRITE
        status, output = directory / "status", directory / "output.txt"
        order = {
            "argv": cmd[1:],  # after the interpreter
            "cwd": str(relaunch.invocation_dir),
            "env": child_env(relaunch),
            "status": str(status),
            "output": str(output),
            "imported": str(directory / "imported.json"),
            "tree": str(relaunch.rootdir),
        }
        answer = ""
        try:
            parent.stdin.write(json.dumps(order) + "\n")
            parent.stdin.flush()
            answer = parent.stdout.readline().strip()
            pid = int(answer)
        except (OSError, ValueError):  # the parent died or may not fork: this process and the later ones start fresh
            self.problem = _refused(answer, f"the parent of the side processes ended (exit status {parent.poll()})")
            self.close()
            return start(relaunch, request, directory)
        self.forked += 1
        return Forked(pid, cmd, status, output, parent)

    def close(self) -> None:
        """End the parent once its children ended (it waits for them); kill it if it does not end in time."""
        if self.parent is not None:
            _end(self.parent)
            self.parent = None


def _origins(names: Iterable[str]) -> list[tuple[str, str | None]]:
    """Each of ``names`` (top-level modules not imported yet) with the file it would be imported from, if any."""
    out = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        out.append((name, spec.origin if spec is not None else None))
    return out


def _refused(answer: str, otherwise: str) -> str:
    """Why the parent will not fork: the reason of its ``unfit: WHY`` answer, else ``otherwise`` (it ended)."""
    return answer.removeprefix("unfit: ") if answer.startswith("unfit: ") else otherwise


def _readable(stream: Any, timeout_s: float) -> bool:
    return bool(select.select([stream], [], [], timeout_s)[0])


def _end(parent: subprocess.Popen[str]) -> None:
    with contextlib.suppress(OSError):
        if parent.stdin is not None:
            parent.stdin.close()
    try:
        parent.wait(timeout=CLOSE_S)
    except subprocess.TimeoutExpired:
        parent.kill()
        parent.wait()
    if parent.stdout is not None:
        parent.stdout.close()
