"""Capture: a module becomes one or more torch.fx graphs that run like it, with every node named.

- ``choose``: ``capture_module``, the entry: the mode asked for, or ``auto``'s first capture that computes
  what the module computes;
- ``symbolic``, ``export``, ``dynamo``: one module per capture method;
- ``step``: ``capture_step``, a training step's forward and backward graphs (AOTAutograd) and its optimizer;
- ``graphs``: ``Captured`` (the graphs and how to run them) and running one pass of them;
- ``nodes``: each node's identity (module path, target, source line, stable key);
- ``state``: leaving the module and the inputs as they were;
- ``verify``: whether a capture computes what the module computes;
- ``errors`` and ``sources``: how a failure reads, and which source lines are the user's.

Imports torch; imports from the rest of the package only the records.

Must not import pytest.
"""
