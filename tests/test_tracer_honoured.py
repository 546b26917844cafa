"""An explicit tracer, leaf list or capture mode is honoured or fails with its own error and the fix: no other
capture stands in for it. Only ``capture="auto"`` with neither falls back to torch.export or dynamo."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.fx
from torch import nn

from pytest_fxprof.capture.errors import CaptureError
from tests.test_capture import Block, NotATensorWhileTraced, RootBranch, assert_runs_like, capture, image, net
from tests.test_plugin import run, write_tests


class PlainTracer(torch.fx.Tracer):
    """symbolic_trace's own tracer under another name: it cannot trace a data-dependent branch."""


class RefusesBlocks(torch.fx.Tracer):
    """Raises its own error when it reaches a ``Block``."""

    def call_module(self, m: nn.Module, forward: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if isinstance(m, Block):
            raise NotImplementedError("this tracer does not know Block")
        return super().call_module(m, forward, args, kwargs)


class KeepBlocks(torch.fx.Tracer):
    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return isinstance(m, Block) or super().is_leaf_module(m, module_qualified_name)


def test_a_tracer_that_fails_in_a_submodule_fails_the_capture_instead_of_falling_back() -> None:
    with pytest.raises(CaptureError) as info:
        capture(net(branch=True), image(), options={"tracer": PlainTracer()})
    lines = str(info.value).splitlines()
    assert lines[0].startswith("could not capture Net with the tracer passed (tracer=PlainTracer)")
    assert "no other capture" in lines[0]
    assert "failed in 'layer.0' (Block): TraceError" in lines[1]
    assert "if self.branch and y.sum() > 0:" in lines[1]  # the user's line that broke it
    assert lines[-1].startswith("  Fix: make the tracer handle it")
    assert "is_leaf_module can keep 'layer.0' whole" in lines[-1]
    assert "drop tracer=" in lines[-1]
    assert isinstance(info.value.__cause__, torch.fx.proxy.TraceError)


def test_a_tracer_that_raises_its_own_error_names_it_and_the_submodule() -> None:
    for mode in ("auto", "symbolic"):
        with pytest.raises(CaptureError) as info:
            capture(net(), image(), mode=mode, options={"tracer": RefusesBlocks()})
        text = str(info.value)
        assert "tracer=RefusesBlocks" in text
        assert "NotImplementedError: this tracer does not know Block" in text
        assert "'layer.0' (Block)" in text
        assert "Fix: make the tracer handle it" in text


def test_a_tracer_whose_graph_differs_from_the_module_fails_the_capture() -> None:
    model, x = NotATensorWhileTraced().eval(), torch.randn(2, 4)
    with pytest.raises(CaptureError) as info:
        capture(model, x, options={"tracer": PlainTracer()})
    lines = str(info.value).splitlines()
    assert "tracer=PlainTracer" in lines[0]
    assert "output differs" in lines[1]
    assert "Fix: make the tracer trace what forward computes" in lines[-1]


def test_a_tracer_that_works_is_used_and_leaf_modules_beside_it_are_refused() -> None:
    model, x = net(branch=True), image()
    captured = capture(model, x, options={"tracer": KeepBlocks()})
    assert (captured.capture.method, captured.capture.detail) == ("tracer:KeepBlocks", "")
    assert_runs_like(model, captured, x)
    with pytest.raises(CaptureError, match=r"(?s)tracer= and leaf_modules= cannot be used together.*Fix: "):
        capture(model, x, options={"tracer": KeepBlocks(), "leaf_modules": ["layer.0"]})


def test_leaf_modules_that_cannot_be_honoured_fail_the_capture_instead_of_falling_back() -> None:
    torch.manual_seed(0)
    with pytest.raises(CaptureError) as info:
        capture(RootBranch().eval(), torch.randn(2, 4), options={"leaf_modules": ["fc"]})
    lines = str(info.value).splitlines()
    assert lines[0].startswith("could not capture RootBranch by symbolic tracing with leaf_modules=['fc']")
    assert "symbolic_trace failed: TraceError" in lines[1]
    assert "drop leaf_modules=" in lines[-1]


@pytest.mark.parametrize("mode", ["export", "dynamo"])
def test_a_tracer_with_export_or_dynamo_is_a_usage_error(mode: str) -> None:
    with pytest.raises(CaptureError) as info:
        capture(net(), image(), mode=mode, options={"tracer": KeepBlocks()})
    text = str(info.value)
    assert text.startswith(f'tracer= is for symbolic tracing; capture="{mode}" cannot use it')
    assert 'capture="symbolic"' in text
    assert "--fxprof-capture" in text


def test_a_failing_tracer_fails_the_test_under_update(pytester: pytest.Pytester) -> None:
    write_tests(
        pytester,
        """
        class Gate(nn.Module):
            def forward(self, x):
                if x.sum() > 0:
                    return x
                return -x


        class Gated(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)
                self.gate = Gate()

            def forward(self, x):
                return self.gate(self.fc(x))


        def test_gated(fxprof):
            fxprof(Gated(), torch.randn(4, 8), tracer=torch.fx.Tracer())
        """,
    )
    result = run(pytester, "--fxprof-update", "--fxprof-capture=auto")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*fxprof: could not capture Gated with the tracer passed (tracer=Tracer)*",
            "*failed in 'gate' (Gate): TraceError*",
            "*Fix: make the tracer handle it*drop tracer=*",
        ]
    )
    assert not (pytester.path / "baselines").exists() or not any((pytester.path / "baselines").iterdir())
