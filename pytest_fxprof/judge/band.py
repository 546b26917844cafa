"""One band, in either mode: how far an item's ratio may move before it is a change, and why
(``records.verdicts.BandSource``), with how strictly the item's level is tested folded in.

An item's band is the largest of its tolerance, ``k`` deviations of its measured spread (against a stored
baseline: the paired rule has no spread here, its interval tests the pairs' own) and its floor. An aggregate at a
level that tests many items (``aggregates.Group.strictness``) is held to that share of the false-alarm rate: its
``k``, or against a revision its interval's confidence (``corrected_confidence``, at Student's ``t_quantile``), is
raised to match.

Pure. Must not import torch, pytest or pandas.
"""

from __future__ import annotations

import functools
import math
import statistics

from pytest_fxprof.records.verdicts import BandSource

SPREAD_K = 3.0
"""Default band width in between-process standard deviations (log scale): about 1 in 700 one-sided."""


def band_for(
    tolerance: float, sigma: float | None, *, k: float = SPREAD_K, floor: float = 0.0, strictness: float = 1.0
) -> tuple[float, BandSource]:
    """The relative band and what set it: the largest of the tolerance, ``k`` deviations (raised for
    ``strictness``, ``corrected_k``) and the relative floor."""
    band, source = tolerance, BandSource.TOLERANCE
    spread = math.exp(corrected_k(k, strictness) * sigma) - 1.0 if sigma is not None else 0.0
    if spread > band:
        band, source = spread, BandSource.SPREAD
    if floor > band:
        band, source = floor, BandSource.FLOOR
    return band, source


def corrected_k(k: float, strictness: float) -> float:
    """The deviations a one-sided test needs for ``strictness`` of the false-alarm rate ``k`` deviations give."""
    if strictness >= 1.0:
        return k
    normal = statistics.NormalDist()
    return normal.inv_cdf(1.0 - normal.cdf(-k) * strictness)


def corrected_confidence(confidence: float, strictness: float) -> float:
    """The confidence a one-sided interval needs for ``strictness`` of the false-alarm rate ``confidence`` gives."""
    return 1.0 - (1.0 - confidence) * strictness


def t_cdf(t: float, df: int) -> float:
    """Student's t distribution function for whole degrees of freedom, in closed form (Abramowitz and Stegun,
    26.7.3 and 26.7.4): exact to rounding."""
    theta = math.atan2(t, math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2:  # odd: 2/pi (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))
        term, series = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            series += term
        inner = theta + s * math.cos(theta) * series
        central = 2.0 / math.pi * inner
    else:  # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
        term, series = 1.0, 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            series += term
        central = s * series
    return 0.5 + 0.5 * central  # central is P(|T| < t), signed as t


@functools.cache
def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: the t with ``t_cdf(t, df) == p`` (infinite without degrees of freedom), by
    bisection on the exact distribution function."""
    if df < 1:
        return math.inf
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low <= 1e-12 * high:
            break
    return (low + high) / 2.0
