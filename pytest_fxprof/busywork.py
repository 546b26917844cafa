"""Busy work: the CPU time a controlled slowdown adds, forward (``slowdown``) or backward (``slowbackward``).

Must not import torch or pytest.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def busy_work(started_ns: int, fraction: float, clock: Callable[[], int] = time.thread_time_ns) -> None:
    """Work, not wait, for ``fraction`` of the time ``clock`` measured since ``started_ns``."""
    now = clock()
    until = now + (now - started_ns) * fraction
    while clock() < until:
        pass
