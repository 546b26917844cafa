"""The timing engines, on a deterministic fake clock: which node each stamp's time lands on."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.fx
from torch import nn

from pytest_fxprof import profile
from pytest_fxprof.capture.methods import MODES
from pytest_fxprof.capture.nodes import describe_nodes
from pytest_fxprof.capture.symbolic import trace_symbolic
from pytest_fxprof.measure.engine import (
    ENGINES,
    ClockTimer,
    CompiledEngine,
    DeviceSide,
    EventTimer,
    InterpreterEngine,
    instrument,
    make_engine,
)
from pytest_fxprof.records.measurement import Protocol
from pytest_fxprof.settings import CAPTURES, SettingsError
from pytest_fxprof.settings import ENGINES as ENGINE_CHOICES


class FakeClock:
    """Time that passes only when a node does its (fake) work; readings are counted."""

    def __init__(self) -> None:
        self.now = 0
        self.readings = 0

    def __call__(self) -> int:
        self.readings += 1
        return self.now


CLOCK = FakeClock()


@torch.fx.wrap
def work(x: torch.Tensor, cost: int) -> torch.Tensor:
    """A node that takes ``cost`` nanoseconds of fake time."""
    CLOCK.now += cost
    return x + cost


class Costly(nn.Module):
    """Nodes of known cost: 100, 2000, 30 and 4000 fake nanoseconds; ``inner`` runs twice."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = work(x, 100)
        x = work(x, 2000)
        x = work(self.inner(x), 30)
        return work(x, 4000)


EXPECTED = {"work#0": 100, "work#1": 2000, "work#2": 30, "work#3": 4000, "Identity#0": 0}


def _by_target(
    engine_name: str, graphs: list[torch.fx.GraphModule], inputs: list[Any], calls: int = 1
) -> dict[str, int]:
    described = describe_nodes(graphs)
    nodes = [n for n, _ in described]
    engine = make_engine(engine_name, graphs, nodes, ClockTimer(CLOCK))
    engine.begin_pass()
    runners = engine.runners()
    for _ in range(calls):
        for runner in runners:
            runner(*inputs)
    times = engine.end_pass()
    return {
        info.key.rpartition(":")[2].rpartition(".")[2]: t for (_, info), t in zip(described, times.node_ns, strict=True)
    }


@pytest.mark.parametrize("engine", ["compiled", "interpreter"])
def test_each_node_gets_exactly_its_own_time(engine: str) -> None:
    gm, _ = trace_symbolic(Costly())
    assert _by_target(engine, [gm], [torch.zeros(1)]) == EXPECTED


@pytest.mark.parametrize("engine", ["compiled", "interpreter"])
def test_a_graph_run_several_times_in_a_pass_adds_up(engine: str) -> None:
    gm, _ = trace_symbolic(Costly())
    assert _by_target(engine, [gm], [torch.zeros(1)], calls=3) == {k: 3 * v for k, v in EXPECTED.items()}


def test_instrumented_graph_computes_the_same_and_stamps_every_node_once() -> None:
    gm, _ = trace_symbolic(Costly())
    nodes = [n for n, _ in describe_nodes([gm])]
    program = instrument(gm, nodes, CLOCK)
    before = CLOCK.readings
    out, stamps = program(torch.zeros(1))
    assert torch.equal(out, gm(torch.zeros(1)))
    assert len(stamps) == len(nodes) + 1 == CLOCK.readings - before


def test_the_compiled_engine_stamps_with_the_bare_clock_call() -> None:
    """On the CPU the stamp is the clock itself: no Python frame of ours between the nodes."""
    import time

    gm, _ = trace_symbolic(Costly())
    nodes = [n for n, _ in describe_nodes([gm])]
    engine = CompiledEngine([gm], nodes, ClockTimer(time.perf_counter_ns))
    program = engine.programs[0][0]
    stamp_nodes = [n for n in program.graph.nodes if n.target is time.perf_counter_ns]
    assert len(stamp_nodes) == len(nodes) + 1


