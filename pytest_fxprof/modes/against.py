"""``--fxprof-against``: the tests measured in pairs of fresh processes, old code against new: ``AgainstMode`` (the
run) and ``AgainstCalls`` (a test's calls, judged by the paired rule on its pairs).

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
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fxprof.against.answers import first_profile
from pytest_fxprof.against.campaign import AskedTest, early_forker, measure_tests
from pytest_fxprof.against.compare import Against, TestOutcome, judge_test
from pytest_fxprof.against.rounds import AgainstError
from pytest_fxprof.judge.outliers import OUT_OF_LINE
from pytest_fxprof.measure.turns import TurnError
from pytest_fxprof.modes.base import CallPlan, Calls, relaunch_of
from pytest_fxprof.modes.gate import Gate, ahead_of_tests, fixture_tests, say
from pytest_fxprof.options import against_forks, against_options, reactions_of, run_budget
from pytest_fxprof.records.fingerprint import changes_text
from pytest_fxprof.records.verdicts import Status
from pytest_fxprof.result import ProfileResult
from pytest_fxprof.session.ending import ending
from pytest_fxprof.session.reactions import Confirm, OnUnchanged, Outcome
from pytest_fxprof.settings import Mode, Settings

if TYPE_CHECKING:
    from pytest_fxprof.against.rounds import Pairs
    from pytest_fxprof.measure.forking import Forker
    from pytest_fxprof.measure.sampling import Relaunch
    from pytest_fxprof.measure.turns import Turn
    from pytest_fxprof.session.run import RunState
    from pytest_fxprof.views.report import AgainstJSON, ProfileReportJSON


COLD = (
    "the pairs against the revision measure this test in processes of their own; their times and verdict are "
    "in the fxprof summary and its reports"
)
"""What the table of a call says of it against a revision: it is timed in the pairs, not here."""


class AgainstCalls(Calls):
    """Each call as the new side's first process profiled it, where the run's pairs measured the test before the
    tests ran (``ahead``), else captured here (and not timed); when the test passed, each call is judged by the
    paired rule on the test's pairs of old and new processes: those ``ahead``, else pairs measured now for this
    test alone (an xdist worker's)."""

    mode = Mode.AGAINST

    def __init__(
        self,
        test_id: str,
        settings: Settings,
        *,
        against: Against,
        ahead: Pairs | None = None,
        ahead_error: str = "",
        ahead_turns: list[Turn] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(test_id, settings, **kwargs)
        self.against = against
        self.ahead = ahead
        """What the run's pairs measured of this test before the tests ran (None: it is measured as it ends)."""
        self.ahead_error = ahead_error
        self.changes: dict[str, list[str]] = {}
        """Per call whose sides' fingerprints were compared: what differs (empty: the same, decided unchanged)."""
        self.sets: dict[str, tuple[tuple[str, int], ...]] = {}
        """Per call confirmed by a second set of pairs: each set's verdict and pairs (``CallOutcome.sets``)."""
        if ahead is not None and ahead_turns:
            self.taken[""] = list(ahead_turns)  # the turn its pairs measured in, shared with the run's other tests

    def plan(self, key: str) -> CallPlan:
        """Not timed here: the call as the new side's first process profiled it (``first_profile``), where the run's
        pairs measured the test before it ran here (the same code's capture, so this process need not capture it
        again), else captured here."""
        earlier = first_profile(self.ahead, key) if self.ahead is not None and not self.ahead_error else None
        return CallPlan(measured=False, earlier=earlier, cold=COLD)

    def extend_report(self, key: str, report: ProfileReportJSON) -> None:
        """Where a second set of pairs confirmed the call: each set's verdict and pairs; where the sides'
        fingerprints were compared: what differs."""
        if key in self.changes:
            report["fingerprint"] = {"reference": self.against.label, "differences": self.changes[key]}
        if key in self.sets:
            report["sets"] = [{"status": status, "pairs": pairs} for status, pairs in self.sets[key]]

    def waited(self) -> tuple[int, float]:
        """The turns this test took and waited for: not the one its pairs measured in before the tests ran, which
        the run's other tests shared (the run counts it once)."""
        if self.ahead is None:
            return super().waited()
        turns = [t for key, taken in self.taken.items() if key for t in taken]
        return len(turns), sum(t.waited_s for t in turns)

    def _measured(self) -> TestOutcome:
        """The test's pairs (measured before the tests ran, else now, alone) judged call by call."""
        policy = self.settings.paired_policy()
        if self.ahead_error:
            raise AgainstError(self.ahead_error)
        if self.ahead is not None:
            return judge_test(self.against, self.test_id, self.ahead, dict(self.results), policy)
        return self.measure_pairs(
            self.against, dict(self.results), prove=self.reactions.unchanged is OnUnchanged.DECIDE
        )

    def finish(self, run: RunState, passed: bool) -> Outcome:
        """Judge each call against the old side on the test's pairs."""
        outcome = Outcome(warnings=list(self.warnings))
        if not self.results:
            return outcome
        label = self.against.label
        if not passed:  # the test failed or skipped on its own: nothing to compare
            for key, result in self.results.items():
                self.keep(run, self.record_of(key, Status.NOT_COMPARED, result, "the test did not pass"))
            return outcome
        try:
            tested = self._measured()
        except (AgainstError, TurnError) as exc:
            outcome.failures.append(f"fxprof: {self.test_id} against {label}: {exc}")
            for key, result in self.results.items():
                self.keep(run, self.record_of(key, Status.ERROR, result, "see the test's failure"))
            return outcome
        if tested.skipped:
            outcome.warnings.append(f"fxprof: {self.test_id} was not compared: {tested.skipped}")
            for key, result in self.results.items():
                self.keep(run, self.record_of(key, Status.NOT_COMPARED, result, tested.skipped))
            return outcome
        for key, result in self.results.items():
            call = tested.calls.get(key)
            measured = call.profile if call is not None and call.profile is not None else None
            if tested.absent or call is None or call.comparison is None:
                where = "the test" if tested.absent else "this fxprof call"
                shown = ProfileResult.of(replace(measured, seconds=tested.seconds)) if measured is not None else result
                self.results[key] = shown
                self.keep(
                    run, self.record_of(key, Status.NEW, shown, f"{where} does not exist at {label}: not compared")
                )
                continue
            assert measured is not None  # both sides made the call
            judged = ProfileResult.of(replace(measured, comparison=call.comparison, seconds=tested.seconds))
            self.results[key] = judged
            end = ending(
                self.label(key),
                self.test_id,
                judged.comparison,
                self.reactions,
                directory=self.store.directory,
                pairs=call.pairs,
                stopped=call.stopped,
                confirmation=call.confirmation,
            )
            if call.sets:
                self.sets[key] = call.sets
            if call.changes is not None:
                self.changes[key] = call.changes
                if call.changes:  # measured in pairs because its computation differs: say where
                    line = f"measured in pairs, since its computation differs from {label}'s: " + changes_text(
                        call.changes
                    )
                    end.notices.append(line)
                    if end.outcome.failures:
                        end.outcome.failures[-1] += f"\n  {line}"
            outcome.add(end.outcome)
            self.notices[key] = end.notices
            if call.out_of_line:  # asks nothing of the user: the pairs that met one machine decided
                self.notices[key].append(
                    f"{call.out_of_line} of {call.pairs} pairs left out: in each, the typical node's ratio lay more "
                    f"than {OUT_OF_LINE:.0%} from the other pairs' (other work on the machine hit one of its processes)"
                )
            if call.left_out:
                outcome.warnings.append(
                    f"fxprof: {self.label(key)}: {call.left_out} of {call.pairs} pairs left out, their processes "
                    "out of lock-step in this call (one side's test makes calls the other's does not, or a process "
                    "ended early)"
                )
            if call.kept_out_of_step:
                outcome.warnings.append(
                    f"fxprof: {self.label(key)}: {call.kept_out_of_step} of {call.pairs} pairs ran out of "
                    "lock-step in this call and were kept, as fewer than two held it (one side's test makes calls "
                    "the other's does not, or a process ended early): their ratios carry more of the machine's noise"
                )
            self.keep(run, self.record_of(key, end.status, judged))
        return outcome


class AgainstMode(Gate):
    mode = Mode.AGAINST
    calls_class = AgainstCalls
    finds_unused = False

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
