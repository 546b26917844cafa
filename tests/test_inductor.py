"""Compiled models timed kernel by kernel (``capture.inductor``): reading Inductor's wrapper, the rewrite that
stamps it, which module a kernel belongs to, refusals, and real compiles through the profiler and the plugin.

The wrapper tests use a wrapper written as Inductor writes one (its ``Runner.call``, provenance comments,
allocations, views and checks between kernels) and run the rewrite on it with fake kernels and a counting clock.
The real compiles assert what the capture names, never how long anything took."""

from __future__ import annotations

import json
import textwrap
from typing import Any, cast

import pytest
import torch

from pytest_fxprof.capture import inductor
from pytest_fxprof.capture.errors import CaptureError, ProfileError
from pytest_fxprof.measure.profiler import profile_module
from pytest_fxprof.records.measurement import KERNEL_OP, Protocol

WRAPPER = textwrap.dedent(
    """
    from torch._inductor.codegen.common import x  # the module's own imports: never run here

    class Runner:
        def __init__(self, partitions):
            self.partitions = partitions

        def call(self, args):
            arg0_1, arg1_1, arg2_1 = args
            args.clear()
            assert_size_stride(arg1_1, (8, 64), (64, 1))
            buf0 = empty_strided_cpu((8, 128), (128, 1), torch.float32)
            # Topologically Sorted Source Nodes: [linear], Original ATen: [aten.t, aten.addmm]
            # [Provenance debug handles] extern_kernels.addmm:1
            extern_kernels.addmm(arg1_1, arg2_1, reinterpret_tensor(arg0_1, (64, 128), (1, 64), 0), out=buf0)
            del arg0_1
            buf1 = buf0; del buf0  # reuse
            # [Provenance debug handles] cpp_fused_gelu_0:2
            cpp_fused_gelu_0(buf1)
            with torch.cuda._DeviceGuard(0):
                torch.cuda.set_device(0)
                stream0 = get_raw_stream(0)
                # [Provenance debug handles] triton_poi_fused_add_1:3
                triton_poi_fused_add_1.run(buf1, 8, stream=stream0)
            torch.ops.aten._assert_tensor_metadata.default(buf1, dtype=torch.float32)
            buf2 = torch.ops.mkldnn._linear_pointwise.default(buf1, arg2_1, None, "none", [], "")
            return (buf2, )

    runner = Runner(partitions=[])
    call = runner.call
    """
)


def test_the_wrappers_kernel_calls_are_read_in_order_with_their_provenance_handles() -> None:
    sites = inductor.kernel_sites(WRAPPER)
    assert [(s.callee, s.handle) for s in sites] == [
        ("extern_kernels.addmm", "extern_kernels.addmm:1"),
        ("cpp_fused_gelu_0", "cpp_fused_gelu_0:2"),
        ("triton_poi_fused_add_1", "triton_poi_fused_add_1:3"),
        ("torch.ops.mkldnn._linear_pointwise.default", ""),
    ]


def test_the_rewritten_wrapper_stamps_before_the_first_kernel_and_after_each_and_returns_the_same() -> None:
    text, count = inductor.instrumented_source(WRAPPER)
    assert count == 4
    ran: list[str] = []
    clock = iter(range(100, 1000, 10))
    stamps: list[int] = []

    def kernel(name: str) -> Any:
        def run(*args: Any, **kwargs: Any) -> str:
            ran.append(name)
            stamps.append(-1)  # where the kernel ran among the stamps
            return "out"

        return run

    class Triton:
        run = staticmethod(kernel("triton"))

    class Ops:
        class aten:  # noqa: N801
            class _assert_tensor_metadata:  # noqa: N801
                default = staticmethod(lambda *a, **k: ran.append("check"))

        class mkldnn:  # noqa: N801 - torch.ops.mkldnn
            class _linear_pointwise:  # noqa: N801
                default = staticmethod(kernel("mkldnn"))

    class Torch:
        ops = Ops
        float32 = "f32"

        class cuda:  # noqa: N801
            class _DeviceGuard:
                def __init__(self, index: int) -> None:
                    pass

                def __enter__(self) -> None:
                    pass

                def __exit__(self, *exc: object) -> None:
                    pass

            @staticmethod
            def set_device(index: int) -> None:
                ran.append("set_device")

    space: dict[str, Any] = {
        "assert_size_stride": lambda *a: ran.append("check"),
        "empty_strided_cpu": lambda *a: "buf",
        "reinterpret_tensor": lambda *a: "view",
        "get_raw_stream": lambda index: 0,
        "extern_kernels": type("E", (), {"addmm": staticmethod(kernel("addmm"))}),
        "cpp_fused_gelu_0": kernel("gelu"),
        "triton_poi_fused_add_1": Triton,
        "torch": Torch,
        "_fxprof_s": stamps,
        "_fxprof_stamp": lambda: next(clock),
    }
    exec(compile(text, "wrapper", "exec"), space)
    out = space["call"](None, [1, 2, 3])
    assert out == ("out",)
    assert ran == ["check", "addmm", "gelu", "set_device", "triton", "check", "mkldnn"]
    # a stamp at the start, then one right after each kernel
    assert stamps == [100, -1, 110, -1, 120, -1, 130, -1, 140]


