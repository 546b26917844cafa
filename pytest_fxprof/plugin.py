"""The pytest plugin: options, the ``fxprof`` marker and fixture, and the hooks that hand over to ``session``.

Owns everything that touches pytest.

Must not import torch at module level: pytest loads every installed plugin on every run, and most runs never
profile anything.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fxprof.against.check import Against, SideWatch
from pytest_fxprof.judge.decision import DEFAULT_FLOOR_NS, FLOOR_SHARE, NODE_TOLERANCE, TOTAL_TOLERANCE
from pytest_fxprof.judge.paired import (
    CHANGED_TOLERANCE,
    MIN_DECIDING_PAIRS,
    PAIRED_NODE_TOLERANCE,
    PAIRED_TOTAL_TOLERANCE,
)
from pytest_fxprof.measure.sampling import (
    Relaunch,
    SampleRequest,
    SamplingError,
    die_with_parent,
    plugin_args,
    write_samples,
)
from pytest_fxprof.measure.turns import OFF, TurnError, default_lock_path
from pytest_fxprof.result import ProfileResult
from pytest_fxprof.session import (
    Confirm,
    FinishedTest,
    OnFaster,
    OnGraphChange,
    OnMismatch,
    OnMissing,
    OnUndecided,
    OnUnused,
    Outcome,
    Reactions,
    RunState,
    TestState,
    UsageError,
    WorkerPayload,
)
from pytest_fxprof.settings import KINDS, SETTING_NAMES, TEXT_CHOICES, Mode, Settings, SettingsError, apply, from_json
from pytest_fxprof.store.baseline import BaselineError, BaselineStore
from pytest_fxprof.store.files import loads, unwritable

if TYPE_CHECKING:
    from pytest_fxprof.views.report import AgainstJSON

RUN_KEY = pytest.StashKey[RunState]()
SETTINGS_KEY = pytest.StashKey[Settings]()
SAMPLE_KEY = pytest.StashKey[SampleRequest]()
TEST_KEY = pytest.StashKey[TestState]()
SPOILED_KEY = pytest.StashKey[bool]()
SKIPPED_KEY = pytest.StashKey[bool]()
"""Set on a test that fxprof skipped (a missing baseline, another setup, no verdict), to report the skip there."""
AGAINST_KEY = pytest.StashKey[Against]()
WATCH_KEY = pytest.StashKey[SideWatch]()
WORKER_KEY = "fxprof"
MARKER = "fxprof"


class FxprofWarning(UserWarning):
    """What the gate asks of the user without failing the test: a changed graph, a faster model, a baseline
    recorded on a busy machine, an undecided check under ``--fxprof-on-undecided=pass-with-warning``. Public as
    ``pytest_fxprof.FxprofWarning``, for ``filterwarnings``."""


_SETTING_HELP = {
    "node_tolerance": f"Smallest relative band a node or aggregate gets, e.g. 0.1 allows +10 percent (default "
    f"{NODE_TOLERANCE:g} against baselines, {PAIRED_NODE_TOLERANCE:g} against a revision)",
    "total_tolerance": f"Smallest relative band the model's total gets (default {TOTAL_TOLERANCE:g} against "
    f"baselines, {PAIRED_TOTAL_TOLERANCE:g} against a revision)",
    "changed_tolerance": "Against a revision: smallest relative band of a module, pattern or class whose code "
    f"changed (operations added or removed in it); never wider than the node band (default {CHANGED_TOLERANCE:g})",
    "pairs": "Against a revision: pairs of old and new processes per test, at least "
    f"{MIN_DECIDING_PAIRS}; up to 3 times as many while a verdict is undecided (default 6)",
    "budget_s": "Against a revision: seconds a test's pairs may take before no more are added (default 150)",
    "schedule": "Against a revision: duet (the old and new process of a pair run at the same time, pass for pass, "
    "trading their cores), alternate (one after the other, in a balanced order) or auto (a duet on the CPU, "
    "alternate on an accelerator) (default auto)",
    "warmup": "Discarded passes before measuring (default 4)",
    "passes": "Measured passes per profile (default 12)",
    "threads": "torch intra-op threads while profiling (default 1)",
    "processes": "Processes a baseline is recorded from: this one plus fresh ones (default 5)",
    "history": "Recordings a baseline entry keeps when --fxprof-update refreshes it: the new one plus up to N-1 "
    "earlier ones, newest first, while the environment, graph, setup and capture method stay the same (else the "
    "history restarts, and the run says why); 1 keeps no history (default 5)",
    "engine": "How nodes are timed: compiled (timestamps compiled into the graph's code, almost free) or "
    "interpreter (torch.fx.Interpreter, the slower reference) (default compiled)",
    "capture": "How the model becomes graphs: auto (symbolic tracing, then with the submodule that broke it kept "
    "whole, then torch.export, then a torch.compile backend; with tracer= or leaf_modules= given to the fixture, "
    "symbolic tracing with them or a failure), symbolic, export or dynamo (default auto); a training step "
    "(fxprof.train_step) is always captured by AOTAutograd",
    "floor_us": f"Node and aggregate changes smaller than this many microseconds (or {FLOOR_SHARE * 100:g} percent of "
    f"the model's time, if larger) never fail (default {DEFAULT_FLOOR_NS / 1e3:g})",
}
_CHOICES: dict[str, tuple[type, str]] = {
    "on_missing": (OnMissing, "A test without a baseline under --fxprof: fail or skip (default fail)"),
    "on_mismatch": (OnMismatch, "A baseline from another environment: skip or fail (default skip)"),
    "on_undecided": (
        OnUndecided,
        "A check that failed nothing but reached no verdict: an item that gates too noisy to decide (a band of its "
        "baseline too wide, or pairs that still disagree when they end), or a profile measured on a busy machine "
        "every time (replaces --fxprof-on-busy): fail, skip or pass-with-warning (default fail)",
    ),
    "on_graph_change": (OnGraphChange, "Nodes added or removed since the baseline: warn or fail (default warn)"),
    "on_unused": (OnUnused, "Baselines whose test no longer exists: warn or fail (default warn)"),
    "on_faster": (
        OnFaster,
        "Nodes, aggregates or the total faster beyond their band: ignore, warn or fail, so that baselines do not "
        "go stale (default warn)",
    ),
    "confirm": (
        Confirm,
        "A profile that looks slower is measured again before it fails: in a fresh process, in this one (same), "
        "or not at all (default fresh)",
    ),
}


VIEWS: dict[str, tuple[str, str]] = {
    "html": ("PATH", "Write one self-contained HTML report of every profiled test (charts, module tree, node table)"),
    "trace": (
        "DIR",
        "Write a Chrome trace event file per fixture call to DIR (opens in Perfetto or chrome://tracing)",
    ),
    "markdown": (
        "PATH",
        "Write a Markdown summary for a pull-request comment; also appended to $GITHUB_STEP_SUMMARY when it is set",
    ),
    "benchmark_json": (
        "PATH",
        "Write the results in pytest-benchmark's JSON format (an entry per fixture call and per node, with samples)",
    ),
}
"""Report views written at the end of a run with --fxprof or --fxprof-update, each from the same records."""


def _flag(name: str) -> str:
    return "--fxprof-" + name.replace("_", "-")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fxprof", "per-node performance gate (pytest-fxprof)")
    group.addoption(
        "--fxprof", action="store_true", default=None, help="Profile, compare with the baselines, fail on regression"
    )
    parser.addini("fxprof", "Like --fxprof", type="bool", default=False)
    group.addoption(
        "--fxprof-update",
        action="store_true",
        default=None,
        help="Profile and write baselines (create or refresh); never fails for slowness",
    )
    parser.addini("fxprof_update", "Like --fxprof-update", type="bool", default=False)
    group.addoption(
        "--fxprof-baseline-dir",
        metavar="DIR",
        default=None,
        help="Where baselines live (default: baselines/ under the rootdir)",
    )
    parser.addini(
        "fxprof_baseline_dir",
        "Where baselines live, relative to the ini file (default: baselines/ under the rootdir)",
        default=None,
    )
    group.addoption(
        "--fxprof-report",
        metavar="PATH",
        default=None,
        help="Write a JSON report of every profiled test (with --fxprof or --fxprof-update)",
    )
    parser.addini("fxprof_report", "Like --fxprof-report, relative to the ini file", default=None)
    for name, (metavar, text) in VIEWS.items():
        help_text = f"{text}; with --fxprof or --fxprof-update"
        group.addoption(_flag(name), dest=f"fxprof_{name}", metavar=metavar, default=None, help=help_text)
        parser.addini(f"fxprof_{name}", f"Like {_flag(name)}, relative to the ini file", default=None)
    for name in SETTING_NAMES:
        if name in TEXT_CHOICES:
            group.addoption(
                _flag(name), dest=f"fxprof_{name}", choices=TEXT_CHOICES[name], default=None, help=_SETTING_HELP[name]
            )
            parser.addini(f"fxprof_{name}", _SETTING_HELP[name], default=None)
            continue
        metavar = "N" if KINDS[name] is int else "X"
        group.addoption(_flag(name), dest=f"fxprof_{name}", metavar=metavar, default=None, help=_SETTING_HELP[name])
        parser.addini(f"fxprof_{name}", _SETTING_HELP[name], default=None)
    for name, (choices, text) in _CHOICES.items():
        values = [c.value for c in choices]  # type: ignore[attr-defined]
        group.addoption(_flag(name), dest=f"fxprof_{name}", choices=values, default=None, help=text)
        parser.addini(f"fxprof_{name}", text, default=None)
    # the earlier name of --fxprof-on-undecided, whose choices it kept
    group.addoption("--fxprof-on-busy", dest="fxprof_on_undecided", choices=["skip", "fail"], help=argparse.SUPPRESS)
    parser.addini("fxprof_on_busy", "Like fxprof_on_undecided (its earlier name)", default=None)
    group.addoption(
        "--fxprof-against",
        metavar="REF",
        default=None,
        help="Measure each test at git revision REF and in the working tree, in pairs of fresh processes, and "
        "fail the test that got slower than at REF (no baseline is read or written)",
    )
    parser.addini("fxprof_against", "Like --fxprof-against (the command line wins)", default=None)
    group.addoption(
        "--fxprof-against-python",
        metavar="PY",
        default=None,
        help="Run the old side with this Python (another virtual environment); alone, both sides run the working "
        "tree's code, with --fxprof-against the old side runs REF's",
    )
    parser.addini("fxprof_against_python", "Like --fxprof-against-python", default=None)
    parser.addini(
        "fxprof_against_roots",
        "Against a revision: the project's import roots besides the top level and src/ (relative to the "
        "repository's top level; to the rootdir with --fxprof-against-python alone), put first on each side's "
        "PYTHONPATH and checked in the old side",
        type="linelist",
        default=[],
    )
    lock_help = (
        "Measuring sections (profiles, confirmations, a recording's fresh processes, pairs against a revision) take "
        "turns on the machine through this lock file, across xdist workers and pytest runs started at the same "
        f"time; 'off' measures without turns (default: {default_lock_path()})"
    )
    group.addoption("--fxprof-lock", metavar="PATH", default=None, help=lock_help)
    parser.addini("fxprof_lock", "Like --fxprof-lock, relative to the ini file ('off' measures without turns)")
    group.addoption("--fxprof-sample", metavar="REQUEST", default=None, help=argparse.SUPPRESS)


def _ini_or_option(config: pytest.Config, name: str) -> Any:
    value = config.getoption(f"fxprof_{name}")
    return value if value is not None else config.getini(f"fxprof_{name}")


def _against_options(config: pytest.Config, *, ini: bool = True) -> tuple[str | None, str | None]:
    """The revision and the old side's Python: the command line's, else (with ``ini``) the ini file's."""
    ref = config.getoption("fxprof_against") or (config.getini("fxprof_against") if ini else None) or None
    python = config.getoption("fxprof_against_python") or (config.getini("fxprof_against_python") if ini else None)
    return ref, python or None


