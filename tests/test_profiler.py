"""The profiling engine on real torch modules: what it captures, what it leaves untouched, how it fails."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from typing import Any

import pytest
import torch
from torch import nn

from pytest_fxprof import ProfileResult, profile
from pytest_fxprof.capture.errors import CaptureError, ProfileError
from pytest_fxprof.capture.nodes import describe_nodes
from pytest_fxprof.capture.symbolic import trace_symbolic
from pytest_fxprof.measure.facts import FAULT_PASSES
from pytest_fxprof.measure.schedule import chosen_passes, off_cpu_share
from pytest_fxprof.records.disturbance import OFF_CPU_LIMIT


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x))) + x


class Net(nn.Module):
    def __init__(self, extra_op: bool = False) -> None:
        super().__init__()
        self.extra_op = extra_op
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        x = self.stem(x)
        if self.extra_op:  # a Python flag, fixed at trace time
            x = x * 2
        x = self.blocks(x)
        out: torch.Tensor = self.head(x.mean(dim=(2, 3))) * scale
        return out


class InPlace(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.add_(1)


class DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Branchy()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.inner(self.lin(x))
        return out


class Branchy(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x
        return -x


class ParamMutator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.w.add_(1)
        return x * self.w


def quick(module: nn.Module, *args: Any, **kwargs: Any) -> ProfileResult:
    return profile(module, *args, warmup=1, passes=3, **kwargs)


def test_profile_reports_every_node_with_module_paths() -> None:
    result = profile(Net(), torch.randn(2, 3, 8, 8), warmup=1, passes=4)
    modules = {n.module for n in result.nodes}
    assert {"stem", "blocks.0.conv", "blocks.0.bn", "blocks.1.conv", "head"} <= modules
    relu = [n for n in result.nodes if n.target == "torch.relu"]
    assert [n.module for n in relu] == ["blocks.0", "blocks.1"]  # function nodes carry their enclosing module
    assert all(len(n.samples_ns) == 4 and n.median_ns > 0 for n in result.nodes)
    assert sum(n.share for n in result.nodes) == pytest.approx(1.0)
    assert result.total_ns > 0
    assert result.overhead is not None
    assert result.overhead > 0
    assert result.measured


@pytest.mark.parametrize(
    ("warmup", "passes"),
    [
        pytest.param(0, 1, id="no-warmup-one-pass"),
        pytest.param(1, 3, id="one-warmup-three-passes"),
        pytest.param(4, 12, id="defaults"),
    ],
)
def test_plain_call_is_timed_in_every_kept_pass(warmup: int, passes: int) -> None:
    """The plain call is timed as often as the instrumented pass is kept (the total's verdict rests on it), call after
    call before anything else runs the model, warmed up as the instrumented passes are, with the page faults each
    took; then the fault passes run the graphs and the plain call once more each."""
    seen: list[int] = []

    class Count(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(1)
            return x

    # the interpreter engine never measures a pass again for preemption, so the counts are exact
    result = profile(
        nn.Sequential(Count()),
        torch.ones(1),
        warmup=warmup,
        passes=passes,
        leaf_modules=[Count],
        capture="symbolic",
        engine="interpreter",
    )
    assert len(result.instrumented_samples_ns) == passes
    assert len(result.reference_samples_ns) == passes
    assert len(result.total_samples_ns) == passes
    assert len(result.fault_samples) == passes
    assert all(len(n.samples_ns) == passes for n in result.nodes)
    assert all(n.faults is not None and n.faults >= 0 for n in result.nodes)
    # first the plain calls (as many thrown away as the warm-up, one at least, then passes timed), then one to count
    # FLOPs, warmup + passes instrumented, then the fault passes of the graphs and of the plain call
    assert len(seen) == max(warmup, 1) + passes + 1 + warmup + passes + 2 * FAULT_PASSES
    assert result.overhead is not None


def test_a_profile_without_the_plain_forward_times_only_instrumented_passes() -> None:
    """``plain=False`` (what a bench may ask; every process of a check times the plain call): no plain call in any
    pass, so no plain total and no overhead, and the total is the instrumented pass; the instrumented passes as
    ever."""
    from pytest_fxprof.measure.profiler import profile_module
    from pytest_fxprof.records.measurement import Protocol

    seen: list[int] = []

    class Count(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(1)
            return x

    result = profile_module(
        nn.Sequential(Count()),
        (torch.ones(1),),
        {},
        name="call0",
        protocol=Protocol(warmup=4, passes=12, threads=1, processes=1),
        leaf_modules=[Count],
        capture="symbolic",
        engine="interpreter",
        plain=False,
    )
    # one to count FLOPs, warm-up and kept passes instrumented, none plain, then the fault passes (the graphs', the
    # plain call's: faults are read whether or not the call is timed)
    assert len(seen) == 1 + 4 + 12 + 2 * FAULT_PASSES
    assert result.total_samples_ns == ()
    assert len(result.instrumented_samples_ns) == 12
    assert result.overhead is None
    assert result.total_ns == result.instrumented_ns


def test_a_sides_plain_total_comes_from_the_processes_that_timed_it() -> None:
    """A side's process that timed no plain forward writes its run's plain total as 0 (not timed); the new side's
    profile takes its plain total and overhead from the processes that timed it, its node times from all."""
    from pytest_fxprof.against.answers import merged, side_profile
    from pytest_fxprof.measure.profiler import profile_module
    from pytest_fxprof.modes.sample import _side_entry
    from pytest_fxprof.records.measurement import Protocol, Tolerances
    from pytest_fxprof.store.baseline import entry_from_json, entry_to_json

    net, x = Net(), (torch.randn(2, 3, 8, 8),)
    protocol = Protocol(warmup=1, passes=4, threads=1, processes=1)
    tolerances = Tolerances(node=0.05, total=0.03)

    def side(plain: bool) -> Any:
        got = profile_module(net, x, {}, name="call0", protocol=protocol, plain=plain, reference=False)
        return entry_from_json(entry_to_json(_side_entry(ProfileResult.of(got), tolerances)))  # as the file holds it

    first, later = side(plain=True), side(plain=False)
    assert first.runs[0].total_ns > 0
    assert later.runs[0].total_ns == 0
    assert later.runs[0].instrumented_ns > 0
    base = profile_module(net, x, {}, name="call0", protocol=protocol, measured=False)
    got = side_profile(base, merged([first, later, later]))
    assert got.total_samples_ns == (first.runs[0].total_ns,)
    assert len(got.instrumented_samples_ns) == 3
    assert all(len(n.samples_ns) == 3 for n in got.nodes)
    assert got.overhead is not None
    alone = side_profile(base, merged([later, later]))  # no process timed it: the instrumented pass stands in
    assert alone.total_samples_ns == ()
    assert alone.overhead is None
    assert alone.total_ns == alone.instrumented_ns


def test_table_and_dataframe_views() -> None:
    result = profile(Net(), torch.randn(2, 3, 8, 8), warmup=0, passes=2)
    table = result.table(limit=3)
    assert table.splitlines()[0].split()[:4] == ["node", "op", "target", "module"]
    assert f"... {len(result.nodes) - 3} more nodes" in table
    frame = result.to_dataframe()
    assert len(frame) == len(result.nodes)
    assert list(frame["node"]) == [n.name for n in result.nodes]


def test_module_and_inputs_are_left_exactly_as_they_were() -> None:
    net = Net().train()
    net.blocks[1].eval()
    x = torch.randn(2, 3, 8, 8)
    x_before = x.clone()
    state_before = {k: v.clone() for k, v in net.state_dict().items()}
    rng_before = torch.random.get_rng_state()
    threads_before = torch.get_num_threads()
    quick(net, x)
    assert net.training
    assert not net.blocks[1].training
    assert net.blocks[0].training
    for key, value in net.state_dict().items():
        assert torch.equal(value, state_before[key]), key  # BatchNorm running stats included
    assert torch.equal(x, x_before)
    assert torch.equal(torch.random.get_rng_state(), rng_before)
    assert torch.get_num_threads() == threads_before


def test_in_place_ops_do_not_touch_the_callers_input() -> None:
    x = torch.zeros(3)
    result = quick(InPlace(), x)
    assert torch.equal(x, torch.zeros(3))
    assert result is not None


def test_runs_under_no_grad() -> None:
    seen: list[bool] = []

    class Probe(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(torch.is_grad_enabled())
            return x

    quick(nn.Sequential(Probe()), torch.ones(2, requires_grad=True), leaf_modules=[Probe])
    assert seen
    assert not any(seen)
    assert torch.is_grad_enabled()


def test_parameter_mutated_in_forward_is_refused() -> None:
    with pytest.raises(ProfileError, match=r"changed its parameters in place.*deepcopy"):
        quick(ParamMutator(), torch.ones(3))


def test_keyword_inputs_are_bound_like_a_call() -> None:
    x = torch.randn(1, 3, 8, 8)
    result = quick(Net(), x, scale=3.0)
    assert result is not None
    with pytest.raises(ProfileError, match=r"do not fit Net\.forward"):
        quick(Net(), x, bogus=1)


def test_node_keys_survive_an_op_inserted_early() -> None:
    plain = [info for _, info in describe_nodes([trace_symbolic(Net())[0]])]
    extra = [info for _, info in describe_nodes([trace_symbolic(Net(extra_op=True))[0]])]
    assert len(extra) == len(plain) + 1
    assert {n.key for n in plain} <= {n.key for n in extra}
    # the generated names shift, the keys do not
    assert [n.name for n in plain] != [n.name for n in extra if n.key in {p.key for p in plain}]


def test_untraceable_model_names_the_submodule_and_the_fix() -> None:
    with pytest.raises(CaptureError) as info:
        quick(DataDependent(), torch.randn(2, 3), capture="symbolic")
    text = str(info.value)
    assert "'inner' (Branchy)" in text
    assert "leaf_modules=['inner']" in text
    assert "if x.sum() > 0:" in text  # the user's line that broke tracing
    assert info.value.__cause__ is not None


def test_auto_keeps_the_submodule_that_broke_tracing_whole_and_says_so() -> None:
    result = quick(DataDependent(), torch.randn(2, 3))
    assert result.capture.method == "symbolic_trace"
    assert result.capture.leaf_modules == ("inner",)
    assert "failed in 'inner' (Branchy)" in result.capture.detail
    assert [n.target for n in result.nodes] == ["Linear", "Branchy"]


@pytest.mark.parametrize("leaf", ["inner", Branchy])
def test_leaf_modules_by_path_or_class(leaf: object) -> None:
    result = profile(DataDependent(), torch.randn(2, 3), warmup=0, passes=1, leaf_modules=[leaf])
    assert [n.target for n in result.nodes] == ["Linear", "Branchy"]
    assert result.capture.leaf_modules


def test_custom_tracer() -> None:
    class Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
            return isinstance(m, Branchy) or super().is_leaf_module(m, module_qualified_name)

    result = profile(DataDependent(), torch.randn(2, 3), warmup=0, passes=1, tracer=Tracer())
    assert result.capture.method == "tracer:Tracer"
    assert [n.module for n in result.nodes] == ["lin", "inner"]


def test_not_a_module_is_refused() -> None:
    with pytest.raises(ProfileError, match=r"torch\.nn\.Module"):
        profile(lambda x: x, torch.ones(1))


def test_threads_are_pinned_while_profiling() -> None:
    seen: list[int] = []
    threads_before = torch.get_num_threads()

    class Probe(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(torch.get_num_threads())
            return x

    torch.set_num_threads(2)
    try:
        profile(nn.Sequential(Probe()), torch.ones(1), warmup=0, passes=1, threads=1, leaf_modules=[Probe])
        assert torch.get_num_threads() == 2  # put back afterwards
    finally:
        torch.set_num_threads(threads_before)
    assert set(seen) == {1}


@pytest.mark.parametrize(
    ("threads", "engine", "clock"),
    [
        (1, "interpreter", "thread-cpu"),
        (2, "interpreter", "wall"),
        (1, "compiled", "wall nodes, thread-cpu passes"),
        (2, "compiled", "wall"),
    ],
)
def test_one_thread_on_the_cpu_times_passes_on_its_cpu_clock(threads: int, engine: str, clock: str) -> None:
    """With one intra-op thread every op runs on the calling thread: its CPU time leaves out preemption.
    The compiled engine stamps nodes on the wall clock, whose call costs a tenth of the thread's CPU clock."""
    result = profile(nn.Sequential(nn.ReLU()), torch.ones(2), warmup=0, passes=1, threads=threads, engine=engine)
    assert result.environment.clock == clock
    assert result.environment.engine == engine
    assert result.environment.threads == threads


def test_importing_the_plugin_does_not_import_torch() -> None:
    code = "import sys, pytest_fxprof.plugin, pytest_fxprof; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_profile_uses_device_time() -> None:  # pragma: no cover - runs only with a GPU
    net = Net().cuda()
    result = profile(net, torch.randn(2, 3, 8, 8, device="cuda"), warmup=1, passes=3)
    assert result.environment.device.startswith("cuda:")
    assert all(n.median_ns > 0 for n in result.nodes)


def test_tracing_leaves_no_attributes_on_the_module() -> None:
    class Const(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.fc(x) * torch.tensor([2.0])  # torch.fx parks this constant on the module
            return out

    net = Const()
    before = set(vars(net))
    quick(net, torch.ones(2))
    quick(net, torch.ones(2))
    assert set(vars(net)) == before


def test_tensors_inside_any_container_are_cloned() -> None:
    @dataclasses.dataclass
    class Box:
        t: torch.Tensor

    class InPlaceBox(nn.Module):
        def forward(self, b: Box) -> torch.Tensor:
            return b.t.add_(1)

    x = torch.zeros(2)
    quick(InPlaceBox(), Box(x))
    assert torch.equal(x, torch.zeros(2))


CALLS: list[int] = []


@torch.fx.wrap
def flaky_scale(x: torch.Tensor) -> torch.Tensor:
    """A function node that fails on its eighth call (the second kept pass: the plain calls, 1 thrown away and 3
    timed, the counting pass and the warm-up pass before it), as memory running out would."""
    CALLS.append(1)
    if len(CALLS) == 8:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return x * 2


class FlakyLeaf(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 8:  # as flaky_scale
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return x * 2


class FlakyNet(nn.Module):
    def __init__(self, in_function: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.leaf = FlakyLeaf()
        self.in_function = in_function

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return torch.relu(flaky_scale(y) if self.in_function else self.leaf(y))


@pytest.mark.parametrize("engine", ["compiled", "interpreter"])
@pytest.mark.parametrize(
    ("in_function", "node"), [(False, "leaf (call_module FlakyLeaf in leaf, "), (True, "flaky_scale (call_function ")]
)
def test_a_node_that_fails_in_a_later_pass_is_named_with_advice_that_fits(
    engine: str, in_function: bool, node: str
) -> None:
    CALLS.clear()
    with pytest.raises(ProfileError) as info:
        quick(FlakyNet(in_function), torch.randn(2, 4), engine=engine, leaf_modules=["leaf"], capture="symbolic")
    message = str(info.value)
    first, *rest = message.splitlines()
    assert first.startswith(f"the captured graph of FlakyNet failed in node {node}")
    assert "test_profiler.py:" in first  # its source line
    said, _, where = first.partition(" (at ")
    assert said.endswith("): OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")  # once
    assert "test_profiler.py:" in where  # the line that raised it
    assert "It ran in the passes before this one: it fails only on some calls" in rest[0]
    assert "concrete_args" not in message  # the advice for a branch fixed at trace time is not this one's
    assert isinstance(info.value.__cause__, torch.OutOfMemoryError)  # the original, kept


def traced(module: nn.Module) -> Any:
    return torch.jit.trace(module, torch.randn(2, 4))  # type: ignore[no-untyped-call]


@pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")
@pytest.mark.parametrize("make", [torch.jit.script, traced], ids=["script", "trace"])
def test_a_torchscript_module_is_refused_with_the_fix(make: Any) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with pytest.raises(
        ProfileError, match=r"cannot capture a TorchScript module .*Fix: pass the nn.Module you scripted"
    ):
        quick(make(model), torch.randn(2, 4))


@pytest.mark.parametrize("where", ["module", "input"])
def test_the_meta_device_is_refused_with_the_fix(where: str) -> None:
    model = nn.Linear(4, 4, device="meta" if where == "module" else "cpu")
    x = torch.randn(2, 4, device="meta" if where == "input" else "cpu")
    with pytest.raises(ProfileError, match=r"on the meta device, which holds no data.*Fix: materialise") as info:
        quick(model, x)
    assert "leaf_modules" not in str(info.value)  # not a capture's advice


def test_a_graph_that_fails_where_the_module_runs_gets_a_hint() -> None:
    class Masked(nn.Module):
        def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
            if mask is not None:  # always true for a traced input
                x = x * mask
            return x

    with pytest.raises(ProfileError, match=r"captured graph of Masked failed") as info:
        quick(Masked(), torch.ones(2), capture="symbolic")
    assert "concrete_args" in str(info.value)
    assert info.value.__cause__ is not None


@pytest.mark.parametrize(
    ("off_cpu", "wanted", "chosen"),
    [
        pytest.param([0.0, 0.002, 0.001], 3, [0, 1, 2], id="all-clean"),
        pytest.param([0.0, 0.4, 0.001, 0.0, 0.0], 3, [0, 2, 3], id="a-preempted-pass-is-replaced"),
        pytest.param([0.3, 0.05, 0.5, 0.0, 0.2, 0.6], 3, [1, 3, 4], id="too-few-clean-the-least-disturbed"),
    ],
)
def test_passes_whose_thread_was_preempted_do_not_count(off_cpu: list[float], wanted: int, chosen: list[int]) -> None:
    """Nodes stamped on the wall clock: a pass in which a neighbour had the core would inflate a node."""
    assert chosen_passes(off_cpu, wanted) == chosen
    assert OFF_CPU_LIMIT == 0.01


def test_only_a_time_slice_off_the_cpu_counts_as_preemption() -> None:
    assert off_cpu_share(cpu_ns=9_000, wall_ns=10_000) == 0.0  # 1 us: what reading two clocks costs
    assert off_cpu_share(cpu_ns=2_000_000, wall_ns=4_000_000) == 0.5
    assert off_cpu_share(cpu_ns=0, wall_ns=0) == 0.0


def test_one_entrance_makes_the_program_of_a_forward_and_of_a_training_step() -> None:
    """``measure.program.open_program``: a forward and a training step are kinds of one record that the profiler
    follows, each with its nodes, its engine and its plain call; the module is put back when the stack closes."""
    import contextlib

    from pytest_fxprof.capture.step import Step
    from pytest_fxprof.measure.engine import ClockTimer
    from pytest_fxprof.measure.program import CaptureRequest, ProgramKind, open_program

    model = Net()
    x = torch.randn(2, 3, 8, 8)
    for request, kind in ((CaptureRequest(), ProgramKind.FORWARD), (CaptureRequest(step=Step()), ProgramKind.STEP)):
        with contextlib.ExitStack() as stack:
            program = open_program(
                model,
                (x,),
                {},
                stack,
                request=request,
                threads=1,
                timer=ClockTimer(time.perf_counter_ns),
                engine="compiled",
            )
            assert program.kind == kind
            assert len(program.infos) == len(program.nodes) > 0
            assert program.kernels is None
            assert program.checked
            assert len(program.engine.runners()) == len(program.captured.graphs)
            out = program.plain()()  # the plain call as the user makes it, on fresh inputs
            program.after()
            assert out is not None
        if kind is ProgramKind.STEP:
            assert {info.direction for info in program.infos} >= {"forward", "backward"}
    assert model.training  # put back as it came (Net() is in train mode)


def test_a_forward_that_fails_on_a_later_plain_call_says_so_after_its_capture_ran_it() -> None:
    """The plain calls come first; one that fails there, where the capture then runs the module fine, is named as a
    forward that fails only on some calls, with the fix, and its error is kept."""

    class SecondCallFails(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            if self.calls == 2:
                raise RuntimeError("ran out of something")
            out: torch.Tensor = self.fc(x)
            return out

    with pytest.raises(ProfileError) as info:
        quick(SecondCallFails(), torch.randn(2, 4), leaf_modules=[], capture="auto")
    message = str(info.value)
    assert message.startswith(
        "SecondCallFails failed when called as the test calls it (RuntimeError: ran out of something"
    )
    assert "it fails only on some calls" in message
    assert isinstance(info.value.__cause__, RuntimeError)


def test_each_node_says_the_bytes_of_new_memory_its_outputs_hold() -> None:
    """``NodeStats.allocated``: a new tensor counts its bytes, a view of what the node was handed none, and a
    tensor that lands where a freed one lay counts again (a chain of same-sized temporaries reuses addresses)."""

    class Chain(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for _ in range(4):
                x = (x * 2).view(-1, 64)  # a new 16 KiB tensor, then a view of it
            return x

    result = profile(Chain(), torch.randn(64, 64), warmup=0, passes=1, capture="symbolic")
    by_op = [(n.target.rpartition(".")[2], n.allocated) for n in result.nodes]
    assert [b for op, b in by_op if op == "mul"] == [64 * 64 * 4] * 4
    assert [b for op, b in by_op if op == "view"] == [0] * 4


def test_cyclic_garbage_collection_is_off_while_passes_run_and_back_after() -> None:
    """As ``timeit`` has it: a collection would land on whichever node allocates when it falls due. It runs while the
    capture and the counting pass make and drop their garbage, and is on again after the profile."""
    import gc

    seen: list[bool] = []

    class Probe(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(gc.isenabled())
            return x

    assert gc.isenabled()
    profile(nn.Sequential(Probe()), torch.ones(1), warmup=1, passes=2, leaf_modules=[Probe], capture="symbolic")
    assert gc.isenabled()
    # the plain calls (1 thrown away, 2 timed), the counting pass, the instrumented passes (1 + 2), the fault passes;
    # a pass the machine preempted is measured again, so a loaded machine may add a call to either side
    counting = seen.index(True)
    assert seen.count(True) == 1
    assert counting >= 3
    assert len(seen) - counting - 1 >= 3 + 2
    assert not any(seen[:counting])
    assert not any(seen[counting + 1 :])
