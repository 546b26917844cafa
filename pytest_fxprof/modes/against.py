"""``AgainstMode``: ``--fxprof-against``: the tests measured in pairs of fresh processes, old code against new.

Prepares the old side once per run: its revision exported from git (removed when the run ends; an xdist
worker reuses its controller's export) and its Python checked (it runs, with this version of pytest-fxprof).
Before the tests run, every selected test that uses the fixture is measured in pairs of processes that serve
them all (``against.rounds``), within the run's budget; each test then runs here, is captured, and is judged
on its pairs as it ends. An xdist worker, which does not know its tests ahead, measures each test alone as it
ends.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fxprof.against.campaign import AskedTest, early_forker, measure_tests
from pytest_fxprof.against.compare import Against
from pytest_fxprof.measure.turns import TurnError
from pytest_fxprof.modes.base import relaunch_of
from pytest_fxprof.modes.gate import Gate, ahead_of_tests, fixture_tests, say
from pytest_fxprof.options import against_forks, against_options, reactions_of, run_budget
from pytest_fxprof.session.against import AgainstCalls
from pytest_fxprof.session.reactions import Confirm, OnUnchanged
from pytest_fxprof.settings import Mode

if TYPE_CHECKING:
    from pytest_fxprof.against.rounds import Pairs
    from pytest_fxprof.measure.forking import Forker
    from pytest_fxprof.measure.sampling import Relaunch
    from pytest_fxprof.measure.turns import Turn
    from pytest_fxprof.session.run import RunState
    from pytest_fxprof.views.report import AgainstJSON


class AgainstMode(Gate):
    mode = Mode.AGAINST
    calls_class = AgainstCalls

    def __init__(self, config: pytest.Config, run: RunState) -> None:
        super().__init__(config, run)
        self.against = old_side(config)
        run.against = self.against.label
        self.run_budget_s = run_budget(config)
        self.ahead: dict[str, Pairs] = {}
        """What the pairs measured of each test before the tests ran."""
        self.ahead_error = ""
        """Why they could not (the machine's measuring lock): every test fails with it."""
        self.ahead_turns: list[Turn] = []
        self.early = contextlib.ExitStack()
        """Holds the parent of the sides' processes launched while the tests are collected (``early_forker``)."""
        self.forker: Forker | None = None
        config.add_cleanup(self.early.close)
        self.xdist = config.pluginmanager.hasplugin("xdist") and bool(config.getoption("numprocesses", None))
        if not self.worker and self.xdist:
            run.notes.append(
                "under pytest-xdist each test was measured in pairs of processes of its own (a worker does not know "
                "its tests ahead); without -n, one pair serves every test of the run, which costs far less"
            )

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> None:
        """Launch the parent of the sides' processes as collection starts, where the tests will be measured ahead."""
        if not self.worker and not self.xdist and not self.config.option.collectonly:
            self.forker = self.early.enter_context(early_forker(self.against, relaunch_of(self.config)))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        with self.early:  # the parent ends once the pairs did, or at once where there are none
            if ahead_of_tests(session, self.worker):
                self.measure_ahead(session.items)
        self.forker = None
        return (yield)

    def measure_ahead(self, items: Sequence[pytest.Item]) -> None:
        """Measure every test of ``items`` that uses the fixture in pairs of processes that serve them all: in
        duets where the test runs on the CPU (``auto``: where no accelerator is at hand), the others one process
        after the other."""
        groups: dict[bool, list[AskedTest]] = {True: [], False: []}
        accelerator = _accelerator()
        for item, s in fixture_tests(self, items):
            asked = AskedTest(item.nodeid, s.to_json(), s.paired_policy(), s.pairs, s.max_pairs, s.budget_s)
            groups[s.schedule == "duet" or (s.schedule == "auto" and not accelerator)].append(asked)
        tests = groups[True] + groups[False]
        if not tests:
            return
        config = self.config

        say(
            config,
            f"measuring {len(tests)} test(s) at {self.against.label} and in the working tree, in pairs of fresh "
            f"processes that serve them all (run budget {self.run_budget_s:g} s)",
        )
        began = time.monotonic()

        def progress(number: int, count: int, seconds: float) -> None:
            say(config, f"pair {number}: {count} test(s), {seconds:.0f} s")

        def watch(number: int, test: str, seconds: float) -> None:
            say(config, f"pair {number}: measuring {test} for {seconds:.0f} s")

        turns = self.run.measuring_turns()
        try:
            for duet, group in groups.items():
                if group:
                    self.ahead.update(
                        measure_tests(
                            self.against,
                            relaunch_of(self.config),
                            group,
                            duet=duet,
                            run_budget_s=self.run_budget_s,
                            already_s=time.monotonic() - began,
                            turn=lambda: turns.turn("pairs", self.ahead_turns),
                            progress=progress,
                            watch=watch,
                            spent=self.run.spent,
                            notice=lambda message: say(config, message),
                            launched=self.forker if duet else None,
                            confirm=reactions_of(config).confirm is not Confirm.OFF,
                            prove=reactions_of(config).unchanged is OnUnchanged.DECIDE,
                        )
                    )
        except TurnError as exc:
            self.ahead_error = str(exc)
        self.run.spent.waiting_s += sum(t.waited_s for t in self.ahead_turns)
        undecided = [t for t, got in self.ahead.items() if got.stopped is not None and got.stopped.by_run_budget]
        if undecided:
            say(
                config,
                f"{len(undecided)} test(s) still undecided when the run's time budget ended: {', '.join(undecided)}",
            )
        unconfirmed = [
            t for t, got in self.ahead.items() if got.unconfirmed is not None and got.unconfirmed.by_run_budget
        ]
        if unconfirmed:
            say(
                config,
                f"{len(unconfirmed)} test(s) found slower or undecided were not measured again (the run's time "
                f"budget was spent), their first verdict stands: {', '.join(unconfirmed)}",
            )

    def against_json(self) -> AgainstJSON | None:
        rev = self.against.revision
        return {
            "label": self.against.label,
            "ref": rev.ref if rev is not None else "",
            "commit": rev.sha if rev is not None else "",
            "python": self.against.python or "",
        }

    def call_options(self, item: pytest.Item, relaunch: Relaunch) -> dict[str, Any]:
        return {
            **super().call_options(item, relaunch),
            "against": self.against,
            "ahead": self.ahead.get(item.nodeid),
            "ahead_error": self.ahead_error,
            "ahead_turns": self.ahead_turns,
        }


def _accelerator() -> bool:
    """Whether a test here could run on an accelerator that two processes at once would share (CUDA)."""
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.cuda.is_available())


