"""The computation fingerprint of a program: what a measurement of it times, read without timing it.

Owns ``fingerprint_of``, which reads an open ``Program`` (``measure.program``) and what it was handed into a
``records.fingerprint.Fingerprint``:

- the graphs in canonical form: each node's operation, target and constant arguments, wired to the nodes it reads
  (node names, source lines and comments are left out, and independent nodes may come in any order: a node is
  known by what it computes from what). A graph that carries tensor facts (``meta["val"]``, as export and dynamo
  leave) adds each node's shape, dtype, strides and device; a symbolic trace's follow from the rest;
- the parameters, buffers and inputs: each tensor's dtype, shape, strides, device and layout, and the properties of
  its values that change an operator's speed (the share of zeros, of subnormal and of non-finite values, in steps
  of ``measure.opaque.SHARE_STEP``); the values themselves of the inputs and buffers where the graph holds an
  operation whose work follows them (``VALUE_OPS``). A model built from unseeded random weights keeps its fingerprint;
- what the graphs call opaquely: a leaf module's class, its attributes (its submodules' too) and, outside torch,
  its class's source; a Python function's source; a custom operator's implementation (a Python one's source, a
  library's version);
- the environment that changes speed: torch's, Python's and the model's libraries' versions, threads, the
  environment variables of ``ENV_PREFIXES``, torch's global settings (``measure.signature``'s, cuDNN's, whether
  denormals are flushed) and what the test replaced of torch;
- a training step's loss and optimizer (class and hyperparameters), a compiled module's generated code and
  Inductor's configuration, and fxprof's version and measuring protocol.

Values and opaque code are read by ``measure.opaque.Reader``. Each module subtree gets a digest of its own nodes,
wired among themselves (a node read from outside the subtree counts as "from outside"), so that a difference names
the modules whose computation changed. What cannot be read is listed, and makes the fingerprint equal to none. The
fingerprint cannot see Python work outside the graphs, nor the hardware.

Must not import pytest.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from pytest_fxprof.measure.machine import ALLOCATOR_SETTINGS, TORCH_ALLOCATOR_SETTINGS
from pytest_fxprof.measure.opaque import Reader, hooks_of, version_of
from pytest_fxprof.measure.signature import call_inputs, state_of, torch_settings
from pytest_fxprof.records.fingerprint import Fingerprint, digest

if TYPE_CHECKING:
    from pytest_fxprof.capture.step import Step
    from pytest_fxprof.measure.program import Program
    from pytest_fxprof.records.measurement import Protocol

VALUE_OPS = frozenset(
    {
        "nonzero",
        "nonzero_static",
        "unique",
        "_unique",
        "_unique2",
        "unique_consecutive",
        "unique_dim",
        "sort",
        "argsort",
        "msort",
        "topk",
        "kthvalue",
        "masked_select",
        "bincount",
        "histc",
        "histogram",
        "repeat_interleave",
        "multinomial",
        "item",
        "tolist",
        "_local_scalar_dense",
    }
)
"""Operations whose work follows the values they are handed, not only their shapes."""

ENV_PREFIXES = (
    "OMP_",
    "MKL_",
    "KMP_",
    "GOMP_",
    "OPENBLAS_",
    "DNNL_",
    "ONEDNN_",
    "ATEN_",
    "TORCH_",
    "TORCHINDUCTOR_",
    "PYTORCH_",
    "CUDA_",
    "CUBLAS",
    "CUDNN_",
    "NCCL_",
    "LD_PRELOAD",
    *ALLOCATOR_SETTINGS,
)
"""Environment variables whose values change which kernels run, with how many threads, on which allocator (the
allocator's settings as ``machine.allocator_in_use`` reads them; torch's own, ``TORCH_ALLOCATOR_SETTINGS``, by
name)."""


def fingerprint_of(
    program: Program,
    module: torch.nn.Module,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    protocol: Protocol,
    how: str,
    step: Step | None = None,
) -> Fingerprint:
    """The fingerprint of ``program`` (captured from ``module`` called with ``args`` and ``kwargs``; ``step``: the
    training step it runs), measured by ``protocol``; ``how``: the capture and engine asked, as text."""
    reader = Reader()
    graphs = list(program.captured.graphs)
    if program.kernels is not None:
        graphs = [g.gm for g in program.kernels.graphs]
    paths = {id(n): info.module for n, info in zip(program.nodes, program.infos, strict=False)}
    named = dict(module.named_modules())
    value_ops = any(_op_name(n.target) in VALUE_OPS for g in graphs for n in g.graph.nodes)
    parts: dict[str, dict[str, str]] = {
        "environment": _environment(module),
        "protocol": {
            "fxprof": version_of("pytest_fxprof") or "unknown",
            "capture": how,
            "passes": f"{protocol.warmup} warm-up, {protocol.passes} kept, {protocol.threads} thread(s)",
        },
        "inputs": _inputs(reader, args, kwargs, values=value_ops),
        "parameters": {
            "weights": digest(*sorted(reader.tensor(p) for p in module.parameters())),
            "buffers": digest(*sorted(reader.tensor(b, values=value_ops) for b in module.buffers())),
            "train/eval mode": digest(*(f"{path}: {m.training}" for path, m in named.items())),
        },
    }
    modules: dict[str, list[str]] = {}
    whole = []
    for k, gm in enumerate(graphs):
        canon = _Canon(reader, gm, named, paths)
        whole.append(f"graph {k}: " + canon.graph())
        for path, hashes in canon.modules().items():
            modules.setdefault(path, []).extend(hashes)
    parts["graph"] = {"graphs": digest(*whole)}
    for path, m in named.items():  # what runs around a module's forward, in the call as the user makes it
        for key, hooks in hooks_of(vars(m)):
            reader.opaque[f"{key} of {path or '<model>'}"] = ", ".join(reader.function(h) for h in hooks)
    for key, hooks in hooks_of(vars(torch.nn.modules.module)):  # registered for every module
        reader.opaque[f"{key.lstrip('_')} (every module)"] = ", ".join(reader.function(h) for h in hooks)
    parts["opaque"] = dict(sorted(reader.opaque.items()))
    if step is not None:
        parts["step"] = _step(reader, step)
    if program.kernels is not None:
        parts["kernels"] = _kernels(reader, program.kernels)
    return Fingerprint(
        parts=parts,
        modules={path: digest(*sorted(h)) for path, h in modules.items()},
        unreadable=tuple(sorted(set(reader.unreadable))),
    )


class _Canon:
    """One graph in canonical form: each node known by a digest of what it computes from what."""

    def __init__(
        self, reader: Reader, gm: torch.fx.GraphModule, named: Mapping[str, torch.nn.Module], paths: Mapping[int, str]
    ) -> None:
        self.reader = reader
        self.gm = gm
        self.named = named
        self.nodes = list(gm.graph.nodes)
        self.path = {id(n): paths.get(id(n), _path_of(n)) for n in self.nodes}
        self.local = {id(n): self._local(n, i) for i, n in enumerate(self.nodes)}

    def _local(self, n: torch.fx.Node, position: int) -> str:
        """What node ``n`` computes, its inputs left as slots: the operation, target and constants."""
        r = self.reader
        if n.op == "placeholder":
            head = f"input {position}"
        elif n.op == "output":
            head = "output"
        elif n.op == "get_attr":
            head = "tensor " + self._attr(str(n.target))
        elif n.op == "call_module":
            sub = self._submodule(str(n.target))
            head = "module " + (r.module(sub) if sub is not None else "?")
        elif n.op == "call_method":
            head = f"method {n.target}"
        else:
            head = "call " + r.function(n.target)
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            head += f" -> {val.dtype}{list(val.shape)} strides{list(val.stride())} {val.device}"
        return head

    def _attr(self, target: str) -> str:
        try:
            value = _resolve(self.gm, target)
        except AttributeError:
            self.reader.unreadable.append(f"the graph's attribute {target}")
            return "?"
        if isinstance(value, torch.Tensor):
            return self.reader.tensor(value)
        if isinstance(value, torch.nn.Module):
            return self.reader.module(value)
        return self.reader.constant(value, {})

    def _submodule(self, target: str) -> torch.nn.Module | None:
        try:
            return self.gm.get_submodule(target)
        except AttributeError:
            sub = self.named.get(target)
            if sub is None:
                self.reader.unreadable.append(f"the graph's submodule {target}")
            return sub

    def hashes(self, inside: Iterable[torch.fx.Node] | None = None) -> dict[int, str]:
        """Each node's digest, wired to the nodes it reads among ``inside`` (every node: None)."""
        members = None if inside is None else {id(n) for n in inside}
        out: dict[int, str] = {}
        for n in self.nodes:  # a graph's nodes come in an order where each follows what it reads
            if members is not None and id(n) not in members:
                continue
            texts = [self.reader.constant(a, out) for a in n.args]  # ``out`` holds only the nodes inside
            if len(texts) == 2 and not n.kwargs and _commutative(n):  # ``a + b`` computes what ``b + a`` does
                texts.sort()
            kwargs = self.reader.constant(dict(n.kwargs), out)
            out[id(n)] = digest(self.local[id(n)], *texts, kwargs)
        return out

    def graph(self) -> str:
        """The whole graph: the multiset of its nodes' digests and what it returns (order-free)."""
        hashes = self.hashes()
        outputs = [hashes[id(n)] for n in self.nodes if n.op == "output"]
        return digest(*sorted(hashes.values()), "returns", *outputs)

    def modules(self) -> dict[str, list[str]]:
        """Each module subtree's nodes as digests wired among themselves, by module path (the model: "")."""
        by_path: dict[str, list[torch.fx.Node]] = {}
        for n in self.nodes:
            parts = self.path[id(n)].split(".") if self.path[id(n)] else []
            for depth in range(len(parts) + 1):
                by_path.setdefault(".".join(parts[:depth]), []).append(n)
        return {path: list(self.hashes(members).values()) for path, members in by_path.items()}


