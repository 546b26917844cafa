"""Times and rates as people read them: ``1.27 ms``, ``12.3`` GFLOP/s.

Owns the one way every message, table and view writes a duration or a FLOP rate, so that a hint, a failure
and a report say the same number the same way. Must not import torch, pytest or pandas.
"""

from __future__ import annotations


def fmt_ns(ns: float) -> str:
    """A time with a unit that keeps three significant digits readable."""
    size = abs(ns)
    for scale, unit, digits in ((1.0, "ns", 0), (1e3, "us", 1), (1e6, "ms", 2)):
        if round(size / scale, digits) < 1000:  # the next unit up once this one would show 1000
            return f"{ns / scale:.{digits}f} {unit}"
    return f"{ns / 1e9:.2f} s"


def fmt_rate(flops_per_s: float | None) -> str:
    """Achieved floating-point operations per second, in GFLOP/s (empty when not counted)."""
    return "" if flops_per_s is None else f"{flops_per_s / 1e9:.1f}"
