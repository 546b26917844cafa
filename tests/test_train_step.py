"""The training step: ``fxprof.train_step`` and ``profile_train_step``, forward and backward node by node.

Small real models on the CPU, captured by AOTAutograd for real; short protocols. Timing is asserted only
for a backward node made sixteen times slower (far beyond any band), as the end-to-end forward test does.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest
import torch

from pytest_fxprof import profile_train_step
from pytest_fxprof.capture.step import METHOD, default_loss
from pytest_fxprof.judge.aggregates import graph_groups
from pytest_fxprof.records.measurement import DIRECTIONS
from pytest_fxprof.views.report import ProfileReportJSON
from tests.test_end_to_end import skip_if_the_recording_was_too_noisy
from tests.test_plugin import skip_if_the_machine_was_busy

QUICK: dict[str, Any] = {"warmup": 1, "passes": 2, "flops": False}


class Net(torch.nn.Module):
    """Convolution, batch norm (train-mode statistics), a residual sum and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        out: torch.Tensor = self.head(y + self.conv(x))
        return out


def snapshot(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict[str, Any]:
    """Everything a step could change, as values (tensors cloned) and the identities of the grads."""
    out: dict[str, Any] = {
        "params": {n: p.detach().clone() for n, p in model.named_parameters()},
        "grads": {n: (id(p.grad), p.grad.clone()) if p.grad is not None else None for n, p in model.named_parameters()},
        "buffers": {n: b.clone() for n, b in model.named_buffers()},
        "modes": [m.training for m in model.modules()],
        "rng": torch.random.get_rng_state(),
    }
    if optimizer is not None:
        out["state"] = copy.deepcopy(optimizer.state_dict())
    return out


def assert_same(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert before.keys() == after.keys()
    for name in ("params", "buffers"):
        assert before[name].keys() == after[name].keys()
        for key, value in before[name].items():
            assert torch.equal(value, after[name][key]), f"{name} {key} changed"
    for key, grad in before["grads"].items():
        now = after["grads"][key]
        assert (grad is None) == (now is None), f"grad of {key}"
        if grad is not None:
            assert grad[0] == now[0], f"grad of {key} is another tensor"
            assert torch.equal(grad[1], now[1]), f"grad of {key} changed"
    assert before["modes"] == after["modes"]
    assert torch.equal(before["rng"], after["rng"])
    if "state" in before:
        assert_state_equal(before["state"], after["state"])


def assert_state_equal(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor)
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_state_equal(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_state_equal(x, y)
    else:
        assert a == b


# State -----------------------------------------------------------------------------------------------------


def test_everything_a_step_changes_is_put_back() -> None:
    torch.manual_seed(0)
    model = Net().train()
    model.head.eval()  # a mixed mode stays mixed
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    x = torch.randn(4, 3, 8, 8)
    model(x).sum().backward()
    optimizer.step()  # the optimizer has state of its own (moments, step counts)
    assert model.conv.bias is not None
    model.conv.bias.grad = None  # some grads None, others tensors
    x_before = x.clone()
    before = snapshot(model, optimizer)

    result = profile_train_step(model, x, optimizer=optimizer, **QUICK)

    assert_same(before, snapshot(model, optimizer))
    assert torch.equal(x, x_before)
    assert {n.info.direction for n in result.nodes} == set(DIRECTIONS)
    assert result.capture.method == METHOD


def test_an_optimizer_without_state_is_left_without() -> None:
    model = Net().train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    groups_before = copy.deepcopy([{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups])
    x = torch.randn(2, 3, 8, 8)
    before = snapshot(model)
    profile_train_step(model, x, optimizer=optimizer, **QUICK)
    assert len(optimizer.state) == 0
    assert [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups] == groups_before
    assert_same(before, snapshot(model))
    assert all(p.grad is None for p in model.parameters())


def test_an_eval_model_steps_in_eval_mode() -> None:
    model = Net().eval()
    result = profile_train_step(model, torch.randn(2, 3, 8, 8), **QUICK)
    batch_norm = [n for n in result.nodes if "batch_norm" in n.target and n.info.direction == "forward"]
    assert batch_norm
    assert all(n.training is False for n in batch_norm)
    assert result.setup is not None
    assert result.setup.mode == "eval"
    assert not any(m.training for m in model.modules())


# Directions and mapping ------------------------------------------------------------------------------------


def test_backward_nodes_name_their_forward_node_module_and_source() -> None:
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet18(weights=None).train()
    result = profile_train_step(model, torch.randn(2, 3, 32, 32), **QUICK)
    by_name = {n.name: n for n in result.nodes if n.info.direction == "forward"}
    backward = [n for n in result.nodes if n.info.direction == "backward"]
    assert len(backward) > 100
    mapped = [n for n in backward if n.module]
    assert len(mapped) / len(backward) >= 0.9
    grads = [n for n in backward if n.target == "aten.convolution_backward.default"]
    assert len(grads) == 20  # one per convolution
    for n in grads:
        peer = by_name[n.info.forward]
        assert peer.target == "aten.convolution.default"
        assert peer.module == n.module
        assert n.module.rpartition(".")[2] in ("conv1", "conv2", "0")  # a conv, or a downsample's
        assert n.info.source.startswith("torchvision/models/resnet.py:")
    assert grads[0].info.key.startswith("backward:call_function:")
    assert len({n.info.key for n in result.nodes}) == len(result.nodes)
    optimizer_free = [n for n in result.nodes if n.info.direction == "optimizer"]
    assert optimizer_free == []  # no optimizer given: none stepped


def test_roll_ups_and_aggregates_take_the_direction() -> None:
    model = Net().train()
    result = profile_train_step(model, torch.randn(2, 3, 8, 8), optimizer=torch.optim.SGD(model.parameters()), **QUICK)
    modules = {r.name: r for r in result.rollup("module")}
    assert {"<model>", "<model> forward", "<model> backward", "<model> optimizer", "conv backward"} <= set(modules)
    assert modules["<model>"].nodes == len(result.nodes)  # the whole step
    assert sum(modules[f"<model> {d}"].nodes for d in DIRECTIONS) == len(result.nodes)
    assert modules["conv backward"].direction == "backward"
    assert modules["conv backward"].path == "conv"
    ops = {r.name for r in result.rollup("op")}
    assert "aten.convolution_backward.default backward" in ops
    assert "aten.convolution.default forward" in ops
    names = {g.name for g in graph_groups([n.info for n in result.nodes])}
    assert {"<model> backward", "conv backward", "conv forward", "aten.convolution_backward.default backward"} <= names
    frame = result.to_dataframe()
    assert set(frame["direction"]) == set(DIRECTIONS)
    assert "direction" in result.to_dataframe(by="module").columns
    table = result.table()
    assert "direction" in table.splitlines()[0]
    assert "training step" in table.splitlines()[-1]
    assert "backward" in table.splitlines()[-1]


def test_leaf_modules_are_one_node_per_direction() -> None:
    model = Net().train()
    result = profile_train_step(model, torch.randn(2, 3, 8, 8), leaf_modules=["head"], **QUICK)
    head = [n for n in result.nodes if n.module.startswith("head")]
    assert sorted((n.info.direction, n.module, n.op, n.target) for n in head) == [
        ("backward", "head", "call_module", "Sequential"),
        ("forward", "head", "call_module", "Sequential"),
    ]
    assert all(len(n.samples_ns) == 2 for n in head)


# The default loss -------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    extra: Any


def test_the_default_loss_sums_every_float_tensor_that_requires_grad() -> None:
    a, b, c = (torch.randn(3, requires_grad=True) for _ in range(3))
    output = {
        "x": (a, [b]),
        "y": Output(logits=c, extra={"ids": torch.arange(3), "plain": torch.ones(2), "n": 3}),
    }
    loss = default_loss(output)
    assert torch.allclose(loss, a.sum() + b.sum() + c.sum())
    assert default_loss((torch.ones(2), "text")) is None


class Nested(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> dict[str, Any]:
        h = self.a(x)
        return {"hidden": (h, [self.b(h)]), "ids": x.argmax(-1)}


def test_a_nested_output_trains_with_the_default_loss() -> None:
    result = profile_train_step(Nested(), torch.randn(3, 4), **QUICK)
    backward_modules = {n.module for n in result.nodes if n.info.direction == "backward"}
    assert {"a", "b"} <= backward_modules


# Errors -----------------------------------------------------------------------------------------------------


def frozen() -> torch.nn.Module:
    model = Net()
    model.requires_grad_(requires_grad=False)
    return model


@pytest.mark.parametrize(
    ("make", "options", "message"),
    [
        (frozen, {}, "has no parameter that requires grad.*Fix: unfreeze"),
        (Net, {"loss_fn": lambda out: out}, r"shape \[2, 10\], not a scalar tensor.*Fix: reduce it"),
        (Net, {"loss_fn": lambda out: out.detach().sum()}, "does not require grad.*Fix:"),
        (Net, {"loss_fn": "mean"}, "loss_fn= takes a function.*got str"),
        (Net, {"optimizer": "sgd"}, "optimizer= takes a torch.optim.Optimizer.*got str"),
        (Net, {"leaf_modules": ["nope"]}, "leaf_modules= names 'nope', which is not a submodule of Net"),
    ],
)
def test_a_step_that_cannot_train_is_refused_with_the_fix(make: Any, options: dict[str, Any], message: str) -> None:
    from pytest_fxprof.capture.errors import CaptureError, ProfileError

    model, x = make(), torch.randn(2, 3, 8, 8)
    before = snapshot(model)
    with pytest.raises((ProfileError, CaptureError), match=message):
        profile_train_step(model, x, **options, **QUICK)
    assert_same(before, snapshot(model))


def test_an_output_without_grad_is_refused_by_the_default_loss() -> None:
    from pytest_fxprof.capture.errors import ProfileError

    class NoGrad(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                out: torch.Tensor = self.fc(x)
            return out

    with pytest.raises(ProfileError, match=r"holds no floating-point tensor that requires grad.*Fix:"):
        profile_train_step(NoGrad(), torch.randn(2, 4), **QUICK)


# Through pytest ---------------------------------------------------------------------------------------------

STEP_TEST = """
import os
import pytest, torch

EXTRA = int(os.environ.get("SLOW_BACKWARD", "0"))

@torch.library.custom_op("fxprof_step_test::input_grad", mutates_args=())
def input_grad(grad: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    out = grad @ weight
    for _ in range(EXTRA):  # a backward that does more work: the same product again
        out = grad @ weight
    return out

@input_grad.register_fake
def _(grad, weight):
    return grad.new_empty(grad.shape[0], weight.shape[1])

class Product(torch.autograd.Function):
    @staticmethod
    def forward(x, weight):
        return x @ weight.t()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return input_grad(grad, weight), grad.t() @ x

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(384, 384) / 20)

    def forward(self, x):
        return torch.relu(Product.apply(x, self.weight))

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Linear(384, 384)  # so that the block's input needs its grad
        self.block = Block()
        self.head = torch.nn.Linear(384, 10)

    def forward(self, x):
        return self.head(self.block(self.stem(x)))

def test_step(fxprof):
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    result = fxprof.train_step(model, torch.randn(96, 384), optimizer=optimizer)
    assert {n.info.direction for n in result.nodes} == {"forward", "backward", "optimizer"}
    assert all(p.grad is None for p in model.parameters())
    assert len(optimizer.state) == 0
"""

SLOWED = "fxprof_step_test.input_grad.default"


def test_a_step_baseline_is_recorded_checked_and_fails_on_a_slowed_backward(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_step=STEP_TEST)
    fast = ["--fxprof-warmup=3", "--fxprof-passes=10", "-p", "no:cacheprovider"]
    record = pytester.runpytest_subprocess("--fxprof-update", "--fxprof-processes=2", *fast)
    assert record.ret == pytest.ExitCode.OK, record.stdout.str()
    (path,) = (pytester.path / "baselines").glob("*.json")
    entry = json.loads(path.read_text())["entries"]["step0"]  # keyed apart from forward calls (call0, ...)
    assert entry["capture"]["method"] == METHOD
    slowed = next(n for n in entry["nodes"] if n["target"] == SLOWED)
    assert (slowed["direction"], slowed["module"]) == ("backward", "block")
    assert {n.get("direction", "forward") for n in entry["nodes"]} == set(DIRECTIONS)

    # the same step (its weights drawn again, its optimizer and loss the same): decided without measuring
    unchanged = pytester.runpytest_subprocess("--fxprof", "--fxprof-report=report.json", *fast)
    assert unchanged.ret == pytest.ExitCode.OK, unchanged.stdout.str()
    (profile,) = json.loads((pytester.path / "report.json").read_text())["profiles"]
    assert profile["status"] == "unchanged"

    check = pytester.runpytest_subprocess(
        "--fxprof", "--fxprof-report=report.json", "--fxprof-on-unchanged=measure", *fast
    )
    skip_if_the_machine_was_busy(check)
    assert check.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), check.stdout.str()
    (profile,) = json.loads((pytester.path / "report.json").read_text())["profiles"]
    assert all("verdict" in n for n in profile["nodes"])
    assert {"block backward", "<model> backward"} <= {a["name"] for a in profile["aggregates"]}

    monkeypatch.setenv("SLOW_BACKWARD", "15")
    caught = pytester.runpytest_subprocess("--fxprof", "--fxprof-report=report.json", *fast)
    skip_if_the_machine_was_busy(caught)
    (profile,) = json.loads((pytester.path / "report.json").read_text())["profiles"]
    node = next(n for n in profile["nodes"] if n["target"] == SLOWED)
    subtree = next(a for a in profile["aggregates"] if a["name"] == "block backward")
    skip_if_the_recording_was_too_noisy(node, subtree)
    assert caught.ret == pytest.ExitCode.TESTS_FAILED, caught.stdout.str()
    assert node["verdict"] == "slower"
    assert node["direction"] == "backward"
    # named alone where its measured share lets it gate (a "slower node"), else as a "slower small node"
    caught.stdout.fnmatch_lines([f"*slower*node*: block backward ({SLOWED}) [[]input_grad, *]: * = x*"])
    flagged = {(f["kind"], f["name"]) for f in profile["flagged"]}
    assert ("module", "block backward") in flagged


def test_steps_run_under_xdist(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_step=STEP_TEST, test_other=STEP_TEST.replace("def test_step", "def test_again"))
    result = pytester.runpytest_subprocess(
        "-n", "2", "--fxprof-update", "--fxprof-processes=1", "--fxprof-warmup=1", "--fxprof-passes=2"
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    files = sorted((pytester.path / "baselines").glob("*.json"))
    assert len(files) == 2
    for path in files:
        assert json.loads(path.read_text())["entries"]["step0"]["capture"]["method"] == METHOD


# Views ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def step_report() -> ProfileReportJSON:
    """The report of a measured step of ``Net`` with an optimizer, as every view reads it."""
    from pytest_fxprof.views.report import profile_report

    model = Net().train()
    result = profile_train_step(model, torch.randn(2, 3, 8, 8), optimizer=torch.optim.SGD(model.parameters()), **QUICK)
    return profile_report("t.py::test_step", "step0", "pass", result, None)


def test_the_report_and_trace_show_the_direction(step_report: ProfileReportJSON) -> None:
    from pytest_fxprof.views.trace import trace_events

    assert {n["direction"] for n in step_report["nodes"]} == set(DIRECTIONS)
    assert all(n["forward"] for n in step_report["nodes"] if n["target"] == "aten.convolution_backward.default")
    modules = {r["name"]: r for r in step_report["rollups"]["module"]}
    assert modules["conv backward"]["direction"] == "backward"
    events = [e for e in trace_events(step_report)["traceEvents"] if e.get("ph") == "X"]
    first = [e for e in events if e["args"].get("pass_index", 0) == 0 or e["cat"] == "module"]
    backward = next(e for e in first if e["cat"] == "module" and e["name"] == "backward")
    inside = [e for e in events if e["ts"] >= backward["ts"] and e["ts"] + e["dur"] <= backward["ts"] + backward["dur"]]
    conv = next(e for e in inside if e["cat"] == "module" and e["name"] == "conv")
    assert conv["args"] == {"module": "conv", "direction": "backward"}  # the module's span, in the backward
    grads = [e for e in inside if e["cat"] == "node" and e["args"]["target"] == "aten.convolution_backward.default"]
    assert grads
    assert all(e["args"]["direction"] == "backward" for e in grads)
    assert any(e["ts"] >= conv["ts"] and e["ts"] + e["dur"] <= conv["ts"] + conv["dur"] for e in grads)


def test_html_markdown_and_benchmark_json_show_the_direction(step_report: ProfileReportJSON) -> None:
    from pytest_fxprof.views.benchjson import benchmark_json
    from pytest_fxprof.views.html import render_html

    page = render_html("update", [step_report], [])
    assert "Modules, forward and backward" in page  # the module tree, both directions side by side
    assert '<span class="num">bwd/fwd</span>' in page
    document = benchmark_json([step_report], machine_info={}, commit_info={})
    extra = {b["name"]: b["extra_info"] for b in document["benchmarks"]}
    assert {e.get("direction") for e in extra.values() if "direction" in e} == set(DIRECTIONS)


# slow_backward -----------------------------------------------------------------------------------------------


def test_slow_backward_keeps_the_gradients_and_refuses_what_it_cannot_slow() -> None:
    from pytest_fxprof import slow_backward

    torch.manual_seed(0)
    stock = Net().train()
    slowed = copy.deepcopy(stock)
    slow_backward(slowed, "conv", 0.5)
    slow_backward(slowed, "head.1", 0.0)
    x = torch.randn(2, 3, 8, 8)
    stock(x).sum().backward()
    slowed(x).sum().backward()
    grads = {name: p.grad for name, p in slowed.named_parameters()}
    assert torch.allclose(stock.conv.weight.grad, grads["conv.layer.weight"], atol=1e-5)  # type: ignore[arg-type]
    assert torch.allclose(stock.head[1].bias.grad, grads["head.1.layer.bias"], atol=1e-5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="has no submodule 'nope'"):
        slow_backward(Net(), "nope", 0.1)
    with pytest.raises(ValueError, match="bn is a BatchNorm2d; pick a Conv2d or a Linear"):
        slow_backward(Net(), "bn", 0.1)
    with pytest.raises(ValueError, match="fraction must be a finite number"):
        slow_backward(Net(), "conv", -1.0)


def test_a_slower_backward_committed_on_a_branch_fails_against_its_base(pytester: pytest.Pytester) -> None:
    from tests.test_against import against, commit, git

    git(pytester.path, "init", "-q")
    commit(pytester, {"test_step.py": STEP_TEST}, "base")
    slower = STEP_TEST.replace('EXTRA = int(os.environ.get("SLOW_BACKWARD", "0"))', "EXTRA = 15")
    commit(pytester, {"test_step.py": slower}, "a slower backward")
    result = against(pytester, "HEAD~1", "--fxprof-pairs", "4", "--fxprof-report", "r.json")
    (profile,) = json.loads((pytester.path / "r.json").read_text())["profiles"]
    node = next(n for n in profile["nodes"] if n["target"] == SLOWED)
    assert (node["direction"], node["module"]) == ("backward", "block")
    skip_if_the_recording_was_too_noisy(node)  # the pairs could not tell: nothing this test checks
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    assert node["verdict"] == "slower"
    pattern = f"*slower*node*: block backward ({SLOWED}) [[]input_grad, *]: * = x*per pair*"  # gating or small
    result.stdout.fnmatch_lines([pattern])
