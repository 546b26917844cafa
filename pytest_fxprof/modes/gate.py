"""``Gate``: what the gated modes share (``check``, ``update``, ``against``): the end of their run, and the tests
of a run that use the fixture, found before they run.

At the end of a gated run the controller writes the queued baselines (when recording), finds the baselines
whose test no longer exists (not against a revision), writes each report view asked for, fails the run for
what it could not do, and writes the terminal summary (``views.terminal.run_lines``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from pytest_fxprof.modes.base import RunMode
from pytest_fxprof.options import marker_settings, path_setting, settings_of
from pytest_fxprof.settings import Settings, SettingsError
from pytest_fxprof.views.outputs import VIEWS, write_view
from pytest_fxprof.views.terminal import Final, RunFacts, run_lines

if TYPE_CHECKING:
    from pytest_fxprof.session.run import RunState
    from pytest_fxprof.views.report import AgainstJSON


class Gate(RunMode):
    """A run that judges or records: its end writes and sums up."""

    finds_unused: ClassVar[bool] = True
    """Whether its end looks for baselines whose test no longer exists (not against a revision: none is read)."""

    def __init__(self, config: pytest.Config, run: RunState) -> None:
        super().__init__(config, run)
        self.final: Final | None = None

    def against_json(self) -> AgainstJSON | None:
        """The old side of a run against a revision, as its report records it."""
        return None

    def write(self) -> tuple[list[Path], list[str]]:
        """What the run's end writes besides its report views (a recording: its baselines), and what failed."""
        return [], []

    def unused_fails(self) -> bool:
        """Whether a baseline whose test no longer exists fails the run (a check's choice, ``--fxprof-on-unused``)."""
        return False

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.worker:
            return
        config, run = self.config, self.run
        written, failed = self.write()
        errors: list[str] = [*run.errors, *failed]
        unused = run.unused(_selected_paths(session), config.rootpath) if self.finds_unused else []
        outputs: list[Path] = []
        for name in ("report", *VIEWS):
            path = path_setting(config, name, None)
            if path is None:
                continue
            try:
                outputs.extend(
                    write_view(
                        name,
                        path,
                        run.mode.value,
                        run.records,
                        unused,
                        against=self.against_json(),
                        time=run.spent.to_json(),
                    )
                )
            except (OSError, ValueError) as exc:
                errors.append(f"could not write the {name.replace('_', '-')} report {path}: {exc}")
        self.final = Final(written, unused, errors, outputs)
        if (errors or (unused and self.unused_fails())) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.worker:
            return
        run = self.run
        facts = RunFacts(
            against=run.against,
            failed_calls=run.failed_calls,
            turns=run.turns,
            waited_s=run.waited_s,
            lock_path=run.lock_path,
            spent=run.spent.line(),
            processes=bool(run.spent.processes),
            notes=run.notes,
            dropped=run.dropped,
            directory=run.store.directory,
            unused_fails=self.unused_fails(),
        )
        terminalreporter.section("fxprof")
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        verbose = config.getoption("verbose") > 0
        for text, colour in run_lines(run.records, facts, self.final, verbose=verbose, interrupted=interrupted):
            terminalreporter.write_line(text, **({colour: True} if colour else {}))


def _selected_paths(session: pytest.Session) -> list[Path] | None:
    """The files and directories this run selected whole, or None if it selected anything finer."""
    config = session.config
    if config.getoption("keyword") or config.getoption("markexpr"):
        return None
    paths = []
    for arg in config.args:
        if "::" in arg:
            return None
        paths.append(config.invocation_params.dir / arg)
    return paths


def ahead_of_tests(session: pytest.Session, worker: bool) -> bool:
    """Whether the run measures its tests' fresh processes before the tests run: not in an xdist worker (which
    does not know its tests ahead), not when it only collects or its collection failed."""
    config = session.config
    collection_failed = session.testsfailed and not config.option.continue_on_collection_errors
    return not worker and not config.option.collectonly and not collection_failed and bool(session.items)


def fixture_tests(mode: RunMode, items: Sequence[pytest.Item]) -> list[tuple[pytest.Item, Settings]]:
    """The tests of ``items`` that use the fixture, with their settings (one whose markers cannot be applied is
    left out: the fixture fails it, saying why)."""
    base = settings_of(mode.config)
    out = []
    for item in items:
        if "fxprof" not in getattr(item, "fixturenames", ()):
            continue
        try:
            out.append((item, mode.settings(item, marker_settings(item, base))))
        except SettingsError:
            continue
    return out


def say(config: pytest.Config, text: str) -> None:
    """A line on the terminal while the run measures ahead of its tests."""
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(f"fxprof: {text}")
