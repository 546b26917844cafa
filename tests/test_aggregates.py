"""Unit tests of ``pytest_fxprof.judge.aggregates``: which nodes both gates judge together, over both sides of a
changed graph, and how strictly each level is tested (hand-built records, no torch)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import pytest

from pytest_fxprof.judge.aggregates import (
    LEVEL_ITEMS,
    Group,
    fold,
    graph_groups,
    plan,
)
from pytest_fxprof.judge.band import corrected_confidence, corrected_k
from pytest_fxprof.records.measurement import NodeInfo
from pytest_fxprof.records.verdicts import Kind
from tests.records_for_tests import node


def fn(name: str, target: str, module: str = "", op: str = "call_function") -> NodeInfo:
    return node(name, target, module, op=op)


def named(groups: Sequence[Group]) -> list[tuple[Kind, str, list[int]]]:
    return [(g.kind, g.name, list(g.matched)) for g in groups]


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        pytest.param(
            (fn("a", "torch.relu"), fn("b", "torch.relu"), fn("c", "add", op="call_method"), fn("d", "operator.add")),
            [(Kind.OP, "torch.relu", [0, 1])],
            id="op-types-by-target-single-ones-left-out",
        ),
        pytest.param(
            (fn("fc1", "Linear", "fc1", "call_module"), fn("fc2", "Linear", "fc2", "call_module")),
            [(Kind.OP, "Linear", [0, 1])],
            id="modules-by-class-their-own-path-no-subtree",
        ),
        pytest.param(
            (fn("w", "w", "enc", "get_attr"), fn("w_1", "w", "enc", "get_attr"), fn("r", "torch.relu")),
            [],
            id="get-attr-no-op-type-nor-a-subtree-of-its-own",
        ),
        pytest.param(
            (fn("w", "w", "enc.fc", "get_attr"), fn("fc", "aten.linear.default", "enc.fc"), fn("r", "torch.relu")),
            [],
            id="one-computing-node-and-its-weight-are-that-node",
        ),
        pytest.param(
            (
                fn("w", "w", "enc", "get_attr"),
                fn("a", "torch.sin", "enc"),
                fn("b", "torch.cos", "enc"),
                fn("r", "torch.relu"),
            ),
            [(Kind.MODULE, "enc", [0, 1, 2])],
            id="get-attr-counts-in-a-subtree-of-two-computing-nodes",
        ),
        pytest.param(
            (
                fn("t", "torch.tanh", "a.b.c.d"),
                fn("t_1", "torch.tanh", "a.b.c.d"),
                fn("u", "torch.sin", "a.b"),
                fn("s", "torch.sin", "z"),
            ),
            [
                (Kind.OP, "torch.sin", [2, 3]),
                (Kind.OP, "torch.tanh", [0, 1]),
                (Kind.MODULE, "a.b", [0, 1, 2]),  # a holds the same nodes: named by the deeper
                (Kind.MODULE, "a.b.c.d", [0, 1]),  # a.b.c, the same nodes
            ],
            id="subtrees-at-every-depth-the-deepest-of-the-same-nodes",
        ),
        pytest.param(
            (fn("fc", "Linear", "enc.fc", "call_module"), fn("r", "torch.relu", "enc"), fn("s", "torch.sin")),
            [(Kind.MODULE, "enc", [0, 1])],
            id="call-module-counts-in-its-parent",
        ),
        pytest.param(
            (fn("a", "torch.sin", "enc"), fn("b", "torch.cos", "enc")), [], id="the-whole-graph-is-no-subtree"
        ),
        pytest.param((), [], id="empty"),
    ],
)
def test_graph_groups(nodes: Sequence[NodeInfo], expected: list[tuple[Kind, str, list[int]]]) -> None:
    assert named(graph_groups(nodes)) == expected


def test_fold_folds_every_index() -> None:
    assert fold("transformer.h.2.mlp") == "transformer.h.*.mlp"
    assert fold("encoder.layer.11.attention.self") == "encoder.layer.*.attention.self"
    assert fold("features.3.block.0.1") == "features.*.block.*.*"
    assert fold("layer10.conv") == "layer10.conv"  # a name with a digit is no index


# A GPT-like graph: two blocks, each an attention (two nodes) and an MLP (three), a norm in each block and one at
# the end, the classes as a capture records them.
GPT = (
    fn("ln", "aten.layer_norm.default", "h.0.ln_1"),
    fn("qkv", "aten.linear.default", "h.0.attn.c_attn"),
    fn("sdpa", "aten.scaled_dot_product_attention.default", "h.0.attn"),
    fn("fc", "aten.linear.default", "h.0.mlp.c_fc"),
    fn("gelu", "aten.gelu.default", "h.0.mlp"),
    fn("proj", "aten.linear.default", "h.0.mlp.c_proj"),
    fn("ln_1", "aten.layer_norm.default", "h.1.ln_1"),
    fn("qkv_1", "aten.linear.default", "h.1.attn.c_attn"),
    fn("sdpa_1", "aten.scaled_dot_product_attention.default", "h.1.attn"),
    fn("fc_1", "aten.linear.default", "h.1.mlp.c_fc"),
    fn("gelu_1", "aten.gelu.default", "h.1.mlp"),
    fn("proj_1", "aten.linear.default", "h.1.mlp.c_proj"),
    fn("ln_f", "aten.layer_norm.default", "ln_f"),
    fn("head", "aten.linear.default", "head"),
)
CLASSES = {
    "h": "ModuleList",
    **{f"h.{i}": "Block" for i in range(2)},
    **{f"h.{i}.ln_1": "LayerNorm" for i in range(2)},
    **{f"h.{i}.attn": "Attention" for i in range(2)},
    **{f"h.{i}.attn.c_attn": "Linear" for i in range(2)},
    **{f"h.{i}.mlp": "MLP" for i in range(2)},
    **{f"h.{i}.mlp.c_fc": "Linear" for i in range(2)},
    **{f"h.{i}.mlp.c_proj": "Linear" for i in range(2)},
    "ln_f": "LayerNorm",
    "head": "Linear",
}


def by_name(groups: Sequence[Group]) -> dict[str, Group]:
    return {g.name: g for g in groups}


def test_repeated_blocks_are_aggregated_by_pattern_and_class() -> None:
    groups = by_name(graph_groups(GPT, CLASSES))
    # each instance's subtree, at every depth, with its class
    assert (groups["h.0.mlp"].kind, groups["h.0.mlp"].cls, groups["h.0.mlp"].matched) == (Kind.MODULE, "MLP", (3, 4, 5))
    # the instances of one block together, indices folded, named with their class; the instances listed
    mlp = groups["h.*.mlp"]
    assert (mlp.kind, mlp.cls, mlp.matched, mlp.instances) == (
        Kind.PATTERN,
        "MLP",
        (3, 4, 5, 9, 10, 11),
        ("h.0.mlp", "h.1.mlp"),
    )
    assert groups["h.*.attn"].cls == "Attention"
    # a class whose every instance is one node of one operator type is that operator type
    assert "LayerNorm" not in groups
    assert groups["aten.layer_norm.default"].matched == (0, 6, 12)
    assert "Linear" not in groups


def test_a_class_in_several_places_is_aggregated_whole() -> None:
    # the norms written out (two nodes each) in the blocks and at the end: one class across two places
    nodes = [n for n in GPT if n.target != "aten.layer_norm.default"]
    for where in ("h.0.ln_1", "h.1.ln_1", "ln_f"):
        nodes += [fn(f"mean_{where}", "aten.mean.dim", where), fn(f"rsqrt_{where}", "aten.rsqrt.default", where)]
    groups = by_name(graph_groups(nodes, CLASSES))
    norm = groups["LayerNorm"]
    assert (norm.kind, norm.instances) == (Kind.CLASS, ("h.0.ln_1", "h.1.ln_1", "ln_f"))
    assert len(norm.matched) == 6
    assert groups["h.*.ln_1"].kind is Kind.PATTERN  # the norms of the blocks alone, beside it
    assert norm.family == "class"


def test_aggregates_of_the_same_nodes_are_one() -> None:
    groups = by_name(graph_groups(GPT, CLASSES))
    # h, a ModuleList, holds both blocks and nothing else: the blocks' pattern names them, with the blocks' class
    assert (groups["h.*"].kind, groups["h.*"].cls) == (Kind.PATTERN, "Block")
    assert "h" not in groups
    assert "Block" not in groups
    assert "ModuleList" not in groups
    # the class MLP has the nodes of the pattern h.*.mlp: named by the pattern, with the class
    assert "MLP" not in groups
    # one instance of a class is its module, not a class aggregate
    assert "Attention" not in groups
    # a pattern of one node per instance is kept (two nodes)
    assert groups["h.*.ln_1"].matched == (0, 6)


def test_a_pattern_needs_two_instances() -> None:
    nodes = (fn("a", "torch.sin", "blocks.0"), fn("b", "torch.cos", "blocks.0"), fn("c", "torch.tan", "head"))
    assert "blocks.*" not in by_name(graph_groups(nodes))


def test_a_training_step_gets_each_aggregate_per_direction() -> None:
    forward = fn("fc", "aten.linear.default", "h.0.mlp.c_fc")
    backward = NodeInfo("backward:x", "mm", "call_function", "aten.mm.default", "h.0.mlp.c_fc", direction="backward")
    nodes = (
        forward,
        fn("gelu", "aten.gelu.default", "h.0.mlp"),
        backward,
        replace_module(backward, "h.1.mlp.c_fc"),
        replace_module(backward, "head"),
    )
    names = set(by_name(graph_groups(nodes, CLASSES)))
    # the two backward nodes in h, a ModuleList: the patterns that hold them at every depth, named by the deepest
    assert {"h.0.mlp forward", "<model> backward", "h.*.mlp.c_fc backward", "aten.mm.default backward"} <= names
    assert "h.*.mlp backward" not in names


def replace_module(n: NodeInfo, module: str) -> NodeInfo:
    return NodeInfo(n.key + module, n.name + "_1", n.op, n.target, module, direction=n.direction)


# Changed graphs: judged by module, the nodes one side holds charged to the module they sit in ----------


def test_a_changed_graph_charges_added_and_removed_nodes_to_their_module() -> None:
    # GELU by its formula in both MLPs: the gelu node goes, three new ones come
    formula = [
        [fn(f"{op}{s}", f"aten.{op}.Tensor", f"h.{i}.mlp") for op in ("mul", "tanh", "add")]
        for i, s in ((0, ""), (1, "_1"))
    ]
    new = [*GPT[:4], *formula[0], *GPT[5:10], *formula[1], *GPT[11:]]
    old_index = {n.name: i for i, n in enumerate(GPT)}
    pairs = [(old_index[n.name], j) for j, n in enumerate(new) if n.name in old_index]
    groups = by_name(plan(GPT, new, pairs, CLASSES, CLASSES))
    mlp = groups["h.*.mlp"]
    assert [GPT[pairs[k][0]].name for k in mlp.matched] == ["fc", "proj", "fc_1", "proj_1"]
    assert [GPT[i].name for i in mlp.only_old] == ["gelu", "gelu_1"]
    assert [new[j].name for j in mlp.only_new] == ["mul", "tanh", "add", "mul_1", "tanh_1", "add_1"]
    assert [new[j].name for j in groups["h.0.mlp"].only_new] == ["mul", "tanh", "add"]
    # the modules above hold them too; the attention, unchanged, holds none
    assert len(groups["h.*"].only_new) == 6
    assert groups["h.*.attn"].only_new == groups["h.*.attn"].only_old == ()
    # an operator type only one side has is judged within its modules, not alone
    assert "aten.tanh.Tensor" not in groups
    assert "aten.gelu.default" not in groups


def test_a_module_only_one_side_has_is_judged_within_its_parent() -> None:
    new = (*GPT[:6], fn("extra", "torch.sin", "h.0.mlp.new"), fn("extra2", "torch.cos", "h.0.mlp.new"), *GPT[6:])
    pairs = [(i, i if i < 6 else i + 2) for i in range(len(GPT))]
    groups = by_name(plan(GPT, new, pairs, CLASSES, CLASSES))
    assert "h.0.mlp.new" not in groups
    assert [new[j].name for j in groups["h.0.mlp"].only_new] == ["extra", "extra2"]


# Levels ---------------------------------------------------------------------------------------------------


def wide(blocks: int) -> tuple[NodeInfo, ...]:
    """``blocks`` blocks of two nodes each, under one module: ``net.b0`` ... (named, not indexed: no pattern)."""
    pairs = [fn(f"{op}{i}", f"torch.{op}", f"net.b{i}") for i in range(blocks) for op in ("sin", "cos")]
    return (*pairs, fn("out", "torch.tan"))


def test_each_level_counts_its_aggregates() -> None:
    groups = by_name(graph_groups(wide(12)))
    assert {g.family for g in groups.values()} == {"op", "depth 1", "depth 2"}
    assert groups["net.b3"].family == "depth 2"
    assert groups["net.b3"].tested == 12
    assert groups["net"].tested == 1
    assert groups["torch.sin"].tested == 2  # sin and cos; tan is one node


def test_a_level_of_at_most_level_items_is_tested_at_the_base_rate() -> None:
    small = by_name(graph_groups(wide(LEVEL_ITEMS)))
    assert small["net.b0"].strictness == 1.0
    large = by_name(graph_groups(wide(4 * LEVEL_ITEMS)))
    assert large["net.b0"].strictness == pytest.approx(1 / 4)


def test_a_stricter_level_needs_more_deviations_and_more_confidence() -> None:
    normal = statistics.NormalDist()
    assert corrected_k(3.0, 1.0) == 3.0
    k = corrected_k(3.0, 0.25)
    assert k > 3.0
    assert normal.cdf(-k) == pytest.approx(normal.cdf(-3.0) / 4)
    assert corrected_confidence(0.999, 1.0) == 0.999
    assert corrected_confidence(0.999, 0.25) == pytest.approx(1 - 0.001 / 4)


def test_a_container_class_is_no_class_aggregate() -> None:
    # two stages, each a Sequential of blocks: the class Sequential has no code of its own
    nodes = tuple(
        fn(f"{op}{s}{b}", f"torch.{op}", f"stages.{s}.blocks.{b}")
        for s in range(2)
        for b in range(2)
        for op in ("sin", "cos")
    )
    classes = {"stages": "Sequential"} | {f"stages.{s}": "Stage" for s in range(2)}
    classes |= {f"stages.{s}.blocks": "Sequential" for s in range(2)}
    classes |= {f"stages.{s}.blocks.{b}": "Block" for s in range(2) for b in range(2)}
    groups = by_name(graph_groups((*nodes, fn("head", "torch.tan", "head")), classes))
    assert "Sequential" not in groups
    # the blocks of every stage, with their class, for the Sequential that holds the stages and nothing else
    assert (groups["stages.*.blocks.*"].kind, groups["stages.*.blocks.*"].cls) == (Kind.PATTERN, "Block")
    assert "stages" not in groups
    # a stage that holds its blocks and nothing else is named by the stage, which has code, not by its Sequential
    assert (groups["stages.0"].kind, groups["stages.0"].cls) == (Kind.MODULE, "Stage")
    assert "stages.0.blocks" not in groups
