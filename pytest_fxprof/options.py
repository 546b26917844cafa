"""Every option of the plugin, in one registry: the command line's flags, the ini keys, the marker's keywords,
their help texts and the options reference of the docs all come from here.

A per-test setting is a field of ``settings.Settings`` (its help and bounds beside it), a report view an entry of
``views.outputs.VIEWS``, a reaction a ``StrEnum`` of ``session.reactions`` named in ``REACTIONS`` below; every
other option is an ``Option`` of ``RUN_OPTIONS``. ``add_options`` registers them with pytest and
``reference_markdown`` writes the docs' table.

Must not import torch. Must not import pytest at module level: the docs build reads the registry.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pytest_fxprof.measure.turns import OFF, default_lock_path
from pytest_fxprof.session.reactions import (
    Confirm,
    OnCodeChange,
    OnFaster,
    OnGraphChange,
    OnMismatch,
    OnMissing,
    OnUnchanged,
    OnUndecided,
    OnUnused,
    Reactions,
)
from pytest_fxprof.settings import KINDS, RUN_WIDE, SETTING_HELP, SETTING_NAMES, TEXT_CHOICES, Settings, apply
from pytest_fxprof.views.outputs import VIEWS

if TYPE_CHECKING:
    import pytest

Kind = Literal["flag", "value", "linelist"]


@dataclass(frozen=True)
class Option:
    """One option: ``--fxprof-NAME`` on the command line (unless ``cli`` is False) and ``fxprof_NAME`` in the ini
    file (unless ``ini`` is False); ``per_test``: also a keyword of ``@pytest.mark.fxprof``."""

    name: str
    help: str
    kind: Kind = "value"
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    per_test: bool = False
    cli: bool = True
    ini: bool = True
    hidden: bool = False
    ini_help: str = ""
    """The ini key's help where it differs from the flag's (paths are relative to the ini file there)."""
    alias_of: str = ""
    """An earlier name of another option: its flag sets that option."""

    @property
    def flag(self) -> str:
        return "--fxprof" if self.name == "" else "--fxprof-" + self.name.replace("_", "-")

    @property
    def dest(self) -> str:
        return "fxprof" if self.name == "" else f"fxprof_{self.name}"

    @property
    def ini_key(self) -> str:
        return self.dest


REACTIONS: dict[str, tuple[type[StrEnum], str]] = {
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
    "on_code_change": (
        OnCodeChange,
        "A check (--fxprof) of a test whose model's code changed since its baseline was recorded (operations added "
        "or removed, or captured another way): measured as well against the git revision the baseline was recorded "
        "at, in pairs of fresh processes, and held to the stricter verdict (revision); or judged by the baseline "
        "alone (baseline), a call captured another way then a mismatch (default revision)",
    ),
    "on_unchanged": (
        OnUnchanged,
        "A check of a call whose computation's fingerprint (its graphs, tensors, inputs, the code they call opaquely, "
        "the environment and the measuring protocol) is the one its baseline recorded, or the old side's against a "
        "revision: decided unchanged without measuring (decide), or measured like any other (measure) "
        "(default decide)",
    ),
    "confirm": (
        Confirm,
        "A profile that looks slower is measured again before it fails: in a fresh process, in this one (same), "
        "or not at all (off); against a revision, a test whose pairs find it slower or undecided is measured again "
        "in a second, independent set of pairs (fresh processes, the revision exported afresh) and fails only "
        "where both find it slower, unless off (default fresh)",
    ),
}
"""What the gate does with each way a check can end: the option, its choices and its help."""

_LOCK_HELP = (
    "Measuring sections (profiles, confirmations, a recording's fresh processes, pairs against a revision) take "
    "turns on the machine through this lock file, across xdist workers and pytest runs started at the same time; "
    "'off' measures without turns (default: fxprof-measure-UID.lock in the temporary directory, UID the user's id)"
)

RUN_OPTIONS: tuple[Option, ...] = (
    Option("", "Profile, compare with the baselines, fail on regression", kind="flag", ini_help="Like --fxprof"),
    Option(
        "update",
        "Profile and write baselines (create or refresh); never fails for slowness",
        kind="flag",
        ini_help="Like --fxprof-update",
    ),
    Option(
        "against",
        "Measure each test at git revision REF and in the working tree, in pairs of fresh processes, and fail the "
        "test that got slower than at REF (no baseline is read or written)",
        metavar="REF",
        ini_help="Like --fxprof-against (the command line wins)",
    ),
    Option(
        "against_python",
        "Run the old side with this Python (another virtual environment); alone, both sides run the working "
        "tree's code, with --fxprof-against the old side runs REF's",
        metavar="PY",
        ini_help="Like --fxprof-against-python",
    ),
    Option(
        "against_roots",
        "Against a revision: the project's import roots besides the top level and src/ (relative to the "
        "repository's top level; to the rootdir with --fxprof-against-python alone), put first on each side's "
        "PYTHONPATH and checked in the old side",
        kind="linelist",
        cli=False,
    ),
    Option(
        "against_start",
        "Against a revision: how the processes of a pair start where the pair is a duet (tests on the CPU): fork, "
        "both sides forked from one process that imported the run's libraries but neither side's code (Linux, "
        "the old side under this Python); fresh, a new interpreter each (default fork)",
        choices=("fork", "fresh"),
    ),
    Option(
        "run_budget_s",
        "Against a revision: seconds the whole run's pairs may take; no pair starts that would end past it (at "
        "its tests' measured cost), one after the first still running then is stopped, and a test still undecided "
        "says so (default 1800)",
        metavar="S",
    ),
    Option(
        "baseline_dir",
        "Where baselines live (default: baselines/ under the rootdir)",
        metavar="DIR",
        ini_help="Where baselines live, relative to the ini file (default: baselines/ under the rootdir)",
    ),
    Option(
        "report",
        "Write a JSON report of every profiled test (with --fxprof or --fxprof-update)",
        metavar="PATH",
        ini_help="Like --fxprof-report, relative to the ini file",
    ),
    Option(
        "lock",
        _LOCK_HELP,
        metavar="PATH",
        ini_help="Like --fxprof-lock, relative to the ini file ('off' measures without turns)",
    ),
    # the earlier name of --fxprof-on-undecided, whose choices it kept
    Option(
        "on_busy",
        "Like fxprof_on_undecided (its earlier name)",
        choices=("skip", "fail"),
        hidden=True,
        alias_of="on_undecided",
    ),
    # a fresh process's request: what its parent asked it to measure
    Option("sample", "", metavar="REQUEST", ini=False, hidden=True),
)


def view_options() -> tuple[Option, ...]:
    return tuple(
        Option(
            name,
            f"{view.help}; with --fxprof or --fxprof-update",
            metavar=view.metavar,
            ini_help=f"Like --fxprof-{name.replace('_', '-')}, relative to the ini file",
        )
        for name, view in VIEWS.items()
    )


def setting_options() -> tuple[Option, ...]:
    return tuple(
        Option(
            name,
            SETTING_HELP[name],
            metavar=None if name in TEXT_CHOICES else "N" if KINDS[name] is int else "X",
            choices=TEXT_CHOICES.get(name, ()),
            per_test=name not in RUN_WIDE,
        )
        for name in SETTING_NAMES
    )


def reaction_options() -> tuple[Option, ...]:
    return tuple(
        Option(name, text, choices=tuple(c.value for c in choices)) for name, (choices, text) in REACTIONS.items()
    )


def all_options() -> tuple[Option, ...]:
    """Every option, in the order ``--help`` lists them."""
    return (*RUN_OPTIONS, *view_options(), *setting_options(), *reaction_options())


def add_options(parser: pytest.Parser) -> None:
    """Register every option's flag and ini key with pytest."""
    group = parser.getgroup("fxprof", "per-node performance gate (pytest-fxprof)")
    for option in all_options():
        if option.cli and option.alias_of:
            dest = f"fxprof_{option.alias_of}"
            group.addoption(option.flag, dest=dest, choices=list(option.choices), help=argparse.SUPPRESS)
        elif option.cli:
            extra: dict[str, Any] = {"action": "store_true"} if option.kind == "flag" else {"metavar": option.metavar}
            if option.choices:
                extra = {"choices": list(option.choices)}
            shown = argparse.SUPPRESS if option.hidden else option.help
            group.addoption(option.flag, dest=option.dest, default=None, help=shown, **extra)
        if option.ini:
            ini_help = option.ini_help or option.help
            if option.kind == "flag":
                parser.addini(option.dest, ini_help, type="bool", default=False)
            elif option.kind == "linelist":
                parser.addini(option.dest, ini_help, type="linelist", default=[])
            else:
                parser.addini(option.dest, ini_help, default=None)


