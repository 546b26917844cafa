"""Project-wide test configuration: pytester for the plugin's integration tests.

pytester's in-process runs unload every module a run imported. Profiling imports torch's compiler stack
(source lines of traced nodes, the flop counter, dynamo captures), and triton's native extension aborts
the interpreter when it is imported a second time, so it is imported once here, before any run.
"""

import torch._dynamo
import torch.utils.flop_counter  # noqa: F401

pytest_plugins = ("pytester",)
