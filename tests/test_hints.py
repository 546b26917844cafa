"""Unit tests of ``pytest_fxprof.judge.hints`` on hand-built nodes (no torch), and one run of the real profiler."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any

import pytest

from pytest_fxprof.judge.hints import (
    HINT_MIN_SHARE,
    KINDS,
    LOW_FLOPS_FRACTION,
    MIN_NS,
    MIN_PEERS,
    NAMES_SHOWN,
    Category,
    Hint,
    category,
    find_hints,
    hint_lines,
)
from pytest_fxprof.records.measurement import NodeInfo, NodeStats, node_key
from pytest_fxprof.records.units import fmt_ns


@dataclass(frozen=True)
class Spec:
    """One node to build: inputs by name, times in ns, FLOPs where counted."""

    name: str
    target: str
    ns: int
    op: str = "call_function"
    inputs: tuple[str, ...] = ()
    flops: int | None = None
    layout: str = "contiguous"
    training: bool | None = None
    returned: bool = False


def build(specs: tuple[Spec, ...]) -> tuple[NodeStats, ...]:
    """The specs as a profile's nodes, in order: module path = name, so every key is distinct."""
    index = {s.name: k for k, s in enumerate(specs)}
    total = sum(s.ns for s in specs) or 1
    return tuple(
        NodeStats(
            info=NodeInfo(
                key=node_key(s.op, s.name, s.target, 0), name=s.name, op=s.op, target=s.target, module=s.name
            ),
            median_ns=s.ns,
            spread_ns=s.ns // 20,
            share=s.ns / total,
            samples_ns=(s.ns,) * 3,
            flops=s.flops,
            shape="float32[1, 16, 32, 32]",
            layout=s.layout,
            inputs=tuple(index[i] for i in s.inputs),
            training=s.training,
            returned=s.returned,
        )
        for s in specs
    )


def edit(specs: tuple[Spec, ...], name: str, **changes: Any) -> tuple[Spec, ...]:
    """``specs`` with node ``name`` changed."""
    assert any(s.name == name for s in specs)
    return tuple(replace(s, **changes) if s.name == name else s for s in specs)


def rate(ns: int, gflops: float) -> int:
    """The FLOPs a node of ``ns`` does at ``gflops`` GFLOP/s."""
    return round(ns * gflops)


# A symbolically traced CNN of 1 ms: conv1 -> bn1 (eval) -> relu1 -> pool -> conv2 -> add (+ pool) -> fc.
# Only the batch norm is a hint (5 %): the ops without matrix work are 9 %, the largest 4 %; two convolutions
# are too few peers; nothing is copied.
CNN = (
    Spec("conv1", "Conv2d", 400_000, op="call_module", flops=rate(400_000, 10), training=False),
    Spec("bn1", "BatchNorm2d", 50_000, op="call_module", inputs=("conv1",), training=False),
    Spec("relu1", "torch.relu", 30_000, inputs=("bn1",)),
    Spec("pool", "MaxPool2d", 40_000, op="call_module", inputs=("relu1",), training=False),
    Spec("conv2", "Conv2d", 300_000, op="call_module", inputs=("pool",), flops=rate(300_000, 10), training=False),
    Spec("add", "operator.add", 20_000, inputs=("conv2", "pool")),
    Spec("fc", "Linear", 160_000, op="call_module", inputs=("add",), flops=rate(160_000, 10), training=False),
)

# The same under torch.export: weights are get_attr nodes feeding the conv and the batch norm.
EXPORTED = (
    Spec("conv_weight", "conv.weight", 2_000, op="get_attr"),
    Spec("bn_mean", "bn.running_mean", 2_000, op="get_attr"),
    Spec("bn_var", "bn.running_var", 2_000, op="get_attr"),
    Spec("conv2d", "aten.conv2d.default", 400_000, inputs=("conv_weight",), flops=rate(400_000, 10)),
    Spec("batch_norm", "aten.batch_norm.default", 60_000, inputs=("bn_mean", "bn_var", "conv2d"), training=False),
    Spec("relu", "aten.relu_.default", 30_000, inputs=("batch_norm",)),
    Spec("linear", "aten.linear.default", 300_000, inputs=("relu",), flops=rate(300_000, 10)),
)

