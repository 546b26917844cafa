"""Does the computation fingerprint see every change that alters speed, and prove every neutral edit the same?

    .venv/bin/python bench/fingerprint_soundness.py --out bench/fingerprint_soundness.json

Two parts, in this process, no pytest, nothing timed:

* **Real source edits**: every change and neutral edit of ``bench/code_changes.py`` (GPT-style, transformers'
  BERT, timm's ConvNeXt, torchvision's ResNet, vit-pytorch's CaiT and CCT: einops), applied to the installed
  source and loaded under one module name, as a revision of the project would be. The base is built twice, the
  second time with every weight tensor's values shuffled (random weights drawn again: must be the same), and each
  change and neutral edit once, its weights shuffled too.
  Each is captured as the gate captures it (``capture="auto"``) and fingerprinted. A change must differ (and the
  modules the difference names are kept, beside the module the change should blame); a neutral edit must not.
* **Speed without structure**: changes that alter speed without altering the graph's structure (a leaf module's
  forward rewritten, a wrapped function's body, a constant that code reads, a custom operator's implementation, a
  convolution's stride or groups under symbolic tracing, weights full of denormals, an input's memory format, the
  measurement's thread count, a torch flag set in a ``conftest.py`` or a library's ``__init__``, an environment
  variable, a
  hook that ``slow_down`` installs, an Inductor configuration change to a compiled model) must differ; and more
  neutral edits (a comment, a renamed local, independent lines reordered, a block moved into a helper, operands
  of an addition swapped) must not.

Prints one line per case and writes them, with the machine and versions, to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fnmatch
import importlib.util
import json
import platform
import sys
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import code_changes  # noqa: E402 (this script's folder, put on sys.path above)
import torch  # noqa: E402
from torch import nn  # noqa: E402

from pytest_fxprof.measure.engine import ClockTimer  # noqa: E402
from pytest_fxprof.measure.fingerprint import fingerprint_of  # noqa: E402
from pytest_fxprof.measure.program import CaptureRequest, open_program  # noqa: E402
from pytest_fxprof.records.fingerprint import Fingerprint  # noqa: E402
from pytest_fxprof.records.measurement import Protocol  # noqa: E402

PROTOCOL = Protocol(warmup=5, passes=20, threads=1, processes=5)


OPERATIONS: dict[str, Counter[str]] = {}
"""The operations (``NodeInfo.label``) each fingerprint's capture timed, by the fingerprint's value: what the
code-change rule of stored baselines compares (``records.verdicts.operations_changed``)."""


def fingerprint(model: nn.Module, args: tuple[Any, ...], protocol: Protocol = PROTOCOL, **request: Any) -> Fingerprint:
    with contextlib.ExitStack() as stack:
        program = open_program(
            model,
            args,
            {},
            stack,
            request=CaptureRequest(**request),
            threads=protocol.threads,
            timer=ClockTimer(time.perf_counter_ns),
            engine="compiled",
        )
        got = fingerprint_of(program, model, args, {}, protocol=protocol, how=str(request.get("mode", "auto")))
        OPERATIONS[got.value] = Counter(i.label for i in program.infos)
        return got


def verdict(name: str, kind: str, base: Fingerprint, other: Fingerprint, **extra: Any) -> dict[str, Any]:
    differs = not other.same_as(base)
    right = differs if kind == "change" else not differs
    differences = other.differences(base)
    expected = extra.get("expected")
    if base.value in OPERATIONS and other.value in OPERATIONS:  # what the code-change rule would say of it
        extra["operations_changed"] = OPERATIONS[base.value] != OPERATIONS[other.value]
    if expected:  # every module the difference names is the one the change should blame, or in it
        named = [
            d.removeprefix("module ").removesuffix(": graph changed") for d in differences if d.startswith("module ")
        ]
        extra["named"] = named
        inside = [fnmatch.fnmatch(m, expected) or fnmatch.fnmatch(m, expected + ".*") for m in named]
        extra["named_any"] = any(inside)  # the module it should blame is among those named
        extra["named_within"] = bool(named) and all(inside)
    print(
        f"{'ok ' if right else 'BAD'} {kind:8} {name:34} {'changed' if differs else 'unchanged':9} "
        f"{'; '.join(differences[:3])[:110]}",
        flush=True,
    )
    return {"case": name, "kind": kind, "differs": differs, "right": right, "differences": differences[:12], **extra}


# Real source edits ------------------------------------------------------------------------------------------


def real_edits(families: list[str]) -> list[dict[str, Any]]:
    out = []
    with tempfile.TemporaryDirectory(prefix="fxprof-fingerprint-") as tmp:
        work = Path(tmp)
        builder = work / "build_zoo.py"
        builder.write_text(code_changes.BUILD.format(modules={}), encoding="utf-8")
        make = code_changes.load(builder, "fingerprint_build").make
        for family_name in families:
            family = code_changes.FAMILIES[family_name]
            try:
                text, where = code_changes.installed_source(family)
            except code_changes.EditError as exc:
                print(f"skip {family_name}: {exc}")
                continue
            name = f"zoo_{family.model}"  # one module name for every revision of the source

            base = fingerprint(*_as_args(*built(make, work, family.model, name, text, 0, 0)))
            again = fingerprint(*_as_args(*built(make, work, family.model, name, text, 1, 1)))
            out.append(verdict(f"{family.model}: weights drawn again", "neutral", base, again, family=family_name))
            for n, c in enumerate((c for c in code_changes.CHANGES if c.family == family_name), 2):
                edited = code_changes.apply(text, c.edits, f"{where} ({c.name})")
                got = fingerprint(*_as_args(*built(make, work, family.model, name, edited, 2, n)))
                out.append(verdict(c.name, c.kind, base, got, family=family_name, expected=c.module))
    return out


def built(  # noqa: PLR0917 - a bench's helper, called in three places alike
    make: Any, work: Path, model: str, name: str, source: str, seed: int, n: int
) -> tuple[nn.Module, Any]:
    """``model`` built by ``make`` from ``source`` loaded as the module ``name``; with ``seed``, each weight
    tensor's values shuffled: the same values in another order, as weights drawn again."""
    path = work / f"{model}_{n}" / f"{name}.py"
    path.parent.mkdir()
    path.write_text(source, encoding="utf-8")
    built_model, x = make(model, code_changes.load(path, name))
    if seed:
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in built_model.parameters():
                flat = p.view(-1)
                flat.copy_(flat[torch.randperm(flat.numel(), generator=generator)])
    return built_model, x


