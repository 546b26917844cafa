"""``CheckMode`` and ``UpdateMode``, and ``Gate``: the end of a gated run, which ``AgainstMode`` shares too.

At the end of a gated run the controller writes the queued baselines (when recording), finds the baselines
whose test no longer exists (not against a revision), writes each report view asked for, fails the run for
what it could not do, and writes the terminal summary.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fxprof.against.recorded import RecordedSides, working_revision
from pytest_fxprof.measure.sampling import BUSY_RETRIES, busy
from pytest_fxprof.measure.serving import serve
from pytest_fxprof.measure.turns import TurnError
from pytest_fxprof.modes.base import RunMode, relaunch_of
from pytest_fxprof.options import against_forks, marker_settings, path_setting, settings_of
from pytest_fxprof.session.check import CheckCalls
from pytest_fxprof.session.reactions import OnUnused
from pytest_fxprof.session.update import UpdateCalls
from pytest_fxprof.settings import Mode, Settings, SettingsError
from pytest_fxprof.store.files import unwritable
from pytest_fxprof.views.outputs import VIEWS, write_view

if TYPE_CHECKING:
    from pytest_fxprof.measure.sampling import Child, Relaunch
    from pytest_fxprof.measure.turns import Turn
    from pytest_fxprof.session.run import RunState
    from pytest_fxprof.views.report import AgainstJSON

WAIT_SHOWN_S = 0.5
"""Less time waited for measuring turns than this is not worth a line in the summary (shown with ``-v``)."""


@dataclass
class Final:
    """What the session's end wrote and found, for the terminal summary."""

    written: list[Path] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    outputs: list[Path] = field(default_factory=list)


class Gate(RunMode):
    """A run that judges or records: its end writes and sums up."""

    def __init__(self, config: pytest.Config, run: RunState) -> None:
        super().__init__(config, run)
        self.final: Final | None = None

    def against_json(self) -> AgainstJSON | None:
        """The old side of a run against a revision, as its report records it."""
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.worker:
            return
        config, run = self.config, self.run
        errors: list[str] = list(run.errors)
        written: list[Path] = []
        if run.mode is Mode.UPDATE:
            written, failed = run.write_baselines()
            errors += failed
        unused = run.unused(_selected_paths(session), config.rootpath) if run.mode is not Mode.AGAINST else []
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
        failing_unused = unused and run.reactions.unused is OnUnused.FAIL and run.mode is Mode.CHECK
        if (errors or failing_unused) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.worker:
            return
        run, tr, verbose = self.run, terminalreporter, config.getoption("verbose") > 0
        tr.section("fxprof")
        if run.against:
            tr.write_line(f"against {run.against}: old and new code measured in pairs of fresh processes")
        records = sorted(run.records, key=lambda r: (r["test_id"], r["key"]))
        if not records and run.failed_calls:
            tr.write_line(
                f"no profile was taken: {run.failed_calls} call(s) of the fxprof fixture failed (their tests say why)"
            )
        elif not records and exitstatus == pytest.ExitCode.INTERRUPTED:
            tr.write_line("interrupted before any profile was taken", yellow=True)
        elif not records:
            tr.write_line("no test called the fxprof fixture")
        from pytest_fxprof.views.terminal import allocator_lines, busy_counts, profile_lines

        for text, colour in allocator_lines(records):
            tr.write_line(text, **({colour: True} if colour else {}))
        for record in records:
            for text, colour in profile_lines(record, verbose=verbose):
                tr.write_line(text, **({colour: True} if colour else {}))
        busy_count = busy_counts(records)
        if busy_count:
            tr.write_line(busy_count, yellow=True)
        if run.turns and run.lock_path and (run.waited_s >= WAIT_SHOWN_S or verbose):
            tr.write_line(
                f"measured one at a time on this machine: {run.turns} measuring turn(s), {run.waited_s:.1f} s spent "
                f"waiting for other processes' turns (lock {run.lock_path})"
            )
        if records and (run.spent.processes or verbose):
            tr.write_line(f"where the time went: {run.spent.line()}")
        for note in run.notes:
            tr.write_line(note, yellow=True)
        for test_id, keys in sorted(run.dropped.items()):
            tr.write_line(f"{test_id}: dropped baseline entries no longer called: {', '.join(keys)}", yellow=True)
        if self.final is not None:
            self._final_lines(tr, self.final)

    def _final_lines(self, tr: Any, final: Final) -> None:
        run = self.run
        if final.written:
            tr.write_line(f"wrote {len(final.written)} baseline file(s) to {run.store.directory}", green=True)
        if final.unused:
            verb = "failing" if run.reactions.unused is OnUnused.FAIL and run.mode is Mode.CHECK else "warning"
            tr.write_line(
                f"{len(final.unused)} baseline(s) whose test no longer exists, or unreadable ({verb}; delete them, "
                "or fix the unreadable ones):",
                yellow=True,
            )
            for name in final.unused:
                tr.write_line(f"  {name}")
        for error in final.errors:
            tr.write_line(error, red=True)
        for path in final.outputs:
            tr.write_line(f"report: {path}")


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