@pytest.mark.parametrize(
    ("modules", "expected"),
    [
        (["blocks.0.norm"] * 7 + [""], "blocks.0.norm"),  # a residual add fused into the norm: the norm's
        (["blocks.0.fc1", "blocks.0.act"], "blocks.0"),  # half and half: the deepest module holding both
        (["blocks.0.fc1", "blocks.1.fc1"], "blocks"),
        (["a", "b"], ""),
        ([], ""),
        (["", ""], ""),
    ],
)
def test_a_kernel_belongs_to_the_deepest_module_holding_most_of_what_it_fuses(
    modules: list[str], expected: str
) -> None:
    assert inductor.kernel_module(modules) == expected


@pytest.mark.parametrize(
    ("callee", "kind"),
    [
        ("cpp_fused_add_native_layer_norm_12", "cpp_fused_add_native_layer_norm"),
        ("triton_poi_fused_0", "triton_poi_fused"),
        ("extern_kernels.addmm", "extern_kernels.addmm"),
        ("torch.ops.mkldnn._linear_pointwise.default", "mkldnn._linear_pointwise.default"),
    ],
)
def test_a_kernels_kind_drops_the_number_inductor_gives_it(callee: str, kind: str) -> None:
    assert inductor.kernel_kind(callee) == kind


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 32)
        self.norm = torch.nn.LayerNorm(32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.fc1(x))
        out: torch.Tensor = self.norm(self.fc2(h) + x)
        return out


def compiled(module: torch.nn.Module, **options: Any) -> torch.nn.Module:
    """``torch.compile(module)``, typed as the module it wraps (as the fixture takes it)."""
    return cast("torch.nn.Module", torch.compile(module, **options))


