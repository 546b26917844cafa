"""Capturing modules as graphs by every mode: what the graphs compute, what their nodes are called, that the
runners stand in for the graphs, what the capture leaves untouched, and how it fails."""

from __future__ import annotations

import collections
import importlib
from typing import Any

import pytest
import torch
import torch.fx
from torch import nn
from torch.fx._symbolic_trace import PH

from pytest_fxprof.capture import dynamo as dynamo_capture
from pytest_fxprof.capture import methods
from pytest_fxprof.capture.choose import MAX_LEAF_RETRIES, capture_module, resolved_submodules
from pytest_fxprof.capture.errors import CaptureError, ProfileError
from pytest_fxprof.capture.graphs import Captured, plain_runners
from pytest_fxprof.capture.nodes import describe_nodes, normalise_module_path
from pytest_fxprof.capture.verify import output_difference
from pytest_fxprof.records.measurement import Capture
from tests.test_profiler import ParamMutator

MODES = ("symbolic", "export", "dynamo", "auto")


class Block(nn.Module):
    def __init__(self, branch: bool = False) -> None:
        super().__init__()
        self.branch = branch
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        if self.branch and y.sum() > 0:  # data-dependent: symbolic tracing fails, dynamo breaks the graph
            y = y * 2
        return y + x


class EagerBlock(Block):
    """A branching ``Block`` that computes in bfloat16 where it is compiled (as code with an eager kernel might):
    export fails on the branch, and dynamo's graphs differ from the module. Only symbolic tracing, keeping it whole,
    captures it."""

    def __init__(self) -> None:
        super().__init__(branch=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return y.bfloat16().float() if torch.compiler.is_compiling() else y


class Net(nn.Module):
    def __init__(self, branch: bool = False, blocks: int = 2, eager: bool = False) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.layer = nn.Sequential(*(EagerBlock() if eager else Block(branch) for _ in range(blocks)))
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        x = self.layer(self.stem(x))
        out: torch.Tensor = self.head(x.mean(dim=(2, 3))) * scale
        return out


class RootBranch(nn.Module):
    """Branches on a tensor's value in its own forward: no submodule can be kept whole."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.out = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        y = torch.relu(y) if y.sum() > 0 else torch.sigmoid(y)
        out: torch.Tensor = self.out(y)
        return out


class ShapeBranch(nn.Module):
    """Branches on a shape in its own forward: fixed for export, a Proxy for symbolic tracing."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 1:
            x = x - x.mean(dim=0)
        out: torch.Tensor = self.fc(x)
        return out


class Masked(nn.Module):
    """``mask is not None`` is true for every traced input: the symbolic graph fails where the module runs."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if mask is not None:
            x = x * mask
        out: torch.Tensor = self.fc(x)
        return out


class NotATensorWhileTraced(nn.Module):
    """A Proxy is not a Tensor: the symbolic graph bakes in the other branch and runs, with another result."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc(x)
        if isinstance(x, torch.Tensor):
            return out
        return out * 0


class Untraceable(nn.Module):
    """Fails every mode: a data-dependent branch that dynamo is told to skip."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    @torch._dynamo.disable  # type: ignore[untyped-decorator]
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.fc(x)
        if y.sum() > 0:
            return y
        return -y


def net(seed: int = 0, **kwargs: Any) -> Net:
    torch.manual_seed(seed)
    return Net(**kwargs).eval()


def image() -> torch.Tensor:
    return torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))


def capture(module: nn.Module, *args: Any, mode: str = "auto", options: Any = None, **kwargs: Any) -> Captured:
    """``capture_module`` as the engine calls it (under no_grad); ``options`` go to it, ``kwargs`` to the module."""
    options = {"mode": mode, **(options or {})}
    with torch.no_grad():
        return capture_module(module, args, kwargs, **options)


def run(captured: Captured, *args: Any, runners: Any = None, **kwargs: Any) -> Any:
    """One pass of the capture on copies of the inputs, each graph run by ``runners`` (plain by default)."""
    with torch.no_grad():
        prepared = captured.prepare([a.clone() for a in args], dict(kwargs))
        return captured.forward(runners if runners is not None else plain_runners(captured), prepared)


def eager(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    with torch.no_grad():
        return module(*args, **kwargs)


def assert_runs_like(module: nn.Module, captured: Captured, *args: Any, **kwargs: Any) -> None:
    expected = eager(module, *args, **kwargs)
    actual = run(captured, *args, **kwargs)
    assert output_difference(expected, actual) is None
    assert output_difference(expected, torch.zeros_like(expected)) is not None  # a check that can fail


def paths(captured: Captured) -> list[tuple[str, str]]:
    """``(module path, target)`` of every node that computes (not parameters fetched by ``get_attr``)."""
    return [(info.module, info.target) for _, info in describe_nodes(captured.graphs) if info.op != "get_attr"]


# Each mode -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "method"),
    [("symbolic", "symbolic_trace"), ("export", "export"), ("dynamo", "dynamo"), ("auto", "symbolic_trace")],
)
def test_each_mode_runs_like_the_module(mode: str, method: str) -> None:
    model, x = net(), image()
    captured = capture(model, x, mode=mode, scale=3.0)
    assert captured.capture.method == method
    assert captured.capture.graphs == len(captured.graphs) == 1
    assert captured.capture.detail == ""
    assert_runs_like(model, captured, x, scale=3.0)


def test_module_paths_and_ops_agree_across_modes() -> None:
    model, x = net(), image()
    found = {mode: paths(capture(model, x, mode=mode)) for mode in ("symbolic", "export", "dynamo")}
    # symbolic keeps torch.nn layers as call_module nodes; export and dynamo record the same module paths
    expected = ["stem", "layer.0.conv", "layer.0.bn", "layer.0", "layer.0", "layer.1.conv", "layer.1.bn"]
    expected += ["layer.1", "layer.1", "", "head", ""]
    for mode, nodes in found.items():
        assert [module for module, _ in nodes] == expected, mode
    relus = {mode: [t for m, t in nodes if m == "layer.1" and "relu" in t] for mode, nodes in found.items()}
    assert relus == {"symbolic": ["torch.relu"], "export": ["aten.relu.default"], "dynamo": ["torch.relu"]}
    convs = {mode: next(t for m, t in nodes if m == "layer.0.conv") for mode, nodes in found.items()}
    assert convs == {"symbolic": "Conv2d", "export": "aten.conv2d.default", "dynamo": "torch.conv2d"}


def test_a_sequential_gets_index_paths_in_every_mode() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Sequential(nn.Conv2d(4, 4, 3), nn.ReLU())).eval()
    x = image()
    for mode in ("symbolic", "export", "dynamo"):
        captured = capture(model, x, mode=mode)
        assert [m for m, _ in paths(captured)] == ["0", "1", "2.0", "2.1"], mode
        assert_runs_like(model, captured, x)


@pytest.mark.parametrize(
    ("spelling", "path"),
    [
        ("layer1.0.conv1", "layer1.0.conv1"),
        ("L['self'].layer1[0].conv1", "layer1.0.conv1"),
        ("L['self']._modules['layer1']._modules['0'].conv1", "layer1.0.conv1"),
        ("L['self'].blocks['a']", "blocks.a"),
        ("L__self___layer1_0_conv1", "layer1.0.conv1"),
        ("L['self']", ""),
        ("", ""),
    ],
)
def test_module_path_spellings_normalise_to_the_qualified_name(spelling: str, path: str) -> None:
    assert normalise_module_path(spelling) == path


def test_outputs_are_compared_within_float_rounding_and_otherwise_exactly() -> None:
    t = torch.randn(3, 4)
    same = {"a": [t, t.argmax(1)], "b": (1, None)}
    assert output_difference(same, {"a": [t * (1 + 1e-6), t.argmax(1)], "b": (1, None)}) is None
    assert "differs from the module's by up to" in str(output_difference(t, t * 1.01))
    tiny = t * 1e-10  # randomly initialised models can output values this small: relative, not absolute
    assert output_difference(tiny, torch.zeros_like(tiny)) is not None
    assert output_difference(t.argmax(1), t.argmax(1) + 1) == "output differs from the module's"
    assert output_difference([t], [t, t]) == "output has 2 items, the module's has 1"
    assert output_difference({"a": t}, {"b": t}) == "output has keys ['b'], the module's has ['a']"
    assert output_difference(t, t.double()) == "output is torch.float64 (3, 4), the module's is torch.float32 (3, 4)"
    assert output_difference((t,), [t]) == "output is a list, the module returns a tuple"
    assert output_difference(collections.OrderedDict(out=t), {"out": t}) is None  # symbolic tracing's dicts


# Dynamo ----------------------------------------------------------------------------------------------------


def test_dynamo_graph_breaks_make_several_graphs_with_the_right_module_paths() -> None:
    model, x = net(branch=True), image()
    captured = capture(model, x, mode="dynamo")
    assert captured.capture.method == "dynamo"
    assert captured.capture.graphs == len(captured.graphs) > 2
    assert_runs_like(model, captured, x)
    # both blocks run the same compiled code (one class); each block's nodes carry its own path
    modules = [m for m, _ in paths(captured)]
    for block in ("layer.0", "layer.1"):
        assert f"{block}.conv" in modules
        assert f"{block}.bn" in modules
        assert (block, "torch.relu") in paths(captured)
    assert not any(m.startswith(("L[", "L__")) for m in modules)


def test_runners_stand_in_for_every_graph() -> None:
    x = image()
    for mode in ("symbolic", "export", "dynamo"):
        model = net(branch=mode == "dynamo")  # several graphs with dynamo
        captured = capture(model, x, mode=mode)
        counting = Counting(plain_runners(captured))
        out = run(captured, x, runners=counting.runners())
        assert output_difference(eager(model, x), out) is None
        assert all(c >= 1 for c in counting.calls), (mode, counting.calls)
        assert len(counting.calls) == captured.capture.graphs


class Counting:
    def __init__(self, plain: list[Any]) -> None:
        self.plain = plain
        self.calls = [0] * len(plain)

    def runners(self) -> list[Any]:
        return [self.runner(i) for i in range(len(self.plain))]

    def runner(self, i: int) -> Any:
        def run(*inputs: Any) -> Any:
            self.calls[i] += 1
            return self.plain[i](*inputs)

        return run


def test_the_output_comes_from_the_runners() -> None:
    model, x = net(branch=True), image()
    captured = capture(model, x, mode="dynamo")
    plain = plain_runners(captured)
    last = len(plain) - 1

    def doubled(*inputs: Any) -> Any:
        return tuple(t * 2 for t in plain[last](*inputs))

    out = run(captured, x, runners=[*plain[:last], doubled])
    assert torch.allclose(out, eager(model, x) * 2)


def test_dynamo_refuses_a_pass_that_would_recompile() -> None:
    model = net(branch=True)
    captured = capture(model, image(), mode="dynamo")
    with pytest.raises(ProfileError, match=r"dynamo would recompile Net.*size") as info:
        run(captured, torch.randn(3, 3, 8, 8))
    assert "Fix:" in str(info.value)


def test_dynamo_refuses_a_graph_it_did_not_capture() -> None:
    torch.manual_seed(0)
    model = RootBranch().eval()
    x = torch.randn(2, 4)
    positive = x if eager(model.fc, x).sum() > 0 else -x
    captured = capture(model, positive, mode="dynamo")
    assert_runs_like(model, captured, positive)
    negative = -positive  # same shapes, no guard fails: the other side of the branch was never compiled
    assert eager(model.fc, negative).sum() <= 0
    with pytest.raises(ProfileError, match=r"not captured"):
        run(captured, negative)


def test_two_captures_of_one_class_run_their_own_weights() -> None:
    """Dynamo shares compiled code across instances of a class: each capture must still run its own module."""
    first, second, x = net(seed=1, branch=True), net(seed=2, branch=True), image()
    a = capture(first, x, mode="dynamo")
    b = capture(second, x, mode="dynamo")  # reuses what the first compiled
    assert a.capture.graphs == b.capture.graphs
    assert_runs_like(first, a, x)
    assert_runs_like(second, b, x)
    assert output_difference(eager(first, x), eager(second, x)) is not None


def test_the_users_own_torch_compile_is_left_alone() -> None:
    compiled_by_user: list[torch.fx.GraphModule] = []

    def user_backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        compiled_by_user.append(gm)
        return gm.forward

    torch.manual_seed(0)
    users, ours, x = RootBranch().eval(), RootBranch().eval(), torch.randn(2, 4)
    compiled = torch.compile(users, backend=user_backend)
    with torch.no_grad():
        compiled(x)
    before = len(compiled_by_user)
    assert before >= 2
    captured = capture(ours, x, mode="dynamo")  # the same code: dynamo must not hand us the user's graphs
    assert captured.capture.graphs >= 2
    assert_runs_like(ours, captured, x)
    with torch.no_grad():
        assert output_difference(eager(users, x), compiled(x)) is None
    assert len(compiled_by_user) == before  # nothing of theirs recompiled or dropped


def test_dynamo_without_a_graph_is_a_capture_error() -> None:
    with pytest.raises(CaptureError, match=r"(?s)made no graph of Identity.*Fix:"):
        capture(nn.Identity(), image(), mode="dynamo")


def test_dynamo_recompile_limit_is_a_capture_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class Limited(nn.Module):  # a class of its own: its code has no cache entries yet
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    monkeypatch.setattr(dynamo_capture, "RECOMPILE_LIMIT", 1)
    with torch._dynamo.config.patch(recompile_limit=1):
        capture(Limited(), torch.ones(2), mode="dynamo")
        with pytest.raises(CaptureError, match=r"(?s)recompilation limit.*'forward'.*size mismatch.*reset\(\)"):
            capture(Limited(), torch.ones(3), mode="dynamo")


def test_dynamo_compiles_a_function_once_per_shape_beyond_its_default_limit() -> None:
    """With static shapes, a function called with many shapes (nms per class in a detector) compiles each."""

    class Part(nn.Module):
        def forward(self, y: torch.Tensor) -> torch.Tensor:
            y = torch.relu(y)
            torch._dynamo.graph_break()
            return y.sum()

    class PerShape(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.part = Part()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            total = x.sum()
            for n in range(1, 12):  # more shapes than dynamo's default limit of 8
                total = total + self.part(x[:n])
            return total

    model, x = PerShape(), torch.randn(12)
    assert torch._dynamo.config.recompile_limit < 11
    captured = capture(model, x, mode="dynamo")
    assert_runs_like(model, captured, x)


# Export ----------------------------------------------------------------------------------------------------


def test_export_inputs_must_have_the_captured_structure_shapes_and_values() -> None:
    model, x = net(), image()
    captured = capture(model, x, mode="export", scale=3.0)
    assert_runs_like(model, captured, x, scale=3.0)
    with pytest.raises(ProfileError, match=r"(?s)do not match the graph torch\.export captured.*Fix:"):
        captured.prepare([x], {})
    with pytest.raises(ProfileError, match=r"torch\.float32 \(1, 3, 8, 8\); torch\.export captured it as"):
        captured.prepare([torch.randn(1, 3, 8, 8)], {"scale": 3.0})
    with pytest.raises(ProfileError, match=r"'scale' of Net is 2\.0; torch\.export specialised the graph to 3\.0"):
        captured.prepare([x], {"scale": 2.0})


def test_export_uses_the_export_codegen_but_runners_take_flat_inputs() -> None:
    model, x = net(), image()
    captured = capture(model, x, mode="export", scale=3.0)
    prepared = captured.prepare([x], {"scale": 3.0})
    placeholders = captured.graphs[0].graph.find_nodes(op="placeholder")
    assert len(prepared) == len(placeholders) == 2
    assert isinstance(captured.graphs[0].graph._codegen, torch.fx.graph._PyTreeCodeGen)


# Auto ------------------------------------------------------------------------------------------------------


class Heads(nn.Module):
    """Takes ``int()`` of its input's size, which symbolic tracing cannot (a Proxy is no number) and export can."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = int(x.shape[-1]) ** -0.5
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        attention = (q @ k.transpose(1, 2) * scale).softmax(dim=-1)
        out: torch.Tensor = self.proj(attention @ v)
        return out


class Gate(nn.Module):
    """Branches on a value and holds no submodule: kept whole, it hides nothing."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x if x.sum() > 0 else -x


class Skipped(nn.Module):
    """Branches on a value (export fails) in code dynamo runs eagerly: dynamo's graphs hold none of it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    @torch._dynamo.disable  # type: ignore[untyped-decorator]
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.fc(x)
        return y if y.sum() > 0 else -y


class Around(nn.Module):
    """A submodule between two linear layers."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.inner = inner
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.inner(self.embed(x)))
        return out


def around(inner: nn.Module) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Around(inner).eval(), torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1))


def _graph_tries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each capture by export or dynamo, by name, as it is tried (it still captures)."""
    tried: list[str] = []
    for m in methods.GRAPH_METHODS:
        module = importlib.import_module(m.module)
        real = module.capture

        def counted(*args: Any, _name: str = m.name, _real: Any = real, **kwargs: Any) -> Captured:
            tried.append(_name)
            return _real(*args, **kwargs)  # type: ignore[no-any-return]

        monkeypatch.setattr(module, "capture", counted)
    return tried


def test_auto_keeps_a_submodule_that_breaks_tracing_whole_where_nothing_else_captures_it(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    model, x = net(eager=True), image()
    tried = _graph_tries(monkeypatch)
    captured = capture(model, x)
    cap = captured.capture
    assert (cap.method, cap.leaf_modules, cap.graphs) == ("symbolic_trace", ("layer.0", "layer.1"), 1)
    assert cap.opaque == ("layer.0", "layer.1")  # blame cannot go inside them
    assert tried == ["export", "dynamo"]  # each block holds a conv and a norm that either might resolve
    assert "symbolic_trace failed in 'layer.0' (EagerBlock): TraceError" in cap.detail
    assert "if self.branch and y.sum() > 0:" in cap.detail
    assert "'layer.1' (EagerBlock): TraceError" in cap.detail
    assert "kept it whole; export: torch.export could not capture Net: GuardOnDataDependentSymNode" in cap.detail
    assert "; dynamo: the captured graph's output differs from the module's by up to" in cap.detail
    assert ("layer.0", "EagerBlock") in paths(captured)
    assert_runs_like(model, captured, x)
    assert capfd.readouterr() == ("", "")


def test_auto_takes_export_where_it_resolves_what_symbolic_tracing_kept_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    model, x = around(Heads())
    tried = _graph_tries(monkeypatch)
    captured = capture(model, x)
    cap = captured.capture
    assert (cap.method, cap.leaf_modules, cap.opaque) == ("export", (), ())
    assert tried == ["export"]  # export resolved every submodule: dynamo could resolve no more
    assert cap.detail.startswith("symbolic_trace failed in 'inner' (Heads): TypeError: int() argument must be")
    assert "scale = int(x.shape[-1]) ** -0.5" in cap.detail
    assert cap.detail.endswith("; kept it whole; export resolved 2 more submodules; captured with export")
    assert {"inner.qkv", "inner.proj"} <= {module for module, _ in paths(captured)}
    assert_runs_like(model, captured, x)


def test_auto_takes_dynamo_where_only_it_resolves_what_symbolic_tracing_kept_whole() -> None:
    model, x = net(branch=True), image()
    captured = capture(model, x)
    cap = captured.capture
    assert (cap.method, cap.leaf_modules, cap.opaque) == ("dynamo", (), ())
    assert cap.graphs == len(captured.graphs) >= 2  # the branch breaks the graph
    assert cap.detail.startswith("symbolic_trace failed in 'layer.0' (Block): TraceError")
    assert "kept it whole; export: torch.export could not capture Net" in cap.detail
    assert cap.detail.endswith("; dynamo resolved 4 more submodules; captured with dynamo")
    assert {"layer.0.conv", "layer.1.bn"} <= {module for module, _ in paths(captured)}
    assert_runs_like(model, captured, x)


def test_submodules_that_dynamo_runs_eagerly_are_not_resolved_by_it() -> None:
    """dynamo captures the rest of the model, but none of what it ran eagerly: symbolic tracing, with the submodule
    one node, resolves more (its linear layer is timed inside that node, not left out)."""
    model, x = around(Skipped())
    captured = capture(model, x)
    cap = captured.capture
    assert (cap.method, cap.leaf_modules, cap.opaque) == ("symbolic_trace", ("inner",), ("inner",))
    assert "kept it whole; export: torch.export could not capture Around" in cap.detail
    assert cap.detail.endswith("; dynamo resolved no more submodules")
    assert resolved_submodules(model, captured) == {"embed", "inner", "head"}
    dynamo = capture(model, x, mode="dynamo")
    assert resolved_submodules(model, dynamo) == {"embed", "head"}
    assert_runs_like(model, captured, x)


def test_resolved_submodules_are_those_not_inside_a_module_kept_whole() -> None:
    model, x = around(Heads())
    whole = capture(model, x, mode="symbolic", options={"leaf_modules": ["inner"]})
    assert resolved_submodules(model, whole) == {"embed", "inner", "head"}
    assert resolved_submodules(model, capture(model, x, mode="export")) == {
        "embed",
        "inner",
        "inner.qkv",
        "inner.proj",
        "head",
    }
    # parameter-free submodules that leave no node in an ATen graph are resolved all the same
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(4, 4), nn.Identity(), nn.Sequential(nn.Dropout(0.5), nn.Linear(4, 2))).eval()
    exported = capture(plain, torch.randn(2, 4), mode="export")
    assert resolved_submodules(plain, exported) == {"0", "1", "2", "2.0", "2.1"}


def test_auto_tries_nothing_more_where_symbolic_tracing_hides_no_submodule(monkeypatch: pytest.MonkeyPatch) -> None:
    tried = _graph_tries(monkeypatch)
    captured = capture(net(), image())
    assert (captured.capture.method, captured.capture.detail, captured.capture.opaque) == ("symbolic_trace", "", ())
    captured = capture(*around(Gate()))  # kept whole, but nothing is inside it
    cap = captured.capture
    assert (cap.method, cap.leaf_modules, cap.opaque) == ("symbolic_trace", ("inner",), ("inner",))
    assert cap.detail.endswith("kept it whole")
    assert tried == []


class Flattening(nn.Module):
    """Takes ``int()`` of a size of what its block returns: symbolic tracing fails in the block, then here."""

    def __init__(self) -> None:
        super().__init__()
        self.block = EagerBlock()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.block(x)
        return y.reshape(int(y.shape[0]), -1)


def test_a_submodule_kept_whole_inside_another_kept_whole_is_not_opaque() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(collections.OrderedDict(body=Flattening(), head=nn.Linear(4 * 8 * 8, 2))).eval()
    x = torch.randn(2, 4, 8, 8)
    captured = capture(model, x)
    cap = captured.capture
    assert (cap.method, cap.leaf_modules) == ("symbolic_trace", ("body", "body.block"))
    assert cap.opaque == ("body",)  # body.block is inside it: not a node of its own
    assert [module for module, _ in paths(captured)] == ["body", "head"]
    assert_runs_like(model, captured, x)


def test_auto_gives_up_keeping_submodules_whole_after_the_cap() -> None:
    model, x = net(branch=True, blocks=MAX_LEAF_RETRIES + 1), image()
    captured = capture(model, x)
    assert captured.capture.method == "dynamo"
    assert f"after keeping {MAX_LEAF_RETRIES} submodules whole" in captured.capture.detail
    assert_runs_like(model, captured, x)


def test_auto_starts_with_the_users_leaf_modules_and_tracer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given a leaf list or a tracer, auto traces with them only: no export or dynamo resolves more in their place
    (without them, auto captures this model with dynamo)."""
    model, x = net(branch=True), image()
    tried = _graph_tries(monkeypatch)
    captured = capture(model, x, options={"leaf_modules": ["layer.0"]})
    assert (captured.capture.method, captured.capture.leaf_modules) == ("symbolic_trace", ("layer.0", "layer.1"))
    assert captured.capture.opaque == ("layer.1",)  # the one auto kept whole on its own
    assert "'layer.0'" not in captured.capture.detail
    assert captured.capture.detail.endswith("kept it whole")

    class KeepBlocks(torch.fx.Tracer):
        def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
            return isinstance(m, Block) or super().is_leaf_module(m, module_qualified_name)

    captured = capture(model, x, options={"tracer": KeepBlocks()})
    assert (captured.capture.method, captured.capture.opaque) == ("tracer:KeepBlocks", ())
    assert tried == []
    assert_runs_like(model, captured, x)


def test_a_tracer_with_pytree_concrete_args_gets_flat_inputs() -> None:
    class TakesADict(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return {"a": self.fc(batch["x"]) + batch["y"], "b": batch["y"] * 2}

    class DictTracer(torch.fx.Tracer):
        def trace(self, root: Any, concrete_args: Any = None) -> torch.fx.Graph:
            return super().trace(root, concrete_args={"batch": {"x": PH, "y": PH}})

    torch.manual_seed(0)
    model, batch = TakesADict().eval(), {"x": torch.randn(2, 4), "y": torch.randn(2, 4)}
    captured = capture(model, batch, mode="symbolic", options={"tracer": DictTracer()})
    assert isinstance(captured.graphs[0].graph._codegen, torch.fx.graph._PyTreeCodeGen)
    prepared = captured.prepare([batch], {})
    assert [id(t) for t in prepared] == [id(batch["x"]), id(batch["y"])]
    with torch.no_grad():
        out = captured.forward(plain_runners(captured), prepared)
    assert output_difference(eager(model, batch), out) is None


class Flagged(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, flag: bool = True) -> torch.Tensor:
        y = self.fc(x)
        out: torch.Tensor = y.relu() if flag else y.sigmoid()
        return out


class FlagTracer(torch.fx.Tracer):
    def trace(self, root: Any, concrete_args: Any = None) -> torch.fx.Graph:
        return super().trace(root, concrete_args={"flag": True})


def test_a_concrete_argument_binds_by_position_and_its_guard_is_not_a_node() -> None:
    """torch.fx names the placeholder of a concrete ``flag`` ``flag_1`` and guards it with an eq and an
    assert: the call's value still reaches it, and the guard runs untimed."""
    torch.manual_seed(0)
    model, x = Flagged().eval(), torch.randn(2, 4)
    captured = capture(model, x, mode="symbolic", options={"tracer": FlagTracer()}, flag=True)
    assert [p.target for p in captured.graphs[0].graph.find_nodes(op="placeholder")] == ["x", "flag_1"]
    assert [info.name for _, info in describe_nodes(captured.graphs)] == ["fc", "relu"]
    assert captured.prepare([x], {"flag": True}) == [x, True]


def test_a_call_against_a_concrete_argument_is_refused_not_timed_as_the_other_graph() -> None:
    refused = r"the tracer fixed flag=True .* but this call passes flag=False: the graph traced for True would"
    model, x, tracer = Flagged().eval(), torch.randn(2, 4), {"tracer": FlagTracer()}
    with pytest.raises(ProfileError, match=refused):  # checked against the module at capture
        capture(model, x, mode="auto", options=tracer, flag=False)
    captured = capture(model, x, mode="symbolic", options=tracer, flag=False)  # as it is: no check
    with pytest.raises(ProfileError, match=refused):  # but its inputs are refused before any pass
        captured.prepare([x], {"flag": False})


class MaskedLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        y: torch.Tensor = self.fc(x)
        return y if mask is None else y * mask


class NoMaskTracer(torch.fx.Tracer):
    def trace(self, root: Any, concrete_args: Any = None) -> torch.fx.Graph:
        return super().trace(root, concrete_args={"mask": None})


def test_a_concrete_none_is_guarded_untimed_and_a_call_with_a_tensor_refused_shortly() -> None:
    """torch.fx guards a concrete None with ``_assert_is_none`` (no comparison): not a node of the model."""
    torch.manual_seed(0)
    model, x = MaskedLinear().eval(), torch.randn(2, 4)
    captured = capture(model, x, mode="symbolic", options={"tracer": NoMaskTracer()})
    graph = captured.graphs[0].graph
    assert any("_assert_is_none" in str(n.target) for n in graph.nodes)  # the guard is in the graph...
    assert [info.name for _, info in describe_nodes(captured.graphs)] == ["fc"]  # ...but not timed
    mask = torch.ones(2, 4)
    with pytest.raises(ProfileError, match=r"fixed mask=None .* passes mask=a float32\[2, 4\] tensor") as err:
        captured.prepare([x], {"mask": mask})
    assert "tensor([[" not in str(err.value)  # the tensor's contents are not printed
    with pytest.raises(ProfileError, match="fixed mask=None"):
        capture(model, x, mode="auto", options={"tracer": NoMaskTracer()}, mask=mask)


def test_a_pytree_concrete_argument_is_checked_too() -> None:
    class TakesADict(nn.Module):
        def forward(self, batch: dict[str, Any]) -> torch.Tensor:
            out: torch.Tensor = batch["x"] * 2 if batch["scale"] else batch["x"]
            return out

    class DictTracer(torch.fx.Tracer):
        def trace(self, root: Any, concrete_args: Any = None) -> torch.fx.Graph:
            return super().trace(root, concrete_args={"batch": {"x": PH, "scale": True}})

    model, x = TakesADict().eval(), torch.randn(2, 4)
    captured = capture(model, {"x": x, "scale": True}, mode="symbolic", options={"tracer": DictTracer()})
    assert captured.prepare([{"x": x, "scale": True}], {})[0] is x
    with pytest.raises(ProfileError, match=r"the tracer fixed .*=True .* but this call passes .*=False"):
        captured.prepare([{"x": x, "scale": False}], {})


def test_a_fallback_prints_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    """export prints the partial graph and torch logs warnings when they fail: auto reports that in detail."""
    torch.manual_seed(0)
    capture(RootBranch().eval(), torch.randn(2, 4))
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_auto_falls_back_to_export_when_the_root_branches_on_a_shape() -> None:
    torch.manual_seed(0)
    model, x = ShapeBranch().eval(), torch.randn(3, 4)
    captured = capture(model, x)
    assert captured.capture.method == "export"
    assert captured.capture.detail.startswith("symbolic_trace failed: TraceError")
    assert "if x.shape[0] > 1:" in captured.capture.detail
    assert captured.capture.detail.endswith("captured with export")
    assert_runs_like(model, captured, x)


def test_auto_falls_back_to_dynamo_when_the_root_branches_on_a_value() -> None:
    torch.manual_seed(0)
    model, x = RootBranch().eval(), torch.randn(2, 4)
    captured = capture(model, x)
    cap = captured.capture
    assert cap.method == "dynamo"
    assert cap.graphs == len(captured.graphs) >= 2  # the graph break splits it
    assert "symbolic_trace failed: TraceError" in cap.detail
    assert "export: torch.export could not capture RootBranch" in cap.detail
    assert_runs_like(model, captured, x)
    assert [m for m, _ in paths(captured) if m] == ["fc", "out"]


@pytest.mark.parametrize(
    ("model", "why"),
    [(Masked(), "fails where the module runs: TypeError"), (NotATensorWhileTraced(), "output differs")],
)
def test_auto_rejects_a_symbolic_graph_that_does_not_run_like_the_module(model: nn.Module, why: str) -> None:
    x = torch.randn(2, 4)
    captured = capture(model.eval(), x)
    assert captured.capture.method == "export"
    assert why in captured.capture.detail
    assert_runs_like(model, captured, x)


def test_everything_failing_is_one_error_with_a_line_per_mode() -> None:
    with pytest.raises(CaptureError) as info:
        capture(Untraceable(), torch.randn(2, 4))
    lines = str(info.value).splitlines()
    assert lines[0] == "could not capture Untraceable as graphs with any mode:"
    assert lines[1].startswith("  symbolic_trace failed: TraceError")
    assert lines[2].startswith("  export: torch.export could not capture Untraceable")
    assert lines[3].startswith("  dynamo: torch.compile (dynamo) made no graph of Untraceable")
    assert "leaf_modules=" in lines[4]
    assert "tracer=" in lines[4]
    assert 'capture="dynamo"' in lines[4]


def test_a_new_capture_method_is_its_module_and_one_entry_in_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """``capture.methods`` is the one list: the mode is accepted, dispatched to its module, tried by ``auto``
    after the others and named in its failure line."""
    again = methods.Method("export_again", "torch.export (again)", "pytest_fxprof.capture.export")
    monkeypatch.setattr(methods, "GRAPH_METHODS", (*methods.GRAPH_METHODS, again))
    monkeypatch.setattr(methods, "BY_NAME", {**methods.BY_NAME, again.name: again})
    monkeypatch.setattr(methods, "MODES", (*methods.MODES, again.name))
    model, x = net(), image()
    captured = capture(model, x, mode="export_again")
    assert captured.capture.method == "export"
    assert_runs_like(model, captured, x)
    with pytest.raises(CaptureError) as info:
        capture(Untraceable(), torch.randn(2, 4))
    assert str(info.value).splitlines()[4].startswith("  export_again: torch.export could not capture Untraceable")


# The module is left as it was ------------------------------------------------------------------------------


class Trainable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.drop(torch.relu(self.bn(self.conv(x))))
        out: torch.Tensor = self.fc(y.mean(dim=(2, 3)))
        return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("training", [True, False])
def test_the_module_is_left_as_it_was(mode: str, training: bool) -> None:
    torch.manual_seed(0)
    model = Trainable().train(training)
    model.bn.eval()  # a mix of modes must come back as it was, too
    x = image()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    tensors = {k: id(v) for k, v in model.state_dict(keep_vars=True).items()}
    attrs = {name: set(vars(m)) for name, m in model.named_modules()}
    modes = {name: m.training for name, m in model.named_modules()}
    rng = torch.random.get_rng_state()
    captured = capture(model, x, mode=mode)
    assert {k: id(v) for k, v in model.state_dict(keep_vars=True).items()} == tensors
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert {name: set(vars(m)) for name, m in model.named_modules()} == attrs
    assert {name: m.training for name, m in model.named_modules()} == modes
    assert torch.equal(torch.random.get_rng_state(), rng)
    torch.manual_seed(5)
    expected = eager(model, x)
    torch.manual_seed(5)
    assert output_difference(expected, run(captured, x)) is None  # dropout draws the same mask


# Bad requests ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"mode": "trace"}, CaptureError, r"unknown capture mode 'trace'; choose one of auto, symbolic"),
        ({"leaf_modules": ["layer.2"]}, CaptureError, r"names 'layer\.2', which is not a submodule of Net"),
        ({"leaf_modules": ["conv"]}, CaptureError, r"did you mean 'layer\.0\.conv', 'layer\.1\.conv'\?"),
        ({"leaf_modules": [""]}, CaptureError, r"cannot keep the root of Net whole"),
        ({"leaf_modules": "layer"}, CaptureError, r"takes a list.*leaf_modules=\['layer'\]"),
        ({"leaf_modules": [3]}, CaptureError, r"submodule paths \(str\) or nn\.Module classes, got 3"),
        ({"tracer": "fx"}, CaptureError, r"tracer= takes a torch\.fx\.Tracer instance, got str"),
        ({"mode": "export", "leaf_modules": ["layer"]}, CaptureError, r'(?s)capture="export" cannot use it.*Fix:'),
    ],
)
def test_bad_requests_say_the_cause_and_the_fix(kwargs: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        capture(net(), image(), options=kwargs)


def test_inputs_that_do_not_fit_are_refused() -> None:
    with pytest.raises(ProfileError, match=r"the inputs do not fit Net\.forward"):
        capture(net(), image(), bogus=1)
    with pytest.raises(ProfileError, match=r"(?s)Net itself fails on these inputs: RuntimeError.*Fix:"):
        capture(net(), torch.randn(2, 5, 8, 8))
    with pytest.raises(ProfileError, match=r"profiles a torch\.nn\.Module, got function"):
        capture(lambda x: x, image())  # type: ignore[arg-type]


def test_a_module_that_changes_its_parameters_is_refused_not_blamed_on_a_mode() -> None:
    with pytest.raises(ProfileError, match=r"changed its parameters in place during forward \(w\).*deepcopy"):
        capture(ParamMutator(), torch.ones(3))


# torchvision -----------------------------------------------------------------------------------------------

torchvision = pytest.importorskip("torchvision")


def torchvision_model(name: str, **kwargs: Any) -> nn.Module:
    torch.manual_seed(0)
    return torchvision.models.get_model(name, weights=None, **kwargs).eval()  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small"])
def test_torchvision_classification(name: str) -> None:
    model, x = torchvision_model(name), torch.rand(1, 3, 96, 96, generator=torch.Generator().manual_seed(0))
    captured = capture(model, x)
    assert captured.capture.method == "symbolic_trace"
    assert_runs_like(model, captured, x)


def test_torchvision_detection_falls_back_past_symbolic_tracing() -> None:
    # a score threshold of 0 keeps every detection, so there are boxes to compare
    model = torchvision_model("fasterrcnn_mobilenet_v3_large_320_fpn", weights_backbone=None, box_score_thresh=0.0)
    images = [torch.rand(3, 160, 200, generator=torch.Generator().manual_seed(0))]
    captured = capture(model, images)
    assert captured.capture.method in {"export", "dynamo"}
    assert captured.capture.detail.startswith("symbolic_trace failed: TraceError: Proxy object cannot be iterated")
    expected = eager(model, images)
    with torch.no_grad():
        actual = captured.forward(plain_runners(captured), captured.prepare([[images[0].clone()]], {}))
    assert expected[0]["boxes"].shape[0] > 0
    assert output_difference(expected, actual) is None
    assert any(info.module.startswith("backbone.body") for _, info in describe_nodes(captured.graphs))


def test_torchvision_raft_falls_back_past_symbolic_tracing() -> None:
    model = torchvision_model("raft_small")
    gen = torch.Generator().manual_seed(0)
    first, second = torch.rand(1, 3, 128, 128, generator=gen), torch.rand(1, 3, 128, 128, generator=gen)
    captured = capture(model, first, second)
    assert captured.capture.method in {"export", "dynamo"}
    assert "raft.py" in captured.capture.detail
    flows = eager(model, first, second)
    assert len(flows) > 1
    assert output_difference(flows, run(captured, first, second)) is None


class _Sourced(nn.Module):
    """Nodes made in the module's own code, in a submodule's, and by torch's functional code."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        y = nn.functional.gelu(y) * 2
        return y.sum(-1)


def test_symbolic_tracing_records_the_source_lines_torch_fx_would() -> None:
    """The symbolic capture records each node's stack itself (torch.fx's own recording imports torch._inductor and
    sympy, about 2 s in every process that traces); each node names the line torch.fx's recording names."""
    from pytest_fxprof.capture.sources import source_line
    from pytest_fxprof.capture.symbolic import trace_symbolic

    for model in (_Sourced(), ParamMutator()):
        ours, _ = trace_symbolic(model)
        reference = torch.fx.Tracer()
        reference.record_stack_traces = True
        theirs = reference.trace(model)
        got = [(n.name, source_line(n)) for n in ours.graph.nodes]
        expected = [(n.name, source_line(n)) for n in theirs.nodes]
        assert got == expected
        assert any(line for _, line in got)