# Five convolutions: four at 10 GFLOP/s and a depthwise one at 1 GFLOP/s taking 10 % of the model.
CONVS = (
    *(Spec(f"c{i}", "Conv2d", 200_000, op="call_module", flops=rate(200_000, 10), training=False) for i in range(4)),
    Spec("dw", "Conv2d", 100_000, op="call_module", flops=rate(100_000, 1), training=False),
    Spec("head", "torch.flatten", 100_000),
)

# A model mostly in elementwise ops: six of 70 us (7 % each, 42 % together) beside a 500 us convolution.
POINTWISE = (
    Spec("conv", "torch.conv2d", 500_000, flops=rate(500_000, 10)),
    *(Spec(f"e{i}", t, 70_000) for i, t in enumerate(["gelu", "operator.mul", "operator.add", "tanh", "exp", "neg"])),
    Spec("fc", "torch._C._nn.linear", 80_000, flops=rate(80_000, 10)),
)

# A permute (a free view, strided) copied by contiguous(): 60 us of 1 ms.
PERMUTED = (
    Spec("conv", "Conv2d", 640_000, op="call_module", flops=rate(640_000, 10), training=False),
    Spec("permute", "permute", 4_000, op="call_method", inputs=("conv",), layout="strided"),
    Spec("contiguous", "contiguous", 60_000, op="call_method", inputs=("permute",)),
    Spec("fc", "Linear", 296_000, op="call_module", inputs=("contiguous",), flops=rate(296_000, 10), training=False),
)

# A convolution fed a strided tensor (it copies it inside).
STRIDED_CONV = (
    Spec("stem", "torch.conv2d", 500_000, flops=rate(500_000, 10)),
    Spec("transpose", "torch.transpose", 3_000, inputs=("stem",), layout="strided"),
    Spec("conv", "torch.conv2d", 400_000, inputs=("transpose",), flops=rate(400_000, 10)),
    Spec("fc", "torch.matmul", 97_000, inputs=("conv",), flops=rate(97_000, 10)),
)


def kinds(specs: tuple[Spec, ...]) -> dict[str, tuple[str, ...]]:
    """The named nodes of each hint kind found for ``specs``."""
    out: dict[str, tuple[str, ...]] = {}
    for hint in find_hints(build(specs)):
        out[hint.kind] = out.get(hint.kind, ()) + hint.nodes
    return out


# Each rule on a graph built to show it, and on one built not to ---------------------------------------------