def _as_args(model: nn.Module, x: Any) -> tuple[nn.Module, tuple[Any, ...]]:
    return model, (x,)


# Speed without structure ------------------------------------------------------------------------------------

NET = """
import torch
import torch.fx
from torch import nn

FACTOR = 2.0


@torch.fx.wrap
def scaled(x):
    return x * FACTOR


class Mix(nn.Module):
    def forward(self, x):
        return torch.relu(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.left = nn.Conv2d(8, 8, 3, padding=1)
        self.right = nn.Conv2d(8, 8, 3, padding=1)
        self.mix = Mix()

    def forward(self, x):
        # the block
        a = self.left(x)
        b = torch.sigmoid(self.right(x))
        return scaled(self.mix(a + b))


REQUEST = {"leaf_modules": (Mix,)}
"""

EDITS: list[tuple[str, str, str, str]] = [
    ("leaf forward rewritten", "change", "return torch.relu(x)", "return torch.relu(x) + torch.exp(x) * 0"),
    ("wrapped function's body", "change", "return x * FACTOR", "return torch.sort(x * FACTOR, dim=-1).values"),
    ("a constant the code reads", "change", "FACTOR = 2.0", "FACTOR = 3.0"),
    ("comment", "neutral", "        # the block\n", "        # both branches, then the mix\n"),
    (
        "renamed local",
        "neutral",
        "b = torch.sigmoid(self.right(x))\n        return scaled(self.mix(a + b))",
        "gate = torch.sigmoid(self.right(x))\n        return scaled(self.mix(a + gate))",
    ),
    (
        "independent lines reordered",
        "neutral",
        "        a = self.left(x)\n        b = torch.sigmoid(self.right(x))\n",
        "        b = torch.sigmoid(self.right(x))\n        a = self.left(x)\n",
    ),
    ("operands of an addition swapped", "neutral", "self.mix(a + b)", "self.mix(b + a)"),
    (
        "a block moved into a helper",
        "neutral",
        "    def forward(self, x):\n        # the block\n        a = self.left(x)\n"
        "        b = torch.sigmoid(self.right(x))\n",
        "    def gate(self, x):\n        return torch.sigmoid(self.right(x))\n\n"
        "    def forward(self, x):\n        # the block\n        a = self.left(x)\n        b = self.gate(x)\n",
    ),
]


