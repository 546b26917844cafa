"""What a computation fingerprint reads of values and opaque code (``measure.fingerprint``), as canonical text.

Owns ``Reader``: a tensor as its facts and the properties of its values that change an operator's speed (the share
of zeros, subnormal and non-finite values, in steps of ``SHARE_STEP``; the values themselves where asked); a
constant as itself; a function, class or custom operator that the graphs call opaquely by its code, with what that
code reads from outside it (closed-over values, defaults, the module globals it names), up to ``CODE_LIMIT``
objects; a leaf module by its class, attributes, tensors and submodules. What it cannot read it lists
(``Reader.unreadable``), never guessing it unchanged.

Must not import pytest.
"""

from __future__ import annotations

import hashlib
import inspect
import types
from collections.abc import Mapping
from functools import cache
from importlib import metadata
from typing import Any

import torch
import torch.fx

from pytest_fxprof.records.fingerprint import digest

SHARE_STEP = 0.05
"""The step in which a tensor's share of zeros, subnormal and non-finite values is read: a share that moves less
changes no operator's speed measurably, and random weights drawn again keep theirs."""


_OWN = ("torch", "builtins", "math", "operator", "_operator", "functools")
"""Modules whose functions and classes are known by their name: their code is the version's."""


class Reader:
    """Reads tensors, constants and opaque code as canonical text, noting what it cannot read."""

    def __init__(self) -> None:
        self.opaque: dict[str, str] = {}
        """Each opaque function, class or operator the graphs call, by name: its source's digest or version."""
        self.unreadable: list[str] = []

    def tensor(self, t: torch.Tensor, *, values: bool = False) -> str:
        """A tensor's facts and the properties of its values that change speed (its values, where ``values``)."""
        try:
            facts = f"{t.dtype}{list(t.shape)} {t.device} {t.layout}"
            if t.layout is not torch.strided:
                return facts + (f" {digest(str(t.detach().cpu()))}" if values else "")
            facts += f" strides{list(t.stride())} offset {t.storage_offset()}"
            if t.device.type == "meta" or t.numel() == 0:
                return facts
            d = t.detach()
            props = [f"zeros {_share(d == 0, some=False)}"]
            if d.is_floating_point() or d.is_complex():
                real = d.abs() if d.is_complex() else d
                tiny = torch.finfo(d.dtype).tiny if d.is_floating_point() else torch.finfo(real.dtype).tiny
                finite = torch.isfinite(real)
                props.append(f"non-finite {_share(~finite)}")
                props.append(f"subnormal {_share(finite & (real.abs() < tiny) & (real != 0), some=False)}")
            if values:
                raw = d.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                props.append("values " + hashlib.blake2b(raw, digest_size=12).hexdigest())
            return facts + " " + ", ".join(props)
        except Exception as exc:  # noqa: BLE001 - a tensor subclass or a device that cannot be read: said
            self.unreadable.append(f"a tensor ({type(t).__name__}: {type(exc).__name__})")
            return "?"

    def constant(self, value: Any, refs: Mapping[int, str]) -> str:
        """A graph argument as text: a node as what ``refs`` knows it by, a constant as itself."""
        if isinstance(value, torch.fx.Node):
            return refs.get(id(value), "outside")
        if isinstance(value, bool | int | float | complex | str | type(None)) or value is Ellipsis:
            return repr(value)
        if isinstance(value, list | tuple):
            inner = ", ".join(self.constant(v, refs) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner})"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k!r}: {self.constant(v, refs)}" for k, v in sorted(value.items(), key=str)) + "}"
        if isinstance(value, set | frozenset):
            return "{" + ", ".join(sorted(self.constant(v, refs) for v in value)) + "}"
        if isinstance(value, slice):
            return f"slice({self.constant(value.start, refs)}, {self.constant(value.stop, refs)}, " + (
                f"{self.constant(value.step, refs)})"
            )
        if isinstance(value, torch.dtype | torch.device | torch.layout | torch.memory_format):
            return str(value)
        if isinstance(value, torch.Size):
            return str(list(value))
        if isinstance(value, torch.Tensor):
            return self.tensor(value, values=True)
        if callable(value):
            return self.function(value)
        if type(value).__module__.split(".")[0] == "torch":  # torch's own plain records (a SymInt's hint, ...)
            return f"{type(value).__qualname__}({value})"
        self.unreadable.append(f"a constant of type {type(value).__qualname__}")
        return "?"

    def function(self, fn: Any) -> str:
        """A called function or operator by name, its code noted in ``opaque`` where it is not torch's own."""
        if isinstance(fn, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
            name = str(fn)
            space = str(getattr(fn, "namespace", "") or name.removeprefix("torch.ops.").split(".", maxsplit=1)[0])
            if space not in ("aten", "prims", "quantized", "_quantized", "profiler", "inductor"):
                self.opaque[f"operator {name}"] = self.custom_op(name, space)
            return name
        name = f"{getattr(fn, '__module__', None) or ''}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"
        if _own(fn):
            return name
        self.opaque[f"function {name}"] = self.source(fn, name)
        return name

    def custom_op(self, name: str, space: str) -> str:
        """A custom operator's implementation: a Python one's code (``torch.library.custom_op``: each of its
        functions as ``source`` reads it), else the version of the library its namespace names."""
        qualname = "::".join(name.removeprefix("torch.ops.").split(".")[:2])
        from torch._library.custom_ops import OPDEFS

        opdef = OPDEFS.get(qualname)
        if opdef is not None:
            fns = [opdef._init_fn, *opdef._backend_fns.values()]
            try:
                return digest(*(text for f in fns for text in self._code(f, set())))
            except (OSError, TypeError):
                pass
        found = version_of(space)
        if not found:
            self.unreadable.append(f"the implementation of the operator {name}")
            return "?"
        return found

    def source(self, obj: Any, name: str) -> str:
        """The digest of ``obj``'s code: its source (a class's with its bases' outside torch), and what that code
        reads that is not in it: closed-over values, defaults, and the module globals it names (a plain value as
        itself, a function or class outside torch by its own code, in turn). Where the source cannot be read, the
        version of the library ``obj`` comes from."""
        try:
            return digest(*self._code(obj, set()))
        except (OSError, TypeError):
            return _library(obj, name, self.unreadable)

    def _code(self, obj: Any, seen: set[int]) -> list[str]:
        target = inspect.unwrap(obj) if callable(obj) and not isinstance(obj, type) else obj
        if id(target) in seen:
            return []
        seen.add(id(target))
        if len(seen) > CODE_LIMIT:
            self.unreadable.append(
                f"the code {getattr(target, '__qualname__', '?')} reads: more than {CODE_LIMIT} objects"
            )
            return []
        if isinstance(target, type):
            classes = [c for c in target.__mro__ if not _own(c) and c is not object]
            texts = [inspect.getsource(c) for c in classes]
            functions = [f for c in classes for v in vars(c).values() if (f := _function_of(v)) is not None]
        else:
            texts = [inspect.getsource(target)]
            functions = [target] if isinstance(target, types.FunctionType) else []
        for fn in functions:
            cells = zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False)
            texts += [f"{name}={_plain(cell.cell_contents)}" for name, cell in cells if _filled(cell)]
            texts += [f"default {_plain(d)}" for d in fn.__defaults__ or ()]
            for name in sorted(_names(fn.__code__)):
                if name not in fn.__globals__:
                    continue
                value = fn.__globals__[name]
                if isinstance(value, torch.Tensor):
                    texts.append(f"{name}={self.tensor(value)}")
                elif isinstance(value, types.ModuleType) or _own(value):
                    continue
                elif isinstance(value, types.FunctionType | type):
                    try:
                        texts += [f"{name}:", *self._code(value, seen)]
                    except (OSError, TypeError):
                        texts.append(f"{name}: {_library(value, name, self.unreadable)}")
                else:
                    texts.append(f"{name}={_plain(value)}")
        return texts

    def module(self, m: torch.nn.Module, path: str = "") -> str:
        """A module run whole (a leaf): its class, attributes, tensors and submodules, and, outside torch, its code."""
        cls = type(m)
        name = f"{cls.__module__}.{cls.__qualname__}"
        code = ""
        if not _own(cls):
            code = self.opaque[f"class {name}"] = self.source(cls, name)
        skip = {"_parameters", "_buffers", "_modules", "training"}
        # what runs around its forward (``hooks_of``), then its other attributes
        attrs = [f"{key}: [{', '.join(self.function(h) for h in hooks)}]" for key, hooks in hooks_of(vars(m))]
        for key, value in sorted(vars(m).items()):
            if key in skip or "_hooks" in key:
                continue
            if isinstance(value, torch.Tensor):
                attrs.append(f"{key}: {self.tensor(value)}")
            else:
                attrs.append(f"{key}: {self.constant(value, {})}")
        tensors = [f"{k}: {self.tensor(t)}" for k, t in m.named_parameters(recurse=False)]
        tensors += [f"{k}: {self.tensor(t)}" for k, t in m.named_buffers(recurse=False)]
        children = [f"({self.module(c)})" for _, c in m.named_children()]
        return f"{name} {code} training={m.training} {', '.join(a for a in attrs if a)} {tensors} {children}"


