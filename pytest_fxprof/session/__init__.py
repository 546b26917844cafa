"""The gate's workflow for one pytest run, without pytest: per test, profile and judge; per run, gather and write.

- ``calls``: ``Calls``, the ``fxprof`` calls of one test, profiled; one subclass per mode, each in its module:
  ``check`` (against stored baselines), ``update`` (recording them), ``against`` (pairs of processes against a
  revision), ``child`` (a fresh process a recording or a pair started), and ``calls.OffCalls`` (no gate);
- ``ending``: how a comparison ends a test (failures, skips, warnings), a pure function;
- ``reactions``: what the user chose the gate does with each kind of ending, and the advice it gives;
- ``run``: ``RunState``, what the run gathered (from xdist workers too), the baselines it writes, the ones
  whose test no longer exists.

Must not import pytest: ``modes`` turns outcomes into pytest calls. Must not import torch at module level: it
is reached only through ``measure.profiler``, imported when a profile is taken.
"""