COMMUTATIVE = frozenset({"add", "mul", "iadd", "imul", "maximum", "minimum", "eq", "ne", "logical_and", "logical_or"})
"""Operations whose two operands may swap places without changing what they compute or what it costs (an
in-place one's first operand is where it writes, but the two tensors it adds are the same)."""


def _commutative(n: torch.fx.Node) -> bool:
    if n.op == "call_method":
        return str(n.target) in {"add", "mul"}
    return n.op == "call_function" and _op_name(n.target) in COMMUTATIVE


def _resolve(gm: torch.fx.GraphModule, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _path_of(n: torch.fx.Node) -> str:
    """A node's module path where the profile does not time it: a call of a submodule or attribute's owner, the
    last entry of dynamo's module stack, else the model."""
    if n.op in ("call_module", "get_attr"):
        return str(n.target) if n.op == "call_module" else str(n.target).rpartition(".")[0]
    stack = n.meta.get("nn_module_stack")
    if isinstance(stack, dict) and stack:
        last = list(stack.values())[-1]
        path = str(last[0]) if isinstance(last, tuple) and last else ""
        return path if _PATH.fullmatch(path) else ""  # dynamo's own spelling (``L['self'].attn``): the model
    return ""


_PATH = re.compile(r"[\w.]*")
"""A module path as ``named_modules`` spells it."""


def _op_name(target: Any) -> str:
    name = getattr(target, "__name__", None) or (target if isinstance(target, str) else "")
    if isinstance(target, torch._ops.OpOverload):
        name = target._schema.name.split("::")[-1]
    return str(name).split(".")[0]


def _inputs(reader: Reader, args: Sequence[Any], kwargs: Mapping[str, Any], *, values: bool) -> dict[str, str]:
    """Each input by where it sits in the call: a tensor's facts, a plain value as itself."""
    out = {}
    for where, value in call_inputs(args, kwargs):
        if isinstance(value, torch.Tensor):
            out[where] = digest(reader.tensor(value, values=values))
        else:
            out[where] = digest(reader.constant(value, {}))
    return out


def _environment(module: torch.nn.Module) -> dict[str, str]:
    """What around the model changes its speed: versions, threads, environment variables, torch's settings."""
    env = {
        "torch": str(torch.__version__),
        "python": sys.version.split()[0],
        "threads": f"{torch.get_num_threads()} intra-op, {torch.get_num_interop_threads()} inter-op",
        "cpu capability": str(torch.backends.cpu.get_cpu_capability()),
        "denormals flushed": _flushed(),
        "cudnn": f"enabled {torch.backends.cudnn.enabled}, benchmark {torch.backends.cudnn.benchmark}, "
        f"deterministic {torch.backends.cudnn.deterministic}, tf32 {torch.backends.cudnn.allow_tf32}",
        "cuda matmul tf32": str(torch.backends.cuda.matmul.allow_tf32),
        **torch_settings(),
    }
    for line in state_of():  # what the test replaced of torch
        key, _, value = line.partition(": ")
        env[f"test set {key}"] = value
    for top in sorted({type(m).__module__.split(".")[0] for m in module.modules()} - {"torch", "__main__"}):
        found = version_of(top)
        if found:
            env[f"library {top}"] = found
    for key, value in sorted(os.environ.items()):
        if key.startswith(ENV_PREFIXES) or key in TORCH_ALLOCATOR_SETTINGS:
            env[f"${key}"] = value
    return env


def _flushed() -> str:
    """Whether the CPU flushes denormals to zero now (``torch.set_flush_denormal``), read from what it computes."""
    tiny = torch.tensor([1e-40], dtype=torch.float32)
    return "yes" if (tiny * 1.0).item() == 0.0 else "no"


def _step(reader: Reader, step: Step) -> dict[str, str]:
    """A training step's loss (its code) and optimizer (its class and hyperparameters)."""
    out = {"loss": "the sum of the outputs"}
    if step.loss_fn is not None:
        loss = step.loss_fn
        out["loss"] = reader.module(loss) if isinstance(loss, torch.nn.Module) else reader.function(loss)
    opt = step.optimizer
    if opt is not None:
        groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
        out["optimizer"] = f"{reader.function(type(opt))} {reader.constant(groups, {})}"
    return out


def _kernels(reader: Reader, kernels: Any) -> dict[str, str]:
    """A compiled module's generated code, each graph's, and Inductor's configuration."""
    codes = []
    for g in kernels.graphs:
        source = getattr(g.compiled, "source_code", None)
        if source is None:
            reader.unreadable.append("the code Inductor generated")
            return {}
        codes.append(source)
    from torch._inductor import config

    settings = sorted((k, v) for k, v in config.get_config_copy().items() if not callable(v))
    return {"code": digest(*codes), "inductor config": digest(*(f"{k}={_setting(v)}" for k, v in settings))}


def _setting(value: Any) -> str:
    """A configuration value as text: a set sorted, a plain value as itself, anything else by its type."""
    if isinstance(value, set | frozenset):
        return repr(sorted(map(str, value)))
    if isinstance(value, bool | int | float | str | type(None) | list | tuple | dict):
        return repr(value)
    return type(value).__qualname__