class Net(torch.nn.Module):
    def __init__(self, blocks: int = 2) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([Mlp() for _ in range(blocks)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


PROTOCOL = Protocol(warmup=1, passes=3, threads=1, processes=1)


def test_a_module_compiled_with_another_backend_is_refused_naming_the_fix() -> None:
    model = compiled(Net().eval(), backend="eager")
    with pytest.raises(ProfileError, match=r"backend 'eager'.*\n.*Fix: compile with backend='inductor'"):
        profile_module(model, (torch.randn(4, 32),), {}, name="t", protocol=PROTOCOL, measured=False)


def test_a_training_step_of_a_compiled_module_is_refused_naming_the_fix() -> None:
    from pytest_fxprof.capture.step import Step

    model = compiled(Net())
    with pytest.raises(ProfileError, match=r"forward only.*\n.*Fix: .*model._orig_mod"):
        profile_module(model, (torch.randn(4, 32),), {}, name="t", protocol=PROTOCOL, step=Step())


def test_a_compiled_module_is_timed_kernel_by_kernel_each_named_by_its_module_and_line() -> None:
    model = Net().eval()
    optimized = compiled(model)
    profile = profile_module(optimized, (torch.randn(8, 32),), {}, name="t", protocol=PROTOCOL, flops=False)
    assert profile.capture.method == "inductor"
    assert profile.capture.graphs == 1
    infos = [n.info for n in profile.nodes]
    assert infos[0].target == inductor.ENTRY
    assert all(i.op == KERNEL_OP for i in infos)
    modules = {i.module for i in infos}
    # the matmuls are their Linear's; the GELU kernel its block's (functional); the fused add + norm the norm's
    assert {"blocks.0.fc1", "blocks.0.fc2", "blocks.1.fc1", "blocks.1.norm"} <= modules
    for block in ("blocks.0", "blocks.1"):
        assert [i.module for i in infos if i.module.startswith(block)].count(f"{block}.fc1") == 1
    here = "tests/test_inductor.py:"
    assert all(i.source.startswith(here) for i in infos if i.target != inductor.ENTRY)
    assert all(n.median_ns > 0 for n in profile.nodes)
    keys = [i.key for i in infos]
    assert len(set(keys)) == len(keys)
    assert ("blocks.0.norm", "LayerNorm") in profile.capture.classes  # paths are the eager module's
    assert "_orig_mod" not in "".join(modules)
    # the user's compiled module was not the one timed, and still runs as it did
    assert torch.allclose(optimized(torch.ones(2, 32)), model(torch.ones(2, 32)), atol=1e-5)


class Broken(Mlp):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.fc1(x))
        torch._dynamo.graph_break()
        out: torch.Tensor = self.norm(self.fc2(h) + x)
        return out


def test_a_graph_break_is_a_graph_call_of_its_own_whose_entry_sits_in_the_module_it_breaks() -> None:
    model = Net(blocks=2).eval()
    model.blocks[1] = Broken()
    profile = profile_module(compiled(model), (torch.randn(8, 32),), {}, name="t", protocol=PROTOCOL)
    entries = [n.info for n in profile.nodes if n.info.target == inductor.ENTRY]
    assert len(entries) == profile.capture.graphs >= 2
    assert "graph break" in profile.capture.detail
    assert any(e.module == "blocks.1" for e in entries)
    # each block's kernels are its own, even where the blocks share compiled code
    fc1 = [n.info.module for n in profile.nodes if n.info.module.endswith("fc1")]
    assert sorted(fc1) == ["blocks.0.fc1", "blocks.1.fc1"]


def test_an_eager_module_is_compiled_on_request() -> None:
    profile = profile_module(
        Net(blocks=1).eval(), (torch.randn(8, 32),), {}, name="t", protocol=PROTOCOL, capture="inductor"
    )
    assert profile.capture.method == "inductor"
    assert any(n.info.module == "blocks.0.fc1" for n in profile.nodes)


def test_a_pass_that_calls_other_graphs_than_at_capture_is_an_error() -> None:
    kernels = inductor.Kernels(Net(blocks=1), stamp=lambda: 0)
    graph = inductor._Graph(gm=torch.fx.symbolic_trace(Mlp()))
    other = inductor._Graph(gm=graph.gm)
    kernels.instances = [inductor._Instance(graph, graph.gm, "")]
    kernels.order = [0]
    kernels.begin()
    with pytest.raises(ProfileError, match="called another graph than at capture"):
        kernels.enter(other)
    kernels.begin()
    with pytest.raises(ProfileError, match="made 0 of the 1 graph calls"):
        kernels.end()


MODEL = """
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 128)
        self.fc2 = torch.nn.Linear(128, 64)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        return self.fc2(h) + x


def test_compiled(fxprof):
    torch.manual_seed(0)
    model = torch.nn.Sequential(Block(), Block()).eval()
    fxprof(torch.compile(model), torch.randn(16, 64))
"""


def test_a_compiled_model_is_recorded_and_checked_and_a_graph_break_is_named_as_a_graph_change(
    pytester: pytest.Pytester,
) -> None:
    # fresh processes: an in-process run drops the modules a compile imports, and the next would load them twice
    pytester.makepyfile(test_net=MODEL)
    fast = ["--fxprof-warmup=2", "--fxprof-passes=6", "-p", "no:cacheprovider"]
    record = pytester.runpytest_subprocess("--fxprof-update", "--fxprof-processes=2", *fast)
    assert record.ret == pytest.ExitCode.OK, record.stdout.str()
    (path,) = (pytester.path / "baselines").glob("*.json")
    entry = json.loads(path.read_text())["entries"]["call0"]
    assert entry["capture"]["method"] == "inductor"
    modules = {node["module"] for node in entry["nodes"]}
    assert {"0.fc1", "0.fc2", "1.fc1", "1.fc2"} <= modules

    line = "        h = torch.relu(self.fc1(x))\n"
    broken = MODEL.replace(line, line + "        torch._dynamo.graph_break()\n")
    pytester.makepyfile(test_net=broken)
    check = pytester.runpytest_subprocess("--fxprof", "--fxprof-report=report.json", "-W", "ignore", *fast)
    assert check.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), check.stdout.str()
    (profile,) = json.loads((pytester.path / "report.json").read_text())["profiles"]
    added = [node for node in profile["added"] if node["target"] == inductor.ENTRY]
    assert {node["module"] for node in added} >= {"0", "1"}
    check.stdout.fnmatch_lines(["*graph changed (+*, graphs 1 -> *)*"])


