"""The run's modes, one module each, holding the mode as pytest sees it (an object registered with pytest, with the
hooks only it needs) and its tests' ``fxprof`` calls (a ``Calls`` subclass): ``plugin`` picks the mode when pytest
is configured.

- ``base``: what every mode shares: ``RunMode``, ``Calls`` with its ``CallPlan``, and the run without the gate
  (``OffMode``, ``OffCalls``);
- ``gate``: ``Gate``, the end of a gated run (baselines written, unused ones found, report views, the terminal
  summary), which ``check``, ``update`` and ``against`` share;
- ``check`` (``--fxprof``), ``update`` (``--fxprof-update``), ``against`` (``--fxprof-against``), ``sample``
  (``--fxprof-sample``: a fresh process that a recording, a confirmation or a pair started);
- ``xdist``: pytest-xdist's controller and worker; ``isolated``: each test of a process that serves several run
  in a process forked for it.

Must not import torch at module level: pytest loads the plugin on every run.
"""
