"""A baseline entry's history: the earlier recordings a refresh keeps, and when it must start afresh.

Owns the rule of ``--fxprof-update`` (``carry``; read back, ``BaselineEntry.comparable_recordings``), the date a
recording gets (``now``, replaceable in tests) and the trim of ``fxprof prune --history`` (``trim``).

Must not import torch, pytest or pandas.
"""

from __future__ import annotations

import time
from dataclasses import replace

from pytest_fxprof.records.measurement import BaselineEntry, measured_unlike

DEFAULT_KEEP = 5
"""Recordings an entry holds in all, its own included, unless ``--fxprof-history`` says otherwise."""


def now() -> str:
    """The current time as ``--fxprof-update`` dates a recording: UTC, ISO 8601 to the second
    (``2026-11-24T22:30:05Z``); tests replace it (``monkeypatch.setattr``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def why_not_comparable(previous: BaselineEntry, new: BaselineEntry) -> str:
    """Why ``previous``'s recordings cannot be kept beside ``new``'s (``the graph changed (...)``), or "" if
    they can: its own must have been measured as ``new``'s was (``records.measurement.measured_unlike``:
    environment and protocol), and it must hold the same graph, capture method and setup."""
    return measured_unlike(previous.own_recording, new.own_recording) or other_program(previous, new)


def other_program(previous: BaselineEntry, new: BaselineEntry) -> str:
    """Why every recording of ``previous`` measured another program than ``new`` (another capture method, graph or
    setup), or "": where it did, none of them can be kept, whatever environment each was measured in."""
    if previous.capture.method != new.capture.method:
        return f"the capture method changed ({previous.capture.method} -> {new.capture.method})"
    old_keys, new_keys = [n.key for n in previous.nodes], [n.key for n in new.nodes]
    if old_keys != new_keys:
        added, removed = len(set(new_keys) - set(old_keys)), len(set(old_keys) - set(new_keys))
        if added or removed:
            return f"the graph changed ({added} node(s) added, {removed} removed)"
        return "the graph changed (its nodes run in another order)"
    if previous.setup is not None and new.setup is not None:
        setup = previous.setup.differences(new.setup)
        if setup:
            return f"the setup changed ({'; '.join(setup)})"
    return ""


def carry(previous: BaselineEntry | None, new: BaselineEntry, keep: int, date: str) -> tuple[BaselineEntry, str]:
    """``new`` dated ``date``, holding at most ``keep`` recordings in all: its own, then, newest first, those of
    ``previous`` that measured the same program (``other_program``) as ``new`` was measured (``measured_unlike``); one
    measured otherwise is set aside, never a reason to drop the others. Also what the summary says of it: why none
    was kept, which were set aside where they would have been kept, or "" (none to keep, or all kept)."""
    if keep < 1:
        raise ValueError(f"a baseline entry keeps at least 1 recording (its own), not {keep}")
    dated = replace(new, recorded=date, history=())
    if previous is None or keep == 1:
        return dated, ""
    earlier = previous.recordings
    why = other_program(previous, new)
    if why:
        return dated, f"history restarted, {why}; its {len(earlier)} earlier recording(s) were not kept"
    # only those that would be kept count: one that would age out anyway changes nothing
    window = earlier[: keep - 1]
    aside = [(r, measured_unlike(r, new.own_recording)) for r in earlier]
    alike = [r for r, unlike in aside if not unlike]
    kept = tuple(alike[: keep - 1])
    set_aside = [(r, unlike) for r, unlike in aside if unlike and any(r is w for w in window)]
    if not set_aside:
        return replace(dated, history=kept), ""
    first, unlike = set_aside[0]
    when = f"its recording of {first.date}" if first.date else "a recording of an unknown date"
    if not kept:
        return dated, f"history restarted, {unlike} in {when}; its {len(earlier)} earlier recording(s) were not kept"
    return replace(dated, history=kept), (
        f"{len(set_aside)} earlier recording(s) set aside, measured otherwise ({unlike} in {when}); the "
        f"{len(kept)} measured as this one was kept"
    )


def trim(entry: BaselineEntry, keep: int) -> BaselineEntry:
    """``entry`` with at most ``keep`` recordings in all (its own and the newest of its history)."""
    if keep < 1:
        raise ValueError(f"a baseline entry keeps at least 1 recording (its own), not {keep}")
    return replace(entry, history=entry.history[: keep - 1])