CODE_LIMIT = 2000
"""The most functions and classes the code of one opaque object may reach before it counts as unreadable."""


def _function_of(value: Any) -> types.FunctionType | None:
    """The function a class attribute runs: a method, a static or class method, a property's getter."""
    if isinstance(value, staticmethod | classmethod):
        value = value.__func__
    elif isinstance(value, property):
        value = value.fget
    return value if isinstance(value, types.FunctionType) else None


def _names(code: types.CodeType) -> set[str]:
    """The global names a code object and the code nested in it read."""
    out = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _names(const)
    return out


def hooks_of(space: Mapping[str, Any]) -> list[tuple[str, list[Any]]]:
    """The forward and backward hooks a module's (or torch's module-wide) attributes hold, by attribute."""
    out = []
    for key, value in sorted(space.items()):
        if "_hooks" in key and ("forward" in key or "backward" in key) and isinstance(value, Mapping) and value:
            hooks = [h for h in value.values() if callable(h)]
            if hooks:
                out.append((key, hooks))
    return out


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _plain(value: Any) -> str:
    """A closed-over value or a default: a plain value as itself, anything else by its type."""
    if isinstance(value, bool | int | float | complex | str | bytes | type(None)):
        return repr(value)
    if isinstance(value, tuple) and all(isinstance(v, bool | int | float | str | type(None)) for v in value):
        return repr(value)
    return type(value).__qualname__


def _share(mask: torch.Tensor, *, some: bool = True) -> str:
    """The share of true values of ``mask``, in steps of ``SHARE_STEP``; where it rounds to none but is not,
    "some" if ``some`` (non-finite values: a random draw makes none; an exact zero it may)."""
    share = mask.float().mean().item()
    stepped = round(share / SHARE_STEP) * SHARE_STEP
    return f"{stepped:.2f}" if stepped or not share or not some else "some"


def _own(obj: Any) -> bool:
    top = (getattr(obj, "__module__", None) or "").split(".")[0]
    return top in _OWN or (inspect.isbuiltin(obj) and not top)


@cache
def _versions() -> Mapping[str, list[str]]:
    return metadata.packages_distributions()


def version_of(top: str) -> str:
    names = _versions().get(top, [])
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return ", ".join(sorted(found))


def _library(obj: Any, name: str, unreadable: list[str]) -> str:
    """The version of the installed library that ``obj`` (whose source cannot be read) comes from."""
    top = (getattr(obj, "__module__", None) or name).split(".")[0]
    found = version_of(top)
    if not found:
        unreadable.append(f"the code of {name}")
        return "?"
    return found