@pytest.mark.parametrize(
    ("specs", "kind", "named"),
    [
        pytest.param(CNN, "fusable-batchnorm", ("bn1",), id="bn-eval-after-conv"),
        pytest.param(EXPORTED, "fusable-batchnorm", ("batch_norm",), id="bn-export-with-weights"),
        pytest.param(
            edit(EXPORTED, "batch_norm", target="aten._native_batch_norm_legit_no_training.default"),
            "fusable-batchnorm",
            ("batch_norm",),
            id="bn-export-no-training",
        ),
        pytest.param(edit(CNN, "bn1", training=True), "fusable-batchnorm", (), id="bn-training"),
        pytest.param(edit(CNN, "bn1", training=None), "fusable-batchnorm", (), id="bn-mode-unknown"),
        pytest.param(edit(CNN, "add", inputs=("conv2", "conv1")), "fusable-batchnorm", (), id="conv-second-consumer"),
        pytest.param(edit(CNN, "conv1", returned=True), "fusable-batchnorm", (), id="conv-output-returned"),
        pytest.param(edit(CNN, "bn1", inputs=("relu1",)), "fusable-batchnorm", (), id="bn-after-no-conv"),
        pytest.param(edit(CNN, "bn1", ns=5_000), "fusable-batchnorm", (), id="bn-small-share"),
        pytest.param(edit(CNN, "pool", ns=150_000), "memory-bound", ("pool",), id="one-large-pool"),
        pytest.param(POINTWISE, "memory-bound", ("e0", "e1", "e2", "e3", "e4", "e5"), id="many-elementwise"),
        pytest.param(CNN, "memory-bound", (), id="memory-small-shares"),
        pytest.param(edit(CNN, "bn1", ns=150_000, training=True), "memory-bound", ("bn1",), id="bn-training-large"),
        pytest.param(edit(CNN, "bn1", ns=150_000), "memory-bound", (), id="fusable-bn-not-counted-twice"),
        pytest.param(CONVS, "low-flops", ("dw",), id="depthwise-conv"),
        pytest.param(CONVS[4 - MIN_PEERS :], "low-flops", ("dw",), id="just-enough-peers"),
        pytest.param(CONVS[5 - MIN_PEERS :], "low-flops", (), id="too-few-peers"),
        pytest.param(edit(CONVS, "dw", flops=0), "low-flops", (), id="zero-flops"),
        pytest.param(edit(CONVS, "dw", flops=None), "low-flops", (), id="flops-not-counted"),
        pytest.param(edit(CONVS, "dw", ns=3_000, flops=3_000), "low-flops", (), id="slow-but-small"),
        pytest.param(
            edit(CONVS, "dw", flops=rate(100_000, 10 * LOW_FLOPS_FRACTION * 0.9)),
            "low-flops",
            ("dw",),
            id="just-far-enough-below",
        ),
        pytest.param(
            edit(CONVS, "dw", flops=rate(100_000, 10 * LOW_FLOPS_FRACTION * 1.1)), "low-flops", (), id="not-far-below"
        ),
        pytest.param(edit(CONVS, "dw", target="Linear"), "low-flops", (), id="peers-of-another-category"),
        pytest.param(PERMUTED, "layout-copy", ("contiguous",), id="permute-contiguous"),
        pytest.param(
            edit(
                edit(PERMUTED, "permute", target="aten.permute.default", op="call_function"),
                "contiguous",
                target="aten.clone.default",
                op="call_function",
            ),
            "layout-copy",
            ("contiguous",),
            id="export-clone",
        ),
        pytest.param(
            edit(edit(PERMUTED, "permute", target="view", layout="channels_last"), "contiguous", target="to"),
            "layout-copy",
            ("contiguous",),
            id="to-from-channels-last",
        ),
        pytest.param(
            edit(edit(PERMUTED, "permute", target="view", layout="contiguous"), "contiguous", target="to"),
            "layout-copy",
            (),
            id="to-same-layout-is-a-cast",
        ),
        pytest.param(
            edit(PERMUTED, "contiguous", target="torch.flatten", op="call_function"),
            "layout-copy",
            ("contiguous",),
            id="reshape-of-strided",
        ),
        pytest.param(
            edit(PERMUTED, "contiguous", target="torch.flatten", op="call_function", layout="strided"),
            "layout-copy",
            (),
            id="reshape-that-stayed-a-view",
        ),
        pytest.param(edit(PERMUTED, "contiguous", ns=5_000), "layout-copy", (), id="copy-small-share"),
        pytest.param(STRIDED_CONV, "layout-copy", ("conv",), id="conv-fed-strided"),
        pytest.param(
            edit(STRIDED_CONV, "transpose", layout="channels_last"), "layout-copy", (), id="conv-channels-last"
        ),
    ],
)
def test_rule(specs: tuple[Spec, ...], kind: str, named: tuple[str, ...]) -> None:
    assert kinds(specs).get(kind, ()) == named


def test_the_base_model_only_hints_its_batch_norm() -> None:
    assert kinds(CNN) == {"fusable-batchnorm": ("bn1",)}


# What a hint says -------------------------------------------------------------------------------------------

FIRING = [CNN, EXPORTED, CONVS, POINTWISE, PERMUTED, STRIDED_CONV, edit(CNN, "pool", ns=150_000)]