def test_engines_report_the_same_nodes_and_outputs_on_a_real_model() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.LazyLinear(4)).eval()
    x = torch.randn(2, 3, 8, 8)
    net(x)
    compiled = profile(net, x, warmup=0, passes=2, engine="compiled")
    reference = profile(net, x, warmup=0, passes=2, engine="interpreter")
    assert [n.info for n in compiled.nodes] == [n.info for n in reference.nodes]
    assert compiled.environment.engine == "compiled"
    assert reference.environment.engine == "interpreter"
    assert all(len(n.samples_ns) == 2 for n in compiled.nodes)


def test_an_unknown_engine_names_the_choices() -> None:
    with pytest.raises(SettingsError, match=r"engine must be one of compiled, interpreter, not 'fast'"):
        profile(nn.ReLU(), torch.ones(1), engine="fast")


class FakeEvent:
    def __init__(self, device: FakeDevice) -> None:
        self.device = device
        self.at: int | None = None

    def record(self) -> None:
        self.at = self.device.now

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.device.synced, "elapsed_time before the pass synchronised"
        assert self.at is not None
        assert end.at is not None
        return (end.at - self.at) / 1e6  # milliseconds, like torch.cuda.Event


class FakeDevice:
    """A device whose queue time and allocator the test drives."""

    def __init__(self) -> None:
        self.now = 0
        self.allocated = 0
        self.peak = 0
        self.syncs = 0
        self.synced = False
        self.events = 0

    def side(self) -> DeviceSide:
        def event() -> FakeEvent:
            self.events += 1
            return FakeEvent(self)

        def sync() -> None:
            self.syncs += 1
            self.synced = True

        def reset() -> None:
            self.peak = self.allocated

        return DeviceSide(event, sync, lambda: self.allocated, lambda: self.peak, reset)


DEVICE = FakeDevice()


@torch.fx.wrap
def launch(x: torch.Tensor, device_ns: int, host_ns: int, scratch: int, keep: int) -> torch.Tensor:
    """A fake kernel: ``device_ns`` on the device, ``host_ns`` to launch, a temporary and a kept allocation."""
    DEVICE.now += device_ns
    CLOCK.now += host_ns
    DEVICE.peak = max(DEVICE.peak, DEVICE.allocated + scratch + keep)
    DEVICE.allocated += keep
    return x