class TickingEvent:
    """A device event whose clock moves 1 us at every record: each gap between two stamps is 1000 ns."""

    now = 0

    def __init__(self) -> None:
        self.at = 0

    def record(self) -> None:
        TickingEvent.now += 1000
        self.at = TickingEvent.now

    def elapsed_time(self, end: TickingEvent) -> float:
        return (end.at - self.at) / 1e6  # milliseconds, as torch.cuda.Event says


def test_on_a_device_each_kernel_is_timed_by_the_events_around_it_with_one_sync_per_pass() -> None:
    from pytest_fxprof.measure.engine import DeviceSide, EventTimer, KernelEngine

    syncs: list[int] = []
    side = DeviceSide(TickingEvent, lambda: syncs.append(1), lambda: 0, lambda: 0, lambda: None)
    timer = EventTimer(side, memory=False)
    with torch.no_grad():
        kernels = inductor.capture(compiled(Net(blocks=1).eval()), (torch.randn(4, 32),), {}, timer.stamp)
        engine = KernelEngine(len(kernels.infos), timer, kernels.calls)
        for _ in range(2):
            engine.begin_pass()
            with inductor.passes(kernels, timed=True):
                kernels.begin()
                kernels(torch.randn(4, 32))
                kernels.end()
            times = engine.end_pass()
            assert times.node_ns == [1000] * len(kernels.infos)
            assert times.host_ns is not None
            assert len(times.host_ns) == len(kernels.infos)
    assert len(syncs) == 2


def test_a_graph_inductor_left_uncompiled_has_no_nodes_and_its_time_goes_to_the_next_entry() -> None:
    clock = iter(range(0, 10_000, 100))
    kernels = inductor.Kernels(Net(blocks=1), stamp=lambda: next(clock))
    gm = torch.fx.symbolic_trace(Mlp())
    plain = inductor._Graph(gm=gm)  # no CompiledFxGraph: no wrapper, no stamps
    timed = inductor._Graph(gm=gm, compiled=object(), sites=[inductor.KernelSite(1, "cpp_fused_relu_0")])
    kernels.instances = [inductor._Instance(plain, gm, ""), inductor._Instance(timed, gm, "fc1")]
    kernels.order = [0, 1]
    kernels.infos = inductor._describe(kernels)
    assert [i.target for i in kernels.infos] == [inductor.ENTRY, "cpp_fused_relu"]
    kernels.timed = True
    kernels.begin()
    kernels.enter(plain)
    kernels.enter(timed)
    kernels.stamps += [next(clock), next(clock)]  # the timed graph's wrapper: its start, its kernel
    kernels.end()
    assert kernels.calls == [([0, 1], [0, 100, 200])]


def test_kernels_make_module_pattern_and_kind_aggregates_as_graph_nodes_do() -> None:
    from pytest_fxprof.judge.aggregates import plan
    from pytest_fxprof.records.measurement import NodeInfo, node_key
    from pytest_fxprof.records.verdicts import Kind

    def kernel(module: str, kind: str) -> NodeInfo:
        return NodeInfo(node_key(KERNEL_OP, module, kind, 0), kind, KERNEL_OP, kind, module)

    nodes = [
        kernel(f"h.{i}.mlp{part}", kind)
        for i in (0, 1)
        for part, kind in ((".fc", "extern_kernels.addmm"), ("", "cpp_fused_gelu"), (".proj", "extern_kernels.addmm"))
    ]
    nodes += [kernel(f"h.{i}.attn", "cpp_fused__softmax") for i in (0, 1)]
    groups = {(g.kind, g.path) for g in plan(nodes, nodes, [(i, i) for i in range(len(nodes))])}
    assert {(Kind.MODULE, "h.0.mlp"), (Kind.PATTERN, "h.*.mlp"), (Kind.OP, "extern_kernels.addmm")} <= groups