class CheckMode(Gate):
    """``--fxprof``: each test's calls checked against their stored baselines; where a model's code changed since
    its baseline was recorded, against the revision it was recorded at too (``session.check``), whose tree is
    checked out once per run when first needed and removed when the run ends."""

    mode = Mode.CHECK
    calls_class = CheckCalls

    def __init__(self, config: pytest.Config, run: RunState) -> None:
        super().__init__(config, run)
        roots = tuple(str(r) for r in config.getini("fxprof_against_roots"))
        self.recorded = RecordedSides(config.rootpath, roots, fork=against_forks(config))
        config.add_cleanup(self.recorded.close)

    def call_options(self, item: pytest.Item, relaunch: Relaunch) -> dict[str, Any]:
        return {**super().call_options(item, relaunch), "recorded": self.recorded}


class UpdateMode(Gate):
    """``--fxprof-update``: each test's calls recorded as its baseline. Refused before anything is measured
    where the baselines' directory cannot be written. Before the tests run, fresh processes that serve every
    selected test that uses the fixture measure them (each test's ``processes - 1``, the least disturbed of up to
    ``BUSY_RETRIES`` more where one was busy); each test then runs here, is measured here too, and takes its
    fresh processes' runs as it ends. An xdist worker, which does not know its tests ahead, starts each test's
    fresh processes as the test ends."""

    mode = Mode.UPDATE
    calls_class = UpdateCalls

    def __init__(self, config: pytest.Config, run: RunState) -> None:
        super().__init__(config, run)
        self.ahead: dict[str, list[list[Child]]] = {}
        """Per test, per fresh process, its tries, measured before the tests ran."""
        self.ahead_turns: list[Turn] = []
        problem = None if self.worker else unwritable(run.store.directory)
        if problem:
            raise pytest.UsageError(
                f"--fxprof-update cannot write baselines to {run.store.directory}: {problem}. Make it writable, or "
                "record them elsewhere with --fxprof-baseline-dir (or the fxprof_baseline_dir ini key)"
            )
        run.revision, why = working_revision(config.rootpath, run.store.directory)
        if why and not self.worker:
            run.notes.append(
                f"the baselines name no git revision ({why}): a check of code changed since then will measure it "
                "against the commit that writes them; commit the baselines with the code they measured"
            )

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        if ahead_of_tests(session, self.worker):
            try:
                self.record_ahead(session.items)
            except TurnError as exc:  # each test then starts its own processes, and fails on the lock with it
                self.run.notes.append(f"fxprof: the fresh processes could not be started ahead of the tests: {exc}")
        return (yield)

    def record_ahead(self, items: Sequence[pytest.Item]) -> None:
        """Measure every test of ``items`` that uses the fixture in fresh processes that serve them all, one after
        the other: process ``i`` serves the tests that ask for more than ``i`` processes; a test measured on a
        busy machine is measured again, up to ``BUSY_RETRIES`` times, in a process of its own round."""
        tests = fixture_tests(self, items)
        counts = {item.nodeid: s.processes - 1 for item, s in tests if s.processes > 1}
        settings = {item.nodeid: s.to_json() for item, s in tests}
        if not counts:
            return
        relaunch = relaunch_of(self.config)
        say(self.config, f"recording {len(counts)} test(s) in fresh processes that serve them all")
        with self.run.measuring_turns().turn("fresh processes", self.ahead_turns):
            for i in range(1, max(counts.values()) + 1):
                pending = [t for t, n in counts.items() if n >= i]
                for _ in range(BUSY_RETRIES + 1):
                    if not pending:
                        break
                    got = serve(
                        relaunch, [(t, {"settings": settings[t]}) for t in pending], extra={}, spent=self.run.spent
                    )
                    for t in pending:
                        tries = self.ahead.setdefault(t, [])
                        if len(tries) < i:
                            tries.append([])
                        failed = got.failed.get(t)
                        tries[i - 1].append(failed[1] if failed is not None else got.measured[t]["fresh"])
                    pending = [t for t in pending if t not in got.failed and busy(self.ahead[t][i - 1][-1])]
                say(self.config, f"fresh process {i}: {len([t for t, n in counts.items() if n >= i])} test(s)")
        self.run.spent.waiting_s += sum(t.waited_s for t in self.ahead_turns)

    def call_options(self, item: pytest.Item, relaunch: Relaunch) -> dict[str, Any]:
        return {**super().call_options(item, relaunch), "ahead": self.ahead.get(item.nodeid, [])}


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
