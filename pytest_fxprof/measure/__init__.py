"""Measure: captured graphs become times, node by node, pass by pass, process by process.

- ``program``: the program a profile times, one entrance for a forward, a training step and a compiled module;
- ``profiler``: ``profile_module``, the schedule of one profile (the plain call as the user makes it, the reference
  workload beside it, then warm-up and kept instrumented passes, preempted ones measured again);
- ``engine``: how one pass becomes a time per node (timestamps compiled into the graph, or an interpreter;
  CUDA events on a GPU);
- ``machine``: the environment a profile records, the allocator, the clocks and the reference workload;
- ``facts``: what each node does, seen in untimed passes (FLOPs, shapes, layouts, bytes, inputs, mode, page faults);
- ``signature``: the test's side of a measurement (the inputs' signatures, the module's mode);
- ``sampling``: fresh processes that measure a test again, for baselines, confirmations and the sides of a
  check against a revision;
- ``forking``, ``zygote``: a check's side processes forked from one parent that imported the run's libraries;
- ``lockstep``: passes in lock-step with a twin process (the duet schedule against a revision);
- ``leaves``: a training step's submodules named in ``leaf_modules`` reported as one node per direction.

Imports torch (``sampling`` does not: it starts the processes that do).

Must not import pytest.
"""
