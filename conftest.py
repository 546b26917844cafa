"""Project-wide test configuration: pytester for the plugin's integration tests.

pytester's in-process runs unload every module a run imported. Profiling imports torch's compiler stack
(source lines of traced nodes, the flop counter, dynamo captures), and some of it refuses to be imported a
second time (triton's native extension aborts the interpreter; inductor's cache artifacts register once), so
it is imported once here, before any run: a dynamo capture of a tiny module loads what every later one needs.
"""

import torch
import torch._dynamo
import torch.utils.flop_counter

from pytest_fxprof.capture.choose import capture_module

with torch.no_grad():
    capture_module(torch.nn.Linear(2, 2), (torch.randn(1, 2),), {}, mode="dynamo")

pytest_plugins = ("pytester",)