def old_side(config: pytest.Config) -> Against:
    """The old side of this run: its revision exported from git (removed when the run ends) and its Python."""
    from pytest_fxprof.against.revision import Revision, RevisionError, materialise, remove

    roots = tuple(str(r) for r in config.getini("fxprof_against_roots"))
    fork = against_forks(config)
    ref, python = against_options(config)
    if python is not None:
        python = _old_python(config, python)
    workerinput = getattr(config, "workerinput", None)
    raw = workerinput.get("fxprof_against") if workerinput is not None else None
    if raw and Path(raw["tree"]).is_dir():  # an xdist worker on the controller's machine: its export serves
        return Against(Revision.from_json(raw), python, roots, fork=fork)
    if ref is None:
        return Against(None, python, roots, fork=fork)
    try:
        revision = materialise(str(ref), config.rootpath)
    except RevisionError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.add_cleanup(lambda: remove(revision))
    return Against(revision, python, roots, fork=fork)


def _old_python(config: pytest.Config, python: str) -> str:
    """The old side's interpreter, checked: it runs, and has pytest and this version of pytest-fxprof (the sides
    speak this version's protocol)."""
    from pytest_fxprof._version import __version__

    # a path is relative to where pytest was started (on the command line) or to the ini file (there); a bare
    # name is looked up on PATH
    given_here = config.getoption("fxprof_against_python") is not None
    base = config.invocation_params.dir if given_here or config.inipath is None else config.inipath.parent
    path = Path(base, python) if "/" in python else Path(shutil.which(python) or python)
    flag = f"--fxprof-against-python {python}" if given_here else f"fxprof_against_python = {python} (ini file)"
    if not path.is_file():
        raise pytest.UsageError(
            f"{flag}: no such interpreter ({path}); give the path of another environment's python (for example "
            "../old-venv/bin/python)"
        )
    code = "import pytest, pytest_fxprof; print(pytest_fxprof.__version__)"
    try:
        probe = subprocess.run([str(path), "-c", code], capture_output=True, text=True, errors="replace", check=False)
    except OSError as exc:
        raise pytest.UsageError(
            f"{flag}: {path} cannot be run ({exc}); give the path of a Python interpreter"
        ) from None
    if probe.returncode != 0:
        raise pytest.UsageError(
            f"{flag}: that interpreter cannot import pytest and pytest-fxprof "
            f"({' '.join(probe.stderr.split()[-12:])}); install them there: {path} -m pip install pytest-fxprof"
        )
    theirs = probe.stdout.strip().splitlines()[-1] if probe.stdout.strip() else "?"
    if theirs != __version__:
        raise pytest.UsageError(
            f"{flag}: that interpreter has pytest-fxprof {theirs}, this one {__version__}; the two sides must run one "
            f"version: {path} -m pip install pytest-fxprof=={__version__}"
        )
    return str(path)