@contextlib.contextmanager
def revision(work: Path, tag: str, source: str) -> Iterator[Any]:
    path = work / tag / "userlib.py"
    path.parent.mkdir()
    path.write_text(textwrap.dedent(source), encoding="utf-8")
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


def of_source(work: Path, tag: str, source: str, x: torch.Tensor) -> Fingerprint:
    with revision(work, tag, source) as lib:
        return fingerprint(lib.Net().eval(), (x,), **lib.REQUEST)


@contextlib.contextmanager
def restored() -> Iterator[None]:
    """Torch's global flags and threads as they were, after a case that changes them."""
    state = (
        torch.get_num_threads(),
        torch.get_float32_matmul_precision(),
        torch.backends.mkldnn.enabled,
    )
    try:
        yield
    finally:
        torch.set_num_threads(state[0])
        torch.set_float32_matmul_precision(state[1])
        torch.backends.mkldnn.enabled = state[2]
        torch.set_flush_denormal(False)


def structure(compiled: bool) -> list[dict[str, Any]]:
    out = []
    x = torch.randn(2, 8, 16, 16)
    with tempfile.TemporaryDirectory(prefix="fxprof-fingerprint-") as tmp:
        work = Path(tmp)
        base = of_source(work, "base", NET, x)
        out.append(verdict("the same source again", "neutral", base, of_source(work, "again", NET, x.clone())))
        for n, (name, kind, old, new) in enumerate(EDITS):
            assert NET.count(old) == 1, name
            out.append(verdict(name, kind, base, of_source(work, f"edit{n}", NET.replace(old, new), x)))

        def conv(**changes: Any) -> nn.Sequential:
            torch.manual_seed(0)
            layer = nn.Conv2d(8, 8, 3, padding=2)
            for k, v in changes.items():
                setattr(layer, k, v)
            if changes.get("groups"):
                layer.weight = nn.Parameter(layer.weight[:, : 8 // changes["groups"]].clone())
            return nn.Sequential(layer, nn.ReLU()).eval()

        plain = fingerprint(conv(), (x,), mode="symbolic")
        out.append(
            verdict("conv stride (symbolic)", "change", plain, fingerprint(conv(stride=(2, 2)), (x,), mode="symbolic"))
        )
        out.append(
            verdict("conv groups (symbolic)", "change", plain, fingerprint(conv(groups=2), (x,), mode="symbolic"))
        )
        denormal = conv()
        first = denormal[0]
        assert isinstance(first, nn.Conv2d)
        with torch.no_grad():
            first.weight.mul_(1e-39)
        out.append(verdict("weights full of denormals", "change", plain, fingerprint(denormal, (x,), mode="symbolic")))
        out.append(
            verdict(
                "input channels_last",
                "change",
                plain,
                fingerprint(conv(), (x.to(memory_format=torch.channels_last),), mode="symbolic"),
            )
        )
        out.append(
            verdict("thread count", "change", plain, fingerprint(conv(), (x,), Protocol(5, 20, 2, 5), mode="symbolic"))
        )
        flags: list[tuple[str, Callable[[], object]]] = [
            ("flag in conftest: flush denormal", lambda: torch.set_flush_denormal(True)),
            ("flag in __init__: matmul precision", lambda: torch.set_float32_matmul_precision("medium")),
            ("flag in conftest: mkldnn off", lambda: setattr(torch.backends.mkldnn, "enabled", False)),
        ]
        for name, set_flag in flags:
            with restored():
                if set_flag() is False:  # a CPU that cannot flush denormals
                    continue
                out.append(verdict(name, "change", plain, fingerprint(conv(), (x,), mode="symbolic")))
        with restored():
            import os

            os.environ["OMP_SCHEDULE"] = "static"
            try:
                out.append(
                    verdict(
                        "environment variable OMP_SCHEDULE", "change", plain, fingerprint(conv(), (x,), mode="symbolic")
                    )
                )
            finally:
                del os.environ["OMP_SCHEDULE"]
        from pytest_fxprof import slow_down

        hooked = conv()
        slow_down(hooked, "0", 0.25)
        out.append(verdict("slow_down hook", "change", plain, fingerprint(hooked, (x,), mode="symbolic")))
        out.append(custom_op(x))
        if compiled:
            out.append(inductor_config(x))
    return out


def custom_op(x: torch.Tensor) -> dict[str, Any]:
    from torch._library.custom_ops import OPDEFS

    @torch.library.custom_op("fxprofbench::twice", mutates_args=())
    def twice(t: torch.Tensor) -> torch.Tensor:
        return t * 2

    twice.register_fake(torch.empty_like)

    class Net(nn.Module):
        def forward(self, t: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = torch.ops.fxprofbench.twice(t)
            return out

    base = fingerprint(Net(), (x,), mode="export")
    opdef = OPDEFS["fxprofbench::twice"]
    original = opdef._init_fn

    def twice_slower(t: torch.Tensor) -> torch.Tensor:
        return (t * 2).exp().log()

    opdef._init_fn = twice_slower
    try:
        return verdict("custom op's implementation", "change", base, fingerprint(Net(), (x,), mode="export"))
    finally:
        opdef._init_fn = original


def inductor_config(x: torch.Tensor) -> dict[str, Any]:
    from torch._inductor import config

    def compiled() -> nn.Module:
        torch.manual_seed(0)
        model: nn.Module = torch.compile(nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.GELU()).eval())  # type: ignore[assignment]
        return model

    base = fingerprint(compiled(), (x,))
    with config.patch(epilogue_fusion=not config.epilogue_fusion):
        got = fingerprint(compiled(), (x,))
    return verdict("Inductor config (epilogue_fusion)", "change", base, got)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--families", default=",".join(code_changes.FAMILIES))
    parser.add_argument("--no-compiled", action="store_true", help="leave the Inductor case out (it compiles)")
    ns = parser.parse_args()
    torch.set_num_threads(1)
    began = time.monotonic()
    cases = structure(compiled=not ns.no_compiled)
    cases += real_edits([f for f in ns.families.split(",") if f])
    wrong = [c["case"] for c in cases if not c["right"]]
    changes = [c for c in cases if c["kind"] == "change"]
    neutral = [c for c in cases if c["kind"] == "neutral"]
    real = [c for c in changes if "expected" in c]
    print(
        f"the code-change rule (operations added or removed) on the {len(real)} real changes: "
        f"{sum(c.get('operations_changed', False) for c in real)} changed; the fingerprint: "
        f"{sum(c['differs'] for c in real)}; only the fingerprint: "
        f"{', '.join(c['case'] for c in real if c['differs'] and not c.get('operations_changed')) or 'none'}"
    )
    print(
        f"\n{sum(c['differs'] for c in changes)}/{len(changes)} changes seen as changed, "
        f"{sum(not c['differs'] for c in neutral)}/{len(neutral)} neutral edits proven unchanged; "
        f"of {sum('expected' in c for c in changes)} real changes, {sum(c.get('named_any', False) for c in changes)} "
        f"name the module they should blame, {sum(c.get('named_within', False) for c in changes)} only modules in it; "
        f"{time.monotonic() - began:.0f} s" + (f"; WRONG: {', '.join(wrong)}" if wrong else "")
    )
    ns.out.write_text(
        json.dumps(
            {
                "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "machine": f"{platform.processor() or platform.machine()}, {platform.platform()}",
                "torch": torch.__version__,
                "command": " ".join(sys.argv),
                "cases": cases,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
