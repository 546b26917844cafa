"""pytest-fxprof: a per-node performance gate for PyTorch modules, captured with torch.fx.

Importing the package does not import torch; ``profile`` does when it is called.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from pytest_fxprof.api import profile
from pytest_fxprof.decision import AggregateVerdict, Comparison, NodeVerdict, Policy, TotalVerdict, Verdict
from pytest_fxprof.frames import read_report
from pytest_fxprof.plugin import Fxprof
from pytest_fxprof.records import NodeInfo, NodeStats, ProfileResult
from pytest_fxprof.slowdown import slow_down

try:
    __version__ = version("pytest-fxprof")
except PackageNotFoundError:  # pragma: no cover - running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "AggregateVerdict",
    "Comparison",
    "Fxprof",
    "NodeInfo",
    "NodeStats",
    "NodeVerdict",
    "Policy",
    "ProfileResult",
    "TotalVerdict",
    "Verdict",
    "__version__",
    "profile",
    "read_report",
    "slow_down",
]
