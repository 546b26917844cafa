"""A baseline entry's history: the earlier recordings a refresh keeps, and when it must start afresh.

Owns the rule of ``--fxprof-update`` (``carry``): the new recording of a test's ``fxprof`` call keeps the previous
entry's recordings, newest first, as long as they measured the same thing in the same place and way: the same
environment (``Environment.MATCH_FIELDS``) and protocol (``Protocol.MATCH_FIELDS``) for every one of them, the same
nodes in the same order, the same setup and the same capture method. Otherwise the history starts afresh, and the
caller is told why. The same rule, read back, is ``BaselineEntry.comparable_recordings``: the bands are never learnt
from a recording that a file edited by hand holds of another environment or protocol; the next update starts such a
history afresh and says so. Also owns the date a recording gets
(``now``, replaceable in tests) and the trim of ``fxprof prune --history`` (``trim``).

Must not import torch, pytest or pandas.
"""

from __future__ import annotations

import time
from dataclasses import replace

from pytest_fxprof.records.measurement import BaselineEntry, measured_unlike

DEFAULT_KEEP = 5
"""Recordings an entry holds in all, its own included, unless ``--fxprof-history`` says otherwise."""


def utc_now() -> str:
    """The current time as a recording's date: UTC, ISO 8601 to the second (``2026-11-24T22:30:05Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


now = utc_now
"""The clock ``--fxprof-update`` dates recordings with; tests replace it (``monkeypatch.setattr``)."""


def why_not_comparable(previous: BaselineEntry, new: BaselineEntry) -> str:
    """Why ``previous``'s recordings cannot be kept beside ``new``'s (``the graph changed (...)``), or "" if
    they can: its own must have been measured as ``new``'s was (``records.measurement.measured_unlike``:
    environment and protocol), and it must hold the same graph, capture method and setup."""
    why = measured_unlike(previous.own_recording, new.own_recording)
    if why:
        return why
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
    """``new`` dated ``date``, holding at most ``keep`` recordings in all: its own, then ``previous``'s (its own
    recording, then its history) where they are comparable (``why_not_comparable``) and each that would be kept
    was measured as ``new`` was (``measured_unlike``). Also why the history restarted, or "" (no previous entry,
    nothing to keep with ``keep`` 1, or kept)."""
    if keep < 1:
        raise ValueError(f"a baseline entry keeps at least 1 recording (its own), not {keep}")
    dated = replace(new, recorded=date, history=())
    if previous is None or keep == 1:
        return dated, ""
    why = why_not_comparable(previous, new)
    if why:
        return dated, why
    kept = previous.recordings[: keep - 1]
    for recording in kept[1:]:
        # only a file edited by hand (a merge resolved by hand) holds one measured otherwise than its entry: the
        # bands never learnt from it, and which of the others are this runner's drift cannot be told: start afresh
        why = measured_unlike(recording, new.own_recording)
        if why:
            return dated, f"{why} in its recording of {recording.date or 'an unknown date'}"
    return replace(dated, history=kept), ""


def trim(entry: BaselineEntry, keep: int) -> BaselineEntry:
    """``entry`` with at most ``keep`` recordings in all (its own and the newest of its history)."""
    if keep < 1:
        raise ValueError(f"a baseline entry keeps at least 1 recording (its own), not {keep}")
    return replace(entry, history=entry.history[: keep - 1])
