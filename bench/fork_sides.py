"""A check against a revision whose side processes are forked from one parent that imported the tests' libraries.

    .venv/bin/python bench/suite_cost.py --suite 5 --runs 3 --fork-sides --out bench/suite_cost_fork_sides.jsonl

A pytest plugin for the benches, not part of the package: loaded with ``-p fork_sides`` (this directory on
``PYTHONPATH``; ``bench/suite_cost.py --fork-sides`` does both), it replaces how ``pytest_fxprof.measure.serving``
starts a side's process. The first time a pair starts, the run starts one parent process ("zygote") that imports
what the run's own process has imported by then (it has captured every test, so that is torch, pytest, the
plugin and the tests' libraries), except anything from the run's directory, its root or the old side's import
roots: either side's own code. Every process of every pair is then forked from that one parent, both sides'
alike (``bench/fork_spread.py``: forked from a parent per side, the pairs no longer sampled all the spread between
processes; from one parent for both sides, they did), and runs ``pytest`` as a fresh process would: the side's
directory, environment, ``sys.path`` and arguments, its output into a file. The rest of the check (lock-step,
deadlines, settling, the verdicts) is the plugin's, unchanged.

What it does not do, being a bench: an old side with its own interpreter (``--fxprof-against-python``) is started
fresh as before; a forked child shares its parent's hash seed and ``random`` state (``random`` is seeded again).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_fxprof.measure import sampling, serving

_ZYGOTES: list[Zygote] = []
"""The run's zygote, once started."""
_ORIGINAL_START = sampling.start
_ROOTS: list[Path] = []
"""Where the run's own code lies (its root and directory), beside each side's import roots."""


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("fxprof_sample", None) is None:  # the run's own process, not a side's
        _ROOTS[:] = [config.rootpath.resolve(), config.invocation_params.dir.resolve()]
        serving.start = forked_start  # type: ignore[attr-defined]


def pytest_unconfigure(config: pytest.Config) -> None:
    while _ZYGOTES:
        _ZYGOTES.pop().close()


class Forked:
    """A forked side process as ``sampling.finish`` and ``serving`` use a ``subprocess.Popen``: its end (exit
    status, or minus the signal) read from the file the zygote writes when it reaps it; its output from a file."""

    def __init__(self, pid: int, args: Sequence[str], status: Path, output: Path) -> None:
        self.pid = pid
        self.args = list(args)
        self.status = status
        self.output = output
        self.returncode: int | None = None
        self.chunks: list[str] = []
        self.reader = threading.Thread(target=lambda: None)
        self.reader.start()

    def poll(self) -> int | None:
        if self.returncode is None and self.status.is_file():
            self.returncode = int(self.status.read_text(encoding="utf-8"))
            self.chunks.append(self.output.read_text(encoding="utf-8", errors="replace"))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class Zygote:
    """The parent of every side process of the run: started once, told per process what to run."""

    def __init__(self, preload: Sequence[str], directory: Path) -> None:
        listing = directory / "preload.json"
        listing.write_text(json.dumps(list(preload)), encoding="utf-8")
        cmd = [sys.executable, __file__, "--zygote", str(listing), str(os.getpid())]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline().strip()
        if ready != "ready":
            raise RuntimeError(f"the zygote did not start ({ready!r}, exit status {self.proc.poll()})")

    def fork(self, order: Mapping[str, Any]) -> int:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(order) + "\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _own_code(relaunch: sampling.Relaunch) -> list[Path]:
    return [
        *_ROOTS,
        relaunch.rootdir.resolve(),
        relaunch.invocation_dir.resolve(),
        *(Path(p).resolve() for p in relaunch.path),
    ]


def preloadable(modules: Mapping[str, Any], roots: Sequence[Path]) -> list[str]:
    """The modules of ``modules`` (in import order) that a zygote may import: those from a file outside every
    one of ``roots`` (the code of either side)."""
    out = []
    for name, module in list(modules.items()):
        file = str(getattr(module, "__file__", None) or "")
        if name == "__main__" or name.startswith("fork_sides") or not file:
            continue
        path = Path(file).resolve()
        if not any(path.is_relative_to(root) for root in roots):
            out.append(name)
    return out


def forked_start(relaunch: sampling.Relaunch, request: dict[str, Any], directory: Path) -> Any:
    """``sampling.start``, forking the process from the run's zygote."""
    if relaunch.python != sys.executable:
        return _ORIGINAL_START(relaunch, request, directory)
    if not _ZYGOTES:
        _ZYGOTES.append(Zygote(preloadable(sys.modules, _own_code(relaunch)), directory))
    zygote = _ZYGOTES[0]
    path = directory / "request.json"
    path.write_text(json.dumps({**request, "parent": zygote.proc.pid}), encoding="utf-8")
    cmd = relaunch.command([t["test_id"] for t in request["tests"]], path)
    status, output = directory / "status", directory / "output.txt"
    pid = zygote.fork(
        {
            "args": cmd[3:],  # after `python -m pytest`
            "cwd": str(relaunch.invocation_dir),
            "env": sampling.child_env(relaunch),
            "status": str(status),
            "output": str(output),
        }
    )
    return Forked(pid, cmd, status, output)


def zygote(listing: Path, parent: int) -> None:
    """Import the modules ``listing`` names, then fork a side process per line on stdin (answering its pid), and
    write each one's exit status (minus the signal that ended it) into its ``status`` file once it ended."""
    sampling.die_with_parent(parent)
    answers = os.fdopen(os.dup(1), "w")  # what the imports print goes to stderr, not into the answers
    os.dup2(2, 1)
    for name in json.loads(listing.read_text(encoding="utf-8")):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 (a module that cannot be imported again is left to the side)
            continue
    base_path = [p for p in sys.path[1:] if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    print("ready", file=answers, flush=True)
    children: dict[int, Path] = {}
    stdin_open = True
    while stdin_open or children:
        if stdin_open and select.select([sys.stdin], [], [], 0.02)[0]:
            line = sys.stdin.readline()
            if not line:
                stdin_open = False
                continue
            order = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                answers.close()
                _side(order, base_path)
            children[pid] = Path(order["status"])
            print(pid, file=answers, flush=True)
        elif not stdin_open:
            time.sleep(0.02)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            code = os.waitstatus_to_exitcode(status)
            done = children.pop(pid)
            part = done.with_suffix(".part")
            part.write_text(str(code), encoding="utf-8")
            part.replace(done)


def _side(order: Mapping[str, Any], base_path: Sequence[str]) -> None:
    """In the forked child: become ``python -m pytest ARGS`` in the side's directory and environment."""
    code = 1
    try:
        out = os.open(order["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.chdir(order["cwd"])
        os.environ.clear()
        os.environ.update(order["env"])
        extra = [p for p in order["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [order["cwd"], *extra, *base_path]
        sys.argv = ["pytest", *order["args"]]
        random.seed()
        code = pytest.console_main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 (anything else ends the side as a crash would)
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(int(code))


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--zygote":
    zygote(Path(sys.argv[2]), int(sys.argv[3]))
