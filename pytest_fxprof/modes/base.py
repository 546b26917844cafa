"""``RunMode``: what every mode offers the fixture and the plugin's hooks; ``OffMode``, a run without the gate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pytest_fxprof.measure.sampling import Relaunch, plugin_args
from pytest_fxprof.session.calls import Calls, OffCalls
from pytest_fxprof.session.run import RunState
from pytest_fxprof.settings import Mode, Settings

if TYPE_CHECKING:
    import pytest


class RunMode:
    """One pytest run's mode. Registered with pytest as a plugin, so that a mode's own hooks run only in its
    runs; the plugin's hooks hand each test over to ``calls``."""

    mode: ClassVar[Mode]
    calls_class: ClassVar[type[Calls]]
    """What a test's ``fxprof`` calls are in this mode."""
    gated: ClassVar[bool] = True
    """Whether the run judges or records (its tests carry their verdicts on their reports, its end writes)."""

    def __init__(self, config: pytest.Config, run: RunState) -> None:
        self.config = config
        self.run = run
        self.worker = hasattr(config, "workerinput")
        """An xdist worker: the controller gathers what its tests left and writes."""

    def settings(self, item: pytest.Item, marked: Settings) -> Settings:
        """The settings a test is measured with: its markers' over the run's (``marked``)."""
        return marked

    def follows_markers(self) -> bool:
        """Whether a marker added while the test runs changes its settings."""
        return True

    def calls(self, item: pytest.Item, settings: Settings, relaunch: Relaunch) -> Calls:
        """The ``fxprof`` calls of the test ``item``, made by this mode's rules."""
        return self.calls_class(item.nodeid, settings, **self.call_options(item, relaunch))

    def call_options(self, item: pytest.Item, relaunch: Relaunch) -> dict[str, Any]:
        """What every call of a test takes from the run (a mode adds its own)."""
        run = self.run
        return {"store": run.store, "reactions": run.reactions, "relaunch": relaunch, "turns": run.measuring_turns()}


class OffMode(RunMode):
    """Without ``--fxprof``, ``--fxprof-update`` or ``--fxprof-against``: calls are captured and run, untimed."""

    mode = Mode.OFF
    calls_class = OffCalls
    gated = False


def relaunch_of(config: pytest.Config) -> Relaunch:
    """How to start pytest again as this run was started (``measure.sampling.Relaunch``)."""
    return Relaunch(
        invocation_dir=config.invocation_params.dir,
        rootdir=config.rootpath,
        inifile=config.inipath,
        extra_args=plugin_args(config.invocation_params.args),
    )
