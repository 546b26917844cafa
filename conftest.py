"""Project-wide test configuration: pytester for the plugin's integration tests, each test with its own temporary
directory (and so its own measuring lock).

pytester's in-process runs unload every module a run imported. Profiling imports torch's compiler stack
(source lines of traced nodes, the flop counter, dynamo captures), and some of it refuses to be imported a
second time (triton's native extension aborts the interpreter; inductor's cache artifacts register once), so
it is imported once here, before any run: a dynamo capture of a tiny module loads what every later one needs.
"""

import tempfile

import pytest
import torch
import torch._dynamo
import torch.utils.flop_counter

from pytest_fxprof.capture.choose import capture_module

with torch.no_grad():
    capture_module(torch.nn.Linear(2, 2), (torch.randn(1, 2),), {}, mode="dynamo")

pytest_plugins = ("pytester",)


@pytest.fixture(autouse=True)
def _own_measuring_lock(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's inner runs take measuring turns among themselves (their default lock file lies in a temporary
    directory of the test's own), not with the other xdist worker's tests or an fxprof run elsewhere on the machine:
    their clocks are fakes, or their figures are not what the test asserts."""
    monkeypatch.setenv("TMPDIR", str(tmp_path_factory.mktemp("tmp")))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
