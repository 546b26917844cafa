"""Each test of a side process in a process of its own: forked from the process that collected the tests.

Owns ``run_forked`` (one test's whole protocol, setup to teardown, in a child forked for it; its reports handed
back to the process's pytest as if it had run there) and ``unfit`` (why this process may not fork now).

A process that serves several tests (a recording's, a pair's against a revision) imported torch and the tests'
modules once; what each test changes of the process (a function it replaces and never restores, the default
dtype, the threads, grad mode, a module-level cache) dies with the child it ran in, so that no test's leak reaches
the tests after it, in an order that changes from pair to pair. What the collecting process holds is shared
copy-on-write. The child also ends with that process (``die_with_parent``), so a side stopped for a hung test
takes its test with it.

Forking is safe only while the process runs one thread: GNU OpenMP's pool, started by the first parallel operator
(a model run at import), does not survive a fork, and the child would hang in its first parallel region. Where
the process runs more threads, its tests run in it, one after the other, as before, and ``unfit`` says why.

Imported only by a process that serves tests (it imports pytest's runner).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from _pytest.runner import runtestprotocol

from pytest_fxprof.measure.zygote import die_with_parent


def threads() -> int:
    """How many threads this process runs (Linux: native ones, OpenMP's pool included; elsewhere Python's)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def unfit() -> str:
    """Why this process may not fork a test's process now, or ``""``."""
    if not (sys.platform.startswith("linux") and hasattr(os, "fork")):
        return "forking a process that imported torch is safe only on Linux"
    running = threads()
    if running > 1:
        return (
            f"the process runs {running} threads (an operator run while the tests were collected starts torch's "
            "thread pool, which a fork does not carry)"
        )
    return ""


def _reports_to(path: Path, item: pytest.Item, reports: list[pytest.TestReport], imported: list[str]) -> None:
    hook = item.config.hook
    data = [hook.pytest_report_to_serializable(config=item.config, report=r) for r in reports]
    path.write_text(json.dumps({"reports": data, "imported": imported}, default=str), encoding="utf-8")


def _reports_from(path: Path, item: pytest.Item) -> tuple[list[pytest.TestReport], list[str]]:
    """The reports a test's process handed back, and the modules it imported, in their order."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return [], []
    if not isinstance(raw, dict):
        return [], []
    out = []
    for data in raw.get("reports", []):
        if isinstance(data.get("longrepr"), list):  # a skip's (path, line, reason), a list once in JSON
            data["longrepr"] = tuple(data["longrepr"])
        report = item.config.hook.pytest_report_from_serializable(config=item.config, data=data)
        if isinstance(report, pytest.TestReport):
            out.append(report)
    return out, [str(m) for m in raw.get("imported", [])]


def _import_too(names: list[str]) -> None:
    """Import here what a test's process imported (a library its test imports in its body, the lazy submodules
    of torch and of the model's library that its first call pulls in), in the order it did: the tests after it
    fork with them imported, as they would have found them in a process they shared, and the side's parent learns
    them as this process ends (``measure.zygote``). One that fails to import here is left to the tests."""
    for name in names:
        if name not in sys.modules:
            with contextlib.suppress(Exception):
                importlib.import_module(name)


def _ended(item: pytest.Item, status: int) -> pytest.TestReport:
    """The report of a test whose process ended before it handed back its reports (it crashed, or exited)."""
    code = os.waitstatus_to_exitcode(status)
    how = f"signal {-code}" if code < 0 else f"exit status {code}"
    return pytest.TestReport(
        item.nodeid, item.location, {}, "failed", f"the test's own process ended ({how}) while running it", "call"
    )


INTERRUPTING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that end a test's process as an interruption (Ctrl-C, a cancelled job, a closed terminal): they
end the process that forked it too, as they would have ended it had the test run there."""


def _interrupted(status: int) -> None:
    """End this process as the test's process ended, where an interrupting signal ended it."""
    if not os.WIFSIGNALED(status) or os.WTERMSIG(status) not in INTERRUPTING:
        return
    sig = os.WTERMSIG(status)
    if sig == signal.SIGINT:
        raise KeyboardInterrupt
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)


def run_forked(item: pytest.Item) -> bool:
    """Run ``item``'s protocol in a child forked for it and log its reports here; True (the protocol ran)."""
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    with tempfile.TemporaryDirectory(prefix="fxprof-test-") as directory:
        path = Path(directory) / "reports.json"
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the test's process: run it, hand back its reports, end without the parent's exit handlers
            code = 0
            try:
                die_with_parent(parent)
                before = set(sys.modules)
                reports = runtestprotocol(item, log=False, nextitem=None)
                _reports_to(path, item, reports, [m for m in list(sys.modules) if m not in before])
            except BaseException:  # noqa: BLE001 (whatever ended it, the parent reports it)
                code = 1
            finally:
                for stream in (sys.stdout, sys.stderr):
                    with contextlib.suppress(Exception):
                        stream.flush()
                os._exit(code)
        try:
            _, status = os.waitpid(pid, 0)
        except BaseException:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            raise
        reports, imported = _reports_from(path, item)
    _interrupted(status)
    _import_too(imported)
    if not reports or status != 0:
        reports.append(_ended(item, status))
    for report in reports:
        ihook.pytest_runtest_logreport(report=report)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def isolating(item: pytest.Item, notes: dict[str, Any]) -> bool:
    """Run ``item`` in a process of its own where this process may fork (True), else note why not (False)."""
    why = unfit()
    if why:
        notes[item.nodeid] = why
        return False
    return run_forked(item)
