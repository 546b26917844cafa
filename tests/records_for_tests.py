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
