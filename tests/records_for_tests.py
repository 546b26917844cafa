"""Hand-built records shared by the unit tests of the decision and its views (no torch needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pytest_fxprof.judge.decision import Policy
from pytest_fxprof.records.measurement import Capture, Environment, NodeInfo, Protocol, node_key

ENV = Environment(
    torch="2.4.1+cpu",
    python="3.11.9",
    platform="Linux-6.8-x86_64",
    cpu="Intel(R) Xeon(R) Platinum 8480+",
    threads=1,
    device="cpu",
    allocator="glibc-tuned",
)
PROTOCOL = Protocol(warmup=5, passes=20, threads=1, processes=5)
CAPTURE = Capture(method="symbolic_trace")


def node(name: str, target: str, module: str = "", op: str = "call_function", occurrence: int = 0) -> NodeInfo:
    """A node whose key is built the way the profiler builds it."""
    return NodeInfo(key=node_key(op, module, target, occurrence), name=name, op=op, target=target, module=module)


# A small CNN-like graph: eight timed nodes adding up to exactly 1 ms.
MODEL: tuple[NodeInfo, ...] = (
    node("conv1", "stem.conv", "stem.conv", op="call_module"),
    node("relu1", "torch.relu", "stem"),
    node("conv2", "layer1.conv", "layer1.conv", op="call_module"),
    node("add", "operator.add", "layer1"),
    node("pool", "pool", "pool", op="call_module"),
    node("flatten", "torch.flatten"),
    node("fc", "fc", "fc", op="call_module"),
    node("softmax", "softmax", op="call_method"),
)
BASE_NS: dict[str, int] = {
    "conv1": 200_000,
    "relu1": 50_000,
    "conv2": 300_000,
    "add": 20_000,
    "pool": 80_000,
    "flatten": 30_000,
    "fc": 250_000,
    "softmax": 70_000,
}
assert sum(BASE_NS.values()) == 1_000_000

POLICY = Policy(
    node_tolerance=0.10,
    total_tolerance=0.15,
    floor_ns=20_000,
    spread_k=3.0,
    floor_share=0.002,
    drift_doubt=0.5,
    faster_credit=0.0,
)
"""The policy the decision and rendering tests work their expectations out for. Spelled out, so that retuning
the defaults (pinned in test_settings) does not move them."""


def _cnn() -> tuple[tuple[NodeInfo, ...], dict[str, int]]:
    nodes, times = [], {}
    for i in range(8):
        for name, target, module, op, ns in (
            ("conv", "Conv2d", f"blocks.{i}.conv", "call_module", 400_000),
            ("bn", "BatchNorm2d", f"blocks.{i}.bn", "call_module", 40_000),
            ("relu", "torch.relu", f"blocks.{i}", "call_function", 9_000),
            ("add", "operator.add", f"blocks.{i}", "call_function", 9_000),
            ("mul", "operator.mul", f"blocks.{i}", "call_function", 9_000),
            ("lin", "Linear", f"blocks.{i}.lin", "call_module", 350_000),
        ):
            nodes.append(node(f"{name}{i}", target, module, op=op, occurrence=i))
            times[f"{name}{i}"] = ns
    return tuple(nodes), times


# Eight blocks (6.536 ms in all): a conv and a linear that gate alone (6.1 % and 5.4 %), a 40 us BatchNorm
# whose nearest peers are the other BatchNorms, and three 9 us ops. Aggregates: each of the six operator
# types and each block; the model is 48 nodes.
CNN, CNN_NS = _cnn()
assert sum(CNN_NS.values()) == 6_536_000

# Eight 300 us nodes (they gate) around a ``head`` module of six 30 us ops of six types (none gates;
# the head is the only aggregate they belong to). 2.58 ms in all.
ENCODER: tuple[NodeInfo, ...] = (
    node("embed", "Embedding", "embed", op="call_module"),
    *(
        n
        for i in range(3)
        for n in (
            node(f"attn{i}", "MultiheadAttention", f"encoder.{i}.attn", op="call_module", occurrence=i),
            node(f"ff{i}", "Linear", f"encoder.{i}.ff", op="call_module", occurrence=i),
        )
    ),
    node("relu", "torch.relu", "head"),
    node("tanh", "torch.tanh", "head"),
    node("sigmoid", "torch.sigmoid", "head"),
    node("add", "operator.add", "head"),
    node("mul", "operator.mul", "head"),
    node("flatten", "torch.flatten", "head"),
    node("out", "Linear", "out", op="call_module", occurrence=3),
)
HEAD = ("relu", "tanh", "sigmoid", "add", "mul", "flatten")
ENCODER_NS: dict[str, int] = {n.name: 30_000 if n.name in HEAD else 300_000 for n in ENCODER}
assert sum(ENCODER_NS.values()) == 2_580_000


def scaled(
    nodes: Sequence[NodeInfo], base: Mapping[str, int], factors: Mapping[str, float] | None = None, overall: float = 1.0
) -> list[int]:
    """The nodes' times, each scaled by ``overall`` and by the factor of its name or of its name's kind
    (the name without its block number: ``"bn"`` scales ``bn0`` ... ``bn7``)."""
    factors = factors or {}

    def factor(name: str) -> float:
        return factors.get(name, factors.get(name.rstrip("0123456789"), 1.0))

    return [round(base[n.name] * overall * factor(n.name)) for n in nodes]
