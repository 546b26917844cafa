"""Hand-built records shared by the unit tests of the decision and its views (no torch needed)."""

from __future__ import annotations

from pytest_fxprof.records import Capture, Environment, NodeInfo, Protocol, node_key

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