def _mode(config: pytest.Config) -> Mode:
    """The run's mode: the command line's, else the ini file's (``--fxprof``, ``--fxprof-update`` and
    ``--fxprof-against`` with ``--fxprof-against-python`` each set one; ``--fxprof`` with a revision checks
    against the revision)."""
    if config.getoption("fxprof_sample"):
        return Mode.SAMPLE
    check, update = bool(config.getoption("fxprof")), bool(config.getoption("fxprof_update"))
    against = any(_against_options(config, ini=False))
    if not (check or update or against):  # the command line wins: the ini file's mode counts only without one
        check, update = bool(config.getini("fxprof")), bool(config.getini("fxprof_update"))
        against = any(_against_options(config))
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


def _against(config: pytest.Config) -> Against:
    """The old side of this run: its revision exported from git (removed when the run ends) and its Python."""
    from pytest_fxprof.against.revision import Revision, RevisionError, materialise, remove

    roots = tuple(str(r) for r in config.getini("fxprof_against_roots"))
    ref, python = _against_options(config)
    if python is not None:
        python = _old_python(config, python)
    workerinput = getattr(config, "workerinput", None)
    raw = workerinput.get("fxprof_against") if workerinput is not None else None
    if raw and Path(raw["tree"]).is_dir():  # an xdist worker on the controller's machine: its export serves
        return Against(Revision.from_json(raw), python, roots)
    if ref is None:
        return Against(None, python, roots)
    try:
        revision = materialise(str(ref), config.rootpath)
    except RevisionError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.add_cleanup(lambda: remove(revision))
    return Against(revision, python, roots)


