"""pytest-fxprof: a per-node performance gate for PyTorch modules, captured with torch.fx.

Must not import torch at module level: ``profile`` imports it when it is called, so that importing the
package (as pytest does with every installed plugin) stays cheap.
"""

from __future__ import annotations

from pytest_fxprof._version import __version__
from pytest_fxprof.api import profile, profile_train_step
from pytest_fxprof.judge.decision import Policy
from pytest_fxprof.plugin import Fxprof, FxprofWarning
from pytest_fxprof.records.measurement import NodeInfo, NodeStats
from pytest_fxprof.records.verdicts import AggregateVerdict, Comparison, NodeVerdict, TotalVerdict, Verdict
from pytest_fxprof.result import ProfileResult
from pytest_fxprof.slowdown import slow_backward, slow_down
from pytest_fxprof.views.frames import read_report

__all__ = [
    "AggregateVerdict",
    "Comparison",
    "Fxprof",
    "FxprofWarning",
    "NodeInfo",
    "NodeStats",
    "NodeVerdict",
    "Policy",
    "ProfileResult",
    "TotalVerdict",
    "Verdict",
    "__version__",
    "profile",
    "profile_train_step",
    "read_report",
    "slow_backward",
    "slow_down",
]
