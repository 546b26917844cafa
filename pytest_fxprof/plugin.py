"""The pytest plugin: the options, the ``fxprof`` marker and fixture, and hooks that hand over to the run's mode.

``pytest_configure`` picks the mode (``modes``) and registers it, so that the hooks only one mode needs live
with it; the hooks here serve every mode in a few lines each. Owns nothing else that touches pytest.

Must not import torch at module level: pytest loads every installed plugin on every run, and most runs never
profile anything.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

import pytest

from pytest_fxprof.measure.sampling import SamplingError
from pytest_fxprof.measure.turns import TurnError
from pytest_fxprof.modes.base import CALLS_KEY, Calls, OffMode, RunMode, relaunch_of
from pytest_fxprof.options import (
    MARKER,
    add_options,
    against_options,
    lock_path,
    marker_settings,
    path_setting,
    reactions_of,
    settings_of,
)
from pytest_fxprof.result import ProfileResult
from pytest_fxprof.session.reactions import Outcome, UsageError
from pytest_fxprof.session.run import RunState
from pytest_fxprof.settings import SETTING_NAMES, Mode, Settings, SettingsError
from pytest_fxprof.store.baseline import BaselineError, BaselineStore

MODE_KEY = pytest.StashKey[RunMode]()
SETTINGS_KEY = pytest.StashKey[Settings]()
SPOILED_KEY = pytest.StashKey[bool]()
SKIPPED_KEY = pytest.StashKey[bool]()
"""Set on a test that fxprof skipped (a missing baseline, another setup, no verdict), to report the skip there."""


class FxprofWarning(UserWarning):
    """What the gate asks of the user without failing the test: a changed graph, a faster model, a baseline
    recorded on a busy machine, an undecided check under ``--fxprof-on-undecided=pass-with-warning``. Public as
    ``pytest_fxprof.FxprofWarning``, for ``filterwarnings``."""


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def refuse_blank(config: pytest.Config) -> None:
    """A usage error for an ``--fxprof-*`` option given an empty or blank value: an unset variable in CI
    (``--fxprof-against=$BASE_REF``) would otherwise leave the option out, and the gate off."""
    for name, got in sorted(vars(config.option).items()):
        if name.startswith("fxprof") and isinstance(got, str) and not got.strip():
            flag, what = "--" + name.replace("_", "-"), "the git revision" if name == "fxprof_against" else "a value"
            raise pytest.UsageError(
                f"{flag} was given an empty value ({got!r}), as an unset variable in a CI script gives "
                f"({flag}=$BASE_REF with BASE_REF unset), and the gate would run as if the option were not there: "
                f"give {what}, or leave the option out"
            )


def _mode(config: pytest.Config) -> Mode:
    """The run's mode: the command line's, else the ini file's (``--fxprof``, ``--fxprof-update`` and
    ``--fxprof-against`` with ``--fxprof-against-python`` each set one; ``--fxprof`` with a revision checks
    against the revision)."""
    refuse_blank(config)
    if config.getoption("fxprof_sample"):
        return Mode.SAMPLE
    check, update = bool(config.getoption("fxprof")), bool(config.getoption("fxprof_update"))
    against = any(against_options(config, ini=False))
    if not (check or update or against):  # the command line wins: the ini file's mode counts only without one
        check, update = bool(config.getini("fxprof")), bool(config.getini("fxprof_update"))
        against = any(against_options(config))
    if check and update:
        raise pytest.UsageError(
            "--fxprof and --fxprof-update exclude each other: check against baselines or record them"
        )
    if against and update:
        raise pytest.UsageError(
            "--fxprof-against and --fxprof-update exclude each other: against a revision no baseline is "
            "written; record baselines in another run"
        )
    if against:
        return Mode.AGAINST
    return Mode.CHECK if check else Mode.UPDATE if update else Mode.OFF


def _mode_class(mode: Mode) -> type[RunMode]:
    if mode is Mode.OFF:
        return OffMode
    if mode is Mode.SAMPLE:
        from pytest_fxprof.modes.sample import SampleMode

        return SampleMode
    if mode is Mode.AGAINST:
        from pytest_fxprof.modes.against import AgainstMode

        return AgainstMode
    if mode is Mode.CHECK:
        from pytest_fxprof.modes.check import CheckMode

        return CheckMode
    from pytest_fxprof.modes.update import UpdateMode

    return UpdateMode


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}({', '.join(f'{n}=...' for n in SETTING_NAMES)}): per-test settings of the fxprof performance gate",
    )
    try:
        config.stash[SETTINGS_KEY] = settings_of(config)
    except SettingsError as exc:
        raise pytest.UsageError(str(exc)) from None
    mode = _mode(config)
    directory = path_setting(config, "baseline_dir", "baselines")
    assert directory is not None
    run = RunState(mode, BaselineStore(directory), reactions_of(config))
    # a fresh process measures inside the turn of the process that started it
    run.lock_path = lock_path(config) if mode is not Mode.SAMPLE else None
    config.stash[MODE_KEY] = chosen = _mode_class(mode)(config, run)
    config.pluginmanager.register(chosen, f"fxprof-{mode.value}")
    if chosen.worker:
        from pytest_fxprof.modes.xdist import XdistWorker

        config.pluginmanager.register(XdistWorker(chosen), "fxprof-xdist-worker")
    elif config.pluginmanager.hasplugin("xdist"):
        from pytest_fxprof.modes.xdist import XdistController

        config.pluginmanager.register(XdistController(chosen), "fxprof-xdist-controller")


def _run(config: pytest.Config) -> RunState:
    return config.stash[MODE_KEY].run


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the fixture fails the test instead
        return
    base = config.stash[SETTINGS_KEY]
    errors = []
    for item in items:
        try:
            marker_settings(item, base)
        except SettingsError as exc:
            errors.append(str(exc))
    if errors:
        raise pytest.UsageError("\n".join(errors))


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    run = _run(session.config)
    run.collected.update(item.nodeid for item in session.items)
    if session.testsfailed:  # collection errors: a file that did not collect would make its baselines look unused
        run.partial = True


def pytest_deselected(items: Sequence[pytest.Item]) -> None:
    if items:
        _run(items[0].config).partial = True


class Fxprof:
    """The ``fxprof`` fixture's value: call it with a module and its inputs.

    ``fxprof(module, *args, name=None, leaf_modules=(), tracer=None, **kwargs)`` captures ``module``,
    profiles ``module(*args, **kwargs)`` and returns a ``ProfileResult``. ``name`` keys the call's
    baseline (calls without one are numbered ``call0``, ``call1``, ...), ``leaf_modules`` lists
    submodule paths or classes to time whole, ``tracer`` replaces the default ``torch.fx.Tracer``.
    ``fxprof.train_step(module, *args, loss_fn=None, optimizer=None, ...)`` does the same for a training step.
    """

    def __init__(self, calls: Calls, settings: Callable[[], Settings] | None = None) -> None:
        self._calls = calls
        self._settings = settings

    @property
    def mode(self) -> str:
        """``off``, ``check``, ``update`` or ``against`` (``sample`` in a fresh process: one recording a baseline,
        or one side of a check against a revision)."""
        return self._calls.mode.value

    def __call__(
        self,
        module: Any,
        *args: Any,
        name: str | None = None,
        leaf_modules: Sequence[Any] = (),
        tracer: Any = None,
        **kwargs: Any,
    ) -> ProfileResult:
        return self._profile(module, args, kwargs, name=name, leaf_modules=leaf_modules, tracer=tracer)

    def train_step(
        self,
        module: Any,
        *args: Any,
        loss_fn: Any = None,
        optimizer: Any = None,
        name: str | None = None,
        leaf_modules: Sequence[Any] = (),
        **kwargs: Any,
    ) -> ProfileResult:
        """Profile and gate one training step of ``module``: the forward in the module's own mode, the loss
        (``loss_fn(output)``; by default the sum of every floating-point output that requires grad), the
        backward and, when given, ``optimizer.step()``, node by node, each node with its direction. Calls
        without ``name`` are keyed ``step0``, ``step1``, ... apart from forward calls. Parameters, their grads,
        buffers, the optimizer's state, the module's mode and the random state are left as they were.
        ``leaf_modules`` lists submodule paths or classes whose nodes are reported as one per direction."""
        from pytest_fxprof.capture.step import Step

        step = Step(loss_fn=loss_fn, optimizer=optimizer)
        return self._profile(module, args, kwargs, name=name, leaf_modules=leaf_modules, tracer=None, step=step)

    def _profile(self, module: Any, args: Sequence[Any], kwargs: dict[str, Any], **options: Any) -> ProfileResult:
        from pytest_fxprof.capture.errors import CaptureError, ProfileError

        try:
            if self._settings is not None:  # the test's markers now: one added at run time counts too
                self._calls.settings = self._settings()
            return self._calls.profile(module, args, kwargs, **options)
        except (CaptureError, ProfileError, BaselineError, UsageError, SettingsError) as exc:
            self._calls.failed_calls += 1
            message = f"fxprof: {exc}"
        except BaseException:  # the model's own error, raised as it is
            self._calls.failed_calls += 1
            raise
        pytest.fail(message, pytrace=False)


@pytest.fixture
def fxprof(request: pytest.FixtureRequest) -> Fxprof:
    """Profile a torch.nn.Module node by node and gate it against its baseline (see ``Fxprof``)."""
    config, item = request.config, request.node
    mode = config.stash[MODE_KEY]

    def marked() -> Settings:
        return marker_settings(item, config.stash[SETTINGS_KEY])

    try:
        settings = mode.settings(item, marked())
    except SettingsError as exc:  # rejected at collection already, except in xdist workers
        pytest.fail(f"fxprof: {exc}", pytrace=False)
    calls = mode.calls(item, settings, relaunch_of(config))
    item.stash[CALLS_KEY] = calls
    return Fxprof(calls, marked if mode.follows_markers() else None)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Note torch's globals as a test that profiles begins, before its fixtures: what it changes of them before a
    call is part of what the call measures (``measure.signature.state_of``)."""
    if "fxprof" in getattr(item, "fixturenames", ()):
        from pytest_fxprof.measure.signature import note_start  # imports torch: only where a test profiles

        note_start()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    run = _run(item.config)
    try:
        result = yield
    except BaseException:
        calls = item.stash.get(CALLS_KEY, None)
        if calls is not None:
            calls.finish(run, passed=False)
        raise
    calls = item.stash.get(CALLS_KEY, None)
    if calls is None:
        return result
    try:
        outcome = calls.finish(run, passed=True)
    except (SamplingError, BaselineError) as exc:
        outcome = Outcome(failures=[f"fxprof: could not record the baseline: {exc}"])
    except TurnError as exc:  # the measuring lock, first taken here against a revision
        outcome = Outcome(failures=[f"fxprof: {exc}"])
    for text in outcome.warnings:
        item.warn(FxprofWarning(text))
    if outcome.failures:
        pytest.fail("\n\n".join(outcome.failures), pytrace=False)
    if outcome.skips:
        item.stash[SKIPPED_KEY] = True
        pytest.skip("\n".join(outcome.skips))
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if report.skipped and item.stash.get(SKIPPED_KEY, False) and isinstance(report.longrepr, tuple):
        # skipped by fxprof: reported at the test, as a skip mark is, not at the line of this plugin that raised it
        path, line = item.reportinfo()[:2]
        report.longrepr = (str(path), (line or 0) + 1, report.longrepr[2])
    calls = item.stash.get(CALLS_KEY, None)
    if calls is None:
        return report
    if report.failed or hasattr(report, "wasxfail") or (report.when == "call" and not report.passed):
        item.stash[SPOILED_KEY] = True
    if report.when == "teardown":  # in an xdist worker, ``XdistWorker`` sends what this settles to the controller
        mode = item.config.stash[MODE_KEY]
        calls.settle(mode.run, passed=not item.stash.get(SPOILED_KEY, False))
        if mode.gated:
            from pytest_fxprof.views.outputs import user_properties

            # on the teardown report, the one junitxml takes properties from (and xdist sends on)
            report.user_properties.extend(user_properties(calls.records))
    return report
