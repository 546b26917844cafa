"""The run's mode as one object registered with pytest: ``plugin`` picks it when pytest is configured, and the
mode makes each test's ``session`` calls and holds the hooks only it needs.

- ``base``: ``RunMode``, what every mode offers the fixture and the plugin's hooks, and ``OffMode`` (no gate);
- ``gate``: ``CheckMode`` and ``UpdateMode``, and the end of a gated run (baselines written, unused ones found,
  report views, the terminal summary) that ``against``'s ``AgainstMode`` shares;
- ``against``: ``AgainstMode``, the old side of a check against a revision prepared (its revision exported,
  its Python checked) and handed to xdist's workers;
- ``child``: ``ChildMode``, a fresh process that a recording, a confirmation or a pair started: what its
  parent asked, and what became of its test whatever that was.

Must not import torch at module level: pytest loads the plugin on every run.
"""
