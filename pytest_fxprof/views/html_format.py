"""The HTML report's small pieces: escaped text, ratios, counts, badges in a verdict's tone, lists of names and
grids of facts. Must not import torch or pytest."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from pytest_fxprof.views.judged_json import AggregateJSON, TotalJSON
from pytest_fxprof.views.report import verdict_tone

NAMES_SHOWN = 6


def esc(value: object) -> str:
    return escape(str(value), quote=True)


def fmt_ratio(r: float | None) -> str:
    return "" if r is None else f"x{r:.2f}"


def fmt_band(b: float | None) -> str:
    return "" if b is None else f"+{b:.0%}"


def fmt_pct(x: float | None, digits: int = 1) -> str:
    return "" if x is None else f"{x:.{digits}%}"


def counted(n: object, noun: str, plural: str = "s") -> str:
    return f"{n} {noun}{'' if n == 1 else plural}"


def badge(text: str, tone: str) -> str:
    return f'<span class="badge t-{tone}">{esc(text)}</span>'


def verdict_badge(judged: AggregateJSON | TotalJSON) -> str:
    """The verdict of a judged item (an aggregate or the total) in its colour."""
    verdict = judged.get("verdict")
    return badge(str(verdict or ""), verdict_tone(verdict, gates=True, confirmed=judged.get("confirmed")))


def name_list(names: Sequence[str], limit: int = NAMES_SHOWN) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", \N{HORIZONTAL ELLIPSIS} {len(names) - limit} more" if len(names) > limit else "")


def facts(pairs: Sequence[tuple[str, str]]) -> str:
    """A compact grid of label and value pairs; empty values are left out."""
    items = "".join(f"<div><dt>{esc(k)}</dt><dd>{esc(v)}</dd></div>" for k, v in pairs if v != "")
    return f'<dl class="facts">{items}</dl>'