@pytest.mark.parametrize("specs", FIRING)
def test_message_names_nodes_time_and_share(specs: tuple[Spec, ...]) -> None:
    nodes = build(specs)
    model_ns = sum(n.median_ns for n in nodes)
    hints = find_hints(nodes)
    assert hints
    for hint in hints:
        assert hint.kind in KINDS
        assert hint.nodes[0] in hint.message
        assert fmt_ns(hint.time_ns) in hint.message
        assert f"{hint.time_ns / model_ns:.1%} of the model" in hint.message
        assert hint.share == pytest.approx(hint.time_ns / model_ns, abs=1e-6)
        assert hint.share >= HINT_MIN_SHARE
        by_name = {n.name: n.info.key for n in nodes}
        assert hint.keys == tuple(by_name[name] for name in hint.nodes)


def test_fusable_batchnorm_time_is_the_batch_norms_and_suggests_fuse() -> None:
    (hint,) = find_hints(build(EXPORTED))
    assert (hint.kind, hint.time_ns) == ("fusable-batchnorm", 60_000)
    assert "conv2d -> batch_norm" in hint.message
    assert "torch.fx.experimental.optimization.fuse" in hint.message
    assert "torch.ao.quantization.fuse_modules" in hint.message


def test_low_flops_says_both_rates_and_what_the_peers_rate_would_save() -> None:
    (hint,) = find_hints(build(CONVS))
    assert hint.time_ns == 100_000 - 100_000 * 1 // 10  # the depthwise conv at its peers' 10 GFLOP/s
    assert "dw at 1.0 GFLOP/s against 10.0" in hint.message
    assert "other 4 convolutions" in hint.message


def test_low_flops_uses_the_time_weighted_median_of_the_peers() -> None:
    # Two quick 2 us peers at 100 GFLOP/s and two 200 us ones at 10: the peers' rate is where their time is.
    specs = edit(edit(CONVS, "c0", ns=2_000, flops=rate(2_000, 100)), "c1", ns=2_000, flops=rate(2_000, 100))
    (hint,) = find_hints(build(specs))
    assert "dw at 1.0 GFLOP/s against 10.0" in hint.message  # an unweighted median would say 55.0


def test_layout_copy_names_the_node_that_made_the_layout() -> None:
    (hint,) = find_hints(build(PERMUTED))
    assert (hint.kind, hint.nodes, hint.time_ns) == ("layout-copy", ("contiguous",), 60_000)
    assert "contiguous (from permute's strided output)" in hint.message


def test_a_plain_copy_is_called_one() -> None:
    specs = edit(PERMUTED, "permute", target="view", layout="contiguous")
    (hint,) = find_hints(build(edit(specs, "contiguous", target="clone")))
    assert "contiguous (a plain copy)" in hint.message


def test_strided_conv_names_its_producer() -> None:
    (hint,) = find_hints(build(STRIDED_CONV))
    assert (hint.kind, hint.time_ns) == ("layout-copy", 400_000)
    assert "conv (from transpose)" in hint.message


def test_memory_bound_names_the_largest_first() -> None:
    specs = edit(POINTWISE, "e3", ns=90_000)
    (hint,) = find_hints(build(specs))
    assert hint.kind == "memory-bound"
    assert hint.nodes[0] == "e3"
    assert hint.time_ns == 440_000
    assert "led by e3 90.0 us" in hint.message


def test_names_are_capped_and_the_rest_counted() -> None:
    pairs = tuple(
        s
        for i in range(NAMES_SHOWN + 2)
        for s in (
            Spec(f"conv{i}", "Conv2d", 100_000, op="call_module", training=False),
            Spec(f"bn{i}", "BatchNorm2d", 10_000 + i, op="call_module", inputs=(f"conv{i}",), training=False),
        )
    )
    (hint,) = find_hints(build(pairs))
    assert hint.nodes == tuple(f"bn{i}" for i in reversed(range(NAMES_SHOWN + 2)))  # slowest first
    assert "... 2 more" in hint.message
    assert "conv0 -> bn0" not in hint.message  # the fastest pairs are counted, not named


# Ordering, lines, edge cases ----------------------------------------------------------------------------------