def test_symbolic_tracing_leaves_torchs_compiler_stack_unimported() -> None:
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from pytest_fxprof.capture.symbolic import trace_symbolic\n"
        "gm, _ = trace_symbolic(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()))\n"
        "print(sorted(m for m in ('torch._inductor', 'torch._dynamo', 'sympy') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# A capture known from an earlier process ---------------------------------------------------------------------


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Each symbolic trace's leaf list, as it is tried."""
    from pytest_fxprof.capture import symbolic

    tried: list[tuple[str, ...]] = []
    real = symbolic.capture

    def counted(module: nn.Module, leaf_modules: Any, tracer: Any) -> Captured:
        tried.append(tuple(symbolic.leaf_names(leaf_modules)))
        return real(module, leaf_modules, tracer)

    monkeypatch.setattr(symbolic, "capture", counted)
    return tried


def test_a_known_capture_is_made_again_without_the_tries_that_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    model, x = net(eager=True), image()
    first = capture(model, x)
    assert first.capture.opaque == ("layer.0", "layer.1")
    tried, graph_tries = _counting(monkeypatch), _graph_tries(monkeypatch)
    again = capture(model, x, options={"known": first.capture})
    assert tried == [("layer.0", "layer.1")]  # one trace, with both blocks whole at once
    assert graph_tries == []  # nor export and dynamo, which resolved no more of it
    assert again.capture == first.capture
    assert again.capture.detail == first.capture.detail  # why auto chose it, as the first process found
    assert again.capture.opaque == first.capture.opaque
    assert paths(again) == paths(first)
    assert_runs_like(model, again, x)
    tried.clear()
    capture(model, x)
    assert len(tried) == 3  # auto alone: fails in layer.0, then in layer.1, then traces
    assert graph_tries == ["export", "dynamo"]