def reference_markdown() -> str:
    """The options reference of the docs: a table of every option a user sets."""
    lines = [
        "| Command line | ini key | Marker | Values | What it does |",
        "| --- | --- | --- | --- | --- |",
    ]
    for option in all_options():
        if option.hidden:
            continue
        flag = f"`{option.flag}`" if option.cli else ""
        if option.cli and option.kind == "value" and not option.choices:
            flag = f"`{option.flag} {option.metavar}`"
        ini = f"`{option.dest}`" if option.ini else ""
        marker = f"`{option.name}=`" if option.per_test else ""
        values = " / ".join(f"`{c}`" for c in option.choices)
        if not values:
            values = {"flag": "on/off", "linelist": "lines"}.get(option.kind, option.metavar or "")
        text = option.help.replace("|", "\\|")
        lines.append(f"| {flag} | {ini} | {marker} | {values} | {text} |")
    return "\n".join(lines) + "\n"


# Reading them from pytest's config ------------------------------------------------------------------------


def value(config: pytest.Config, name: str) -> Any:
    """An option's value: the command line's, else the ini file's."""
    got = config.getoption(f"fxprof_{name}")
    return got if got is not None else config.getini(f"fxprof_{name}")


def against_forks(config: pytest.Config) -> bool:
    """Whether ``--fxprof-against-start`` (or its ini key) asks for forked side processes (the default)."""
    import pytest

    raw = value(config, "against_start") or "fork"
    if raw not in ("fork", "fresh"):
        raise pytest.UsageError(f"fxprof_against_start = {raw}: give fork or fresh (default fork)")
    return raw == "fork"


