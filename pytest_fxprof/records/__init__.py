"""Plain records: what every stage of the pipeline hands to the next.

- ``measurement``: a node's identity, one process's run, the environment, protocol and capture of a
  measurement, a baseline entry, and the median and spread they are summarised with;
- ``verdicts``: what the gate decided, per node, per aggregate and for the total, each with its reason;
- ``profile``: what one ``fxprof`` call measured (``Profile``) and its roll-ups by module and operator type;
- ``units``: times and rates as people read them.

Frozen dataclasses and pure functions over them. Records sit at the bottom: they import nothing from the rest
of the package, so any stage can take them and every view can show them.

Must not import torch, pytest or pandas.
"""
