"""The computation fingerprint: what it sees as changed, what it proves unchanged, and how it says the difference.

Each soundness case changes what a measurement would time without changing the graph's structure, and must be
seen; each neutral edit changes the code's text but not its computation, and must be proven the same. Models are
loaded from source files written here, as the same module name at two "revisions", so that only the edit differs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from pytest_fxprof.measure.engine import ClockTimer
from pytest_fxprof.measure.fingerprint import _kernels, fingerprint_of
from pytest_fxprof.measure.opaque import Reader
from pytest_fxprof.measure.program import CaptureRequest, open_program
from pytest_fxprof.records.fingerprint import Fingerprint, changed_modules, changes_text
from pytest_fxprof.records.measurement import Protocol
from pytest_fxprof.store.baseline import entry_from_json, entry_to_json
from tests.test_baseline import make_entry

PROTOCOL = Protocol(warmup=1, passes=3, threads=1, processes=2)


def fingerprint(
    model: nn.Module, *args: Any, capture: str = "auto", protocol: Protocol = PROTOCOL, **request: Any
) -> Fingerprint:
    """The fingerprint of ``model(*args)`` as a profile reads it at capture."""
    with contextlib.ExitStack() as stack:
        program = open_program(
            model,
            args,
            {},
            stack,
            request=CaptureRequest(mode=capture, **request),
            threads=protocol.threads,
            timer=ClockTimer(time.perf_counter_ns),
            engine="compiled",
        )
        return fingerprint_of(program, model, args, {}, protocol=protocol, how=capture)


@contextlib.contextmanager
def revision(tmp_path: Path, name: str, source: str) -> Iterator[Any]:
    """``source`` imported as the module ``userlib`` (as a project's code is at one revision), removed after."""
    path = tmp_path / name / "userlib.py"
    path.parent.mkdir()
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location("userlib", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["userlib"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("userlib", None)


def two_revisions(tmp_path: Path, before: str, after: str, build: str = "Net") -> tuple[Fingerprint, Fingerprint]:
    """The fingerprints of ``userlib.<build>()`` called on one input at two revisions of ``userlib``."""
    x = torch.randn(2, 3, 8, 8)
    out = []
    for name, source in (("old", before), ("new", after)):
        with revision(tmp_path, name, source) as lib:
            model = getattr(lib, build)().eval()
            out.append(fingerprint(model, x, **getattr(lib, "REQUEST", {})))
    return out[0], out[1]


NET = """
import torch
from torch import nn

SCALE = 2.0


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        # the body
        y = self.conv(x)
        z = torch.relu(y)
        return self.head(z) * SCALE
"""


def test_the_same_code_with_unseeded_random_weights_and_inputs_is_proven_the_same() -> None:
    def build() -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(3, 64, 3), nn.BatchNorm2d(64), nn.ReLU(), nn.Flatten(), nn.Linear(64 * 14 * 14, 10)
        )

    a = fingerprint(build().eval(), torch.randn(2, 3, 16, 16))
    b = fingerprint(build().eval(), torch.randn(2, 3, 16, 16))
    assert a.proven
    assert b.proven
    assert a.same_as(b)
    assert b.differences(a) == []


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(("        # the body\n", "        # a comment that says something else\n"), id="comment"),
        pytest.param(
            ("z = torch.relu(y)\n        return self.head(z)", "act = torch.relu(y)\n        return self.head(act)"),
            id="renamed-local",
        ),
        pytest.param(
            (
                "        y = self.conv(x)\n        z = torch.relu(y)\n",
                "        y = self.conv(x)\n\n\n        z = torch.relu(y)  # spaced\n",
            ),
            id="blank-lines",
        ),
    ],
)
def test_a_neutral_edit_is_proven_the_same(tmp_path: Path, edit: tuple[str, str]) -> None:
    old, new = edit
    assert old in NET
    a, b = two_revisions(tmp_path, NET, NET.replace(old, new))
    assert b.same_as(a), b.differences(a)


