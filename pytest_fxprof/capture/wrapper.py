"""Inductor's Python wrapper read and rewritten: the kernel calls of its ``call`` function (``kernel_sites``), the
same function stamping the clock after every kernel (``instrumented_source``), and what a kernel computes
(``kernel_kind``). Plain source text: ``capture.inductor`` compiles and runs it.

Must not import pytest.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pytest_fxprof.capture.errors import CaptureError

BOOKKEEPING = frozenset(
    {
        "empty_strided_cpu",
        "empty_strided_cuda",
        "empty_strided",
        "empty_strided_xpu",
        "empty_strided_mps",
        "reinterpret_tensor",
        "alloc_from_pool",
        "run_intermediate_hooks",
        "get_raw_stream",
        "check_memory_format",
        "clear",
        "as_strided",
        "set_device",
        "_get_stream_by_index",
    }
)
"""Calls in Inductor's wrapper that allocate, view, check or bookkeep: not kernels (nor is any call whose name, or
a part of it, starts with ``assert``). Their time counts with the kernel after them."""


DEVICE_MODULES = frozenset({"cuda", "xpu", "mps", "mtia"})
"""``torch.cuda.set_device(...)`` and its kin in the wrapper (one inside every device guard): bookkeeping too."""

_HANDLE = re.compile(r"\[Provenance debug handles\]\s+(\S+:\d+)")
_NUMBERED = re.compile(r"_\d+$")


def _bookkeeping(part: str) -> bool:
    return part in BOOKKEEPING or part.lstrip("_").startswith("assert")


def _device_call(callee: str) -> bool:
    parts = callee.split(".")
    return len(parts) > 2 and parts[0] == "torch" and parts[1] in DEVICE_MODULES


@dataclass
class KernelSite:
    """One kernel call of a compiled graph's wrapper: where it stands and what it runs."""

    line: int
    """Line of the call in the wrapper's source (1-based)."""
    callee: str
    """The kernel's name (``cpp_fused_gelu_0``) or extern call (``extern_kernels.addmm``)."""
    handle: str = ""
    """Inductor's provenance handle for it (``cpp_fused_gelu_0:2``), where the wrapper names one."""


def kernel_sites(source: str) -> list[KernelSite]:
    """The kernel calls of ``source``'s ``call`` function, in order (its bookkeeping calls left out)."""
    fn = _call_function(ast.parse(source))
    lines = source.splitlines()
    _straight(fn, lines)
    return [site for stmt in _statements(fn.body) if (site := _site(stmt, lines)) is not None]


def _straight(fn: ast.FunctionDef, lines: Sequence[str]) -> None:
    """Refuse a wrapper that runs kernels inside a branch, a loop or a ``try`` (``torch.cond``, a while loop
    compiled whole): a pass would stamp another number of kernels than the capture saw."""
    for stmt in _statements(fn.body):
        if isinstance(stmt, ast.If | ast.For | ast.While | ast.Try | ast.Match):
            inner = [s for s in ast.walk(stmt) if isinstance(s, ast.stmt) and s is not stmt and _site(s, lines)]
            if inner:
                raise CaptureError(
                    f"Inductor's code for this model runs kernels in a {type(stmt).__name__.lower()} statement "
                    f"(line {stmt.lineno} of its wrapper: a torch.cond or a loop compiled whole), which fxprof cannot "
                    "time kernel by kernel: a pass would run another set of kernels than the capture saw.\n"
                    "  Fix: hand the fixture the eager module (capture='auto') to time its operations one by one."
                )


def instrumented_source(source: str) -> tuple[str, int]:
    """``source``'s ``call`` function alone, rewritten to append a stamp (``_fxprof_s.append(_fxprof_stamp())``, names
    looked up in the globals it runs with) at its start and after every kernel; and the number of kernels stamped."""
    tree = ast.parse(source)
    fn = _call_function(tree)
    lines = source.splitlines()
    count = 0

    def stamp() -> ast.stmt:
        return ast.parse("_fxprof_s.append(_fxprof_stamp())").body[0]

    def rewrite(body: list[ast.stmt]) -> list[ast.stmt]:
        nonlocal count
        out: list[ast.stmt] = []
        for stmt in body:
            if isinstance(stmt, ast.With | ast.AsyncWith):
                stmt.body = rewrite(stmt.body)
            out.append(stmt)
            if _site(stmt, lines) is not None:
                out.append(stamp())
                count += 1
        return out

    fn.body = [stamp(), *rewrite(fn.body)]
    fn.decorator_list = []
    module = ast.Module(body=[fn], type_ignores=[])
    return ast.unparse(ast.fix_missing_locations(module)), count


def _call_function(tree: ast.Module) -> ast.FunctionDef:
    """The wrapper's ``call``: a method of its ``Runner`` class, or (older torch) a function of the module."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            return node
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "call":
                    return item
    raise CaptureError("Inductor's wrapper code has no call function: this torch's wrapper is not one fxprof reads")


def _statements(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    for stmt in body:
        if isinstance(stmt, ast.With | ast.AsyncWith):
            yield from _statements(stmt.body)
        else:
            yield stmt


def _site(stmt: ast.stmt, lines: Sequence[str]) -> KernelSite | None:
    """The kernel ``stmt`` calls, or None where it calls none (an allocation, a view, a check, ``del``)."""
    value: ast.expr | None = None
    if isinstance(stmt, ast.Expr) or (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        value = stmt.value
    if not isinstance(value, ast.Call):
        return None
    callee = _callee(value.func)
    if not callee or callee.startswith("args.") or _device_call(callee) or any(map(_bookkeeping, callee.split("."))):
        return None
    handle = ""
    k = stmt.lineno - 2  # the comment lines just above the call
    while k >= 0 and lines[k].lstrip().startswith("#"):
        found = _HANDLE.search(lines[k])
        if found:
            handle = found[1]
            break
        k -= 1
    return KernelSite(stmt.lineno, callee, handle)


def _callee(func: ast.expr) -> str:
    """``cpp_fused_gelu_0`` for ``cpp_fused_gelu_0(...)`` and ``triton_poi_fused_0.run(...)``;
    ``extern_kernels.addmm`` and ``torch.ops.mkldnn._linear_pointwise.default`` as written."""
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return ""
    parts.append(func.id)
    if len(parts) == 2 and parts[0] == "run":  # a Triton kernel's launch
        return func.id
    return ".".join(reversed(parts))


def kernel_kind(callee: str) -> str:
    """What a kernel computes, without the number Inductor gives it: ``cpp_fused_gelu`` for ``cpp_fused_gelu_0``;
    ``mkldnn._linear_pointwise.default`` for ``torch.ops.mkldnn._linear_pointwise.default``."""
    if "." in callee:
        return callee.removeprefix("torch.ops.")
    return _NUMBERED.sub("", callee)