def _old_python(config: pytest.Config, python: str) -> str:
    """The old side's interpreter, checked: it runs, and has pytest and this version of pytest-fxprof (the sides
    speak this version's protocol)."""
    import shutil
    import subprocess

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


def _path_setting(config: pytest.Config, name: str, default: str | None) -> Path | None:
    """A path option: relative to the invocation directory on the command line, to the ini file in it."""
    cli = config.getoption(f"fxprof_{name}")
    if cli:
        return config.invocation_params.dir / str(cli)
    ini = config.getini(f"fxprof_{name}") or default
    if not ini:
        return None
    base = config.inipath.parent if config.inipath and config.getini(f"fxprof_{name}") else config.rootpath
    return base / str(ini)


def _lock_path(config: pytest.Config) -> Path | None:
    """The measuring lock's file (``--fxprof-lock``, ini ``fxprof_lock``; None for ``off``)."""
    raw = config.getoption("fxprof_lock")
    raw = config.getini("fxprof_lock") or None if raw is None else raw
    if raw is not None and str(raw).strip() == OFF:
        return None
    if raw is not None and not str(raw).strip():
        raise pytest.UsageError("--fxprof-lock is empty; give a lock file's path, or 'off' to measure without turns")
    return _path_setting(config, "lock", None) or default_lock_path()


