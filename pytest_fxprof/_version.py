"""The installed version of pytest-fxprof, for the package and for the plugin's check that both sides of a check
against a revision run one version.

Must not import torch or pytest.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pytest-fxprof")
except PackageNotFoundError:  # pragma: no cover - running from a source tree that is not installed
    __version__ = "0+unknown"