class Kernels(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = launch(x, 5000, 300, 1024, 0)
        return launch(x, 700, 900, 0, 4096)


@pytest.mark.parametrize("engine", [CompiledEngine, InterpreterEngine])
def test_device_events_give_device_time_host_time_and_memory_with_one_sync_per_pass(engine: type) -> None:
    gm, _ = trace_symbolic(Kernels())
    nodes = [n for n, _ in describe_nodes([gm])]
    DEVICE.events = 0
    timing = engine([gm], nodes, EventTimer(DEVICE.side(), host_clock=CLOCK))
    for _ in range(2):  # the event pool is reused by the second pass
        DEVICE.allocated, DEVICE.syncs, DEVICE.synced = 100, 0, False
        timing.begin_pass()
        runner = timing.runners()[0]
        runner(torch.zeros(1))
        assert DEVICE.syncs == 0  # nothing waits for the device while the pass runs
        times = timing.end_pass()
        assert DEVICE.syncs == 1
        assert times.node_ns == [5000, 700]
        assert times.host_ns == [300, 900]
        assert times.memory_bytes == [100, 4196]
        assert times.peak_bytes == [1124, 4196]
    # events are made once: the compiled engine's stamps are shared by neighbours, the interpreter's are not
    assert DEVICE.events == (3 if engine is CompiledEngine else 4)


def test_flops_are_counted_per_node_and_give_achieved_rate() -> None:
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    result = profile(net, torch.ones(2, 4), warmup=0, passes=1)
    linear, relu = result.nodes
    assert linear.flops == 2 * 2 * 4 * 8  # a multiply and an add per weight, per row
    assert relu.flops == 0
    assert relu.flops_per_s is None
    assert linear.flops_per_s == pytest.approx(linear.flops / (linear.median_ns / 1e9))
    assert profile(net, torch.ones(2, 4), warmup=0, passes=1, flops=False).nodes[0].flops is None


def test_models_that_symbolic_tracing_rejects_are_timed_node_by_node() -> None:
    """A detection model (dynamo: several graphs) and RAFT (export), through ``profile`` and the compiled engine."""
    import torchvision

    torch.manual_seed(0)
    detector = torchvision.models.get_model(
        "fasterrcnn_mobilenet_v3_large_320_fpn", weights=None, weights_backbone=None, box_score_thresh=0.0
    ).eval()
    images = [torch.rand(3, 160, 200, generator=torch.Generator().manual_seed(0))]
    flow = torchvision.models.get_model("raft_small", weights=None).eval()
    frames = [torch.rand(1, 3, 128, 128, generator=torch.Generator().manual_seed(i)) for i in (1, 2)]
    results = {}
    for model, inputs, method in ((detector, (images,), "dynamo"), (flow, frames, "export")):
        result = results[method] = profile(model, *inputs, warmup=1, passes=2)
        assert result.capture.method == method
        assert result.capture.detail.startswith("symbolic_trace failed")
        assert result.environment.engine == "compiled"
        assert len(result.nodes) > 100
        assert all(len(n.samples_ns) == 2 for n in result.nodes)
        assert sum(n.median_ns for n in result.nodes) > 0
        assert any(n.flops for n in result.nodes)
        assert all(n.info.module for n in result.nodes if "conv" in n.target)  # mapped back to their modules
    assert results["dynamo"].capture.graphs > 1  # graph breaks: the timed nodes of every graph are there
    assert any(r.name == "backbone.body" for r in results["dynamo"].rollup("module"))
    assert any(r.name == "feature_encoder" for r in results["export"].rollup("module"))


class Structured(nn.Module):
    """An output of containers, which an exported graph returns flat and its capture packs again."""

    def forward(self, x: torch.Tensor) -> dict[str, Any]:
        y = x * 2
        return {"a": y, "b": (y.relu(), [y.sigmoid()])}


@pytest.mark.parametrize("engine", ["compiled", "interpreter"])
@pytest.mark.parametrize("capture", ["export", "dynamo", "symbolic"])
def test_structured_outputs_are_packed_once_by_every_engine_and_the_flop_count(engine: str, capture: str) -> None:
    result = profile(Structured(), torch.ones(3), warmup=1, passes=1, engine=engine, capture=capture)
    assert result.capture.method == ("symbolic_trace" if capture == "symbolic" else capture)
    assert all(n.flops is not None for n in result.nodes)
    assert [n.samples_ns != () for n in result.nodes] == [True] * len(result.nodes)


def test_the_settings_offer_exactly_the_engines_and_captures_there_are() -> None:
    """The settings (torch-free) name the choices; the engine and the capture (which import torch) implement
    them: the two lists must agree, in order (the first is the default)."""
    assert tuple(ENGINES) == ENGINE_CHOICES
    assert MODES == CAPTURES


def test_device_events_without_memory_never_read_the_allocator() -> None:
    gm, _ = trace_symbolic(Kernels())
    nodes = [n for n, _ in describe_nodes([gm])]
    side = DEVICE.side()
    read: list[str] = []
    side.allocated = lambda: read.append("allocated") or 0  # type: ignore[func-returns-value]
    side.peak = lambda: read.append("peak") or 0  # type: ignore[func-returns-value]
    side.reset_peak = lambda: read.append("reset")
    timing = CompiledEngine([gm], nodes, EventTimer(side, host_clock=CLOCK, memory=False))
    DEVICE.syncs = 0
    timing.begin_pass()
    timing.runners()[0](torch.zeros(1))
    times = timing.end_pass()
    assert read == []  # a training step's timer: the event and the host clock only
    assert times.node_ns == [5000, 700]
    assert times.host_ns == [300, 900]
    assert times.memory_bytes is None
    assert times.peak_bytes is None


def test_a_measured_profile_reads_the_allocator_in_one_pass_of_its_own_never_in_a_timed_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On CUDA the allocator's three reads per stamp cost about ten times the event: in a timed pass they would be
    the node's time on a device waiting for its launches. A pass of their own gives the memory columns."""
    from pytest_fxprof.measure import profiler

    reads: list[int] = []  # per pass (the plain forward's runs are no pass): allocator reads
    base = DEVICE.side()

    def allocated() -> int:
        reads[-1] += 1
        return DEVICE.allocated

    made: list[EventTimer] = []

    class CountingTimer(EventTimer):
        def begin_pass(self) -> None:
            reads.append(0)
            super().begin_pass()

    def node_timer(engine: str, device: torch.device, clock_name: str, clock: Any, *, memory: bool = True) -> Any:
        made.append(
            CountingTimer(
                DeviceSide(base.event, base.synchronize, allocated, base.peak, base.reset_peak),
                host_clock=CLOCK,
                memory=memory,
            )
        )
        return profiler.CUDA_NODE_CLOCK, made[-1]

    monkeypatch.setattr(profiler, "_node_timer", node_timer)
    DEVICE.allocated = 100
    result = profile(Kernels(), torch.zeros(1), warmup=2, passes=3, capture="symbolic")
    assert [m.memory_on for m in made] == [False]  # the timer starts without the allocator ...
    assert reads[:-1] == [0] * (len(reads) - 1)  # ... no warm-up or kept pass read it ...
    assert reads[-1] == 3  # ... one more pass did, at each of its stamps (before the first node, after each)
    assert len(reads) >= 2 + 3 + 1
    assert [n.median_ns for n in result.nodes] == [5000, 700]  # the kept passes' device times
    assert [n.host_ns for n in result.nodes] == [300, 900]
    first, second = (n.memory_bytes or 0 for n in result.nodes)
    assert second - first == 4096  # the second kernel keeps 4 KiB
    assert [n.peak_bytes for n in result.nodes] == [first + 1024, second]  # the first one's scratch
    assert result.environment.clock.startswith("cuda-events-only nodes, ")  # the passes: the CPU's clock here
    # unmeasured (one cold pass): that pass reads the allocator, as nothing in it is timed
    made.clear()
    reads.clear()
    cold = profiler.profile_module(
        Kernels(), [torch.zeros(1)], {}, name="cold", protocol=Protocol(2, 3, 1, 1), measured=False, capture="symbolic"
    )
    assert [m.memory_on for m in made] == [True]
    assert reads == [3]
    assert [n.memory_bytes is not None for n in cold.nodes] == [True, True]


class WatchingClock:
    """A clock whose every reading notes whether ``watched`` (a weak reference) had died."""

    def __init__(self) -> None:
        self.watched: Any = None
        self.dead: list[bool] = []

    def __call__(self) -> int:
        self.dead.append(self.watched is not None and self.watched() is None)
        return len(self.dead)


WATCH = WatchingClock()


@torch.fx.wrap
def made(x: torch.Tensor) -> torch.Tensor:
    """A node whose output is watched until it dies."""
    import weakref

    out = x * 2
    WATCH.watched = weakref.ref(out)
    return out


class Frees(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = made(x)  # node 1: its output's last use is node 2
        z = torch.neg(y)  # node 2
        return torch.relu(z)  # node 3


@pytest.mark.parametrize("engine", ["compiled", "interpreter"])
def test_a_value_is_freed_inside_the_node_that_last_uses_it(engine: str) -> None:
    """Both engines free a node's output within the stamps of its last user, as eager code frees it there: never
    after the end stamp, where what the free costs the allocator would land on the next node."""
    gm, _ = trace_symbolic(Frees())
    described = describe_nodes([gm])
    timed = make_engine(engine, [gm], [n for n, _ in described], ClockTimer(WATCH))
    WATCH.dead.clear()
    timed.begin_pass()
    (runner,) = timed.runners()
    runner(torch.ones(4))
    # the stamps that bracket neg (the last use of made's output): the one before it finds the value alive, the one
    # after it finds it freed
    neg = [info.name for _, info in described].index("neg")
    before, after = (2 * neg, 2 * neg + 1) if engine == "interpreter" else (neg, neg + 1)  # own stamps, or shared
    assert WATCH.dead[before] is False
    assert WATCH.dead[after] is True