def test_reordered_independent_lines_and_a_block_moved_into_a_helper_are_proven_the_same(tmp_path: Path) -> None:
    before = """
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.left = nn.Conv2d(3, 4, 1)
            self.right = nn.Conv2d(3, 4, 1)

        def forward(self, x):
            a = self.left(x)
            b = torch.sigmoid(self.right(x))
            return a * b
    """
    after = """
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.left = nn.Conv2d(3, 4, 1)
            self.right = nn.Conv2d(3, 4, 1)

        def gate(self, x):
            return torch.sigmoid(self.right(x))

        def forward(self, x):
            b = self.gate(x)
            a = self.left(x)
            return a * b
    """
    a, b = two_revisions(tmp_path, before, after)
    assert b.same_as(a), b.differences(a)


LEAF = """
import torch
from torch import nn



class Mix(nn.Module):
    def forward(self, x):
        return x * 2


REQUEST = {"leaf_modules": (Mix,)}

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.mix = Mix()

    def forward(self, x):
        return self.mix(self.conv(x))
"""


def test_a_leaf_modules_forward_rewritten_is_seen_and_names_the_module(tmp_path: Path) -> None:
    after = LEAF.replace("return x * 2", "return x * 2 + x.exp() * 0")
    a, b = two_revisions(tmp_path, LEAF, after)
    assert not b.same_as(a)
    assert b.differences(a) == ["module mix: graph changed", "opaque: class userlib.Mix changed"]


WRAPPED = """
import torch
import torch.fx
from torch import nn

FACTOR = 3


@torch.fx.wrap
def scaled(x):
    return x * FACTOR


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return scaled(self.conv(x))
"""


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(("return x * FACTOR", "return torch.sort(x * FACTOR).values"), id="body"),
        pytest.param(("FACTOR = 3", "FACTOR = 4"), id="a-global-it-reads"),
    ],
)
def test_a_wrapped_functions_body_or_what_it_reads_is_seen(tmp_path: Path, edit: tuple[str, str]) -> None:
    a, b = two_revisions(tmp_path, WRAPPED, WRAPPED.replace(*edit))
    assert not b.same_as(a)
    assert "opaque: function userlib.scaled changed" in b.differences(a)


@pytest.mark.parametrize("attribute", ["stride", "groups", "dilation"])
def test_a_convolutions_attribute_under_symbolic_tracing_is_seen(attribute: str) -> None:
    def build() -> nn.Sequential:
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(4, 4, 3, padding=2), nn.ReLU()).eval()

    x = torch.randn(1, 4, 16, 16)
    a = fingerprint(build(), x, capture="symbolic")
    changed = build()
    conv = changed[0]
    assert isinstance(conv, nn.Conv2d)
    if attribute == "groups":
        conv.groups = 2
        conv.weight = nn.Parameter(conv.weight[:, :2].clone())
    else:
        setattr(conv, attribute, (2, 2))
    b = fingerprint(changed, x, capture="symbolic")
    assert not b.same_as(a)
    assert b.differences(a)[0] == "module 0: graph changed"


def test_a_hook_around_a_modules_forward_is_seen_wherever_it_is_registered() -> None:
    """A hook runs in the call as the user makes it though no graph holds it: on a submodule, on a leaf that the
    graph calls whole, or on every module; the same model without it, and a hook removed again, are the same."""

    def build() -> nn.Sequential:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()

    def hook(module: nn.Module, args: Any, output: Any) -> None:
        time.sleep(0)

    x = torch.randn(2, 8)
    plain = fingerprint(build(), x)
    assert fingerprint(build(), x).same_as(plain)
    for register in ("leaf", "model"):
        model = build()
        (model[0] if register == "leaf" else model).register_forward_hook(hook)
        hooked = fingerprint(model, x)
        assert not hooked.same_as(plain), register
        assert any("_forward_hooks" in d for d in hooked.differences(plain)), hooked.differences(plain)
    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        every = fingerprint(build(), x)
    finally:
        handle.remove()
    assert not every.same_as(plain)
    assert fingerprint(build(), x).same_as(plain)