def test_hints_come_most_time_at_stake_first() -> None:
    # A fusable batch norm (50 us), a depthwise conv (90 us at stake), a copy (60 us), a large pool (300 us).
    specs = (*CNN, *CONVS, *PERMUTED[1:3])
    specs = edit(edit(specs, "pool", ns=300_000), "permute", inputs=("conv2",))
    hints = find_hints(build(specs))
    assert [h.kind for h in hints] == ["memory-bound", "low-flops", "layout-copy", "fusable-batchnorm"]
    assert [h.time_ns for h in hints] == sorted((h.time_ns for h in hints), reverse=True)


def test_equal_time_is_ordered_by_kind() -> None:
    specs: tuple[Spec, ...] = (*CNN, *PERMUTED[1:3])
    specs = edit(edit(specs, "permute", inputs=("conv2",)), "contiguous", ns=50_000)
    assert [h.kind for h in find_hints(build(specs))] == ["fusable-batchnorm", "layout-copy"]


def test_hint_lines_one_per_hint() -> None:
    hints = find_hints(build(edit(CNN, "pool", ns=150_000)))
    lines = hint_lines(hints)
    assert len(lines) == len(hints) == 2
    for line, hint in zip(lines, hints, strict=True):
        assert hint.kind in line
        assert hint.message in line
        assert "\n" not in line
    assert hint_lines(()) == []


def test_no_nodes_no_hints() -> None:
    assert find_hints(()) == ()


def test_unmeasured_nodes_make_no_hints() -> None:
    assert find_hints(build(tuple(replace(s, ns=0) for s in CNN))) == ()
    assert kinds(edit(CNN, "bn1", ns=0)) == {}


@pytest.mark.parametrize(("copy_ns", "named"), [(MIN_NS - 100, ()), (MIN_NS + 100, ("contiguous",))])
def test_sub_microsecond_nodes_are_never_named(copy_ns: int, named: tuple[str, ...]) -> None:
    # A model of 50 us in which the copy is about 2 %: over the share floor, so only its time decides.
    tiny: tuple[Spec, ...] = (
        Spec("conv", "Conv2d", 40_000, op="call_module"),
        *PERMUTED[1:3],
        Spec("x", "torch.tanh", 9_000),
    )
    tiny = edit(edit(tiny, "permute", inputs=("conv",), ns=100), "contiguous", ns=copy_ns)
    assert kinds(tiny).get("layout-copy", ()) == named


def test_sub_microsecond_nodes_are_left_out_of_a_group() -> None:
    specs = (*POINTWISE, Spec("size", "operator.mul", MIN_NS - 1), Spec("scale", "operator.mul", MIN_NS))
    (hint,) = find_hints(build(specs))
    assert hint.kind == "memory-bound"
    assert "size" not in hint.nodes
    assert "scale" in hint.nodes
    assert hint.time_ns == 6 * 70_000 + MIN_NS


def test_an_input_position_outside_the_profile_is_refused() -> None:
    nodes = build(CNN)
    bad = (*nodes[:-1], replace(nodes[-1], inputs=(len(nodes),)))
    with pytest.raises(ValueError, match=r"'fc' \(position 6\) lists input position 7, but the profile has 7 nodes"):
        find_hints(bad)


