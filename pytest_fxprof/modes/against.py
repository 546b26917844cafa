"""``AgainstMode``: ``--fxprof-against``: each test measured in pairs of fresh processes, old code against new.

Prepares the old side once per run: its revision exported from git (removed when the run ends; an xdist
worker reuses its controller's export) and its Python checked (it runs, with this version of pytest-fxprof).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fxprof.against.compare import Against
from pytest_fxprof.modes.gate import Gate
from pytest_fxprof.options import against_options
from pytest_fxprof.session.against import AgainstCalls
from pytest_fxprof.settings import Mode

if TYPE_CHECKING:
    from pytest_fxprof.measure.sampling import Relaunch
    from pytest_fxprof.session.run import RunState
    from pytest_fxprof.views.report import AgainstJSON


class AgainstMode(Gate):
    mode = Mode.AGAINST
    calls_class = AgainstCalls

    def __init__(self, config: pytest.Config, run: RunState) -> None:
        super().__init__(config, run)
        self.against = old_side(config)
        run.against = self.against.label

    def against_json(self) -> AgainstJSON | None:
        rev = self.against.revision
        return {
            "label": self.against.label,
            "ref": rev.ref if rev is not None else "",
            "commit": rev.sha if rev is not None else "",
            "python": self.against.python or "",
        }

    def call_options(self, item: pytest.Item, relaunch: Relaunch) -> dict[str, Any]:
        return {**super().call_options(item, relaunch), "against": self.against}


def old_side(config: pytest.Config) -> Against:
    """The old side of this run: its revision exported from git (removed when the run ends) and its Python."""
    from pytest_fxprof.against.revision import Revision, RevisionError, materialise, remove

    roots = tuple(str(r) for r in config.getini("fxprof_against_roots"))
    ref, python = against_options(config)
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
