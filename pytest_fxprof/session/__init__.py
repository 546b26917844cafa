"""What every mode's run shares, without pytest: how a comparison ends a test, what the user chose, what the run
gathered.

- ``ending``: how a comparison ends a test (failures, skips, warnings), a pure function;
- ``reactions``: what the user chose the gate does with each kind of ending, and the advice it gives;
- ``run``: ``RunState``, what the run gathered (from xdist workers too), the baselines it writes, the ones
  whose test no longer exists.

Must not import pytest: ``modes`` turns outcomes into pytest calls. Must not import torch at module level.
"""