def test_weights_full_of_denormals_are_seen() -> None:
    model = nn.Linear(64, 64).eval()
    x = torch.randn(8, 64)
    a = fingerprint(model, x)
    with torch.no_grad():
        model.weight.mul_(1e-39)  # subnormal in float32
    b = fingerprint(model, x)
    assert not b.same_as(a)
    assert "parameters: weights changed" in b.differences(a)


def test_an_inputs_memory_format_is_seen() -> None:
    model = nn.Conv2d(3, 8, 3).eval()
    x = torch.randn(2, 3, 16, 16)
    a = fingerprint(model, x)
    b = fingerprint(model, x.to(memory_format=torch.channels_last))
    assert b.differences(a) == ["inputs: args[0] changed"]


def test_a_value_dependent_operation_reads_its_inputs_values() -> None:
    class Unique(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            unique: torch.Tensor = torch.unique(x)
            return unique

    x = torch.randint(0, 4, (64,))
    a = fingerprint(Unique(), x)
    assert a.same_as(fingerprint(Unique(), x.clone()))
    assert not fingerprint(Unique(), torch.randint(0, 64, (64,))).same_as(a)


@pytest.mark.parametrize("flag", ["flush-denormal", "matmul-precision", "mkldnn"])
def test_a_torch_global_flag_set_by_the_project_is_seen(flag: str) -> None:
    model = nn.Linear(16, 16).eval()
    x = torch.randn(4, 16)
    precision, mkldnn = torch.get_float32_matmul_precision(), torch.backends.mkldnn.enabled
    a = fingerprint(model, x)
    try:
        if flag == "flush-denormal" and not torch.set_flush_denormal(True):
            pytest.skip("this CPU cannot flush denormals")
        if flag == "matmul-precision":
            torch.set_float32_matmul_precision("medium")
        if flag == "mkldnn":
            torch.backends.mkldnn.enabled = False  # type: ignore[assignment]
        b = fingerprint(model, x)
    finally:
        torch.set_flush_denormal(False)
        torch.set_float32_matmul_precision(precision)
        torch.backends.mkldnn.enabled = mkldnn
    assert b.differences(a)
    assert all(d.startswith("environment:") for d in b.differences(a))


def test_a_thread_count_or_an_environment_variable_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    model = nn.Linear(16, 16).eval()
    x = torch.randn(4, 16)
    a = fingerprint(model, x)
    b = fingerprint(model, x, protocol=Protocol(warmup=1, passes=3, threads=2, processes=2))
    assert "environment: threads 1 intra-op" in changes_text(b.differences(a))
    monkeypatch.setenv("OMP_SCHEDULE", "dynamic")
    c = fingerprint(model, x)
    assert "environment: $OMP_SCHEDULE is new" in c.differences(a)


def test_a_custom_operators_implementation_is_read() -> None:
    @torch.library.custom_op("fxproftest::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    twice.register_fake(torch.empty_like)

    class Net(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            twice: torch.Tensor = torch.ops.fxproftest.twice(x)
            return twice

    x = torch.randn(4)
    a = fingerprint(Net(), x, capture="export")
    assert any(k.startswith("operator") and "fxproftest" in k for k in a.parts["opaque"])
    from torch._library.custom_ops import OPDEFS

    opdef = OPDEFS["fxproftest::twice"]
    original = opdef._init_fn

    def twice_slower(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).exp().log()

    opdef._init_fn = twice_slower
    try:
        b = fingerprint(Net(), x, capture="export")
    finally:
        opdef._init_fn = original
    assert not b.same_as(a)


def test_an_inductor_config_change_or_other_generated_code_is_seen() -> None:
    from torch._inductor import config

    class Graph:
        def __init__(self, code: str) -> None:
            self.compiled = type("Compiled", (), {"source_code": code})()

    class Kernels:
        def __init__(self, code: str) -> None:
            self.graphs = [Graph(code)]

    reader = Reader()
    a = _kernels(reader, Kernels("def call(args): ..."))
    assert a == _kernels(reader, Kernels("def call(args): ..."))
    assert _kernels(reader, Kernels("def call(args): kernel_1(args)"))["code"] != a["code"]
    with config.patch(max_autotune=not config.max_autotune):
        assert _kernels(reader, Kernels("def call(args): ..."))["inductor config"] != a["inductor config"]
    assert reader.unreadable == []


def test_an_opaque_object_it_cannot_read_proves_nothing() -> None:
    class Opaque:
        """A constant torch.fx keeps in the graph whose type fxprof does not know."""

    reader = Reader()
    assert reader.constant(Opaque(), {}) == "?"
    fp = Fingerprint({"graph": {"graphs": "x"}}, unreadable=tuple(reader.unreadable))
    assert not fp.proven
    assert not fp.same_as(fp)
    assert fp.differences(fp)[0].startswith("could not be read: a constant of type")


def test_differences_name_the_deepest_changed_module_and_the_environment_as_it_was() -> None:
    before = Fingerprint(
        {"environment": {"torch": "2.4.0"}, "inputs": {"args[0]": "a"}},
        {"": "1", "layer3": "2", "layer3.0": "3", "layer3.0.conv1": "4", "layer3.1": "5"},
    )
    after = Fingerprint(
        {"environment": {"torch": "2.5.0"}, "inputs": {"args[0]": "b"}},
        {"": "x", "layer3": "y", "layer3.0": "z", "layer3.0.conv1": "w", "layer3.1": "5"},
    )
    assert changed_modules(before.modules, after.modules) == ["layer3.0.conv1"]
    assert after.differences(before) == [
        "module layer3.0.conv1: graph changed",
        "environment: torch 2.4.0 -> 2.5.0",
        "inputs: args[0] changed",
    ]
    assert after.differences(None) == ["no fingerprint to compare with (recorded by an earlier version)"]


def test_a_baseline_keeps_the_fingerprint_and_refuses_a_malformed_one() -> None:
    fp = fingerprint(nn.Linear(4, 4).eval(), torch.randn(2, 4))
    stored = entry_to_json(replace(make_entry(), fingerprint=fp))
    back = entry_from_json(stored)
    assert back.fingerprint is not None
    assert back.fingerprint.same_as(fp)
    assert stored["fingerprint"]["value"] == fp.value
    stored["fingerprint"]["parts"] = {"environment": {"torch": 2}}  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=r"fingerprint\.parts\.environment is not an object of strings"):
        entry_from_json(stored)
    older = entry_to_json(make_entry())
    assert "fingerprint" not in older
    assert entry_from_json(older).fingerprint is None


def test_the_sides_fingerprints_decide_a_test_unchanged_only_where_every_call_is_the_same() -> None:
    from pytest_fxprof.against.proof import same_computation
    from pytest_fxprof.measure.sampling import Child

    fp = fingerprint(nn.Linear(4, 4).eval(), torch.randn(2, 4))
    other = fingerprint(nn.Linear(4, 8).eval(), torch.randn(2, 4))

    def side(calls: dict[str, Fingerprint | None], **data: Any) -> Child:
        written = {k: {"fingerprint": f.to_json() if f is not None else None} for k, f in calls.items()}
        return Child((), 0, {"calls": written, **data}, "")

    same = same_computation(side({"call0": fp}), side({"call0": fp}))
    assert same.unchanged
    assert same.changes == {"call0": []}
    changed = same_computation(side({"call0": fp, "call1": fp}), side({"call0": fp, "call1": other}))
    assert not changed.unchanged
    assert changed.changes["call0"] == []
    assert "module <model>: graph changed" in changed.changes["call1"]
    assert not same_computation(side({"call0": fp}), side({"call0": fp, "extra": fp})).unchanged  # a new call
    assert not same_computation(side({"call0": fp}, foreign=["x.py"]), side({"call0": fp})).unchanged
    assert not same_computation(side({"call0": None}), side({"call0": None})).unchanged  # nothing read
    assert not same_computation(Child((), 0, {"skipped": "no GPU"}, ""), side({"call0": fp})).unchanged