def against_options(config: pytest.Config, *, ini: bool = True) -> tuple[str | None, str | None]:
    """The revision and the old side's Python: the command line's, else (with ``ini``) the ini file's."""
    ref = config.getoption("fxprof_against") or (config.getini("fxprof_against") if ini else None) or None
    python = config.getoption("fxprof_against_python") or (config.getini("fxprof_against_python") if ini else None)
    return ref, python or None


RUN_BUDGET_S = 1800.0
"""The default of ``--fxprof-run-budget-s``: half an hour of pairs at most, for a check on every pull request."""


def run_budget(config: pytest.Config) -> float:
    """``--fxprof-run-budget-s`` (or its ini key), checked: a positive number of seconds."""
    import pytest

    raw = value(config, "run_budget_s")
    if raw is None:
        return RUN_BUDGET_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise pytest.UsageError(
            f"--fxprof-run-budget-s {raw}: give a positive number of seconds (default {RUN_BUDGET_S:g})"
        )
    return seconds


def path_setting(config: pytest.Config, name: str, default: str | None) -> Path | None:
    """A path option: relative to the invocation directory on the command line, to the ini file in it."""
    cli = config.getoption(f"fxprof_{name}")
    if cli:
        return config.invocation_params.dir / str(cli)
    ini = config.getini(f"fxprof_{name}") or default
    if not ini:
        return None
    base = config.inipath.parent if config.inipath and config.getini(f"fxprof_{name}") else config.rootpath
    return base / str(ini)


def lock_path(config: pytest.Config) -> Path | None:
    """The measuring lock's file (``--fxprof-lock``, ini ``fxprof_lock``; None for ``off``)."""
    import pytest

    raw = config.getoption("fxprof_lock")
    raw = config.getini("fxprof_lock") or None if raw is None else raw
    if raw is not None and str(raw).strip() == OFF:
        return None
    if raw is not None and not str(raw).strip():
        raise pytest.UsageError("--fxprof-lock is empty; give a lock file's path, or 'off' to measure without turns")
    return path_setting(config, "lock", None) or default_lock_path()


MARKER = "fxprof"
"""The marker whose keywords set a test's settings: ``@pytest.mark.fxprof(...)``."""


def marker_settings(item: pytest.Item, base: Settings) -> Settings:
    """A test's settings: its markers' over ``base`` (``SettingsError`` for a marker that cannot be applied)."""
    from pytest_fxprof.settings import SettingsError

    settings = base
    for mark in reversed(list(item.iter_markers(MARKER))):  # closest marker applied last
        if mark.args:
            raise SettingsError(f"{item.nodeid}: @pytest.mark.fxprof takes keywords only, got {mark.args!r}")
        run_wide = sorted(set(mark.kwargs) & set(RUN_WIDE))
        if run_wide:
            raise SettingsError(
                f"{item.nodeid}: @pytest.mark.fxprof({run_wide[0]}=...) is not a per-test setting: it holds for the "
                f"whole process. Fix: set it for the run with --fxprof-{run_wide[0].replace('_', '-')} or the ini key "
                f"fxprof_{run_wide[0]}"
            )
        settings = apply(settings, mark.kwargs, f"{item.nodeid}: @pytest.mark.fxprof")
    return settings


def settings_of(config: pytest.Config) -> Settings:
    """The run's settings: the defaults, then the ini file's, then the command line's (``SettingsError``)."""
    settings = Settings()
    ini = {n: config.getini(f"fxprof_{n}") for n in SETTING_NAMES}
    settings = apply(settings, {k: v for k, v in ini.items() if v not in (None, "")}, "ini file")
    cli = {n: config.getoption(f"fxprof_{n}") for n in SETTING_NAMES}
    return apply(settings, cli, "command line")


def reactions_of(config: pytest.Config) -> Reactions:
    """The run's reactions: the defaults, then the ini file's, then the command line's."""
    import pytest

    values: dict[str, Any] = {}
    for name, (choices, _) in REACTIONS.items():
        raw, key = value(config, name), f"fxprof_{name}"
        if name == "on_undecided" and raw in (None, ""):
            raw, key = config.getini("fxprof_on_busy"), "fxprof_on_busy"  # its earlier name
        if raw in (None, ""):
            continue
        try:
            values[name.removeprefix("on_")] = choices(raw)
        except ValueError:
            allowed = ", ".join(c.value for c in choices)
            raise pytest.UsageError(f"{key} = {raw!r} in the ini file; use one of: {allowed}") from None
    return Reactions(**values)