def test_leaf_modules_with_a_compiled_module_are_refused_naming_the_fix() -> None:
    model = compiled(Net().eval())
    with pytest.raises(ProfileError, match=r"leaf_modules= and tracer=.*\n.*Fix: leave them out"):
        profile_module(model, (torch.randn(4, 32),), {}, name="t", protocol=PROTOCOL, leaf_modules=["blocks.0"])


def test_a_graph_entry_belongs_to_the_deeper_of_the_modules_it_leaves_and_enters() -> None:
    # block 0: its graph, the MLP's two graphs around a graph break, the block resuming; then block 1
    # (the first call's entry is the way into the model: the root's, whichever frame makes it)
    owners = ["h.0", "h.0.mlp", "h.0.mlp", "h.0", "h.1"]
    order = [0, 1, 2, 3, 4]
    assert inductor.entry_modules(order, owners) == ["", "h.0.mlp", "h.0.mlp", "h.0.mlp", "h"]
    # from one block to the next: the code of the module that holds both
    assert inductor.entry_modules([0, 1], ["blocks.0", "blocks.1"]) == ["", "blocks"]
    assert inductor.entry_modules([0, 1], ["a.x", "b"]) == ["", ""]
    # a graph called again from the same place keeps the module of its first call
    assert inductor.entry_modules([0, 1, 0], ["", "a"]) == ["", "a"]
    # the model's own frame resuming after a block's graph: the block's
    assert inductor.entry_modules([0, 1, 2], ["", "h.3", ""]) == ["", "h.3", "h.3"]


def test_profiling_an_eager_module_leaves_torchs_compiler_stack_unimported() -> None:
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from pytest_fxprof.measure.profiler import profile_module\n"
        "from pytest_fxprof.records.measurement import Protocol\n"
        "model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())\n"
        "profile_module(model, (torch.randn(2, 4),), {}, name='t', protocol=Protocol(1, 1, 1, 1), measured=False,\n"
        "               capture='symbolic')\n"
        "print(sorted(m for m in ('torch._inductor', 'torch._dynamo', 'sympy') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_users_mode_options_and_fullgraph_are_the_ones_compiled_with() -> None:
    model = compiled(Net().eval(), mode="max-autotune-no-cudagraphs", fullgraph=True, dynamic=False)
    kernels = inductor.Kernels(model, stamp=lambda: 0)
    assert getattr(kernels.backend.user, "compiler_name", None) == "inductor"
    assert getattr(kernels.backend.user, "config", {}).get("max_autotune") is True
    assert kernels.options == {"fullgraph": True, "dynamic": False}
    assert kernels.module is model._orig_mod
    # an eager module asked for with capture="inductor": Inductor with its defaults
    eager = inductor.Kernels(Net().eval(), stamp=lambda: 0)
    assert eager.options == {"fullgraph": False, "dynamic": False}