def test_a_known_capture_by_export_that_resolved_more_is_made_again_straight_away(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, x = around(Heads())
    first = capture(model, x)
    assert first.capture.method == "export"
    tried, graph_tries = _counting(monkeypatch), _graph_tries(monkeypatch)
    again = capture(model, x, options={"known": first.capture})
    assert (tried, graph_tries) == ([], ["export"])
    assert (again.capture, again.capture.detail, again.capture.opaque) == (first.capture, first.capture.detail, ())
    assert_runs_like(model, again, x)


def test_a_known_capture_keeps_the_users_leaf_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    model, x = net(branch=True), image()
    first = capture(model, x, options={"leaf_modules": [Block]})
    assert first.capture.opaque == ()  # the user kept them whole
    tried = _counting(monkeypatch)
    again = capture(model, x, options={"leaf_modules": [Block], "known": first.capture})
    assert again.capture == first.capture
    assert tried == [(f"{Block.__module__}.{Block.__qualname__}",)]


def test_a_known_capture_tells_the_users_leaf_classes_from_the_submodules_auto_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, x = net(branch=True), image()
    first = capture(model, x, options={"leaf_modules": [nn.BatchNorm2d]})
    batchnorm = f"{nn.BatchNorm2d.__module__}.{nn.BatchNorm2d.__qualname__}"
    assert first.capture.leaf_modules == tuple(sorted([batchnorm, "layer.0", "layer.1"]))
    assert first.capture.opaque == ("layer.0", "layer.1")  # auto kept them whole, beside the user's list
    tried = _counting(monkeypatch)
    again = capture(model, x, options={"leaf_modules": [nn.BatchNorm2d], "known": first.capture})
    assert tried == [(batchnorm, "layer.0", "layer.1")]
    assert (again.capture, again.capture.opaque) == (first.capture, first.capture.opaque)


@pytest.mark.parametrize(("make", "rows", "method"), [(ShapeBranch, 3, "export"), (RootBranch, 2, "dynamo")])
def test_a_known_export_or_dynamo_capture_tries_nothing_before_it(
    make: type[nn.Module], rows: int, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    model, x = make().eval(), torch.randn(rows, 4)
    first = capture(model, x)
    assert first.capture.method == method
    tried = _counting(monkeypatch)
    others: list[str] = []
    for m in methods.GRAPH_METHODS:
        if m.name != method:
            monkeypatch.setattr(f"{m.module}.capture", lambda *a, _name=m.name, **k: others.append(_name))
    again = capture(model, x, options={"known": first.capture})
    assert (tried, others) == ([], [])
    assert (again.capture.method, again.capture.graphs, again.capture.detail) == (
        method,
        first.capture.graphs,
        first.capture.detail,
    )
    assert_runs_like(model, again, x)


@pytest.mark.parametrize(
    "known",
    [
        Capture(method="symbolic_trace", leaf_modules=(), detail="traced whole"),  # layer.0 breaks the trace
        Capture(method="symbolic_trace", leaf_modules=("layer.0", "layer.1", "layer.9"), detail="no layer.9 here"),
        Capture(method="symbolic_trace", leaf_modules=("layer.0",), detail="one block whole"),  # layer.1 does
        Capture(method="inductor", detail="not a way auto takes for a forward"),
        Capture(method="tracer:Mine", detail="a user's tracer, not given here"),
    ],
)
def test_a_known_capture_that_no_longer_fits_is_tried_and_auto_decides_as_ever(known: Capture) -> None:
    model, x = net(eager=True), image()
    got = capture(model, x, options={"known": known})
    assert got.capture == capture(model, x).capture
    assert got.capture.leaf_modules == got.capture.opaque == ("layer.0", "layer.1")
    assert "kept it whole; export: " in got.capture.detail
    assert_runs_like(model, got, x)


def test_a_known_symbolic_graph_that_runs_unlike_the_module_is_not_taken() -> None:
    x = torch.randn(2, 4)
    model = NotATensorWhileTraced().eval()
    got = capture(model, x, options={"known": Capture(method="symbolic_trace", detail="")})
    assert got.capture.method == "export"
    assert "output differs" in got.capture.detail
    assert_runs_like(model, got, x)


def test_a_known_capture_of_a_module_that_fails_on_its_inputs_is_refused_as_ever() -> None:
    with pytest.raises(ProfileError, match="itself fails on these inputs"):
        capture(net(), torch.randn(2, 5, 8, 8), options={"known": Capture(method="symbolic_trace")})
