"""Project-wide test configuration: pytester for the plugin's integration tests, each test with its own temporary
directory (and so its own measuring lock).

pytester's in-process runs unload every module a run imported. Profiling imports torch's compiler stack
(source lines of traced nodes, the flop counter, dynamo captures), and some of it refuses to be imported a
second time (triton's native extension aborts the interpreter; inductor's cache artifacts register once), so
it is imported once, before any test runs: a dynamo capture of a tiny module loads what every later one needs.
Only where a collected test needs torch (its module imported it, or it runs pytest itself): a run of the
torch-free tests alone never imports it.
"""

from __future__ import annotations

import sys
import tempfile

import pytest

pytest_plugins = ("pytester",)


def _load_torch_once() -> None:
    import torch
    import torch._dynamo
    import torch.utils.flop_counter

    from pytest_fxprof.capture.choose import capture_module

    with torch.no_grad():
        capture_module(torch.nn.Linear(2, 2), (torch.randn(1, 2),), {}, mode="dynamo")


def pytest_collection_finish(session: pytest.Session) -> None:
    inner_runs = any("pytester" in getattr(item, "fixturenames", ()) for item in session.items)
    if "torch" in sys.modules or inner_runs:
        _load_torch_once()


@pytest.fixture(autouse=True)
def _own_measuring_lock(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's inner runs take measuring turns among themselves (their default lock file lies in a temporary
    directory of the test's own), not with the other xdist worker's tests or an fxprof run elsewhere on the machine:
    their clocks are fakes, or their figures are not what the test asserts."""
    monkeypatch.setenv("TMPDIR", str(tmp_path_factory.mktemp("tmp")))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