class Counting(torch.nn.Module):
    """A forward that reads a Python counter it bumps: dynamo guards on the value, so every call recompiles."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        out: torch.Tensor = self.fc(x) * self.calls
        return out


def test_a_model_that_recompiles_on_every_call_is_an_error_naming_dynamos_reason() -> None:
    with pytest.raises(ProfileError, match=r"would recompile Counting for this pass: .*calls.*\n.*Fix: "):
        profile_module(compiled(Counting()), (torch.randn(2, 8),), {}, name="t", protocol=PROTOCOL)


class Caching(torch.nn.Module):
    """A forward that fills a cache on its first call (as timm's EfficientViT caches its attention biases): the
    second call takes the other path and compiles again, then every call is the same."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.cache: dict[str, torch.Tensor] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if "bias" not in self.cache:
            self.cache["bias"] = torch.ones(8)
        out: torch.Tensor = self.fc(x) + self.cache["bias"]
        return out


def test_a_model_that_compiles_again_on_its_second_call_is_timed_as_it_settles() -> None:
    profile = profile_module(compiled(Caching()), (torch.randn(2, 8),), {}, name="t", protocol=PROTOCOL)
    assert profile.capture.graphs == 1
    assert "1 compiled graph," in profile.capture.detail  # the settled call's graph only
    assert [n.info.module for n in profile.nodes if n.info.target != inductor.ENTRY] == ["fc", ""]
    assert all(n.median_ns > 0 for n in profile.nodes)


def test_a_wrapper_that_runs_kernels_in_a_branch_is_refused_naming_the_fix() -> None:
    branching = WRAPPER.replace(
        "        cpp_fused_gelu_0(buf1)\n",
        "        if arg0_1:\n            cpp_fused_gelu_0(buf1)\n",
    )
    assert branching != WRAPPER
    with pytest.raises(CaptureError, match=r"kernels in a if statement.*\n.*Fix: .*capture='auto'"):
        inductor.kernel_sites(branching)


def test_an_error_of_fxprofs_own_raised_inside_the_compile_is_the_one_shown() -> None:
    ours = CaptureError("what went wrong\n  Fix: what to do")
    wrapped = RuntimeError("backend='backend' raised: ...")
    wrapped.__cause__ = ValueError("in between")
    wrapped.__cause__.__context__ = ours
    assert inductor._ours(wrapped) is ours
    assert inductor._ours(RuntimeError("torch's own")) is None


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.relu(self.fc(x))
        return out


def test_profiling_a_class_again_reuses_its_compile_keeps_no_model_alive_and_leaves_the_users_compiles_alone() -> None:
    import gc
    import weakref

    from torch._dynamo.utils import counters

    models = [Tiny().eval() for _ in range(10)]
    alive = [weakref.ref(m) for m in models]
    details = []
    for _ in range(len(models)):
        profile = profile_module(compiled(models.pop()), (torch.randn(4, 16),), {}, name="t", protocol=PROTOCOL)
        details.append(profile.capture.detail)
        del profile
    gc.collect()
    assert not [ref for ref in alive if ref() is not None]  # dynamo's cache holds none of the profiled models
    # the later profiles reuse the compile of the first (more than dynamo's default limit of 8 would allow otherwise)
    assert all(d.endswith("compiled by an earlier profile of this model in this process") for d in details[1:])
    # and the user's own compile of the class afterwards is compiled, not run eagerly for a limit that was hit
    before = counters["stats"]["unique_graphs"]
    mine = compiled(Tiny().eval())
    mine(torch.randn(4, 16))
    assert counters["stats"]["unique_graphs"] == before + 1


def test_a_module_compiled_in_place_is_timed_as_compiled_code_and_keeps_its_compiled_call() -> None:
    model = Tiny().eval()
    model.compile()
    impl = model._compiled_call_impl
    profile = profile_module(model, (torch.randn(4, 16),), {}, name="t", protocol=PROTOCOL)
    assert profile.capture.method == "inductor"
    assert [n.info.module for n in profile.nodes if n.info.target != inductor.ENTRY] == ["fc", ""]
    assert model._compiled_call_impl is impl


def test_options_that_leave_the_python_wrapper_out_are_turned_off_while_profiling_and_said_so() -> None:
    model = compiled(Tiny().eval(), options={"cpp_wrapper": True})
    profile = profile_module(model, (torch.randn(4, 16),), {}, name="t", protocol=PROTOCOL)
    assert profile.capture.detail.endswith("the C++ wrapper off while profiling")
    assert any(n.info.module == "fc" for n in profile.nodes)
    user: Any = getattr(model, "dynamo_ctx").callback  # noqa: B009 - typed as a module, it is dynamo's wrapper
    while hasattr(user, "_torchdynamo_orig_backend"):
        user = user._torchdynamo_orig_backend
    assert user.config["cpp_wrapper"] is True  # the user's compile is left as they set it
    reduce = inductor.Kernels(compiled(Tiny().eval(), mode="reduce-overhead"), stamp=lambda: 0)
    assert reduce.off == ("CUDA graphs",)
    assert getattr(reduce.backend.user, "config", {})["triton.cudagraphs"] is False
