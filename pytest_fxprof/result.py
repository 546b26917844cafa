"""What ``pytest_fxprof.profile`` and the ``fxprof`` fixture return: a profile with its views at hand.

Owns ``ProfileResult``: the plain ``records.profile.Profile`` (every measured field and roll-up) plus the
conveniences a user reaches for in a test or a notebook: ``table``, ``hints``, ``to_dataframe`` and
``to_csv``. They live here, above the views, the hints and the files they call, so that the records below
import none of them. Must not import torch or pytest. Must not import pandas at module level.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_fxprof.judge.hints import Hint, profile_hints
from pytest_fxprof.records.disturbance import disturbance_to_json
from pytest_fxprof.records.profile import ROLLUPS, Profile
from pytest_fxprof.store.files import write_atomic
from pytest_fxprof.views.frames import node_rows, rollup_rows, verdict_rows
from pytest_fxprof.views.render import profile_table, rollup_table

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class ProfileResult(Profile):
    """What one profile measured, returned by ``pytest_fxprof.profile`` and the ``fxprof`` fixture: every field
    of ``Profile`` (see there), and its tables, hints and DataFrames at hand."""

    @classmethod
    def of(cls, profile: Profile) -> ProfileResult:
        """``profile`` as a result (itself when it is one already)."""
        if isinstance(profile, cls):
            return profile
        return cls(**{f.name: getattr(profile, f.name) for f in fields(Profile)})

    def table(self, sort: str = "time", limit: int | None = None, by: str = "node") -> str:
        """A per-node table (``by="node"``), or a roll-up table (``by="module"`` or ``"op"``); ``sort`` is
        ``"time"`` (slowest first), ``"graph"`` (execution order; nodes only) or, for a compared profile,
        ``"stake"`` (what failed the test first, then the most time lost, never the largest ratio; the nodes too
        small to fail a test alone folded into one row per module; nodes only)."""
        if by == "node":
            return profile_table(self, sort=sort, limit=limit)
        if sort != "time":
            raise ValueError(f"roll-ups are sorted by time; sort={sort!r} is for the node table (by='node')")
        return rollup_table(self, by=by, limit=limit)

    @property
    def hints(self) -> tuple[Hint, ...]:
        """Where to look for speed (a convolution whose BatchNorm could be folded into it, memory-bound
        nodes with a large share, nodes far below their peers' FLOP/s, layout copies); never failures."""
        return profile_hints(self)

    def to_dataframe(self, by: str = "node") -> pd.DataFrame:
        """A table of the profile, times in microseconds.

        - ``"node"``: one row per node in execution order, with its output shape and layout, FLOP counts
          and achieved GFLOP/s where counted, on CUDA the host (launch) time and the memory allocated
          after each node and its peak while it ran, and when compared with a baseline the baseline
          time, the ratio after the speed factor, the band and the verdict;
        - ``"module"`` or ``"op"``: one row per roll-up;
        - ``"verdict"``: one row per decision of the comparison (each node, each aggregate, the total),
          with its reason; empty when the profile was not compared.

        Every table carries the profile's disturbance in ``attrs``: ``attrs["busy_machine"]`` is "measured on a
        busy machine: <figures>" when the passes were disturbed ("" when not), ``attrs["disturbance"]`` every figure.
        """
        import pandas as pd

        if by == "node":
            rows, columns = node_rows(self)
        elif by == "verdict":
            rows, columns = verdict_rows(self.comparison)
        elif by in ROLLUPS:
            rows, columns = rollup_rows(self.rollup(by))
        else:
            raise ValueError(f"by must be 'node', 'module', 'op' or 'verdict', not {by!r}")
        frame = pd.DataFrame(rows, columns=columns)
        # how disturbed the passes were: "measured on a busy machine: ..." or "", and every figure
        frame.attrs["busy_machine"] = self.disturbance.line
        frame.attrs["disturbance"] = disturbance_to_json(self.disturbance)
        return frame

    def to_csv(self, path: str | Path, by: str = "node") -> None:
        """Write ``to_dataframe(by)`` as CSV (no index column), whole or not at all."""
        write_atomic(Path(path), self.to_dataframe(by).to_csv(index=False))