# The classifier -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "target", "expected"),
    [
        # symbolic tracing
        ("call_module", "Conv2d", Category.CONV),
        ("call_module", "ConvTranspose2d", Category.CONV),
        ("call_module", "BatchNorm2d", Category.BATCHNORM),
        ("call_module", "ReLU", Category.ELEMENTWISE),
        ("call_module", "MaxPool2d", Category.POOL),
        ("call_module", "AdaptiveAvgPool2d", Category.POOL),
        ("call_module", "Linear", Category.MATMUL),
        ("call_module", "LayerNorm", Category.NORM),
        ("call_module", "GroupNorm", Category.NORM),
        ("call_module", "MultiheadAttention", Category.ATTENTION),
        ("call_module", "Flatten", Category.VIEW),
        ("call_module", "Embedding", Category.OTHER),
        ("call_function", "torch.relu", Category.ELEMENTWISE),
        ("call_function", "operator.add", Category.ELEMENTWISE),
        ("call_function", "_operator.add", Category.ELEMENTWISE),
        ("call_function", "torch.nn.functional.relu", Category.ELEMENTWISE),
        ("call_function", "torch.flatten", Category.VIEW),
        ("call_method", "contiguous", Category.COPY),
        ("call_method", "permute", Category.VIEW),
        ("call_method", "view", Category.VIEW),
        ("call_method", "to", Category.COPY),
        ("call_method", "__add__", Category.ELEMENTWISE),
        # torch.export
        ("call_function", "aten.conv2d.default", Category.CONV),
        ("call_function", "aten.batch_norm.default", Category.BATCHNORM),
        ("call_function", "aten._native_batch_norm_legit_no_training.default", Category.BATCHNORM),
        ("call_function", "aten.relu_.default", Category.ELEMENTWISE),
        ("call_function", "aten.add.Tensor", Category.ELEMENTWISE),
        ("call_function", "aten.max_pool2d.default", Category.POOL),
        ("call_function", "aten.clone.default", Category.COPY),
        ("call_function", "aten.contiguous.default", Category.COPY),
        ("call_function", "aten._to_copy.default", Category.COPY),
        ("call_function", "aten.copy_.default", Category.COPY),
        ("call_function", "aten.permute.default", Category.VIEW),
        ("call_function", "aten.native_layer_norm.default", Category.NORM),
        ("call_function", "aten.mean.dim", Category.ELEMENTWISE),
        ("call_function", "prims.convert_element_type.default", Category.OTHER),
        ("get_attr", "conv.weight", Category.OTHER),
        # dynamo
        ("call_function", "torch.conv2d", Category.CONV),
        ("call_function", "torch.nn.functional.batch_norm", Category.BATCHNORM),
        ("call_function", "torch._C._nn.linear", Category.MATMUL),
        ("call_function", "torch.matmul", Category.MATMUL),
        ("call_function", "torch.nn.functional.max_pool2d", Category.POOL),
        ("call_function", "torch._C._nn.scaled_dot_product_attention", Category.ATTENTION),
        ("call_function", "torch._assert", Category.OTHER),
    ],
)
def test_category(op: str, target: str, expected: Category) -> None:
    assert category(op, target) is expected


# The real profiler --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("capture", ["symbolic", "export", "dynamo"])
def test_hints_of_a_real_profile(capture: str) -> None:
    """A small model, three passes: the structural hints (a BN to fold, a layout copy) from the real profile's
    graph facts (inputs, layouts, modes), every node given the same time: whatever the machine measured, a node
    squeezed below a hint's floor by its neighbours' contention cannot hide a hint."""
    torch = pytest.importorskip("torch")
    from torch import nn

    from pytest_fxprof import profile

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 16, 3, padding=1)
            self.bn = nn.BatchNorm2d(16)
            self.pool = nn.MaxPool2d(2)
            self.depthwise = nn.Conv2d(16, 16, 3, padding=1, groups=16)

        def forward(self, x: Any) -> Any:
            y = self.pool(torch.relu(self.bn(self.conv(x))))
            return self.depthwise(y).permute(0, 2, 3, 1).contiguous()

    result = profile(Net().eval(), torch.randn(1, 3, 64, 64), passes=3, warmup=1, capture=capture)
    (bn,) = (n.name for n in result.nodes if category(n.op, n.target) is Category.BATCHNORM)
    (copy,) = (n.name for n in result.nodes if category(n.op, n.target) is Category.COPY)
    even = [dataclasses.replace(n, median_ns=100_000, samples_ns=(100_000,) * len(n.samples_ns)) for n in result.nodes]
    hints: dict[str, Hint] = {h.kind: h for h in find_hints(even)}
    assert hints["fusable-batchnorm"].nodes == (bn,)
    assert hints["layout-copy"].nodes == (copy,)
    assert "permute" in hints["layout-copy"].message
