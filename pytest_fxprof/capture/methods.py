"""The capture methods by name: the one list the ``capture`` setting, ``auto``'s order and the dispatch read.

``symbolic`` is ``torch.fx`` symbolic tracing (with leaf modules and a user tracer; ``choose`` runs it itself);
``inductor`` times the kernels of compiled code rather than graph nodes (``capture.inductor``, which the profiler
runs itself);
each of ``GRAPH_METHODS`` is a module of this package with ``capture(module, args, kwargs, checker)``, tried by
``auto`` in this order after symbolic tracing. A new method is a module and one line here.

Must not import torch or pytest: the settings read the names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    name: str
    """What the ``capture`` setting says."""
    label: str
    """How messages name it."""
    module: str
    """The module of this package that captures with it."""


AUTO = "auto"
SYMBOLIC = "symbolic"
INDUCTOR = "inductor"
"""Compile with ``torch.compile`` (Inductor) and time its kernels (``capture.inductor``); ``auto`` does so for a
module that is compiled already."""
GRAPH_METHODS = (
    Method("export", "torch.export", "pytest_fxprof.capture.export"),
    Method("dynamo", "torch.compile (dynamo)", "pytest_fxprof.capture.dynamo"),
)
MODES = (AUTO, SYMBOLIC, *(m.name for m in GRAPH_METHODS), INDUCTOR)
"""Every value the ``capture`` setting takes."""
BY_NAME = {m.name: m for m in GRAPH_METHODS}