def _settings(config: pytest.Config) -> Settings:
    settings = Settings()
    ini = {n: config.getini(f"fxprof_{n}") for n in SETTING_NAMES}
    settings = apply(settings, {k: v for k, v in ini.items() if v not in (None, "")}, "ini file")
    cli = {n: config.getoption(f"fxprof_{n}") for n in SETTING_NAMES}
    return apply(settings, cli, "command line")


def _reactions(config: pytest.Config) -> Reactions:
    values = {}
    for name, (choices, _) in _CHOICES.items():
        raw, key = _ini_or_option(config, name), f"fxprof_{name}"
        if name == "on_undecided" and raw in (None, ""):
            raw, key = config.getini("fxprof_on_busy"), "fxprof_on_busy"  # its earlier name
        if raw in (None, ""):
            continue
        try:
            values[name.removeprefix("on_")] = choices(raw)
        except ValueError:
            allowed = ", ".join(c.value for c in choices)  # type: ignore[attr-defined]
            raise pytest.UsageError(f"{key} = {raw!r} in the ini file; use one of: {allowed}") from None
    return Reactions(**values)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}({', '.join(f'{n}=...' for n in SETTING_NAMES)}): per-test settings of the fxprof performance gate",
    )
    try:
        config.stash[SETTINGS_KEY] = _settings(config)
    except SettingsError as exc:
        raise pytest.UsageError(str(exc)) from None
    mode = _mode(config)
    directory = _path_setting(config, "baseline_dir", "baselines")
    assert directory is not None
    if mode is Mode.UPDATE and not hasattr(config, "workerinput"):  # before anything is measured, not after
        problem = unwritable(directory)
        if problem:
            raise pytest.UsageError(
                f"--fxprof-update cannot write baselines to {directory}: {problem}. Make it writable, or record "
                "them elsewhere with --fxprof-baseline-dir (or the fxprof_baseline_dir ini key)"
            )
    config.stash[RUN_KEY] = run = RunState(mode, BaselineStore(directory), _reactions(config))
    # a fresh process measures inside the turn of the process that started it
    run.lock_path = _lock_path(config) if mode is not Mode.SAMPLE else None
    if mode is Mode.AGAINST:
        config.stash[AGAINST_KEY] = _against(config)
        config.stash[RUN_KEY].against = config.stash[AGAINST_KEY].label
    if mode is Mode.SAMPLE:
        request = Path(config.getoption("fxprof_sample"))
        try:
            config.stash[SAMPLE_KEY] = req = loads(request.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise pytest.UsageError(f"--fxprof-sample {request}: cannot read the request ({exc})") from None
        die_with_parent(req.get("parent"))
        if req.get("entry"):  # a side against a revision: it says what became of its test, whatever that was
            config.stash[WATCH_KEY] = SideWatch(req["test_id"])
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(XdistController(config), "fxprof-xdist-controller")


def _marker_settings(item: pytest.Item, base: Settings) -> Settings:
    settings = base
    for mark in reversed(list(item.iter_markers(MARKER))):  # closest marker applied last
        if mark.args:
            raise SettingsError(f"{item.nodeid}: @pytest.mark.fxprof takes keywords only, got {mark.args!r}")
        settings = apply(settings, mark.kwargs, f"{item.nodeid}: @pytest.mark.fxprof")
    return settings


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the fixture fails the test instead
        return
    base = config.stash[SETTINGS_KEY]
    errors = []
    for item in items:
        try:
            _marker_settings(item, base)
        except SettingsError as exc:
            errors.append(str(exc))
    if errors:
        raise pytest.UsageError("\n".join(errors))


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    run = session.config.stash[RUN_KEY]
    run.collected.update(item.nodeid for item in session.items)
    if session.testsfailed:  # collection errors: a file that did not collect would make its baselines look unused
        run.partial = True


def pytest_itemcollected(item: pytest.Item) -> None:
    watch = item.config.stash.get(WATCH_KEY, None)
    if watch is not None and item.nodeid == watch.test_id:
        watch.collected = True


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    watch = collector.config.stash.get(WATCH_KEY, None)
    if watch is not None and report.skipped and watch.test_id.startswith(report.nodeid + "::"):
        # a side against a revision whose test module (or class) skips as it is collected: the test skipped
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        watch.note("collect", "skipped", str(reason))
    return report


def pytest_deselected(items: Sequence[pytest.Item]) -> None:
    if items:
        items[0].config.stash[RUN_KEY].partial = True


class Fxprof:
    """The ``fxprof`` fixture's value: call it with a module and its inputs.

    ``fxprof(module, *args, name=None, leaf_modules=(), tracer=None, **kwargs)`` captures ``module``,
    profiles ``module(*args, **kwargs)`` and returns a ``ProfileResult``. ``name`` keys the call's
    baseline (calls without one are numbered ``call0``, ``call1``, ...), ``leaf_modules`` lists
    submodule paths or classes to time whole, ``tracer`` replaces the default ``torch.fx.Tracer``.
    ``fxprof.train_step(module, *args, loss_fn=None, optimizer=None, ...)`` does the same for a training step.
    """

    def __init__(self, state: TestState, settings: Callable[[], Settings] | None = None) -> None:
        self._state = state
        self._settings = settings

    @property
    def mode(self) -> str:
        """``off``, ``check``, ``update`` or ``against`` (``sample`` in a fresh process: one recording a baseline,
        or one side of a check against a revision)."""
        return self._state.mode.value

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
                self._state.settings = self._settings()
            return self._state.profile(module, args, kwargs, **options)
        except (CaptureError, ProfileError, BaselineError, UsageError, SettingsError) as exc:
            self._state.failed_calls += 1
            message = f"fxprof: {exc}"
        except BaseException:  # the model's own error, raised as it is
            self._state.failed_calls += 1
            raise
        pytest.fail(message, pytrace=False)


@pytest.fixture
def fxprof(request: pytest.FixtureRequest) -> Fxprof:
    """Profile a torch.nn.Module node by node and gate it against its baseline (see ``Fxprof``)."""
    config = request.config
    run = config.stash[RUN_KEY]
    item = request.node
    try:
        settings = _marker_settings(item, config.stash[SETTINGS_KEY])
    except SettingsError as exc:  # rejected at collection already, except in xdist workers
        pytest.fail(f"fxprof: {exc}", pytrace=False)
    sample_out = None

    def marked() -> Settings:
        return _marker_settings(item, config.stash[SETTINGS_KEY])

    refresh: Callable[[], Settings] | None = marked
    sample_request: dict[str, Any] = {}
    if run.mode is Mode.SAMPLE:  # the recording process's settings, whatever the markers say here
        req = config.stash[SAMPLE_KEY]
        settings = from_json(req["settings"])
        sample_out = Path(req["out"]) if req["test_id"] == item.nodeid else None
        sample_request = dict(req)
        refresh = None
    relaunch = Relaunch(
        invocation_dir=config.invocation_params.dir,
        rootdir=config.rootpath,
        inifile=config.inipath,
        extra_args=plugin_args(config.invocation_params.args),
    )
    state = TestState(
        item.nodeid,
        run.mode,
        settings,
        store=run.store,
        reactions=run.reactions,
        relaunch=relaunch,
        sample_out=sample_out,
        sample_request=sample_request,
        against=config.stash.get(AGAINST_KEY, None),
        turns=run.measuring_turns(),
    )
    item.stash[TEST_KEY] = state
    return Fxprof(state, refresh)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    try:
        result = yield
    except BaseException:
        state = item.stash.get(TEST_KEY, None)
        if state is not None:
            state.finish(item.config.stash[RUN_KEY], passed=False)
        raise
    state = item.stash.get(TEST_KEY, None)
    if state is None:
        return result
    try:
        outcome = state.finish(item.config.stash[RUN_KEY], passed=True)
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
    watch = item.config.stash.get(WATCH_KEY, None)
    if watch is not None and item.nodeid == watch.test_id:
        reason = report.longrepr[2] if report.skipped and isinstance(report.longrepr, tuple) else ""
        watch.note(report.when, report.outcome, str(reason))
    state = item.stash.get(TEST_KEY, None)
    if state is not None:
        spoiled = report.failed or hasattr(report, "wasxfail") or (report.when == "call" and not report.passed)
        if spoiled:
            item.stash[SPOILED_KEY] = True
        if report.when == "teardown":
            run = item.config.stash[RUN_KEY]
            notes, errors = len(run.notes), len(run.errors)
            state.settle(run, passed=not item.stash.get(SPOILED_KEY, False))
            if hasattr(item.config, "workerinput"):  # an xdist worker: the controller gets it with this report
                payload = run.test_payload(state, run.notes[notes:], run.errors[errors:])
                report.fxprof = json.loads(json.dumps(payload))  # plain JSON data only: execnet refuses the rest
            if run.mode in (Mode.CHECK, Mode.UPDATE, Mode.AGAINST):
                from pytest_fxprof.views.outputs import user_properties

                # on the teardown report, the one junitxml takes properties from (and xdist sends on)
                report.user_properties.extend(user_properties(state.records))
    return report


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


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    run = config.stash[RUN_KEY]
    if hasattr(config, "workerinput"):  # an xdist worker: the controller writes
        if session.config.getoption("keyword") or session.config.getoption("markexpr"):
            run.partial = True
        config.workeroutput[WORKER_KEY] = run.payload()  # type: ignore[attr-defined]
        return
    watch = config.stash.get(WATCH_KEY, None)
    if watch is not None:  # a side against a revision whose fxprof calls wrote nothing: say what became of the test
        out = Path(config.stash[SAMPLE_KEY]["out"])
        reported = watch.report(int(exitstatus), collection_failed=session.testsfailed > 0)
        if reported is not None and not out.exists():
            write_samples(out, reported)
        return
    if run.mode not in (Mode.CHECK, Mode.UPDATE, Mode.AGAINST):
        return
    errors: list[str] = list(run.errors)
    written: list[Path] = []
    if run.mode is Mode.UPDATE:
        written, failed = run.write_baselines()
        errors += failed
    unused = run.unused(_selected_paths(session), config.rootpath) if run.mode is not Mode.AGAINST else []
    outputs: list[Path] = []
    side = _against_json(config.stash.get(AGAINST_KEY, None)) if run.mode is Mode.AGAINST else None
    for name in ("report", *VIEWS):
        path = _path_setting(config, name, None)
        if path is None:
            continue
        from pytest_fxprof.views.outputs import write_view

        try:
            outputs.extend(write_view(name, path, run.mode.value, run.records, unused, against=side))
        except (OSError, ValueError) as exc:
            errors.append(f"could not write the {name.replace('_', '-')} report {path}: {exc}")
    config.stash[_FINAL_KEY] = _Final(written, unused, errors, outputs)
    failing_unused = unused and run.reactions.unused is OnUnused.FAIL and run.mode is Mode.CHECK
    if (errors or failing_unused) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _against_json(old: Against | None) -> AgainstJSON | None:
    """The old side of a run against a revision, as its report records it (for ``fxprof merge``)."""
    if old is None:
        return None
    rev = old.revision
    return {
        "label": old.label,
        "ref": rev.ref if rev is not None else "",
        "commit": rev.sha if rev is not None else "",
        "python": old.python or "",
    }


@dataclass(frozen=True)
class _Final:
    """What the session's end wrote and found, for the terminal summary."""

    written: list[Path]
    unused: list[str]
    errors: list[str]
    outputs: list[Path]


_FINAL_KEY = pytest.StashKey[_Final]()

WAIT_SHOWN_S = 0.5
"""Less time waited for measuring turns than this is not worth a line in the summary (shown with ``-v``)."""


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    run = config.stash[RUN_KEY]
    final = config.stash.get(_FINAL_KEY, None)
    if run.mode not in (Mode.CHECK, Mode.UPDATE, Mode.AGAINST) or hasattr(config, "workerinput"):
        return
    tr = terminalreporter
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
    from pytest_fxprof.views.terminal import busy_counts, profile_lines

    for record in records:
        for text, colour in profile_lines(record, verbose=config.getoption("verbose") > 0):
            tr.write_line(text, **({colour: True} if colour else {}))
    busy_count = busy_counts(records)
    if busy_count:
        tr.write_line(busy_count, yellow=True)
    if run.turns and run.lock_path and (run.waited_s >= WAIT_SHOWN_S or config.getoption("verbose") > 0):
        tr.write_line(
            f"measured one at a time on this machine: {run.turns} measuring turn(s), {run.waited_s:.1f} s spent "
            f"waiting for other processes' turns (lock {run.lock_path})"
        )
    for note in run.notes:
        tr.write_line(note, yellow=True)
    for test_id, keys in sorted(run.dropped.items()):
        tr.write_line(f"{test_id}: dropped baseline entries no longer called: {', '.join(keys)}", yellow=True)
    if final is None:
        return
    if final.written:
        directory = run.store.directory
        tr.write_line(f"wrote {len(final.written)} baseline file(s) to {directory}", green=True)
    if final.unused:
        verb = "failing" if run.reactions.unused is OnUnused.FAIL and run.mode is Mode.CHECK else "warning"
        tr.write_line(
            f"{len(final.unused)} baseline(s) whose test no longer exists, or unreadable ({verb}; delete them, or "
            "fix the unreadable ones):",
            yellow=True,
        )
        for name in final.unused:
            tr.write_line(f"  {name}")
    for error in final.errors:
        tr.write_line(error, red=True)
    for path in final.outputs:
        tr.write_line(f"report: {path}")


class XdistController:
    """Registered only in an xdist controller: gathers what each test profiled as its teardown report arrives,
    and what each worker collected when it finishes."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_configure_node(self, node: Any) -> None:
        """Hand each worker the revision this controller exported, so that all of them share one tree."""
        against = self.config.stash.get(AGAINST_KEY, None)
        if against is not None and against.revision is not None:
            node.workerinput["fxprof_against"] = against.revision.to_json()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        payload: FinishedTest | None = getattr(report, "fxprof", None)
        if payload is not None:
            self.config.stash[RUN_KEY].merge_test(payload)

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        payload: WorkerPayload | None = getattr(node, "workeroutput", {}).get(WORKER_KEY)
        if payload is not None:
            self.config.stash[RUN_KEY].merge(payload)
        else:
            worker = str(getattr(getattr(node, "gateway", None), "id", "?"))
            self.config.stash[RUN_KEY].lost_worker(worker, error)
